//! Everything measured for one probe, and how records and kernel counts update it.

use std::collections::VecDeque;
use std::time::Duration;

use hdrhistogram::Histogram;
use probe_common::{MAX_ARGS, khist};

use super::rate::RateWindow;
use super::snapshot::{HistoryPoint, IntervalSummary};
use super::summary::{HandlerSummary, LiveHistogram, PercentileCurve};
use super::threads::{ThreadCounts, ThreadsCover};
use crate::delivery::DeliveryMode;

/// Everything measured for one probe.
#[derive(Debug, Clone)]
pub(crate) struct ProbeAggregate {
    /// Hit records received.
    pub received: u64,
    /// Hits whose record the kernel could not queue (ring buffer full), since attach or
    /// the last reset.
    pub dropped: u64,
    /// The kernel's cumulative drop count at the last reset.
    pub(super) dropped_base: u64,
    /// Handler time of every received hit since attach (or the last reset).
    pub handler_ns: LiveHistogram,
    /// Handler time since the last interval rollover (`take_interval`).
    pub interval_ns: LiveHistogram,
    pub rate: RateWindow,
    /// Argument values of the latest hit that captured any.
    pub last_args: Option<CapturedArgs>,
    /// Records received per thread id (threads created after attach included).
    pub threads: ThreadCounts,
    /// Records received per process id (tgid): several processes share a probe with
    /// `--follow-forks`, `--cgroup` or several `--pid`.
    pub processes: ThreadCounts,
    /// The kernel's cumulative count of dropped hits per thread id (`THREAD_DROPS`).
    pub(super) thread_drops: ThreadCounts,
    /// [`Self::thread_drops`] at the last reset.
    pub(super) thread_drops_base: ThreadCounts,
    /// How hits reach user space now.
    pub mode: DeliveryMode,
    /// SAMPLE mode: every hit in the window, as the kernel counted them.
    pub sampled_hits: u64,
    /// The kernel's cumulative count of every hit (SAMPLE and KERNEL_HISTOGRAM modes) at
    /// the last read, to take deltas.
    pub(super) counted_seen: u64,
    /// Hits counted in the kernel in KERNEL_HISTOGRAM mode.
    pub kernel_hits: u64,
    /// Of those, the hits whose handler was timed (`--time-every`) and went into the
    /// in-kernel histogram; `handler_ns` holds their times.
    pub kernel_timed: u64,
    /// The in-kernel histogram's bucket totals at the last read, to take deltas.
    pub(super) kernel_seen: Vec<u64>,
    /// What the price stage reads beyond the handler time: the dispatch, the gaps
    /// before its hits and the clock of the hits it streamed first.
    pub measured: Measured,
    /// `hits()` and `dropped` when the last live interval closed, to take deltas.
    pub(super) hits_at_roll: u64,
    pub(super) dropped_at_roll: u64,
    /// The last closed live interval ([`super::Aggregator::roll_interval`]).
    pub last_interval: IntervalSummary,
    /// Its percentile distribution.
    pub last_interval_curve: PercentileCurve,
    /// One point per closed live interval, oldest first, over the last [`HISTORY_SPAN`].
    pub history: VecDeque<HistoryPoint>,
    /// The probe as its row names it (`usdt:fixture:tick`), for notices about it; empty
    /// when unknown.
    pub name: String,
    /// A keyed probe's hits per key.
    pub keys: Option<super::keys::HitKeys>,
    /// `--mode auto` moved it into the kernel: when, why, and the run's drops then.
    pub moved: Option<AutoMove>,
}

/// Why `--mode auto` moved a probe into the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MoveReason {
    /// The ring buffer dropped records: the reader could not keep up with the run.
    Dropped,
    /// The run's records per second passed `--auto-above`.
    AboveLimit,
}

impl MoveReason {
    /// The word exports use.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MoveReason::Dropped => "records-dropped",
            MoveReason::AboveLimit => "above-auto-above",
        }
    }
}

