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
pub mod aggregate;
pub mod attach;
pub mod calibrate;
pub mod cli;
pub mod delivery;
mod error_line;
pub mod histogram;
pub mod insitu;
pub mod insn;
pub mod manual;
pub mod present;
pub mod preset;
pub mod price;
pub mod privileges;
pub mod record;
pub mod resolve;
pub mod session;
pub mod spec;
pub mod stats;
pub mod stream;
pub mod sys;
pub mod target;

pub use error_line::{error_line, is_broken_pipe, write_stdout};

/// A mistake in how probetop was invoked (exit status 2, like clap's own errors).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A run that lacks what it needs (which process, which probes): its line, then the
/// usage (exit status 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MissingInput(pub String);
