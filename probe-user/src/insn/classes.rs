//! Cost class of a probe site: what the kernel does with the probed instruction on
//! every hit, which sets most of what a hit costs.
//!
//! x86-64 uprobes put an `int3` over the first byte of the probed instruction. On a
//! hit the kernel either *emulates* the instruction (cheap: it fixes up the registers
//! itself) or copies it to a page of the process and *single-steps* it there, which
//! takes a second trap (~12x dearer on this project's VMs). Since 6.18 a probed 5-byte
//! nop is also *optimized* after its first hit: the kernel rewrites it into a call to
//! a trampoline that enters the kernel with a syscall instead of a trap.
//!
//! The rules are those of `arch/x86/kernel/uprobes.c` in Linux 6.18
//! (`uprobe_init_insn`, `branch_setup_xol_ops`, `push_setup_xol_ops`, `can_optimize`),
//! checked instruction by instruction by measuring probed loops on a 6.18 kernel (see
//! docs/cost.md):
//!
//! - refused (the probe never fires): ES/CS/SS/DS segment or LOCK prefixes (so the
//!   `cs nopw` padding gcc emits), `mov` to %ss, opcodes outside the kernel's
//!   good-instruction table (`int3`, `hlt`, `int N`, and VEX instructions whose opcode
//!   byte is a bad one-byte opcode, such as `vmovdqu` and `vpxor`), branches with a
//!   0x66 prefix;
//! - emulated: `nop` (0x90 with any prefixes, `pause` included) and the exact
//!   multi-byte nops of the kernel's `x86_nops` table (the 1- to 8-byte forms gcc
//!   and the assembler emit for padding); `jmp`/`call` rel8/rel32 and conditional jumps;
//!   `push` of a register without a prefix (or with exactly REX.B 0x41);
//! - optimized (after the first hit, on kernels with `arch_uprobe_optimize`): a 5-byte
//!   nop (0x90 with prefixes, or `0f 1f /0`) that does not cross a page; safe only as a
//!   function's first instruction: past it, the CALL the kernel writes pushes its return
//!   address at -8(%rsp), inside the 128-byte red zone a leaf function may keep data in
//!   without moving %rsp ([`CostClass::Unsafe`], [`SiteClass::past_entry`]);
//! - single-stepped: everything else, `push` with REX.W, `endbr64`, `ret`,
//!   `mov`, `sub $N,%rsp`, `nopl 8(%rax)` (not in `x86_nops`) and every %rip-relative
//!   instruction among them.
//!
//! Newer kernels emulate more nop forms; on those this is conservative.

use std::{fs::File, io, os::unix::fs::FileExt as _, path::Path, sync::OnceLock};

use iced_x86::{Decoder, DecoderOptions, Formatter as _, GasFormatter};
use serde::{Deserialize, Serialize};

/// What the kernel does with a probed instruction on every hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CostClass {
    /// A nop: the kernel skips it.
    EmulatedNop,
    /// `push %reg`: the kernel writes the register to the stack.
    EmulatedPush,
    /// A relative `jmp`, `call` or conditional jump: the kernel computes the new ip.
    EmulatedBranch,
    /// A 5-byte nop the kernel rewrites, after the first hit, into a call to a
    /// trampoline that makes a syscall: no trap at all.
    Optimized,
    /// A 5-byte nop past a function's entry that the kernel would optimize: its CALL
    /// writes a return address below %rsp, over whatever the function keeps in its red
    /// zone (measured: 999,999 of 1,000,000 values corrupted, fixtures/c/redzone.c, kernel
    /// 6.18, 2026-11-27). probetop refuses it unless `--force`; forced, it costs what
    /// [`CostClass::Optimized`] does.
    Unsafe,
    /// Executed out of line under single-step: a second trap per hit.
    SingleStepped,
    /// The kernel refuses to probe it: the probe attaches but never fires.
    Refused,
    /// The bytes could not be decoded (or read).
    Unknown,
}

