//! Children with timestamped output lines, /proc readers and small helpers.

use std::io::{BufRead as _, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use std::{fs, thread};

use anyhow::{Context as _, Result, bail, ensure};

use super::*;

// ---------------------------------------------------------------------------------------
// Processes

/// One line of a child's output, with when it was read.
#[derive(Debug, Clone)]
pub(super) struct Line {
    pub(super) at: Instant,
    pub(super) text: String,
    pub(super) stderr: bool,
}

/// A child process whose stdout and stderr lines arrive, timestamped, on a channel;
/// killed on drop.
pub(super) struct Proc {
    pub(super) name: String,
    pub(super) child: Child,
    pub(super) started: Instant,
    pub(super) lines: mpsc::Receiver<Line>,
    /// Lines already taken off the channel, for `seen` and error messages.
    pub(super) seen: std::cell::RefCell<Vec<Line>>,
}

impl Proc {
    pub(super) fn spawn(name: &str, cmd: &mut Command) -> Result<Self> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", show(cmd)))?;
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().context("stdout not captured")?;
        let err = child.stderr.take().context("stderr not captured")?;
        forward(out, false, tx.clone());
        forward(err, true, tx);
        Ok(Self {
            name: name.to_string(),
            child,
            started,
            lines: rx,
            seen: Default::default(),
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn running(&self) -> bool {
        Path::new(&format!("/proc/{}/stat", self.pid())).exists()
            && proc_state(self.pid()).is_none_or(|s| s != 'Z')
    }

    /// The next line, if one comes within `timeout`.
    pub(super) fn next_line(&self, timeout: Duration) -> Option<Line> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        self.seen.borrow_mut().push(line.clone());
        Some(line)
    }

    /// Waits for a line containing `needle`; fails after `timeout` or at end of output.
    pub(super) fn wait_for(&self, needle: &str, timeout: Duration) -> Result<Line> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.borrow_mut().push(line.clone());
                    if line.text.contains(needle) {
                        return Ok(line);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!(
                        "{} printed no {needle:?} in {timeout:?}: {}",
                        self.name,
                        self.rest_text()
                    )
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!(
                        "{} ended without printing {needle:?}: {}",
                        self.name,
                        self.rest_text()
                    )
                }
            }
        }
    }

    /// A line containing `needle` read so far (or queued now).
    pub(super) fn seen(&self, needle: &str) -> Option<Line> {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.borrow_mut().push(line);
        }
        self.seen
            .borrow()
            .iter()
            .find(|l| l.text.contains(needle))
            .cloned()
    }

    /// Every line: those seen and those left until end of output (after exit).
    pub(super) fn drain(&self) -> Vec<Line> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.borrow_mut().push(line);
        }
        self.seen.borrow().clone()
    }

    /// The last lines printed, for error messages.
    pub(super) fn rest_text(&self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.borrow_mut().push(line);
        }
        let seen = self.seen.borrow();
        let tail: Vec<&str> = seen
            .iter()
            .rev()
            .take(8)
            .rev()
            .map(|l| l.text.as_str())
            .collect();
        tail.join(" | ")
    }

    pub(super) fn signal(&self, signal: &str) -> Result<()> {
        let status = Command::new("kill")
            .args(["-s", signal, &self.pid().to_string()])
            .status()
            .context("running kill")?;
        ensure!(status.success(), "kill -s {signal} {} failed", self.pid());
        Ok(())
    }

    pub(super) fn wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().context("waiting for a child")? {
                return Ok(status);
            }
            ensure!(
                Instant::now() < deadline,
                "{} did not exit within {timeout:?}",
                self.name
            );
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// Sends `signal` and waits for the exit; returns the status and how long it took.
    pub(super) fn stop(
        &mut self,
        signal: &str,
        timeout: Duration,
    ) -> Result<(ExitStatus, Duration)> {
        if let Some(status) = self.child.try_wait().context("waiting for a child")? {
            return Ok((status, Duration::ZERO));
        }
        let sent = Instant::now();
        self.signal(signal)?;
        let status = self.wait(timeout)?;
        Ok((status, sent.elapsed()))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

pub(super) fn forward(stream: impl Read + Send + 'static, stderr: bool, tx: mpsc::Sender<Line>) {
    thread::spawn(move || {
        for text in BufReader::new(stream).lines() {
            let Ok(text) = text else { break };
            let line = Line {
                at: Instant::now(),
                text,
                stderr,
            };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

/// Polls `ready` every few ms until it holds; fails after `timeout`.
pub(super) fn wait_until(timeout: Duration, mut ready: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !ready() {
        ensure!(Instant::now() < deadline, "timed out after {timeout:?}");
        thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// /proc

/// Run time and runs of a process's BPF programs so far.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ProgramRuns {
    pub(super) ns: u64,
    pub(super) runs: u64,
}

/// The BPF programs `pid` holds, each once, from /proc/PID/fdinfo: the kernel counts
/// their runs and run time while kernel.bpf_stats_enabled is 1.
pub(super) fn program_runs(pid: u32) -> ProgramRuns {
    let mut total = ProgramRuns::default();
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return total;
    };
    let mut seen = std::collections::BTreeSet::new();
    for entry in dir.flatten() {
        if !fs::read_link(entry.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:bpf-prog") {
            continue;
        }
        let fd = entry.file_name();
        let Ok(info) = fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.to_string_lossy()))
        else {
            continue;
        };
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(id), Some(ns), Some(runs)) =
            (field("prog_id"), field("run_time_ns"), field("run_cnt"))
            && seen.insert(id)
        {
            total.ns += ns;
            total.runs += runs;
        }
    }
    total
}

/// kernel.bpf_stats_enabled on while this lives, then back to what it was.
pub(super) struct BpfStatsOn {
    pub(super) previous: String,
}

pub(super) const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStatsOn {
    pub(super) fn enable() -> Result<Self> {
        let previous = fs::read_to_string(BPF_STATS_SYSCTL)
            .with_context(|| format!("reading {BPF_STATS_SYSCTL}"))?;
        fs::write(BPF_STATS_SYSCTL, "1").with_context(|| format!("writing {BPF_STATS_SYSCTL}"))?;
        Ok(Self { previous })
    }
}

impl Drop for BpfStatsOn {
    fn drop(&mut self) {
        if let Err(e) = fs::write(BPF_STATS_SYSCTL, self.previous.trim()) {
            eprintln!("bench: could not restore {BPF_STATS_SYSCTL}: {e}");
        }
    }
}

/// Perf event file descriptors a process holds: one per uprobe it attached that way.
pub(super) fn perf_event_fds(pid: u32) -> usize {
    fds_of(pid, &["anon_inode:[perf_event]"])
}

/// What a process holds per attachment: a perf event per probe on the per-probe path, a
/// BPF link per object and program on the uprobe_multi one.
pub(super) fn attachment_fds(pid: u32) -> usize {
    fds_of(pid, &["anon_inode:[perf_event]", "anon_inode:bpf_link"])
}

/// File descriptors of `pid` whose target is one of `kinds`.
fn fds_of(pid: u32, kinds: &[&str]) -> usize {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            fs::read_link(e.path()).is_ok_and(|t| kinds.iter().any(|k| t.as_os_str() == *k))
        })
        .count()
}

pub(super) fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Small helpers

/// Parses `key=value` out of a fixture's report line.
pub(super) fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

/// Runs `probetop list ... --json`.
pub(super) fn command_listing(cmd: &mut Command) -> Result<Listing> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", show(cmd)))?;
    ensure!(
        out.status.success(),
        "{} failed: {}",
        show(cmd),
        String::from_utf8_lossy(&out.stderr)
    );
    crate::util::listing::listing(&out.stdout)
        .with_context(|| format!("parsing the output of {}", show(cmd)))
}

/// The first line a command prints, if it succeeds.
pub(super) fn command_line(cmd: &mut Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    })
}

pub(super) fn commit(ctx: &Ctx) -> String {
    let head = command_line(
        Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(&ctx.root),
    )
    .unwrap_or_else(|| "unknown".into());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(&ctx.root)
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    if dirty {
        format!("{head}+changes")
    } else {
        head
    }
}
