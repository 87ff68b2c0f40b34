//! The cost of the probes over a run: each probe's price from the run's measurements
//! (as the price stage's `Pricer` decided them), and the run's totals. Exports carry
//! these; `present::cost_report` words them.

use crate::aggregate::{Aggregator, Measurements, ProbeMeasurements};
use crate::attach::{bpf_stats, dispatch_time as dispatch};
use crate::calibrate::gap;
use crate::calibrate::gap::GapCounts;
use crate::insitu;
use crate::insn::classes;
use crate::price::ProbeCost;
use crate::price::estimate::Priced;
use crate::price::{assume, cpu_share, estimate};

/// What the end-of-run report is made of: what was measured, and what prices it
/// (`price::Pricer::measurements`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Run {
    pub measurements: Measurements,
    /// What prices each probe, in the measurements' order.
    pub costs: Vec<ProbeCost>,
    /// Every probe's gaps together, for a probe with too few of its own.
    pub pooled_gaps: GapCounts,
    /// Hot or cold over the run so far, and why.
    pub assumption: Option<assume::Decision>,
}

impl Run {
    /// The calibration rows every probe is priced with.
    fn assumes(&self) -> assume::Assumption {
        self.assumption
            .as_ref()
            .map(|d| d.assumes)
            .unwrap_or_default()
    }

    /// Each probe's measurements, with what prices them.
    fn priced(&self) -> impl Iterator<Item = (&ProbeMeasurements, Priced<'_>)> {
        self.measurements
            .probes
            .iter()
            .zip(&self.costs)
            .map(|(probe, cost)| (probe, cost.with(&probe.measured, &self.pooled_gaps)))
    }

    /// The cost of each probe over a run of `duration`, by probe id.
    pub(crate) fn probe_reports(&self, duration: std::time::Duration) -> Vec<ProbeCostReport> {
        let assumes = self.assumes();
        self.priced()
            .map(|(probe, priced)| probe_report(probe, priced, assumes, duration))
            .collect()
    }
}

/// A probe's cost over a whole run, for exports.
#[derive(Debug, Clone, Default)]
pub struct ProbeCostReport {
    pub site: Option<classes::SiteClass>,
    pub whole_cost_ns: Option<f64>,
    pub method: Option<estimate::Method>,
    /// Share of one CPU over the run: whole cost x hits / duration.
    pub cpu_share: Option<f64>,
    pub dispatch: Option<dispatch::DispatchMeasure>,
    /// The calibration rows the whole cost was priced with, hot or cold.
    pub assumes: Option<assume::Assumption>,
    /// Priced by the clock: what placed its hits on the curves.
    pub reading: Option<estimate::GapReading>,
    /// The gaps before its hits on their CPUs.
    pub gaps: Option<gap::GapSummary>,
    /// In-kernel: the ring handler's clock over the hits streamed first.
    pub streamed_clock: Option<crate::aggregate::HandlerSummary>,
    /// Another tool's probe: its owner's program per run, and how that was found.
    pub other: Option<estimate::OtherPrice>,
    /// What probetop's own counting program adds per hit, ns (calibration).
    pub counting_ns: Option<f64>,
    /// probetop's own probe on a breakpoint other tools' probes share: the trap split
    /// between the owners, and those owners.
    pub shared: Option<(estimate::SharedSplit, Vec<estimate::SharedOwner>)>,
}

/// The run's cost beyond single probes, for exports.
#[derive(Debug, Clone, Default)]
pub struct RunCostReport {
    /// Share of one CPU all estimated probes took over the run.
    pub cpu_share: Option<f64>,
    /// Kernel dispatches in the target matching none of the probes.
    pub other_dispatch: Option<dispatch::SlotTotal>,
    /// Kernel dispatches in the target that went untimed (their start unseen).
    pub dispatch_unmeasured: Option<u64>,
    /// Which kernel functions timed the dispatches.
    pub dispatch_hooks: Option<dispatch::Hooks>,
    pub other_programs: Vec<bpf_stats::OtherProgram>,
    /// What the probes cost the target measured on it (`--in-situ`).
    pub in_situ: Option<insitu::InSituSummary>,
    /// The estimated whole cost per hit over every probe (weighted by hits), for the
    /// comparison with the in-situ number.
    pub estimated_per_hit_ns: Option<f64>,
    /// Hot or cold over the run, and why.
    pub assumption: Option<assume::Decision>,
    /// The same estimate under each loop the calibration has: the range the chosen one
    /// lies in.
    pub bracket: EstimateBracket,
}

