//! `probetop calibrate`: what a probe hit costs the traced thread on this machine,
//! measured, per cost class.
//!
//! A child process (this binary, `__calibrate-workload`) calls workload functions in a
//! loop and reports the CPU time per call of its own thread (CLOCK_THREAD_CPUTIME_ID,
//! which includes the kernel's uprobe handling on that thread). The parent attaches a
//! probe to each probed function once; the child runs a probed function, then its
//! unprobed twin (the same code at another address): the difference is the cost of
//! one hit. Every case is repeated; each repetition visits the cases in a fresh random
//! order and alternates probed-first and twin-first, so drift and order effects spread
//! over all cases instead of biasing one. Each row reports the median, the quartiles
//! and a bootstrap 95% interval of the median.
//!
//! Phase one uses a program that does nothing, to price the kernel's machinery alone,
//! then probetop's own handler. Phase two, when the kernel lets fentry/fexit attach,
//! runs probetop's handler with dispatch measurement on and keeps, per class, the part
//! of the whole cost the dispatch clock does not see (the trap and the way back): the
//! residual that turns a live dispatch measurement into a whole-cost estimate.
//!
//! Results are cached per kernel release and CPU model.

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
};

use probe_common::{ProbeConfig, dispatch as slots, khist};

use crate::attach::bpf_stats::StatsGuard;
use crate::attach::dispatch::Dispatch;
use crate::attach::dispatch_time::{ProbeSite, SlotTotal};
use crate::attach::{AttachRequest, Attachment, LoadOptions};
use crate::calibrate::table::{
    Calibration, Case, ColdCalibration, ColdHandlerMethod, ColdOptions, DispatchCase, DispatchRow,
    FORMAT, HandlerMethod, Machine, Row, cache_dir, last_level_cache_bytes,
};
use crate::delivery::DeliveryMode;
use crate::insn::classes::KernelRules;
use crate::spec::ProbeKind;
use crate::stats::{Summary, XorShift};
use crate::sys::clock::ProcessCpuClock;
use child::{Drainer, Offsets, Workload};
use workload::Func;

/// The hidden subcommand the child runs.
mod child;
pub(crate) mod gap;
mod gap_phase;
pub(crate) mod table;
mod tracefs_phase;
pub(crate) mod work;
mod work_phase;
pub(crate) mod workload;

pub(crate) const WORKLOAD_SUBCOMMAND: &str = "__calibrate-workload";

