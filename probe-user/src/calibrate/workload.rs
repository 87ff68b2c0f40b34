//! The calibration workload: functions in probetop's own binary whose first
//! instruction is fixed in assembly, so each probes one cost class, plus a USDT site
//! with its `.note.stapsdt` note. `probetop calibrate` runs them in a child process
//! (this binary again, hidden subcommand `__calibrate-workload`) that measures its own
//! CPU time per call while the parent keeps probes attached to some functions; each
//! probed function has an unprobed twin with the same code for the baseline.

use std::{
    io::{self, BufRead as _, Write as _},
    time::Duration,
};

use crate::sys::mem::{Executable, Mapping};

/// One workload function in its own 64-byte line of `.text` (so no probed
/// instruction crosses a page), taking and returning a u64 so the loop cannot drop
/// the calls.
macro_rules! workload_fn {
    ($name:literal, $($line:literal),+ $(,)?) => {
        std::arch::global_asm!(
            concat!(
                ".pushsection .text.probetop_calibrate,\"ax\",@progbits\n",
                ".p2align 6\n",
                ".globl ", $name, "\n",
                ".type ", $name, ",@function\n",
                $name, ":\n",
                $($line, "\n",)+
                ".size ", $name, ", .-", $name, "\n",
                ".popsection\n",
            ),
            options(att_syntax)
        );
    };
}

// push %rbp: emulated. Three probed copies (empty program, probetop's ring handler,
// probetop's in-kernel handler, all attached at once) and an unprobed twin.
workload_fn!(
    "probetop_cal_emulated",
    "push %rbp",
    "mov %rsp, %rbp",
    "mov %rdi, %rax",
    "pop %rbp",
    "ret"
);
workload_fn!(
    "probetop_cal_ring",
    "push %rbp",
    "mov %rsp, %rbp",
    "mov %rdi, %rax",
    "pop %rbp",
    "ret"
);
workload_fn!(
    "probetop_cal_kernel",
    "push %rbp",
    "mov %rsp, %rbp",
    "mov %rdi, %rax",
    "pop %rbp",
    "ret"
);
// The same again, for a tracefs uprobe event (ftrace, no BPF): its own function, as
// an event in `uprobe_events` traps in every process mapping the file, so another
// calibration running this binary at once never meets it on the functions above.
workload_fn!(
    "probetop_cal_tracefs",
    "push %rbp",
    "mov %rsp, %rbp",
    "mov %rdi, %rax",
    "pop %rbp",
    "ret"
);
workload_fn!(
    "probetop_cal_emulated_twin",
    "push %rbp",
    "mov %rsp, %rbp",
    "mov %rdi, %rax",
    "pop %rbp",
    "ret"
);
// A %rip-relative load: single-stepped out of line.
workload_fn!(
    "probetop_cal_sstep",
    "mov probetop_cal_data(%rip), %rax",
    "add %rdi, %rax",
    "ret"
);
workload_fn!(
    "probetop_cal_sstep_twin",
    "mov probetop_cal_data(%rip), %rax",
    "add %rdi, %rax",
    "ret"
);
// nopl 0x0(%rax,%rax,1): optimized on 6.18+, emulated before.
workload_fn!(
    "probetop_cal_nop5",
    ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "mov %rdi, %rax",
    "ret"
);
workload_fn!(
    "probetop_cal_nop5_twin",
    ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "mov %rdi, %rax",
    "ret"
);
// The uretprobe's function: entry `push %rbp` (emulated), then the return.
workload_fn!(
    "probetop_cal_ret",
    "push %rbp",
    "mov %rsp, %rbp",
    "mov %rdi, %rax",
    "pop %rbp",
    "ret"
);
// A USDT site as sys/sdt.h emits it, a one-byte nop, described by the note below.
workload_fn!(
    "probetop_cal_usdt",
    "push %rbp",
    "mov %rsp, %rbp",
    ".globl probetop_cal_usdt_site",
    "probetop_cal_usdt_site:",
    "nop",
    "mov %rdi, %rax",
    "pop %rbp",
    "ret",
);
// A USDT site as libbpf/usdt's usdt.h emitted it from Dec 2025 to May 2026: `nop; nop5`,
// the note on the nop. probetop probes the nop, as the note says: on the nop5 a kernel
// that optimizes it (6.18+) would write a call's return address below %rsp, over a
// leaf function's red zone (fixtures/c/redzone.c), so this row prices the emulated nop.
workload_fn!(
    "probetop_cal_usdt_nop5",
    "push %rbp",
    "mov %rsp, %rbp",
    ".globl probetop_cal_usdt_nop5_site",
    "probetop_cal_usdt_nop5_site:",
    "nop",
    ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "mov %rdi, %rax",
    "pop %rbp",
    "ret",
);
workload_fn!(
    "probetop_cal_usdt_nop5_twin",
    "push %rbp",
    "mov %rsp, %rbp",
    "nop",
    ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "mov %rdi, %rax",
    "pop %rbp",
    "ret"
);
workload_fn!(
    "probetop_cal_usdt_twin",
    "push %rbp",
    "mov %rsp, %rbp",
    "nop",
    "mov %rdi, %rax",
    "pop %rbp",
    "ret"
);

