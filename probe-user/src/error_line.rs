//! Errors as the one line probetop prints for them.

/// Set to 1 to see the kernel verifier's log of a refused program.
const VERBOSE_ENV: &str = "PROBETOP_VERBOSE";

/// Whether `error` is a write to a closed pipe (`probetop list | head`): the reader has
/// what it wanted, so probetop exits quietly rather than report it.
pub(crate) fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<crate::manual::ManualError>()
                .is_some_and(crate::manual::ManualError::is_broken_pipe)
    })
}

/// Writes `text` to stdout and flushes it. Not print!: it panics when the reader has
/// gone (`| head`); this returns the error, which [`is_broken_pipe`] recognises.
pub(crate) fn write_stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    // Names in it come from binaries: nothing in them may reach the terminal as a
    // control sequence.
    out.write_all(crate::sys::stderr::terminal_safe(text).as_bytes())?;
    out.flush()
}

/// An error chain as one line (`{:#}`), with each cause once and without the verifier's
/// logs unless [`VERBOSE_ENV`] is set.
pub(crate) fn error_line(error: &anyhow::Error) -> String {
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
/// [`VERBOSE_ENV`], and a cause the line already quotes left out: aya's and some of
/// probetop's errors print their source in their own message, and `{:#}` would print
/// it again (a verifier log twice, `Unknown error 524 (os error 524)` twice), also when
/// a cause in between does not quote it.
fn join_causes(causes: &[String], hidden: &[String]) -> String {
    let hint = format!("(not shown: {VERBOSE_ENV}=1 prints it)");
    let mut line = String::new();
    for cause in causes {
        let mut cause = cause.clone();
        for log in hidden.iter().filter(|log| !log.trim().is_empty()) {
            cause = cause.replace(log.as_str(), &hint);
        }
        if line.contains(cause.as_str()) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
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

    #[test]
    fn a_cause_quoted_earlier_in_the_line_is_printed_once() {
        let errno = "Unknown error 524 (os error 524)";
        let causes = strings(&[
            "attaching uprobe:libc:*",
            &format!("cannot attach uprobe to /lib/libc.so.6 at offset 0x86580: {errno}"),
            "the uprobe_multi link",
            errno,
        ]);
        let line = join_causes(&causes, &[]);
        assert_eq!(line.matches(errno).count(), 1, "{line}");
    }

    /// probetop's own errors that quote an io::Error do not also return it as their
    /// source, so even a plain `{:#}` (anyhow's chain) prints the errno once.
    #[test]
    fn no_error_prints_its_io_error_twice() {
        let errno = || std::io::Error::from_raw_os_error(524);
        let text = errno().to_string();
        let errors = [
            anyhow::Error::new(crate::present::export::ExportError::Write {
                path: "/tmp/r.json".into(),
                error: errno(),
            }),
            anyhow::Error::new(crate::resolve::ResolveError::Read {
                path: "/lib/libc.so.6".into(),
                error: errno(),
            }),
            anyhow::Error::new(crate::target::TargetError::Unreadable {
                pid: 1,
                what: "exe",
                error: errno(),
                advice: "",
            }),
            anyhow::Error::new(crate::privileges::PrivilegeError::Unreadable(errno())),
        ];
        for error in errors {
            let error = error.context("context");
            let chain = format!("{error:#}");
            assert_eq!(chain.matches(&text).count(), 1, "{chain}");
            let line = error_line(&error);
            assert_eq!(line.matches(&text).count(), 1, "{line}");
        }
    }
}
