//! CPU time and state of processes and of the machine, from /proc and the process CPU
//! clocks: the readers bench, mysql-report and insitu-check measure with.

use std::fs;

use anyhow::{Context as _, Result, ensure};

/// Clock ticks per second of /proc's CPU times.
pub(crate) fn clock_ticks() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

/// CPU seconds of one process (all its threads) so far: (user, system), or, with
/// `children`, of its children it has waited for.
pub(crate) fn process_cpu(pid: u32, children: bool) -> Result<(f64, f64)> {
    let path = format!("/proc/{pid}/stat");
    let stat = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name is in parentheses and may hold anything: count after the last ')'.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .with_context(|| format!("malformed {path}"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14-17 of stat(5) (utime stime cutime cstime) are 11-14 after the name
    // (state is field 3, index 0 here).
    let at = if children { 13 } else { 11 };
    let read = |i: usize| -> Result<f64> {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .map(|ticks| ticks as f64 / clock_ticks())
            .with_context(|| format!("no CPU time field {i} in {path}"))
    };
    Ok((read(at)?, read(at + 1)?))
}

/// Machine-wide CPU seconds from /proc/stat, summed over CPUs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HostCpu {
    /// user + nice + system + irq + softirq.
    pub busy: f64,
    pub idle: f64,
    /// Time the hypervisor ran something else while a vCPU wanted to run.
    pub steal: f64,
}

impl HostCpu {
    pub(crate) fn now() -> Result<Self> {
        let stat = fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        let line = stat
            .lines()
            .find(|l| l.starts_with("cpu "))
            .context("no cpu line in /proc/stat")?;
        let v: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse::<u64>().map(|t| t as f64 / clock_ticks()))
            .collect::<Result<_, _>>()
            .context("malformed cpu line in /proc/stat")?;
        let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
        Ok(Self {
            busy: at(0) + at(1) + at(2) + at(5) + at(6),
            idle: at(3) + at(4),
            steal: at(7),
        })
    }

    pub(crate) fn since(self, earlier: Self) -> Self {
        Self {
            busy: self.busy - earlier.busy,
            idle: self.idle - earlier.idle,
            steal: self.steal - earlier.steal,
        }
    }
}

/// Fields of /proc/PID/stat after the command name (which may hold spaces).
pub(crate) fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

pub(crate) fn proc_state(pid: u32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

/// utime + stime of a process, in seconds.
pub(crate) fn cpu_seconds(pid: u32) -> Result<f64> {
    let (user, system) = process_cpu(pid, false)?;
    Ok(user + system)
}

/// A `kB` field of /proc/PID/status.
pub(crate) fn status_kib(pid: u32, key: &str) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// A process's CPU time (every thread, dead ones included) in ns, from its process CPU
/// clock: finer than /proc's clock ticks.
pub(crate) fn cpu_clock_ns(pid: u32) -> Result<u64> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: clock_getcpuclockid writes one clockid_t through a valid pointer.
    let rc = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) };
    ensure!(rc == 0, "no CPU clock for pid {pid}: error {rc}");
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(clock, &mut now) };
    ensure!(rc == 0, "cannot read the CPU clock of pid {pid}");
    Ok(now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_cpu_time() {
        let (user, system) = process_cpu(std::process::id(), false).expect("own stat");
        assert!(user >= 0.0 && system >= 0.0);
        let host = HostCpu::now().expect("/proc/stat");
        assert!(host.busy > 0.0 && host.idle > 0.0);
    }

    #[test]
    fn reads_own_state_and_clock() {
        assert!(proc_state(std::process::id()).is_some_and(|s| s.is_ascii_uppercase()));
        assert!(cpu_seconds(std::process::id()).expect("own stat") >= 0.0);
        assert!(cpu_clock_ns(std::process::id()).expect("own clock") > 0);
        assert!(status_kib(std::process::id(), "VmRSS:").is_some_and(|kib| kib > 0));
    }
}
