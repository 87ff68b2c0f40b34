//! The `probetop` command: parses the command line, runs, and turns errors into one
//! line on stderr and an exit status.
//!
//! The kernel verifier's log of a refused program (hundreds of lines) is left out of
//! that line unless `PROBETOP_VERBOSE=1` is set.

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
            // Not eprintln!: with the terminal gone it would panic, and abort with 134.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "probetop: {}", error_line(&error));
            if error.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Set to 1 to see the kernel verifier's log of a refused program.
const VERBOSE_ENV: &str = "PROBETOP_VERBOSE";

/// An error chain as one line (`{:#}`), with each cause once and without the verifier's
/// logs unless [`VERBOSE_ENV`] is set.
fn error_line(error: &anyhow::Error) -> String {
    let verbose = std::env::var(VERBOSE_ENV).is_ok_and(|v| v == "1");
    let logs: Vec<String> = if verbose {
        Vec::new()
    } else {
        error
            .chain()
            .filter_map(|cause| match cause.downcast_ref() {
                Some(aya::programs::ProgramError::LoadError { verifier_log, .. }) => {
                    Some(verifier_log.to_string())
                }
                _ => None,
            })
            .collect()
    };
    let causes: Vec<String> = error.chain().map(ToString::to_string).collect();
    join_causes(&causes, &logs)
}

/// `causes` joined by ": ", each of the `hidden` texts in them replaced by a pointer to
/// [`VERBOSE_ENV`], and a cause its predecessor already quotes left out: aya's and
/// probetop's errors print their source in their own message, and `{:#}` would print
/// it again (a verifier log twice).
fn join_causes(causes: &[String], hidden: &[String]) -> String {
    let hint = format!("(not shown: {VERBOSE_ENV}=1 prints it)");
    let mut line = String::new();
    let mut previous = String::new();
    for cause in causes {
        let mut cause = cause.clone();
        for log in hidden.iter().filter(|log| !log.trim().is_empty()) {
            cause = cause.replace(log.as_str(), &hint);
        }
        if previous.contains(cause.as_str()) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
        previous = cause;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| (*t).to_owned()).collect()
    }

    #[test]
    fn a_cause_quoted_by_its_predecessor_is_printed_once() {
        let log = "0: (85) call unknown#174\ninvalid func unknown#174\n";
        let load = format!(
            "the BPF_PROG_LOAD syscall returned Invalid argument (os error 22). Verifier output: {log}"
        );
        let causes = strings(&[
            &format!("the eBPF program p was refused by the kernel: {load}"),
            &load,
            "Invalid argument (os error 22)",
        ]);
        assert_eq!(
            join_causes(&causes, &strings(&[log])),
            "the eBPF program p was refused by the kernel: the BPF_PROG_LOAD syscall returned \
             Invalid argument (os error 22). Verifier output: (not shown: PROBETOP_VERBOSE=1 prints it)"
        );
        // Verbose: the log, once.
        let line = join_causes(&causes, &[]);
        assert_eq!(line.matches("invalid func").count(), 1, "{line}");
    }

    #[test]
    fn distinct_causes_are_all_printed() {
        let causes = strings(&[
            "attaching uprobe:f",
            "cannot attach uprobe to /bin/x",
            "EBADF",
        ]);
        assert_eq!(
            join_causes(&causes, &[]),
            "attaching uprobe:f: cannot attach uprobe to /bin/x: EBADF"
        );
    }
}
