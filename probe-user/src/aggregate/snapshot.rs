//! What the UI is sent of the measurements beyond each probe's numbers (which the
//! price stage's `Snapshot` carries, priced): the selected probe's distributions and
//! time series, one closed live interval, probetop's own use of the machine.

use std::time::Duration;

use super::Aggregator;
use super::summary::{HandlerSummary, PercentileCurve};

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

impl Aggregator {
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
