//! Probe sites inside a function: which offsets are instruction boundaries
//! (`uprobe:FUNC+OFFSET` must land on one), and, when a function's entry is
//! single-stepped, a later instruction the kernel emulates that every call surely
//! executes once.
//!
//! Both read the function's bytes with a linear decode from its entry, as far as its
//! symbol size. A linear decode is right for compiler output, which keeps no data in
//! `.text` between a function's instructions; hand-written assembly can fool it, so the
//! offer of a later site is conservative: anything the decode cannot vouch for means
//! no offer.

use std::{fs::File, io, os::unix::fs::FileExt as _};

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Formatter as _, GasFormatter, Mnemonic, OpKind,
};

use super::classes::{self, CostClass, KernelRules};

/// Most bytes of one function read to look for a later site: larger functions get no
/// offer (a hostile file's symbol sizes are not trusted with memory).
pub(crate) const MAX_FUNCTION_BYTES: u64 = 1 << 20;

/// One decoded instruction, at `offset` bytes from the function's entry.
#[derive(Debug, Clone, Copy)]
struct Insn {
    offset: u64,
    flow: FlowControl,
    /// Where a direct jump, call or conditional branch goes, relative to the entry
    /// (wrapped below 0 for targets before the function).
    target: Option<u64>,
    /// A near `ret` (`c3`, `c2 imm16`, with any prefixes: `f3 c3` is `rep ret`).
    ret: bool,
}

/// A function's instructions from its entry, in order.
struct Decoded {
    insns: Vec<Insn>,
    /// Where decoding stopped before the end of the bytes, if it did: an invalid
    /// instruction, or one cut off by the end of the bytes given.
    stopped: Option<u64>,
}

fn decode(code: &[u8]) -> Decoded {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut insns = Vec::new();
    while decoder.can_decode() {
        let offset = decoder.ip();
        let insn = decoder.decode();
        if insn.is_invalid() {
            return Decoded {
                insns,
                stopped: Some(offset),
            };
        }
        let flow = insn.flow_control();
        let direct = matches!(
            flow,
            FlowControl::UnconditionalBranch
                | FlowControl::ConditionalBranch
                | FlowControl::Call
                | FlowControl::XbeginXabortXend
        );
        let target =
            (direct && insn.op0_kind() == OpKind::NearBranch64).then(|| insn.near_branch_target());
        insns.push(Insn {
            offset,
            flow,
            target,
            ret: insn.mnemonic() == Mnemonic::Ret,
        });
    }
    Decoded {
        insns,
        stopped: None,
    }
}

/// Why `FUNC+OFFSET` cannot be probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OffsetError {
    /// The symbol table gives the function no size, so nothing can be checked.
    NoSize,
    /// At or past the function's end.
    Outside { size: u64 },
    /// Inside an instruction: the boundaries before and after it (within the
    /// function).
    NotOnBoundary {
        before: Option<u64>,
        after: Option<u64>,
    },
    /// The bytes from the entry do not decode as far as the offset.
    Undecodable { at: u64 },
}

impl OffsetError {
    /// The one-line refusal, for `spec_name+offset`.
    pub(crate) fn message(&self, func: &str, offset: u64) -> String {
        let at = format!("{func}+{offset:#x}");
        match self {
            OffsetError::NoSize => format!(
                "{at}: the symbol table gives {func} no size, so probetop cannot check that the offset is inside it and on an instruction boundary"
            ),
            OffsetError::Outside { size } => {
                format!("{at} is outside {func}, which is {size:#x} bytes long")
            }
            OffsetError::NotOnBoundary { before, after } => match (before, after) {
                (Some(b), Some(a)) => format!(
                    "{at} is not on an instruction boundary: the nearest are +{b:#x} and +{a:#x}"
                ),
                (Some(n), None) | (None, Some(n)) => {
                    format!("{at} is not on an instruction boundary: the nearest is +{n:#x}")
                }
                (None, None) => format!("{at} is not on an instruction boundary"),
            },
            OffsetError::Undecodable { at: bad } => format!(
                "{at}: {func} does not decode as x86-64 from its entry to the offset (invalid bytes at +{bad:#x}), so probetop cannot check it is on an instruction boundary"
            ),
        }
    }
}

