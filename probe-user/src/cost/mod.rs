//! The whole cost of a hit: what a probe costs the traced process, per probe, live.
//!
//! The handler time probetop has always shown is only the part inside its own BPF
//! program. A hit also costs the trap into the kernel, the uprobe lookup, emulating or
//! single-stepping the probed instruction, and the way back: several times more. This
//! module puts the pieces together:
//!
//! - [`classes`]: the cost class of each probe site, from the probed instruction;
//! - [`dispatch`]: kernel dispatch time measured live with fentry/fexit;
//! - [`calibrate`]: `probetop calibrate`, per-class costs measured on this machine;
//! - [`estimate`]: the whole cost per hit and the CPU share, per probe;
//! - [`bpf_stats`]: other BPF programs on the target's probes, and what they cost.

pub mod assume;
pub mod bpf_stats;
pub mod calibrate;
pub mod classes;
pub mod dispatch;
pub mod estimate;
pub mod gap;
pub mod insitu;
pub mod kernel_btf;
pub mod sites;
pub mod stats;
pub mod workload;

use std::fmt::Write as _;

pub use estimate::{ProbeCost, cpu_share};

use crate::aggregate::{Aggregator, HandlerSummary};
use crate::present::ProbeLabel;
use crate::resolve::ProbePoint;
use crate::spec::ProbeKind;
use calibrate::Calibration;
use classes::{CostClass, KernelRules};
use dispatch::{Dispatch, ProbeSite};
use probe_common::dispatch as slots;

/// What the cost module knows about a run's probes before they are attached.
pub struct Prepared {
    /// Per probe id.
    pub costs: Vec<ProbeCost>,
    /// Per probe id: where it sits in the target, for dispatch measurement.
    pub sites: Vec<ProbeSite>,
    /// This machine's calibration, if cached.
    pub calibration: Option<Calibration>,
}

/// Classifies every probe site and looks up this machine's calibration.
pub fn prepare(points: &[&ProbePoint]) -> Prepared {
    let rules = KernelRules::running();
    let calibration = calibrate::load_cached();
    let gap_curve = calibration
        .as_ref()
        .and_then(|c| c.gap.clone())
        .map(std::sync::Arc::new);
    let sites: Vec<ProbeSite> = points
        .iter()
        .map(|p| ProbeSite {
            kind: p.kind,
            vaddr: p.load_bias.map(|bias| p.address.wrapping_add(bias)),
        })
        .collect();
    let costs =
        points
            .iter()
            .enumerate()
            .map(|(id, p)| {
                let site = classes::classify_file(&p.attach_path, p.file_offset, rules)
                    .unwrap_or_else(|_| classes::SiteClass {
                        class: CostClass::Unknown,
                        instruction: String::new(),
                        reason: Some("cannot read the probed file"),
                    });
                // A uretprobe shares its entry breakpoint with an entry probe on the same
                // function, whose cost that breakpoint then is.
                let shares_entry = p.kind == ProbeKind::Uretprobe
                    && points.iter().enumerate().any(|(other, q)| {
                        other != id
                            && q.kind != ProbeKind::Uretprobe
                            && q.attach_path == p.attach_path
                            && q.file_offset == p.file_offset
                    });
                ProbeCost {
                    basis: calibration
                        .as_ref()
                        .map(|c| estimate::basis(c, site.class, p.kind, shares_entry)),
                    cold_basis: calibration
                        .as_ref()
                        .and_then(|c| estimate::cold_basis(c, site.class, p.kind, shares_entry)),
                    site: Some(site),
                    gap_curve: gap_curve.clone(),
                    ..Default::default()
                }
            })
            .collect();
    Prepared {
        costs,
        sites,
        calibration,
    }
}

/// Warnings printed for at most this many single-stepped entries; then a count.
const MAX_ENTRY_WARNINGS: usize = 5;

