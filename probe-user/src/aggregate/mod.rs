//! Aggregation: hit records into per-probe HDR histograms of handler time.
//!
//! Pure state and arithmetic, no I/O: the stream stage feeds it, the present stage reads
//! [`ProbeAggregate::summary`] and the histograms themselves.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

use hdrhistogram::Histogram;
use probe_common::{HitEvent, MAX_ARGS, khist};

use crate::delivery::DeliveryMode;
use crate::histogram::{HIGHEST_TRACKABLE_NS, SIGNIFICANT_DIGITS, new_ns_histogram};
use crate::record::Record;
use serde::Serialize;

/// A histogram with the same precision (so the same buckets and percentiles) that starts
/// small and grows to the largest value recorded: what the aggregator keeps per probe.
/// With the full 60 s range up front, each took 221 KiB and every probe two, touched or
/// not (1000 probes: 640 MiB of RSS).
fn new_live_ns_histogram() -> Histogram<u64> {
    // The precision is a constant known to be valid, so creation cannot fail.
    Histogram::new(SIGNIFICANT_DIGITS).expect("constant histogram precision is valid")
}

/// `hist` with probetop's full bounds ([`new_ns_histogram`]), as reports carry it.
pub fn full_range(hist: &Histogram<u64>) -> Histogram<u64> {
    let mut full = new_ns_histogram();
    // Values are clamped into the full range as they are recorded, so adding cannot
    // fail; should it, the counts are copied one value at a time, clamped.
    if full.add(hist).is_err() {
        for v in hist.iter_recorded() {
            full.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
    }
    full
}

/// Records `count` hits of `ns` (clamped to 1..=[`HIGHEST_TRACKABLE_NS`]), growing `hist`
/// as needed: `saturating_record` never grows a histogram.
fn record_ns(hist: &mut Histogram<u64>, ns: u64, count: u64) {
    let ns = ns.clamp(1, HIGHEST_TRACKABLE_NS);
    // Growing fails only if the counts array could not be addressed, far beyond 60 s.
    if hist.record_n(ns, count).is_err() {
        hist.saturating_record_n(ns, count);
    }
}

/// Percentile summary of one histogram, as shown and exported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HandlerSummary {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl HandlerSummary {
    /// Summarises `hist`; all zero when it is empty.
    pub fn of(hist: &Histogram<u64>) -> Self {
        if hist.is_empty() {
            return Self::default();
        }
        Self {
            count: hist.len(),
            min: hist.min(),
            mean: hist.mean(),
            p50: hist.value_at_quantile(0.50),
            p90: hist.value_at_quantile(0.90),
            p99: hist.value_at_quantile(0.99),
            p999: hist.value_at_quantile(0.999),
            max: hist.max(),
        }
    }
}

/// Hits per second over a sliding window, from per-tick counts.
#[derive(Debug, Clone)]
pub struct RateWindow {
    window: Duration,
    /// (elapsed time of the tick, hits counted in it), oldest first.
    ticks: std::collections::VecDeque<(Duration, u64)>,
    current: u64,
}

impl RateWindow {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            ticks: Default::default(),
            current: 0,
        }
    }

    pub fn add(&mut self, hits: u64) {
        self.current += hits;
    }

    /// Closes the current tick, which lasted `elapsed`, and drops ticks older than the window.
    pub fn tick(&mut self, elapsed: Duration) {
        self.ticks
            .push_back((elapsed, std::mem::take(&mut self.current)));
        let mut span: Duration = self.ticks.iter().map(|(d, _)| *d).sum();
        while span > self.window && self.ticks.len() > 1 {
            if let Some((d, _)) = self.ticks.pop_front() {
                span -= d;
            }
        }
    }

    /// Hits per second over the closed ticks in the window; 0 before the first tick.
    pub fn per_second(&self) -> f64 {
        let span: Duration = self.ticks.iter().map(|(d, _)| *d).sum();
        if span.is_zero() {
            return 0.0;
        }
        let hits: u64 = self.ticks.iter().map(|(_, h)| *h).sum();
        hits as f64 / span.as_secs_f64()
    }
}

/// Hits per thread id. Updated on every record, so hashed with [`TidHasher`]: the default
/// SipHash cost a third of recording a hit.
pub type ThreadCounts = HashMap<u32, u64, BuildHasherDefault<TidHasher>>;

/// A multiplicative hash of a thread id: thread ids are the kernel's, not chosen to
/// collide, so the flooding resistance of SipHash buys nothing here.
#[derive(Debug, Default, Clone, Copy)]
pub struct TidHasher(u64);

