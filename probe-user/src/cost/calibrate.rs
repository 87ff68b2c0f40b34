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
    io::{self, BufRead as _, BufReader, Write as _},
    os::fd::AsFd as _,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use probe_common::{ProbeConfig, dispatch as slots, khist, mode};
use serde::{Deserialize, Serialize};

use super::bpf_stats::StatsGuard;
use super::classes::KernelRules;
use super::dispatch::{Dispatch, ProbeSite, SlotTotal};
use super::stats::{Summary, XorShift};
use super::workload::{ColdRun, Func};
use crate::attach::{AttachRequest, Attachment, LoadOptions};
use crate::resolve::maps::{FileId, read_maps};
use crate::spec::ProbeKind;

/// The hidden subcommand the child runs.
mod gap_phase;

pub const WORKLOAD_SUBCOMMAND: &str = "__calibrate-workload";

/// Version of the cache file's layout (3: the `nop; nop5` USDT row).
const FORMAT: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
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
pub struct CalibrateOptions {
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
    /// Repetitions of the gap curve (`cost::gap`); 0 skips it.
    pub gap_reps: usize,
}

/// The cold loop: between two calls of the probed function (or its twin), a walk over
/// `data_bytes` of data and a run through `code_bytes` of code, as a server runs its
/// own code between two hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColdOptions {
    pub data_bytes: u64,
    pub code_bytes: u64,
    /// Iterations per measured run (one hit each).
    pub iters: u64,
}

/// The data walk's size when the last-level cache is not known, and its cap: a walk
/// of the whole last-level cache of a large server (hundreds of MiB) would take tens of
/// ms per iteration.
pub const COLD_DATA_CAP: u64 = 32 << 20;

/// The code chain's default size: a quarter of a typical L2, four times a typical L1i.
pub const COLD_CODE_BYTES: u64 = 512 << 10;

/// The data walk's size when the L2's is not known.
pub const COLD_DATA_FALLBACK: u64 = 2 << 20;

impl ColdOptions {
    /// The default footprint here: a data walk the size of this CPU's L2 and
    /// [`COLD_CODE_BYTES`] of code. That is roughly what a server thread touches
    /// between two hits of a request-path probe: mariadbd runs ~15 us of its own CPU
    /// per hit there, and on this machine the L2-sized loop (61 us an iteration) priced
    /// a hit at 1.9-2.6 us against a true 2-5 us, where the whole last-level cache and
    /// 4 MiB of code (an upper bound, `--cold-data-mib 32 --cold-code-mib 4`) priced it
    /// at 6-9 us (docs/cost.md, the size curve). One server: other footprints may fit
    /// others better, hence the flags.
    pub fn for_this_machine(iters: u64) -> Self {
        let data_bytes = level_cache_bytes(2)
            .unwrap_or(COLD_DATA_FALLBACK)
            .min(COLD_DATA_CAP);
        Self {
            data_bytes,
            code_bytes: COLD_CODE_BYTES,
            iters,
        }
    }
}

/// The size of CPU 0's unified or data cache at `level`, from sysfs.
fn level_cache_bytes(level: u32) -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter(|e| {
            std::fs::read_to_string(e.path().join("level"))
                .is_ok_and(|l| l.trim().parse() == Ok(level))
                && std::fs::read_to_string(e.path().join("type"))
                    .is_ok_and(|t| t.trim() != "Instruction")
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("size")).ok())
        .filter_map(|size| parse_cache_size(size.trim()))
        .max()
}

/// The largest cache of CPU 0, from sysfs (`index*/size`, like `512K`, `32M`).
pub fn last_level_cache_bytes() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| std::fs::read_to_string(e.path().join("size")).ok())
        .filter_map(|size| parse_cache_size(size.trim()))
        .max()
}

fn parse_cache_size(text: &str) -> Option<u64> {
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = digits.parse().ok()?;
    match unit {
        "K" => Some(n << 10),
        "M" => Some(n << 20),
        "G" => Some(n << 30),
        _ => None,
    }
}

impl CalibrateOptions {
    /// 1-2 minutes on a 2-vCPU VM, half of it the cold loop.
    pub fn full() -> Self {
        Self {
            reps: 31,
            calls: 60_000,
            unattached_calls: 10_000_000,
            dispatch: true,
            cold: Some(ColdOptions::for_this_machine(COLD_ITERS_FULL)),
            hot: true,
            gap_reps: gap_phase::MAX_REPS,
        }
    }

    /// 20-30 seconds, for tests (6 without the cold loop).
    pub fn quick() -> Self {
        Self {
            reps: 15,
            calls: 20_000,
            unattached_calls: 2_000_000,
            dispatch: true,
            cold: Some(ColdOptions::for_this_machine(COLD_ITERS_QUICK)),
            hot: true,
            gap_reps: 3,
        }
    }
}

/// How far apart two rows of one mechanism may lie: a USDT hit (a nop emulated after
/// the trap) and an emulated uprobe (a push) differ by ~60 ns of ~850, less than a
/// quick calibration's noise, so they are held to one class, not to an order.
pub const SAME_CLASS: f64 = 0.35;

/// Calls before each measured run: first-hit work (page faults, the rewrite of an
/// optimized probe) stays out of the measurement.
const WARMUP: u64 = 200;

