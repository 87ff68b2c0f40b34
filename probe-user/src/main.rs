//! The `probetop` command: parses the command line, runs, and turns errors into one
//! line on stderr and an exit status.

use std::process::ExitCode;

use clap::Parser as _;
use probe_user::{UsageError, cli, session};

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    // The calibration's child measures its own CPU time: no runtime threads beside it.
    if let Some(cli::Command::CalibrateWorkload) = cli.command {
        return match probe_user::cost::workload::child_main() {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("probetop: calibration workload: {error:#}");
                ExitCode::FAILURE
            }
        };
    }
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
        Some(cli::Command::List(args)) => session::list(args),
        Some(cli::Command::Calibrate(args)) => session::calibrate(args),
        Some(cli::Command::CalibrateWorkload) => Ok(()),
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