impl CostClass {
    /// The name shown and exported.
    pub fn as_str(self) -> &'static str {
        match self {
            CostClass::EmulatedNop => "emulated-nop",
            CostClass::EmulatedPush => "emulated-push",
            CostClass::EmulatedBranch => "emulated-branch",
            CostClass::Optimized => "optimized",
            CostClass::Unsafe => "unsafe",
            CostClass::SingleStepped => "single-stepped",
            CostClass::Refused => "refused",
            CostClass::Unknown => "unknown",
        }
    }

    /// A short tag for narrow tables.
    pub fn short(self) -> &'static str {
        match self {
            CostClass::EmulatedNop | CostClass::EmulatedPush | CostClass::EmulatedBranch => "emul",
            CostClass::Optimized => "opt",
            CostClass::Unsafe => "UNSAFE",
            CostClass::SingleStepped => "SSTEP",
            CostClass::Refused => "REFUSED",
            CostClass::Unknown => "?",
        }
    }

    /// The class of the same instruction past its function's entry: an optimized
    /// 5-byte nop is [`CostClass::Unsafe`] there.
    pub fn past_entry(self) -> Self {
        match self {
            CostClass::Optimized => CostClass::Unsafe,
            other => other,
        }
    }

    /// Whether the kernel emulates the instruction.
    pub fn is_emulated(self) -> bool {
        matches!(
            self,
            CostClass::EmulatedNop | CostClass::EmulatedPush | CostClass::EmulatedBranch
        )
    }
}

impl std::fmt::Display for CostClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class of one site and the instruction it was decided on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SiteClass {
    pub class: CostClass,
    /// The instruction in AT&T syntax (`push %rbp`), empty if it did not decode.
    pub instruction: String,
    /// Why, in a few words, when it is not obvious from the class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

/// Why a [`CostClass::Unsafe`] site is refused.
pub(crate) const RED_ZONE: &str = "a 5-byte nop past the function's entry, which this kernel rewrites into a call that writes its return address below %rsp, over the function's red zone";

impl SiteClass {
    /// The class of this instruction when it is not its function's first (or may not
    /// be): an optimized 5-byte nop becomes [`CostClass::Unsafe`].
    pub fn past_entry(self) -> Self {
        if self.class.past_entry() == self.class {
            return self;
        }
        SiteClass {
            class: self.class.past_entry(),
            reason: Some(RED_ZONE),
            ..self
        }
    }
}

/// What the running kernel does beyond the rules every supported kernel shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct KernelRules {
    /// The kernel optimizes probed 5-byte nops (Linux 6.18+, `arch_uprobe_optimize`);
    /// `None`: ask the running kernel, only when a 5-byte nop is classified.
    pub optimizes_nop5: Option<bool>,
}

impl KernelRules {
    /// The rules of the running kernel, looked up when first needed: the lookup reads
    /// /proc/kallsyms (~60 ms of kernel formatting here), which most resolves never need.
    pub(crate) fn running() -> Self {
        Self {
            optimizes_nop5: None,
        }
    }

    /// Whether probed 5-byte nops are optimized.
    pub(crate) fn optimizes_nop5(self) -> bool {
        static RUNNING: OnceLock<bool> = OnceLock::new();
        self.optimizes_nop5.unwrap_or_else(|| {
            *RUNNING.get_or_init(|| crate::sys::procfs::kernel_has_symbol("arch_uprobe_optimize"))
        })
    }
}

/// Longest x86 instruction.
pub(crate) const MAX_INSN_LEN: usize = 15;

/// Page size for the optimization's no-page-crossing rule.
const PAGE_SIZE: u64 = 4096;