/// Checks that `offset` is an instruction boundary of the function whose bytes from its
/// entry are `code` (at least up to `offset` + [`classes::MAX_INSN_LEN`], or to its end)
/// and whose symbol size is `size`. Offset 0, the entry, is always good.
pub(crate) fn check_offset(code: &[u8], size: u64, offset: u64) -> Result<(), OffsetError> {
    if offset == 0 {
        return Ok(());
    }
    if size == 0 {
        return Err(OffsetError::NoSize);
    }
    if offset >= size {
        return Err(OffsetError::Outside { size });
    }
    let end = size.min(code.len() as u64) as usize;
    let decoded = decode(&code[..end]);
    let mut before = None;
    for insn in &decoded.insns {
        if insn.offset == offset {
            return Ok(());
        }
        if insn.offset > offset {
            return Err(OffsetError::NotOnBoundary {
                before,
                after: Some(insn.offset),
            });
        }
        before = Some(insn.offset);
    }
    match decoded.stopped {
        // The offset is inside the last instruction that decoded; the bytes after it
        // do not decode, but start where it ends.
        Some(at) if at > offset => Err(OffsetError::NotOnBoundary {
            before,
            after: Some(at),
        }),
        // The bytes up to the offset are no instructions (or the function's last one
        // is cut off by its end).
        Some(at) => Err(OffsetError::Undecodable { at }),
        // Decoded to the end: the offset is inside the last instruction.
        None => Err(OffsetError::NotOnBoundary {
            before,
            after: None,
        }),
    }
}

/// A later instruction of a function whose entry is single-stepped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaterSite {
    /// Bytes from the entry.
    pub offset: u64,
    pub class: CostClass,
    /// The instruction, AT&T syntax; a branch's target as objdump shows it, an
    /// address in the object.
    pub instruction: String,
}

impl LaterSite {
    /// `+0x3 (jbe 0x30) is emulated and reached on every call: use SPEC`, where SPEC is
    /// the uprobe spec of the function without its offset (`uprobe:f`).
    pub(crate) fn advice(&self, spec: &str) -> String {
        format!(
            "+{:#x} ({}) is emulated and reached on every call: use {spec}+{:#x}",
            self.offset, self.instruction, self.offset
        )
    }
}

/// Why no later site is offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoLaterSite {
    /// The entry itself is not single-stepped: nothing to improve.
    EntryNotSingleStepped,
    /// The straight line from the entry ends (a branch, call, return) before an
    /// instruction the kernel emulates.
    BranchFirst,
    /// A branch of the function lands between the entry and the first emulated
    /// instruction: that one may run more than once per call.
    BranchInto,
    /// Another symbol starts between the entry and the candidate: a second entry.
    SymbolInside,
    /// An indirect jump (a jump table, say) may land anywhere in the function.
    IndirectJump,
    /// The function does not decode cleanly to its end.
    Undecodable,
    /// The symbol table gives the function no size, or one past
    /// [`MAX_FUNCTION_BYTES`]: its end is unknown.
    Unsized,
}

impl NoLaterSite {
    /// Why, in a few words.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            NoLaterSite::EntryNotSingleStepped => "the entry is not single-stepped",
            NoLaterSite::BranchFirst => {
                "the code from the entry branches before any instruction the kernel emulates"
            }
            NoLaterSite::BranchInto => {
                "a branch of the function lands before the first emulated instruction"
            }
            NoLaterSite::SymbolInside => "another symbol starts right after the entry",
            NoLaterSite::IndirectJump => {
                "the function has an indirect jump, whose targets a linear decode cannot see"
            }
            NoLaterSite::Undecodable => "the function does not decode cleanly to its end",
            NoLaterSite::Unsized => {
                "the symbol table gives the function no size (or a huge one), so its branches cannot all be seen"
            }
        }
    }
}