#[derive(Debug, thiserror::Error)]
pub(crate) enum CalibrateError {
    #[error("the calibration workload: {0}")]
    Child(String),
    #[error("cannot start the calibration workload: {0}")]
    Spawn(io::Error),
    #[error("cannot find the workload in this binary's mappings: {0}")]
    Locate(String),
    #[error(transparent)]
    Attach(#[from] crate::attach::AttachError),
    #[error("reading a map: {0}")]
    Map(#[from] aya::maps::MapError),
    #[error("cannot write {path}: {source}")]
    Save { path: PathBuf, source: io::Error },
    #[error("cannot encode the calibration: {0}")]
    Encode(#[from] serde_json::Error),
}

/// How long and how carefully to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CalibrateOptions {
    /// Repetitions of every case.
    pub reps: usize,
    /// Calls per measured run of a case costing about a microsecond per hit
    /// (single-stepped cases get a tenth).
    pub calls: u64,
    /// Calls per run of the unattached USDT loop (a few ns each).
    pub unattached_calls: u64,
    /// Also measure with dispatch measurement on (phase two).
    pub dispatch: bool,
    /// The cold cases, and their loop; `None` skips them.
    pub cold: Option<ColdOptions>,
    /// The hot cases (off: the cold ones alone, for studies of the cold loop's sizes).
    pub hot: bool,
    /// Repetitions of the gap curve (`calibrate::gap`); 0 skips it.
    pub gap_reps: usize,
}

impl CalibrateOptions {
    /// The default: 20-40 seconds on a 2-vCPU VM. Every row and curve the estimates
    /// read, with fewer and shorter repetitions than [`Self::thorough`]; the cost tests
    /// (tests/it/cost_*.rs) hold its rows to the same bounds.
    pub(crate) fn standard() -> Self {
        Self {
            reps: 15,
            calls: 20_000,
            unattached_calls: 2_000_000,
            dispatch: true,
            cold: Some(ColdOptions::for_this_machine(COLD_ITERS_STANDARD)),
            hot: true,
            gap_reps: 3,
        }
    }

    /// `--thorough`: 2-3 minutes on a 2-vCPU VM, for the full curves (the numbers in
    /// docs/cost.md were measured so).
    pub(crate) fn thorough() -> Self {
        Self {
            reps: 31,
            calls: 60_000,
            unattached_calls: 10_000_000,
            dispatch: true,
            cold: Some(ColdOptions::for_this_machine(COLD_ITERS_THOROUGH)),
            hot: true,
            gap_reps: gap_phase::MAX_REPS,
        }
    }

    /// How long a run takes on the project's 2-vCPU VM, idle, as said before it starts.
    pub(crate) fn expected(&self) -> &'static str {
        if self.reps > 20 || self.gap_reps > 3 {
            "2-3 minutes"
        } else {
            "20-40 s"
        }
    }
}

/// Calls before each measured run: first-hit work (page faults, the rewrite of an
/// optimized probe) stays out of the measurement.
const WARMUP: u64 = 200;

/// Iterations of the cold loop per measured run, thorough and standard.
const COLD_ITERS_THOROUGH: u64 = 60;
const COLD_ITERS_STANDARD: u64 = 30;

/// Iterations of the cold loop before each measured run.
const COLD_WARMUP: u64 = 3;

/// Which workload function each case runs, and so which kind of probe it takes.
trait RunsOn: Copy {
    fn func(self) -> Func;
    fn kind(self) -> ProbeKind;
}

impl RunsOn for Case {
    fn func(self) -> Func {
        match self {
            Case::UprobeEmulatedCold
            | Case::UretprobeCold
            | Case::HandlerRingCold
            | Case::HandlerKernelCold => self.hot().func(),
            Case::UsdtUnattached => Func::UsdtTwin,
            Case::UsdtHit => Func::Usdt,
            Case::UsdtNop5Hit => Func::UsdtNop5,
            Case::UprobeEmulated => Func::Emulated,
            Case::HandlerRing => Func::EmulatedRing,
            Case::HandlerKernel | Case::HandlerKernelUntimed => Func::EmulatedKernel,
            Case::UprobeSingleStepped => Func::SingleStepped,
            Case::UprobeOptimized => Func::Nop5,
            Case::Uretprobe => Func::Ret,
        }
    }

    fn kind(self) -> ProbeKind {
        self.func().probe_kind()
    }
}

impl RunsOn for DispatchCase {
    fn func(self) -> Func {
        match self {
            DispatchCase::Usdt => Func::Usdt,
            DispatchCase::Emulated => Func::Emulated,
            DispatchCase::SingleStepped => Func::SingleStepped,
            DispatchCase::Optimized => Func::Nop5,
            DispatchCase::Uretprobe => Func::Ret,
        }
    }

