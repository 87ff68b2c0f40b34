//! When probes were detached and attached again (`--budget`'s duty cycle, `--in-situ`'s
//! windows, a probe toggled in the TUI), on the probes' own clock: a latency pair's
//! call that started before such a gap and whose end was not seen had its return missed
//! while detached, so it is cut by the detach, not unwound (`aggregate::latency`). The
//! records of a gap's moments may be read long after it (the ring lags), so the gaps are
//! kept, not just the last.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Gaps kept per probe: the oldest go first. At 10 detaches a second that is 7 minutes;
/// a record is read well within a second of its hit.
const KEPT: usize = 4096;

/// One detached stretch, ns on CLOCK_MONOTONIC (`bpf_ktime_get_ns`): from just before
/// the detach call to just after the attach call; `None` while still detached.
#[derive(Debug, Clone, Copy)]
struct Gap {
    from: u64,
    to: Option<u64>,
}

/// The gaps of the probes watched (latency pairs' ends), shared by the attachment,
/// which writes them, and the aggregator, which reads them.
#[derive(Debug, Clone, Default)]
pub(crate) struct DetachLog(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    gaps: Mutex<HashMap<u32, VecDeque<Gap>>>,
    /// No gap ends after this (`u64::MAX` while one is open): a call begun after it,
    /// most of them, is answered without the lock.
    latest_end: AtomicU64,
}

impl DetachLog {
    fn gaps(&self) -> std::sync::MutexGuard<'_, HashMap<u32, VecDeque<Gap>>> {
        self.0.gaps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the gaps of probes `ids` from now on.
    pub(crate) fn watch(&self, ids: impl IntoIterator<Item = u32>) {
        let mut gaps = self.gaps();
        for id in ids {
            gaps.entry(id).or_default();
        }
    }

    /// Probes `ids` (those attached) are detached from `at` on; returns whether any is
    /// watched.
    pub(crate) fn detached(&self, ids: impl IntoIterator<Item = u32>, at: u64) -> bool {
        let mut gaps = self.gaps();
        let mut any = false;
        for id in ids {
            let Some(list) = gaps.get_mut(&id) else {
                continue;
            };
            any = true;
            if list.back().is_some_and(|g| g.to.is_none()) {
                continue;
            }
            if list.len() >= KEPT {
                list.pop_front();
            }
            list.push_back(Gap { from: at, to: None });
        }
        if any {
            self.0.latest_end.store(u64::MAX, Ordering::Release);
        }
        any
    }

    /// Probes `ids` are attached again, from `at` on.
    pub(crate) fn attached(&self, ids: impl IntoIterator<Item = u32>, at: u64) {
        let mut gaps = self.gaps();
        for id in ids {
            if let Some(gap) = gaps.get_mut(&id).and_then(|l| l.back_mut()) {
                gap.to = gap.to.or(Some(at));
            }
        }
        let latest = gaps
            .values()
            .filter_map(|l| l.back())
            .map(|g| g.to.unwrap_or(u64::MAX))
            .max()
            .unwrap_or(0);
        self.0.latest_end.store(latest, Ordering::Release);
    }

    /// Whether any of probes `ids` was detached at some moment between `from` and `to`
    /// (a gap still open reaches to the end of time).
    pub(crate) fn straddled(&self, ids: &[u32], from: u64, to: u64) -> bool {
        if self.0.latest_end.load(Ordering::Acquire) <= from {
            return false;
        }
        let gaps = self.gaps();
        ids.iter().filter_map(|id| gaps.get(id)).any(|list| {
            // The gaps are in time order: the first that ends after `from`.
            let at = list.partition_point(|g| g.to.is_some_and(|end| end <= from));
            list.get(at).is_some_and(|g| g.from < to)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stretch_straddles_a_gap_that_overlaps_it() {
        let log = DetachLog::default();
        log.watch([1]);
        log.detached([1, 2], 100);
        log.attached([1, 2], 200);
        log.detached([1], 300);
        assert!(log.straddled(&[1], 50, 250));
        assert!(log.straddled(&[1], 150, 160));
        assert!(!log.straddled(&[1], 200, 300));
        assert!(!log.straddled(&[1], 10, 100));
        // Still detached from 300 on.
        assert!(log.straddled(&[1], 250, 1_000_000));
        assert!(!log.straddled(&[2], 50, 250), "probe 2 is not watched");
    }
}