/// The first instruction after the entry that the kernel emulates and
/// that every call executes exactly once, as far as a linear decode of the whole
/// function (`code`, its symbol size of bytes from the entry) can tell:
///
/// - every instruction before it falls through to the next (no jump, conditional
///   branch, call, return, interrupt or invalid opcode), so a call that enters at the
///   entry reaches it;
/// - no direct branch of the function targets it or anything between the entry and it,
///   and the function has no indirect jump, so nothing else reaches it a second time
///   (or without the entry); a branch to the entry itself is fine: it repeats both;
/// - no other symbol starts in that range (`other_entries`: offsets from the entry of
///   symbols inside the function), which would be a second way in.
///
/// Jumps into the function from other functions cannot be seen this way; compilers
/// only make them to symbols. `entry_file_offset` places the sites in their page for
/// the 5-byte-nop rule; `entry_address` only serves to show branch targets as objdump
/// does.
pub(crate) fn later_site(
    code: &[u8],
    entry_address: u64,
    entry_file_offset: u64,
    other_entries: &[u64],
    rules: KernelRules,
) -> Result<LaterSite, NoLaterSite> {
    if code.is_empty() || code.len() as u64 > MAX_FUNCTION_BYTES {
        return Err(NoLaterSite::Unsized);
    }
    let site_class = |offset: u64| {
        classes::classify(&code[offset as usize..], entry_file_offset + offset, rules)
    };
    if site_class(0).class != CostClass::SingleStepped {
        return Err(NoLaterSite::EntryNotSingleStepped);
    }
    let decoded = decode(code);
    if decoded.stopped.is_some() {
        return Err(NoLaterSite::Undecodable);
    }
    if decoded
        .insns
        .iter()
        .any(|i| i.flow == FlowControl::IndirectBranch)
    {
        return Err(NoLaterSite::IndirectJump);
    }
    // The earliest spot after the entry that a branch lands on.
    let first_target = decoded
        .insns
        .iter()
        .filter_map(|i| i.target)
        .filter(|t| *t > 0 && *t < code.len() as u64)
        .min();
    let first_symbol = other_entries.iter().copied().filter(|o| *o > 0).min();
    for (index, insn) in decoded.insns.iter().enumerate() {
        if index > 0 {
            if first_target.is_some_and(|t| t <= insn.offset) {
                return Err(NoLaterSite::BranchInto);
            }
            if first_symbol.is_some_and(|s| s <= insn.offset) {
                return Err(NoLaterSite::SymbolInside);
            }
            // Past the entry a 5-byte nop the kernel optimizes is unsafe (its call writes
            // below %rsp): never offered; the search goes on past it.
            let site = site_class(insn.offset).past_entry();
            if site.class.is_emulated() {
                return Ok(LaterSite {
                    offset: insn.offset,
                    class: site.class,
                    instruction: format_at(code, insn.offset, entry_address),
                });
            }
        }
        if insn.flow != FlowControl::Next {
            return Err(NoLaterSite::BranchFirst);
        }
    }
    Err(NoLaterSite::BranchFirst)
}

/// The `ret` instructions of a function (`uprobe:FUNC+ret`), found by a linear decode
/// of its bytes from the entry to its symbol size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReturnSites {
    /// Bytes from the entry of each `ret`, in order (at least one).
    pub offsets: Vec<u64>,
    /// Direct jumps whose target is outside the function: tail calls, or jumps to its
    /// `.cold` part. A return through one of them passes no `ret` of the function, so
    /// the probes do not see it.
    pub jumps_out: usize,
}

/// Why a function's `ret` instructions cannot be listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoReturnSites {
    /// No size in the symbol table, or more than [`MAX_FUNCTION_BYTES`].
    Unsized,
    /// The bytes from the entry do not decode as x86-64 to the end.
    Undecodable { at: u64 },
    /// The function has no `ret`: it never returns, or only through tail calls.
    NoRet,
}

impl NoReturnSites {
    /// The one-line refusal for `func+ret`.
    pub(crate) fn message(self, func: &str) -> String {
        match self {
            NoReturnSites::Unsized => format!(
                "{func}+ret: the symbol table gives {func} no size (or one over {MAX_FUNCTION_BYTES} bytes), so probetop cannot find all its ret instructions"
            ),
            NoReturnSites::Undecodable { at } => format!(
                "{func}+ret: {func} does not decode as x86-64 from its entry to its end (invalid bytes at +{at:#x}), so probetop cannot find all its ret instructions"
            ),
            NoReturnSites::NoRet => format!(
                "{func}+ret: {func} has no ret instruction (it never returns, or returns only through tail calls): use uretprobe:{func}"
            ),
        }
    }
}

