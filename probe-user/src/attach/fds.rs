//! File descriptors: every probe on the perf-event path holds two (its perf event and
//! the BPF link), and the usual soft limit of 1024 ran out at ~500 probes, after a
//! minute of attaching (EMFILE). The soft limit is raised to the hard one at start, and
//! a run that cannot fit under the hard limit is refused before anything is attached.

use std::io;

/// Descriptors a probe holds on the perf-event path.
pub const PER_PERF_EVENT_PROBE: u64 = 2;
/// Room kept for what is opened after attaching (exports, /proc reads, the listener).
const HEADROOM: u64 = 64;

/// The soft and hard `RLIMIT_NOFILE`.
fn limits() -> io::Result<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(limit)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit now.
pub fn raise_limit() -> io::Result<u64> {
    let mut limit = limits()?;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit reads one rlimit; raising the soft limit up to the hard one
        // needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(limit.rlim_cur)
}

/// Descriptors open in this process now.
fn open_now() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64)
}

/// `Err` with one line when `probes` probes on the perf-event path cannot fit under the
/// soft limit (raised to the hard one by [`raise_limit`]) with what is open now.
pub fn check_room(probes: u64) -> Result<(), String> {
    let Ok(limit) = limits() else {
        return Ok(());
    };
    let needed = probes
        .saturating_mul(PER_PERF_EVENT_PROBE)
        .saturating_add(open_now() + HEADROOM);
    if needed <= limit.rlim_cur {
        return Ok(());
    }
    Err(format!(
        "{probes} probes on the perf_event path need about {needed} file descriptors (two each), more than this process may open ({}, hard limit {}): raise it first (`ulimit -n {needed}` as root, LimitNOFILE= for a service), or probe fewer points",
        limit.rlim_cur, limit.rlim_max
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_rises_to_the_hard_one() {
        let soft = raise_limit().expect("raise");
        let now = limits().expect("limits");
        assert_eq!(soft, now.rlim_max);
        assert_eq!(now.rlim_cur, now.rlim_max);
        assert!(check_room(1).is_ok());
        if now.rlim_max != libc::RLIM_INFINITY {
            let refused = check_room(now.rlim_max).expect_err("twice the limit");
            assert!(refused.contains("ulimit -n"), "{refused}");
        }
    }
}