    fn kind(self) -> ProbeKind {
        self.func().probe_kind()
    }
}

/// Writes `calibration` to the cache; returns the path.
pub(crate) fn save(calibration: &Calibration) -> Result<PathBuf, CalibrateError> {
    let dir = cache_dir().ok_or_else(|| CalibrateError::Save {
        path: PathBuf::from("~/.cache/probetop"),
        source: io::Error::other("neither XDG_CACHE_HOME nor HOME is set"),
    })?;
    let path = dir.join(Machine::current().cache_file_name());
    let save_err = |source| CalibrateError::Save {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(save_err)?;
    let mut text = serde_json::to_string_pretty(calibration)?;
    text.push('\n');
    // Written beside, then renamed: a reader never sees half a file.
    let partial = path.with_extension("json.partial");
    let written = std::fs::write(&partial, text).and_then(|()| std::fs::rename(&partial, &path));
    if let Err(e) = written {
        // A full disk leaves the file made and empty: nothing half-written stays.
        let _ = std::fs::remove_file(&partial);
        return Err(save_err(e));
    }
    Ok(path)
}

/// What a calibration took: wall time, and CPU time of probetop and its workload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spent {
    pub wall: std::time::Duration,
    /// `None` when a CPU clock could not be read.
    pub cpu: Option<std::time::Duration>,
}

/// Runs the calibration; `progress` gets one line per phase.
pub(crate) fn run(
    options: CalibrateOptions,
    mut progress: impl FnMut(&str),
) -> Result<(Calibration, Spent), CalibrateError> {
    let started = std::time::Instant::now();
    let machine = Machine::current();
    let offsets = Offsets::of_self()?;
    let own_clock = ProcessCpuClock::of(std::process::id()).ok();
    let own_before = own_clock.and_then(|c| c.read_ns().ok());
    let mut child = Workload::spawn()?;
    let child_clock = ProcessCpuClock::of(child.pid()).ok();
    let mut rng = XorShift::new(0x70b3_70b3 ^ u64::from(child.pid()));

    let mut phases = Phases::new(&options, &mut progress);
    let phase_one = phase_one(&mut child, &offsets, &options, &mut rng, &mut phases)?;
    let (dispatch, dispatch_error) = if options.dispatch && options.hot {
        phases.next("kernel dispatch time (fentry/fexit) and what it does not see");
        match phase_two(&mut child, &offsets, &options, &mut rng) {
            Ok(rows) => (rows, None),
            Err(PhaseTwoError::Refused(e)) => (Vec::new(), Some(e)),
            Err(PhaseTwoError::Other(e)) => return Err(e),
        }
    } else {
        (Vec::new(), Some("not requested".to_string()))
    };
    let (tracefs_event_ns, tracefs_shapes, tracefs_event_error) = if options.hot {
        phases.next(
            "a hit of a tracefs uprobe event (ftrace's record, no BPF), with arguments and in two instances",
        );
        match tracefs_phase::measure(&mut child, &offsets, &options)? {
            Ok(tracefs_phase::Measured {
                bare,
                shapes: Ok(shapes),
            }) => (Some(bare), Some(shapes), None),
            Ok(tracefs_phase::Measured {
                bare,
                shapes: Err(why),
            }) => (Some(bare), None, Some(why)),
            Err(why) => (None, None, Some(why)),
        }
    } else {
        (None, None, None)
    };
    // The child's clock is read while it lives (it exits when `child` drops).
    let child_ns = child_clock.and_then(|c| c.read_ns().ok());
    let own_ns = own_clock
        .and_then(|c| c.read_ns().ok())
        .zip(own_before)
        .map(|(after, before)| after.saturating_sub(before));
    let spent = Spent {
        wall: started.elapsed(),
        cpu: child_ns
            .zip(own_ns)
            .map(|(c, o)| std::time::Duration::from_nanos(c + o)),
    };
    drop(child);
    let row = |case: Case, samples: &[f64]| {
        Some(Row {
            case,
            label: case.label().to_string(),
            ns: Summary::of(samples)?,
            samples: samples.to_vec(),
        })
    };
    let mut rows: Vec<Row> = Case::ALL
        .iter()
        .filter_map(|case| row(*case, phase_one.samples.get(case)?))
        .collect();
    // Program run time, when measured, gives the handler rows; the thread's CPU time
    // stays beside them as the cross-check.
    let mut handler_method = HandlerMethod::ThreadCpuTime;
    let mut handler_cpu_rows = Vec::new();
    let mut handler_program_error = None;
    match &phase_one.handler_program {
        Some(Ok(by_case)) => {
            let program_rows: Option<Vec<Row>> = Case::HANDLER
                .iter()
                .map(|case| row(*case, by_case.get(case)?))
                .collect();
            match program_rows {
                Some(program_rows) => {
                    handler_method = HandlerMethod::ProgramTime;
                    for program in program_rows {
                        if let Some(slot) = rows.iter_mut().find(|r| r.case == program.case) {
                            handler_cpu_rows.push(std::mem::replace(slot, program));
                        }
                    }
                }
                None => {
                    handler_program_error =
                        Some("no repetition measured every handler case".to_string());
                }
            }
        }
        Some(Err(why)) => handler_program_error = Some(why.clone()),
        None => {}
    }
    let cold = options.cold.and_then(|cold_options| {
        let rows_of = |samples: &HashMap<Case, Vec<f64>>| -> Vec<Row> {
            Case::COLD
                .iter()
                .filter_map(|case| row(*case, samples.get(case)?))
                .collect()
        };
        let mut rows = rows_of(&phase_one.cold);
        let mut handler_call_rows = Vec::new();
        // As the hot handler rows: program run time when it was measured, the call's
        // time kept as the cross-check.
        if let Some(Ok(by_case)) = &phase_one.handler_program {
            for case in [Case::HandlerRingCold, Case::HandlerKernelCold] {
                let Some(program) = by_case.get(&case).and_then(|s| row(case, s)) else {
                    continue;
                };
                if let Some(slot) = rows.iter_mut().find(|r| r.case == case) {
                    handler_call_rows.push(std::mem::replace(slot, program));
                }
            }
        }
        Some(ColdCalibration {
            options: cold_options,
            llc_bytes: last_level_cache_bytes(),
            loop_ns: Summary::of(&phase_one.cold_loop)?,
            handler_method: if handler_call_rows.is_empty() {
                ColdHandlerMethod::CallTime
            } else {
                ColdHandlerMethod::ProgramTime
            },
            handler_call_rows,
            rows,
            iter_rows: rows_of(&phase_one.cold_iter),
            cpu_rows: rows_of(&phase_one.cold_cpu),
            handler_ring_ns: Summary::of(&phase_one.cold_handler_ring),
            handler_kernel_ns: Summary::of(&phase_one.cold_handler_kernel),
        })
    });
    let calibration = Calibration {
        format: FORMAT,
        kernel_release: machine.kernel_release,
        cpu_model: machine.cpu_model,
        cpus: machine.cpus,
        created_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        reps: options.reps,
        calls: options.calls,
        optimizes_nop5: KernelRules::running().optimizes_nop5(),
        rows,
        handler_ring_ns: Summary::of(&phase_one.handler_ring),
        handler_kernel_ns: Summary::of(&phase_one.handler_kernel),
        handler_method,
        handler_cpu_rows,
        handler_program_error,
        dispatch,
        dispatch_error,
        cold,
        gap: phase_one.gap.clone(),
        work: phase_one.work.clone(),
        tracefs_event_ns,
        tracefs_event_error,
        tracefs_shapes,
    };
    Ok((calibration, spent))
}

/// Progress, a line per phase: `[2/5, 12 s] what it measures`.
struct Phases<'a> {
    done: usize,
    total: usize,
    started: std::time::Instant,
    say: &'a mut dyn FnMut(&str),
}