/// Every `ret` of the function whose bytes (its whole symbol size) are `code`.
pub(crate) fn return_sites(code: &[u8]) -> Result<ReturnSites, NoReturnSites> {
    if code.is_empty() || code.len() as u64 > MAX_FUNCTION_BYTES {
        return Err(NoReturnSites::Unsized);
    }
    let decoded = decode(code);
    if let Some(at) = decoded.stopped {
        return Err(NoReturnSites::Undecodable { at });
    }
    let offsets: Vec<u64> = decoded
        .insns
        .iter()
        .filter(|i| i.ret)
        .map(|i| i.offset)
        .collect();
    if offsets.is_empty() {
        return Err(NoReturnSites::NoRet);
    }
    let jumps_out = decoded
        .insns
        .iter()
        .filter(|i| {
            matches!(
                i.flow,
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
            ) && i.target.is_some_and(|t| t >= code.len() as u64)
        })
        .count();
    Ok(ReturnSites { offsets, jumps_out })
}

/// Whether other code can run while the function's frame is on the stack, as far as a
/// linear decode of its bytes (`code`, its whole symbol size) shows: it calls (directly
/// or not), jumps out of itself (a tail call leaves its caller's return address on the
/// stack for the callee), or jumps indirectly. Anything the decode cannot vouch for (no
/// size, too large, invalid bytes) counts as yes. A function for which this is false is
/// a leaf: no exception can be thrown while it runs, so none unwinds through it.
pub(crate) fn runs_other_code(code: &[u8]) -> bool {
    if code.is_empty() || code.len() as u64 > MAX_FUNCTION_BYTES {
        return true;
    }
    let decoded = decode(code);
    decoded.stopped.is_some()
        || decoded.insns.iter().any(|i| match i.flow {
            FlowControl::Call | FlowControl::IndirectCall | FlowControl::IndirectBranch => true,
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                i.target.is_none_or(|t| t >= code.len() as u64)
            }
            _ => false,
        })
}

/// The instruction at `offset` of `code`, AT&T syntax, as if `code` were at `address`.
fn format_at(code: &[u8], offset: u64, address: u64) -> String {
    let mut decoder = Decoder::with_ip(
        64,
        &code[offset as usize..],
        address.wrapping_add(offset),
        DecoderOptions::NONE,
    );
    let insn = decoder.decode();
    let mut text = String::new();
    let mut formatter = GasFormatter::new();
    let options = formatter.options_mut();
    options.set_rip_relative_addresses(true);
    // As objdump: `jbe 0x30`, `$0x8`.
    options.set_branch_leading_zeros(false);
    options.set_small_hex_numbers_in_decimal(false);
    options.set_uppercase_hex(false);
    formatter.format(&insn, &mut text);
    text
}

