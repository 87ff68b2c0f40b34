//! Histograms as the aggregator keeps them (small, growing) and as reports read them:
//! the percentile summary and the sampled percentile curve.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::histogram::{HIGHEST_TRACKABLE_NS, SIGNIFICANT_DIGITS, new_ns_histogram};

/// A histogram with the same precision (so the same buckets and percentiles) that starts
/// small and grows to the largest value recorded: what the aggregator keeps per probe.
/// With the full 60 s range up front, each took 221 KiB and every probe two, touched or
/// not (1000 probes: 640 MiB of RSS).
pub(super) fn new_live_ns_histogram() -> Histogram<u64> {
    // The precision is a constant known to be valid, so creation cannot fail.
    Histogram::new(SIGNIFICANT_DIGITS).expect("constant histogram precision is valid")
}

/// A live histogram allocated on its first value. At 3 significant digits the
/// smallest HDR histogram is 2048 counters (16 KiB), and each probe keeps two (since
/// attach, and the live interval) plus a copy in the measurements and the report: an
/// idle probe cost ~35 KiB while measuring and twice that at the end (35,500 idle
/// probes on mariadbd: 2.7 GiB peak RSS). Empty, it holds nothing and reads as an
/// empty histogram of the same precision.
#[derive(Debug, Clone, Default)]
pub struct LiveHistogram(Option<Box<Histogram<u64>>>);

impl LiveHistogram {
    /// Records `count` hits of `ns` ([`record_ns`]), allocating the histogram first.
    pub fn record(&mut self, ns: u64, count: u64) {
        let hist = self
            .0
            .get_or_insert_with(|| Box::new(new_live_ns_histogram()));
        record_ns(hist, ns, count);
    }

    /// Whether it holds a histogram (it had a value since the last clear).
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> bool {
        self.0.is_some()
    }

    /// Forgets every value, and the memory that held them.
    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// The histogram, leaving this one empty; `None` when nothing was recorded.
    pub fn take(&mut self) -> Option<Histogram<u64>> {
        self.0.take().map(|hist| *hist)
    }
}

impl From<Histogram<u64>> for LiveHistogram {
    fn from(hist: Histogram<u64>) -> Self {
        Self(Some(Box::new(hist)))
    }
}

impl std::ops::Deref for LiveHistogram {
    type Target = Histogram<u64>;

    fn deref(&self) -> &Histogram<u64> {
        static EMPTY: std::sync::OnceLock<Histogram<u64>> = std::sync::OnceLock::new();
        match &self.0 {
            Some(hist) => hist,
            None => EMPTY.get_or_init(new_live_ns_histogram),
        }
    }
}

impl PartialEq for LiveHistogram {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

/// `hist` with probetop's full bounds ([`new_ns_histogram`]), as reports carry it.
pub(crate) fn full_range(hist: &Histogram<u64>) -> Histogram<u64> {
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
pub(super) fn record_ns(hist: &mut Histogram<u64>, ns: u64, count: u64) {
    let ns = ns.clamp(1, HIGHEST_TRACKABLE_NS);
    // Growing fails only if the counts array could not be addressed, far beyond 60 s.
    if hist.record_n(ns, count).is_err() {
        hist.saturating_record_n(ns, count);
    }
}

/// Percentile summary of one histogram, as shown and exported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
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

/// Steps per decade of `1/(1-p)` at which [`PercentileCurve`] samples.
pub(crate) const CURVE_STEPS_PER_DECADE: u32 = 8;
/// Decades of `1/(1-p)` sampled: 5 reaches the 99.999th percentile.
pub(crate) const CURVE_DECADES: u32 = 5;

/// A percentile distribution sampled as HdrHistogram's plotter draws it: evenly on the
/// `log10(1/(1-p))` axis, from the 0th to the 99.999th percentile.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PercentileCurve {
    /// (percentile in 0..=100, value in ns), ascending; empty without hits.
    pub points: Vec<(f64, u64)>,
    /// The largest value recorded (the 100th percentile).
    pub max: u64,
    pub count: u64,
}

impl PercentileCurve {
    /// The quantiles sampled (0..1), ascending.
    pub(crate) fn quantiles() -> impl Iterator<Item = f64> {
        (0..=CURVE_DECADES * CURVE_STEPS_PER_DECADE)
            .map(|i| 1.0 - 10f64.powf(-f64::from(i) / f64::from(CURVE_STEPS_PER_DECADE)))
    }

    /// Samples `hist` in one pass over its counts.
    pub(crate) fn of(hist: &Histogram<u64>) -> Self {
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