/// One line per probe on a function entry the kernel single-steps, for stderr before
/// attaching: a second trap on every hit, and, for an entry uprobe, a later
/// instruction the kernel emulates that every call reaches once, if one is found
/// ([`sites::later_site`]), with the spec that probes it. Nothing is moved: the user
/// decides. `probes` are (spec as written, point) in probe id order, `costs` from
/// [`prepare`].
pub fn entry_warnings(probes: &[(&str, &ProbePoint)], costs: &[ProbeCost]) -> Vec<String> {
    let rules = KernelRules::running();
    let mut lines = Vec::new();
    let mut more = 0usize;
    for (&(spec_text, point), cost) in probes.iter().zip(costs) {
        let Some(site) = cost.site.as_ref() else {
            continue;
        };
        let Some(span) = point.function else {
            continue;
        };
        if site.class != CostClass::SingleStepped || span.offset != 0 {
            continue;
        }
        if lines.len() == MAX_ENTRY_WARNINGS {
            more += 1;
            continue;
        }
        let head = format!(
            "probetop: warning: {spec_text}: the entry of {} ({}) is single-stepped, a second trap on every hit",
            point.name, site.instruction
        );
        if point.kind == ProbeKind::Uretprobe {
            lines.push(format!("{head}; a return probe can only start there"));
            continue;
        }
        let later = later_site_of(point, span, rules);
        let tail = match later {
            Ok(later) => {
                let spec = entry_spec(spec_text, point, probes);
                later.advice(&spec)
            }
            Err(why) => format!("no later site is offered: {}", why.reason()),
        };
        lines.push(format!("{head}; {tail}"));
    }
    if more > 0 {
        lines.push(format!(
            "probetop: warning: and {more} more probe{} on single-stepped entries (`probetop list` shows each site's cost class and hint)",
            if more == 1 { "" } else { "s" }
        ));
    }
    lines
}

/// The later site of the function whose entry `point` is.
fn later_site_of(
    point: &ProbePoint,
    span: crate::resolve::FunctionSpan,
    rules: KernelRules,
) -> Result<sites::LaterSite, sites::NoLaterSite> {
    if span.size == 0 || span.size > sites::MAX_FUNCTION_BYTES {
        return Err(sites::NoLaterSite::Unsized);
    }
    let code = std::fs::File::open(&point.attach_path)
        .and_then(|file| sites::read_code(&file, point.file_offset, span.size))
        .map_err(|_| sites::NoLaterSite::Undecodable)?;
    if code.len() as u64 != span.size {
        return Err(sites::NoLaterSite::Undecodable);
    }
    sites::later_site(
        &code,
        point.address,
        point.file_offset,
        span.inner_symbol.as_slice(),
        rules,
    )
}

/// A uprobe spec naming `point`'s function alone, to which `+OFFSET` is added: the
/// spec as written when it names one function by a plain name, else the object as
/// written and the symbol as stored.
fn entry_spec(spec_text: &str, point: &ProbePoint, probes: &[(&str, &ProbePoint)]) -> String {
    let spec = crate::spec::ProbeSpec::parse(spec_text).ok();
    let alone = probes.iter().filter(|(s, _)| *s == spec_text).count() == 1;
    match spec {
        Some(spec) if alone && !spec.is_glob() && spec.offset.is_none() => spec.text,
        spec => {
            let object = spec
                .and_then(|s| s.object)
                .map(|o| format!("{o}:"))
                .unwrap_or_default();
            format!("uprobe:{object}{}", point.symbol)
        }
    }
}

/// Starts dispatch measurement on a loaded attachment (loaded with `dispatch_tgid`);
/// `None`, after saying why once, when the kernel refuses.
pub fn start_dispatch(
    attachment: &mut crate::attach::Attachment,
    sites: &[ProbeSite],
) -> Option<Dispatch> {
    let verbose = std::env::var("PROBETOP_VERBOSE").is_ok_and(|v| v == "1");
    match Dispatch::start(attachment.ebpf_mut(), sites) {
        Ok(d) => {
            for note in &d.notes {
                say(&format!("probetop: dispatch: {note}"));
            }
            if verbose {
                say(&format!("probetop: dispatch: {}", d.hooks.describe()));
            }
            Some(d)
        }
        Err(e) if verbose => {
            say(&format!(
                "probetop: kernel dispatch time not measured ({e}); whole cost per hit comes from calibration alone"
            ));
            None
        }
        // Not an error of the run: many kernels refuse fentry. One short line.
        Err(e) => {
            say(&format!(
                "probetop: kernel dispatch time not measured on this kernel ({}; PROBETOP_VERBOSE=1 says more)",
                e.short()
            ));
            None
        }
    }
}

/// Ends kernel dispatch measurement when the target execs: the kernel side joins
/// dispatches to probes by their addresses in the old program, which may be those of
/// unrelated code in the new one. The totals measured up to then stay.
pub fn stop_dispatch(attachment: &mut crate::attach::Attachment) {
    dispatch::stop(attachment.ebpf_mut());
}

