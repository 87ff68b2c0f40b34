//! The price stage: what a hit costs the traced process, per probe, live and at the end.
//!
//! The handler time probetop shows is only the part inside its own BPF program. A hit
//! also costs the trap into the kernel, the uprobe lookup, emulating or single-stepping
//! the probed instruction, and the way back: several times more. This stage prices
//! each probe's hits from what was measured (`aggregate`) and this machine's
//! calibration (`calibrate::table`, filled by `probetop calibrate`):
//!
//! - [`costs`]: each resolved point joined to its site's cost class and calibrated
//!   price, before the run;
//! - [`assume`]: which calibration rows price a target's hits (`--assume`);
//! - [`estimate`]: the whole cost per hit and the CPU share, per probe;
//! - [`pricer`]: the [`Pricer`] the collector owns, which prices each live snapshot
//!   and the measurements the end-of-run report is made of;
//! - [`snapshot`]: the [`Snapshot`] the UI is sent: every probe's numbers, priced;
//! - [`report`]: a probe's and the run's cost over the whole run, for exports;
//! - [`target_cpu`]: the target's (or the process set's) CPU the headline sets the
//!   probes' cost against.
//!
//! The instruction's class comes from `insn`; dispatch time as measured, and other
//! tools' programs on the target's probes, from `attach`.

pub(crate) mod assume;
pub(crate) mod costs;
pub(crate) mod estimate;
pub(crate) mod pricer;
pub(crate) mod report;
pub(crate) mod snapshot;
pub(crate) mod target_cpu;

// What other stages use: the costs prepared before a run and the Pricer that prices
// it, then the priced results (the live snapshot, the run's report) and the words
// they are given in (the assumption, the method, other tools' prices).
#[cfg(test)]
pub(crate) use assume::Decision;
pub(crate) use assume::{AssumeChoice, Assumer, Assumption};
pub(crate) use costs::{Prepared, entry_warnings, prepare as prepare_costs};
pub(crate) use estimate::{
    CostBasis, GapReading, Method, OtherPrice, ProbeCost, ProgramMethod, SHARED_SPLIT, SharedOwner,
    basis, cold_basis, cpu_share,
};
pub(crate) use pricer::Pricer;
pub(crate) use report::{EstimateBracket, ProbeCostReport, Run, RunCostReport, run_report};
pub(crate) use snapshot::{ProbeSnapshot, Snapshot};

use crate::insn::classes::CostClass;

/// A cost tag for a probe's name on screen: only the classes worth a second look.
pub(crate) fn label_tag(cost: &ProbeCost) -> Option<&'static str> {
    match cost.site.as_ref()?.class {
        CostClass::SingleStepped => Some("[sstep]"),
        CostClass::Refused => Some("[refused]"),
        CostClass::Optimized => Some("[opt]"),
        CostClass::Unsafe => Some("[UNSAFE]"),
        _ => None,
    }
}