impl Hasher for TidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Everything measured for one probe.
#[derive(Debug, Clone)]
pub struct ProbeAggregate {
    /// Hit records received.
    pub received: u64,
    /// Hits whose record the kernel could not queue (ring buffer full), since attach or
    /// the last reset.
    pub dropped: u64,
    /// The kernel's cumulative drop count at the last reset.
    dropped_base: u64,
    /// Handler time of every received hit since attach (or the last reset).
    pub handler_ns: Histogram<u64>,
    /// Handler time since the last interval rollover (`take_interval`).
    pub interval_ns: Histogram<u64>,
    pub rate: RateWindow,
    /// Argument values of the latest hit that captured any.
    pub last_args: Option<CapturedArgs>,
    /// Records received per thread id (threads created after attach included).
    pub threads: ThreadCounts,
    /// Records received per process id (tgid): several processes share a probe with
    /// `--follow-forks`, `--cgroup` or several `--pid`.
    pub processes: ThreadCounts,
    /// The kernel's cumulative count of dropped hits per thread id (`THREAD_DROPS`).
    thread_drops: ThreadCounts,
    /// [`Self::thread_drops`] at the last reset.
    thread_drops_base: ThreadCounts,
    /// How hits reach user space now.
    pub mode: DeliveryMode,
    /// SAMPLE mode: every hit in the window, as the kernel counted them.
    pub sampled_hits: u64,
    /// The kernel's cumulative count of every hit (SAMPLE and KERNEL_HISTOGRAM modes) at
    /// the last read, to take deltas.
    counted_seen: u64,
    /// Hits counted in the kernel in KERNEL_HISTOGRAM mode.
    pub kernel_hits: u64,
    /// Of those, the hits whose handler was timed (`--time-every`) and went into the
    /// in-kernel histogram; `handler_ns` holds their times.
    pub kernel_timed: u64,
    /// The in-kernel histogram's bucket totals at the last read, to take deltas.
    kernel_seen: Vec<u64>,
    /// Cost class, calibration basis and measured dispatch: the whole cost of a hit.
    pub cost: crate::cost::ProbeCost,
    /// `hits()` and `dropped` when the last live interval closed, to take deltas.
    hits_at_roll: u64,
    dropped_at_roll: u64,
    /// The last closed live interval ([`Aggregator::roll_interval`]).
    pub last_interval: IntervalSummary,
    /// Its percentile distribution.
    pub last_interval_curve: PercentileCurve,
    /// One point per closed live interval, oldest first, over the last [`HISTORY_SPAN`].
    pub history: VecDeque<HistoryPoint>,
    /// The probe as its row names it (`usdt:fixture:tick`), for notices about it; empty
    /// when unknown.
    pub name: String,
}

/// How far back the per-probe time series reaches.
pub const HISTORY_SPAN: Duration = Duration::from_secs(60);
/// At most this many history points are kept per probe, whatever the interval.
const HISTORY_MAX_POINTS: usize = 600;

/// Argument values captured with one hit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapturedArgs {
    pub count: u8,
    /// Bit i set: argument i could not be read.
    pub faulted: u32,
    pub values: [u64; MAX_ARGS],
}

impl CapturedArgs {
    /// The captured values, `None` where reading faulted.
    pub fn values(&self) -> impl Iterator<Item = Option<u64>> + '_ {
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
            handler_ns: new_live_ns_histogram(),
            interval_ns: new_live_ns_histogram(),
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
            cost: Default::default(),
            dropped_base: 0,
            hits_at_roll: 0,
            dropped_at_roll: 0,
            last_interval: IntervalSummary::default(),
            last_interval_curve: PercentileCurve::default(),
            history: VecDeque::new(),
            name: String::new(),
        }
    }
}

/// Which of a probe's hits its per-thread counts hold: they are counted from the
/// records probetop receives, so hits that reach it only as a kernel count are in none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadsCover {
    /// Every hit.
    EveryHit,
    /// Every hit but the dropped ones (a full ring buffer).
    NotDropped,
    /// The streamed sample only (`--mode sample`: one hit in --sample-every).
    Sampled,
    /// The hits before the probe was switched to the in-kernel histogram (`--mode auto`).
    BeforeKernelMode,
    /// None: the probe was aggregated in the kernel from the start (`--mode kernel`).
    NoneInKernelMode,
}

impl ThreadsCover {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EveryHit => "every-hit",
            Self::NotDropped => "not-dropped",
            Self::Sampled => "sampled",
            Self::BeforeKernelMode => "before-kernel-mode",
            Self::NoneInKernelMode => "none-in-kernel-mode",
        }
    }
}