impl<'a> Phases<'a> {
    fn new(options: &CalibrateOptions, say: &'a mut dyn FnMut(&str)) -> Self {
        let hot = usize::from(options.hot);
        let total = 1
            + hot
            + usize::from(options.gap_reps > 0) * (1 + usize::from(options.cold.is_some()))
            + usize::from(options.dispatch && options.hot)
            + hot;
        Self {
            done: 0,
            total,
            started: std::time::Instant::now(),
            say,
        }
    }

    fn next(&mut self, what: &str) {
        self.done += 1;
        (self.say)(&format!(
            "[{}/{}, {:.0} s] {what}",
            self.done,
            self.total.max(self.done),
            self.started.elapsed().as_secs_f64()
        ));
    }
}

/// Calls per run of a case costing ~1 us per hit; single-stepped hits cost ~12x.
fn calls_for(func: Func, options: &CalibrateOptions) -> u64 {
    match func {
        Func::SingleStepped => (options.calls / 10).max(100),
        _ => options.calls,
    }
}

fn request<'a>(
    probe_id: u32,
    kind: ProbeKind,
    path: &'a Path,
    file_offset: u64,
    mode: DeliveryMode,
    pid: u32,
) -> AttachRequest<'a> {
    AttachRequest {
        probe_id,
        kind,
        path,
        file_offset,
        more_offsets: Vec::new(),
        semaphore_offset: None,
        config: ProbeConfig {
            mode: mode.raw(),
            sample_every: 1,
            ..Default::default()
        },
        pid,
    }
}