/// A probe `--mode auto` moved from the ring buffer into in-kernel aggregation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AutoMove {
    /// Since the window opened (zero when a reset came after the move).
    pub after: Duration,
    pub reason: MoveReason,
    /// The probe's hits per second then.
    pub per_second: f64,
    /// Hits per second of every probe still streaming then (this one included).
    pub run_per_second: f64,
    /// Records every probe had dropped when it moved, the records staged on every CPU
    /// flushed first: what the run drops after it came later.
    pub run_dropped: u64,
}

/// What was measured of one probe's hits beyond its handler time, as plain data: the
/// price stage (`price`) turns it into a whole cost per hit.
#[derive(Debug, Clone, Default)]
pub(crate) struct Measured {
    /// The kernel's dispatch of its hits, timed live when dispatch measurement runs.
    pub dispatch: Option<crate::attach::dispatch_time::DispatchMeasure>,
    /// The gaps before its hits since the previous hit on their CPU, counted in the
    /// kernel.
    pub gaps: crate::calibrate::gap::GapCounts,
    /// In-kernel: the ring handler's clock over the hits streamed before the probe
    /// went to the kernel (`--clock-seconds`), kept across resets: how cold the target
    /// runs its hits, not a measurement of the window.
    pub streamed_clock: Option<Histogram<u64>>,
}

/// How far back the per-probe time series reaches.
pub(crate) const HISTORY_SPAN: Duration = Duration::from_secs(60);
/// At most this many history points are kept per probe, whatever the interval.
const HISTORY_MAX_POINTS: usize = 600;

/// Argument values captured with one hit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CapturedArgs {
    pub count: u8,
    /// Bit i set: argument i could not be read.
    pub faulted: u32,
    pub values: [u64; MAX_ARGS],
}

impl CapturedArgs {
    /// The captured values, `None` where reading faulted.
    pub(crate) fn values(&self) -> impl Iterator<Item = Option<u64>> + '_ {
        self.values
            .iter()
            .take(self.count as usize)
            .enumerate()
            .map(|(i, v)| (self.faulted & (1 << i) == 0).then_some(*v))
    }
}

impl Default for ProbeAggregate {
    fn default() -> Self {
        Self {
            received: 0,
            dropped: 0,
            handler_ns: LiveHistogram::default(),
            interval_ns: LiveHistogram::default(),
            rate: RateWindow::new(Duration::from_secs(1)),
            last_args: None,
            threads: Default::default(),
            thread_drops: Default::default(),
            thread_drops_base: Default::default(),
            processes: Default::default(),
            mode: DeliveryMode::Ring,
            sampled_hits: 0,
            counted_seen: 0,
            kernel_hits: 0,
            kernel_timed: 0,
            kernel_seen: Vec::new(),
            measured: Measured::default(),
            dropped_base: 0,
            hits_at_roll: 0,
            dropped_at_roll: 0,
            last_interval: IntervalSummary::default(),
            last_interval_curve: PercentileCurve::default(),
            history: VecDeque::new(),
            name: String::new(),
            keys: None,
            moved: None,
        }
    }
}

impl ProbeAggregate {
    /// Which hits [`Self::threads`] counts.
    pub(crate) fn threads_cover(&self) -> ThreadsCover {
        if self.mode == DeliveryMode::Sample || self.sampled_hits > 0 {
            ThreadsCover::Sampled
        } else if self.mode == DeliveryMode::KernelHistogram || self.kernel_hits > 0 {
            if self.received == 0 && self.dropped == 0 {
                ThreadsCover::NoneInKernelMode
            } else {
                ThreadsCover::BeforeKernelMode
            }
        } else if self.dropped > 0
            && self.threads_dropped().map(|(_, n)| n).sum::<u64>() != self.dropped
        {
            // Drops whose thread the kernel's table forgot (more threads dropping than
            // it holds), or counted between two reads of the kernel's maps.
            ThreadsCover::NotDropped
        } else {
            ThreadsCover::EveryHit
        }
    }

    /// Hits the probe took. Records received plus those dropped; in SAMPLE mode the
    /// kernel's count of every hit instead; plus hits counted in the in-kernel histogram.
    pub(crate) fn hits(&self) -> u64 {
        let streamed = if self.mode == DeliveryMode::Sample {
            self.sampled_hits
        } else {
            self.received + self.dropped
        };
        streamed + self.kernel_hits
    }

