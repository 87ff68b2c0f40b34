//! The calibration's results: what `probetop calibrate` (the top-level `calibrate`
//! module, which runs it) measured per cost class on this machine, the cache it is
//! kept in per kernel release and CPU model, and reading it back for estimates.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::stats::Summary;

/// Version of the cache file's layout (3: the `nop; nop5` USDT row; 4: the work curve's
/// walks beyond the cold loop, without which a server's slowest hits are priced low).
pub(crate) const FORMAT: u32 = 4;

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
pub(crate) const COLD_DATA_CAP: u64 = 32 << 20;

/// The code chain's default size: a quarter of a typical L2, four times a typical L1i.
pub(crate) const COLD_CODE_BYTES: u64 = 512 << 10;

/// The data walk's size when the L2's is not known.
pub(crate) const COLD_DATA_FALLBACK: u64 = 2 << 20;

impl ColdOptions {
    /// The default footprint here: a data walk the size of this CPU's L2 and
    /// [`COLD_CODE_BYTES`] of code. That is roughly what a server thread touches
    /// between two hits of a request-path probe: mariadbd runs ~15 us of its own CPU
    /// per hit there, and on this machine the L2-sized loop (61 us an iteration) priced
    /// a hit at 1.9-2.6 us against a true 2-5 us, where the whole last-level cache and
    /// 4 MiB of code (an upper bound, `--cold-data-mib 32 --cold-code-mib 4`) priced it
    /// at 6-9 us (docs/cost.md, the size curve). One server: other footprints may fit
    /// others better, hence the flags.
    pub(crate) fn for_this_machine(iters: u64) -> Self {
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
pub(crate) fn last_level_cache_bytes() -> Option<u64> {
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

/// How far apart two rows of one mechanism may lie: a USDT hit (a nop emulated after
/// the trap) and an emulated uprobe (a push) differ by ~60 ns of ~850, less than a
/// quick calibration's noise, so they are held to one class, not to an order.
pub(crate) const SAME_CLASS: f64 = 0.35;

/// One measured case of phase one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    /// A loop calling a function that holds an unattached USDT site: ns per call.
    UsdtUnattached,
    /// A USDT site (a nop) with a probe running an empty program.
    UsdtHit,
    /// A `nop; nop5` USDT site (libbpf/usdt's usdt.h, Dec 2025 to May 2026) probed on
    /// the nop its note names, empty program: the emulated nop, as [`Case::UsdtHit`]
    /// (the nop5 is never probed: `insn::classes::CostClass::Unsafe`). Caches from
    /// before 2026-11-27 measured it on the nop5; their rows' labels say so.
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
    pub(crate) const ALL: [Case; 10] = [
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
    pub(crate) const COLD: [Case; 4] = [
        Case::UprobeEmulatedCold,
        Case::UretprobeCold,
        Case::HandlerRingCold,
        Case::HandlerKernelCold,
    ];

    /// The rows of what probetop's handler adds on top of the empty program.
    pub(crate) const HANDLER: [Case; 3] = [
        Case::HandlerRing,
        Case::HandlerKernel,
        Case::HandlerKernelUntimed,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Case::UsdtUnattached => "USDT site, not attached (ns per loop call)",
            Case::UsdtHit => "USDT hit (nop, empty program)",
            Case::UsdtNop5Hit => "USDT hit (nop; nop5 form, on its nop, empty)",
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
    pub(crate) fn hot(self) -> Case {
        match self {
            Case::UprobeEmulatedCold => Case::UprobeEmulated,
            Case::UretprobeCold => Case::Uretprobe,
            Case::HandlerRingCold => Case::HandlerRing,
            Case::HandlerKernelCold => Case::HandlerKernel,
            hot => hot,
        }
    }

    pub(crate) fn is_cold(self) -> bool {
        self.hot() != self
    }

    /// Probe id in phase one's attachment.
    pub(crate) fn probe_id(self) -> u32 {
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
    pub(crate) const ALL: [DispatchCase; 5] = [
        DispatchCase::Usdt,
        DispatchCase::Emulated,
        DispatchCase::SingleStepped,
        DispatchCase::Optimized,
        DispatchCase::Uretprobe,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            DispatchCase::Usdt => "USDT hit (nop)",
            DispatchCase::Emulated => "uprobe, emulated (push %rbp)",
            DispatchCase::SingleStepped => "uprobe, single-stepped",
            DispatchCase::Optimized => "uprobe, 5-byte nop",
            DispatchCase::Uretprobe => "uretprobe (entry + return)",
        }
    }

    pub(crate) fn probe_id(self) -> u32 {
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
    pub(crate) fn label(self) -> &'static str {
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
    /// With `HandlerMethod::ProgramTime`, the handler rows as the thread's CPU time
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
    /// A hit after a range of sleeps between calls (`calibrate::gap`; older caches: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap: Option<crate::calibrate::gap::GapCurve>,
    /// A hit after a range of footprints walked between calls (`calibrate::work`; older
    /// caches: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<crate::calibrate::work::WorkCurve>,
    /// A hit of a tracefs uprobe event with no arguments, enabled (no BPF: the trap and
    /// ftrace's record), on a `push %rbp` entry (`calibrate::tracefs_phase`; older
    /// caches: none, and other tools' tracefs events go unpriced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracefs_event_ns: Option<Summary>,
    /// Why it (or its other shapes, [`Self::tracefs_shapes`]) was not measured, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracefs_event_error: Option<String>,
    /// The same event with fetched arguments, and enabled in two instances
    /// (`calibrate::tracefs_phase`; older caches: none, and other tools' events are
    /// priced as bare events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracefs_shapes: Option<TracefsShapes>,
}

/// A hit of the calibration's tracefs event in other shapes, each a whole cost per hit
/// on the same `push %rbp` entry as [`Calibration::tracefs_event_ns`]: what each
/// kind of fetched argument and each further trace instance add is the difference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracefsShapes {
    /// Arguments of the one kind in each event with arguments.
    pub args: u32,
    /// `args` register values (`a0=%di:u64 ...`), one instance.
    pub registers_ns: Summary,
    /// `args` 8-byte reads of the process's stack (`a0=+0(%sp):u64 ...`), one instance.
    pub memory_ns: Summary,
    /// `args` strings read from the stack (`a0=+0(%sp):string ...`: the return
    /// address's bytes up to its first zero, 6 bytes or fewer), one instance.
    pub strings_ns: Summary,
    /// No arguments, enabled in two instances.
    pub two_instances_ns: Summary,
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
    pub(crate) fn row(&self, case: Case) -> Option<&Summary> {
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
    pub(crate) fn row(&self, case: Case) -> Option<&Summary> {
        if case.is_cold() {
            return self.cold.as_ref()?.row(case);
        }
        self.rows.iter().find(|r| r.case == case).map(|r| &r.ns)
    }

    /// The phase-two row of one case.
    pub(crate) fn dispatch_row(&self, case: DispatchCase) -> Option<&DispatchRow> {
        self.dispatch.iter().find(|r| r.case == case)
    }

    /// Whether the medians are ordered as the mechanisms say where they differ by far
    /// more than the noise: an unattached site < a USDT hit, an emulated uprobe < a
    /// single-stepped one < ... and a uretprobe > its emulated entry; a USDT hit (an
    /// emulated nop) and an emulated uprobe (a push) within [`SAME_CLASS`] of each
    /// other; every kernel-path cost positive. Err names the first violation.
    pub(crate) fn check_order(&self) -> Result<(), String> {
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
    pub(crate) fn matches_this_machine(&self) -> bool {
        let machine = Machine::current();
        self.format == FORMAT
            && self.kernel_release == machine.kernel_release
            && self.cpu_model == machine.cpu_model
    }

    /// Renders the table people read.
    pub(crate) fn render_text(&self) -> String {
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
            // A cache's older row on the nop5 (its label says so) is optimized too.
            let on_nop5 = row.case == Case::UprobeOptimized
                || (row.case == Case::UsdtNop5Hit && row.label.contains("on the nop5"));
            if on_nop5 && !self.optimizes_nop5 {
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
            gap.render_text(&mut out);
        }
        if let Some(work) = &self.work {
            work.render_text(&mut out);
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

/// The CPU model of a machine whose model cannot be read.
const UNKNOWN_CPU: &str = "unknown CPU";

/// The kernel release and CPU model calibrations are keyed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub kernel_release: String,
    pub cpu_model: String,
    pub cpus: usize,
}

impl Machine {
    pub fn current() -> Self {
        let kernel_release =
            crate::sys::procfs::kernel_release().unwrap_or_else(|_| "unknown".into());
        // /proc/cpuinfo's name, else the CPU's own (the same text on x86): a /proc
        // mounted `subset=pid` has no cpuinfo.
        let cpu_model = crate::sys::procfs::cpu_model()
            .or_else(crate::sys::cpu::brand_string)
            .unwrap_or_else(|| UNKNOWN_CPU.into());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
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
pub(crate) fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("probetop"))
}

/// A calibration file's size at most: a full calibration is tens of KiB (its samples
/// included), so 16 MiB is far past any real one and quick to refuse.
const MAX_CACHE_BYTES: u64 = 16 << 20;

/// A calibration cache that is there but cannot be read as one: a FIFO, a device, a
/// link, a huge file. The run goes on without it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CacheError {
    #[error("the calibration cache {}: {source}; going on without it (remove it and run `probetop calibrate`)", path.display())]
    Unreadable {
        path: PathBuf,
        source: crate::sys::files::BoundedReadError,
    },
    /// Calibrations are keyed by the CPU model, and this machine's cannot be read.
    #[error(
        "cannot read this machine's CPU model (neither /proc/cpuinfo nor CPUID names it): no calibration can be matched to it"
    )]
    UnknownCpu,
}

/// This machine's cached calibration, if there is one that parses and matches; an error
/// if the file there is not one probetop wrote (never waited on, never read past
/// [`MAX_CACHE_BYTES`]).
pub(crate) fn load_cached() -> Result<Option<Calibration>, CacheError> {
    use crate::sys::files::{Accept, BoundedReadError, read_bounded};
    let machine = Machine::current();
    if machine.cpu_model == UNKNOWN_CPU {
        return Err(CacheError::UnknownCpu);
    }
    let Some(path) = cache_dir().map(|dir| dir.join(machine.cache_file_name())) else {
        return Ok(None);
    };
    // probetop writes the cache by a rename: never a pipe, never a link.
    let accept = Accept {
        pipes: false,
        links: false,
    };
    let bytes = match read_bounded(&path, MAX_CACHE_BYTES, accept) {
        Ok(bytes) => bytes,
        Err(BoundedReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(source) => return Err(CacheError::Unreadable { path, source }),
    };
    // An older format, or one cut short: made again by the next calibrate.
    let Ok(calibration) = serde_json::from_slice::<Calibration>(&bytes) else {
        return Ok(None);
    };
    Ok(calibration.matches_this_machine().then_some(calibration))
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
            work: None,
            tracefs_event_ns: None,
            tracefs_event_error: None,
            tracefs_shapes: None,
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
    fn round_trips_as_json() {
        let c = calibration(&[(Case::UsdtHit, 5.0)]);
        let text = serde_json::to_string(&c).expect("encode");
        let back: Calibration = serde_json::from_str(&text).expect("decode");
        assert_eq!(back, c);
    }
}
