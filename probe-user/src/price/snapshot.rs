//! What the UI is sent: every probe's numbers at a moment, priced (its whole cost per
//! hit, its CPU share, and the assumption they were priced under).

use std::time::Duration;

use crate::aggregate::{
    Aggregator, CapturedArgs, FocusDetail, HandlerSummary, IntervalSummary, KeyedHits, LatencyRow,
    OwnUsage,
};
use crate::delivery::DeliveryMode;
use crate::price::assume::{Assumption, Decision};
use crate::price::estimate::{GapReading, Method};

/// What one probe looks like at a moment: the numbers the UI shows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ProbeSnapshot {
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
    /// What placed its hits on the calibration's curves, with them.
    pub reading: Option<GapReading>,
    /// How its hits were priced, and with which calibration rows.
    pub priced: Option<(Method, Assumption)>,
}

/// Every probe at a moment, plus totals; cheap to clone and send to the UI.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Snapshot {
    /// Time since the probes were attached (or the last reset).
    pub elapsed: Duration,
    /// The latest notice, if any.
    pub notice: Option<String>,
    pub probes: Vec<ProbeSnapshot>,
    /// Hits per second over the last second, all probes (records received, and those
    /// dropped, as the kernel's counts of them are read).
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
    pub assumption: Option<Decision>,
    /// The target's CPU over the last few seconds, probes included, share of one CPU
    /// (summed over the process set with several); `None` before two readings (the
    /// pricer reads it).
    pub target_cpu: Option<f64>,
    /// The standard error of `target_cpu` over its one-second rates.
    pub target_cpu_error: Option<f64>,
    /// The `latency:` pairs' rows.
    pub latency: Vec<LatencyRow>,
    /// Keyed probes' rows: (probe id, one key's hits).
    pub keyed: Vec<(u32, KeyedHits)>,
    /// Whether the calibration prices any probe's site (the headline says why it has no
    /// price otherwise).
    pub calibrated: bool,
}

impl Snapshot {
    /// Share of one CPU all probes take from the target: the sum over the probes with
    /// an estimate; `None` when none has one.
    pub(crate) fn cpu_share(&self) -> Option<f64> {
        let shares = self.probes.iter().filter_map(|p| p.cpu_share);
        shares.fold(None, |total, share| Some(total.unwrap_or(0.0) + share))
    }
}

/// The current numbers of every probe, unpriced: [`super::Pricer::snapshot`] adds
/// each probe's whole cost and CPU share, and the assumption.
pub(super) fn unpriced(aggregator: &Aggregator, elapsed: Duration) -> Snapshot {
    let probes: Vec<ProbeSnapshot> = aggregator
        .probes()
        .iter()
        .map(|p| ProbeSnapshot {
            mode: p.mode,
            hits: p.hits(),
            dropped: p.dropped,
            per_second: p.rate.per_second(),
            handler: p.summary(),
            whole_cost_ns: None,
            cpu_share: None,
            last_args: p.last_args,
            interval: p.last_interval,
            gap_median_us: None,
            reading: None,
            priced: None,
        })
        .collect();
    Snapshot {
        elapsed,
        notice: aggregator.notices.last().cloned(),
        events_per_second: probes.iter().map(|p| p.per_second).sum(),
        received: aggregator.received(),
        dropped: probes.iter().map(|p| p.dropped).sum(),
        probes,
        interval: Duration::ZERO,
        focus: None,
        own: OwnUsage::default(),
        assumption: None,
        target_cpu: None,
        target_cpu_error: None,
        latency: aggregator.latency.rows(elapsed.as_secs_f64()),
        keyed: aggregator.keyed_rows(),
        calibrated: false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use probe_common::HitEvent;

    use crate::aggregate::Aggregator;

    fn hit(probe_id: u32, handler_ns: u64) -> HitEvent {
        HitEvent {
            probe_id,
            handler_ns,
            ..Default::default()
        }
    }

    #[test]
    fn snapshot_totals() {
        let mut agg = Aggregator::new(2);
        agg.record(&hit(0, 10));
        agg.record(&hit(1, 20));
        agg.record(&hit(1, 30));
        agg.set_dropped(1, 4);
        agg.tick(Duration::from_secs(1));
        let snap = super::unpriced(&agg, Duration::from_secs(1));
        assert_eq!(snap.received, 3);
        assert_eq!(snap.dropped, 4);
        assert_eq!(snap.probes[1].hits, 6);
        // A dropped hit is a hit: the rate holds it.
        assert!((snap.events_per_second - 7.0).abs() < 1e-9);
        assert_eq!(snap.probes[1].handler.max, 30);
    }
}