impl ProbeAggregate {
    /// Which hits [`Self::threads`] counts.
    pub fn threads_cover(&self) -> ThreadsCover {
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
    pub fn hits(&self) -> u64 {
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
    pub fn set_counted_hits(&mut self, total: u64) {
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
    pub fn baseline_kernel_counts(&mut self, counted_total: u64, histogram_totals: &[u64]) {
        self.counted_seen = counted_total;
        self.kernel_seen = histogram_totals.to_vec();
    }

    /// Folds in the in-kernel histogram's bucket totals (cumulative in the kernel): each
    /// new timed hit is recorded at its bucket's midpoint, within 3.2% of its value.
    pub fn apply_kernel_histogram(&mut self, totals: &[u64]) {
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
            record_ns(&mut self.handler_ns, ns, new);
            record_ns(&mut self.interval_ns, ns, new);
            self.kernel_timed += new;
        }
    }

    /// Share of the in-kernel hits whose handler was timed, for pricing them: below 1
    /// only with --time-every (records always carry their handler time).
    pub fn timed_share(&self) -> f64 {
        if self.kernel_hits == 0 {
            return 1.0;
        }
        self.kernel_timed.min(self.kernel_hits) as f64 / self.kernel_hits as f64
    }

    pub fn summary(&self) -> HandlerSummary {
        HandlerSummary::of(&self.handler_ns)
    }

    /// Takes the kernel's cumulative drop count; drops before the last reset do not count.
    pub fn set_dropped_total(&mut self, total: u64) {
        self.dropped = total.saturating_sub(self.dropped_base);
    }

    /// Takes the kernel's cumulative count of `tid`'s dropped hits.
    pub fn set_thread_dropped_total(&mut self, tid: u32, total: u64) {
        self.thread_drops.insert(tid, total);
    }

    /// Dropped hits per thread since attach (or the last reset), unsorted; threads
    /// with none left out.
    pub fn threads_dropped(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.thread_drops.iter().filter_map(|(&tid, &total)| {
            let n = total.saturating_sub(self.thread_drops_base.get(&tid).copied().unwrap_or(0));
            (n > 0).then_some((tid, n))
        })
    }

    /// Forgets everything measured; the kernel's cumulative counts become the new zero.
    fn reset(&mut self) {
        self.received = 0;
        self.threads.clear();
        self.processes.clear();
        self.dropped_base += self.dropped;
        self.dropped = 0;
        self.thread_drops_base = self.thread_drops.clone();
        self.handler_ns.reset();
        self.interval_ns.reset();
        self.rate = RateWindow::new(self.rate.window);
        // counted_seen and kernel_seen stay: they are the kernel's totals, now the baseline.
        self.cost.gaps.rebase();
        self.sampled_hits = 0;
        self.kernel_hits = 0;
        self.kernel_timed = 0;
        self.hits_at_roll = 0;
        self.dropped_at_roll = 0;
        self.last_interval = IntervalSummary::default();
        self.last_interval_curve = PercentileCurve::default();
        self.history.clear();
        self.threads.clear();
    }

    /// Closes a live interval that lasted `length`: its numbers become `last_interval`
    /// and a history point. The interval histogram itself is left for the caller (the
    /// interval log takes it, or [`Self::clear_interval`] drops it).
    fn roll_interval(&mut self, length: Duration) {
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
    pub fn clear_interval(&mut self) {
        self.interval_ns.reset();
    }

    fn record(&mut self, handler_ns: u64, tid: u32, pid: Option<u32>) {
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
        record_ns(&mut self.handler_ns, handler_ns, 1);
        record_ns(&mut self.interval_ns, handler_ns, 1);
    }

    /// Returns the histogram of the interval that just ended and starts a new one.
    pub fn take_interval(&mut self) -> Histogram<u64> {
        std::mem::replace(&mut self.interval_ns, new_live_ns_histogram())
    }
}

/// Per-probe aggregates, indexed by probe id (the BPF cookie).
///
/// Only hits inside the measurement window count, so every probe is measured over the
/// same span although the kernel attaches and detaches them one at a time.
#[derive(Debug, Clone, Default)]
pub struct Aggregator {
    probes: Vec<ProbeAggregate>,
    /// Records whose probe id is not in the table: a bug if ever non-zero.
    pub unknown_records: u64,
    /// Hits before the window opened or after it closed, not counted anywhere else.
    pub outside_window: u64,
    /// Things the user should know about the run (mode switches), oldest first.
    pub notices: Vec<String>,
    /// Kernel dispatches in the target that matched none of the probes (another
    /// tool's uprobes), when dispatch is measured.
    pub other_dispatch: Option<crate::cost::dispatch::SlotTotal>,
    /// Which kernel functions timed the dispatches, when dispatch is measured.
    pub dispatch_hooks: Option<crate::cost::dispatch::Hooks>,
    /// CLOCK_MONOTONIC ns: the window opens once every probe is attached ...
    window_start_ns: u64,
    /// ... and closes when measuring stops.
    window_end_ns: u64,
    /// Hot or cold: which calibration prices the hits (`--assume`), and what auto
    /// reads of the target.
    pub assumer: crate::cost::assume::Assumer,
    /// Count records per process too (several processes probed); off, a hit costs
    /// the collector no second map update.
    pub count_processes: bool,
}

impl Aggregator {
    pub fn new(probe_count: usize) -> Self {
        Self {
            probes: vec![ProbeAggregate::default(); probe_count],
            unknown_records: 0,
            outside_window: 0,
            notices: Vec::new(),
            other_dispatch: None,
            dispatch_hooks: None,
            window_start_ns: 0,
            window_end_ns: u64::MAX,
            assumer: Default::default(),
            count_processes: false,
        }
    }

    /// Counts only hits whose handler started at or after `ktime_ns` (CLOCK_MONOTONIC).
    pub fn open_window(&mut self, ktime_ns: u64) {
        self.window_start_ns = ktime_ns;
        self.assumer.open();
    }

    /// Counts only hits whose handler started at or before `ktime_ns`.
    pub fn close_window(&mut self, ktime_ns: u64) {
        self.window_end_ns = ktime_ns;
    }

    /// Records a ring buffer record of either kind.
    pub fn record_any(&mut self, record: &Record) {
        match record {
            Record::Hit(hit) => {
                self.record(hit);
            }
            Record::HitWithArgs(event) => {
                if self.record(&event.hit)
                    && let Some(probe) = self.probes.get_mut(event.hit.probe_id as usize)
                {
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
    pub fn record(&mut self, event: &HitEvent) -> bool {
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
    pub fn set_dropped(&mut self, probe_id: usize, dropped: u64) {
        if let Some(probe) = self.probes.get_mut(probe_id) {
            probe.set_dropped_total(dropped);
        }
    }

    /// Closes a rate tick of length `elapsed` for every probe.
    pub fn tick(&mut self, elapsed: Duration) {
        for probe in &mut self.probes {
            probe.rate.tick(elapsed);
        }
    }

    pub fn probes(&self) -> &[ProbeAggregate] {
        &self.probes
    }

    /// Appends probes (of a program the target exec'd); returns the id of the first.
    /// They count from now on, within the same window as the others.
    pub fn add_probes(&mut self, probes: Vec<ProbeAggregate>) -> usize {
        let first = self.probes.len();
        self.probes.extend(probes);
        first
    }

    pub fn probes_mut(&mut self) -> &mut [ProbeAggregate] {
        &mut self.probes
    }

    /// Total records received over all probes.
    pub fn received(&self) -> u64 {
        self.probes.iter().map(|p| p.received).sum()
    }

    /// CLOCK_MONOTONIC ns at which the measurement window opened (or was last reset).
    pub fn window_start_ns(&self) -> u64 {
        self.window_start_ns
    }

    /// Restarts every histogram and count as if the window had just opened at `ktime_ns`;
    /// notices stay.
    pub fn reset(&mut self, ktime_ns: u64) {
        self.window_start_ns = ktime_ns;
        self.assumer.open();
        for probe in &mut self.probes {
            probe.reset();
        }
    }

    /// Closes a live interval of `length` for every probe (see
    /// [`ProbeAggregate::roll_interval`]).
    pub fn roll_interval(&mut self, length: Duration) {
        for probe in &mut self.probes {
            probe.roll_interval(length);
        }
    }
}

/// What a report needs of one probe, copied out of the collector while it runs (the
/// interval histogram and the UI's series stay behind: half the memory of a clone).
#[derive(Debug, Clone)]
pub struct ProbeMeasurements {
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
    pub handler_ns: Histogram<u64>,
    /// Share of the in-kernel hits whose handler was timed (below 1 with --time-every).
    pub timed_share: f64,
    /// Cost class, calibration basis and measured dispatch.
    pub cost: crate::cost::ProbeCost,
    /// Hot or cold, decided over the run so far (the same for every probe).
    pub assumes: crate::cost::assume::Assumption,
}

/// Everything a report needs, measured so far.
#[derive(Debug, Clone, Default)]
pub struct Measurements {
    /// CLOCK_MONOTONIC ns at which the window opened (or was last reset).
    pub window_start_ns: u64,
    pub probes: Vec<ProbeMeasurements>,
    /// Hot or cold over the run so far, and why.
    pub assumption: Option<crate::cost::assume::Decision>,
}

impl Aggregator {
    /// A copy of what reports need.
    pub fn measurements(&self) -> Measurements {
        let decision = self
            .assumer
            .run(self.probes.iter().map(ProbeAggregate::hits).sum());
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
                    cost: p.cost.clone(),
                    assumes: decision.assumes,
                })
                .collect(),
            assumption: Some(decision),
        }
    }
}

/// Per-interval histograms of every probe, for interval logs. Kept compressed (V2 +
/// DEFLATE, a few hundred bytes each) because a long run has many intervals; recorded
/// only when an interval log is exported.
#[derive(Debug, Clone, Default)]
pub struct IntervalLog {
    entries: Vec<IntervalEntry>,
}

#[derive(Debug, Clone)]
struct IntervalEntry {
    probe_id: u32,
    start_s: f64,
    length_s: f64,
    compressed: Vec<u8>,
}

/// One interval's histogram of one probe, decompressed.
#[derive(Debug, Clone)]
pub struct IntervalHistogram {
    pub start_s: f64,
    pub length_s: f64,
    pub handler_ns: Histogram<u64>,
}

impl IntervalLog {
    /// Closes the interval `[start_s, start_s + length_s)` of every probe in `aggregator`
    /// that had hits.
    pub fn close_interval(&mut self, aggregator: &mut Aggregator, start_s: f64, length_s: f64) {
        use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
        let mut serializer = V2DeflateSerializer::new();
        for (probe_id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
            let histogram = probe.take_interval();
            if histogram.is_empty() {
                continue;
            }
            let mut compressed = Vec::new();
            // Serializing into memory fails only on a histogram too large to encode,
            // which these bounds rule out; such an interval would be left out.
            if serializer.serialize(&histogram, &mut compressed).is_ok() {
                self.entries.push(IntervalEntry {
                    probe_id: probe_id as u32,
                    start_s,
                    length_s,
                    compressed,
                });
            }
        }
    }

    /// The intervals of one probe, oldest first.
    pub fn of_probe(&self, probe_id: u32) -> Vec<IntervalHistogram> {
        use hdrhistogram::serialization::Deserializer;
        let mut deserializer = Deserializer::new();
        self.entries
            .iter()
            .filter(|e| e.probe_id == probe_id)
            .filter_map(|e| {
                let handler_ns = deserializer
                    .deserialize(&mut std::io::Cursor::new(&e.compressed))
                    .ok()?;
                Some(IntervalHistogram {
                    start_s: e.start_s,
                    length_s: e.length_s,
                    handler_ns,
                })
            })
            .collect()
    }

    /// Bytes held, for memory accounting.
    pub fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.compressed.len()).sum()
    }
}

/// What one probe looks like at a moment: the numbers the UI shows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProbeSnapshot {
    /// How the probe's hits reach user space now.
    pub mode: DeliveryMode,
    pub hits: u64,
    pub dropped: u64,
    /// Hits per second over the last second.
    pub per_second: f64,
    pub handler: HandlerSummary,
    /// What one hit costs the target in all, trap and return included, ns; `None`
    /// until measured.
    pub whole_cost_ns: Option<f64>,
    /// Share of one CPU the probe's hits cost the target (0.5 = half a CPU); `None`
    /// until measured.
    pub cpu_share: Option<f64>,
    /// Argument values of the latest hit that captured any (`--args`).
    pub last_args: Option<CapturedArgs>,
    /// The last closed live interval.
    pub interval: IntervalSummary,
    /// The median gap before its hits since the previous hit on their CPU, us, when
    /// its hits are priced by it.
    pub gap_median_us: Option<f64>,
}

/// The numbers of one probe over one closed live interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IntervalSummary {
    /// How long the interval lasted; zero before the first one closed.
    pub length: Duration,
    pub hits: u64,
    pub dropped: u64,
    pub per_second: f64,
    pub handler: HandlerSummary,
}

/// One point of a probe's time series: one closed live interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HistoryPoint {
    pub length: Duration,
    pub per_second: f64,
    /// `None` when the interval had no recorded handler time.
    pub p99_ns: Option<u64>,
}