/// Iterations of the cold loop per measured run, full and quick.
const COLD_ITERS_FULL: u64 = 60;
const COLD_ITERS_QUICK: u64 = 30;

/// Iterations of the cold loop before each measured run.
const COLD_WARMUP: u64 = 3;

/// One measured case of phase one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    /// A loop calling a function that holds an unattached USDT site: ns per call.
    UsdtUnattached,
    /// A USDT site (a nop) with a probe running an empty program.
    UsdtHit,
    /// A `nop; nop5` USDT site (libbpf/usdt's usdt.h) probed on its 5-byte nop, as
    /// probetop resolves it where the kernel optimizes nop5 (6.18+), empty program.
    UsdtNop5Hit,
    /// A uprobe on `push %rbp` (emulated), empty program.
    UprobeEmulated,
    /// A uprobe on a %rip-relative `mov` (single-stepped), empty program.
    UprobeSingleStepped,
    /// A uprobe on a 5-byte nop (optimized on 6.18+), empty program.
    UprobeOptimized,
    /// A uretprobe on a function starting with `push %rbp`, empty program: the entry
    /// breakpoint and the return.
    Uretprobe,
    /// probetop's handler streaming to the ring buffer, minus [`Case::UprobeEmulated`].
    HandlerRing,
    /// probetop's handler counting in the kernel, every hit timed, minus
    /// [`Case::UprobeEmulated`].
    HandlerKernel,
    /// The same with no hit timed: what counting alone adds (`--time-every` mixes the
    /// two).
    HandlerKernelUntimed,
    /// [`Case::UprobeEmulated`] in the cold loop.
    UprobeEmulatedCold,
    /// [`Case::Uretprobe`] in the cold loop.
    UretprobeCold,
    /// [`Case::HandlerRing`] in the cold loop, minus [`Case::UprobeEmulatedCold`].
    HandlerRingCold,
    /// [`Case::HandlerKernel`] in the cold loop, minus [`Case::UprobeEmulatedCold`].
    HandlerKernelCold,
}

impl Case {
    pub const ALL: [Case; 10] = [
        Case::UsdtUnattached,
        Case::UsdtHit,
        Case::UsdtNop5Hit,
        Case::UprobeEmulated,
        Case::UprobeSingleStepped,
        Case::UprobeOptimized,
        Case::Uretprobe,
        Case::HandlerRing,
        Case::HandlerKernel,
        Case::HandlerKernelUntimed,
    ];

    /// The cold rows, in table order (`ALL` are the hot ones).
    pub const COLD: [Case; 4] = [
        Case::UprobeEmulatedCold,
        Case::UretprobeCold,
        Case::HandlerRingCold,
        Case::HandlerKernelCold,
    ];

    /// The rows of what probetop's handler adds on top of the empty program.
    pub const HANDLER: [Case; 3] = [
        Case::HandlerRing,
        Case::HandlerKernel,
        Case::HandlerKernelUntimed,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Case::UsdtUnattached => "USDT site, not attached (ns per loop call)",
            Case::UsdtHit => "USDT hit (nop, empty program)",
            Case::UsdtNop5Hit => "USDT hit (nop; nop5 form, on the nop5, empty)",
            Case::UprobeEmulated => "uprobe, emulated (push %rbp, empty program)",
            Case::UprobeSingleStepped => "uprobe, single-stepped (%rip-rel mov, empty)",
            Case::UprobeOptimized => "uprobe, 5-byte nop (empty program)",
            Case::Uretprobe => "uretprobe (entry push %rbp + return, empty)",
            Case::HandlerRing => "probetop handler on top, ring buffer",
            Case::HandlerKernel => "probetop handler on top, in-kernel, every hit timed",
            Case::HandlerKernelUntimed => "probetop handler on top, in-kernel, none timed",
            Case::UprobeEmulatedCold => "cold: uprobe, emulated (push %rbp, empty)",
            Case::UretprobeCold => "cold: uretprobe (entry + return, empty)",
            Case::HandlerRingCold => "cold: probetop handler on top, ring buffer",
            Case::HandlerKernelCold => "cold: probetop handler on top, in-kernel, timed",
        }
    }

    /// The hot case a cold one repeats in the cold loop.
    pub fn hot(self) -> Case {
        match self {
            Case::UprobeEmulatedCold => Case::UprobeEmulated,
            Case::UretprobeCold => Case::Uretprobe,
            Case::HandlerRingCold => Case::HandlerRing,
            Case::HandlerKernelCold => Case::HandlerKernel,
            hot => hot,
        }
    }

    pub fn is_cold(self) -> bool {
        self.hot() != self
    }

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

    /// Probe id in phase one's attachment.
    fn probe_id(self) -> u32 {
        match self {
            Case::UprobeEmulatedCold
            | Case::UretprobeCold
            | Case::HandlerRingCold
            | Case::HandlerKernelCold => self.hot().probe_id(),
            Case::UsdtUnattached | Case::UsdtHit => 0,
            Case::UprobeEmulated => 1,
            Case::UprobeSingleStepped => 2,
            Case::UprobeOptimized => 3,
            Case::Uretprobe => 4,
            Case::HandlerRing => 5,
            // One probe, timed or not by the TIMING map while its case runs.
            Case::HandlerKernel | Case::HandlerKernelUntimed => 6,
            Case::UsdtNop5Hit => 7,
        }
    }
}