/// The kernel's `x86_nops` table (arch/x86/kernel/alternative.c, 64-bit): the only
/// multi-byte nops `branch_setup_xol_ops` emulates, byte for byte.
const X86_NOPS: [&[u8]; 9] = [
    &[],
    &[0x90],
    &[0x66, 0x90],
    &[0x0f, 0x1f, 0x00],
    &[0x0f, 0x1f, 0x40, 0x00],
    &[0x0f, 0x1f, 0x44, 0x00, 0x00],
    &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
    &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
    &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
];

/// `good_insns_64` of arch/x86/kernel/uprobes.c: one bit per one-byte opcode.
const GOOD_INSNS_64: [u16; 16] = [
    row([1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1]), // 00
    row([1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0]), // 10
    row([1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0]), // 20
    row([1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0]), // 30
    row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]), // 40
    row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]), // 50
    row([0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]), // 60
    row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]), // 70
    row([1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]), // 80
    row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1]), // 90
    row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]), // a0
    row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]), // b0
    row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]), // c0
    row([1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]), // d0
    row([1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0]), // e0
    row([1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1]), // f0
];

/// `good_2byte_insns`: one bit per second opcode byte after 0x0f.
const GOOD_2BYTE_INSNS: [u16; 16] = [
    row([0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1]), // 00
    row([1; 16]),                                          // 10
    row([1; 16]),                                          // 20
    row([0, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1]), // 30
    row([1; 16]),                                          // 40
    row([1; 16]),                                          // 50
    row([1; 16]),                                          // 60
    row([1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1]), // 70
    row([1; 16]),                                          // 80
    row([1; 16]),                                          // 90
    row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1]), // a0
    row([1; 16]),                                          // b0
    row([1; 16]),                                          // c0
    row([1; 16]),                                          // d0
    row([1; 16]),                                          // e0
    row([1; 16]),                                          // f0
];

const fn row(bits: [u8; 16]) -> u16 {
    let mut out = 0u16;
    let mut i = 0;
    while i < 16 {
        out |= (bits[i] as u16) << i;
        i += 1;
    }
    out
}

fn good(table: &[u16; 16], opcode: u8) -> bool {
    table[usize::from(opcode >> 4)] & (1 << (opcode & 0xf)) != 0
}

/// Legacy prefixes as the kernel's decoder collects them before REX and the opcode.
fn is_legacy_prefix(byte: u8) -> bool {
    matches!(
        byte,
        0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3
    )
}

/// The parts of an instruction the kernel's rules look at.
struct Parts<'a> {
    prefixes: &'a [u8],
    rex: Option<u8>,
    /// Opcode bytes: one, or 0x0f and the second (and a third for 0f 38/0f 3a).
    opcode: &'a [u8],
    /// The ModRM byte, if the instruction has one (only read for 0f 1f and 8e).
    modrm: Option<u8>,
}

/// The opcode map (VEX.m-mmmm: 1 0F, 2 0F38, 3 0F3A) of a three-byte VEX instruction
/// whose prefix is at `at`.
fn vex3_map(insn: &[u8], at: usize) -> Option<u8> {
    (insn.get(at) == Some(&0xc4)).then(|| insn.get(at + 1).map(|b| b & 0x1f))?
}

/// Splits `insn` (exactly one instruction's bytes) the way the kernel's decoder does.
fn parts(insn: &[u8]) -> Option<Parts<'_>> {
    let mut i = insn.iter().take_while(|b| is_legacy_prefix(**b)).count();
    let prefixes = &insn[..i];
    let rex = insn.get(i).copied().filter(|b| (0x40..=0x4f).contains(b));
    if rex.is_some() {
        i += 1;
    }
    let first = *insn.get(i)?;
    // VEX and EVEX carry the opcode map in the prefix: the opcode is one byte after it.
    let vex_len = match first {
        0xc5 => 2,
        0xc4 => 3,
        0x62 => 4,
        _ => 0,
    };
    if vex_len > 0 {
        let at = i + vex_len;
        return Some(Parts {
            prefixes,
            rex,
            opcode: insn.get(at..at + 1)?,
            modrm: insn.get(at + 1).copied(),
        });
    }
    let opcode_len = match (first, insn.get(i + 1)) {
        (0x0f, Some(0x38 | 0x3a)) => 3,
        (0x0f, _) => 2,
        _ => 1,
    };
    Some(Parts {
        prefixes,
        rex,
        opcode: insn.get(i..i + opcode_len)?,
        modrm: insn.get(i + opcode_len).copied(),
    })
}