    /// Takes the kernel's count of every hit in SAMPLE or KERNEL_HISTOGRAM mode
    /// (cumulative in the kernel); the rate follows it rather than the records or the
    /// timed hits.
    pub(crate) fn set_counted_hits(&mut self, total: u64) {
        let new = total.saturating_sub(self.counted_seen);
        self.counted_seen = total;
        if self.mode == DeliveryMode::Sample {
            self.sampled_hits += new;
        } else {
            self.kernel_hits += new;
        }
        self.rate.add(new);
    }

    /// Takes the kernel's cumulative counts as the starting point, counting none of them:
    /// they were hit before the measurement window opened.
    pub(crate) fn baseline_kernel_counts(&mut self, counted_total: u64, histogram_totals: &[u64]) {
        self.counted_seen = counted_total;
        // 592 counters: kept only once the kernel counted something.
        self.kernel_seen = if histogram_totals.iter().all(|&n| n == 0) {
            Vec::new()
        } else {
            histogram_totals.to_vec()
        };
    }

    /// Folds in the in-kernel histogram's bucket totals (cumulative in the kernel): each
    /// new timed hit is recorded at its bucket's midpoint, within 3.2% of its value.
    pub(crate) fn apply_kernel_histogram(&mut self, totals: &[u64]) {
        if self.kernel_seen.is_empty() && totals.iter().all(|&n| n == 0) {
            return;
        }
        if self.kernel_seen.len() != totals.len() {
            self.kernel_seen = vec![0; totals.len()];
        }
        for (index, (total, seen)) in totals.iter().zip(self.kernel_seen.iter_mut()).enumerate() {
            let new = total.saturating_sub(*seen);
            if new == 0 {
                continue;
            }
            *seen = *total;
            let (low, high) = khist::bounds(index as u32);
            let ns = low + (high - low) / 2;
            self.handler_ns.record(ns, new);
            self.interval_ns.record(ns, new);
            self.kernel_timed += new;
        }
    }

    /// Switched to the kernel by auto mode: the ring handler's clock so far prices its
    /// in-kernel hits (`--assume clock`); its handler histogram goes on holding both,
    /// as said in the user guide.
    pub(crate) fn keep_streamed_clock(&mut self) {
        if !self.handler_ns.is_empty() {
            self.measured.streamed_clock = Some((*self.handler_ns).clone());
        }
    }

    /// Ends the clock phase of an in-kernel run (`--clock-seconds`): the ring handler's
    /// times of the hits streamed so far become the probe's streamed clock, which prices
    /// its in-kernel hits, and the handler histogram starts over with the in-kernel
    /// handler's own. The hits stay counted.
    pub(crate) fn end_clock_phase(&mut self) {
        if let Some(streamed) = self.handler_ns.take().filter(|h| !h.is_empty()) {
            self.measured.streamed_clock = Some(streamed);
        }
        self.mode = DeliveryMode::KernelHistogram;
    }

    /// Share of the in-kernel hits whose handler was timed, for pricing them: below 1
    /// only with --time-every (records always carry their handler time).
    pub(crate) fn timed_share(&self) -> f64 {
        if self.kernel_hits == 0 {
            return 1.0;
        }
        self.kernel_timed.min(self.kernel_hits) as f64 / self.kernel_hits as f64
    }

    pub(crate) fn summary(&self) -> HandlerSummary {
        HandlerSummary::of(&self.handler_ns)
    }

    /// Takes the kernel's cumulative drop count; drops before the last reset do not count.
    /// A dropped hit is a hit: the rate holds it (in SAMPLE mode it follows the kernel's
    /// count of every hit instead), so a run dropping half its records is not priced at
    /// half its rate, and auto mode weighs what the ring was offered.
    pub(crate) fn set_dropped_total(&mut self, total: u64) {
        let dropped = total.saturating_sub(self.dropped_base);
        if self.mode != DeliveryMode::Sample {
            self.rate.add(dropped.saturating_sub(self.dropped));
        }
        self.dropped = dropped;
    }

