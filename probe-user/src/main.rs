//! probetop: `top` for user-space probes.
//!
//! The pipeline, one module per stage: [`spec`] (what the user asked for) ->
//! [`resolve`] (ELF symbols, USDT notes, /proc maps) -> [`attach`] (eBPF programs on
//! uprobes) -> [`stream`] (ring buffer) -> [`aggregate`] (HDR histograms) -> [`present`]
//! (TUI, summary, exports). [`session`] runs them in order.
mod aggregate;
mod attach;
mod cli;
mod present;
mod privileges;
mod resolve;
mod session;
mod spec;
mod stream;
mod target;

use std::process::ExitCode;

use clap::Parser as _;

/// A mistake in how probetop was invoked (exit status 2, like clap's own errors).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("probetop: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        None => runtime.block_on(session::run(cli.run)),
        Some(command) => match command {},
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("probetop: {error:#}");
            if error.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
