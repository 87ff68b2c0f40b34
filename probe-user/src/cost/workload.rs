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
    fn probetop_cal_emulated_twin(x: u64) -> u64;
    fn probetop_cal_sstep(x: u64) -> u64;
    fn probetop_cal_sstep_twin(x: u64) -> u64;
    fn probetop_cal_nop5(x: u64) -> u64;
    fn probetop_cal_nop5_twin(x: u64) -> u64;
    fn probetop_cal_ret(x: u64) -> u64;
    fn probetop_cal_usdt(x: u64) -> u64;
    fn probetop_cal_usdt_twin(x: u64) -> u64;
    static probetop_cal_usdt_site: u8;
}

/// One workload function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Func {
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
    /// Unprobed twins: the same code, for the baseline of each run.
    EmulatedTwin,
    SingleSteppedTwin,
    Nop5Twin,
    UsdtTwin,
}

impl Func {
    pub const ALL: [Func; 11] = [
        Func::Emulated,
        Func::EmulatedRing,
        Func::EmulatedKernel,
        Func::SingleStepped,
        Func::Nop5,
        Func::Ret,
        Func::Usdt,
        Func::EmulatedTwin,
        Func::SingleSteppedTwin,
        Func::Nop5Twin,
        Func::UsdtTwin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Func::Emulated => "emulated",
            Func::EmulatedRing => "ring",
            Func::EmulatedKernel => "kernel",
            Func::SingleStepped => "sstep",
            Func::Nop5 => "nop5",
            Func::Ret => "ret",
            Func::Usdt => "usdt",
            Func::EmulatedTwin => "emulated-twin",
            Func::SingleSteppedTwin => "sstep-twin",
            Func::Nop5Twin => "nop5-twin",
            Func::UsdtTwin => "usdt-twin",
        }
    }

    /// The kind of probe that measures it: its return for [`Func::Ret`], the USDT site
    /// for [`Func::Usdt`], its entry otherwise.
    pub fn probe_kind(self) -> crate::spec::ProbeKind {
        use crate::spec::ProbeKind;
        match self {
            Func::Ret => ProbeKind::Uretprobe,
            Func::Usdt => ProbeKind::Usdt,
            _ => ProbeKind::Uprobe,
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The unprobed function with the same code.
    pub fn twin(self) -> Func {
        match self {
            Func::Emulated | Func::EmulatedRing | Func::EmulatedKernel | Func::Ret => {
                Func::EmulatedTwin
            }
            Func::SingleStepped => Func::SingleSteppedTwin,
            Func::Nop5 => Func::Nop5Twin,
            Func::Usdt => Func::UsdtTwin,
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
            Func::EmulatedTwin => probetop_cal_emulated_twin,
            Func::SingleSteppedTwin => probetop_cal_sstep_twin,
            Func::Nop5Twin => probetop_cal_nop5_twin,
            Func::UsdtTwin => probetop_cal_usdt_twin,
        }
    }

    /// Runtime address of the instruction a probe on this function sits on: the entry,
    /// or for [`Func::Usdt`] the USDT site.
    pub fn probed_address(self) -> u64 {
        match self {
            // Only the address of the extern static is taken, never its value.
            Func::Usdt => &raw const probetop_cal_usdt_site as u64,
            f => f.pointer() as usize as u64,
        }
    }
}

/// CPU time of the calling thread, ns.
pub fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Calls `func` `warmup` times, then `calls` times under the CPU clock; returns CPU ns
/// per measured call (the kernel's uprobe handling on this thread included).
pub fn run(func: Func, calls: u64, warmup: u64) -> f64 {
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

/// The child's side: `ready`, then one reply per command on stdin until it closes.
/// `run FUNC CALLS WARMUP` -> `ns PER_CALL`; anything else -> `error ...`.
pub fn child_main() -> anyhow::Result<()> {
    let stdin = io::stdin();
    let mut out = io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for line in stdin.lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
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
    use crate::cost::classes::{CostClass, KernelRules, classify};

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
}
