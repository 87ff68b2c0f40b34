//! The cost of the probes over a run: each probe's price from the run's measurements
//! (as the price stage's `Pricer` decided them), and the run's totals. Exports carry
//! these; `present::cost_report` words them.

use crate::aggregate::{Aggregator, Measurements, ProbeMeasurements};
use crate::attach::{bpf_stats, dispatch_time as dispatch};
use crate::calibrate::gap;
use crate::insitu;
use crate::insn::classes;
use crate::price::{assume, cpu_share, estimate};

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
    pub fn of(probes: &[ProbeMeasurements]) -> Self {
        Self {
            hot: per_hit_under(probes, assume::Assumption::Hot),
            cold: per_hit_under(probes, assume::Assumption::Cold),
            clock: per_hit_under(probes, assume::Assumption::Clock),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hot.is_none() && self.cold.is_none() && self.clock.is_none()
    }
}

/// The whole cost per hit of `probes` priced under `assume`, weighted by hits; `None`
/// when a probe with hits has no estimate, or when the calibration cannot price
/// `assume` for any of them (no cold rows; no clock read).
fn per_hit_under(probes: &[ProbeMeasurements], assume: assume::Assumption) -> Option<f64> {
    let (mut total, mut hits, mut any_priced_as_asked) = (0.0, 0u64, false);
    for probe in probes.iter().filter(|p| p.hits > 0) {
        let estimate = probe.cost.estimate(
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

/// The cost of one probe over a run of `duration`.
pub(crate) fn probe_report(
    probe: &ProbeMeasurements,
    duration: std::time::Duration,
) -> ProbeCostReport {
    let estimate = probe.cost.estimate(
        probe.mode,
        Some(&probe.handler_ns),
        probe.timed_share,
        probe.assumes,
    );
    let seconds = duration.as_secs_f64();
    ProbeCostReport {
        site: probe.cost.site.clone(),
        whole_cost_ns: estimate.map(|e| e.whole_ns),
        method: estimate.map(|e| e.method),
        cpu_share: estimate
            .filter(|_| seconds > 0.0)
            .map(|e| cpu_share(e.whole_ns, probe.hits as f64 / seconds)),
        dispatch: probe.cost.dispatch.clone().filter(|d| d.measured()),
        assumes: estimate.map(|e| e.assumes),
        reading: estimate.and_then(|e| e.reading),
        gaps: probe.cost.gaps.summary(),
        streamed_clock: probe
            .cost
            .streamed_clock
            .as_ref()
            .map(crate::aggregate::HandlerSummary::of),
        other: probe.cost.other,
        counting_ns: probe.cost.counting_ns(),
        shared: probe
            .cost
            .estimate_alone(
                probe.mode,
                Some(&probe.handler_ns),
                probe.timed_share,
                probe.assumes,
            )
            .and_then(|alone| probe.cost.shared_split(&alone))
            .map(|split| (split, probe.cost.shared.clone())),
    }
}

/// The run's totals over `duration`.
pub(crate) fn run_report(
    aggregator: &Aggregator,
    measurements: &Measurements,
    duration: std::time::Duration,
    other_programs: Vec<bpf_stats::OtherProgram>,
) -> RunCostReport {
    let shares = measurements
        .probes
        .iter()
        .filter_map(|p| probe_report(p, duration).cpu_share)
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
        assumption: measurements.assumption.clone(),
        bracket: EstimateBracket::of(&measurements.probes),
    }
}
