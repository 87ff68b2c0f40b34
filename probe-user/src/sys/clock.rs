//! Clocks and the system's constants for reading /proc's times.

use std::io;

/// `clock_gettime(clock)` in ns.
fn read(clock: libc::clockid_t) -> io::Result<u64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
}

/// Now on CLOCK_MONOTONIC, the clock `bpf_ktime_get_ns()` reads, in ns.
pub(crate) fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux.
    read(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// CPU time of the calling thread, ns.
pub(crate) fn thread_cpu_ns() -> u64 {
    // CLOCK_THREAD_CPUTIME_ID cannot fail for the calling thread.
    read(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

/// The CPU-time clock of every thread of process `pid` together.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcessCpuClock(libc::clockid_t);

impl ProcessCpuClock {
    /// Fails when `pid` is gone (or not visible here).
    pub(crate) fn of(pid: u32) -> io::Result<Self> {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: clock_getcpuclockid writes one clockid_t through a valid pointer.
        let rc = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(Self(clock))
    }

    /// The process's CPU time so far, ns; fails once it has exited.
    pub(crate) fn read_ns(&self) -> io::Result<u64> {
        read(self.0)
    }
}

/// Clock ticks per second, the unit of /proc's `utime` and `stime`; `None` if unknown.
pub(crate) fn clock_ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf has no memory-safety preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0)
}

/// The page size, the unit of /proc's `statm`; `None` if unknown.
pub(crate) fn page_size() -> Option<u64> {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward() {
        let a = monotonic_ns();
        let cpu = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..100_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        assert!(monotonic_ns() > a);
        assert!(thread_cpu_ns() > cpu);
        let own = ProcessCpuClock::of(std::process::id()).expect("own clock");
        assert!(own.read_ns().expect("own cpu time") > 0);
        assert!(clock_ticks_per_second().is_some());
        assert!(page_size().is_some_and(|p| p.is_power_of_two()));
    }
}
