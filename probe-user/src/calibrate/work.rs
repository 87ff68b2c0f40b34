//! Priced by the work between hits: a hit costs more the more code ran on its CPU since
//! the previous one.
//!
//! The gap curve (`calibrate::gap`) sleeps between calls, and on an idle machine a sleeping
//! CPU evicts little: a hit 2 ms after another cost 2.4x a hot one. A server's CPU does
//! not sleep between two hits of a request (mariadbd runs 6-46 us of its own code
//! between them), and between requests other processes run on it. The work curve
//! measures that: the cold loop's footprint walk (data and code) at a range of sizes
//! between calls, the whole iteration timed, probed minus unprobed, so that what the hit
//! leaves behind (the walk's own lines it evicted) is in. The curve also records how
//! long probetop's handler took at each size, so a live hit is priced at the curve where
//! the handler's own clock on that hit reads (a colder cache runs it slower), or at the
//! gap curve when that is dearer (`price::estimate`, `--assume clock`).

use serde::{Deserialize, Serialize};

use super::gap::interpolate_in;
use crate::stats::Summary;

/// One point of the work curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WorkPoint {
    /// The footprint walked between two calls.
    pub data_bytes: u64,
    pub code_bytes: u64,
    /// The walk's time, ns: the unprobed loop's median iteration less its call.
    pub work_ns: f64,
    /// What the hit adds to the median iteration with probetop's ring handler (an
    /// emulated uprobe), probed minus unprobed, ns ...
    pub ring_ns: Summary,
    /// ... and with its in-kernel handler, one hit in `time_every` timed.
    pub kernel_ns: Summary,
    /// The handlers' own clocks at this footprint (the ring's over every hit, the
    /// in-kernel one's over its timed hits), ns: how cold the program and its maps were.
    #[serde(default)]
    pub handler_ring_ns: Option<Summary>,
    #[serde(default)]
    pub handler_kernel_ns: Option<Summary>,
}

/// The work curve of a calibration, by work ascending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkCurve {
    pub points: Vec<WorkPoint>,
    /// Walks larger than the cold loop's, out to the last-level cache and past it, each
    /// hit priced by the call alone (the walk's spread swamps the whole iteration): read
    /// by the handler's clock only. A server's slowest hits read its clock slower than
    /// the cold loop does (docs/cost.md, "Past the curve's end"), and these price them
    /// as measured on this host. Not by the busy gaps: a millisecond of a server's code
    /// between two hits is not a 32 MiB walk.
    #[serde(default)]
    pub beyond: Vec<WorkPoint>,
    pub time_every: u64,
}

impl WorkCurve {
    /// What a hit after `busy_ns` of code run on its CPU costs beyond a hit of the
    /// curve's smallest footprint, ns; never below 0 (noise). Prices read the clock
    /// instead (`ring_clock`); the curve's shape is checked through this.
    #[cfg(test)]
    pub(crate) fn extra_ns(&self, kernel: bool, busy_ns: f64) -> Option<f64> {
        let mut series: Vec<(f64, f64)> = self
            .points
            .iter()
            .filter(|p| p.work_ns > 0.0 && p.work_ns.is_finite())
            .map(|p| {
                let y = if kernel { p.kernel_ns } else { p.ring_ns };
                (p.work_ns, y.median)
            })
            .collect();
        series.sort_by(|a, b| a.0.total_cmp(&b.0));
        let smallest = series.first()?.1;
        Some((super::gap::interpolate(&series, busy_ns)? - smallest).max(0.0))
    }