/// One case of phase two: probetop's ring handler with dispatch measurement on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchCase {
    /// A USDT site: emulated nop.
    Usdt,
    /// `push %rbp`: emulated push.
    Emulated,
    SingleStepped,
    Optimized,
    /// A uretprobe on a `push %rbp` function: entry and return.
    Uretprobe,
}

impl DispatchCase {
    pub const ALL: [DispatchCase; 5] = [
        DispatchCase::Usdt,
        DispatchCase::Emulated,
        DispatchCase::SingleStepped,
        DispatchCase::Optimized,
        DispatchCase::Uretprobe,
    ];

    pub fn label(self) -> &'static str {
        match self {
            DispatchCase::Usdt => "USDT hit (nop)",
            DispatchCase::Emulated => "uprobe, emulated (push %rbp)",
            DispatchCase::SingleStepped => "uprobe, single-stepped",
            DispatchCase::Optimized => "uprobe, 5-byte nop",
            DispatchCase::Uretprobe => "uretprobe (entry + return)",
        }
    }

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

    fn probe_id(self) -> u32 {
        match self {
            DispatchCase::Usdt => 0,
            DispatchCase::Emulated => 1,
            DispatchCase::SingleStepped => 2,
            DispatchCase::Optimized => 3,
            DispatchCase::Uretprobe => 4,
        }
    }
}

/// One row of phase one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub case: Case,
    pub label: String,
    /// ns per hit (per call for the unattached row), summarised.
    pub ns: Summary,
    /// Every repetition's value, in the order measured.
    pub samples: Vec<f64>,
}

/// How the rows of what probetop's handler adds were measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HandlerMethod {
    /// The kernel's run time per run of probetop's program minus the empty program's
    /// (BPF statistics): a few ns of spread. It leaves out what happens after the
    /// program returns (a ring-buffer wakeup, one per many records).
    ProgramTime,
    /// The traced thread's CPU time with probetop's program minus with the empty one:
    /// the whole effect, but a difference of two ~900 ns measurements, tens of ns of
    /// spread on a VM.
    #[default]
    ThreadCpuTime,
}

impl HandlerMethod {
    pub fn label(self) -> &'static str {
        match self {
            HandlerMethod::ProgramTime => "program run time (BPF statistics)",
            HandlerMethod::ThreadCpuTime => "the traced thread's CPU time",
        }
    }
}

/// One row of phase two.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DispatchRow {
    pub case: DispatchCase,
    pub label: String,
    /// Whole cost per hit with probetop's ring handler and dispatch measurement on.
    pub whole_ns: Summary,
    /// Dispatch measured per hit (entry plus return).
    pub dispatch_ns: Summary,
    /// Whole minus dispatch, per repetition: what a live dispatch measurement misses.
    pub residual_ns: Summary,
}

/// Everything `probetop calibrate` measured; cached as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub format: u32,
    pub kernel_release: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub created_unix_s: u64,
    pub reps: usize,
    pub calls: u64,
    /// The kernel optimizes probed 5-byte nops (the optimized row is one).
    pub optimizes_nop5: bool,
    pub rows: Vec<Row>,
    /// Handler time (probetop's bpf_ktime window) per hit during the handler rows.
    pub handler_ring_ns: Option<Summary>,
    pub handler_kernel_ns: Option<Summary>,
    /// How the handler rows were measured (older caches: thread CPU time).
    #[serde(default)]
    pub handler_method: HandlerMethod,
    /// With [`HandlerMethod::ProgramTime`], the handler rows as the thread's CPU time
    /// saw them: the cross-check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handler_cpu_rows: Vec<Row>,
    /// Why the handler rows fell back to thread CPU time, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler_program_error: Option<String>,
    pub dispatch: Vec<DispatchRow>,
    /// Why phase two did not run (fentry/fexit refused), verbatim.
    pub dispatch_error: Option<String>,
    /// The cold rows (older caches and `--no-cold`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold: Option<ColdCalibration>,
    /// A hit after a range of sleeps between calls (`cost::gap`; older caches: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap: Option<super::gap::GapCurve>,
}

/// What a hit costs in the cold loop: a server's case, where the code and data the
/// process runs between two hits evict the kernel's uprobe path, the BPF program and
/// its maps from the caches and the TLB.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColdCalibration {
    /// The loop that was run.
    pub options: ColdOptions,
    /// The last-level cache read from sysfs, when it was.
    pub llc_bytes: Option<u64>,
    /// One iteration of the unprobed loop (the footprint and one call of the twin):
    /// wall ns, the median iteration of each run, summarised over the runs.
    pub loop_ns: Summary,
    /// Per hit: the call alone (the time-stamp counter just before it and just after,
    /// the median call of a run), probed - twin, per repetition; the handler rows minus
    /// the cold emulated uprobe of the same repetition. The trap, the kernel's path and
    /// the way back, as the hot rows.
    pub rows: Vec<Row>,
    /// Per hit by the whole iteration: (probed - twin) of the median iteration. It
    /// would also hold what the hit's cache pollution costs the code after it, but it
    /// is a difference of two iterations of ~2 ms: thousands of ns of spread.
    pub iter_rows: Vec<Row>,
    /// Per hit by the thread's CPU time per iteration (a mean, interrupts included).
    pub cpu_rows: Vec<Row>,
    /// How the cold handler rows were measured.
    pub handler_method: ColdHandlerMethod,
    /// With [`ColdHandlerMethod::ProgramTime`], the handler rows by the call's time:
    /// the cross-check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handler_call_rows: Vec<Row>,
    /// probetop's own handler-time clock per hit during the cold ring and in-kernel
    /// cases (the live handler time is compared with these under the cold assumption).
    pub handler_ring_ns: Option<Summary>,
    pub handler_kernel_ns: Option<Summary>,
}

