//! Aggregation: hit records into per-probe HDR histograms of handler time.
//!
//! Pure state and arithmetic, no I/O: the stream stage feeds it, the present stage reads
//! [`ProbeAggregate::summary`] and the histograms themselves.

mod interval_log;
mod keys;
mod latency;
mod probe;
mod rate;
mod snapshot;
mod summary;
mod threads;

pub(crate) use interval_log::IntervalLog;
pub(crate) use keys::{HitKeys, KeyedHits};
#[cfg(test)]
pub(crate) use latency::RowKey;
pub(crate) use latency::{
    DEFAULT_MAX_KEYS, EndPath, KernelPairRead, Latency, LatencyRow, PairSetup,
    Prices as LatencyPrices,
};
pub(crate) use probe::{
    AutoMove, CapturedArgs, HISTORY_SPAN, Measured, MoveReason, ProbeAggregate,
};
#[cfg(test)]
use rate::RateWindow;
pub(crate) use snapshot::{FocusDetail, HistoryPoint, IntervalSummary, OwnUsage};
#[cfg(test)]
use summary::{CURVE_DECADES, CURVE_STEPS_PER_DECADE};
pub(crate) use summary::{HandlerSummary, LiveHistogram, PercentileCurve, full_range};
pub(crate) use threads::ThreadsCover;

use std::time::Duration;

use probe_common::{HitEvent, MAX_ARGS};

use crate::delivery::DeliveryMode;
use crate::record::Record;

/// What one probe costs probetop's own memory at most, bytes, hit or idle, while
/// measuring and at the end: its aggregate (~1.5 KiB), the rate window's ticks and a
/// minute of time series (~3 KiB), its rows in the snapshots sent to the UI (~0.4 KiB
/// each), its point, label and cost (~1.5 KiB), and at the end its measurements and
/// report rows (~4 KiB). Histograms come on top only with hits (16 KiB each, two per
/// probe with hits, then a copy in the measurements and one in the report).
/// Measured: docs/performance.md; checked against a memory cgroup's limit before
/// attaching.
pub const BYTES_PER_PROBE: u64 = 12 << 10;

/// Per-probe aggregates, indexed by probe id (the BPF cookie).
///
/// Only hits inside the measurement window count, so every probe is measured over the
/// same span although the kernel attaches and detaches them one at a time.
#[derive(Debug, Clone, Default)]
pub(crate) struct Aggregator {
    probes: Vec<ProbeAggregate>,
    /// Records whose probe id is not in the table: a bug if ever non-zero.
    pub unknown_records: u64,
    /// Hits before the window opened or after it closed, not counted anywhere else.
    pub outside_window: u64,
    /// Things the user should know about the run (mode switches), oldest first.
    pub notices: Vec<String>,
    /// How many of `notices` were said on stderr as they came (the collector says them
    /// at its next snapshot; the run's end says the rest).
    pub notices_said: usize,
    /// Kernel dispatches in the target that matched none of the probes (another
    /// tool's uprobes), when dispatch is measured.
    pub other_dispatch: Option<crate::attach::dispatch_time::SlotTotal>,
    /// Kernel dispatches in the target whose start the dispatch programs did not see
    /// (begun before they attached): not timed, not in any probe's numbers.
    pub dispatch_unmeasured: Option<u64>,
    /// Which kernel functions timed the dispatches, when dispatch is measured.
    pub dispatch_hooks: Option<crate::attach::dispatch_time::Hooks>,
    /// CLOCK_MONOTONIC ns: the window opens once every probe is attached ...
    window_start_ns: u64,
    /// ... and closes when measuring stops.
    window_end_ns: u64,
    /// Count records per process too (several processes probed); off, a hit costs
    /// the collector no second map update.
    pub count_processes: bool,
    /// The `latency:` pairs, fed the records of their probes.
    pub latency: Latency,
}

impl Aggregator {
    pub(crate) fn new(probe_count: usize) -> Self {
        Self {
            probes: vec![ProbeAggregate::default(); probe_count],
            unknown_records: 0,
            outside_window: 0,
            notices: Vec::new(),
            notices_said: 0,
            other_dispatch: None,
            dispatch_unmeasured: None,
            dispatch_hooks: None,
            window_start_ns: 0,
            window_end_ns: u64::MAX,
            count_processes: false,
            latency: Latency::default(),
        }
    }

    /// Counts only hits whose handler started at or after `ktime_ns` (CLOCK_MONOTONIC).
    pub(crate) fn open_window(&mut self, ktime_ns: u64) {
        self.window_start_ns = ktime_ns;
    }

