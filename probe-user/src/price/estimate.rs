//! The whole cost of a hit, per probe: what each hit costs the traced thread, and what
//! share of a CPU the probe takes from the target at its current rate.
//!
//! Two ways, best first:
//!
//! 1. **dispatch + residual**: the kernel dispatch time measured live for this probe
//!    (fentry/fexit, see [`crate::attach::dispatch_time`]), plus the part it cannot see (the trap,
//!    the entry into the kernel and the way back to user space), calibrated for the
//!    probe's cost class with dispatch measurement on.
//! 2. **calibration**: the calibrated cost of a hit of the probe's class with an empty
//!    program, plus what probetop's handler adds in the probe's mode, corrected by how
//!    far the live handler time differs from the handler time during calibration.
//!
//! Each is priced under the run's assumption (see [`super::assume`]): by the
//! calibration's hot loop (caches warm between hits), its cold loop (a server's
//! footprint runs between hits), or the handler's clock (the work curve read at how
//! slow probetop's ring handler ran on each hit, or the gap curve at the time before it
//! where dearer; cold where the clock cannot be read).
//!
//! Without a calibration for this kernel and CPU there is no estimate: `None`, never a
//! guess.

use hdrhistogram::Histogram;
use serde::Serialize;

use std::sync::Arc;

use super::assume::Assumption;
use crate::aggregate::Measured;
use crate::attach::dispatch_time::DispatchMeasure;
use crate::attach::others::EventShape;
use crate::calibrate::gap::{GapCounts, GapCurve};
use crate::calibrate::table::{Calibration, Case, DispatchCase};
use crate::calibrate::work::WorkCurve;
use crate::delivery::DeliveryMode;
use crate::insn::classes::{CostClass, SiteClass};
use crate::spec::ProbeKind;

/// Calibrated numbers for one probe (its class and kind), ns per hit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct CostBasis {
    /// A hit with an empty program: trap, lookup, emulation or step, way back.
    pub base_ns: Option<f64>,
    /// What probetop's handler adds with the ring buffer, and its own clock's reading
    /// meanwhile.
    pub on_top_ring_ns: Option<f64>,
    pub handler_ring_ns: Option<f64>,
    /// The same in in-kernel histogram mode, every hit timed.
    pub on_top_kernel_ns: Option<f64>,
    pub handler_kernel_ns: Option<f64>,
    /// In-kernel histogram mode with no hit timed: counting alone.
    pub on_top_kernel_untimed_ns: Option<f64>,
    /// Whole cost minus measured dispatch, with dispatch measurement on.
    pub residual_ns: Option<f64>,
    /// What a tracefs uprobe event (no arguments, enabled) adds to the empty-program
    /// hit of the same class: ftrace's record less the empty BPF program.
    pub tracefs_extra_ns: Option<f64>,
    /// What the same event's arguments and further instances add.
    pub tracefs_more: TracefsMore,
}

/// What a tracefs uprobe event adds per hit beyond the bare one, ns: each fetched
/// argument by what it reads, each trace instance beyond the first (the calibration's
/// shaped events less its bare one, `calibrate::tracefs_phase`; older caches: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct TracefsMore {
    pub register_ns: Option<f64>,
    pub memory_read_ns: Option<f64>,
    pub string_ns: Option<f64>,
    pub instance_ns: Option<f64>,
}

impl CostBasis {
    /// What a tracefs event of `shape` adds to the empty-program hit: the bare event's
    /// record, plus each argument and each instance beyond the first; parts the
    /// calibration did not measure (an older cache) add nothing. `None` without the
    /// bare event's row.
    pub(crate) fn tracefs_event_ns(&self, shape: Option<&EventShape>) -> Option<f64> {
        let bare = self.tracefs_extra_ns?;
        let Some(shape) = shape else {
            return Some(bare);
        };
        let more = &self.tracefs_more;
        let part = |n: u32, ns: Option<f64>| f64::from(n) * ns.unwrap_or(0.0);
        Some(
            bare + part(shape.registers, more.register_ns)
                + part(shape.memory_reads, more.memory_read_ns)
                + part(shape.strings, more.string_ns)
                + part(shape.instances.saturating_sub(1), more.instance_ns),
        )
    }
}

/// How an estimate was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Measured dispatch plus the calibrated residual of the class.
    DispatchAndCalibration,
    /// The calibrated cost of the class plus probetop's handler.
    Calibration,
    /// Measured on the target (`--in-situ`): the probe set's added CPU per hit, split
    /// among the probes in proportion to their estimates when there are several.
    InSitu,
    /// Another tool's probe: the calibrated trap of the site's class plus the owner's
    /// program per run ([`OtherPrice`]), without probetop's counting program.
    OtherTool,
    /// probetop's own probe on a breakpoint other tools' probes share: its program
    /// plus its even part of the one trap ([`SharedSplit`]).
    SharedSite,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::DispatchAndCalibration => "dispatch-and-calibration",
            Method::Calibration => "calibration",
            Method::InSitu => "in-situ",
            Method::OtherTool => "calibrated-trap-and-owner-program",
            Method::SharedSite => "shared-site-split",
        }
    }
}

/// What placed a hit priced by `--assume clock` on a calibration curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GapReading {
    /// The gap curve at the time its CPU went without a hit.
    Gap,
    /// The work curve at how slow the ring handler's own clock ran on it.
    HandlerClock,
    /// In-kernel: the work curve at how slow the ring handler's clock ran on the
    /// probe's hits streamed in its first seconds (`--clock-seconds`).
    StreamedClock,
}

impl GapReading {
    pub fn as_str(self) -> &'static str {
        match self {
            GapReading::Gap => "gap",
            GapReading::HandlerClock => "handler-clock",
            GapReading::StreamedClock => "streamed-clock",
        }
    }

    /// As the TUI's detail pane says it.
    pub fn short(self) -> &'static str {
        match self {
            GapReading::Gap => "gap",
            GapReading::HandlerClock => "clock",
            GapReading::StreamedClock => "clock at start",
        }
    }

    /// As the end-of-run line says it.
    pub fn describe(self) -> &'static str {
        match self {
            GapReading::Gap => "priced by its gaps",
            GapReading::HandlerClock => "priced by its handler's clock",
            GapReading::StreamedClock => "priced by its handler's clock while streamed",
        }
    }
}

