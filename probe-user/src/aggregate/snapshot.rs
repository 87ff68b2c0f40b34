//! What the UI is sent: every probe's numbers at a moment, and the selected probe's
//! distributions and time series.

use std::time::Duration;

use super::summary::{HandlerSummary, PercentileCurve};
use super::{Aggregator, CapturedArgs};
use crate::delivery::DeliveryMode;

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
    /// The median busy part of those gaps (code run on the CPU), us, with it.
    pub busy_median_us: Option<f64>,
    /// What placed its hits on the calibration's curves, with them.
    pub reading: Option<crate::cost::estimate::GapReading>,
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
    /// The target's CPU over the last second, probes included, share of one CPU;
    /// `None` with several processes or before two readings.
    pub target_cpu: Option<f64>,
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
                let estimate = p.cost.estimate(
                    p.mode,
                    Some(&p.handler_ns),
                    p.timed_share(),
                    decision.assumes,
                );
                if let Some(e) = estimate {
                    priced_hot |= e.assumes != decision.assumes;
                }
                let (gap_median_us, busy_median_us) = match estimate.map(|e| e.assumes) {
                    Some(
                        crate::cost::assume::Assumption::Gap
                        | crate::cost::assume::Assumption::Clock,
                    ) => (
                        p.cost.gaps.summary().map(|g| g.median_us),
                        p.cost.busy_gaps.summary().map(|g| g.median_us),
                    ),
                    _ => (None, None),
                };
                let whole_cost_ns = estimate.map(|e| e.whole_ns);
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
                    busy_median_us,
                    reading: estimate.and_then(|e| e.reading),
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
            // Too few hits clocked yet, or a probe capturing arguments.
            crate::cost::assume::Assumption::Clock if priced_hot => {
                decision
                    .why
                    .push_str("; cold where the clock cannot be read yet");
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
            target_cpu: self
                .assumer
                .target_cores_live()
                .filter(|_| !self.count_processes),
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