    /// Counts only hits whose handler started at or before `ktime_ns`.
    pub(crate) fn close_window(&mut self, ktime_ns: u64) {
        self.window_end_ns = ktime_ns;
    }

    /// Records a ring buffer record of either kind.
    pub(crate) fn record_any(&mut self, record: &Record) {
        match record {
            Record::Hit(hit) => {
                self.record(hit);
            }
            Record::HitWithArgs(event) => {
                let counted = self.record(&event.hit);
                if counted && !self.latency.is_empty() {
                    self.pair(event);
                }
                if counted && let Some(probe) = self.probes.get_mut(event.hit.probe_id as usize) {
                    if let Some(keys) = &mut probe.keys {
                        keys.record(
                            &event.args,
                            (event.count as usize).min(MAX_ARGS),
                            event.faulted,
                            event.hit.handler_ns,
                        );
                    }
                    probe.last_args = Some(CapturedArgs {
                        count: event.count.min(MAX_ARGS as u32) as u8,
                        faulted: event.faulted,
                        values: event.args,
                    });
                }
            }
        }
    }

    /// Records one hit; returns whether it counted (inside the window, known probe).
    pub(crate) fn record(&mut self, event: &HitEvent) -> bool {
        if event.ktime_ns < self.window_start_ns || event.ktime_ns > self.window_end_ns {
            self.outside_window += 1;
            return false;
        }
        match self.probes.get_mut(event.probe_id as usize) {
            Some(probe) => {
                probe.record(
                    event.handler_ns,
                    event.tid,
                    self.count_processes.then_some(event.pid),
                );
                true
            }
            None => {
                self.unknown_records += 1;
                false
            }
        }
    }

    /// Sets the kernel's drop count for a probe (it is cumulative in the kernel).
    #[cfg(test)]
    pub(crate) fn set_dropped(&mut self, probe_id: usize, dropped: u64) {
        if let Some(probe) = self.probes.get_mut(probe_id) {
            probe.set_dropped_total(dropped);
        }
    }

    /// Closes a rate tick of length `elapsed` for every probe.
    pub(crate) fn tick(&mut self, elapsed: Duration) {
        for probe in &mut self.probes {
            probe.rate.tick(elapsed);
        }
    }

    pub(crate) fn probes(&self) -> &[ProbeAggregate] {
        &self.probes
    }

    /// Appends probes (of a program the target exec'd); returns the id of the first.
    /// They count from now on, within the same window as the others.
    pub(crate) fn add_probes(&mut self, probes: Vec<ProbeAggregate>) -> usize {
        let first = self.probes.len();
        self.probes.extend(probes);
        first
    }

    pub(crate) fn probes_mut(&mut self) -> &mut [ProbeAggregate] {
        &mut self.probes
    }

    /// Total records received over all probes.
    pub(crate) fn received(&self) -> u64 {
        self.probes.iter().map(|p| p.received).sum()
    }

    /// Total records dropped over all probes (the kernel's counts at their last read).
    pub(crate) fn dropped(&self) -> u64 {
        self.probes.iter().map(|p| p.dropped).sum()
    }

    /// CLOCK_MONOTONIC ns at which the measurement window opened (or was last reset).
    pub(crate) fn window_start_ns(&self) -> u64 {
        self.window_start_ns
    }

    /// Restarts every histogram and count as if the window had just opened at `ktime_ns`;
    /// notices stay.
    pub(crate) fn reset(&mut self, ktime_ns: u64) {
        self.window_start_ns = ktime_ns;
        for probe in &mut self.probes {
            probe.reset();
        }
        self.latency.reset();
    }

    /// Feeds a record of a latency pair's probe to its pair, pricing the pair's
    /// probes first when due.
    fn pair(&mut self, event: &probe_common::HitArgsEvent) {
        let hit = &event.hit;
        if event.count >= 1 && event.faulted & 1 == 0 {
            // A start's key slots follow the stack pointer. A string's slot past a
            // fault reads as its end (the string may end before a page it did not need);
            // the first slot faulted: the key is unreadable.
            let count = (event.count as usize).min(MAX_ARGS);
            let mut slots = event.args;
            for (i, slot) in slots.iter_mut().enumerate() {
                if event.faulted & (1 << i) != 0 {
                    *slot = 0;
                }
            }
            let readable = count > 1 && event.faulted & 2 == 0;
            let key = readable.then(|| &slots[1..count]);
            self.latency
                .record(hit.probe_id, hit.tid, hit.ktime_ns, event.args[0], key);
        }
    }

    /// Closes a live interval of `length` for every probe (see
    /// [`ProbeAggregate::roll_interval`]).
    pub(crate) fn roll_interval(&mut self, length: Duration) {
        for probe in &mut self.probes {
            probe.roll_interval(length);
        }
    }
}