/// How the cold rows of what probetop's handler adds were measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ColdHandlerMethod {
    /// The programs' run time (BPF statistics) in the cold loop, probetop's minus the
    /// empty program's, as the hot handler rows.
    ProgramTime,
    /// The call's time with probetop's program minus with the empty one: a difference
    /// of two cold hits of several microseconds, hundreds of ns of spread.
    CallTime,
}

impl ColdCalibration {
    pub fn row(&self, case: Case) -> Option<&Summary> {
        self.rows.iter().find(|r| r.case == case).map(|r| &r.ns)
    }

    /// The cold table, each row beside its hot twin and the cross-checks.
    fn render_text(&self, out: &mut String, hot: &Calibration) {
        use std::fmt::Write as _;
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        let _ = writeln!(
            out,
            "\ncold loop: between two calls, a walk over {:.0} MiB of data and {:.1} MiB of code{}; {} us per iteration unprobed ({} iterations per run)",
            mib(self.options.data_bytes),
            mib(self.options.code_bytes),
            self.llc_bytes.map_or(String::new(), |llc| format!(
                " (last-level cache {:.0} MiB)",
                mib(llc)
            )),
            fmt_ns(self.loop_ns.median / 1000.0),
            self.options.iters,
        );
        let _ = writeln!(
            out,
            "{:<52} {:>10} {:>19} {:>8} {:>8} {:>8}",
            "cost to the traced thread per hit", "median ns", "IQR", "hot", "iter", "cpu"
        );
        let median_of = |rows: &[Row], case: Case| {
            rows.iter()
                .find(|r| r.case == case)
                .map_or("-".to_string(), |r| fmt_ns(r.ns.median))
        };
        for row in &self.rows {
            let _ = writeln!(
                out,
                "{:<52} {:>10} {:>19} {:>8} {:>8} {:>8}",
                row.label,
                fmt_ns(row.ns.median),
                format!("{}-{}", fmt_ns(row.ns.q1), fmt_ns(row.ns.q3)),
                hot.row(row.case.hot())
                    .map_or("-".to_string(), |s| fmt_ns(s.median)),
                median_of(&self.iter_rows, row.case),
                median_of(&self.cpu_rows, row.case),
            );
        }
        let _ = writeln!(
            out,
            "(the call alone, probed - unprobed; hot: the hot row; iter: by the median whole iteration, cpu: by the thread's CPU time per iteration, both noisy)"
        );
        if self.handler_method == ColdHandlerMethod::ProgramTime {
            let call: Vec<String> = self
                .handler_call_rows
                .iter()
                .map(|r| fmt_ns(r.ns.median))
                .collect();
            let _ = writeln!(
                out,
                "(the cold handler rows: program run time (BPF statistics); the call's time gave {} ns)",
                call.join(" / ")
            );
        }
    }
}

impl Calibration {
    /// The summary of one phase-one case (a cold case from the cold rows).
    pub fn row(&self, case: Case) -> Option<&Summary> {
        if case.is_cold() {
            return self.cold.as_ref()?.row(case);
        }
        self.rows.iter().find(|r| r.case == case).map(|r| &r.ns)
    }

    /// The phase-two row of one case.
    pub fn dispatch_row(&self, case: DispatchCase) -> Option<&DispatchRow> {
        self.dispatch.iter().find(|r| r.case == case)
    }

    /// Whether the medians are ordered as the mechanisms say where they differ by far
    /// more than the noise: an unattached site < a USDT hit, an emulated uprobe < a
    /// single-stepped one < ... and a uretprobe > its emulated entry; a USDT hit (an
    /// emulated nop) and an emulated uprobe (a push) within [`SAME_CLASS`] of each
    /// other; every kernel-path cost positive. Err names the first violation.
    pub fn check_order(&self) -> Result<(), String> {
        for case in Case::ALL {
            match self.row(case) {
                None => return Err(format!("no row for {case:?}")),
                Some(s)
                    if s.median <= 0.0
                        && !matches!(case, Case::HandlerKernel | Case::HandlerKernelUntimed) =>
                {
                    return Err(format!(
                        "{}: median {} ns is not positive",
                        case.label(),
                        s.median
                    ));
                }
                Some(_) => {}
            }
        }
        let median = |case: Case| self.row(case).map_or(0.0, |s| s.median);
        for (cheaper, dearer) in [
            (Case::UsdtUnattached, Case::UsdtHit),
            (Case::UprobeEmulated, Case::UprobeSingleStepped),
            (Case::UprobeEmulated, Case::Uretprobe),
        ] {
            let (x, y) = (median(cheaper), median(dearer));
            if x >= y {
                return Err(format!(
                    "{} ({x:.1} ns) is not below {} ({y:.1} ns)",
                    cheaper.label(),
                    dearer.label(),
                ));
            }
        }
        let (nop, push) = (median(Case::UsdtHit), median(Case::UprobeEmulated));
        if (nop - push).abs() > SAME_CLASS * nop.max(push) {
            return Err(format!(
                "{} ({nop:.1} ns) and {} ({push:.1} ns) differ by more than {:.0}%",
                Case::UsdtHit.label(),
                Case::UprobeEmulated.label(),
                SAME_CLASS * 100.0
            ));
        }
        Ok(())
    }

