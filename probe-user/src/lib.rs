//! probetop: `top` for user-space probes.
//!
//! The pipeline, one module per stage: [`spec`] (what the user asked for) ->
//! [`resolve`] (ELF symbols, USDT notes, /proc maps) -> [`attach`] (eBPF programs on
//! uprobes) -> [`stream`] (ring buffer) -> [`aggregate`] (HDR histograms) -> [`present`]
//! (TUI, summary, exports). [`session`] runs them in order; the `probetop` binary is
//! the command-line edge around it.
pub mod aggregate;
pub mod attach;
pub mod cli;
pub mod cost;
mod error_line;
pub mod manual;
pub mod present;
pub mod preset;
pub mod privileges;
pub mod resolve;
pub mod session;
pub mod spec;
pub mod stream;
pub mod sys;
pub mod target;

pub use error_line::{error_line, is_broken_pipe, write_stdout};

/// A mistake in how probetop was invoked (exit status 2, like clap's own errors).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
