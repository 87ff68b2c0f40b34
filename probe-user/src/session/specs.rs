//! The run's probe specs: from `-e`, a spec file (`-f`) and presets, parsed; bounded so
//! that hostile input (`-f /dev/zero`, a spec of 100,000 characters) is one line, not a
//! process that grows without limit or an error that echoes it whole.

use std::path::Path;

use anyhow::{Context as _, bail};

use crate::cli::RunArgs;
use crate::spec::{self, ProbeSpec};
use crate::{UsageError, preset};

/// A spec file's size at most: 1 MiB is tens of thousands of specs, far more than
/// probetop attaches at once.
const MAX_SPEC_FILE_BYTES: u64 = 1 << 20;

/// A spec's length at most: the longest C++ and Rust symbols seen are a few thousand
/// bytes.
const MAX_SPEC_BYTES: usize = 8192;

/// Specs from -e, -f and --preset, parsed; a malformed one is a usage error with a caret.
pub(super) fn collect(args: &RunArgs) -> anyhow::Result<Vec<ProbeSpec>> {
    let mut texts: Vec<String> = args.probes.clone();
    if let Some(file) = &args.spec_file {
        texts.extend(spec_lines(&read_spec_file(file)?));
    }
    let mut preset_lines = 0;
    for name in &args.presets {
        let text = preset::text(name).map_err(|e| UsageError(format!("--preset: {e}")))?;
        let before = texts.len();
        texts.extend(spec_lines(text));
        preset_lines += texts.len() - before;
    }
    // With one process and no spec, the run watches the probes other tools put on it.
    let one_process = args.pids.len() == 1 && !args.follow_forks && args.cgroup.is_none();
    if texts.is_empty() && one_process {
        return Ok(Vec::new());
    }
    if texts.is_empty() {
        bail!(crate::MissingInput(
            "no probes: give at least one -e SPEC (for example -e uprobe:my_func) or a --preset"
                .into()
        ));
    }
    if let Some(long) = texts.iter().find(|t| t.len() > MAX_SPEC_BYTES) {
        bail!(UsageError(format!(
            "a probe spec of {} bytes ({}): at most {MAX_SPEC_BYTES}",
            long.len(),
            spec::shorten(long, 40)
        )));
    }
    let bad = |e| anyhow::Error::from(UsageError(format!("bad probe spec: {e}")));
    // --key keys the specs of -e and -f that have no key of their own, not presets'.
    // (Presets' lines come last.)
    let own = texts.len() - preset_lines;
    let mut specs = Vec::with_capacity(texts.len());
    for (at, text) in texts.iter().enumerate() {
        // A latency spec is two probes, paired when their hits are aggregated.
        let mut parsed = if spec::is_latency(text) {
            spec::parse_latency(text).map_err(bad)?.to_vec()
        } else {
            vec![ProbeSpec::parse(text).map_err(bad)?]
        };
        if at < own {
            for spec in &mut parsed {
                spec.key = spec.key.or(args.key);
            }
        }
        specs.extend(parsed);
    }
    Ok(specs)
}

/// A spec file's text: a regular file or a pipe (`-f <(...)`, `-f /dev/stdin`), at most
/// [`MAX_SPEC_FILE_BYTES`]; a device, a directory or a socket is refused.
fn read_spec_file(path: &Path) -> anyhow::Result<String> {
    use crate::sys::files::{Accept, BoundedReadError, read_bounded};
    let shown = path.display();
    let accept = Accept {
        pipes: true,
        links: true,
    };
    let bytes = match read_bounded(path, MAX_SPEC_FILE_BYTES, accept) {
        Ok(bytes) => bytes,
        Err(BoundedReadError::Io(e)) => {
            return Err(e).with_context(|| format!("cannot read spec file {shown}"));
        }
        Err(BoundedReadError::NotRegular(what)) => bail!(UsageError(format!(
            "-f {shown}: {what}; give a file of probe specs, one a line (or a pipe)"
        ))),
        Err(BoundedReadError::TooBig { .. }) => bail!(UsageError(format!(
            "-f {shown}: more than {} MiB of probe specs; give at most {} MiB (globs such as uprobe:libc:str* match many functions in one line)",
            MAX_SPEC_FILE_BYTES >> 20,
            MAX_SPEC_FILE_BYTES >> 20
        ))),
    };
    String::from_utf8(bytes).map_err(|_| UsageError(format!("-f {shown}: not UTF-8 text")).into())
}

/// Lines of a spec file without comments and blanks.
fn spec_lines(content: &str) -> impl Iterator<Item = String> + '_ {
    content
        .lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|line| !line.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn spec_file_lines() {
        let lines: Vec<String> =
            spec_lines("# probes\nuprobe:a\n\n  uretprobe:b  # return\n#x\n").collect();
        assert_eq!(lines, ["uprobe:a", "uretprobe:b"]);
    }

    #[test]
    fn devices_and_oversized_files_are_refused() {
        let e = read_spec_file(Path::new("/dev/zero")).expect_err("a device");
        assert_eq!(
            e.to_string(),
            "-f /dev/zero: a device; give a file of probe specs, one a line (or a pipe)"
        );
        let big = std::env::temp_dir().join(format!("probetop-specs-{}", std::process::id()));
        fs::write(&big, "#".repeat(MAX_SPEC_FILE_BYTES as usize + 1)).expect("write");
        let e = read_spec_file(&big).expect_err("too big");
        assert!(e.to_string().contains("more than 1 MiB"), "{e}");
        fs::write(&big, "uprobe:a\n").expect("write");
        assert_eq!(read_spec_file(&big).expect("small"), "uprobe:a\n");
        let _ = fs::remove_file(&big);
    }
}
