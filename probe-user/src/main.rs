//! probetop: `top` for user-space probes.
//!
//! The pipeline, one module per stage: [`spec`] (what the user asked for) ->
//! [`resolve`] (ELF symbols, USDT notes, /proc maps) -> [`attach`] (eBPF programs on
//! uprobes) -> [`stream`] (ring buffer) -> [`aggregate`] (HDR histograms) -> [`present`]
//! (TUI, summary, exports).
mod aggregate;
mod attach;
mod present;
mod resolve;
mod spec;
mod stream;
mod target;

fn main() {}