    /// Whether this calibration was made on the running kernel and CPU.
    pub fn matches_this_machine(&self) -> bool {
        let machine = Machine::current();
        self.format == FORMAT
            && self.kernel_release == machine.kernel_release
            && self.cpu_model == machine.cpu_model
    }

    /// Renders the table people read.
    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "kernel {}, {} ({} CPU{}); {} interleaved repetitions of every case",
            self.kernel_release,
            self.cpu_model,
            self.cpus,
            if self.cpus == 1 { "" } else { "s" },
            self.reps
        );
        let _ = writeln!(
            out,
            "\n{:<52} {:>10} {:>19} {:>19}",
            "cost to the traced thread per hit", "median ns", "IQR", "95% CI of median"
        );
        for row in &self.rows {
            let mut label = row.label.clone();
            if matches!(row.case, Case::UprobeOptimized | Case::UsdtNop5Hit) && !self.optimizes_nop5
            {
                label.push_str(" [not optimized here]");
            }
            let _ = writeln!(
                out,
                "{:<52} {:>10} {:>19} {:>19}",
                label,
                fmt_ns(row.ns.median),
                format!("{}-{}", fmt_ns(row.ns.q1), fmt_ns(row.ns.q3)),
                format!("{}-{}", fmt_ns(row.ns.ci_low), fmt_ns(row.ns.ci_high)),
            );
        }
        let _ = match (self.handler_method, &self.handler_program_error) {
            (HandlerMethod::ProgramTime, _) => {
                let cpu: Vec<String> = self
                    .handler_cpu_rows
                    .iter()
                    .map(|r| fmt_ns(r.ns.median))
                    .collect();
                writeln!(
                    out,
                    "(the handler rows: {}; the traced thread's CPU time gave {} ns)",
                    HandlerMethod::ProgramTime.label(),
                    cpu.join(" / ")
                )
            }
            (HandlerMethod::ThreadCpuTime, Some(why)) => writeln!(
                out,
                "(the handler rows: {}; program run time unavailable: {why})",
                HandlerMethod::ThreadCpuTime.label()
            ),
            (HandlerMethod::ThreadCpuTime, None) => writeln!(
                out,
                "(the handler rows: {})",
                HandlerMethod::ThreadCpuTime.label()
            ),
        };
        if let (Some(ring), Some(kernel)) = (&self.handler_ring_ns, &self.handler_kernel_ns) {
            let _ = writeln!(
                out,
                "(probetop's own handler-time clock read {} ns per hit with the ring buffer, {} ns in-kernel)",
                fmt_ns(ring.median),
                fmt_ns(kernel.median)
            );
        }
        if let Some(cold) = &self.cold {
            cold.render_text(&mut out, self);
        }
        if let Some(gap) = &self.gap {
            gap_phase::render_text(gap, &mut out);
        }
        match (&self.dispatch_error, self.dispatch.is_empty()) {
            (Some(e), _) => {
                let _ = writeln!(out, "\ndispatch measurement unavailable: {e}");
            }
            (None, false) => {
                let _ = writeln!(
                    out,
                    "\n{:<52} {:>10} {:>10} {:>10}",
                    "probetop ring handler + dispatch clock on", "whole", "dispatch", "residual"
                );
                for row in &self.dispatch {
                    let _ = writeln!(
                        out,
                        "{:<52} {:>10} {:>10} {:>10}",
                        row.label,
                        fmt_ns(row.whole_ns.median),
                        fmt_ns(row.dispatch_ns.median),
                        fmt_ns(row.residual_ns.median)
                    );
                }
                let _ = writeln!(
                    out,
                    "(dispatch: kernel time from the uprobe path's entry to its exit, fentry/fexit; residual: the trap and the way back it cannot see)"
                );
            }
            (None, true) => {}
        }
        let _ = match self.check_order() {
            Ok(()) => writeln!(
                out,
                "\nordered as expected: unattached USDT < USDT hit ~ emulated uprobe < uretprobe, single-stepped uprobe"
            ),
            Err(e) => writeln!(out, "\nNOT ordered as expected: {e}"),
        };
        out
    }
}

fn fmt_ns(ns: f64) -> String {
    if ns.abs() < 10.0 {
        format!("{ns:.2}")
    } else if ns.abs() < 100.0 {
        format!("{ns:.1}")
    } else {
        format!("{ns:.0}")
    }
}