/// What `--assume gap` adds to a probe's hot price.
struct GapPrice {
    extra_ns: f64,
    /// How much slower the gaps make the ring handler's clock read; `None` when the work
    /// curve prices the hits (its iterations hold the handler's slowdown: the live
    /// handler time corrects nothing).
    handler_slower_ns: Option<f64>,
    reading: GapReading,
}

/// The calibration row pricing an entry breakpoint of `class`.
fn entry_case(class: CostClass) -> Option<Case> {
    match class {
        CostClass::EmulatedNop => Some(Case::UsdtHit),
        CostClass::EmulatedPush | CostClass::EmulatedBranch => Some(Case::UprobeEmulated),
        CostClass::SingleStepped => Some(Case::UprobeSingleStepped),
        // Forced (`--force`), an unsafe nop5 is optimized all the same.
        CostClass::Optimized | CostClass::Unsafe => Some(Case::UprobeOptimized),
        CostClass::Refused | CostClass::Unknown => None,
    }
}

fn entry_dispatch_case(class: CostClass) -> Option<DispatchCase> {
    match class {
        CostClass::EmulatedNop => Some(DispatchCase::Usdt),
        CostClass::EmulatedPush | CostClass::EmulatedBranch => Some(DispatchCase::Emulated),
        CostClass::SingleStepped => Some(DispatchCase::SingleStepped),
        CostClass::Optimized | CostClass::Unsafe => Some(DispatchCase::Optimized),
        CostClass::Refused | CostClass::Unknown => None,
    }
}

/// The calibrated basis of a probe of `kind` on an instruction of `class`.
/// `shares_entry`: a uretprobe whose function also has an entry probe, whose
/// breakpoint it shares (its own cost is then the return alone).
pub(crate) fn basis(
    cal: &Calibration,
    class: CostClass,
    kind: ProbeKind,
    shares_entry: bool,
) -> CostBasis {
    let median = |case: Case| cal.row(case).map(|s| s.median);
    let residual = |case: DispatchCase| cal.dispatch_row(case).map(|r| r.residual_ns.median);
    let entry = entry_case(class).and_then(median);
    let entry_residual = entry_dispatch_case(class).and_then(residual);
    let (base_ns, residual_ns) = if kind == ProbeKind::Uretprobe {
        // The calibrated uretprobe starts with push %rbp: swap in this entry's class.
        let emulated = median(Case::UprobeEmulated);
        let ret = median(Case::Uretprobe);
        let emulated_residual = residual(DispatchCase::Emulated);
        let ret_residual = residual(DispatchCase::Uretprobe);
        let return_only = ret.zip(emulated).map(|(r, e)| r - e);
        let return_only_residual = ret_residual.zip(emulated_residual).map(|(r, e)| r - e);
        if shares_entry {
            (return_only, return_only_residual)
        } else {
            (
                return_only.zip(entry).map(|(r, e)| r + e),
                return_only_residual.zip(entry_residual).map(|(r, e)| r + e),
            )
        }
    } else {
        (entry, entry_residual)
    };
    CostBasis {
        base_ns,
        on_top_ring_ns: median(Case::HandlerRing),
        handler_ring_ns: cal.handler_ring_ns.map(|s| s.median),
        on_top_kernel_ns: median(Case::HandlerKernel),
        handler_kernel_ns: cal.handler_kernel_ns.map(|s| s.median),
        on_top_kernel_untimed_ns: median(Case::HandlerKernelUntimed),
        residual_ns,
        // Measured on a `push %rbp` entry; ftrace's record is the same on any site.
        tracefs_extra_ns: cal
            .tracefs_event_ns
            .map(|s| s.median)
            .zip(median(Case::UprobeEmulated))
            .map(|(event, empty)| (event - empty).max(0.0)),
        tracefs_more: tracefs_more(cal),
    }
}

/// [`TracefsMore`] from the calibration's tracefs events.
fn tracefs_more(cal: &Calibration) -> TracefsMore {
    let (Some(bare), Some(shapes)) = (cal.tracefs_event_ns, cal.tracefs_shapes.as_ref()) else {
        return TracefsMore::default();
    };
    let per_arg = |shaped: crate::stats::Summary| {
        Some(((shaped.median - bare.median) / f64::from(shapes.args.max(1))).max(0.0))
    };
    TracefsMore {
        register_ns: per_arg(shapes.registers_ns),
        memory_read_ns: per_arg(shapes.memory_ns),
        string_ns: per_arg(shapes.strings_ns),
        instance_ns: Some((shapes.two_instances_ns.median - bare.median).max(0.0)),
    }
}

/// The cold basis of a probe: the hot one with the cold loop's rows. Measured cold:
/// the emulated entry, the uretprobe, probetop's handler in ring and in-kernel (every
/// hit timed) modes. The other classes' entries are their hot row plus what the cold
/// loop adds to the emulated entry (the same trap and kernel path, missing the same
/// caches; a single-stepped hit's second trap is not counted twice); counting alone
/// (in-kernel, untimed) is its hot row plus what the cold loop adds to the timed
/// handler (the same program and maps). The dispatch residual stays hot. `None`
/// without cold rows.
pub(crate) fn cold_basis(
    cal: &Calibration,
    class: CostClass,
    kind: ProbeKind,
    shares_entry: bool,
) -> Option<CostBasis> {
    let cold = cal.cold.as_ref()?;
    let hot = basis(cal, class, kind, shares_entry);
    let median = |case: Case| cal.row(case).map(|s| s.median);
    let emulated_cold = median(Case::UprobeEmulatedCold)?;
    let entry_extra = emulated_cold - median(Case::UprobeEmulated)?;
    let entry = entry_case(class)
        .and_then(median)
        .map(|hot| hot + entry_extra);
    let base_ns = if kind == ProbeKind::Uretprobe {
        let return_only = median(Case::UretprobeCold)? - emulated_cold;
        if shares_entry {
            Some(return_only)
        } else {
            entry.map(|e| e + return_only)
        }
    } else {
        entry
    };
    let kernel_cold = median(Case::HandlerKernelCold);
    let kernel_extra = kernel_cold
        .zip(median(Case::HandlerKernel))
        .map(|(c, h)| c - h);
    Some(CostBasis {
        base_ns,
        on_top_ring_ns: median(Case::HandlerRingCold),
        handler_ring_ns: cold.handler_ring_ns.map(|s| s.median),
        on_top_kernel_ns: kernel_cold,
        handler_kernel_ns: cold.handler_kernel_ns.map(|s| s.median),
        on_top_kernel_untimed_ns: hot
            .on_top_kernel_untimed_ns
            .zip(kernel_extra)
            .map(|(u, extra)| u.max(0.0) + extra),
        residual_ns: hot.residual_ns,
        tracefs_extra_ns: hot.tracefs_extra_ns,
        tracefs_more: hot.tracefs_more,
    })
}

