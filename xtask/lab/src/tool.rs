//! Tools beside the load: probetop or bpftrace started, waited for and stopped like a user
//! would (mysql-report, postgres-report, insitu-check, mysql-sysbench).

use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use std::{fs, thread};

use anyhow::{Context as _, Result, bail, ensure};

use crate::mysql::Stalled;
use crate::show;

#[derive(Clone, Copy)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// How long a tool may take to attach (bpftrace reads mariadbd's 26 MB of symbols).
const ATTACH_PATIENCE: Duration = Duration::from_secs(180);

/// How long a tool may take to exit after SIGINT before its run counts as stalled.
pub(crate) const TOOL_STOP_PATIENCE: Duration = Duration::from_secs(120);

/// probetop or bpftrace, attached and running; stopped with SIGINT like a user would.
pub(crate) struct Tool {
    child: Child,
    pub(crate) pid: u32,
    lines: mpsc::Receiver<String>,
    command: String,
}

impl Tool {
    /// Starts `cmd` and waits for a line containing `ready` on `stream`.
    pub(crate) fn start(mut cmd: Command, ready: &str, stream: Stream) -> Result<Self> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let command = show(&cmd);
        let mut child = cmd.spawn().with_context(|| format!("starting {command}"))?;
        let (tx, lines) = mpsc::channel();
        for (out, name) in [
            (
                child
                    .stdout
                    .take()
                    .map(|o| Box::new(o) as Box<dyn Read + Send>),
                Stream::Stdout,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|e| Box::new(e) as Box<dyn Read + Send>),
                Stream::Stderr,
            ),
        ] {
            let Some(out) = out else { continue };
            let tx = tx.clone();
            let tag = matches!(
                (name, stream),
                (Stream::Stdout, Stream::Stdout) | (Stream::Stderr, Stream::Stderr)
            );
            thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    // The readiness stream is marked so a match on the other is ignored.
                    let line = if tag {
                        format!("+{line}")
                    } else {
                        format!("-{line}")
                    };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let mut tool = Tool {
            pid: child.id(),
            child,
            lines,
            command,
        };
        let deadline = Instant::now() + ATTACH_PATIENCE;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tool.lines.recv_timeout(left) {
                Ok(line) if line.starts_with('+') && line.contains(ready) => break,
                Ok(line) => seen.push(line[1..].to_string()),
                Err(_) => {
                    let _ = tool.child.kill();
                    let _ = tool.child.wait();
                    bail!(
                        "{} did not print {ready:?} within {ATTACH_PATIENCE:?}; it printed:\n{}",
                        tool.command,
                        seen.join("\n")
                    );
                }
            }
        }
        Ok(tool)
    }

    /// SIGINT, then everything it printed; an error if it fails or lingers.
    pub(crate) fn stop(&mut self) -> Result<String> {
        // SAFETY: kill(2) on our own unreaped child's pid: it cannot name another process.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGINT) };
        // bpftrace takes seconds to exit: it detaches probe by probe, and the kernel waits
        // for an RCU grace period each time, which the machine's load stretches. Two
        // minutes is far beyond that; bpftrace 0.17 sometimes never exits (a lost run).
        let deadline = Instant::now() + TOOL_STOP_PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().context("waiting for a tool")? {
                break status;
            }
            if Instant::now() > deadline {
                // Left running for the caller to look at; killed when dropped.
                return Err(Stalled(format!(
                    "{} did not stop within {} s of SIGINT",
                    self.command,
                    TOOL_STOP_PATIENCE.as_secs()
                ))
                .into());
            }
            thread::sleep(Duration::from_millis(20));
        };
        let mut text = String::new();
        // The readers end at EOF, which follows the exit.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            text.push_str(&line[1..]);
            text.push('\n');
        }
        ensure!(
            status.success(),
            "{} failed ({status}):\n{text}",
            self.command
        );
        Ok(text)
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Where every thread of each process waits: its state, wchan and kernel stack (root
/// reads /proc/PID/task/TID/stack), for a run that stalled.
pub(crate) fn thread_snapshot(processes: &[(&str, u32)]) -> String {
    let mut out = String::new();
    for (name, pid) in processes {
        let _ = writeln!(out, "== {name} (pid {pid})");
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            let _ = writeln!(out, "(gone)");
            continue;
        };
        for task in tasks.flatten() {
            let dir = task.path();
            let read = |file: &str| fs::read_to_string(dir.join(file)).unwrap_or_default();
            let state = read("status")
                .lines()
                .find(|l| l.starts_with("State:"))
                .unwrap_or("")
                .to_string();
            let _ = writeln!(
                out,
                "-- tid {} {} {state} wchan={}\n{}",
                task.file_name().to_string_lossy(),
                read("comm").trim(),
                read("wchan").trim(),
                read("stack")
            );
        }
    }
    out
}

/// Kills and reaps a child on drop unless it was already reaped.
pub(crate) struct KillOnDrop<'a>(pub &'a mut Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