/// Steps per decade of `1/(1-p)` at which [`PercentileCurve`] samples.
pub const CURVE_STEPS_PER_DECADE: u32 = 8;
/// Decades of `1/(1-p)` sampled: 5 reaches the 99.999th percentile.
pub const CURVE_DECADES: u32 = 5;

/// A percentile distribution sampled as HdrHistogram's plotter draws it: evenly on the
/// `log10(1/(1-p))` axis, from the 0th to the 99.999th percentile.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PercentileCurve {
    /// (percentile in 0..=100, value in ns), ascending; empty without hits.
    pub points: Vec<(f64, u64)>,
    /// The largest value recorded (the 100th percentile).
    pub max: u64,
    pub count: u64,
}

impl PercentileCurve {
    /// The quantiles sampled (0..1), ascending.
    pub fn quantiles() -> impl Iterator<Item = f64> {
        (0..=CURVE_DECADES * CURVE_STEPS_PER_DECADE)
            .map(|i| 1.0 - 10f64.powf(-f64::from(i) / f64::from(CURVE_STEPS_PER_DECADE)))
    }

    /// Samples `hist` in one pass over its counts.
    pub fn of(hist: &Histogram<u64>) -> Self {
        if hist.is_empty() {
            return Self::default();
        }
        let points = Self::quantiles()
            .zip(hist.value_at_quantiles(Self::quantiles()))
            .map(|(q, v)| (q * 100.0, v))
            .collect();
        Self {
            points,
            max: hist.max(),
            count: hist.len(),
        }
    }
}