    /// How to read a hit's price off the curve from how slow the ring handler's own
    /// clock ran on it: the price with the ring handler, or with `kernel`, what the
    /// in-kernel handler costs at the same footprint. `None` when the curve has no
    /// handler clocks.
    ///
    /// Why the handler's clock: it runs on the hit's own CPU right after the trap, and
    /// its program and maps were last touched by the previous hit, as the trap path's
    /// lines were. Whatever the target ran in between evicted both alike, so how much
    /// slower the handler ran says how cold the trap was, with no model of the target.
    /// In-kernel probes are read by the ring clock of their first seconds streamed
    /// (`--clock-seconds`): the in-kernel handler's own clock read colder than the truth.
    pub(crate) fn ring_clock(&self, kernel: bool) -> Option<RingClockReading> {
        if !self.has_ring_clock() {
            return None;
        }
        let price = |p: &WorkPoint| if kernel { p.kernel_ns } else { p.ring_ns }.median;
        let smallest = price(
            self.points
                .iter()
                .min_by(|a, b| a.work_ns.total_cmp(&b.work_ns))?,
        );
        let mut by_clock: Vec<(f64, f64)> = self
            .every_point()
            .filter_map(|p| Some((p.handler_ring_ns?.median, price(p))))
            .filter(|(clock, _)| clock.is_finite())
            .collect();
        if by_clock.is_empty() {
            return None;
        }
        by_clock.sort_by(|a, b| a.0.total_cmp(&b.0));
        // A point out of line with both its neighbours is noise (a whole iteration's
        // median of a few runs: 10.6 us between two of 2.3 in one quick calibration):
        // read as the middle of the three. Then a slower clock with a cheaper hit is
        // noise too: read as the dearest before it.
        median_of_neighbours(&mut by_clock);
        let mut dearest = f64::MIN;
        for point in &mut by_clock {
            dearest = dearest.max(point.1);
            point.1 = dearest;
        }
        Some(RingClockReading { by_clock, smallest })
    }

    /// Whether the curve holds the ring handler's clock at its points (calibrations from
    /// before it did not).
    pub(crate) fn has_ring_clock(&self) -> bool {
        !self.points.is_empty() && self.every_point().all(|p| p.handler_ring_ns.is_some())
    }

    /// The cold loop's points, then the walks beyond it.
    fn every_point(&self) -> impl Iterator<Item = &WorkPoint> {
        self.points.iter().chain(&self.beyond)
    }

    /// The curve as `probetop calibrate` prints it.
    pub(crate) fn render_text(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "\nthe work curve: a hit after a footprint walked between calls, the whole iteration probed - unprobed (median); in-kernel: 1 in {} timed",
            self.time_every
        );
        let _ = writeln!(
            out,
            "{:>9} {:>9} {:>9} {:>20} {:>20} {:>15}",
            "data KiB", "code KiB", "work us", "ring (IQR)", "in-kernel (IQR)", "handler r/k"
        );
        for (at, p) in self.every_point().enumerate() {
            if at == self.points.len() {
                let _ = writeln!(
                    out,
                    "beyond the cold loop, read by the handler's clock only:"
                );
            }
            let range = |s: &Summary| format!("{:.0} ({:.0}-{:.0})", s.median, s.q1, s.q3);
            let clock =
                |s: &Option<Summary>| s.map_or("-".to_string(), |s| format!("{:.0}", s.median));
            let _ = writeln!(
                out,
                "{:>9} {:>9} {:>9.1} {:>20} {:>20} {:>15}",
                p.data_bytes >> 10,
                p.code_bytes >> 10,
                p.work_ns / 1e3,
                range(&p.ring_ns),
                range(&p.kernel_ns),
                format!(
                    "{}/{}",
                    clock(&p.handler_ring_ns),
                    clock(&p.handler_kernel_ns)
                ),
            );
        }
    }
}

/// Each interior point's `y` replaced by the median of its own and its two neighbours'
/// (as they were): one point out of line is pulled back, a trend is kept.
fn median_of_neighbours(points: &mut [(f64, f64)]) {
    let ys: Vec<f64> = points.iter().map(|p| p.1).collect();
    for (at, window) in ys.windows(3).enumerate() {
        let mut three = [window[0], window[1], window[2]];
        three.sort_by(f64::total_cmp);
        points[at + 1].1 = three[1];
    }
}

/// The work curve as (ring handler clock, hit) pairs: see [`WorkCurve::ring_clock`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RingClockReading {
    /// By clock ascending, the hit made non-decreasing in it.
    by_clock: Vec<(f64, f64)>,
    /// The hit at the curve's smallest footprint.
    smallest: f64,
}

