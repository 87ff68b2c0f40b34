//! Priced by the gap: a hit costs more the longer its CPU went without one.
//!
//! The kernel's uprobe path, probetop's program and its maps are a few hundred cache
//! lines. A hit right after another finds them in the caches; a hit after the CPU slept
//! or ran other code finds them evicted. On a server the first hit of a request comes
//! after the idle time between requests and the others a few microseconds later, so
//! the price of a hit depends on the load: at 2,000 statements/s mariadbd paid ~1.6 us
//! per hit, at 6,000/s ~0.9 us (docs/mysqld.md).
//!
//! `probetop calibrate` measures a hit after a range of sleeps between two calls (the
//! gap curve); the BPF program counts, per probe, the gap before each hit on its CPU
//! (`probe_common::gap` buckets); a hit is priced at the hot row of its class plus what
//! the curve adds at its gap.

use serde::{Deserialize, Serialize};

use crate::stats::Summary;
use probe_common::gap as buckets;

/// Gap samples a probe needs before its own are used; with fewer, every probe's
/// together (in-kernel mode samples one gap in `time_every`² hits).
pub(crate) const MIN_SAMPLES: u64 = 20;

/// One point of the gap curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GapPoint {
    /// The sleep asked for between two calls, us (0: none, the hot loop).
    pub sleep_us: f64,
    /// The time from one hit to the next, measured: wall time per iteration, ns.
    pub gap_ns: f64,
    /// What one hit adds to the thread's CPU time with probetop's ring handler (an
    /// emulated uprobe), probed minus unprobed per iteration, ns ...
    pub ring_ns: Summary,
    /// ... and with its in-kernel handler, one hit in `time_every` timed.
    pub kernel_ns: Summary,
    /// The ring handler's own clock at this gap, ns.
    pub handler_ring_ns: Option<Summary>,
    /// What the call alone takes more than the unprobed twin's, by the time-stamp counter
    /// (the slowest 2% left out): the hit without the sleep's own syscall and wakeup,
    /// which vary by more than a hit costs. The estimate's input where measured.
    #[serde(default)]
    pub ring_call_ns: Option<Summary>,
    #[serde(default)]
    pub kernel_call_ns: Option<Summary>,
}

/// The gap curve of a calibration, by gap ascending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GapCurve {
    pub points: Vec<GapPoint>,
    /// The in-kernel points' `--time-every`.
    pub time_every: u64,
}