/// Classifies the instruction at the start of `code` (up to [`MAX_INSN_LEN`] bytes
/// read at the probe site); `page_offset` is the site's offset within its page (the
/// file offset's low 12 bits: mappings keep them).
pub(crate) fn classify(code: &[u8], page_offset: u64, rules: KernelRules) -> SiteClass {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        return SiteClass {
            class: CostClass::Unknown,
            instruction: String::new(),
            reason: Some("the bytes at the site do not decode as an x86-64 instruction"),
        };
    }
    let mut text = String::new();
    let mut formatter = GasFormatter::new();
    // `0x10(%rip)` as written, not the absolute target: the site's address is not
    // known here.
    formatter.options_mut().set_rip_relative_addresses(true);
    formatter.format(&insn, &mut text);
    let bytes = &code[..insn.len().min(code.len())];
    let (class, reason) = kernel_class(bytes, page_offset, rules);
    SiteClass {
        class,
        instruction: text,
        reason,
    }
}

/// The kernel's decision for one whole instruction.
fn kernel_class(
    insn: &[u8],
    page_offset: u64,
    rules: KernelRules,
) -> (CostClass, Option<&'static str>) {
    let Some(p) = parts(insn) else {
        return (CostClass::Unknown, Some("truncated instruction"));
    };
    // uprobe_init_insn: is_prefix_bad.
    if p.prefixes
        .iter()
        .any(|b| matches!(b, 0x26 | 0x2e | 0x36 | 0x3e | 0xf0))
    {
        return (
            CostClass::Refused,
            Some("segment or lock prefix: the kernel refuses to probe it"),
        );
    }
    // insn_get_opcode: a VEX instruction the kernel's opcode map does not accept fails
    // to decode (ENOEXEC at attach). AMD's FMA4 (map 0F3A, 5C-5F and 68-7F: libm's
    // __fma_fma4) is the one met in practice; on a uprobe_multi link such a point cost
    // ~2 s of halving the link (one grace period per refused half) before it was found.
    if let Some(map) = vex3_map(insn, p.prefixes.len() + usize::from(p.rex.is_some()))
        && map == 3
        && matches!(p.opcode[0], 0x5c..=0x5f | 0x68..=0x7f)
    {
        return (
            CostClass::Refused,
            Some("FMA4 instruction: the kernel's decoder does not know it"),
        );
    }
    let op1 = p.opcode[0];
    // insn_masking_exception: mov to %ss, pop %ss.
    let modrm_reg = p.modrm.map(|m| (m >> 3) & 7);
    if (op1 == 0x8e && modrm_reg == Some(2)) || op1 == 0x17 {
        return (
            CostClass::Refused,
            Some("loads %ss: the kernel refuses to probe it"),
        );
    }
    let two_byte_good = p.opcode.len() == 2 && good(&GOOD_2BYTE_INSNS, p.opcode[1]);
    if !(good(&GOOD_INSNS_64, op1) || two_byte_good) {
        return (
            CostClass::Refused,
            Some("the kernel refuses to probe this opcode"),
        );
    }

    let len = insn.len() as u64;
    let is_nop = op1 == 0x90 && p.opcode.len() == 1;
    let is_nopl = p.opcode == [0x0f, 0x1f] && modrm_reg == Some(0);
    // can_optimize (6.18): 64-bit, a 5-byte nop, not across a page.
    if len == 5
        && (is_nop || is_nopl)
        && PAGE_SIZE - (page_offset % PAGE_SIZE) >= 5
        && rules.optimizes_nop5()
    {
        return (
            CostClass::Optimized,
            Some("5-byte nop: rewritten into a call after the first hit"),
        );
    }

    // branch_setup_xol_ops: the x86_nops table, then 0x90 with any prefixes.
    if X86_NOPS.get(insn.len()).is_some_and(|nop| *nop == insn) || is_nop {
        return (CostClass::EmulatedNop, None);
    }
    let is_branch = match p.opcode {
        [0xeb] | [0xe9] | [0xe8] => true,
        [op] => (0x70..=0x7f).contains(op),
        [0x0f, op] => (0x80..=0x8f).contains(op),
        _ => false,
    };
    if is_branch {
        if p.prefixes.contains(&0x66) {
            return (
                CostClass::Refused,
                Some("branch with a 0x66 prefix: the kernel refuses to probe it"),
            );
        }
        return (CostClass::EmulatedBranch, None);
    }

    // push_setup_xol_ops: push %reg, one byte or REX.B 0x41 and the opcode.
    if (0x50..=0x57).contains(&op1) && p.opcode.len() == 1 {
        let plain = insn.len() == 1;
        let rex_b = insn.len() == 2 && p.rex == Some(0x41) && p.prefixes.is_empty();
        if plain || rex_b {
            return (CostClass::EmulatedPush, None);
        }
        return (
            CostClass::SingleStepped,
            Some("push with a prefix the kernel does not emulate"),
        );
    }
    (CostClass::SingleStepped, None)
}

