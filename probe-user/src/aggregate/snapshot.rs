//! What the UI is sent: every probe's numbers at a moment, and the selected probe's
//! distributions and time series.

use std::time::Duration;

use super::summary::{HandlerSummary, PercentileCurve};
use super::{Aggregator, CapturedArgs};
use crate::delivery::DeliveryMode;

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
    pub reading: Option<crate::price::estimate::GapReading>,
}

/// The numbers of one probe over one closed live interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct IntervalSummary {
    /// How long the interval lasted; zero before the first one closed.
    pub length: Duration,
    pub hits: u64,
    pub dropped: u64,
    pub per_second: f64,
    pub handler: HandlerSummary,
}

/// One point of a probe's time series: one closed live interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct HistoryPoint {
    pub length: Duration,
    pub per_second: f64,
    /// `None` when the interval had no recorded handler time.
    pub p99_ns: Option<u64>,
}

/// Details of the probe the UI has selected, computed only for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FocusDetail {
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
pub(crate) const FOCUS_PROCESSES: usize = 8;

/// probetop's own use of the machine, measured by the collector.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct OwnUsage {
    /// Share of one CPU over the last measurement (0.5 = half a CPU).
    pub cpu_share: Option<f64>,
    /// Resident memory, bytes.
    pub rss_bytes: Option<u64>,
}

/// Every probe at a moment, plus totals; cheap to clone and send to the UI.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Snapshot {
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
    pub assumption: Option<crate::price::assume::Decision>,
    /// The target's CPU over the last second, probes included, share of one CPU;
    /// `None` with several processes or before two readings (the pricer reads it).
    pub target_cpu: Option<f64>,
    /// The `latency:` pairs' rows.
    pub latency: Vec<super::LatencyRow>,
    /// Keyed probes' rows: (probe id, one key's hits).
    pub keyed: Vec<(u32, super::KeyedHits)>,
}

impl Snapshot {
    /// Share of one CPU all probes take from the target: the sum over the probes with
    /// an estimate; `None` when none has one.
    pub(crate) fn cpu_share(&self) -> Option<f64> {
        let shares = self.probes.iter().filter_map(|p| p.cpu_share);
        shares.fold(None, |total, share| Some(total.unwrap_or(0.0) + share))
    }
}

impl Aggregator {
    /// The current numbers of every probe, unpriced: `price::Pricer::snapshot` adds
    /// each probe's whole cost and CPU share, and the assumption.
    pub(crate) fn snapshot(&self, elapsed: Duration) -> Snapshot {
        let probes: Vec<ProbeSnapshot> = self
            .probes
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
            })
            .collect();
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
            assumption: None,
            target_cpu: None,
            latency: self.latency.rows(elapsed.as_secs_f64()),
            keyed: self.keyed_rows(),
        }
    }

    /// The distributions and time series of probe `probe_id`; `None` for an unknown id.
    pub(crate) fn focus_detail(&self, probe_id: u32) -> Option<FocusDetail> {
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