/// The kernel release and CPU model calibrations are keyed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub kernel_release: String,
    pub cpu_model: String,
    pub cpus: usize,
}

impl Machine {
    pub fn current() -> Self {
        let kernel_release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (key, value) = l.split_once(':')?;
                (key.trim() == "model name").then(|| value.trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let cpus = thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            kernel_release,
            cpu_model,
            cpus,
        }
    }

    /// `calibration-<release>-<cpu hash>.json`.
    pub fn cache_file_name(&self) -> String {
        // FNV-1a: stable across builds, unlike std's hasher.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.cpu_model.bytes() {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        let release: String = self
            .kernel_release
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("calibration-{release}-{:08x}.json", hash as u32)
    }
}

/// `$XDG_CACHE_HOME/probetop` or `$HOME/.cache/probetop`.
pub fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("probetop"))
}

/// Where this machine's calibration is cached.
pub fn cache_path() -> Option<PathBuf> {
    Some(cache_dir()?.join(Machine::current().cache_file_name()))
}

/// This machine's cached calibration, if there is one that parses and matches.
pub fn load_cached() -> Option<Calibration> {
    let path = cache_path()?;
    let text = std::fs::read_to_string(path).ok()?;
    let calibration: Calibration = serde_json::from_str(&text).ok()?;
    calibration.matches_this_machine().then_some(calibration)
}

/// Writes `calibration` to the cache; returns the path.
pub fn save(calibration: &Calibration) -> Result<PathBuf, CalibrateError> {
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
    std::fs::write(&partial, text).map_err(save_err)?;
    std::fs::rename(&partial, &path).map_err(save_err)?;
    Ok(path)
}

/// Runs the calibration; `progress` gets one line per phase.
pub fn run(
    options: CalibrateOptions,
    mut progress: impl FnMut(&str),
) -> Result<Calibration, CalibrateError> {
    let machine = Machine::current();
    let offsets = Offsets::of_self()?;
    let mut child = Workload::spawn()?;
    let mut rng = XorShift::new(0x70b3_70b3 ^ u64::from(child.pid()));

    progress("phase 1: the kernel's machinery (empty program) and probetop's handler");
    let phase_one = phase_one(&mut child, &offsets, &options, &mut rng)?;
    let (dispatch, dispatch_error) = if options.dispatch && options.hot {
        progress("phase 2: dispatch measurement (fentry/fexit) and what it does not see");
        match phase_two(&mut child, &offsets, &options, &mut rng) {
            Ok(rows) => (rows, None),
            Err(PhaseTwoError::Refused(e)) => (Vec::new(), Some(e)),
            Err(PhaseTwoError::Other(e)) => return Err(e),
        }
    } else {
        (Vec::new(), Some("not requested".to_string()))
    };
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
    Ok(Calibration {
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
    })
}

/// File offsets of the probed instructions in this binary (the child is the same file).
struct Offsets {
    by_func: Vec<(Func, u64)>,
    exe: FileId,
}

impl Offsets {
    fn of_self() -> Result<Self, CalibrateError> {
        let exe = FileId::of(Path::new("/proc/self/exe"))
            .map_err(|e| CalibrateError::Locate(format!("/proc/self/exe: {e}")))?;
        let maps = read_maps(std::process::id())
            .map_err(|e| CalibrateError::Locate(format!("/proc/self/maps: {e}")))?;
        let mut by_func = Vec::new();
        for func in Func::ALL {
            let addr = func.probed_address();
            let entry = maps
                .iter()
                .find(|m| m.start <= addr && addr < m.end && exe.matches(m))
                .ok_or_else(|| {
                    CalibrateError::Locate(format!(
                        "{func:?} at {addr:#x} is in no mapping of the executable"
                    ))
                })?;
            by_func.push((func, addr - entry.start + entry.offset));
        }
        Ok(Self { by_func, exe })
    }

    fn of(&self, func: Func) -> u64 {
        self.by_func
            .iter()
            .find(|(f, _)| *f == func)
            .map_or(0, |(_, off)| *off)
    }

    /// Runtime address of `func`'s probed instruction in process `pid`.
    fn vaddr_in(&self, pid: u32, func: Func) -> Option<u64> {
        let offset = self.of(func);
        read_maps(pid).ok()?.iter().find_map(|m| {
            let len = m.end - m.start;
            (self.exe.matches(m) && m.offset <= offset && offset < m.offset + len)
                .then(|| m.start + (offset - m.offset))
        })
    }
}

/// The child process running the workload; killed when dropped.
struct Workload {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<String>,
}

/// Longest a run may take before the child is declared stuck.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