/// Everything known before the run about one probe's cost: its site, the calibration
/// that prices it, other tools' programs on it. What the run measures of its hits
/// (dispatch, gaps, the streamed clock) is the aggregator's ([`Measured`]); [`Priced`]
/// joins the two.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProbeCost {
    /// The probed instruction's class (`None`: not looked at).
    pub site: Option<SiteClass>,
    /// From this machine's calibration, if there is one: its hot loop ...
    pub basis: Option<CostBasis>,
    /// ... and its cold loop, if it has one.
    pub cold_basis: Option<CostBasis>,
    /// The calibration's gap curve, if it has one (shared by every probe).
    pub gap_curve: Option<Arc<GapCurve>>,
    /// The calibration's work curve, if it has one (shared by every probe).
    pub work_curve: Option<Arc<WorkCurve>>,
    /// Its handler reads argument values (`--args`): slower for that, not for cold
    /// caches, so its clock does not say how cold a hit was.
    pub captures_args: bool,
    /// Another tool's probe, which probetop only counts: priced as its owner's.
    pub other: Option<OtherPrice>,
    /// probetop's own probe on a breakpoint other tools' probes are on too: their
    /// programs, which run on the same trap (see [`SharedSplit`]).
    pub shared: Vec<SharedOwner>,
}

/// Another tool's probe on the breakpoint of one of probetop's own.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedOwner {
    pub owner: crate::attach::others::Owner,
    pub price: OtherPrice,
}

/// One trap shared by several owners' programs, split: each owner's marginal cost is
/// its program (what the target would save without it, the others staying), and its
/// share is that plus the trap split evenly between the owners. The shares add up to
/// the site's total: the trap plus every program.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedSplit {
    /// The calibrated hit with an empty program (or the measured dispatch's whole).
    pub trap_ns: f64,
    /// The trap plus every owner's program, ns per hit.
    pub total_ns: f64,
    /// probetop's own probe's part, then each other owner's, in order.
    pub own: SharedPart,
    pub others: Vec<SharedPart>,
}

/// One owner's part of a shared trap, ns per hit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedPart {
    /// Its program (probetop's: what its handler adds to the empty-program hit).
    pub marginal_ns: f64,
    /// Its marginal cost plus the trap over the number of owners.
    pub share_ns: f64,
}

/// How a shared trap is split, as exports say it.
pub(crate) const SHARED_SPLIT: &str = "trap-split-evenly";

/// What another tool's program costs per run, and how that was found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OtherPrice {
    /// ns per run (a tracefs event: ftrace's record); `None`: not known (a tracefs
    /// event without a calibrated record).
    pub program_ns: Option<f64>,
    pub program_method: ProgramMethod,
}

/// How an owner's program time per run was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProgramMethod {
    /// The kernel's BPF run statistics over the window (`--bpf-stats`).
    BpfStats,
    /// Assumed as probetop's own counting program's, from the calibration: a BPF
    /// program that bumps a counter (`bpftrace count()`); `--bpf-stats` measures it.
    AssumedCounting,
    /// A tracefs event, no BPF: ftrace's record per hit, from the calibration's own
    /// tracefs event (`calibrate::tracefs_phase`).
    CalibratedTracefs,
    /// A tracefs event without that calibration row: ftrace's work is not priced.
    NotPriced,
}

impl ProgramMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            ProgramMethod::BpfStats => "bpf-stats",
            ProgramMethod::AssumedCounting => "assumed-counting-program",
            ProgramMethod::CalibratedTracefs => "calibrated-tracefs-event",
            ProgramMethod::NotPriced => "not-priced",
        }
    }
}

/// An estimate and how it was made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Estimate {
    pub whole_ns: f64,
    pub method: Method,
    /// The calibration rows it was priced with: the cold ones were asked for but a
    /// calibration without them prices hot.
    pub assumes: Assumption,
    /// Priced by `--assume clock`: what placed the hits on its curves.
    pub reading: Option<GapReading>,
}

/// A probe's cost knowledge with what the run measured of its hits: what is priced.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Priced<'a> {
    pub cost: &'a ProbeCost,
    pub measured: &'a Measured,
    /// Every probe's gaps together, for a probe with too few of its own.
    pub pooled_gaps: &'a GapCounts,
}

impl std::ops::Deref for Priced<'_> {
    type Target = ProbeCost;

    fn deref(&self) -> &ProbeCost {
        self.cost
    }
}

impl ProbeCost {
    /// [`Priced::estimate`] with nothing measured of its hits beyond the handler: a
    /// site priced before any hit (`probetop --all`'s rows).
    pub(crate) fn estimate_unmeasured(
        &self,
        probe_mode: DeliveryMode,
        handler: Option<&Histogram<u64>>,
        timed_share: f64,
        assume: Assumption,
    ) -> Option<Estimate> {
        self.with(&Measured::default(), &GapCounts::default())
            .estimate(probe_mode, handler, timed_share, assume)
    }

    /// This probe priced with what was measured of its hits.
    pub(crate) fn with<'a>(
        &'a self,
        measured: &'a Measured,
        pooled_gaps: &'a GapCounts,
    ) -> Priced<'a> {
        Priced {
            cost: self,
            measured,
            pooled_gaps,
        }
    }
}

