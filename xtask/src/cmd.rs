//! Running commands: echoed, checked, their output captured; quoting for the echo; whether
//! we are root.

use super::*;

pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Echoes and runs a command with inherited stdio; a non-zero exit is an error.
pub fn run(cmd: &mut Command) -> Result<()> {
    echo(cmd);
    let status = cmd
        .status()
        .with_context(|| format!("running {}", show(cmd)))?;
    ensure!(status.success(), "`{}` failed: {status}", show(cmd));
    Ok(())
}

/// Runs a command for its output; a non-zero exit is an error that carries its stderr.
/// Not echoed: callers that show what they run echo it first.
pub fn output_ok(cmd: &mut Command) -> Result<std::process::Output> {
    let out = cmd
        .output()
        .with_context(|| format!("running {}", show(cmd)))?;
    ensure!(
        out.status.success(),
        "`{}` failed ({}): {}",
        show(cmd),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(out)
}

pub fn echo(cmd: &Command) {
    eprintln!("+ {}", show(cmd));
}

/// A command as a shell line: `(cd DIR &&) VAR=value prog args`, quoted where needed.
pub fn show(cmd: &Command) -> String {
    let mut line = String::new();
    if let Some(dir) = cmd.get_current_dir() {
        let _ = write!(line, "cd {} && ", quote(dir.as_os_str()));
    }
    let removed: Vec<_> = cmd.get_envs().filter(|(_, v)| v.is_none()).collect();
    if !removed.is_empty() {
        line.push_str("env");
        for (key, _) in removed {
            let _ = write!(line, " -u {}", key.to_string_lossy());
        }
        line.push(' ');
    }
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            let _ = write!(line, "{}={} ", key.to_string_lossy(), quote(value));
        }
    }
    line.push_str(&quote(cmd.get_program()));
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    line
}

pub fn quote(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:+,@%".contains(&b));
    if plain {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Effective uid 0, read from /proc so xtask needs no libc bindings.
pub fn is_root() -> Result<bool> {
    let status = fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .context("no effective uid in /proc/self/status")?;
    Ok(euid == "0")
}