std::arch::global_asm!(
    ".pushsection .data.probetop_calibrate,\"aw\",@progbits",
    ".p2align 3",
    "probetop_cal_data:",
    ".quad 0",
    ".popsection",
    // The note: provider `probetop`, name `calibrate`, one argument in %rdi.
    ".pushsection .note.stapsdt,\"\",@note",
    ".balign 4",
    ".4byte probetop_cal_note_name_end - probetop_cal_note_name",
    ".4byte probetop_cal_note_desc_end - probetop_cal_note_desc",
    ".4byte 3",
    "probetop_cal_note_name:",
    ".asciz \"stapsdt\"",
    "probetop_cal_note_name_end:",
    ".balign 4",
    "probetop_cal_note_desc:",
    ".8byte probetop_cal_usdt_site",
    ".8byte _.stapsdt.base",
    ".8byte 0",
    ".asciz \"probetop\"",
    ".asciz \"calibrate\"",
    ".asciz \"-8@%rdi\"",
    "probetop_cal_note_desc_end:",
    ".balign 4",
    // The `nop; nop5` site's note: `probetop:calibrate_nop5`, the same argument.
    ".4byte probetop_cal_note5_name_end - probetop_cal_note5_name",
    ".4byte probetop_cal_note5_desc_end - probetop_cal_note5_desc",
    ".4byte 3",
    "probetop_cal_note5_name:",
    ".asciz \"stapsdt\"",
    "probetop_cal_note5_name_end:",
    ".balign 4",
    "probetop_cal_note5_desc:",
    ".8byte probetop_cal_usdt_nop5_site",
    ".8byte _.stapsdt.base",
    ".8byte 0",
    ".asciz \"probetop\"",
    ".asciz \"calibrate_nop5\"",
    ".asciz \"-8@%rdi\"",
    "probetop_cal_note5_desc_end:",
    ".balign 4",
    ".popsection",
    ".ifndef _.stapsdt.base",
    ".pushsection .stapsdt.base,\"aG\",@progbits,.stapsdt.base,comdat",
    ".weak _.stapsdt.base",
    ".hidden _.stapsdt.base",
    "_.stapsdt.base:",
    ".space 1",
    ".size _.stapsdt.base, 1",
    ".popsection",
    ".endif",
    options(att_syntax)
);

unsafe extern "C" {
    fn probetop_cal_emulated(x: u64) -> u64;
    fn probetop_cal_ring(x: u64) -> u64;
    fn probetop_cal_kernel(x: u64) -> u64;
    fn probetop_cal_tracefs(x: u64) -> u64;
    fn probetop_cal_emulated_twin(x: u64) -> u64;
    fn probetop_cal_sstep(x: u64) -> u64;
    fn probetop_cal_sstep_twin(x: u64) -> u64;
    fn probetop_cal_nop5(x: u64) -> u64;
    fn probetop_cal_nop5_twin(x: u64) -> u64;
    fn probetop_cal_ret(x: u64) -> u64;
    fn probetop_cal_usdt(x: u64) -> u64;
    fn probetop_cal_usdt_twin(x: u64) -> u64;
    fn probetop_cal_usdt_nop5(x: u64) -> u64;
    fn probetop_cal_usdt_nop5_twin(x: u64) -> u64;
    static probetop_cal_usdt_site: u8;
    static probetop_cal_usdt_nop5_site: u8;
}