/// Hands each probe its cost knowledge; `dispatch_on` readies the live measurement.
pub fn install(aggregator: &mut Aggregator, costs: Vec<ProbeCost>, dispatch_on: bool) {
    for (probe, mut cost) in aggregator.probes_mut().iter_mut().zip(costs) {
        if dispatch_on {
            cost.dispatch = Some(Default::default());
        }
        probe.cost = cost;
    }
    if dispatch_on {
        aggregator.other_dispatch = Some(Default::default());
    }
}

/// Takes the kernel's dispatch totals (and histograms) as the window opens.
pub fn baseline_dispatch(dispatch: &Dispatch, aggregator: &mut Aggregator) {
    for (id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
        let id = id as u32;
        let Some(measure) = probe.cost.dispatch.as_mut() else {
            continue;
        };
        let entry = dispatch.total(id, slots::ENTRY).unwrap_or_default();
        let ret = dispatch.total(id, slots::RETURN).unwrap_or_default();
        measure.baseline(entry, ret);
        measure.baseline_histograms(
            dispatch.histogram(id, slots::ENTRY).unwrap_or_default(),
            dispatch.histogram(id, slots::RETURN).unwrap_or_default(),
        );
    }
    dispatch.set_other_base(dispatch.other().unwrap_or_default());
    aggregator.dispatch_hooks = Some(dispatch.hooks);
    if let Some(other) = aggregator.other_dispatch.as_mut() {
        *other = Default::default();
    }
}

/// Reads the kernel's dispatch totals into the aggregator; with `histograms`, the
/// histograms too (hundreds of reads per probe: at the end of a run, not every tick).
/// A failed read keeps the last numbers.
pub fn read_dispatch(dispatch: &Dispatch, aggregator: &mut Aggregator, histograms: bool) {
    for (id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
        let id = id as u32;
        let Some(measure) = probe.cost.dispatch.as_mut() else {
            continue;
        };
        if let (Ok(entry), Ok(ret)) = (
            dispatch.total(id, slots::ENTRY),
            dispatch.total(id, slots::RETURN),
        ) {
            measure.update(entry, ret);
        }
        if histograms
            && let (Ok(entry), Ok(ret)) = (
                dispatch.histogram(id, slots::ENTRY),
                dispatch.histogram(id, slots::RETURN),
            )
        {
            measure.set_histograms(&entry, &ret);
        }
    }
    if let (Some(other), Ok(now)) = (
        aggregator.other_dispatch.as_mut(),
        dispatch.other_since_base(),
    ) {
        *other = now;
    }
}

/// A cost tag for a probe's name on screen: only the classes worth a second look.
pub fn label_tag(cost: &ProbeCost) -> Option<&'static str> {
    match cost.site.as_ref()?.class {
        CostClass::SingleStepped => Some("[sstep]"),
        CostClass::Refused => Some("[refused]"),
        CostClass::Optimized => Some("[opt]"),
        _ => None,
    }
}

