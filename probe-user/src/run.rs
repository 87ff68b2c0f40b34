//! The `probetop` command: parses the command line, runs, and turns errors into one
//! line on stderr and an exit status.
//!
//! The line is [`error_line`]'s: each cause once, the kernel verifier's log of a refused
//! program (hundreds of lines) left out unless `PROBETOP_VERBOSE=1` is set.

use std::process::ExitCode;

use clap::Parser as _;

use crate::error_line::{error_line, is_broken_pipe};
use crate::{MissingInput, UsageError, cli, session, sys};

/// The `probetop` command, whole: the binary's `main` calls only this.
pub fn main() -> ExitCode {
    // Nothing asked: what probetop does and how to ask, not an error about one part.
    if std::env::args_os().len() == 1 {
        sys::stderr::say_text(&format!("{}\n", cli::USAGE));
        return ExitCode::from(2);
    }
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => match cli::refused_value_line(&error) {
            Some(line) => {
                sys::say(&format!("probetop: {line}"));
                return ExitCode::from(2);
            }
            None => error.exit(),
        },
    };
    // The calibration's child measures its own CPU time: no runtime threads beside it.
    if let Some(cli::Command::CalibrateWorkload) = cli.command {
        return match crate::calibrate::workload::child_main() {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                sys::say(&format!(
                    "probetop: calibration workload: {}",
                    error_line(&error)
                ));
                ExitCode::FAILURE
            }
        };
    }
    // Nor does comparing two files.
    if let Some(cli::Command::Diff(args)) = &cli.command {
        return session::diff(args);
    }
    // The generated documentation needs no runtime either.
    let generated = match &cli.command {
        Some(cli::Command::Completions { shell }) => Some(crate::manual::completions(
            *shell,
            &mut std::io::stdout().lock(),
        )),
        Some(cli::Command::Man { dir: Some(dir) }) => {
            Some(crate::manual::write_pages(dir).map(|_| ()))
        }
        Some(cli::Command::Man { dir: None }) => Some(crate::manual::print_main_page()),
        _ => None,
    };
    match generated {
        Some(Ok(())) => return ExitCode::SUCCESS,
        // The reader has what it wanted (`probetop completions bash | head`).
        Some(Err(error)) if error.is_broken_pipe() => return ExitCode::SUCCESS,
        Some(Err(error)) => {
            sys::say(&format!("probetop: {error}"));
            return ExitCode::FAILURE;
        }
        None => {}
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            sys::say(&format!("probetop: cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        None => runtime.block_on(session::run(cli.run)),
        Some(cli::Command::List(args)) => session::list(args),
        Some(cli::Command::Calibrate(args)) => session::calibrate(args),
        Some(
            cli::Command::CalibrateWorkload
            | cli::Command::Diff(_)
            | cli::Command::Completions { .. }
            | cli::Command::Man { .. },
        ) => Ok(()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `probetop list | head`: the reader has what it wanted; nothing to report.
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            // Not eprintln!: with the terminal gone it would panic, and abort with 134.
            sys::say(&format!("probetop: {}", error_line(&error)));
            if error.downcast_ref::<MissingInput>().is_some() {
                sys::stderr::say_text(&format!("{}\n", cli::USAGE));
                ExitCode::from(2)
            } else if error.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