/// One workload function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Func {
    /// Starts with `push %rbp`.
    Emulated,
    /// The same, for probetop's ring buffer handler.
    EmulatedRing,
    /// The same, for probetop's in-kernel histogram handler.
    EmulatedKernel,
    /// Starts with a %rip-relative `mov`.
    SingleStepped,
    /// Starts with a 5-byte nop.
    Nop5,
    /// Starts with `push %rbp`; probed at its return.
    Ret,
    /// Holds a USDT site (a nop) after its prologue.
    Usdt,
    /// Holds a `nop; nop5` USDT site after its prologue; probed on the nop its note names.
    UsdtNop5,
    /// The same, for a tracefs uprobe event (`calibrate::tracefs_phase`).
    Tracefs,
    /// Unprobed twins: the same code, for the baseline of each run.
    EmulatedTwin,
    SingleSteppedTwin,
    Nop5Twin,
    UsdtTwin,
    UsdtNop5Twin,
}

impl Func {
    pub(crate) const ALL: [Func; 14] = [
        Func::Emulated,
        Func::EmulatedRing,
        Func::EmulatedKernel,
        Func::SingleStepped,
        Func::Nop5,
        Func::Ret,
        Func::Usdt,
        Func::UsdtNop5,
        Func::Tracefs,
        Func::EmulatedTwin,
        Func::SingleSteppedTwin,
        Func::Nop5Twin,
        Func::UsdtTwin,
        Func::UsdtNop5Twin,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Func::Emulated => "emulated",
            Func::EmulatedRing => "ring",
            Func::EmulatedKernel => "kernel",
            Func::SingleStepped => "sstep",
            Func::Nop5 => "nop5",
            Func::Ret => "ret",
            Func::Usdt => "usdt",
            Func::UsdtNop5 => "usdt-nop5",
            Func::Tracefs => "tracefs",
            Func::EmulatedTwin => "emulated-twin",
            Func::SingleSteppedTwin => "sstep-twin",
            Func::Nop5Twin => "nop5-twin",
            Func::UsdtTwin => "usdt-twin",
            Func::UsdtNop5Twin => "usdt-nop5-twin",
        }
    }

    /// The kind of probe that measures it: its return for [`Func::Ret`], the USDT site
    /// for [`Func::Usdt`], its entry otherwise.
    pub(crate) fn probe_kind(self) -> crate::spec::ProbeKind {
        use crate::spec::ProbeKind;
        match self {
            Func::Ret => ProbeKind::Uretprobe,
            Func::Usdt | Func::UsdtNop5 => ProbeKind::Usdt,
            _ => ProbeKind::Uprobe,
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The unprobed function with the same code.
    pub(crate) fn twin(self) -> Func {
        match self {
            Func::Emulated
            | Func::EmulatedRing
            | Func::EmulatedKernel
            | Func::Tracefs
            | Func::Ret => Func::EmulatedTwin,
            Func::SingleStepped => Func::SingleSteppedTwin,
            Func::Nop5 => Func::Nop5Twin,
            Func::Usdt => Func::UsdtTwin,
            Func::UsdtNop5 => Func::UsdtNop5Twin,
            twin => twin,
        }
    }

    fn pointer(self) -> unsafe extern "C" fn(u64) -> u64 {
        match self {
            Func::Emulated => probetop_cal_emulated,
            Func::EmulatedRing => probetop_cal_ring,
            Func::EmulatedKernel => probetop_cal_kernel,
            Func::SingleStepped => probetop_cal_sstep,
            Func::Nop5 => probetop_cal_nop5,
            Func::Ret => probetop_cal_ret,
            Func::Usdt => probetop_cal_usdt,
            Func::Tracefs => probetop_cal_tracefs,
            Func::EmulatedTwin => probetop_cal_emulated_twin,
            Func::SingleSteppedTwin => probetop_cal_sstep_twin,
            Func::Nop5Twin => probetop_cal_nop5_twin,
            Func::UsdtTwin => probetop_cal_usdt_twin,
            Func::UsdtNop5 => probetop_cal_usdt_nop5,
            Func::UsdtNop5Twin => probetop_cal_usdt_nop5_twin,
        }
    }

    /// Runtime address of the instruction a probe on this function sits on: the entry,
    /// for [`Func::Usdt`] and [`Func::UsdtNop5`] the USDT site their notes name.
    pub(crate) fn probed_address(self) -> u64 {
        match self {
            // Only the address of the extern static is taken, never its value.
            Func::Usdt => &raw const probetop_cal_usdt_site as u64,
            Func::UsdtNop5 => &raw const probetop_cal_usdt_nop5_site as u64,
            f => f.pointer() as usize as u64,
        }
    }
}

/// CPU time of the calling thread, ns.
pub(crate) fn thread_cpu_ns() -> u64 {
    crate::sys::clock::thread_cpu_ns()
}

/// Calls `func` `warmup` times, then `calls` times under the CPU clock; returns CPU ns
/// per measured call (the kernel's uprobe handling on this thread included).
pub(crate) fn run(func: Func, calls: u64, warmup: u64) -> f64 {
    // Through black_box: an indirect call the compiler cannot inline or drop.
    let f = std::hint::black_box(func.pointer());
    let mut acc = 0u64;
    for i in 0..warmup {
        // SAFETY: the workload functions read only their argument and their own data.
        acc ^= unsafe { f(i) };
    }
    let start = thread_cpu_ns();
    for i in 0..calls {
        // SAFETY: as above.
        acc = acc.wrapping_add(unsafe { f(i) });
    }
    let end = thread_cpu_ns();
    std::hint::black_box(acc);
    end.saturating_sub(start) as f64 / calls.max(1) as f64
}

/// Bytes of one cache line: the data walk's stride and the code chain's block.
const LINE: usize = 64;

/// What the cold loop runs between two calls, as a server runs its own code between
/// two hits: a walk over a data buffer (one load per cache line, every page touched:
/// evicts the data caches and the TLB) and a chain of code lines (one taken jump per
/// 64-byte line: evicts the instruction caches, the iTLB and the branch predictor).
pub(crate) struct Footprint {
    data: Mapping,
    data_bytes: usize,
    /// Holds the chain's code: unmapped with the footprint.
    _code: Executable,
    code_bytes: usize,
    chain: unsafe extern "C" fn(u64) -> u64,
}

impl Footprint {
    /// A footprint of `data_bytes` of data and `code_bytes` of code (each at least one
    /// line).
    pub(crate) fn new(data_bytes: usize, code_bytes: usize) -> io::Result<Self> {
        let data = Mapping::new(data_bytes.max(LINE))?;
        let mut code = Mapping::new(code_bytes.max(LINE))?;
        let lines = write_chain(code.bytes_mut(), code_bytes.max(LINE) / LINE);
        debug_assert!(lines > 0);
        let code = code.into_executable()?;
        // SAFETY: the mapping now holds a complete chain (write_chain) starting at its
        // first byte: position-independent code following the C calling convention,
        // returning its argument plus the number of lines, touching no memory but the
        // stack for its return address.
        let chain = unsafe {
            std::mem::transmute::<*const u8, unsafe extern "C" fn(u64) -> u64>(code.start())
        };
        Ok(Self {
            data,
            data_bytes,
            _code: code,
            code_bytes,
            chain,
        })
    }

    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.data_bytes, self.code_bytes)
    }

    /// Walks the data, then runs the code chain; returns a value the caller must
    /// consume (so no load can be dropped).
    pub(crate) fn run(&self, seed: u64) -> u64 {
        let data = &self.data.bytes()[..self.data_bytes.min(self.data.bytes().len())];
        let mut sum = seed;
        for byte in data.iter().step_by(LINE) {
            sum = sum.wrapping_add(u64::from(*byte));
        }
        // SAFETY: see `new`: a complete chain in an executable mapping that `self`
        // keeps alive.
        sum.wrapping_add(unsafe { (self.chain)(seed) })
    }
}