/// Details of the probe the UI has selected, computed only for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FocusDetail {
    pub probe_id: u32,
    /// The distribution since attach (or reset).
    pub cumulative: PercentileCurve,
    /// The distribution of the last closed live interval.
    pub interval: PercentileCurve,
    /// hits/s and p99 per closed live interval, oldest first.
    pub history: Vec<HistoryPoint>,
    /// Records per process, most first, at most [`FOCUS_PROCESSES`] of them.
    pub processes: Vec<(u32, u64)>,
    /// How many processes the probe's records came from.
    pub process_count: usize,
}

/// Processes listed in a [`FocusDetail`].
pub const FOCUS_PROCESSES: usize = 8;

/// probetop's own use of the machine, measured by the collector.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OwnUsage {
    /// Share of one CPU over the last measurement (0.5 = half a CPU).
    pub cpu_share: Option<f64>,
    /// Resident memory, bytes.
    pub rss_bytes: Option<u64>,
}

/// Every probe at a moment, plus totals; cheap to clone and send to the UI.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Time since the probes were attached (or the last reset).
    pub elapsed: Duration,
    /// The latest notice, if any.
    pub notice: Option<String>,
    pub probes: Vec<ProbeSnapshot>,
    /// Records received per second over the last second, all probes.
    pub events_per_second: f64,
    pub received: u64,
    pub dropped: u64,
    /// Length of a live interval (the UI's last-interval view and time series).
    pub interval: Duration,
    /// The selected probe's distributions and time series.
    pub focus: Option<FocusDetail>,
    /// probetop's own CPU and memory.
    pub own: OwnUsage,
    /// Hot or cold, decided over the last second, and why.
    pub assumption: Option<crate::cost::assume::Decision>,
}

impl Snapshot {
    /// Share of one CPU all probes take from the target: the sum over the probes with
    /// an estimate; `None` when none has one.
    pub fn cpu_share(&self) -> Option<f64> {
        let shares = self.probes.iter().filter_map(|p| p.cpu_share);
        shares.fold(None, |total, share| Some(total.unwrap_or(0.0) + share))
    }
}

impl Aggregator {
    /// The current numbers of every probe.
    pub fn snapshot(&self, elapsed: Duration) -> Snapshot {
        let mut decision = self
            .assumer
            .live(self.probes.iter().map(|p| p.rate.per_second()).sum());
        let mut priced_hot = false;
        let probes: Vec<ProbeSnapshot> = self
            .probes
            .iter()
            .map(|p| {
                let handler = p.summary();
                let per_second = p.rate.per_second();
                let whole_cost_ns = p
                    .cost
                    .estimate(
                        p.mode,
                        (handler.count > 0).then_some(handler.mean),
                        p.timed_share(),
                        decision.assumes,
                    )
                    .map(|e| {
                        priced_hot |= e.assumes != decision.assumes;
                        (e.whole_ns, e.assumes)
                    });
                let gap_median_us = match whole_cost_ns {
                    Some((_, crate::cost::assume::Assumption::Gap)) => {
                        p.cost.gaps.summary().map(|g| g.median_us)
                    }
                    _ => None,
                };
                let whole_cost_ns = whole_cost_ns.map(|(ns, _)| ns);
                ProbeSnapshot {
                    mode: p.mode,
                    hits: p.hits(),
                    dropped: p.dropped,
                    per_second,
                    handler,
                    whole_cost_ns,
                    cpu_share: whole_cost_ns.map(|ns| crate::cost::cpu_share(ns, per_second)),
                    last_args: p.last_args,
                    interval: p.last_interval,
                    gap_median_us,
                }
            })
            .collect();
        match decision.assumes {
            // A calibration without cold rows prices every hit hot.
            crate::cost::assume::Assumption::Cold if priced_hot => {
                decision.assumes = crate::cost::assume::Assumption::Hot;
                decision.why.push_str("; the calibration has no cold rows");
            }
            // Gaps are still being counted (in-kernel mode samples them).
            crate::cost::assume::Assumption::Gap if priced_hot => {
                decision
                    .why
                    .push_str("; hot where too few gaps are counted yet");
            }
            _ => {}
        }
        Snapshot {
            elapsed,
            notice: self.notices.last().cloned(),
            events_per_second: probes.iter().map(|p| p.per_second).sum(),
            received: self.received(),
            dropped: probes.iter().map(|p| p.dropped).sum(),
            probes,
            interval: Duration::ZERO,
            focus: None,
            own: OwnUsage::default(),
            assumption: Some(decision),
        }
    }

    /// The distributions and time series of probe `probe_id`; `None` for an unknown id.
    pub fn focus_detail(&self, probe_id: u32) -> Option<FocusDetail> {
        let probe = self.probes.get(probe_id as usize)?;
        Some(FocusDetail {
            probe_id,
            cumulative: PercentileCurve::of(&probe.handler_ns),
            interval: probe.last_interval_curve.clone(),
            history: probe.history.iter().copied().collect(),
            processes: {
                let mut processes: Vec<(u32, u64)> =
                    probe.processes.iter().map(|(p, n)| (*p, *n)).collect();
                processes.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                processes.truncate(FOCUS_PROCESSES);
                processes
            },
            process_count: probe.processes.len(),
        })
    }
}