/// The run's estimate per hit over every probe (weighted by hits) under each
/// assumption the calibration can price: where the caches of the tight loop, of the
/// cold loop and of the handler's clock put the hits. Where they disagree the chosen
/// assumption decides, and the user sees by how much it could be off.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EstimateBracket {
    pub hot: Option<f64>,
    /// `None` without the calibration's cold rows.
    pub cold: Option<f64>,
    /// `None` where no probe's clock could be read (too few hits, `--args`, a
    /// calibration without the clocks); probes without it are priced cold here, as
    /// `--assume clock` does.
    pub clock: Option<f64>,
}

impl EstimateBracket {
    pub(crate) fn of(run: &Run) -> Self {
        Self {
            hot: per_hit_under(run, assume::Assumption::Hot),
            cold: per_hit_under(run, assume::Assumption::Cold),
            clock: per_hit_under(run, assume::Assumption::Clock),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hot.is_none() && self.cold.is_none() && self.clock.is_none()
    }
}

/// The whole cost per hit of `probes` priced under `assume`, weighted by hits; `None`
/// when a probe with hits has no estimate, or when the calibration cannot price
/// `assume` for any of them (no cold rows; no clock read).
fn per_hit_under(run: &Run, assume: assume::Assumption) -> Option<f64> {
    let (mut total, mut hits, mut any_priced_as_asked) = (0.0, 0u64, false);
    for (probe, priced) in run.priced().filter(|(p, _)| p.hits > 0) {
        let estimate = priced.estimate(
            probe.mode,
            Some(&probe.handler_ns),
            probe.timed_share,
            assume,
        )?;
        any_priced_as_asked |= estimate.assumes == assume;
        total += estimate.whole_ns * probe.hits as f64;
        hits += probe.hits;
    }
    (hits > 0 && any_priced_as_asked).then(|| total / hits as f64)
}

/// The cost of one probe over a run of `duration`, priced under `assumes`.
fn probe_report(
    probe: &ProbeMeasurements,
    priced: Priced<'_>,
    assumes: assume::Assumption,
    duration: std::time::Duration,
) -> ProbeCostReport {
    let estimate = priced.estimate(
        probe.mode,
        Some(&probe.handler_ns),
        probe.timed_share,
        assumes,
    );
    let seconds = duration.as_secs_f64();
    ProbeCostReport {
        site: priced.site.clone(),
        whole_cost_ns: estimate.map(|e| e.whole_ns),
        method: estimate.map(|e| e.method),
        cpu_share: estimate
            .filter(|_| seconds > 0.0)
            .map(|e| cpu_share(e.whole_ns, probe.hits as f64 / seconds)),
        dispatch: probe.measured.dispatch.clone().filter(|d| d.measured()),
        assumes: estimate.map(|e| e.assumes),
        reading: estimate.and_then(|e| e.reading),
        gaps: probe.measured.gaps.summary(),
        streamed_clock: probe
            .measured
            .streamed_clock
            .as_ref()
            .map(crate::aggregate::HandlerSummary::of),
        other: priced.other,
        counting_ns: priced.counting_ns(),
        shared: priced
            .estimate_alone(
                probe.mode,
                Some(&probe.handler_ns),
                probe.timed_share,
                assumes,
            )
            .and_then(|alone| priced.shared_split(&alone))
            .map(|split| (split, priced.shared.clone())),
    }
}

/// The run's totals over `duration`.
pub(crate) fn run_report(
    aggregator: &Aggregator,
    run: &Run,
    duration: std::time::Duration,
    other_programs: Vec<bpf_stats::OtherProgram>,
) -> RunCostReport {
    let shares = run
        .probe_reports(duration)
        .into_iter()
        .filter_map(|p| p.cpu_share)
        .collect::<Vec<_>>();
    RunCostReport {
        cpu_share: shares
            .into_iter()
            .fold(None, |total, s| Some(total.unwrap_or(0.0) + s)),
        other_dispatch: aggregator.other_dispatch,
        dispatch_unmeasured: aggregator.dispatch_unmeasured,
        dispatch_hooks: aggregator.dispatch_hooks,
        other_programs,
        in_situ: None,
        estimated_per_hit_ns: None,
        assumption: run.assumption.clone(),
        bracket: EstimateBracket::of(run),
    }
}