/// Writes a chain of `lines` 64-byte blocks into `code`, each `inc %rax` and a jump to
/// the next; the first starts with `mov %rdi, %rax`, the last returns. Returns the
/// number of lines written.
fn write_chain(code: &mut [u8], lines: usize) -> usize {
    let lines = lines.min(code.len() / LINE).max(1);
    code.fill(0xcc); // int3 after every jump: never reached.
    for line in 0..lines {
        let block = &mut code[line * LINE..(line + 1) * LINE];
        let mut at = 0;
        if line == 0 {
            block[..3].copy_from_slice(&[0x48, 0x89, 0xf8]); // mov %rdi, %rax
            at = 3;
        }
        block[at..at + 3].copy_from_slice(&[0x48, 0xff, 0xc0]); // inc %rax
        at += 3;
        if line + 1 == lines {
            block[at] = 0xc3; // ret
        } else {
            // jmp rel32 to the next line's first byte.
            let rel = (LINE - (at + 5)) as i32;
            block[at] = 0xe9;
            block[at + 1..at + 5].copy_from_slice(&rel.to_le_bytes());
        }
    }
    lines
}

/// The time-stamp counter, after every earlier instruction has completed and before
/// any later one starts.
fn tsc() -> u64 {
    use std::arch::x86_64::{_mm_lfence, _rdtsc};
    // SAFETY: lfence and rdtsc exist on every x86-64 CPU and touch no memory.
    unsafe {
        _mm_lfence();
        let t = _rdtsc();
        _mm_lfence();
        t
    }
}