/// Hands each probe its cost knowledge; `dispatch_on` readies the live measurement.
pub fn install_costs(
    aggregator: &mut Aggregator,
    costs: Vec<crate::cost::ProbeCost>,
    dispatch_on: bool,
) {
    for (probe, mut cost) in aggregator.probes_mut().iter_mut().zip(costs) {
        if dispatch_on {
            cost.dispatch = Some(Default::default());
        }
        probe.cost = cost;
    }
    if dispatch_on {
        aggregator.other_dispatch = Some(Default::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(probe_id: u32, handler_ns: u64) -> HitEvent {
        HitEvent {
            probe_id,
            handler_ns,
            ..Default::default()
        }
    }

    #[test]
    fn records_are_split_by_process_only_when_asked() {
        let event = |pid| HitEvent {
            pid,
            tid: pid + 1,
            ..hit(0, 10)
        };
        let mut agg = Aggregator::new(1);
        agg.record(&event(7));
        assert!(agg.measurements().probes[0].processes.is_empty());
        agg.count_processes = true;
        for pid in [9, 7, 9] {
            agg.record(&event(pid));
        }
        assert_eq!(agg.measurements().probes[0].processes, vec![(7, 1), (9, 2)]);
        let focus = agg.focus_detail(0).expect("probe 0");
        assert_eq!(
            (focus.processes, focus.process_count),
            (vec![(9, 2), (7, 1)], 2)
        );
    }

    #[test]
    fn summary_of_known_values() {
        let mut agg = Aggregator::new(1);
        for ns in 1..=1000 {
            agg.record(&hit(0, ns));
        }
        let s = agg.probes()[0].summary();
        assert_eq!(s.count, 1000);
        assert_eq!(s.min, 1);
        assert_eq!(s.max, 1000);
        assert_eq!(s.p50, 500);
        assert_eq!(s.p90, 900);
        assert_eq!(s.p99, 990);
        assert_eq!(s.p999, 999);
        assert!((s.mean - 500.5).abs() < 0.5, "mean {}", s.mean);
    }

    #[test]
    fn empty_summary_is_zero() {
        assert_eq!(
            Aggregator::new(1).probes()[0].summary(),
            HandlerSummary::default()
        );
    }

    #[test]
    fn zero_handler_time_is_recorded_as_one() {
        let mut agg = Aggregator::new(1);
        agg.record(&hit(0, 0));
        assert_eq!(agg.probes()[0].summary().min, 1);
    }

    #[test]
    fn unknown_probe_is_counted_not_recorded() {
        let mut agg = Aggregator::new(2);
        agg.record(&hit(7, 10));
        assert_eq!(agg.unknown_records, 1);
        assert_eq!(agg.received(), 0);
    }

    #[test]
    fn only_hits_inside_the_window_count() {
        let mut agg = Aggregator::new(1);
        agg.open_window(100);
        agg.close_window(200);
        for ktime_ns in [99, 100, 150, 200, 201] {
            agg.record(&HitEvent {
                ktime_ns,
                handler_ns: 10,
                ..Default::default()
            });
        }
        assert_eq!(agg.received(), 3);
        assert_eq!(agg.outside_window, 2);
    }

    #[test]
    fn last_arguments_are_kept() {
        let mut agg = Aggregator::new(1);
        let event = probe_common::HitArgsEvent {
            hit: hit(0, 10),
            count: 3,
            faulted: 0b010,
            args: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
        };
        agg.record_any(&Record::HitWithArgs(event));
        let args = agg.probes()[0].last_args.expect("captured");
        assert_eq!(args.values().collect::<Vec<_>>(), [Some(1), None, Some(3)]);
        assert_eq!(agg.received(), 1);
    }

    #[test]
    fn kernel_histogram_deltas() {
        let mut probe = ProbeAggregate {
            mode: DeliveryMode::KernelHistogram,
            ..Default::default()
        };
        let mut totals = vec![0u64; khist::BUCKETS as usize];
        totals[khist::bucket(1000) as usize] = 5;
        probe.set_counted_hits(300);
        probe.apply_kernel_histogram(&totals);
        totals[khist::bucket(1000) as usize] = 7;
        totals[khist::bucket(20) as usize] = 1;
        probe.set_counted_hits(500);
        probe.apply_kernel_histogram(&totals);
        // Hits are the kernel's count; the histogram holds the timed ones.
        assert_eq!(probe.kernel_hits, 500);
        assert_eq!(probe.hits(), 500);
        assert_eq!(probe.kernel_timed, 8);
        assert_eq!(probe.handler_ns.len(), 8);
        assert_eq!(probe.handler_ns.min(), 20);
        // 1000 lies in 992..=1023, recorded at its midpoint.
        let max = probe.handler_ns.max();
        assert!((992..=1023).contains(&max), "{max}");
    }

    #[test]
    fn sampled_hits_count_every_hit() {
        let mut agg = Aggregator::new(1);
        agg.probes_mut()[0].mode = DeliveryMode::Sample;
        agg.record(&hit(0, 10));
        agg.probes_mut()[0].set_counted_hits(100);
        assert_eq!(agg.probes()[0].hits(), 100);
        assert_eq!(agg.probes()[0].received, 1);
        agg.tick(Duration::from_secs(1));
        assert!((agg.probes()[0].rate.per_second() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn interval_log_round_trips_every_count() {
        let mut agg = Aggregator::new(2);
        let mut log = IntervalLog::default();
        for ns in [100, 200, 300] {
            agg.record(&hit(0, ns));
        }
        log.close_interval(&mut agg, 0.0, 1.0);
        // Below 2048 every value is its own bucket at 3 significant digits.
        agg.record(&hit(0, 1500));
        agg.record(&hit(1, 7));
        log.close_interval(&mut agg, 1.0, 1.0);
        log.close_interval(&mut agg, 2.0, 1.0);
        let first = log.of_probe(0);
        assert_eq!(first.len(), 2, "empty intervals are not kept");
        assert_eq!(first[0].handler_ns.len(), 3);
        assert_eq!(first[0].handler_ns.max(), 300);
        assert_eq!(first[1].start_s, 1.0);
        assert_eq!(first[1].handler_ns.max(), 1500);
        let second = log.of_probe(1);
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].handler_ns.min(), 7);
        assert!(log.bytes() > 0);
    }

    #[test]
    fn hits_are_counted_per_thread() {
        let mut agg = Aggregator::new(1);
        for tid in [7, 8, 7] {
            agg.record(&HitEvent {
                tid,
                handler_ns: 1,
                ..Default::default()
            });
        }
        let threads = &agg.probes()[0].threads;
        assert_eq!((threads[&7], threads[&8], threads.len()), (2, 1, 2));
    }

    #[test]
    fn hits_include_drops() {
        let mut agg = Aggregator::new(1);
        agg.record(&hit(0, 5));
        agg.set_dropped(0, 3);
        assert_eq!(agg.probes()[0].hits(), 4);
    }

    #[test]
    fn drops_per_thread_count_from_a_reset() {
        let mut agg = Aggregator::new(1);
        agg.probes_mut()[0].set_thread_dropped_total(9, 3);
        agg.reset(0);
        assert!(agg.measurements().probes[0].threads_dropped.is_empty());
        agg.probes_mut()[0].set_thread_dropped_total(9, 5);
        agg.probes_mut()[0].set_thread_dropped_total(4, 1);
        assert_eq!(
            agg.measurements().probes[0].threads_dropped,
            [(4, 1), (9, 2)]
        );
    }

    #[test]
    fn threads_cover_says_which_hits_are_counted() {
        let mut agg = Aggregator::new(1);
        assert_eq!(agg.probes()[0].threads_cover(), ThreadsCover::EveryHit);
        agg.record(&hit(0, 5));
        assert_eq!(agg.probes()[0].threads_cover(), ThreadsCover::EveryHit);
        agg.set_dropped(0, 3);
        assert_eq!(agg.probes()[0].threads_cover(), ThreadsCover::NotDropped);
        // The kernel's per-thread drops account for all three: every hit again.
        agg.probes_mut()[0].set_thread_dropped_total(9, 2);
        assert_eq!(agg.probes()[0].threads_cover(), ThreadsCover::NotDropped);
        agg.probes_mut()[0].set_thread_dropped_total(9, 3);
        assert_eq!(agg.probes()[0].threads_cover(), ThreadsCover::EveryHit);
        assert_eq!(agg.measurements().probes[0].threads_dropped, [(9, 3)]);
        // Auto mode's switch to the in-kernel histogram.
        agg.probes_mut()[0].mode = DeliveryMode::KernelHistogram;
        agg.probes_mut()[0].set_counted_hits(10);
        assert_eq!(
            agg.probes()[0].threads_cover(),
            ThreadsCover::BeforeKernelMode
        );

        let mut kernel = Aggregator::new(1);
        kernel.probes_mut()[0].mode = DeliveryMode::KernelHistogram;
        kernel.probes_mut()[0].set_counted_hits(10);
        assert_eq!(
            kernel.probes()[0].threads_cover(),
            ThreadsCover::NoneInKernelMode
        );

        let mut sample = Aggregator::new(1);
        sample.probes_mut()[0].mode = DeliveryMode::Sample;
        sample.record(&hit(0, 5));
        assert_eq!(sample.probes()[0].threads_cover(), ThreadsCover::Sampled);
    }

    #[test]
    fn rate_over_window() {
        let mut rate = RateWindow::new(Duration::from_secs(1));
        assert_eq!(rate.per_second(), 0.0);
        for _ in 0..10 {
            rate.add(100);
            rate.tick(Duration::from_millis(100));
        }
        assert!((rate.per_second() - 1000.0).abs() < 1e-6);
        // Older ticks leave the window.
        for _ in 0..10 {
            rate.add(10);
            rate.tick(Duration::from_millis(100));
        }
        assert!((rate.per_second() - 100.0).abs() < 1e-6);
    }

    #[test]
    fn snapshot_totals() {
        let mut agg = Aggregator::new(2);
        agg.record(&hit(0, 10));
        agg.record(&hit(1, 20));
        agg.record(&hit(1, 30));
        agg.set_dropped(1, 4);
        agg.tick(Duration::from_secs(1));
        let snap = agg.snapshot(Duration::from_secs(1));
        assert_eq!(snap.received, 3);
        assert_eq!(snap.dropped, 4);
        assert_eq!(snap.probes[1].hits, 6);
        assert!((snap.events_per_second - 3.0).abs() < 1e-9);
        assert_eq!(snap.probes[1].handler.max, 30);
    }

    #[test]
    fn percentile_curve_matches_value_at_quantile() {
        let mut hist = new_ns_histogram();
        let mut state: u64 = 7;
        for _ in 0..50_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            hist.record(80 + (state >> 40) % 5_000).expect("in range");
        }
        hist.record(1_000_000).expect("in range");
        let curve = PercentileCurve::of(&hist);
        assert_eq!(
            curve.points.len() as u32,
            CURVE_DECADES * CURVE_STEPS_PER_DECADE + 1
        );
        for ((p, v), q) in curve.points.iter().zip(PercentileCurve::quantiles()) {
            assert!((p / 100.0 - q).abs() < 1e-12);
            assert_eq!(*v, hist.value_at_quantile(q), "q={q}");
        }
        assert!((curve.points.last().expect("points").0 - 99.999).abs() < 1e-9);
        assert_eq!(curve.max, hist.max());
        assert_eq!(
            PercentileCurve::of(&new_ns_histogram()),
            PercentileCurve::default()
        );
    }

    #[test]
    fn live_intervals_and_history() {
        let mut agg = Aggregator::new(1);
        for ns in [100, 200, 300, 400] {
            agg.record(&hit(0, ns));
        }
        agg.roll_interval(Duration::from_secs(2));
        let p = &agg.probes()[0];
        assert_eq!(p.last_interval.hits, 4);
        assert!((p.last_interval.per_second - 2.0).abs() < 1e-9);
        assert_eq!(p.last_interval.handler.max, 400);
        assert_eq!(p.last_interval_curve.count, 4);
        agg.probes_mut()[0].clear_interval();
        agg.record(&hit(0, 50));
        agg.set_dropped(0, 1);
        agg.roll_interval(Duration::from_secs(1));
        let p = &agg.probes()[0];
        assert_eq!(p.last_interval.hits, 2, "one received, one dropped");
        assert_eq!(p.last_interval.dropped, 1);
        assert_eq!(p.history.len(), 2);
        assert_eq!(
            p.history[1].p99_ns,
            Some(50),
            "the cleared interval starts afresh"
        );
        // Only the last minute is kept.
        for _ in 0..100 {
            agg.roll_interval(Duration::from_secs(1));
        }
        assert_eq!(agg.probes()[0].history.len(), 60);
        let detail = agg.focus_detail(0).expect("probe 0");
        assert_eq!(detail.history.len(), 60);
        assert_eq!(detail.cumulative.count, 5);
        assert!(agg.focus_detail(1).is_none());
    }

    #[test]
    fn reset_restarts_counts_against_kernel_totals() {
        let mut agg = Aggregator::new(1);
        agg.open_window(100);
        agg.record(&HitEvent {
            ktime_ns: 150,
            handler_ns: 10,
            ..Default::default()
        });
        agg.set_dropped(0, 5);
        agg.roll_interval(Duration::from_secs(1));
        agg.reset(1000);
        assert_eq!(agg.window_start_ns(), 1000);
        let p = &agg.probes()[0];
        assert_eq!((p.hits(), p.dropped, p.handler_ns.len()), (0, 0, 0));
        assert!(p.history.is_empty());
        // Hits from before the reset no longer count; the kernel's total is the new zero.
        agg.record(&HitEvent {
            ktime_ns: 999,
            handler_ns: 10,
            ..Default::default()
        });
        agg.record(&HitEvent {
            ktime_ns: 1001,
            handler_ns: 20,
            ..Default::default()
        });
        agg.set_dropped(0, 7);
        let p = &agg.probes()[0];
        assert_eq!((p.received, p.dropped, p.hits()), (1, 2, 3));
        agg.roll_interval(Duration::from_secs(1));
        assert_eq!(agg.probes()[0].last_interval.hits, 3);
    }

    #[test]
    fn reset_keeps_kernel_baselines() {
        let mut probe = ProbeAggregate {
            mode: DeliveryMode::KernelHistogram,
            ..Default::default()
        };
        let mut totals = vec![0u64; khist::BUCKETS as usize];
        totals[khist::bucket(1000) as usize] = 5;
        probe.set_counted_hits(5);
        probe.apply_kernel_histogram(&totals);
        probe.reset();
        assert_eq!((probe.hits(), probe.kernel_timed), (0, 0));
        totals[khist::bucket(1000) as usize] = 8;
        probe.set_counted_hits(9);
        probe.apply_kernel_histogram(&totals);
        assert_eq!((probe.hits(), probe.kernel_timed), (4, 3));
        let mut sampled = ProbeAggregate {
            mode: DeliveryMode::Sample,
            ..Default::default()
        };
        sampled.set_counted_hits(100);
        sampled.reset();
        sampled.set_counted_hits(130);
        assert_eq!(sampled.hits(), 30);
    }

    #[test]
    fn live_histograms_grow_and_export_with_full_bounds() {
        let mut agg = Aggregator::new(1);
        let small = agg.probes()[0].handler_ns.buckets();
        for ns in [0, 1, 150, 2_000, 75_000, 3_000_000_000, u64::MAX] {
            agg.record(&hit(0, ns));
        }
        let live = &agg.probes()[0].handler_ns;
        let full = full_range(live);
        // Small until used, and only as large as the values recorded need.
        assert!(small * 4 < new_ns_histogram().buckets(), "{small}");
        assert_eq!((full.low(), full.high()), (1, HIGHEST_TRACKABLE_NS));
        assert_eq!(HandlerSummary::of(&full), HandlerSummary::of(live));
        assert_eq!(
            full.max(),
            new_ns_histogram().highest_equivalent(HIGHEST_TRACKABLE_NS)
        );
        let mut reference = new_ns_histogram();
        for ns in [
            1,
            1,
            150,
            2_000,
            75_000,
            3_000_000_000,
            HIGHEST_TRACKABLE_NS,
        ] {
            reference.saturating_record(ns);
        }
        assert_eq!(full, reference);
    }

    #[test]
    fn added_probes_take_the_next_ids() {
        let mut agg = Aggregator::new(1);
        agg.open_window(100);
        agg.record(&HitEvent {
            ktime_ns: 150,
            handler_ns: 10,
            ..Default::default()
        });
        let first = agg.add_probes(vec![ProbeAggregate::default(); 2]);
        assert_eq!(first, 1);
        agg.record(&HitEvent {
            probe_id: 2,
            ktime_ns: 200,
            handler_ns: 20,
            ..Default::default()
        });
        let hits: Vec<u64> = agg.probes().iter().map(ProbeAggregate::hits).collect();
        assert_eq!(hits, [1, 0, 1]);
        assert_eq!(agg.unknown_records, 0);
        assert_eq!(agg.snapshot(Duration::from_secs(1)).probes.len(), 3);
    }

    #[test]
    fn interval_rolls_over() {
        let mut agg = Aggregator::new(1);
        agg.record(&hit(0, 5));
        let first = agg.probes_mut()[0].take_interval();
        agg.record(&hit(0, 7));
        assert_eq!(first.len(), 1);
        assert_eq!(agg.probes()[0].interval_ns.len(), 1);
        assert_eq!(agg.probes()[0].handler_ns.len(), 2);
    }
}