impl Workload {
    fn spawn() -> Result<Self, CalibrateError> {
        let mut child = Command::new("/proc/self/exe")
            .arg(WORKLOAD_SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(CalibrateError::Spawn)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(CalibrateError::Child("no pipes to the child".into()));
        };
        let (tx, replies) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut workload = Self {
            child,
            stdin,
            replies,
        };
        match workload.replies.recv_timeout(RUN_TIMEOUT) {
            Ok(line) if line == "ready" => Ok(workload),
            Ok(line) => Err(CalibrateError::Child(format!(
                "said {line:?} instead of ready"
            ))),
            Err(_) => {
                let status = workload.child.try_wait().ok().flatten();
                Err(CalibrateError::Child(format!(
                    "did not start ({})",
                    status.map_or_else(|| "no answer".to_string(), |s| s.to_string())
                )))
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `command` to the child and parses its reply, `PREFIX V1 V2 ...`, as
    /// `count` numbers.
    fn ask(
        &mut self,
        command: &str,
        prefix: &str,
        count: usize,
    ) -> Result<Vec<f64>, CalibrateError> {
        writeln!(self.stdin, "{command}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| CalibrateError::Child(format!("cannot send a command: {e}")))?;
        let line = self
            .replies
            .recv_timeout(RUN_TIMEOUT)
            .map_err(|_| CalibrateError::Child("stopped answering (did it die?)".into()))?;
        line.strip_prefix(prefix)
            .and_then(|rest| {
                rest.trim_start()
                    .split(' ')
                    .map(|v| v.parse().ok())
                    .collect()
            })
            .filter(|values: &Vec<f64>| values.len() == count)
            .ok_or_else(|| CalibrateError::Child(format!("replied {line:?}")))
    }

    /// Runs `calls` calls of `func` in the child; returns ns per call.
    fn run(&mut self, func: Func, calls: u64) -> Result<f64, CalibrateError> {
        let values = self.ask(&format!("run {} {calls} {WARMUP}", func.name()), "ns", 1)?;
        Ok(values[0])
    }

    /// Runs `iters` iterations of the cold loop calling `func`.
    fn run_cold(&mut self, func: Func, cold: &ColdOptions) -> Result<ColdRun, CalibrateError> {
        let command = format!(
            "cold {} {} {COLD_WARMUP} {} {}",
            func.name(),
            cold.iters,
            cold.data_bytes,
            cold.code_bytes
        );
        let values = self.ask(&command, "cold", 3)?;
        Ok(ColdRun {
            cpu_ns_per_iter: values[0],
            iter_ns_median: values[1],
            call_ns_median: values[2],
        })
    }

    /// [`Workload::run_pair`] in the cold loop: (probed, unprobed).
    fn run_cold_pair(
        &mut self,
        func: Func,
        cold: &ColdOptions,
        probed_first: bool,
    ) -> Result<(ColdRun, ColdRun), CalibrateError> {
        if probed_first {
            let probed = self.run_cold(func, cold)?;
            Ok((probed, self.run_cold(func.twin(), cold)?))
        } else {
            let unprobed = self.run_cold(func.twin(), cold)?;
            Ok((self.run_cold(func, cold)?, unprobed))
        }
    }

    /// Runs probed `func` and its unprobed twin back to back, the twin first unless
    /// `probed_first` (alternated so drift does not bias the difference); returns
    /// (probed, unprobed) ns per call.
    fn run_pair(
        &mut self,
        func: Func,
        calls: u64,
        probed_first: bool,
    ) -> Result<(f64, f64), CalibrateError> {
        if probed_first {
            let probed = self.run(func, calls)?;
            Ok((probed, self.run(func.twin(), calls)?))
        } else {
            let unprobed = self.run(func.twin(), calls)?;
            Ok((self.run(func, calls)?, unprobed))
        }
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads hit records off the ring buffer, keeping count and handler-time totals.
struct RingReader {
    ring: RingBuf<MapData>,
    records: u64,
    handler_sum_ns: u64,
}

impl RingReader {
    fn drain(&mut self) {
        while let Some(item) = self.ring.next() {
            // A batch of staged hits counts as each of its hits.
            let (records, handler_sum_ns) = (&mut self.records, &mut self.handler_sum_ns);
            let parsed = crate::stream::Record::parse_each(&item, |record| {
                *records += 1;
                *handler_sum_ns += record.hit().handler_ns;
            });
            if !parsed {
                self.records += 1;
            }
        }
    }
}

/// Drains the ring in a background thread while the child runs, as the live collector
/// does, so the handler's cost includes a consumer working beside it.
struct Drainer {
    /// Fires the flush probe so the last staged hits reach the ring.
    flush: crate::attach::StagedFlush,
    stop: Arc<AtomicBool>,
    records: Arc<AtomicU64>,
    handler_sum_ns: Arc<AtomicU64>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drainer {
    fn start(ring: RingBuf<MapData>, flush: crate::attach::StagedFlush) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let records = Arc::new(AtomicU64::new(0));
        let handler_sum_ns = Arc::new(AtomicU64::new(0));
        let (s, r, h) = (stop.clone(), records.clone(), handler_sum_ns.clone());
        let thread = thread::spawn(move || {
            let mut reader = RingReader {
                ring,
                records: 0,
                handler_sum_ns: 0,
            };
            while !s.load(Ordering::Relaxed) {
                reader.drain();
                r.store(reader.records, Ordering::Release);
                h.store(reader.handler_sum_ns, Ordering::Release);
                // As the live collector: woken by the handler once 64 KiB are queued,
                // else every 25 ms. A consumer that is not woken leaves the queue above
                // the threshold, and then every hit forces a wakeup (~800 ns more).
                crate::sys::process::wait_readable(reader.ring.as_fd(), 25);
            }
        });
        Self {
            flush,
            stop,
            records,
            handler_sum_ns,
            thread: Some(thread),
        }
    }

    fn totals(&self) -> (u64, u64) {
        (
            self.records.load(Ordering::Acquire),
            self.handler_sum_ns.load(Ordering::Acquire),
        )
    }

    /// Waits until at least `records` were read, at most a second.
    fn wait_for(&self, records: u64) -> (u64, u64) {
        let deadline = Instant::now() + Duration::from_secs(1);
        self.flush.flush_now();
        loop {
            let totals = self.totals();
            if totals.0 >= records || Instant::now() >= deadline {
                return totals;
            }
            thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Drainer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
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
    mode: u32,
    pid: u32,
) -> AttachRequest<'a> {
    AttachRequest {
        probe_id,
        kind,
        path,
        file_offset,
        semaphore_offset: None,
        config: ProbeConfig {
            mode,
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
    gap: Option<super::gap::GapCurve>,
}

fn phase_one(
    child: &mut Workload,
    offsets: &Offsets,
    options: &CalibrateOptions,
    rng: &mut XorShift,
) -> Result<PhaseOne, CalibrateError> {
    let pid = child.pid();
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
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
            Case::HandlerKernel => mode::KERNEL_HISTOGRAM,
            _ => mode::RING,
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
        out.handler_program = Some(handler_program_time(child, &mut attachment, options, rng)?);
    }
    if options.gap_reps > 0 {
        out.gap = Some(gap_phase::measure(
            child,
            &mut attachment,
            &drainer,
            options.gap_reps,
            probe_common::DEFAULT_TIME_EVERY,
            rng,
        )?);
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
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
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
            mode::RING,
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

    fn summary(median: f64) -> Summary {
        Summary {
            n: 3,
            median,
            q1: median,
            q3: median,
            ci_low: median,
            ci_high: median,
        }
    }

    fn calibration(medians: &[(Case, f64)]) -> Calibration {
        Calibration {
            format: FORMAT,
            kernel_release: "6.18".into(),
            cpu_model: "test".into(),
            cpus: 2,
            created_unix_s: 0,
            reps: 3,
            calls: 1,
            optimizes_nop5: true,
            rows: medians
                .iter()
                .map(|(case, m)| Row {
                    case: *case,
                    label: case.label().into(),
                    ns: summary(*m),
                    samples: vec![*m; 3],
                })
                .collect(),
            handler_ring_ns: None,
            handler_kernel_ns: None,
            handler_method: HandlerMethod::default(),
            handler_cpu_rows: Vec::new(),
            handler_program_error: None,
            dispatch: Vec::new(),
            dispatch_error: None,
            cold: None,
            gap: None,
        }
    }

    #[test]
    fn order_check() {
        let good = [
            (Case::UsdtUnattached, 2.0),
            (Case::UsdtHit, 500.0),
            (Case::UprobeEmulated, 700.0),
            (Case::UprobeSingleStepped, 9000.0),
            (Case::UprobeOptimized, 400.0),
            (Case::Uretprobe, 1200.0),
            (Case::HandlerRing, 300.0),
            (Case::HandlerKernel, 100.0),
            (Case::HandlerKernelUntimed, 20.0),
            (Case::UsdtNop5Hit, 300.0),
        ];
        assert_eq!(calibration(&good).check_order(), Ok(()));
        let mut bad = good;
        bad[3].1 = 600.0;
        assert!(calibration(&bad).check_order().is_err());
        // A nop and a push after the same trap: either may come out dearer.
        let mut swapped = good;
        (swapped[1].1, swapped[2].1) = (700.0, 650.0);
        assert_eq!(calibration(&swapped).check_order(), Ok(()));
        let mut apart = good;
        apart[1].1 = 300.0;
        assert!(calibration(&apart).check_order().is_err());
        let mut negative = good;
        negative[5].1 = -1.0;
        assert!(calibration(&negative).check_order().is_err());
        assert!(calibration(&good[..3]).check_order().is_err());
        let text = calibration(&good).render_text();
        assert!(text.contains("ordered as expected"), "{text}");
    }

    #[test]
    fn cache_file_name_is_stable_and_safe() {
        let m = Machine {
            kernel_release: "6.18.44-fc/v657".into(),
            cpu_model: "Intel(R) Xeon(R)".into(),
            cpus: 2,
        };
        let name = m.cache_file_name();
        assert!(name.starts_with("calibration-6.18.44-fc_v657-"), "{name}");
        assert!(name.ends_with(".json"));
        assert_eq!(name, m.cache_file_name());
    }

    #[test]
    fn histogram_mean_of_new_counts() {
        let mut before = vec![0u64; khist::BUCKETS as usize];
        let mut after = before.clone();
        after[10] = 4;
        before[10] = 2;
        assert_eq!(histogram_mean(&after, &before), Some(10.0));
        assert_eq!(histogram_mean(&before, &before), None);
    }

    #[test]
    fn round_trips_as_json() {
        let c = calibration(&[(Case::UsdtHit, 5.0)]);
        let text = serde_json::to_string(&c).expect("encode");
        let back: Calibration = serde_json::from_str(&text).expect("decode");
        assert_eq!(back, c);
    }
}
