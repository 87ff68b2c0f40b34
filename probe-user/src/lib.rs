//! probetop: `top` for user-space probes.
//!
//! The pipeline, one module per stage: [`spec`] (what the user asked for) ->
//! [`resolve`] (ELF symbols, USDT notes, /proc maps) -> [`attach`] (eBPF programs on
//! uprobes) -> [`stream`] (the collector: ring buffer and kernel counters) ->
//! [`aggregate`] (HDR histograms) -> [`price`] (what a hit costs the target) ->
//! [`present`] (TUI, summary, exports). The leaves ([`delivery`], [`histogram`],
//! [`record`], [`target`], [`insn`], ...) sit below it; [`session`] runs the stages in
//! order and [`calibrate`] measures this machine's costs; the `probetop` binary is the
//! command-line edge around them. docs/architecture.md has the import order that
//! `cargo xtask lint` checks.
mod aggregate;
mod attach;
mod calibrate;
mod cli;
mod delivery;
mod error_line;
mod histogram;
mod insitu;
mod insn;
mod manual;
mod present;
mod preset;
mod price;
mod privileges;
mod record;
mod resolve;
mod session;
mod spec;
mod stats;
mod stream;
mod sys;
mod target;

use error_line::error_line;
pub use run::main;
mod run;

/// A mistake in how probetop was invoked (exit status 2, like clap's own errors).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub(crate) String);

/// A run that lacks what it needs (which process, which probes): its line, then the
/// usage (exit status 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MissingInput(pub String);

/// What the integration tests, the fuzz targets and the lab reach inside probetop, at the paths
/// they have inside the crate: not an API (nothing here is promised to stay), kept to
/// what they use, so that everything else is crate-private and the compiler sees what
/// is dead.
#[doc(hidden)]
pub mod inner {
    pub mod aggregate {
        pub use crate::aggregate::BYTES_PER_PROBE;
    }
    pub mod attach {
        pub use crate::attach::Attachment;
        pub use crate::attach::options::{AttachPath, AttachRequest, LoadOptions};
        pub mod args {
            pub use crate::attach::args::args_config;
        }
    }
    pub mod calibrate {
        /// The calibration's schema, which the lab reads `calibrate --json` with.
        pub mod table {
            pub use crate::calibrate::table::{Calibration, Case, Machine};
        }
    }
    pub mod delivery {
        pub use crate::delivery::DeliveryMode;
    }
    pub mod insn {
        pub mod classes {
            pub use crate::insn::classes::CostClass;
        }
    }
    /// The export's schema, which the benchmark lab reads runs back with.
    pub mod present {
        pub mod export {
            pub use crate::present::export::json;
        }
    }
    pub mod preset {
        pub use crate::preset::text;
    }
    /// The parsers the fuzz targets feed.
    pub mod resolve {
        pub use crate::resolve::{
            debuginfo, elf, glob, suggest, symbols, unwind, usdt, usdt_args, usdt_probe_point,
        };
        /// `probetop list --json`'s schema, which the lab reads listings with.
        pub mod list {
            pub use crate::resolve::list::{ListedKind, Listing};
        }
    }
    pub mod spec {
        pub use crate::spec::{ProbeKind, ProbeSpec, is_latency, parse_latency};
    }
    pub mod sys {
        pub mod files {
            pub use crate::sys::files::mkfifo;
        }
        pub mod maps {
            pub use crate::sys::maps::MapEntry;
        }
    }
}