/// Reads the instruction bytes at `file_offset` of `path` and classifies them.
pub(crate) fn classify_file(
    path: &Path,
    file_offset: u64,
    rules: KernelRules,
) -> io::Result<SiteClass> {
    let file = File::open(path)?;
    classify_at(&file, file_offset, rules)
}

/// [`classify_file`] on an open file.
pub(crate) fn classify_at(
    file: &File,
    file_offset: u64,
    rules: KernelRules,
) -> io::Result<SiteClass> {
    let mut code = [0u8; MAX_INSN_LEN];
    let mut filled = 0;
    // A site near the end of the file gets fewer bytes; decoding says if they suffice.
    while filled < code.len() {
        match file.read_at(&mut code[filled..], file_offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(classify(&code[..filled], file_offset, rules))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: KernelRules = KernelRules {
        optimizes_nop5: Some(false),
    };
    const NEW: KernelRules = KernelRules {
        optimizes_nop5: Some(true),
    };

    fn class(bytes: &[u8]) -> CostClass {
        classify(bytes, 0, NEW).class
    }

    #[test]
    fn common_prologues() {
        // push %rbp: gcc with frame pointers.
        assert_eq!(class(&[0x55, 0x48, 0x89, 0xe5]), CostClass::EmulatedPush);
        let push = classify(&[0x55, 0x48, 0x89, 0xe5], 0, NEW);
        assert_eq!(push.instruction, "push %rbp");
        // push %r12 / %r15 (REX.B 0x41).
        assert_eq!(class(&[0x41, 0x54]), CostClass::EmulatedPush);
        assert_eq!(class(&[0x41, 0x57]), CostClass::EmulatedPush);
        // push %rbx.
        assert_eq!(class(&[0x53]), CostClass::EmulatedPush);
        // rex.W push %rbp, push %bp: not emulated.
        assert_eq!(class(&[0x48, 0x55]), CostClass::SingleStepped);
        assert_eq!(class(&[0x66, 0x55]), CostClass::SingleStepped);
        // endbr64 (-fcf-protection).
        assert_eq!(class(&[0xf3, 0x0f, 0x1e, 0xfa]), CostClass::SingleStepped);
        // sub $0x18,%rsp; mov %rdi,%rax; xor %eax,%eax; mov $1,%eax; ret.
        assert_eq!(class(&[0x48, 0x83, 0xec, 0x18]), CostClass::SingleStepped);
        assert_eq!(class(&[0x48, 0x89, 0xf8]), CostClass::SingleStepped);
        assert_eq!(class(&[0x31, 0xc0]), CostClass::SingleStepped);
        assert_eq!(class(&[0xb8, 1, 0, 0, 0]), CostClass::SingleStepped);
        assert_eq!(class(&[0xc3]), CostClass::SingleStepped);
    }

    #[test]
    fn rip_relative_is_single_stepped() {
        // mov 0x2edb(%rip),%rax and lea 0x10(%rip),%rdi.
        let mov = classify(&[0x48, 0x8b, 0x05, 0xdb, 0x2e, 0, 0], 0, NEW);
        assert_eq!(mov.class, CostClass::SingleStepped);
        assert!(mov.instruction.contains("%rip"), "{}", mov.instruction);
        assert_eq!(
            class(&[0x48, 0x8d, 0x3d, 0x10, 0, 0, 0]),
            CostClass::SingleStepped
        );
    }

    #[test]
    fn nops() {
        // USDT sites (sys/sdt.h): a one-byte nop.
        assert_eq!(class(&[0x90]), CostClass::EmulatedNop);
        // xchg %ax,%ax and pause: opcode 0x90 with prefixes.
        assert_eq!(class(&[0x66, 0x90]), CostClass::EmulatedNop);
        assert_eq!(class(&[0xf3, 0x90]), CostClass::EmulatedNop);
        // The x86_nops table.
        for len in [3, 4, 6, 7, 8] {
            assert_eq!(class(X86_NOPS[len]), CostClass::EmulatedNop, "nop{len}");
        }
        // nopl 0x8(%rax) is no table entry; nopw 0x0(%rax,%rax,1) (9 bytes) is too long.
        assert_eq!(class(&[0x0f, 0x1f, 0x40, 0x08]), CostClass::SingleStepped);
        assert_eq!(
            class(&[0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]),
            CostClass::SingleStepped
        );
        // cs nopw: a CS prefix, refused (measured: attaches, never fires).
        assert_eq!(
            class(&[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]),
            CostClass::Refused
        );
    }

    #[test]
    fn five_byte_nops_are_optimized_on_new_kernels() {
        let nop5 = [0x0f, 0x1f, 0x44, 0x00, 0x00];
        assert_eq!(classify(&nop5, 0, NEW).class, CostClass::Optimized);
        assert_eq!(classify(&nop5, 0, OLD).class, CostClass::EmulatedNop);
        // data16 data16 nopw (%rax): a 5-byte nopl, optimized (measured).
        assert_eq!(
            classify(&[0x66, 0x66, 0x0f, 0x1f, 0x00], 0, NEW).class,
            CostClass::Optimized
        );
        assert_eq!(
            classify(&[0x66, 0x66, 0x0f, 0x1f, 0x00], 0, OLD).class,
            CostClass::SingleStepped
        );
        // Past a function's entry it is unsafe; other classes stay as they are.
        assert_eq!(
            classify(&nop5, 0, NEW).past_entry().class,
            CostClass::Unsafe
        );
        assert_eq!(
            classify(&nop5, 0, OLD).past_entry().class,
            CostClass::EmulatedNop
        );
        assert_eq!(
            classify(&[0x90], 0, NEW).past_entry().class,
            CostClass::EmulatedNop
        );
        // Across a page boundary: no atomic rewrite, so not optimized.
        assert_eq!(classify(&nop5, 4093, NEW).class, CostClass::EmulatedNop);
        assert_eq!(classify(&nop5, 4091, NEW).class, CostClass::Optimized);
    }

    #[test]
    fn branches() {
        assert_eq!(class(&[0xeb, 0x05]), CostClass::EmulatedBranch);
        assert_eq!(class(&[0xe9, 0, 0, 0, 0]), CostClass::EmulatedBranch);
        assert_eq!(class(&[0xe8, 0, 0, 0, 0]), CostClass::EmulatedBranch);
        assert_eq!(class(&[0x74, 0x02]), CostClass::EmulatedBranch);
        assert_eq!(class(&[0x0f, 0x84, 0, 0, 0, 0]), CostClass::EmulatedBranch);
        // bnd jmp: an f2 prefix is fine.
        assert_eq!(class(&[0xf2, 0xe9, 0, 0, 0, 0]), CostClass::EmulatedBranch);
        // data16 call (Intel ignores the prefix, AMD does not): refused.
        assert_eq!(class(&[0x66, 0xe8, 0, 0, 0, 0]), CostClass::Refused);
        // notrack jmp *%rax: a DS prefix, refused.
        assert_eq!(class(&[0x3e, 0xff, 0xe0]), CostClass::Refused);
        // jmp *%rax: single-stepped.
        assert_eq!(class(&[0xff, 0xe0]), CostClass::SingleStepped);
    }

    #[test]
    fn fma4_is_refused_and_fma3_is_not() {
        // vfmaddsd %xmm2,%xmm1,%xmm0,%xmm0 (FMA4, libm's __fma_fma4): the kernel answers
        // ENOEXEC.
        assert_eq!(
            class(&[0xc4, 0xe3, 0xf9, 0x6b, 0xc2, 0x10]),
            CostClass::Refused
        );
        // vfmadd132sd %xmm2,%xmm1,%xmm0 (FMA3, map 0F38): probed, single-stepped.
        assert_eq!(
            class(&[0xc4, 0xe2, 0xf1, 0x99, 0xc2]),
            CostClass::SingleStepped
        );
    }

    #[test]
    fn refused_and_unknown() {
        // lock incl (%rax).
        assert_eq!(class(&[0xf0, 0xff, 0x00]), CostClass::Refused);
        // int3, hlt, int $0x80.
        assert_eq!(class(&[0xcc]), CostClass::Refused);
        assert_eq!(class(&[0xf4]), CostClass::Refused);
        assert_eq!(class(&[0xcd, 0x80]), CostClass::Refused);
        // mov %eax,%ss.
        assert_eq!(class(&[0x8e, 0xd0]), CostClass::Refused);
        // Nothing to decode.
        assert_eq!(class(&[]), CostClass::Unknown);
        assert_eq!(class(&[0x0f]), CostClass::Unknown);
        // syscall: 0x0f is a good first byte, so the kernel single-steps it.
        assert_eq!(class(&[0x0f, 0x05]), CostClass::SingleStepped);
    }

    #[test]
    fn vex_instructions_use_the_opcode_after_the_prefix() {
        // vmovdqu (%rdi),%ymm0 (c5 fe 6f 07) and vpxor: their opcode bytes 0x6f and
        // 0xef are `outs` and `out` in the one-byte table, so the kernel refuses them
        // (measured: a uprobe on either attaches and never fires).
        assert_eq!(class(&[0xc5, 0xfe, 0x6f, 0x07]), CostClass::Refused);
        assert_eq!(class(&[0xc5, 0xf9, 0xef, 0xc0]), CostClass::Refused);
        // vaddps %xmm1,%xmm0,%xmm0: opcode 0x58, single-stepped.
        assert_eq!(class(&[0xc5, 0xf8, 0x58, 0xc1]), CostClass::SingleStepped);
    }

    #[test]
    fn tables_match_the_kernel_bits() {
        // Spot checks against uprobes.c: 0x06 and 0x62 bad, 0x0f good; 0f 05 bad.
        assert!(!good(&GOOD_INSNS_64, 0x06));
        assert!(!good(&GOOD_INSNS_64, 0x62));
        assert!(good(&GOOD_INSNS_64, 0x0f));
        assert!(good(&GOOD_INSNS_64, 0x55));
        assert!(!good(&GOOD_2BYTE_INSNS, 0x05));
        assert!(good(&GOOD_2BYTE_INSNS, 0x1f));
    }
}