    /// Takes the kernel's cumulative count of `tid`'s dropped hits.
    pub(crate) fn set_thread_dropped_total(&mut self, tid: u32, total: u64) {
        self.thread_drops.insert(tid, total);
    }

    /// Dropped hits per thread since attach (or the last reset), unsorted; threads
    /// with none left out.
    pub(crate) fn threads_dropped(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.thread_drops.iter().filter_map(|(&tid, &total)| {
            let n = total.saturating_sub(self.thread_drops_base.get(&tid).copied().unwrap_or(0));
            (n > 0).then_some((tid, n))
        })
    }

    /// Forgets everything measured; the kernel's cumulative counts become the new zero.
    pub(super) fn reset(&mut self) {
        self.received = 0;
        self.threads.clear();
        self.processes.clear();
        self.dropped_base += self.dropped;
        self.dropped = 0;
        self.thread_drops_base = self.thread_drops.clone();
        self.handler_ns.clear();
        self.interval_ns.clear();
        self.rate = RateWindow::new(self.rate.window);
        // counted_seen and kernel_seen stay: they are the kernel's totals, now the baseline.
        self.measured.gaps.rebase();
        self.sampled_hits = 0;
        self.kernel_hits = 0;
        self.kernel_timed = 0;
        self.hits_at_roll = 0;
        self.dropped_at_roll = 0;
        self.last_interval = IntervalSummary::default();
        self.last_interval_curve = PercentileCurve::default();
        self.history.clear();
        self.threads.clear();
        if let Some(keys) = &mut self.keys {
            keys.reset();
        }
        // In the kernel from the new window's start: nothing of it was dropped before.
        if let Some(moved) = &mut self.moved {
            moved.after = Duration::ZERO;
            moved.run_dropped = 0;
        }
    }

    /// Closes a live interval that lasted `length`: its numbers become `last_interval`
    /// and a history point. The interval histogram itself is left for the caller (the
    /// interval log takes it, or [`Self::clear_interval`] drops it).
    pub(super) fn roll_interval(&mut self, length: Duration) {
        let hits = self.hits();
        let seconds = length.as_secs_f64();
        let interval_hits = hits.saturating_sub(self.hits_at_roll);
        let handler = HandlerSummary::of(&self.interval_ns);
        self.last_interval = IntervalSummary {
            length,
            hits: interval_hits,
            dropped: self.dropped.saturating_sub(self.dropped_at_roll),
            per_second: if seconds > 0.0 {
                interval_hits as f64 / seconds
            } else {
                0.0
            },
            handler,
        };
        self.last_interval_curve = PercentileCurve::of(&self.interval_ns);
        self.hits_at_roll = hits;
        self.dropped_at_roll = self.dropped;
        self.history.push_back(HistoryPoint {
            length,
            per_second: self.last_interval.per_second,
            p99_ns: (handler.count > 0).then_some(handler.p99),
        });
        let mut span: Duration = self.history.iter().map(|h| h.length).sum();
        while (span > HISTORY_SPAN || self.history.len() > HISTORY_MAX_POINTS)
            && let Some(oldest) = self.history.pop_front()
        {
            span = span.saturating_sub(oldest.length);
        }
    }

    /// Empties the interval histogram (when no interval log keeps it).
    pub(crate) fn clear_interval(&mut self) {
        self.interval_ns.clear();
    }

    pub(super) fn record(&mut self, handler_ns: u64, tid: u32, pid: Option<u32>) {
        self.received += 1;
        *self.threads.entry(tid).or_default() += 1;
        if let Some(pid) = pid {
            *self.processes.entry(pid).or_default() += 1;
        }
        // In SAMPLE mode the rate follows the kernel's count of every hit.
        if self.mode != DeliveryMode::Sample {
            self.rate.add(1);
        }
        // A zero-length window is possible with a coarse clock; HDR's lowest value is 1
        // (record_ns clamps).
        self.handler_ns.record(handler_ns, 1);
        self.interval_ns.record(handler_ns, 1);
    }

    /// Returns the histogram of the interval that just ended (`None`: no value was
    /// recorded in it) and starts a new one.
    pub(crate) fn take_interval(&mut self) -> Option<Histogram<u64>> {
        self.interval_ns.take()
    }
}