#[derive(Default)]
struct PhaseOne {
    samples: HashMap<Case, Vec<f64>>,
    handler_ring: Vec<f64>,
    handler_kernel: Vec<f64>,
    /// What the handler adds per hit by program run time, per handler case; Err says
    /// why it could not be measured.
    handler_program: Option<Result<HashMap<Case, Vec<f64>>, String>>,
    /// Cold cases, per hit: by the call alone, by the median iteration, by CPU time
    /// per iteration.
    cold: HashMap<Case, Vec<f64>>,
    cold_iter: HashMap<Case, Vec<f64>>,
    cold_cpu: HashMap<Case, Vec<f64>>,
    /// probetop's handler clock during the cold handler cases.
    cold_handler_ring: Vec<f64>,
    cold_handler_kernel: Vec<f64>,
    /// The unprobed loop's median iteration, every run.
    cold_loop: Vec<f64>,
    gap: Option<crate::calibrate::gap::GapCurve>,
    work: Option<crate::calibrate::work::WorkCurve>,
}

fn phase_one(
    child: &mut Workload,
    offsets: &Offsets,
    options: &CalibrateOptions,
    rng: &mut XorShift,
    phases: &mut Phases<'_>,
) -> Result<PhaseOne, CalibrateError> {
    let pid = child.pid();
    let exe = crate::sys::procfs::exe(pid);
    let mut attachment = Attachment::load(LoadOptions {
        probe_count: 8,
        ..Default::default()
    })?;
    // Every probe stays attached for the whole phase: detaching waits for the
    // kernel's grace periods (~0.5 s each here), and each probed function has an
    // unprobed twin for the baseline anyway.
    let attached_cases = Case::ALL
        .into_iter()
        .filter(|c| !matches!(c, Case::UsdtUnattached | Case::HandlerKernelUntimed));
    for case in attached_cases {
        let mode = match case {
            Case::HandlerKernel => DeliveryMode::KernelHistogram,
            _ => DeliveryMode::Ring,
        };
        let func = case.func();
        let req = request(
            case.probe_id(),
            case.kind(),
            &exe,
            offsets.of(func),
            mode,
            pid,
        );
        if matches!(case, Case::HandlerRing | Case::HandlerKernel) {
            attachment.attach(&req)?;
        } else {
            attachment.attach_empty(&req)?;
        }
    }
    let drainer = Drainer::start(attachment.take_ring()?, attachment.attach_flush()?);
    // Every probe is attached: its counters can leave the object now (the TIMING map
    // and the programs, which the handler cases still use, stay).
    let counters = attachment.take_counters()?;
    let mut out = PhaseOne::default();
    phases.next(match (options.hot, options.cold.is_some()) {
        (true, true) => "a hit with caches warm and after a server-sized loop, per probe kind",
        (true, false) => "a hit with caches warm, per probe kind",
        _ => "a hit after a server-sized loop",
    });
    for rep in 0..options.reps {
        let mut cases = if options.hot {
            Case::ALL.to_vec()
        } else {
            Vec::new()
        };
        if options.cold.is_some() {
            cases.extend(Case::COLD);
        }
        rng.shuffle(&mut cases);
        for case in cases {
            let func = case.func();
            if let (true, Some(cold)) = (case.is_cold(), &options.cold) {
                let ring_before = drainer.totals();
                let hist_before = if case == Case::HandlerKernelCold {
                    counters.histogram(case.probe_id())?
                } else {
                    Vec::new()
                };
                let (probed, twin) = child.run_cold_pair(func, cold, rep % 2 == 1)?;
                match case {
                    Case::HandlerRingCold => {
                        let after = drainer.wait_for(ring_before.0 + cold.iters + COLD_WARMUP);
                        let records = after.0 - ring_before.0;
                        if records > 0 {
                            out.cold_handler_ring
                                .push((after.1 - ring_before.1) as f64 / records as f64);
                        }
                    }
                    Case::HandlerKernelCold => {
                        let after = counters.histogram(case.probe_id())?;
                        if let Some(mean) = histogram_mean(&after, &hist_before) {
                            out.cold_handler_kernel.push(mean);
                        }
                    }
                    _ => {}
                }
                let add = |map: &mut HashMap<Case, Vec<f64>>, p: f64, t: f64| {
                    map.entry(case).or_default().push(p - t)
                };
                add(&mut out.cold, probed.call_ns_median, twin.call_ns_median);
                add(
                    &mut out.cold_iter,
                    probed.iter_ns_median,
                    twin.iter_ns_median,
                );
                add(
                    &mut out.cold_cpu,
                    probed.cpu_ns_per_iter,
                    twin.cpu_ns_per_iter,
                );
                out.cold_loop.push(twin.iter_ns_median);
                continue;
            }
            if case == Case::UsdtUnattached {
                let ns = child.run(func, options.unattached_calls)?;
                out.samples.entry(case).or_default().push(ns);
                continue;
            }
            let calls = calls_for(func, options);
            let ring_before = drainer.totals();
            let hist_before = if case == Case::HandlerKernel {
                counters.histogram(case.probe_id())?
            } else {
                Vec::new()
            };
            if case == Case::HandlerKernelUntimed {
                attachment.set_time_every(u64::MAX)?;
            }
            let pair = child.run_pair(func, calls, rep % 2 == 1);
            if case == Case::HandlerKernelUntimed {
                attachment.set_time_every(1)?;
            }
            let (probed, unprobed) = pair?;
            match case {
                Case::HandlerRing => {
                    let after = drainer.wait_for(ring_before.0 + calls + WARMUP);
                    let records = after.0 - ring_before.0;
                    if records > 0 {
                        out.handler_ring
                            .push((after.1 - ring_before.1) as f64 / records as f64);
                    }
                }
                Case::HandlerKernel => {
                    let after = counters.histogram(case.probe_id())?;
                    if let Some(mean) = histogram_mean(&after, &hist_before) {
                        out.handler_kernel.push(mean);
                    }
                }
                _ => {}
            }
            out.samples.entry(case).or_default().push(probed - unprobed);
        }
    }
    if options.hot {
        phases.next("probetop's handler by the kernel's program run time");
        out.handler_program = Some(handler_program_time(child, &mut attachment, options, rng)?);
    }
    if options.gap_reps > 0 {
        phases.next("a hit after idle gaps of 2 us to 2 ms");
        out.gap = Some(gap_phase::measure(
            child,
            &mut attachment,
            &drainer,
            options.gap_reps,
            probe_common::DEFAULT_TIME_EVERY,
            rng,
        )?);
        if let Some(cold) = &options.cold {
            phases.next("a hit after footprints walked between calls, up to the last-level cache");
            let clocks = work_phase::HandlerClocks {
                drainer: &drainer,
                counters: &counters,
                kernel_probe: Case::HandlerKernel.probe_id(),
            };
            out.work = Some(work_phase::measure(
                child,
                &mut attachment,
                &clocks,
                cold,
                options.gap_reps,
                probe_common::DEFAULT_TIME_EVERY,
                rng,
            )?);
        }
    }
    drop(drainer);
    // The handler rows are what probetop's handler adds to the empty program's cost:
    // subtract the emulated uprobe measured in the same repetition.
    subtract_base(&mut out.samples, Case::UprobeEmulated, &Case::HANDLER);
    let cold_handlers = [Case::HandlerRingCold, Case::HandlerKernelCold];
    for map in [&mut out.cold, &mut out.cold_iter, &mut out.cold_cpu] {
        subtract_base(map, Case::UprobeEmulatedCold, &cold_handlers);
    }
    Ok(out)
}