/// Reads `len` bytes at `file_offset` of `file`, fewer at the end of the file.
pub(crate) fn read_code(file: &File, file_offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let available = file.metadata()?.len().saturating_sub(file_offset);
    let mut code = vec![0u8; len.min(available) as usize];
    let mut filled = 0;
    while filled < code.len() {
        match file.read_at(&mut code[filled..], file_offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    code.truncate(filled);
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEW: KernelRules = KernelRules {
        optimizes_nop5: Some(true),
    };
    const OLD: KernelRules = KernelRules {
        optimizes_nop5: Some(false),
    };

    /// The workload fixture's `work_unit`, as gcc -O2 -fno-omit-frame-pointer made it.
    const WORK_UNIT: &[u8] = &[
        0x55, // +0x0 push %rbp
        0x48, 0x89, 0xe5, // +0x1 mov %rsp,%rbp
        0x53, // +0x4 push %rbx
        0x48, 0x89, 0xfb, // +0x5 mov %rdi,%rbx
        0x48, 0x83, 0xec, 0x08, // +0x8 sub $0x8,%rsp
        0xe8, 0xcf, 0xff, 0xff, 0xff, // +0xc call leaf_ret
        0x48, 0x89, 0x05, 0xa8, 0x26, 0x00, 0x00, // +0x11 mov %rax,0x26a8(%rip)
        0x90, // +0x18 nop
        0x48, 0x01, 0xd8, // +0x19 add %rbx,%rax
        0x48, 0x8b, 0x5d, 0xf8, // +0x1c mov -0x8(%rbp),%rbx
        0xc9, // +0x20 leave
        0xc3, // +0x21 ret
    ];

    fn size(code: &[u8]) -> u64 {
        code.len() as u64
    }

    #[test]
    fn every_ret_form_is_a_return_site() {
        assert_eq!(
            return_sites(WORK_UNIT),
            Ok(ReturnSites {
                offsets: vec![0x21],
                jumps_out: 0
            })
        );
        // test %edi,%edi; je +5 (the rep ret); ret $8; nop; rep ret; jmp out (tail call).
        let code = [
            0x85, 0xff, 0x74, 0x04, 0xc2, 0x08, 0x00, 0x90, 0xf3, 0xc3, 0xe9, 0, 1, 0, 0,
        ];
        assert_eq!(
            return_sites(&code),
            Ok(ReturnSites {
                offsets: vec![0x4, 0x8],
                jumps_out: 1
            })
        );
        // `retf` (0xcb) is no near return; a lone jmp never returns here.
        assert_eq!(return_sites(&[0xcb]), Err(NoReturnSites::NoRet));
        assert_eq!(return_sites(&[]), Err(NoReturnSites::Unsized));
        assert_eq!(
            return_sites(&[0x90, 0x06, 0xc3]),
            Err(NoReturnSites::Undecodable { at: 1 })
        );
        assert!(NoReturnSites::NoRet.message("f").contains("uretprobe:f"));
    }

    #[test]
    fn leaves_run_no_other_code() {
        // work_unit calls leaf_ret.
        assert!(runs_other_code(WORK_UNIT));
        // mov %edi,%eax; xor $3,%eax; ret; and with a branch inside.
        assert!(!runs_other_code(&[0x89, 0xf8, 0x83, 0xf0, 0x03, 0xc3]));
        assert!(!runs_other_code(&[0x85, 0xff, 0x74, 0x01, 0x90, 0xc3]));
        // A jump out (tail call), an indirect jump or call, undecodable bytes, no size.
        assert!(runs_other_code(&[0xe9, 0, 1, 0, 0]));
        assert!(runs_other_code(&[0xff, 0xe0]));
        assert!(runs_other_code(&[0xff, 0xd0, 0xc3]));
        assert!(runs_other_code(&[0x06]));
        assert!(runs_other_code(&[]));
    }

    #[test]
    fn every_instruction_start_is_a_boundary() {
        for offset in [0, 1, 4, 5, 8, 0xc, 0x11, 0x18, 0x19, 0x1c, 0x20, 0x21] {
            assert_eq!(
                check_offset(WORK_UNIT, size(WORK_UNIT), offset),
                Ok(()),
                "+{offset:#x}"
            );
        }
    }

    #[test]
    fn offsets_inside_an_instruction_name_the_nearest_boundaries() {
        let err = check_offset(WORK_UNIT, size(WORK_UNIT), 7).unwrap_err();
        assert_eq!(
            err,
            OffsetError::NotOnBoundary {
                before: Some(5),
                after: Some(8)
            }
        );
        assert_eq!(
            err.message("work_unit", 7),
            "work_unit+0x7 is not on an instruction boundary: the nearest are +0x5 and +0x8"
        );
        for (offset, before, after) in [(2, 1, 4), (3, 1, 4), (0xd, 0xc, 0x11), (0x10, 0xc, 0x11)] {
            assert_eq!(
                check_offset(WORK_UNIT, size(WORK_UNIT), offset),
                Err(OffsetError::NotOnBoundary {
                    before: Some(before),
                    after: Some(after)
                }),
                "+{offset:#x}"
            );
        }
        // Inside the last instruction: no boundary after it within the function.
        let code = [0x55, 0x48, 0x89, 0xe5];
        let err = check_offset(&code, 4, 2).unwrap_err();
        assert_eq!(
            err.message("f", 2),
            "f+0x2 is not on an instruction boundary: the nearest is +0x1"
        );
    }

    #[test]
    fn offsets_outside_the_function_or_without_a_size_are_refused() {
        let err = check_offset(WORK_UNIT, size(WORK_UNIT), 0x22).unwrap_err();
        assert_eq!(err, OffsetError::Outside { size: 0x22 });
        assert_eq!(
            err.message("work_unit", 0x22),
            "work_unit+0x22 is outside work_unit, which is 0x22 bytes long"
        );
        assert!(check_offset(WORK_UNIT, size(WORK_UNIT), u64::MAX).is_err());
        // The bytes go on past a symbol size of 4: +0x4 is outside all the same.
        assert_eq!(
            check_offset(WORK_UNIT, 4, 4),
            Err(OffsetError::Outside { size: 4 })
        );
        assert_eq!(check_offset(WORK_UNIT, 0, 4), Err(OffsetError::NoSize));
        // The entry needs no check.
        assert_eq!(check_offset(WORK_UNIT, 0, 0), Ok(()));
        assert_eq!(check_offset(&[], 0, 0), Ok(()));
    }

    #[test]
    fn undecodable_bytes_before_the_offset_are_refused() {
        // push %rbp; 0x06 (push %es: invalid in 64-bit mode); ...
        let code = [0x55, 0x06, 0x90, 0x90, 0xc3];
        assert_eq!(
            check_offset(&code, 5, 3),
            Err(OffsetError::Undecodable { at: 1 })
        );
        assert_eq!(
            check_offset(&code, 5, 1),
            Err(OffsetError::Undecodable { at: 1 })
        );
        // Inside the last instruction before the bad bytes: its end is the nearest after.
        let code = [0x48, 0x89, 0xe5, 0x06];
        assert_eq!(
            check_offset(&code, 4, 2),
            Err(OffsetError::NotOnBoundary {
                before: Some(0),
                after: Some(3)
            })
        );
        // A last instruction cut off by the symbol's size.
        let code = [0x55, 0x48, 0x89];
        assert_eq!(
            check_offset(&code, 3, 2),
            Err(OffsetError::Undecodable { at: 1 })
        );
    }

    fn later(code: &[u8]) -> Result<(u64, CostClass, String), NoLaterSite> {
        later_site(code, 0, 0, &[], NEW).map(|s| (s.offset, s.class, s.instruction))
    }

    #[test]
    fn a_compare_then_branch_offers_the_branch() {
        // mysqld_stmt_execute in Debian 12's mariadbd: cmp first, then a jbe every call
        // passes.
        let code = [
            0x83, 0xfa, 0x08, // +0x0 cmp $0x8,%edx
            0x76, 0x03, // +0x3 jbe +0x8
            0x55, // +0x5 push %rbp
            0x5d, // +0x6 pop %rbp
            0xc3, // +0x7 ret
            0x31, 0xc0, // +0x8 xor %eax,%eax
            0xc3, // +0xa ret
        ];
        let (offset, class, insn) = later(&code).expect("offered");
        assert_eq!((offset, class), (3, CostClass::EmulatedBranch));
        assert_eq!(insn, "jbe 0x8");
        // Targets as objdump shows them, at the function's address.
        let site = later_site(&code, 0x85bc00, 0, &[], NEW).expect("offered");
        assert_eq!(
            site.advice("uprobe:mysqld_stmt_execute"),
            "+0x3 (jbe 0x85bc08) is emulated and reached on every call: use uprobe:mysqld_stmt_execute+0x3"
        );
        // The push after the branch runs only on one side of it: not offered.
    }

    #[test]
    fn endbr64_then_push_offers_the_push() {
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
        assert_eq!(
            later(&code),
            Ok((4, CostClass::EmulatedPush, "push %rbp".into()))
        );
        // Several single-stepped instructions first.
        let code = [
            0x48, 0x89, 0xf8, 0x48, 0x89, 0xf2, 0x41, 0x54, 0x41, 0x5c, 0xc3,
        ];
        assert_eq!(
            later(&code),
            Ok((6, CostClass::EmulatedPush, "push %r12".into()))
        );
    }

    #[test]
    fn a_five_byte_nop_is_offered_only_where_it_is_emulated() {
        // mov %rdi,-0x8(%rsp); nopl 0x0(%rax,%rax,1); push %rbx; pop %rbx; ret: where the
        // kernel optimizes the nop5, its call would overwrite -0x8(%rsp); the push after
        // it is offered instead.
        let code = [
            0x48, 0x89, 0x7c, 0x24, 0xf8, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x53, 0x5b, 0xc3,
        ];
        assert_eq!(
            later(&code).map(|s| (s.0, s.1)),
            Ok((10, CostClass::EmulatedPush))
        );
        assert_eq!(
            later_site(&code, 0, 0, &[], OLD).map(|s| (s.offset, s.class)),
            Ok((5, CostClass::EmulatedNop))
        );
        // Nothing emulated after it: no offer at all.
        let code = [0x48, 0x89, 0xf8, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3];
        assert_eq!(later(&code), Err(NoLaterSite::BranchFirst));
        assert_eq!(
            later_site(&code, 0, 0, &[], OLD).map(|s| (s.offset, s.class)),
            Ok((3, CostClass::EmulatedNop))
        );
    }

    #[test]
    fn no_offer_when_the_straight_line_ends_first() {
        // mov %rdi,%rax; ret.
        assert_eq!(
            later(&[0x48, 0x89, 0xf8, 0xc3]),
            Err(NoLaterSite::BranchFirst)
        );
        // mov; ud2; push %rbp.
        assert_eq!(
            later(&[0x48, 0x89, 0xf8, 0x0f, 0x0b, 0x55]),
            Err(NoLaterSite::BranchFirst)
        );
        // mov; syscall (a call to the kernel); push %rbp.
        assert_eq!(
            later(&[0x48, 0x89, 0xf8, 0x0f, 0x05, 0x55, 0xc3]),
            Err(NoLaterSite::BranchFirst)
        );
        // mov; call *%rax; push %rbp.
        assert_eq!(
            later(&[0x48, 0x89, 0xf8, 0xff, 0xd0, 0x55, 0xc3]),
            Err(NoLaterSite::BranchFirst)
        );
        // Only single-stepped instructions to the end.
        assert_eq!(
            later(&[0x48, 0x89, 0xf8, 0x31, 0xc0]),
            Err(NoLaterSite::BranchFirst)
        );
    }

    /// mov %rdi,%rax; mov %rsi,%rdx; push %rbx; pop %rbx; jne `back`; ret.
    fn loop_to(back: i8) -> Vec<u8> {
        vec![
            0x48, 0x89, 0xf8, // +0x0
            0x48, 0x89, 0xf2, // +0x3
            0x53, // +0x6 push %rbx
            0x5b, // +0x7
            0x75, back as u8, // +0x8 jne 0xa+back
            0xc3,       // +0xa
        ]
    }

    #[test]
    fn a_branch_into_the_straight_line_means_no_offer() {
        // To +0x3, between the entry and the push.
        assert_eq!(later(&loop_to(-7)), Err(NoLaterSite::BranchInto));
        // To the push itself: it would run more often than the function is called.
        assert_eq!(later(&loop_to(-4)), Err(NoLaterSite::BranchInto));
        // To the entry: the entry and the push repeat together.
        assert_eq!(later(&loop_to(-10)).map(|s| s.0), Ok(6));
        // Past the push: no matter.
        assert_eq!(later(&loop_to(-3)).map(|s| s.0), Ok(6));
        // Before the function (a tail call backwards): no matter.
        assert_eq!(later(&loop_to(-20)).map(|s| s.0), Ok(6));
    }

    #[test]
    fn indirect_jumps_and_inner_symbols_mean_no_offer() {
        // endbr64; push %rbp; jmp *%rax.
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0xff, 0xe0];
        assert_eq!(later(&code), Err(NoLaterSite::IndirectJump));
        // endbr64; push %rbp; ret, with another symbol at +0x4 or +0x2.
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0xc3];
        assert_eq!(
            later_site(&code, 0, 0, &[4], NEW),
            Err(NoLaterSite::SymbolInside)
        );
        assert_eq!(
            later_site(&code, 0, 0, &[2], NEW),
            Err(NoLaterSite::SymbolInside)
        );
        // One after the push does not matter.
        assert_eq!(later_site(&code, 0, 0, &[5], NEW).map(|s| s.offset), Ok(4));
    }

    #[test]
    fn nothing_to_offer_for_emulated_or_undecodable_entries() {
        assert_eq!(later(WORK_UNIT), Err(NoLaterSite::EntryNotSingleStepped));
        // endbr64; push %rbp; then bytes that do not decode.
        assert_eq!(
            later(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x06]),
            Err(NoLaterSite::Undecodable)
        );
        // The last instruction cut off by the end.
        assert_eq!(
            later(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89]),
            Err(NoLaterSite::Undecodable)
        );
        assert_eq!(later(&[]), Err(NoLaterSite::Unsized));
    }
}
