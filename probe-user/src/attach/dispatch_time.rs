//! Kernel dispatch time as measured: the per-probe totals and histograms that price a
//! hit, and which kernel functions timed them. `attach::dispatch` loads the fentry/fexit
//! programs that count them; the collector reads them into each probe's
//! [`DispatchMeasure`].

use hdrhistogram::Histogram;
use probe_common::khist;

use crate::histogram::{HIGHEST_TRACKABLE_NS, new_ns_histogram};
use crate::spec::ProbeKind;

/// Which kernel functions timed what, as this kernel allowed (shown with
/// `PROBETOP_VERBOSE=1` and in the JSON export).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hooks {
    /// Probe hits (uprobe, USDT, a uretprobe's entry).
    pub entries: &'static str,
    /// uretprobe returns; `None` when they are not timed.
    pub returns: Option<&'static str>,
    /// Why returns are not timed, when they are not.
    pub returns_missing: Option<&'static str>,
}

/// Entries through the breakpoint alone (no optimized probes on this kernel).
pub(crate) const ENTRIES_NOTIFY: &str = "uprobe_notify_resume";
pub(crate) const ENTRIES_BOTH: &str = "uprobe_notify_resume, handle_syscall_uprobe";
/// 6.11+: the trampoline handler; its int3 path nested in uprobe_notify_resume.
pub(crate) const RETURNS_TRAMPOLINE: &str =
    "uprobe_handle_trampoline (int3 trampoline: uprobe_notify_resume)";
/// Before 6.11: the int3 trampoline's hit in uprobe_notify_resume.
pub(crate) const RETURNS_NOTIFY: &str = "uprobe_notify_resume at the int3 trampoline";

impl Hooks {
    /// One line: what timed entries and returns.
    pub fn describe(&self) -> String {
        let returns = match (self.returns, self.returns_missing) {
            (Some(r), _) => r.to_owned(),
            (None, Some(why)) => format!("not timed ({why})"),
            (None, None) => "not timed".to_owned(),
        };
        format!("entries timed by {}; returns by {returns}", self.entries)
    }
}

/// Where one probe sits in the target, for the join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSite {
    pub kind: ProbeKind,
    /// Runtime address of the probed instruction in the target; `None` if the object
    /// is not mapped (its dispatches then count as unattributed).
    pub vaddr: Option<u64>,
}

/// Dispatch totals of one slot, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotTotal {
    pub count: u64,
    pub sum_ns: u64,
}

impl SlotTotal {
    pub(crate) fn since(self, base: SlotTotal) -> SlotTotal {
        SlotTotal {
            count: self.count.saturating_sub(base.count),
            sum_ns: self.sum_ns.saturating_sub(base.sum_ns),
        }
    }

    /// Mean per dispatch, ns.
    pub fn mean(self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64)
    }
}

/// Dispatch measured for one probe over the measurement window.
#[derive(Debug, Clone)]
pub struct DispatchMeasure {
    /// Entry breakpoint dispatches (uprobe, USDT, or a lone uretprobe's entry).
    pub entry: SlotTotal,
    /// Returns through the uretprobe trampoline.
    pub ret: SlotTotal,
    pub entry_ns: Histogram<u64>,
    pub return_ns: Histogram<u64>,
    entry_base: SlotTotal,
    ret_base: SlotTotal,
    entry_hist_base: Vec<u64>,
    ret_hist_base: Vec<u64>,
}

impl Default for DispatchMeasure {
    fn default() -> Self {
        Self {
            entry: SlotTotal::default(),
            ret: SlotTotal::default(),
            entry_ns: new_ns_histogram(),
            return_ns: new_ns_histogram(),
            entry_base: SlotTotal::default(),
            ret_base: SlotTotal::default(),
            entry_hist_base: Vec::new(),
            ret_hist_base: Vec::new(),
        }
    }
}

impl DispatchMeasure {
    /// Takes the kernel's cumulative numbers as they are when the window opens.
    pub fn baseline(&mut self, entry: SlotTotal, ret: SlotTotal) {
        self.entry_base = entry;
        self.ret_base = ret;
        self.entry = SlotTotal::default();
        self.ret = SlotTotal::default();
    }

    /// Sets the totals from the kernel's cumulative numbers.
    pub fn update(&mut self, entry: SlotTotal, ret: SlotTotal) {
        self.entry = entry.since(self.entry_base);
        self.ret = ret.since(self.ret_base);
    }

    /// Baselines of the histograms (read once when the window opens).
    pub fn baseline_histograms(&mut self, entry: Vec<u64>, ret: Vec<u64>) {
        self.entry_hist_base = entry;
        self.ret_hist_base = ret;
    }

    /// Rebuilds the histograms from the kernel's cumulative counts.
    pub fn set_histograms(&mut self, entry: &[u64], ret: &[u64]) {
        self.entry_ns = to_histogram(entry, &self.entry_hist_base);
        self.return_ns = to_histogram(ret, &self.ret_hist_base);
    }

    /// Whether anything was measured.
    pub fn measured(&self) -> bool {
        self.entry.count > 0 || self.ret.count > 0
    }

    /// Dispatch time per hit of the probe: its mean entry dispatch plus its mean
    /// return dispatch (a hit of a uretprobe is one of each).
    pub fn per_hit_ns(&self) -> Option<f64> {
        match (self.entry.mean(), self.ret.mean()) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        }
    }
}

/// An HDR histogram from `khist` bucket counts (minus a baseline), each count at its
/// bucket's midpoint (within 3.2%).
fn to_histogram(totals: &[u64], base: &[u64]) -> Histogram<u64> {
    let mut hist = new_ns_histogram();
    for (index, total) in totals.iter().enumerate() {
        let new = total.saturating_sub(base.get(index).copied().unwrap_or(0));
        if new == 0 {
            continue;
        }
        let (low, high) = khist::bounds(index as u32);
        let ns = (low + (high - low) / 2).clamp(1, HIGHEST_TRACKABLE_NS);
        hist.saturating_record_n(ns, new);
    }
    hist
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_hit_adds_entry_and_return_means() {
        let mut m = DispatchMeasure::default();
        assert_eq!(m.per_hit_ns(), None);
        m.baseline(
            SlotTotal {
                count: 10,
                sum_ns: 1000,
            },
            SlotTotal::default(),
        );
        m.update(
            SlotTotal {
                count: 30,
                sum_ns: 41_000,
            },
            SlotTotal {
                count: 20,
                sum_ns: 10_000,
            },
        );
        assert_eq!(m.entry.count, 20);
        assert_eq!(m.per_hit_ns(), Some(2000.0 + 500.0));
    }

    #[test]
    fn histograms_from_bucket_counts() {
        let mut totals = vec![0u64; khist::BUCKETS as usize];
        totals[khist::bucket(1000) as usize] = 7;
        let mut base = vec![0u64; khist::BUCKETS as usize];
        base[khist::bucket(1000) as usize] = 2;
        let hist = to_histogram(&totals, &base);
        assert_eq!(hist.len(), 5);
        assert!((992..=1023).contains(&hist.max()));
    }
}
