//! Whether a USDT note's site may take a breakpoint. A note is trusted by the kernel
//! as it is: one whose address is off an instruction boundary (a bit flip, a broken
//! build tool) has its breakpoint written into the middle of an instruction, which
//! rewrites live code and corrupts or crashes the target (measured: every call of
//! fixtures/c/badnotes.c's `mov` loaded a changed immediate). So, like `FUNC+OFFSET`,
//! the site must be an instruction boundary of the function that holds it (a linear
//! decode from its symbol), and hold the nop the note's form emits
//! ([`usdt::SITE_FORMS`]). A 5-byte nop there must be its function's first instruction
//! where the kernel optimizes it ([`classes::SiteClass::past_entry`]).

use std::fs::File;

use super::Loaded;
use super::usdt::{self, UsdtProbe};
use crate::insn::classes::{self, CostClass, KernelRules};
use crate::insn::sites;

/// Why a site is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SiteProblem {
    /// In a few words, after "refused PROVIDER:NAME in OBJECT: ".
    pub reason: String,
    /// `--force` may attach it anyway: a red-zone nop5, whose harm depends on what the
    /// function keeps below %rsp. A site off an instruction boundary or on another
    /// instruction is never attached.
    pub forcible: bool,
}

/// A site fit for a breakpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SiteOk {
    /// The site is its function's first instruction (a symbol starts there).
    pub at_entry: bool,
}

/// Checks the site of `probe`, an x86-64 note of `obj` (read through `file`).
pub(crate) fn check(
    obj: &Loaded,
    file: &File,
    probe: &UsdtProbe,
    rules: KernelRules,
) -> Result<SiteOk, SiteProblem> {
    // The rules below are x86-64's; other machines' notes are not probed by probetop.
    if obj.image.machine != object::elf::EM_X86_64 {
        return Ok(SiteOk { at_entry: false });
    }
    let refuse = |reason: String| SiteProblem {
        reason,
        forcible: false,
    };
    let table = obj.symbols();
    let before = table
        .functions
        .partition_point(|f| f.address <= probe.address);
    let Some(f) = before.checked_sub(1).and_then(|i| table.functions.get(i)) else {
        return Err(refuse(format!(
            "no function symbol precedes its site {:#x}, so probetop cannot check that it is on an instruction boundary",
            probe.address
        )));
    };
    let offset = probe.address - f.address;
    // Inside a sized function: decode it from its entry. Past every sized function (a
    // stripped object's static function): decode on from the nearest symbol before,
    // as a disassembler would.
    let inside = f.size > 0 && offset < f.size;
    if !inside && offset > sites::MAX_FUNCTION_BYTES {
        return Err(refuse(format!(
            "its site {:#x} is {offset:#x} bytes past the nearest function symbol, {}, too far to check that it is on an instruction boundary",
            probe.address, f.name.display
        )));
    }
    let limit = offset.saturating_add(classes::MAX_INSN_LEN as u64);
    let size = if inside { f.size } else { limit };
    let code = sites::read_code(file, f.file_offset, size.min(limit))
        .map_err(|e| refuse(format!("cannot read its site: {e}")))?;
    sites::check_offset(&code, size, offset)
        .map_err(|e| refuse(format!("its site {}", e.message(&f.name.display, offset))))?;
    let at = code.get(offset as usize..).unwrap_or_default();
    let Some(form) = usdt::SITE_FORMS.iter().find(|form| at.starts_with(form)) else {
        let insn = classes::classify(at, 0, rules).instruction;
        return Err(refuse(format!(
            "its site {}+{offset:#x} is `{insn}`, not the nop sys/sdt.h and usdt.h emit there",
            f.name.display
        )));
    };
    let at_entry = inside && offset == 0;
    if form.len() == 5 {
        let site = classes::classify(at, f.file_offset + offset, rules);
        let site = if at_entry { site } else { site.past_entry() };
        if site.class == CostClass::Unsafe {
            return Err(SiteProblem {
                reason: format!(
                    "its site {}+{offset:#x} is {}",
                    f.name.display,
                    classes::RED_ZONE
                ),
                forcible: true,
            });
        }
    }
    Ok(SiteOk { at_entry })
}