fn monotonic_ns() -> u64 {
    crate::sys::clock::monotonic_ns()
}

/// The thread's CPU time, the wall time and the time-stamp counter, read at the start
/// and at the end of a measured run.
#[derive(Debug, Clone, Copy)]
struct Clocks {
    cpu_ns: u64,
    wall_ns: u64,
    tsc: u64,
}

impl Clocks {
    #[inline(always)]
    fn now() -> Self {
        Self {
            cpu_ns: thread_cpu_ns(),
            wall_ns: monotonic_ns(),
            tsc: tsc(),
        }
    }
}

/// Wall ns per time-stamp counter tick from `start` to `end`: the run's own rate, so
/// tick counts inside it convert to ns without knowing the counter's frequency.
fn ns_per_tick(start: Clocks, end: Clocks) -> f64 {
    end.wall_ns.saturating_sub(start.wall_ns) as f64
        / end.tsc.saturating_sub(start.tsc).max(1) as f64
}

/// One run of the cold loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ColdRun {
    /// The thread's CPU ns per iteration (footprint plus call), mean over the run.
    pub cpu_ns_per_iter: f64,
    /// Median wall ns of one iteration, by the time-stamp counter (an interrupt or a
    /// preemption lands in a few iterations, which the median leaves out).
    pub iter_ns_median: f64,
    /// Median wall ns of the call alone, from just before it to just after.
    pub call_ns_median: f64,
}

fn median_of(values: &mut [u64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_unstable();
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2] as f64
    } else {
        (values[n / 2 - 1] as f64 + values[n / 2] as f64) / 2.0
    }
}

/// Runs `warmup` then `iters` iterations of: the footprint, then one call of `func`.
pub(crate) fn run_cold(func: Func, iters: u64, warmup: u64, footprint: &Footprint) -> ColdRun {
    let f = std::hint::black_box(func.pointer());
    let mut acc = 0u64;
    for i in 0..warmup {
        acc ^= footprint.run(i);
        // SAFETY: the workload functions read only their argument and their own data.
        acc ^= unsafe { f(i) };
    }
    let n = iters.max(1) as usize;
    let mut iter_ticks = Vec::with_capacity(n);
    let mut call_ticks = Vec::with_capacity(n);
    let start = Clocks::now();
    let mut last = start.tsc;
    for i in 0..n as u64 {
        acc = acc.wrapping_add(footprint.run(i));
        let before = tsc();
        // SAFETY: as above.
        acc = acc.wrapping_add(unsafe { f(i) });
        let after = tsc();
        call_ticks.push(after.saturating_sub(before));
        iter_ticks.push(after.saturating_sub(last));
        last = after;
    }
    let end = Clocks::now();
    std::hint::black_box(acc);
    let ns_per_tick = ns_per_tick(start, end);
    ColdRun {
        cpu_ns_per_iter: end.cpu_ns.saturating_sub(start.cpu_ns) as f64 / n as f64,
        iter_ns_median: median_of(&mut iter_ticks) * ns_per_tick,
        call_ns_median: median_of(&mut call_ticks) * ns_per_tick,
    }
}

/// One run of the gap loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GapRun {
    /// The thread's CPU ns per iteration (the call and the sleep's syscall).
    pub cpu_ns_per_iter: f64,
    /// Wall ns per iteration: the time from one call to the next.
    pub wall_ns_per_iter: f64,
    /// The call alone, from just before it to just after by the time-stamp counter, the
    /// mean of all but the slowest 2% (an interrupt or a preemption). The sleep's
    /// syscall and wakeup, which vary by more than a hit costs, are left out.
    pub call_ns_trimmed_mean: f64,
}