impl GapCurve {
    /// The curve as `probetop calibrate` prints it.
    pub(crate) fn render_text(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "\nthe gap curve: a hit after a sleep between calls, probed - unprobed: the call alone by the time-stamp counter (trimmed mean), and the thread's CPU per iteration; in-kernel: 1 in {} timed",
            self.time_every
        );
        let _ = writeln!(
            out,
            "{:>8} {:>9} {:>20} {:>20} {:>20} {:>20} {:>8}",
            "sleep us",
            "gap us",
            "ring call (IQR)",
            "in-kernel call",
            "ring cpu/iter",
            "in-kernel cpu/iter",
            "handler"
        );
        for p in &self.points {
            let range = |s: &Summary| format!("{:.0} ({:.0}-{:.0})", s.median, s.q1, s.q3);
            let call = |s: &Option<Summary>| s.as_ref().map_or("-".to_string(), range);
            let _ = writeln!(
                out,
                "{:>8} {:>9.1} {:>20} {:>20} {:>20} {:>20} {:>8}",
                p.sleep_us,
                p.gap_ns / 1e3,
                call(&p.ring_call_ns),
                call(&p.kernel_call_ns),
                range(&p.ring_ns),
                range(&p.kernel_ns),
                p.handler_ring_ns
                    .map_or("-".to_string(), |h| format!("{:.0}", h.median)),
            );
        }
    }

    /// `(gap_ns, y)` of the points with a finite gap and a `y`, by gap ascending.
    fn series(&self, y: impl Fn(&GapPoint) -> Option<f64>) -> Vec<(f64, f64)> {
        let mut points: Vec<(f64, f64)> = self
            .points
            .iter()
            .filter(|p| p.gap_ns > 0.0 && p.gap_ns.is_finite())
            .filter_map(|p| Some((p.gap_ns, y(p)?)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        points
    }

    /// What a hit `gap_ns` after the previous hit on its CPU costs beyond a hit of the
    /// curve's hottest point, ns, with the in-kernel handler (`kernel`) or the ring's;
    /// never below 0 (noise at short gaps).
    pub(crate) fn extra_ns(&self, kernel: bool, gap_ns: f64) -> Option<f64> {
        // The per-call measure where every point has it (caches from before it existed
        // do not), else the CPU per iteration.
        let by_call = self.points.iter().all(|p| {
            if kernel {
                p.kernel_call_ns.is_some()
            } else {
                p.ring_call_ns.is_some()
            }
        });
        let series = self.series(|p| {
            let (call, cpu) = if kernel {
                (p.kernel_call_ns, p.kernel_ns)
            } else {
                (p.ring_call_ns, p.ring_ns)
            };
            Some(if by_call { call?.median } else { cpu.median })
        });
        let hottest = series.first()?.1;
        Some((interpolate(&series, gap_ns)? - hottest).max(0.0))
    }

    /// How much slower the ring handler's own clock reads at `gap_ns` than at the
    /// hottest point, ns, never below 0.
    pub(crate) fn handler_extra_ns(&self, gap_ns: f64) -> Option<f64> {
        let series = self.series(|p| p.handler_ring_ns.map(|s| s.median));
        let hottest = series.first()?.1;
        Some((interpolate(&series, gap_ns)? - hottest).max(0.0))
    }
}

/// Linear interpolation of `y` in the log of the gap, flat beyond either end.
pub(super) fn interpolate(points: &[(f64, f64)], gap_ns: f64) -> Option<f64> {
    interpolate_in(points, gap_ns, f64::ln)
}

/// Linear interpolation of `y` in `scale(x)` between `points` (by x ascending), flat
/// beyond either end.
pub(super) fn interpolate_in(
    points: &[(f64, f64)],
    x: f64,
    scale: impl Fn(f64) -> f64,
) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    if x <= first.0 {
        return Some(first.1);
    }
    if x >= last.0 {
        return Some(last.1);
    }
    let sx = scale(x);
    points.windows(2).find_map(|pair| {
        let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
        if x > x1 {
            return None;
        }
        let (sx0, sx1) = (scale(x0), scale(x1));
        let t = if sx1 > sx0 {
            (sx - sx0) / (sx1 - sx0)
        } else {
            1.0
        };
        Some(y0 + t * (y1 - y0))
    })
}

/// The gaps before a probe's hits, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GapSummary {
    /// Gaps counted: every hit after another on the same CPU in ring mode, pairs of
    /// timed hits in in-kernel mode.
    pub samples: u64,
    /// The median gap, us, as its power-of-two bucket's middle (0: under 1 us).
    pub median_us: f64,
    /// Share of the gaps of 100 us or more (a CPU idle or busy elsewhere before the hit).
    pub share_after_100_us: f64,
}

/// One probe's gap counts since the window opened, per `probe_common::gap` bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GapCounts {
    base: Vec<u64>,
    now: Vec<u64>,
}

impl GapCounts {
    /// Counts before the window opened: not measured.
    pub(crate) fn baseline(&mut self, totals: Vec<u64>) {
        self.base = totals.clone();
        self.now = totals;
    }

    /// The window opens again (a reset): the totals last read become the baseline.
    pub(crate) fn rebase(&mut self) {
        self.base = self.now.clone();
    }

    /// The kernel's totals now.
    pub(crate) fn update(&mut self, totals: Vec<u64>) {
        self.now = totals;
    }

    /// Counts in the window, per bucket.
    pub(crate) fn counts(&self) -> Vec<u64> {
        self.now
            .iter()
            .enumerate()
            .map(|(i, n)| n.saturating_sub(self.base.get(i).copied().unwrap_or(0)))
            .collect()
    }

    /// Gaps counted in the window.
    pub(crate) fn samples(&self) -> u64 {
        self.counts().iter().sum()
    }