impl RingClockReading {
    /// What a hit whose handler clock read `handler_ns` costs beyond a hit of the
    /// curve's smallest footprint, ns: linear between points, flat past either end,
    /// never below 0. Past the largest walk's clock, nothing measured says more: such a
    /// clock is as likely an interrupt inside the handler as a colder hit.
    pub(crate) fn extra_ns(&self, handler_ns: f64) -> f64 {
        interpolate_in(&self.by_clock, handler_ns, |clock| clock)
            .map_or(0.0, |hit| (hit - self.smallest).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(work_ns: f64, ring: f64, kernel: f64) -> WorkPoint {
        WorkPoint {
            data_bytes: 0,
            code_bytes: 0,
            work_ns,
            ring_ns: Summary::exact(ring),
            kernel_ns: Summary::exact(kernel),
            handler_ring_ns: None,
            handler_kernel_ns: None,
        }
    }

    #[test]
    fn extra_over_the_smallest_footprint_interpolated_and_flat_beyond() {
        let curve = WorkCurve {
            points: vec![
                point(60_000.0, 2500.0, 2300.0),
                point(100.0, 500.0, 420.0),
                point(6_000.0, 700.0, 600.0),
            ],
            beyond: Vec::new(),
            time_every: 64,
        };
        assert_eq!(curve.extra_ns(false, 0.0), Some(0.0));
        assert_eq!(curve.extra_ns(false, 6_000.0), Some(200.0));
        assert_eq!(curve.extra_ns(true, 1e9), Some(1880.0));
        let between = curve.extra_ns(false, 20_000.0).expect("extra");
        assert!(200.0 < between && between < 2000.0, "{between}");
        assert_eq!(curve.ring_clock(false), None);
        let empty = WorkCurve {
            points: Vec::new(),
            beyond: Vec::new(),
            time_every: 64,
        };
        assert_eq!(empty.extra_ns(false, 1.0), None);
    }

    #[test]
    fn the_handler_clock_reads_the_hit_off_the_curve() {
        let clocked = |work_ns: f64, ring: f64, clock: f64| WorkPoint {
            handler_ring_ns: Some(Summary::exact(clock)),
            ..point(work_ns, ring, ring - 50.0)
        };
        let curve = WorkCurve {
            points: vec![
                clocked(20.0, 450.0, 60.0),
                clocked(2_000.0, 900.0, 75.0),
                // Cheaper than the point before with a slower clock: noise, read as 900.
                clocked(4_000.0, 600.0, 80.0),
                clocked(14_000.0, 1400.0, 120.0),
                clocked(57_000.0, 2700.0, 250.0),
            ],
            beyond: Vec::new(),
            time_every: 64,
        };
        assert!(curve.has_ring_clock());
        let reading = curve.ring_clock(false).expect("clocks");
        // As fast as the hot loop's or faster: nothing more.
        assert_eq!(reading.extra_ns(40.0), 0.0);
        assert_eq!(reading.extra_ns(60.0), 0.0);
        assert_eq!(reading.extra_ns(80.0), 450.0);
        // Halfway between 120 and 250 ns of clock: halfway between 1400 and 2700.
        assert_eq!(reading.extra_ns(185.0), 1600.0);
        // A lone point far out of line with both neighbours does not lift every
        // colder reading (it did when only the dearest before was taken).
        let mut spiked = curve.clone();
        spiked.points.push(clocked(30_000.0, 10_600.0, 200.0));
        let spiked = spiked.ring_clock(false).expect("clocks");
        assert_eq!(spiked.extra_ns(200.0), 2250.0);
        assert_eq!(spiked.extra_ns(250.0), 2250.0);
        // Slower than the cold loop's coldest point: flat without walks beyond it.
        assert_eq!(reading.extra_ns(500.0), 2250.0);
        // With them, read between them as measured, and flat past the largest.
        let mut beyond = curve.clone();
        beyond.beyond = vec![
            clocked(140_000.0, 3_200.0, 350.0),
            clocked(900_000.0, 6_500.0, 700.0),
        ];
        let reading = beyond.ring_clock(false).expect("clocks");
        assert_eq!(reading.extra_ns(185.0), 1600.0);
        assert_eq!(reading.extra_ns(300.0), 2500.0);
        assert_eq!(reading.extra_ns(525.0), 4400.0);
        assert_eq!(reading.extra_ns(5_000.0), 6050.0);
        // The walks beyond are not read by the busy gaps.
        assert_eq!(beyond.extra_ns(false, 1e6), curve.extra_ns(false, 1e6));
        // In-kernel: the same footprint read by the ring clock, priced with the
        // in-kernel handler (50 ns cheaper at every point here).
        let kernel = curve.ring_clock(true).expect("clocks");
        assert_eq!(kernel.extra_ns(185.0), 1600.0);
        assert_eq!(kernel.extra_ns(5_000.0), 2250.0);
        // A curve missing the clock at any point is not read by it.
        let mut partial = curve.clone();
        partial.points[2].handler_ring_ns = None;
        assert_eq!(partial.ring_clock(true), None);
        beyond.beyond[1].handler_ring_ns = None;
        assert_eq!(beyond.ring_clock(true), None);
    }
}