/// The end-of-run cost report, for stderr: the total CPU share, then one line per
/// probe with its class, whole cost per hit, average rate and share over the run, and
/// how the cost was estimated.
pub fn report(
    labels: &[ProbeLabel],
    aggregator: &Aggregator,
    duration: std::time::Duration,
) -> String {
    let mut out = String::new();
    let measurements = aggregator.measurements();
    let measured = measurements.probes;
    let reports: Vec<ProbeCostReport> =
        measured.iter().map(|p| probe_report(p, duration)).collect();
    let total = reports
        .iter()
        .filter_map(|r| r.cpu_share)
        .fold(None, |t: Option<f64>, s| Some(t.unwrap_or(0.0) + s));
    let assumed = reports.iter().find_map(|r| r.assumes);
    let assumption = match (&measurements.assumption, assumed) {
        (Some(decision), Some(used))
            if decision.assumes == assume::Assumption::Gap && used != decision.assumes =>
        {
            format!(
                "; each hit priced by its gap where enough gaps were counted, else {} (too few counted: in-kernel mode samples one gap in --time-every hits)",
                used.as_str()
            )
        }
        (Some(decision), Some(used)) if used != decision.assumes => format!(
            "; caches {} between hits ({}), but this calibration has no cold rows: priced hot, run `probetop calibrate` again",
            decision.assumes.as_str(),
            decision.why
        ),
        (Some(decision), _) => format!(
            "; caches {} between hits: {}",
            decision.assumes.as_str(),
            decision.why
        ),
        (None, _) => String::new(),
    };
    match total {
        Some(share) => {
            let _ = writeln!(
                out,
                "probetop: these probes cost the target {} of a CPU over the run (hits/s x whole cost per hit, estimated{assumption})",
                percent(share)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "probetop: no whole-cost estimate: run `probetop calibrate` once on this machine (kernel and CPU) to get one"
            );
        }
    }
    let seconds = duration.as_secs_f64().max(f64::MIN_POSITIVE);
    for ((label, probe), report) in labels.iter().zip(&measured).zip(&reports) {
        let class = report.site.as_ref().map_or("unknown".to_string(), |s| {
            format!("{} ({})", s.class, s.instruction)
        });
        let mut line = format!("  {}  {class}", label.full_name());
        match (report.whole_cost_ns, report.cpu_share) {
            (Some(whole), Some(share)) => {
                let _ = write!(
                    line,
                    ": {whole:.0} ns/hit x {:.0}/s = {} of a CPU",
                    probe.hits as f64 / seconds,
                    percent(share)
                );
            }
            _ => line.push_str(": whole cost not estimated"),
        }
        let handler = HandlerSummary::of(&probe.handler_ns);
        if handler.count > 0 {
            let _ = write!(line, "; handler {:.0} ns", handler.mean);
        }
        if let Some(per_hit) = report.dispatch.as_ref().and_then(|d| d.per_hit_ns()) {
            let _ = write!(line, "; dispatch {per_hit:.0} ns measured");
        }
        if let (Some(gaps), Some(assume::Assumption::Gap)) = (report.gaps, report.assumes) {
            let _ = write!(
                line,
                "; gap before a hit: median {}, {:.0}% 100 us or more",
                fmt_gap_us(gaps.median_us),
                gaps.share_after_100_us * 100.0
            );
        }
        if let Some(method) = report.method {
            let _ = write!(line, " [{}]", method.as_str());
        }
        let _ = writeln!(out, "{line}");
    }
    if let Some(other) = aggregator.other_dispatch.filter(|o| o.count > 0) {
        let _ = writeln!(
            out,
            "  other uprobes in the target (not probetop's): {} hits, {:.0} ns kernel dispatch each",
            other.count,
            other.mean().unwrap_or(0.0)
        );
    }
    out
}

/// One line on stderr; a failed write is ignored (a terminal gone after SIGHUP must
/// not stop a run, nor its exports).
/// A gap bucket's middle, us, as the report prints it.
fn fmt_gap_us(us: f64) -> String {
    match us {
        u if u <= 0.0 => "under 1 us".to_string(),
        u if u < 1000.0 => format!("{u:.0} us"),
        u => format!("{:.1} ms", u / 1000.0),
    }
}

pub(crate) fn say(line: &str) {
    // Held while the TUI has the terminal, where it would garble the screen.
    crate::sys::say(line);
}

fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p < 0.1 {
        format!("{p:.3}%")
    } else {
        format!("{p:.1}%")
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
    /// The gaps before its hits on their CPUs.
    pub gaps: Option<gap::GapSummary>,
}

/// The run's cost beyond single probes, for exports.
#[derive(Debug, Clone, Default)]
pub struct RunCostReport {
    /// Share of one CPU all estimated probes took over the run.
    pub cpu_share: Option<f64>,
    /// Kernel dispatches in the target matching none of the probes.
    pub other_dispatch: Option<dispatch::SlotTotal>,
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
}

/// The cost of one probe over a run of `duration`.
pub fn probe_report(
    probe: &crate::aggregate::ProbeMeasurements,
    duration: std::time::Duration,
) -> ProbeCostReport {
    let handler = HandlerSummary::of(&probe.handler_ns);
    let estimate = probe.cost.estimate(
        probe.mode,
        (handler.count > 0).then_some(handler.mean),
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
        gaps: probe.cost.gaps.summary(),
    }
}

/// The run's totals over `duration`.
pub fn run_report(
    aggregator: &Aggregator,
    duration: std::time::Duration,
    other_programs: Vec<bpf_stats::OtherProgram>,
) -> RunCostReport {
    let measurements = aggregator.measurements();
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
        dispatch_hooks: aggregator.dispatch_hooks,
        other_programs,
        in_situ: None,
        estimated_per_hit_ns: None,
        assumption: measurements.assumption,
    }
}