/// Runs `iters` iterations of: one call of `func`, then a sleep of `sleep_ns` (none
/// for 0). The CPU is idle or runs other work meanwhile, as a server's between two
/// requests.
pub(crate) fn run_gap(func: Func, iters: u64, sleep_ns: u64) -> GapRun {
    let f = std::hint::black_box(func.pointer());
    let pause = Duration::from_nanos(sleep_ns);
    let mut acc = 0u64;
    for i in 0..WARMUP_GAP_CALLS {
        // SAFETY: the workload functions read only their argument and their own data.
        acc ^= unsafe { f(i) };
    }
    let n = iters.max(1);
    let mut call_ticks = Vec::with_capacity(n as usize);
    let start = Clocks::now();
    for i in 0..n {
        let before = tsc();
        // SAFETY: as above.
        acc = acc.wrapping_add(unsafe { f(i) });
        call_ticks.push(tsc().saturating_sub(before));
        if sleep_ns > 0 {
            std::thread::sleep(pause);
        }
    }
    let end = Clocks::now();
    std::hint::black_box(acc);
    let ns_per_tick = ns_per_tick(start, end);
    call_ticks.sort_unstable();
    GapRun {
        cpu_ns_per_iter: end.cpu_ns.saturating_sub(start.cpu_ns) as f64 / n as f64,
        wall_ns_per_iter: end.wall_ns.saturating_sub(start.wall_ns) as f64 / n as f64,
        call_ns_trimmed_mean: mean_below(&call_ticks, 0.98) * ns_per_tick,
    }
}

/// The mean of the sorted `values` below the `keep` quantile.
fn mean_below(sorted: &[u64], keep: f64) -> f64 {
    let count = ((sorted.len() as f64 * keep).ceil() as usize).min(sorted.len());
    let kept = &sorted[..count];
    if kept.is_empty() {
        return 0.0;
    }
    kept.iter().map(|v| *v as f64).sum::<f64>() / kept.len() as f64
}

/// Calls before a gap run is measured.
const WARMUP_GAP_CALLS: u64 = 3;

