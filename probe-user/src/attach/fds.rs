//! File descriptors: every probe on the perf-event path holds two (its perf event and
//! the BPF link), and the usual soft limit of 1024 ran out at ~500 probes, after a
//! minute of attaching (EMFILE). The soft limit is raised to the hard one at start, and
//! a run that cannot fit under the hard limit is refused before anything is attached.

use std::io;

use crate::sys;

/// Descriptors a probe holds on the perf-event path.
pub(crate) const PER_PERF_EVENT_PROBE: u64 = 2;
/// Room kept for what is opened after attaching (exports, /proc reads, the listener).
const HEADROOM: u64 = 64;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit now.
pub(crate) fn raise_limit() -> io::Result<u64> {
    let limit = sys::limits::open_files()?;
    if limit.soft < limit.hard {
        sys::limits::set_open_files_soft(limit.hard)?;
    }
    Ok(limit.hard.max(limit.soft))
}

/// `Err` with one line when `probes` probes on the perf-event path cannot fit under the
/// soft limit (raised to the hard one by [`raise_limit`]) with what is open now.
pub(crate) fn check_room(probes: u64) -> Result<(), String> {
    let Ok(limit) = sys::limits::open_files() else {
        return Ok(());
    };
    let needed = probes
        .saturating_mul(PER_PERF_EVENT_PROBE)
        .saturating_add(sys::limits::open_files_now() + HEADROOM);
    if needed <= limit.soft {
        return Ok(());
    }
    Err(format!(
        "{probes} probes on the perf_event path need about {needed} file descriptors (two each), more than this process may open ({}, hard limit {}): raise it first (`ulimit -n {needed}` as root, LimitNOFILE= for a service), or probe fewer points",
        limit.soft, limit.hard
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_rises_to_the_hard_one() {
        let soft = raise_limit().expect("raise");
        let now = sys::limits::open_files().expect("limits");
        assert_eq!(soft, now.hard);
        assert_eq!(now.soft, now.hard);
        assert!(check_room(1).is_ok());
        if !now.unlimited() {
            let refused = check_room(now.hard).expect_err("twice the limit");
            assert!(refused.contains("ulimit -n"), "{refused}");
        }
    }
}