/// Subtracts `base`'s sample of each repetition from the same repetition's sample of
/// every case of `from`.
fn subtract_base(samples: &mut HashMap<Case, Vec<f64>>, base: Case, from: &[Case]) {
    let Some(base) = samples.get(&base).cloned() else {
        return;
    };
    for case in from {
        if let Some(samples) = samples.get_mut(case) {
            for (s, b) in samples.iter_mut().zip(&base) {
                *s -= b;
            }
        }
    }
}

/// What probetop's handler adds per hit by the kernel's own run time of the programs:
/// each handler case's program time per run minus the empty program's on the emulated
/// uprobe, paired per repetition. Only the called function's probe fires during a run,
/// so a program's statistics over the run are that probe's. `Ok(Err(why))` when BPF
/// statistics cannot be had.
fn handler_program_time(
    child: &mut Workload,
    attachment: &mut Attachment,
    options: &CalibrateOptions,
    rng: &mut XorShift,
) -> Result<Result<HashMap<Case, Vec<f64>>, String>, CalibrateError> {
    // On for this pass alone (the CPU-time rows would pay its clock reads), and off by
    // itself when the guard's fd closes, however probetop exits.
    let _stats = match StatsGuard::enable() {
        Ok(guard) => guard,
        Err(e) => return Ok(Err(format!("BPF statistics cannot be turned on: {e}"))),
    };
    let mut cases = [
        Case::UprobeEmulated,
        Case::HandlerRing,
        Case::HandlerKernel,
        Case::HandlerKernelUntimed,
    ];
    let mut out: HashMap<Case, Vec<f64>> = HashMap::new();
    for _ in 0..options.reps {
        rng.shuffle(&mut cases);
        let mut per_run = HashMap::new();
        for case in cases {
            let empty = case == Case::UprobeEmulated;
            let untimed = case == Case::HandlerKernelUntimed;
            let calls = calls_for(case.func(), options);
            let (runs_before, ns_before) = attachment.run_stats(case.kind(), empty)?;
            if untimed {
                attachment.set_time_every(u64::MAX)?;
            }
            let run = child.run(case.func(), calls);
            if untimed {
                attachment.set_time_every(1)?;
            }
            run?;
            let (runs_after, ns_after) = attachment.run_stats(case.kind(), empty)?;
            let runs = runs_after.saturating_sub(runs_before);
            if runs < calls {
                return Ok(Err(format!(
                    "{}: the kernel counted {runs} program runs for {calls} calls",
                    case.label()
                )));
            }
            per_run.insert(
                case,
                ns_after.saturating_sub(ns_before) as f64 / runs as f64,
            );
        }
        let Some(&base) = per_run.get(&Case::UprobeEmulated) else {
            continue;
        };
        for case in Case::HANDLER {
            if let Some(ns) = per_run.get(&case) {
                out.entry(case).or_default().push(ns - base);
            }
        }
    }
    // The same in the cold loop: the programs' own time when their code and maps were
    // evicted between two runs.
    let Some(cold) = &options.cold else {
        return Ok(Ok(out));
    };
    let mut cases = [
        Case::UprobeEmulatedCold,
        Case::HandlerRingCold,
        Case::HandlerKernelCold,
    ];
    for _ in 0..options.reps {
        rng.shuffle(&mut cases);
        let mut per_run = HashMap::new();
        for case in cases {
            let empty = case == Case::UprobeEmulatedCold;
            let (runs_before, ns_before) = attachment.run_stats(case.kind(), empty)?;
            child.run_cold(case.func(), cold)?;
            let (runs_after, ns_after) = attachment.run_stats(case.kind(), empty)?;
            let runs = runs_after.saturating_sub(runs_before);
            if runs < cold.iters {
                return Ok(Err(format!(
                    "{}: the kernel counted {runs} program runs for {} calls",
                    case.label(),
                    cold.iters
                )));
            }
            per_run.insert(
                case,
                ns_after.saturating_sub(ns_before) as f64 / runs as f64,
            );
        }
        let Some(&base) = per_run.get(&Case::UprobeEmulatedCold) else {
            continue;
        };
        for case in [Case::HandlerRingCold, Case::HandlerKernelCold] {
            if let Some(ns) = per_run.get(&case) {
                out.entry(case).or_default().push(ns - base);
            }
        }
    }
    Ok(Ok(out))
}