impl Priced<'_> {
    /// The whole cost of one hit, ns; `handler` holds the live handler times of the
    /// timed hits, `timed_share` the share of hits timed (in-kernel mode with
    /// `--time-every`; 1.0 otherwise); `assume` the calibration loop to price it with.
    /// On a breakpoint shared with other tools' probes: its share of the site
    /// ([`SharedSplit`]).
    pub(crate) fn estimate(
        &self,
        probe_mode: DeliveryMode,
        handler: Option<&Histogram<u64>>,
        timed_share: f64,
        assume: Assumption,
    ) -> Option<Estimate> {
        let alone = self.estimate_alone(probe_mode, handler, timed_share, assume)?;
        match self.shared_split(&alone) {
            Some(split) => Some(Estimate {
                whole_ns: split.own.share_ns,
                method: Method::SharedSite,
                ..alone
            }),
            None => Some(alone),
        }
    }

    /// [`Priced::estimate`] as if the probe were alone on its breakpoint.
    pub(crate) fn estimate_alone(
        &self,
        probe_mode: DeliveryMode,
        handler: Option<&Histogram<u64>>,
        timed_share: f64,
        assume: Assumption,
    ) -> Option<Estimate> {
        let class = self.site.as_ref().map(|s| s.class)?;
        if matches!(class, CostClass::Refused | CostClass::Unknown) {
            return None;
        }
        if let Some(other) = self.other {
            return self.other_estimate(other);
        }
        let handler = handler.filter(|h| !h.is_empty());
        let handler_mean_ns = handler.map(Histogram::mean);
        // By the clock: the hot rows, plus what the curves add at each hit's clock or gap.
        let gap_extra = match (assume, &self.gap_curve) {
            (Assumption::Clock, Some(curve)) => self.clock_price(curve, probe_mode, handler),
            _ => None,
        };
        let (basis, assumes) = match (assume, self.cold_basis) {
            (Assumption::Clock, _) if gap_extra.is_some() => (self.basis?, assume),
            // A hit whose clock cannot be read is priced as a server's: cold.
            (Assumption::Cold | Assumption::Clock, Some(cold)) => (cold, Assumption::Cold),
            _ => (self.basis?, Assumption::Hot),
        };
        let reading = gap_extra.as_ref().map(|price| price.reading);
        let (extra, handler_extra) = gap_extra.map_or((0.0, Some(0.0)), |price| {
            (price.extra_ns, price.handler_slower_ns)
        });
        let measured = self
            .measured
            .dispatch
            .as_ref()
            .and_then(DispatchMeasure::per_hit_ns);
        if let (Some(dispatch), Some(residual)) = (measured, basis.residual_ns) {
            // The residual is calibrated hot only; the dispatch is measured as it is.
            return Some(Estimate {
                whole_ns: (dispatch + residual).max(0.0),
                method: Method::DispatchAndCalibration,
                assumes: Assumption::Hot,
                reading: None,
            });
        }
        let base = basis.base_ns?;
        let timed_share = timed_share.clamp(0.0, 1.0);
        let (on_top, handler_cal, correct) = match probe_mode {
            DeliveryMode::KernelHistogram => {
                let timed = basis.on_top_kernel_ns?;
                // Untimed hits only count. An old calibration without that row prices
                // every hit as timed: an overestimate, never an underestimate.
                // Counting cannot make a hit cheaper: a calibration whose noise put the
                // untimed row below zero prices it at zero.
                let on_top = match basis.on_top_kernel_untimed_ns.map(|u| u.max(0.0)) {
                    Some(untimed) => untimed + timed_share * (timed - untimed),
                    None => timed,
                };
                (on_top, basis.handler_kernel_ns, true)
            }
            // Most sampled hits only count in the kernel; their handler time is seen on
            // the sampled ones only.
            DeliveryMode::Sample => (basis.on_top_kernel_ns?, None, false),
            _ => (basis.on_top_ring_ns?, basis.handler_ring_ns, true),
        };
        let correction = match (correct, handler_mean_ns, handler_cal) {
            // The live handler time is of the timed hits alone.
            (true, Some(live), Some(cal)) if probe_mode == DeliveryMode::KernelHistogram => {
                (live - cal) * timed_share
            }
            // The ring handler reads slower after a gap too: the curve has that in. Priced
            // by the work curve, whose iterations hold the handler's slowdown: nothing.
            (true, Some(live), Some(cal)) => {
                handler_extra.map_or(0.0, |slower| live - cal - slower)
            }
            _ => 0.0,
        };
        Some(Estimate {
            whole_ns: (base + on_top + correction + extra).max(0.0),
            method: Method::Calibration,
            assumes,
            reading: reading.filter(|_| assumes == Assumption::Clock),
        })
    }
}

impl Priced<'_> {
    /// Another tool's probe: the trap of its class (the calibration's hit with an empty
    /// program, or the measured dispatch less probetop's counting program) plus its
    /// owner's program per run.
    fn other_estimate(&self, other: OtherPrice) -> Option<Estimate> {
        let basis = self.basis?;
        let program = other.program_ns.unwrap_or(0.0);
        let measured = self
            .measured
            .dispatch
            .as_ref()
            .and_then(DispatchMeasure::per_hit_ns);
        let trap = match (measured, basis.residual_ns) {
            // The dispatch runs every program on the site, probetop's counting one too.
            (Some(dispatch), Some(residual)) => {
                dispatch + residual
                    - basis.on_top_kernel_untimed_ns.unwrap_or(0.0).max(0.0)
                    - program
            }
            _ => basis.base_ns?,
        };
        Some(Estimate {
            whole_ns: (trap + program).max(0.0),
            method: Method::OtherTool,
            assumes: Assumption::Hot,
            reading: None,
        })
    }
}

impl ProbeCost {
    /// The split of a shared site's trap, from the own probe's estimate as if it were
    /// alone there; `None` off a shared site or without the calibrated trap.
    pub(crate) fn shared_split(&self, alone: &Estimate) -> Option<SharedSplit> {
        if self.shared.is_empty() || self.other.is_some() {
            return None;
        }
        let base = self.basis?.base_ns?;
        // A measured dispatch runs every program on the site: its whole is the site's
        // total, the others' programs taken out for probetop's part.
        let others: Vec<f64> = self
            .shared
            .iter()
            .map(|o| o.price.program_ns.unwrap_or(0.0).max(0.0))
            .collect();
        let others_sum: f64 = others.iter().sum();
        let (trap, own) = match alone.method {
            Method::DispatchAndCalibration => {
                let own = self.counting_ns().unwrap_or(0.0);
                let trap = (alone.whole_ns - others_sum - own).max(0.0);
                (trap, own)
            }
            _ => (base, (alone.whole_ns - base).max(0.0)),
        };
        let owners = (1 + others.len()) as f64;
        let part = |marginal_ns: f64| SharedPart {
            marginal_ns,
            share_ns: marginal_ns + trap / owners,
        };
        Some(SharedSplit {
            trap_ns: trap,
            total_ns: trap + own + others_sum,
            own: part(own),
            others: others.into_iter().map(part).collect(),
        })
    }