/// What a report needs of one probe, copied out of the collector while it runs (the
/// interval histogram and the UI's series stay behind: half the memory of a clone).
#[derive(Debug, Clone)]
pub(crate) struct ProbeMeasurements {
    pub mode: DeliveryMode,
    pub hits: u64,
    pub dropped: u64,
    pub last_args: Option<CapturedArgs>,
    /// Records received per thread id, sorted by thread id.
    pub threads: Vec<(u32, u64)>,
    /// Records received per process id, sorted by process id.
    pub processes: Vec<(u32, u64)>,
    /// Hits dropped per thread id (a full ring buffer), sorted by thread id.
    pub threads_dropped: Vec<(u32, u64)>,
    /// Which hits `threads` and `threads_dropped` count.
    pub threads_cover: ThreadsCover,
    pub handler_ns: LiveHistogram,
    /// Share of the in-kernel hits whose handler was timed (below 1 with --time-every).
    pub timed_share: f64,
    /// Dispatch, gaps and streamed clock: what prices a hit beyond its handler.
    pub measured: Measured,
    /// `--mode auto` moved it into the kernel.
    pub moved: Option<AutoMove>,
}

/// Everything a report needs, measured so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct Measurements {
    /// CLOCK_MONOTONIC ns at which the window opened (or was last reset).
    pub window_start_ns: u64,
    pub probes: Vec<ProbeMeasurements>,
    /// The target's CPU since the window opened, probes included, share of one CPU
    /// (summed over the process set with several; the pricer reads it).
    pub target_cpu: Option<f64>,
    /// The standard error of `target_cpu` over its one-second rates.
    pub target_cpu_error: Option<f64>,
    /// The `latency:` pairs' rows.
    pub latency: Vec<LatencyRow>,
    /// Keyed probes' rows: (probe id, one key's hits).
    pub keyed: Vec<(u32, KeyedHits)>,
}

impl Aggregator {
    /// A copy of what reports need, unpriced (the price stage prices it).
    pub(crate) fn measurements(&self) -> Measurements {
        Measurements {
            window_start_ns: self.window_start_ns,
            probes: self
                .probes
                .iter()
                .map(|p| ProbeMeasurements {
                    mode: p.mode,
                    hits: p.hits(),
                    dropped: p.dropped,
                    last_args: p.last_args,
                    threads: {
                        let mut threads: Vec<(u32, u64)> =
                            p.threads.iter().map(|(t, n)| (*t, *n)).collect();
                        threads.sort_unstable();
                        threads
                    },
                    processes: {
                        let mut processes: Vec<(u32, u64)> =
                            p.processes.iter().map(|(t, n)| (*t, *n)).collect();
                        processes.sort_unstable();
                        processes
                    },
                    threads_dropped: {
                        let mut dropped: Vec<(u32, u64)> = p.threads_dropped().collect();
                        dropped.sort_unstable();
                        dropped
                    },
                    threads_cover: p.threads_cover(),
                    handler_ns: p.handler_ns.clone(),
                    timed_share: p.timed_share(),
                    measured: p.measured.clone(),
                    moved: p.moved,
                })
                .collect(),
            target_cpu: None,
            target_cpu_error: None,
            // Calls per second over the window when it is closed; else said by the
            // report from its duration.
            latency: self.latency.rows(if self.window_end_ns == u64::MAX {
                0.0
            } else {
                self.window_end_ns.saturating_sub(self.window_start_ns) as f64 / 1e9
            }),
            keyed: self.keyed_rows(),
        }
    }

    /// Every keyed probe's rows, by probe id.
    pub(crate) fn keyed_rows(&self) -> Vec<(u32, KeyedHits)> {
        self.probes
            .iter()
            .enumerate()
            .filter_map(|(id, p)| Some((id as u32, p.keys.as_ref()?.rows())))
            .flat_map(|(id, rows)| rows.into_iter().map(move |r| (id, r)))
            .collect()
    }

    /// Whether probe `id` must stream every hit: half of a latency pair, or keyed.
    pub(crate) fn streams_every_hit(&self, id: u32) -> bool {
        self.latency.pairs_probe(id)
            || self
                .probes
                .get(id as usize)
                .is_some_and(|p| p.keys.is_some())
    }
}

/// Readies every probe's live dispatch measurement, and the run's.
pub(crate) fn measure_dispatch(aggregator: &mut Aggregator) {
    for probe in aggregator.probes_mut() {
        probe.measured.dispatch = Some(Default::default());
    }
    aggregator.other_dispatch = Some(Default::default());
    aggregator.dispatch_unmeasured = Some(0);
}

#[cfg(test)]
mod tests;
