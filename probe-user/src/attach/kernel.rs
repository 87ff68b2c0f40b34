//! The kernel features probetop cannot work without, probed before its programs load.
//!
//! Every probe's program reads its probe id with `bpf_get_attach_cookie` and is bound to
//! its perf event by a BPF link (`BPF_LINK_CREATE` with `BPF_PERF_EVENT`), which is what
//! carries that cookie. Both came with Linux 5.15. On an older kernel the verifier
//! refuses the programs with a log of hundreds of lines that never names the release
//! needed; probing first turns that into one line.
//!
//! Each probe is one cheap syscall on a two- or three-instruction program, and the
//! answer is only trusted when it is the kernel's "unknown" (EINVAL): any other failure
//! (no privileges, a seccomp filter) leaves the verdict to the real load, which reports
//! it in its own words.

use std::{io, os::fd::OwnedFd};

use crate::sys;

/// The release that brought everything probetop needs from the kernel.
const NEEDED_RELEASE: &str = "5.15";

/// `Err` with one line naming what this kernel lacks and the release that has it
/// (printed as `probetop: needs Linux 5.15 or later (...); this kernel is ...`); `Ok`
/// when it has everything, or when the probes cannot tell.
pub(super) fn require_features() -> Result<(), String> {
    let missing = missing_features();
    if missing.is_empty() {
        return Ok(());
    }
    let release = sys::procfs::kernel_release().unwrap_or_else(|_| "older".to_owned());
    Err(format!(
        "needs Linux {NEEDED_RELEASE} or later ({}); this kernel is {release}",
        missing.join(", ")
    ))
}

/// What this kernel lacks, by name; empty when it lacks nothing or cannot be asked.
fn missing_features() -> Vec<&'static str> {
    let Ok(plain) = load_program(&PLAIN) else {
        // Not even a trivial program loads: permissions or the like, not a feature.
        return Vec::new();
    };
    let mut missing = Vec::new();
    if is_unknown(load_program(&COOKIE).err()) {
        missing.push("bpf_get_attach_cookie");
    }
    if is_unknown(link_to_no_perf_event(&plain)) {
        missing.push("BPF links for perf events");
    }
    missing
}

/// Whether a probe's error is the kernel's "no such thing" (EINVAL).
fn is_unknown(error: Option<io::Error>) -> bool {
    error.is_some_and(|e| e.raw_os_error() == Some(libc::EINVAL))
}

/// One `struct bpf_insn`: opcode, registers (dst low nibble, src high), offset, immediate.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, imm: i32) -> Insn {
    Insn {
        code,
        regs: 0,
        off: 0,
        imm,
    }
}

/// BPF_ALU64 | BPF_MOV | BPF_K into r0.
const MOV_R0: u8 = 0xb7;
/// BPF_JMP | BPF_CALL.
const CALL: u8 = 0x85;
/// BPF_JMP | BPF_EXIT.
const EXIT: u8 = 0x95;
/// The helper's number in the kernel's `enum bpf_func_id` (5.15).
const BPF_FUNC_GET_ATTACH_COOKIE: i32 = 174;

/// r0 = 0; exit.
const PLAIN: [Insn; 2] = [insn(MOV_R0, 0), insn(EXIT, 0)];
/// bpf_get_attach_cookie(ctx); r0 = 0; exit.
const COOKIE: [Insn; 3] = [
    insn(CALL, BPF_FUNC_GET_ATTACH_COOKIE),
    insn(MOV_R0, 0),
    insn(EXIT, 0),
];

const BPF_PROG_TYPE_KPROBE: u32 = 2;

/// Loads `insns` as a kprobe-type program (what uprobe programs are), without a log.
fn load_program(insns: &[Insn]) -> io::Result<OwnedFd> {
    let attr = super::multi::ProgLoad {
        prog_type: BPF_PROG_TYPE_KPROBE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: c"GPL".as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name: [0; 16],
        prog_ifindex: 0,
        expected_attach_type: 0,
    };
    // SAFETY: attr is prog_load's prefix of union bpf_attr; the instructions and the
    // license it points to outlive the call, and the kernel copies them.
    unsafe { sys::bpf::call_fd(sys::bpf::PROG_LOAD, &attr) }
}

/// Asks for a perf-event link of `program` to no perf event at all: a kernel that has
/// such links answers EBADF (the target is checked after the attach type), one that
/// does not EINVAL (an attach type it does not know). Nothing is ever attached.
fn link_to_no_perf_event(program: &OwnedFd) -> Option<io::Error> {
    use std::os::fd::AsFd as _;
    sys::bpf::link_to_no_perf_event(program.as_fd()).err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_have_the_kernel_layout() {
        assert_eq!(size_of::<Insn>(), 8);
        assert_eq!(size_of::<super::super::multi::ProgLoad>(), 72);
    }

    /// As root on this machine's kernel (5.15 or later) nothing is missing; unprivileged,
    /// the probes cannot tell, which also means nothing is reported missing.
    #[test]
    fn this_kernel_lacks_nothing() {
        assert_eq!(missing_features(), Vec::<&str>::new());
        assert_eq!(require_features(), Ok(()));
    }
}