    /// What probetop's counting program adds to each hit of a site it shares, ns: the
    /// calibration's in-kernel untimed handler.
    pub(crate) fn counting_ns(&self) -> Option<f64> {
        self.basis
            .and_then(|b| b.on_top_kernel_untimed_ns)
            .map(|n| n.max(0.0))
    }
}

impl Priced<'_> {
    /// What the idle gap curve adds at this probe's gaps (own, or every probe's with
    /// too few), and how much slower the ring handler's clock reads for it.
    fn idle_gap_extra(&self, curve: &GapCurve, kernel: bool) -> Option<(f64, f64)> {
        let counts = own_or_pooled(&self.measured.gaps, self.pooled_gaps);
        let extra = counts.mean_of(|gap| curve.extra_ns(kernel, gap))?;
        let handler_slower = if kernel {
            0.0
        } else {
            counts
                .mean_of(|gap| curve.handler_extra_ns(gap))
                .unwrap_or(0.0)
        };
        Some((extra, handler_slower))
    }

    /// `--assume clock`: the work curve at the handler's clock, or the idle gap curve
    /// where dearer; `None` when the clock cannot be read (the caller prices cold).
    /// Gaps not counted yet add nothing: the clock alone prices.
    fn clock_price(
        &self,
        curve: &GapCurve,
        probe_mode: DeliveryMode,
        handler: Option<&Histogram<u64>>,
    ) -> Option<GapPrice> {
        let kernel = probe_mode.counts_in_kernel();
        let work = self.work_curve.as_ref()?;
        let (clock, reading) = self.clock_extra(work, kernel, handler)?;
        Some(match self.idle_gap_extra(curve, kernel) {
            Some((gap, handler_slower)) if gap >= clock => GapPrice {
                extra_ns: gap,
                handler_slower_ns: Some(handler_slower),
                reading: GapReading::Gap,
            },
            _ => GapPrice {
                extra_ns: clock,
                handler_slower_ns: None,
                reading,
            },
        })
    }

    /// The work curve read at the ring handler's clock: in ring mode the live one
    /// (`handler`), in-kernel the one streamed first. `None` for a probe capturing
    /// arguments, without enough clocked hits, or with a curve without clocks.
    fn clock_extra(
        &self,
        work: &WorkCurve,
        kernel: bool,
        handler: Option<&Histogram<u64>>,
    ) -> Option<(f64, GapReading)> {
        if self.captures_args {
            return None;
        }
        let (hits, reading) = if kernel {
            (
                self.measured.streamed_clock.as_ref()?,
                GapReading::StreamedClock,
            )
        } else {
            (handler?, GapReading::HandlerClock)
        };
        let clock = work.ring_clock(kernel)?;
        mean_over_hits(hits, |ns| clock.extra_ns(ns)).map(|extra| (extra, reading))
    }
}

/// The mean of `price` over the hits of a handler histogram, each at its value; `None`
/// with fewer than [`crate::calibrate::gap::MIN_SAMPLES`] hits.
fn mean_over_hits(hits: &Histogram<u64>, price: impl Fn(f64) -> f64) -> Option<f64> {
    if hits.len() < crate::calibrate::gap::MIN_SAMPLES {
        return None;
    }
    let total: f64 = hits
        .iter_recorded()
        .map(|value| {
            let ns = hits.median_equivalent(value.value_iterated_to()) as f64;
            value.count_at_value() as f64 * price(ns)
        })
        .sum();
    Some(total / hits.len() as f64)
}

/// A probe's own counts, or with too few every probe's together.
fn own_or_pooled<'a>(own: &'a GapCounts, pooled: &'a GapCounts) -> &'a GapCounts {
    if own.samples() >= crate::calibrate::gap::MIN_SAMPLES {
        own
    } else {
        pooled
    }
}