/// Mean of the counts added since `before`, each at its bucket's midpoint.
fn histogram_mean(after: &[u64], before: &[u64]) -> Option<f64> {
    let mut count = 0u64;
    let mut sum = 0f64;
    for (index, total) in after.iter().enumerate() {
        let new = total.saturating_sub(before.get(index).copied().unwrap_or(0));
        if new > 0 {
            let (low, high) = khist::bounds(index as u32);
            count += new;
            sum += new as f64 * (low as f64 + high as f64) / 2.0;
        }
    }
    (count > 0).then(|| sum / count as f64)
}

enum PhaseTwoError {
    /// The kernel refused the fentry/fexit programs: reported, not fatal.
    Refused(String),
    Other(CalibrateError),
}

impl From<CalibrateError> for PhaseTwoError {
    fn from(e: CalibrateError) -> Self {
        PhaseTwoError::Other(e)
    }
}

fn phase_two(
    child: &mut Workload,
    offsets: &Offsets,
    options: &CalibrateOptions,
    rng: &mut XorShift,
) -> Result<Vec<DispatchRow>, PhaseTwoError> {
    let pid = child.pid();
    let exe = crate::sys::procfs::exe(pid);
    let cases = DispatchCase::ALL;
    let mut attachment = Attachment::load(LoadOptions {
        probe_count: cases.len() as u32,
        dispatch_tgid: Some(pid),
        ..Default::default()
    })
    .map_err(CalibrateError::from)?;
    let sites: Vec<ProbeSite> = cases
        .iter()
        .map(|c| ProbeSite {
            kind: c.kind(),
            vaddr: offsets.vaddr_in(pid, c.func()),
        })
        .collect();
    let dispatch = Dispatch::start(attachment.ebpf_mut(), &sites)
        .map_err(|e| PhaseTwoError::Refused(e.to_string()))?;
    for case in cases {
        let func = case.func();
        let req = request(
            case.probe_id(),
            case.kind(),
            &exe,
            offsets.of(func),
            DeliveryMode::Ring,
            pid,
        );
        attachment.attach(&req).map_err(CalibrateError::from)?;
    }
    let drainer = Drainer::start(
        attachment.take_ring().map_err(CalibrateError::from)?,
        attachment.attach_flush().map_err(CalibrateError::from)?,
    );
    let mut whole: std::collections::HashMap<DispatchCase, Vec<f64>> = Default::default();
    let mut measured: std::collections::HashMap<DispatchCase, Vec<f64>> = Default::default();
    for rep in 0..options.reps {
        let mut order = cases.to_vec();
        rng.shuffle(&mut order);
        for case in order {
            let func = case.func();
            let calls = calls_for(func, options);
            let id = case.probe_id();
            let before = slot_totals(&dispatch, id)?;
            let (probed, unprobed) = child.run_pair(func, calls, rep % 2 == 1)?;
            let after = slot_totals(&dispatch, id)?;
            let mean = |a: SlotTotal, b: SlotTotal| {
                let count = a.count.saturating_sub(b.count);
                (count > 0).then(|| a.sum_ns.saturating_sub(b.sum_ns) as f64 / count as f64)
            };
            let per_hit =
                mean(after.0, before.0).unwrap_or(0.0) + mean(after.1, before.1).unwrap_or(0.0);
            whole.entry(case).or_default().push(probed - unprobed);
            measured.entry(case).or_default().push(per_hit);
        }
    }
    drop(drainer);
    if measured.values().flatten().all(|v| *v == 0.0) {
        return Err(PhaseTwoError::Refused(
            "fentry/fexit attached but measured no dispatch in the workload".into(),
        ));
    }
    Ok(cases
        .iter()
        .filter_map(|case| {
            let w = whole.get(case)?;
            let d = measured.get(case)?;
            let residual: Vec<f64> = w.iter().zip(d).map(|(w, d)| w - d).collect();
            Some(DispatchRow {
                case: *case,
                label: case.label().to_string(),
                whole_ns: Summary::of(w)?,
                dispatch_ns: Summary::of(d)?,
                residual_ns: Summary::of(&residual)?,
            })
        })
        .collect())
}

fn slot_totals(dispatch: &Dispatch, id: u32) -> Result<(SlotTotal, SlotTotal), CalibrateError> {
    Ok((
        dispatch.total(id, slots::ENTRY)?,
        dispatch.total(id, slots::RETURN)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_mean_of_new_counts() {
        let mut before = vec![0u64; khist::BUCKETS as usize];
        let mut after = before.clone();
        after[10] = 4;
        before[10] = 2;
        assert_eq!(histogram_mean(&after, &before), Some(10.0));
        assert_eq!(histogram_mean(&before, &before), None);
    }
}