/// The child's side: `ready`, then one reply per command on stdin until it closes.
/// `run FUNC CALLS WARMUP` -> `ns PER_CALL`;
/// `cold FUNC ITERS WARMUP DATA_BYTES CODE_BYTES` -> `cold CPU_PER_ITER ITER CALL`;
/// `gap FUNC ITERS SLEEP_NS` -> `gap CPU_PER_ITER WALL_PER_ITER CALL_TRIMMED_MEAN`;
/// anything else -> `error ...`.
pub(crate) fn child_main() -> anyhow::Result<()> {
    let stdin = io::stdin();
    let mut out = io::stdout().lock();
    // Sleeps as short as asked: the default timer slack (50 us) would stretch the gap
    // loop's short ones.
    crate::sys::process::least_timer_slack();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut footprint: Option<Footprint> = None;
    for line in stdin.lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["cold", func, iters, warmup, data, code] => {
                match (
                    Func::from_name(func),
                    iters.parse(),
                    warmup.parse(),
                    data.parse::<usize>(),
                    code.parse::<usize>(),
                ) {
                    (Some(func), Ok(iters), Ok(warmup), Ok(data), Ok(code)) => {
                        let mut made = Ok(());
                        if footprint.as_ref().map(Footprint::sizes) != Some((data, code)) {
                            drop(footprint.take()); // the old one is unmapped first
                            made = Footprint::new(data, code).map(|fp| footprint = Some(fp));
                        }
                        match (made, &footprint) {
                            (Err(e), _) => format!("error cannot map the cold footprint: {e}"),
                            (Ok(()), Some(fp)) => {
                                let r = run_cold(func, iters, warmup, fp);
                                format!(
                                    "cold {} {} {}",
                                    r.cpu_ns_per_iter, r.iter_ns_median, r.call_ns_median
                                )
                            }
                            (Ok(()), None) => "error no footprint".to_string(),
                        }
                    }
                    _ => format!("error bad command {line:?}"),
                }
            }
            ["gap", func, iters, sleep_ns] => {
                match (Func::from_name(func), iters.parse(), sleep_ns.parse()) {
                    (Some(func), Ok(iters), Ok(sleep_ns)) => {
                        let r = run_gap(func, iters, sleep_ns);
                        format!(
                            "gap {} {} {}",
                            r.cpu_ns_per_iter, r.wall_ns_per_iter, r.call_ns_trimmed_mean
                        )
                    }
                    _ => format!("error bad command {line:?}"),
                }
            }
            ["run", func, calls, warmup] => {
                match (Func::from_name(func), calls.parse(), warmup.parse()) {
                    (Some(func), Ok(calls), Ok(warmup)) => {
                        format!("ns {}", run(func, calls, warmup))
                    }
                    _ => format!("error bad command {line:?}"),
                }
            }
            ["sleep", ms] => match ms.parse() {
                Ok(ms) => {
                    std::thread::sleep(Duration::from_millis(ms));
                    "ok".to_string()
                }
                Err(_) => format!("error bad command {line:?}"),
            },
            _ => format!("error bad command {line:?}"),
        };
        writeln!(out, "{reply}")?;
        out.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::classes::{CostClass, KernelRules, classify};

    /// The first bytes of each function are what the calibration claims they are.
    #[test]
    fn first_instructions_have_their_classes() {
        let rules = KernelRules {
            optimizes_nop5: Some(true),
        };
        let bytes = |f: Func| {
            // SAFETY: the address is inside this binary's text, which holds at least 15
            // readable bytes after every workload function's start.
            unsafe { std::slice::from_raw_parts(f.probed_address() as *const u8, 15) }.to_vec()
        };
        let class = |f: Func| classify(&bytes(f), f.probed_address() & 0xfff, rules).class;
        for f in [
            Func::Emulated,
            Func::EmulatedRing,
            Func::EmulatedKernel,
            Func::EmulatedTwin,
            Func::Ret,
        ] {
            assert_eq!(class(f), CostClass::EmulatedPush, "{f:?}");
        }
        assert_eq!(class(Func::SingleSteppedTwin), CostClass::SingleStepped);
        assert_eq!(class(Func::Nop5Twin), CostClass::Optimized);
        assert_eq!(class(Func::SingleStepped), CostClass::SingleStepped);
        assert_eq!(class(Func::Nop5), CostClass::Optimized);
        assert_eq!(class(Func::Usdt), CostClass::EmulatedNop);
        // Probed on the one-byte nop its note names, the nop5 after it untouched.
        assert_eq!(class(Func::UsdtNop5), CostClass::EmulatedNop);
        assert_eq!(
            &bytes(Func::UsdtNop5)[..6],
            &[0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00]
        );
        let site = bytes(Func::UsdtNop5Twin);
        assert_eq!(&site[4..10], &[0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00]);
        assert!(
            classify(&bytes(Func::SingleStepped), 0, rules)
                .instruction
                .contains("%rip")
        );
    }

    #[test]
    fn the_functions_return_their_argument() {
        for f in Func::ALL
            .into_iter()
            .filter(|f| !matches!(f, Func::SingleStepped | Func::SingleSteppedTwin))
        {
            // SAFETY: the workload functions read only their argument and their data.
            assert_eq!(unsafe { f.pointer()(42) }, 42, "{f:?}");
        }
        // SAFETY: as above; the data word is 0.
        assert_eq!(unsafe { Func::SingleStepped.pointer()(42) }, 42);
        assert!(run(Func::Emulated, 1000, 10) >= 0.0);
    }

    #[test]
    fn the_code_chain_runs_every_line() {
        // 3 lines and a part: the part is left out.
        let fp = Footprint::new(4096, 3 * LINE + 10).expect("footprint");
        let data_sum = fp.data.bytes()[..4096]
            .iter()
            .step_by(LINE)
            .map(|b| u64::from(*b))
            .sum::<u64>();
        assert_eq!(fp.run(100), 100 + data_sum + 100 + 3);
        let one = Footprint::new(0, 0).expect("footprint");
        assert_eq!(one.run(7), 7 + 7 + 1);
        let r = run_cold(Func::Emulated, 20, 2, &fp);
        assert!(r.cpu_ns_per_iter > 0.0 && r.iter_ns_median > 0.0, "{r:?}");
        assert!(
            r.call_ns_median >= 0.0 && r.call_ns_median <= r.iter_ns_median,
            "{r:?}"
        );
    }
}