/// Share of one CPU that `rate` hits/s at `whole_ns` each take (1.0 is a whole CPU).
pub(crate) fn cpu_share(whole_ns: f64, per_second: f64) -> f64 {
    whole_ns * per_second / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::table::{DispatchRow, Row};
    use crate::stats::Summary;

    impl ProbeCost {
        /// Priced with nothing measured beyond the handler.
        fn estimate(
            &self,
            mode: DeliveryMode,
            handler: Option<&Histogram<u64>>,
            timed_share: f64,
            assume: Assumption,
        ) -> Option<Estimate> {
            self.estimate_unmeasured(mode, handler, timed_share, assume)
        }
    }

    fn s(median: f64) -> Summary {
        Summary::exact(median)
    }

    /// A live handler histogram whose every hit read `ns`.
    fn clock(ns: f64) -> Histogram<u64> {
        let mut hits = Histogram::new(3).expect("histogram");
        hits.record_n(ns as u64, 100).expect("record");
        hits
    }

    fn cal() -> Calibration {
        let rows = [
            (Case::UsdtUnattached, 2.0),
            (Case::UsdtHit, 500.0),
            (Case::UprobeEmulated, 700.0),
            (Case::UprobeSingleStepped, 9000.0),
            (Case::UprobeOptimized, 400.0),
            (Case::Uretprobe, 1500.0),
            (Case::HandlerRing, 300.0),
            (Case::HandlerKernel, 100.0),
            (Case::HandlerKernelUntimed, 20.0),
        ];
        let dispatch = [
            (DispatchCase::Usdt, 200.0),
            (DispatchCase::Emulated, 250.0),
            (DispatchCase::SingleStepped, 8000.0),
            (DispatchCase::Optimized, 150.0),
            (DispatchCase::Uretprobe, 600.0),
        ];
        Calibration {
            format: 1,
            kernel_release: "k".into(),
            cpu_model: "c".into(),
            cpus: 2,
            created_unix_s: 0,
            reps: 1,
            calls: 1,
            optimizes_nop5: true,
            rows: rows
                .iter()
                .map(|(case, m)| Row {
                    case: *case,
                    label: String::new(),
                    ns: s(*m),
                    samples: vec![*m],
                })
                .collect(),
            handler_ring_ns: Some(s(150.0)),
            handler_kernel_ns: Some(s(40.0)),
            handler_method: Default::default(),
            handler_cpu_rows: Vec::new(),
            handler_program_error: None,
            dispatch: dispatch
                .iter()
                .map(|(case, r)| DispatchRow {
                    case: *case,
                    label: String::new(),
                    whole_ns: s(0.0),
                    dispatch_ns: s(0.0),
                    residual_ns: s(*r),
                })
                .collect(),
            dispatch_error: None,
            cold: None,
            gap: None,
            work: None,
            tracefs_event_ns: None,
            tracefs_event_error: None,
            tracefs_shapes: None,
        }
    }

    fn site(class: CostClass) -> Option<SiteClass> {
        Some(SiteClass {
            class,
            instruction: String::new(),
            reason: None,
        })
    }

    #[test]
    fn calibration_only() {
        let cost = ProbeCost {
            cold_basis: None,
            ..emulated_push_cost()
        };
        // 700 + 300, handler as calibrated.
        let e = cost
            .estimate(
                DeliveryMode::Ring,
                Some(&clock(150.0)),
                1.0,
                Assumption::Hot,
            )
            .expect("estimate");
        assert_eq!(e.whole_ns, 1000.0);
        assert_eq!(e.method, Method::Calibration);
        // A handler 200 ns slower than in calibration (argument capture) costs 200 more.
        assert_eq!(
            cost.estimate(
                DeliveryMode::Ring,
                Some(&clock(350.0)),
                1.0,
                Assumption::Hot
            )
            .unwrap()
            .whole_ns,
            1200.0
        );
        assert_eq!(
            cost.estimate(
                DeliveryMode::KernelHistogram,
                Some(&clock(40.0)),
                1.0,
                Assumption::Hot
            )
            .unwrap()
            .whole_ns,
            800.0
        );
    }

    #[test]
    fn in_kernel_hits_timed_in_part() {
        let probe_cost = |cal: &Calibration| ProbeCost {
            site: site(CostClass::EmulatedPush),
            basis: Some(basis(
                cal,
                CostClass::EmulatedPush,
                ProbeKind::Uprobe,
                false,
            )),
            cold_basis: None,
            ..Default::default()
        };
        let cost = probe_cost(&cal());
        let whole = |handler: f64, share: f64| {
            cost.estimate(
                DeliveryMode::KernelHistogram,
                Some(&clock(handler)),
                share,
                Assumption::Hot,
            )
            .unwrap()
            .whole_ns
        };
        // A quarter timed: 700 + 20 counting + 1/4 of the 80 ns the clocks add.
        assert_eq!(whole(40.0, 0.25), 740.0);
        // A slower handler weighs in as much as the hits it was seen on.
        assert_eq!(whole(80.0, 0.25), 750.0);
        assert_eq!(whole(40.0, 0.0), 720.0);
        assert_eq!(whole(40.0, 1.0), 800.0);
        // A noisy calibration's negative untimed row counts as zero.
        let mut noisy = cal();
        for row in &mut noisy.rows {
            if row.case == Case::HandlerKernelUntimed {
                row.ns = s(-8.0);
            }
        }
        assert_eq!(
            probe_cost(&noisy)
                .estimate(
                    DeliveryMode::KernelHistogram,
                    Some(&clock(40.0)),
                    0.25,
                    Assumption::Hot
                )
                .unwrap()
                .whole_ns,
            725.0
        );
        // A calibration from before the untimed row prices every hit as timed.
        let mut old = cal();
        old.rows.retain(|r| r.case != Case::HandlerKernelUntimed);
        assert_eq!(
            probe_cost(&old)
                .estimate(
                    DeliveryMode::KernelHistogram,
                    Some(&clock(40.0)),
                    0.25,
                    Assumption::Hot
                )
                .unwrap()
                .whole_ns,
            800.0
        );
    }

    #[test]
    fn dispatch_plus_residual() {
        let mut measure = DispatchMeasure::default();
        measure.update(
            crate::attach::dispatch_time::SlotTotal {
                count: 10,
                sum_ns: 7000,
            },
            Default::default(),
        );
        let cost = ProbeCost {
            site: site(CostClass::SingleStepped),
            basis: Some(basis(
                &cal(),
                CostClass::SingleStepped,
                ProbeKind::Uprobe,
                false,
            )),
            cold_basis: None,
            ..Default::default()
        };
        let measured = Measured {
            dispatch: Some(measure),
            ..Default::default()
        };
        let e = cost
            .with(&measured, &GapCounts::default())
            .estimate(
                DeliveryMode::Ring,
                Some(&clock(150.0)),
                1.0,
                Assumption::Hot,
            )
            .expect("estimate");
        assert_eq!(e.whole_ns, 700.0 + 8000.0);
        assert_eq!(e.method, Method::DispatchAndCalibration);
    }

    #[test]
    fn uretprobes_swap_in_their_entry_class() {
        let c = cal();
        let alone = basis(&c, CostClass::SingleStepped, ProbeKind::Uretprobe, false);
        // return part 1500 - 700, entry single-stepped 9000.
        assert_eq!(alone.base_ns, Some(800.0 + 9000.0));
        assert_eq!(alone.residual_ns, Some(350.0 + 8000.0));
        let shared = basis(&c, CostClass::SingleStepped, ProbeKind::Uretprobe, true);
        assert_eq!(shared.base_ns, Some(800.0));
    }

    fn with_cold() -> Calibration {
        use crate::calibrate::table::{ColdCalibration, ColdOptions};
        let mut c = cal();
        let rows = [
            (Case::UprobeEmulatedCold, 5000.0),
            (Case::UretprobeCold, 6500.0),
            (Case::HandlerRingCold, 1200.0),
            (Case::HandlerKernelCold, 900.0),
        ]
        .iter()
        .map(|(case, m)| Row {
            case: *case,
            label: String::new(),
            ns: s(*m),
            samples: vec![*m],
        })
        .collect();
        c.cold = Some(ColdCalibration {
            options: ColdOptions {
                data_bytes: 1,
                code_bytes: 1,
                iters: 1,
            },
            llc_bytes: None,
            loop_ns: s(2e6),
            handler_method: crate::calibrate::table::ColdHandlerMethod::ProgramTime,
            handler_call_rows: Vec::new(),
            rows,
            iter_rows: Vec::new(),
            cpu_rows: Vec::new(),
            handler_ring_ns: Some(s(400.0)),
            handler_kernel_ns: Some(s(300.0)),
        });
        c
    }

    /// An emulated-push uprobe priced by [`cal`].
    fn emulated_push_cost() -> ProbeCost {
        ProbeCost {
            site: site(CostClass::EmulatedPush),
            basis: Some(basis(
                &cal(),
                CostClass::EmulatedPush,
                ProbeKind::Uprobe,
                false,
            )),
            ..Default::default()
        }
    }

    #[test]
    fn a_shared_trap_is_split_evenly_and_the_shares_add_up() {
        let alone_cost = emulated_push_cost();
        let alone = alone_cost
            .estimate(DeliveryMode::Ring, None, 1.0, Assumption::Hot)
            .expect("priced");
        let mut cost = emulated_push_cost();
        let owner = |tool: &str, ns| SharedOwner {
            owner: crate::attach::others::Owner {
                pid: Some(7),
                comm: None,
                tool: tool.into(),
            },
            price: OtherPrice {
                program_ns: ns,
                program_method: ProgramMethod::BpfStats,
            },
        };
        cost.shared = vec![owner("bpftrace", Some(60.0)), owner("tracefs", None)];
        let split = cost.shared_split(&alone).expect("split");
        let trap = cost.basis.and_then(|b| b.base_ns).expect("trap");
        assert_eq!(split.trap_ns, trap);
        // probetop's marginal cost is its handler beyond the empty-program hit.
        assert!((split.own.marginal_ns - (alone.whole_ns - trap)).abs() < 1e-9);
        assert_eq!(split.others[0].marginal_ns, 60.0);
        assert_eq!(split.others[1].marginal_ns, 0.0);
        let shares = split.own.share_ns + split.others.iter().map(|p| p.share_ns).sum::<f64>();
        assert!((shares - split.total_ns).abs() < 1e-9);
        assert!((split.total_ns - (alone.whole_ns + 60.0)).abs() < 1e-9);
        assert!((split.own.share_ns - (split.own.marginal_ns + trap / 3.0)).abs() < 1e-9);
        // The row's estimate is its share.
        let shared = cost
            .estimate(DeliveryMode::Ring, None, 1.0, Assumption::Hot)
            .expect("priced");
        assert_eq!(shared.whole_ns, split.own.share_ns);
        assert_eq!(shared.method, Method::SharedSite);
        // Alone on its site: no split.
        assert!(alone_cost.shared_split(&alone).is_none());
    }

    /// Gap counts since an empty baseline: `(bucket, count)` pairs.
    fn gap_counts(counts: &[(usize, u64)]) -> crate::calibrate::gap::GapCounts {
        let mut gaps = crate::calibrate::gap::GapCounts::default();
        gaps.baseline(vec![0; probe_common::gap::BUCKETS as usize]);
        let mut totals = vec![0; probe_common::gap::BUCKETS as usize];
        for &(bucket, n) in counts {
            totals[bucket] = n;
        }
        gaps.update(totals);
        gaps
    }

    #[test]
    fn the_clock_prices_a_hit_on_the_work_curve() {
        use crate::calibrate::work::{WorkCurve, WorkPoint};
        let clocked = |work_ns: f64, ring: f64, clock: f64| WorkPoint {
            data_bytes: 0,
            code_bytes: 0,
            work_ns,
            ring_ns: s(ring),
            kernel_ns: s(ring / 2.0),
            handler_ring_ns: Some(s(clock)),
            handler_kernel_ns: None,
        };
        let mut cost = ProbeCost {
            // One point: the gap adds nothing at any gap.
            gap_curve: Some(std::sync::Arc::new(crate::calibrate::gap::GapCurve {
                points: vec![crate::calibrate::gap::GapPoint {
                    sleep_us: 0.0,
                    gap_ns: 500.0,
                    ring_ns: s(0.0),
                    kernel_ns: s(0.0),
                    handler_ring_ns: Some(s(60.0)),
                    ring_call_ns: Some(s(1000.0)),
                    kernel_call_ns: Some(s(900.0)),
                }],
                time_every: 64,
            })),
            work_curve: Some(std::sync::Arc::new(WorkCurve {
                points: vec![
                    clocked(100.0, 500.0, 60.0),
                    clocked(40_000.0, 3500.0, 260.0),
                ],
                beyond: Vec::new(),
                time_every: 64,
            })),
            ..emulated_push_cost()
        };
        let mut measured = Measured {
            gaps: gap_counts(&[(6, 40)]),
            ..Default::default()
        };
        let none = GapCounts::default();
        let hot = cost
            .with(&measured, &none)
            .estimate(DeliveryMode::Ring, None, 1.0, Assumption::Hot)
            .expect("hot")
            .whole_ns;
        // Half the hits as fast as the hot loop's, half halfway to the cold clock; the
        // live handler time corrects nothing (the curve's iterations hold it).
        let mut hits = Histogram::new(3).expect("histogram");
        hits.record_n(60, 50).expect("record");
        hits.record_n(160, 50).expect("record");
        let e = cost
            .with(&measured, &none)
            .estimate(DeliveryMode::Ring, Some(&hits), 1.0, Assumption::Clock)
            .expect("estimate");
        assert_eq!((e.whole_ns, e.assumes), (hot + 750.0, Assumption::Clock));
        assert_eq!(e.reading, Some(GapReading::HandlerClock));
        // In-kernel without hits streamed first: no clock to read, priced hot (this
        // calibration has no cold rows).
        let kernel_hot = cost
            .with(&measured, &none)
            .estimate(
                DeliveryMode::KernelHistogram,
                Some(&hits),
                1.0,
                Assumption::Hot,
            )
            .expect("kernel hot")
            .whole_ns;
        let e = cost
            .with(&measured, &none)
            .estimate(
                DeliveryMode::KernelHistogram,
                Some(&hits),
                1.0,
                Assumption::Clock,
            )
            .expect("kernel");
        assert_eq!((e.whole_ns, e.reading), (kernel_hot, None));
        // In-kernel with the ring clock of its first seconds streamed: the in-kernel
        // price at the footprints those clocks place it (half of the ring's here).
        measured.streamed_clock = Some(hits.clone());
        let e = cost
            .with(&measured, &none)
            .estimate(
                DeliveryMode::KernelHistogram,
                Some(&hits),
                1.0,
                Assumption::Clock,
            )
            .expect("kernel");
        assert_eq!(e.whole_ns, kernel_hot + 375.0);
        assert_eq!(e.reading, Some(GapReading::StreamedClock));
        measured.streamed_clock = None;
        // A handler capturing arguments runs slower for that: its clock is not read,
        // the hit is priced as by the hot rows.
        cost.captures_args = true;
        let e = cost
            .with(&measured, &none)
            .estimate(DeliveryMode::Ring, Some(&hits), 1.0, Assumption::Clock)
            .expect("estimate");
        let as_hot = cost
            .with(&measured, &none)
            .estimate(DeliveryMode::Ring, Some(&hits), 1.0, Assumption::Hot)
            .expect("hot");
        assert_eq!((e.whole_ns, e.reading), (as_hot.whole_ns, None));
    }

    #[test]
    fn cold_rows_price_a_cold_hit() {
        let c = with_cold();
        let cost = |class, kind, shares| ProbeCost {
            site: site(class),
            basis: Some(basis(&c, class, kind, shares)),
            cold_basis: cold_basis(&c, class, kind, shares),
            ..Default::default()
        };
        let push = cost(CostClass::EmulatedPush, ProbeKind::Uprobe, false);
        let whole = |p: &ProbeCost, mode, handler, share, assume| {
            p.estimate(mode, Some(&clock(handler)), share, assume)
                .expect("estimate")
        };
        // Hot as before; cold: the cold entry 5000 + the cold ring handler 1200, the
        // handler clock compared with the cold loop's (400).
        assert_eq!(
            whole(&push, DeliveryMode::Ring, 150.0, 1.0, Assumption::Hot).whole_ns,
            1000.0
        );
        let cold = whole(&push, DeliveryMode::Ring, 450.0, 1.0, Assumption::Cold);
        assert_eq!((cold.whole_ns, cold.assumes), (6250.0, Assumption::Cold));
        // In-kernel, every hit timed: 5000 + 900; none timed: 5000 + 20 + (900 - 100).
        assert_eq!(
            whole(
                &push,
                DeliveryMode::KernelHistogram,
                300.0,
                1.0,
                Assumption::Cold
            )
            .whole_ns,
            5900.0
        );
        assert_eq!(
            whole(
                &push,
                DeliveryMode::KernelHistogram,
                300.0,
                0.0,
                Assumption::Cold
            )
            .whole_ns,
            5820.0
        );
        // Other classes: their hot row plus the emulated entry's cold extra (4300).
        let usdt = cost(CostClass::EmulatedNop, ProbeKind::Usdt, false);
        assert_eq!(
            usdt.cold_basis.and_then(|b| b.base_ns),
            Some(500.0 + 4300.0)
        );
        // A uretprobe: the cold return part (6500 - 5000) alone when it shares its
        // entry, else with its entry's cold price.
        let ret = cost(CostClass::EmulatedPush, ProbeKind::Uretprobe, true);
        assert_eq!(ret.cold_basis.and_then(|b| b.base_ns), Some(1500.0));
        let sstep = cost(CostClass::SingleStepped, ProbeKind::Uretprobe, false);
        assert_eq!(
            sstep.cold_basis.and_then(|b| b.base_ns),
            Some(1500.0 + 9000.0 + 4300.0)
        );
        // Without cold rows a cold estimate is priced hot, and says so.
        let hot_only = ProbeCost {
            cold_basis: cold_basis(&cal(), CostClass::EmulatedPush, ProbeKind::Uprobe, false),
            ..push.clone()
        };
        assert!(hot_only.cold_basis.is_none());
        let e = whole(&hot_only, DeliveryMode::Ring, 150.0, 1.0, Assumption::Cold);
        assert_eq!((e.whole_ns, e.assumes), (1000.0, Assumption::Hot));
    }

    #[test]
    fn no_estimate_without_calibration_or_for_refused_sites() {
        let cost = ProbeCost {
            site: site(CostClass::EmulatedPush),
            basis: None,
            cold_basis: None,
            ..Default::default()
        };
        assert_eq!(
            cost.estimate(
                DeliveryMode::Ring,
                Some(&clock(100.0)),
                1.0,
                Assumption::Hot
            ),
            None
        );
        let refused = ProbeCost {
            site: site(CostClass::Refused),
            basis: Some(basis(&cal(), CostClass::Refused, ProbeKind::Uprobe, false)),
            cold_basis: None,
            ..Default::default()
        };
        assert_eq!(
            refused.estimate(DeliveryMode::Ring, None, 1.0, Assumption::Hot),
            None
        );
        assert!((cpu_share(1000.0, 10_000.0) - 0.01).abs() < 1e-12);
    }

    #[test]
    fn a_tracefs_event_is_priced_by_its_arguments_and_instances() {
        let basis = CostBasis {
            tracefs_extra_ns: Some(200.0),
            tracefs_more: TracefsMore {
                register_ns: Some(10.0),
                memory_read_ns: Some(30.0),
                string_ns: Some(50.0),
                instance_ns: Some(150.0),
            },
            ..Default::default()
        };
        // The issue's `arg1=%di:u64 s=+0(%si):string`, in two instances.
        let shape = EventShape {
            args: 2,
            registers: 1,
            memory_reads: 0,
            strings: 1,
            instances: 2,
        };
        assert_eq!(
            basis.tracefs_event_ns(Some(&shape)),
            Some(200.0 + 10.0 + 50.0 + 150.0)
        );
        let nested = EventShape {
            memory_reads: 2,
            instances: 1,
            ..shape
        };
        assert_eq!(
            basis.tracefs_event_ns(Some(&nested)),
            Some(200.0 + 10.0 + 2.0 * 30.0 + 50.0)
        );
        assert_eq!(basis.tracefs_event_ns(None), Some(200.0));
        // A calibration without the shaped events: the bare event's price.
        let older = CostBasis {
            tracefs_extra_ns: Some(200.0),
            ..Default::default()
        };
        assert_eq!(older.tracefs_event_ns(Some(&shape)), Some(200.0));
        assert_eq!(CostBasis::default().tracefs_event_ns(Some(&shape)), None);
    }
}
