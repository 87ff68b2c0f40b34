//! Presentation: the live terminal UI, the end-of-run summary, and exports.
pub(crate) mod answer;
pub(crate) mod calibration;
pub(crate) mod cost_report;
pub(crate) mod export;
pub(crate) mod format;
pub(crate) mod headline;
pub(crate) mod list;
pub(crate) mod listen;
pub(crate) mod names;
pub(crate) mod otlp;
pub(crate) mod processes;
pub(crate) mod summary;
pub(crate) mod tui;

// The priced results present reads, from the price stage: the live snapshot, the
// run's report, and the words a price is given in.
use crate::price::{
    Assumption, CostBasis, EstimateBracket, GapReading, Method, ProbeCostReport, ProbeSnapshot,
    Run, RunCostReport, SHARED_SPLIT, Snapshot, basis, cold_basis,
};
#[cfg(test)]
use crate::price::{Decision, OtherPrice, ProgramMethod, cpu_share};
use crate::spec::ProbeKind;

/// Said at the start of a run on a host without a calibration for its kernel and CPU.
pub(crate) const NO_CALIBRATION: &str = "probetop: no calibration for this kernel and CPU yet, so no cost per hit (COST and %CPU stay empty): `probetop calibrate` measures it in 20-40 s on up to one CPU, once per kernel and CPU";

/// The same in the TUI's footer, for as long as the run has no calibration.
pub(crate) const NO_CALIBRATION_FOOTER: &str =
    "no calibration: COST, %CPU empty; `probetop calibrate`";

/// How a probe is named on screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeLabel {
    pub kind: ProbeKind,
    /// `kind:name`, as a user would write the spec.
    pub display: String,
    /// The object's path.
    pub object: String,
    /// What the name resolved to when that is another name (`__libc_calloc` for
    /// `uprobe:calloc`, `__strlen_avx2` for the IFUNC `strlen`): the detail pane says so.
    pub resolved: Option<String>,
    /// Set on a probe of a program the target no longer runs: the number of the exec
    /// (1 for the first) that replaced it (`--follow-exec`). Such a row keeps its
    /// measurements and never fires again.
    pub before_exec: Option<u32>,
    /// Whose probe the row is, for the TUI's OWNER column: another tool's (`bpftrace
    /// 1234`), or probetop's own sharing its breakpoint with one (`own+bpftrace 1234`);
    /// `None`: probetop's own, alone on its site.
    pub owner: Option<String>,
    /// The site's file offset, which tells apart two probes whose names read the same
    /// ([`names::distinguish`]).
    pub(crate) site: Option<u64>,
}

impl ProbeLabel {
    pub(crate) fn new(kind: ProbeKind, name: &str, object: &str) -> Self {
        Self {
            kind,
            display: format!("{kind}:{name}"),
            object: object.to_string(),
            resolved: None,
            before_exec: None,
            owner: None,
            site: None,
        }
    }

    /// The name with the exec that retired the probe, if one did: for summaries.
    /// The name on one line as tables print it (a symbol's name may hold anything).
    pub(crate) fn full_name(&self) -> String {
        let name = crate::sys::stderr::one_line(&self.display);
        match self.before_exec {
            Some(exec) => format!("{name} [before exec {exec}]"),
            None => name.into_owned(),
        }
    }
}