    /// The mean of `price(gap)` over the counted gaps, each at its bucket's middle;
    /// `None` below [`MIN_SAMPLES`].
    pub(crate) fn mean_of(&self, price: impl Fn(f64) -> Option<f64>) -> Option<f64> {
        let counts = self.counts();
        let samples: u64 = counts.iter().sum();
        if samples < MIN_SAMPLES {
            return None;
        }
        let mut total = 0.0;
        for (bucket, count) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            total += *count as f64 * price(buckets::middle_ns(bucket as u32))?;
        }
        Some(total / samples as f64)
    }

    /// Share of the counted gaps at or above `ns`.
    pub(crate) fn share_at_least(&self, ns: f64) -> Option<f64> {
        let counts = self.counts();
        let samples: u64 = counts.iter().sum();
        (samples > 0).then(|| {
            let long: u64 = counts
                .iter()
                .enumerate()
                .filter(|(b, _)| buckets::middle_ns(*b as u32) >= ns)
                .map(|(_, n)| n)
                .sum();
            long as f64 / samples as f64
        })
    }

    /// What a report says of them.
    pub(crate) fn summary(&self) -> Option<GapSummary> {
        let counts = self.counts();
        let samples: u64 = counts.iter().sum();
        if samples == 0 {
            return None;
        }
        let mut seen = 0;
        let median_bucket = counts.iter().position(|n| {
            seen += n;
            seen * 2 >= samples
        })?;
        Some(GapSummary {
            samples,
            median_us: buckets::middle_ns(median_bucket as u32) / 1e3,
            share_after_100_us: self.share_at_least(100e3)?,
        })
    }

    /// The sum of several probes' counts (the pool used below [`MIN_SAMPLES`]).
    pub(crate) fn pooled<'a>(all: impl Iterator<Item = &'a GapCounts>) -> GapCounts {
        let mut pooled = GapCounts::default();
        for counts in all {
            for (i, n) in counts.counts().into_iter().enumerate() {
                if pooled.now.len() <= i {
                    pooled.now.resize(i + 1, 0);
                }
                pooled.now[i] += n;
            }
        }
        pooled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(median: f64) -> Summary {
        Summary::exact(median)
    }

    fn curve() -> GapCurve {
        let point = |sleep_us: f64, gap_ns: f64, ring: f64, kernel: f64, handler: f64| GapPoint {
            sleep_us,
            gap_ns,
            ring_ns: s(ring),
            kernel_ns: s(kernel),
            handler_ring_ns: Some(s(handler)),
            ring_call_ns: None,
            kernel_call_ns: None,
        };
        GapCurve {
            points: vec![
                point(0.0, 500.0, 500.0, 420.0, 40.0),
                point(10.0, 10_000.0, 700.0, 600.0, 80.0),
                point(1000.0, 1_000_000.0, 2500.0, 2000.0, 400.0),
            ],
            time_every: 64,
        }
    }

    #[test]
    fn extra_is_interpolated_in_log_gap_and_flat_beyond_the_ends() {
        let c = curve();
        assert_eq!(c.extra_ns(false, 0.0), Some(0.0));
        assert_eq!(c.extra_ns(false, 500.0), Some(0.0));
        assert_eq!(c.extra_ns(false, 10_000.0), Some(200.0));
        // 100 us is halfway between 10 us and 1 ms in log.
        let mid = c.extra_ns(false, 100_000.0).expect("extra");
        assert!((mid - 1100.0).abs() < 1e-6, "{mid}");
        assert_eq!(c.extra_ns(false, 1e12), Some(2000.0));
        assert_eq!(c.extra_ns(true, 1_000_000.0), Some(1580.0));
        assert_eq!(c.handler_extra_ns(10_000.0), Some(40.0));
    }

    #[test]
    fn the_per_call_measure_is_used_where_every_point_has_it() {
        let mut c = curve();
        for p in &mut c.points {
            p.ring_call_ns = Some(s(p.ring_ns.median / 2.0));
        }
        assert_eq!(c.extra_ns(false, 1e12), Some(1000.0));
        // The in-kernel points lack it: the CPU per iteration.
        assert_eq!(c.extra_ns(true, 1e12), Some(1580.0));
        c.points[1].ring_call_ns = None;
        assert_eq!(c.extra_ns(false, 1e12), Some(2000.0));
    }

    #[test]
    fn counts_are_priced_after_the_baseline_and_pooled() {
        let mut a = GapCounts::default();
        let mut totals = vec![0u64; buckets::BUCKETS as usize];
        totals[0] = 100;
        a.baseline(totals.clone());
        assert_eq!(a.mean_of(|_| Some(1.0)), None);
        totals[0] = 130; // 30 hits right after another
        totals[10] = 10; // 10 after ~0.7 ms
        a.update(totals);
        assert_eq!(a.samples(), 40);
        let c = curve();
        let mean = a.mean_of(|g| c.extra_ns(false, g)).expect("priced");
        let long = c.extra_ns(false, buckets::middle_ns(10)).expect("extra");
        assert!((mean - long * 10.0 / 40.0).abs() < 1e-9, "{mean}");
        assert_eq!(a.share_at_least(100_000.0), Some(0.25));
        let pooled = GapCounts::pooled([&a, &a].into_iter());
        assert_eq!(pooled.samples(), 80);
        // A reset counts from the totals last read.
        a.rebase();
        assert_eq!(a.samples(), 0);
    }
}
