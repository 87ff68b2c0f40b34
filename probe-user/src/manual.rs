//! probetop's man pages and shell completions, generated from the command line's own
//! definition ([`crate::cli::Cli`]) by clap's crates, so they cannot drift from it.
//! `cargo xtask dist` ships them beside the binary; `probetop completions SHELL` and
//! `probetop man [DIR]` (hidden subcommands) print them on any host.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::CommandFactory as _;
use clap_complete::{Generator as _, Shell};

/// The binary's name, as completions register it and man pages title it.
const BIN: &str = "probetop";

#[derive(Debug, thiserror::Error)]
pub(crate) enum ManualError {
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("writing to stdout: {0}")]
    Stdout(io::Error),
}

impl ManualError {
    /// A write to stdout whose reader has gone (`probetop man | head`).
    pub(crate) fn is_broken_pipe(&self) -> bool {
        matches!(self, Self::Stdout(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// The completion script for `shell` on `out`.
pub(crate) fn completions(shell: Shell, out: &mut dyn Write) -> Result<(), ManualError> {
    let mut cmd = without_hidden_subcommands(crate::cli::Cli::command()).bin_name(BIN);
    cmd.build();
    // try_generate: `generate` panics when the write fails (a closed pipe).
    shell
        .try_generate(&cmd, out)
        .and_then(|()| out.flush())
        .map_err(ManualError::Stdout)
}

/// `cmd` without its hidden subcommand (`__calibrate-workload`) and the two that print
/// these scripts and pages (`completions`, `man`),
/// which clap_complete would otherwise offer. clap cannot remove a subcommand, so the
/// command is rebuilt from its parts; what completion does not read is left out.
fn without_hidden_subcommands(cmd: clap::Command) -> clap::Command {
    let mut bare = clap::Command::new(BIN)
        .args(cmd.get_arguments().cloned())
        .groups(cmd.get_groups().cloned())
        .subcommands(
            cmd.get_subcommands()
                .filter(|s| !s.is_hide_set() && !matches!(s.get_name(), "man" | "completions"))
                .cloned(),
        );
    if let Some(about) = cmd.get_about() {
        bare = bare.about(about.clone());
    }
    // Only so that -V/--version is completed (clap's Str takes no owned String).
    if cmd.get_version().is_some() {
        bare = bare.version(env!("CARGO_PKG_VERSION"));
    }
    bare
}

/// `probetop.1` on stdout.
pub(crate) fn print_main_page() -> Result<(), ManualError> {
    let mut out = io::stdout().lock();
    render(commands().swap_remove(0), true, &mut out)
        .and_then(|()| out.flush())
        .map_err(ManualError::Stdout)
}

/// `probetop.1` and one page per visible subcommand (`probetop-list.1`, ...) in `dir`,
/// which must exist; returns the files written.
pub(crate) fn write_pages(dir: &Path) -> Result<Vec<PathBuf>, ManualError> {
    let mut written = Vec::new();
    for (i, cmd) in commands().into_iter().enumerate() {
        let man = clap_mangen::Man::new(cmd.clone());
        let path = dir.join(man.get_filename());
        let write = |path: &Path| -> io::Result<()> {
            let mut buf = Vec::new();
            render(cmd, i == 0, &mut buf)?;
            std::fs::write(path, buf)
        };
        write(&path).map_err(|source| ManualError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}

/// probetop's Command, then each visible subcommand's. Built, so each subcommand
/// carries its display name (`probetop-list`), which titles its page.
fn commands() -> Vec<clap::Command> {
    // `probetop help` needs no page of its own.
    let mut root = crate::cli::Cli::command().disable_help_subcommand(true);
    root.build();
    // `man` and `completions` print these pages and scripts: listed in the main page,
    // with no page of their own.
    let subs: Vec<clap::Command> = root
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && !matches!(s.get_name(), "man" | "completions"))
        .cloned()
        .collect();
    let mut all = vec![root];
    all.extend(subs);
    all
}

/// One page: clap_mangen's sections, with probetop's own (examples, requirements,
/// environment, exit status) after the options on the main page.
fn render(cmd: clap::Command, main: bool, out: &mut dyn Write) -> io::Result<()> {
    let subcommands = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let man = clap_mangen::Man::new(cmd);
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    if subcommands {
        man.render_subcommands_section(out)?;
    }
    if main {
        out.write_all(MAIN_EXTRA.as_bytes())?;
        man.render_version_section(out)?;
    }
    Ok(())
}

/// roff: examples, environment, exit status, files and the kernel needed.
const MAIN_EXTRA: &str = r#".SH EXAMPLES
Live view of two probes in a running process:
.PP
.RS
probetop \-\-pid 1234 \-e uprobe:work_unit \-e uretprobe:leaf_ret
.RE
.PP
Ten seconds without the terminal UI, the measurements written as JSON:
.PP
.RS
probetop \-\-pid 1234 \-e uprobe:work_unit \-\-duration 10 \-\-no\-tui \-\-export run.json
.RE
.PP
What can be probed in a process:
.PP
.RS
probetop list \-\-pid 1234 'dispatch*'
.RE
.SH REQUIREMENTS
Linux 5.15 or later with BPF and uprobes (CONFIG_BPF_SYSCALL, CONFIG_UPROBE_EVENTS),
run as root. The eBPF programs are inside the binary; nothing else is installed.
.SH ENVIRONMENT
.TP
.B PROBETOP_VERBOSE=1
print the kernel verifier's log when it refuses a program.
.TP
.B NO_COLOR
a TUI without colours.
.TP
.B XDG_CACHE_HOME
where
.B probetop calibrate
caches its measurements (probetop/ in it; default ~/.cache/probetop), and where debug
files from debuginfod are kept (probetop/debuginfod/).
.TP
.B DEBUGINFOD_URLS
debuginfod servers (space-separated) asked by build id for the debug file of a stripped
object that has none on this host, unless
.B \-\-offline
is given (DEBUGINFOD_MAXTIME seconds and DEBUGINFOD_MAXSIZE bytes cap a download).
.TP
.B SSL_CERT_FILE\fR, \fBSSL_CERT_DIR
the CAs https servers (debuginfod,
.BR \-\-otlp )
are checked against, instead of this host's CA bundle.
.SH EXIT STATUS
0 on success, 2 for a mistake in the command line, 1 for any other error; each error is
one line on standard error.
.B probetop diff
exits 1 only for a regression above
.BR \-\-fail\-above ,
and 2 for any error.
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_completes_the_options_and_subcommands() {
        // How each script names a long option: fish as `-l pid`.
        for (shell, long) in [
            (Shell::Bash, "--"),
            (Shell::Zsh, "--"),
            (Shell::Fish, "-l "),
        ] {
            let mut out = Vec::new();
            completions(shell, &mut out).expect("written");
            let text = String::from_utf8(out).expect("completions are UTF-8");
            for option in ["pid", "export", "mode", "no-tui"] {
                assert!(
                    text.contains(&format!("{long}{option}")),
                    "{shell}: no {option}"
                );
            }
            for word in ["list", "calibrate", "kernel"] {
                assert!(text.contains(word), "{shell}: no {word}");
            }
            for hidden in ["__calibrate-workload", "completions", "\"man\""] {
                assert!(!text.contains(hidden), "{shell} completes {hidden}");
            }
        }
    }

    #[test]
    fn pages_for_probetop_and_each_visible_subcommand() {
        let dir = std::env::temp_dir().join(format!("probetop-man-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let written = write_pages(&dir).expect("pages written");
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "probetop.1",
                "probetop-list.1",
                "probetop-calibrate.1",
                "probetop-diff.1"
            ]
        );
        let main = std::fs::read_to_string(&written[0]).expect("probetop.1");
        assert!(main.starts_with(".ie"), "not roff: {}", &main[..40]);
        for part in [
            ".TH probetop 1",
            "\\-\\-pid",
            ".SH EXAMPLES",
            "PROBETOP_VERBOSE",
        ] {
            assert!(main.contains(part), "probetop.1 lacks {part}");
        }
        let list = std::fs::read_to_string(&written[1]).expect("probetop-list.1");
        assert!(list.contains(".TH probetop-list 1"), "{list}");
        assert!(!list.contains(".SH EXAMPLES"));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
