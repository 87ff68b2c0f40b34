//! Whether an exception can unwind through a function, which a uretprobe cannot survive.
//!
//! A uretprobe replaces the return address on the stack with the address of the
//! kernel's return trampoline (a page of its own, `[uprobes]`, with no unwind table).
//! A normal return jumps there and the kernel puts the real address back; an exception
//! (C++ `throw`, a Rust panic) unwinding through the frame reads the return address to
//! find the caller's unwind entry, finds none for the trampoline, and the runtime
//! terminates the process (`terminate called after throwing ...`, SIGABRT). bpftrace
//! 0.17 kills a target the same way: the kernel offers no way around it.
//!
//! The rule, conservative where it cannot know (a uretprobe is refused without
//! `--force` when all three hold):
//!
//! 1. The function's object takes part in exceptions: its symbol tables name (import or
//!    define) one of [`MARKERS`]: `__cxa_throw`/`__cxa_rethrow` (it throws),
//!    `_Unwind_RaiseException` (it raises: Rust panics), `_Unwind_Resume` (it has
//!    cleanups that exceptions run on their way through, which is every C++ or Rust
//!    object with a destructor on a path that can throw), `__gxx_personality_v0` (it
//!    has C++ unwind tables with handlers or cleanups). Whether one function is
//!    `noexcept`, or only calls functions that never throw, cannot be told reliably
//!    from its code or tables, so every function of such an object counts. A C object
//!    has none of them: glibc's `.gcc_except_table` serves thread cancellation, whose
//!    forced unwind stops at a frame it cannot read and ends the thread as
//!    `pthread_exit` would (a C thread cancelled inside a uretprobe'd function ran its
//!    cleanup handlers and the process lived: docs/user-guide.md).
//! 2. The function has an unwind entry (an FDE in `.eh_frame`, found through
//!    `.eh_frame_hdr`'s table): without one the unwinder stops at its frame anyway, so
//!    an exception reaching it terminates the process with or without the probe. A
//!    table probetop cannot read counts as having one.
//! 3. The function runs other code while its frame is on the stack: it calls, jumps
//!    out of itself (a tail call leaves its return address for the callee) or jumps
//!    indirectly, as a linear decode from its entry over its symbol size shows
//!    ([`sites::runs_other_code`]; undecodable or unsized counts as yes). A leaf
//!    cannot have an exception thrown while it runs, so none unwinds through it.
//!
//! What the rule lets through: a C function of a C object that calls back into C++ or
//! Rust code that throws (`qsort` with a throwing comparator, a C library's callback):
//! the object names no marker. Such a uretprobe kills the target just the same; the
//! user guide says so and offers `uprobe:FUNC+ret`, which is safe everywhere.
//!
//! `longjmp` (PostgreSQL's `elog(ERROR)`) is another matter: it restores the stack
//! pointer and jumps without reading return addresses, so it passes a uretprobe's
//! frame harmlessly; the kernel drops that frame's pending return (it compares stack
//! pointers at the next return through the trampoline, or the next uretprobe hit, of
//! the thread), and the probe misses that one return.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::{Object as _, ObjectSymbol as _};

use super::ProbePoint;
use crate::insn::sites;

/// Symbols whose presence in an object's symbol tables (imported or defined, global or
/// weak) shows that exceptions are thrown in it or unwind through its functions.
pub const MARKERS: &[&str] = &[
    "__cxa_throw",
    "__cxa_rethrow",
    "_Unwind_RaiseException",
    "_Unwind_Resume",
    "_Unwind_Resume_or_Rethrow",
    "__gxx_personality_v0",
];

/// The first of [`MARKERS`] an ELF file's symbol tables name, if any; `None` for a
/// file that does not parse (it cannot be probed either).
pub fn exception_marker(data: &[u8]) -> Option<&'static str> {
    let file = object::File::parse(data).ok()?;
    file.dynamic_symbols()
        .chain(file.symbols())
        .filter(|symbol| !symbol.is_local())
        .find_map(|symbol| {
            let name = symbol.name_bytes().ok()?;
            MARKERS.iter().find(|m| m.as_bytes() == name).copied()
        })
}

/// What an object says of exceptions, read once.
struct ObjectUnwind {
    /// The first of [`MARKERS`] it names; `None`: no exception unwinds through it.
    marker: Option<&'static str>,
    /// Its unwind entries, when it has a marker (else not read).
    entries: Option<FdeTable>,
}

/// Answers [`Self::unwinds_through`] for many points, reading each object once.
#[derive(Default)]
pub struct UnwindCheck {
    objects: HashMap<PathBuf, ObjectUnwind>,
}

impl UnwindCheck {
    /// Why an exception can unwind through the function of `point` (a uretprobe's,
    /// at the function's entry), naming the marker its object has; `None` when none
    /// can. An object that cannot be read counts as having none: it cannot be
    /// attached either.
    pub fn unwinds_through(&mut self, point: &ProbePoint) -> Option<&'static str> {
        let object = self
            .objects
            .entry(point.attach_path.clone())
            .or_insert_with(|| {
                let data = std::fs::read(&point.attach_path).unwrap_or_default();
                let marker = exception_marker(&data);
                ObjectUnwind {
                    marker,
                    entries: marker.and_then(|_| FdeTable::read(&data)),
                }
            });
        let marker = object.marker?;
        let entry_address = point.address - point.function.map_or(0, |f| f.offset);
        if object
            .entries
            .as_ref()
            .and_then(|t| t.covers(entry_address))
            == Some(false)
        {
            return None;
        }
        let size = point.function.map_or(0, |f| f.size);
        let entry = point.entry_file_offset().unwrap_or(point.file_offset);
        let code = if size == 0 || size > sites::MAX_FUNCTION_BYTES {
            Vec::new()
        } else {
            read_code(&point.attach_path, entry, size)
        };
        sites::runs_other_code(&code).then_some(marker)
    }
}

/// The function's bytes, or none (which [`sites::runs_other_code`] takes as unknown).
fn read_code(path: &Path, offset: u64, size: u64) -> Vec<u8> {
    std::fs::File::open(path)
        .and_then(|file| sites::read_code(&file, offset, size))
        .unwrap_or_default()
}

/// An object's unwind entries: `.eh_frame_hdr`'s sorted table of (start address, FDE
/// address) and the `.eh_frame` section the FDEs are in (x86-64, little-endian).
pub struct FdeTable {
    /// Start address and FDE address of each entry, sorted by start.
    starts: Vec<(u64, u64)>,
    eh_frame_address: u64,
    eh_frame: Vec<u8>,
}

/// `.eh_frame_hdr`'s usual table encoding: 4-byte signed offsets from the section's start.
const DW_EH_PE_DATAREL_SDATA4: u8 = 0x3b;
const DW_EH_PE_OMIT: u8 = 0xff;

impl FdeTable {
    /// The table of an ELF file; `None` when it has none or one in a form not read here
    /// (then whether a function has an entry is unknown).
    pub fn read(data: &[u8]) -> Option<Self> {
        use object::ObjectSection as _;
        let file = object::File::parse(data).ok()?;
        let hdr = file.section_by_name(".eh_frame_hdr")?;
        let eh_frame = file.section_by_name(".eh_frame")?;
        let bytes = hdr.data().ok()?;
        let mut r = Reader::new(bytes, hdr.address());
        let (version, ptr_enc, count_enc, table_enc) = (r.u8()?, r.u8()?, r.u8()?, r.u8()?);
        if version != 1 || table_enc != DW_EH_PE_DATAREL_SDATA4 || count_enc == DW_EH_PE_OMIT {
            return None;
        }
        r.pointer(ptr_enc)?;
        let count = r.pointer(count_enc)?;
        // Each entry is 8 bytes: a count past the section is a broken table.
        if count > (bytes.len() as u64) / 8 {
            return None;
        }
        let base = hdr.address();
        let mut starts = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let start = base.wrapping_add_signed(i64::from(r.i32()?));
            let fde = base.wrapping_add_signed(i64::from(r.i32()?));
            starts.push((start, fde));
        }
        // The linker sorts it; a table that is not sorted is not trusted.
        if !starts.is_sorted_by_key(|&(start, _)| start) {
            return None;
        }
        Some(Self {
            starts,
            eh_frame_address: eh_frame.address(),
            eh_frame: eh_frame.data().ok()?.to_vec(),
        })
    }

    /// Whether an FDE covers `address`; `None` when the FDE cannot be read.
    pub fn covers(&self, address: u64) -> Option<bool> {
        let index = self.starts.partition_point(|&(start, _)| start <= address);
        let Some(&(start, fde)) = index.checked_sub(1).and_then(|i| self.starts.get(i)) else {
            return Some(false);
        };
        if start == address {
            return Some(true);
        }
        let (begin, range) = self.fde_range(fde)?;
        Some(begin <= address && address - begin < range)
    }

    /// The (pc_begin, pc_range) of the FDE at address `fde`, read with the encoding
    /// its CIE's augmentation gives.
    fn fde_range(&self, fde: u64) -> Option<(u64, u64)> {
        let at = usize::try_from(fde.checked_sub(self.eh_frame_address)?).ok()?;
        let mut r = Reader::new(&self.eh_frame, self.eh_frame_address);
        r.seek(at)?;
        let length = r.u32()?;
        if length == 0 || length == u32::MAX {
            return None;
        }
        let cie_pointer_at = r.pos;
        let cie_pointer = r.u32()? as usize;
        let encoding = self.cie_fde_encoding(cie_pointer_at.checked_sub(cie_pointer)?)?;
        let begin = r.pointer(encoding)?;
        // pc_range has the same size, never pc-relative.
        let range = r.pointer(encoding & 0x0f)?;
        Some((begin, range))
    }

    /// The pointer encoding of FDEs under the CIE at `at` in `.eh_frame` (`R` in its
    /// augmentation; absolute 8-byte pointers without).
    fn cie_fde_encoding(&self, at: usize) -> Option<u8> {
        let mut r = Reader::new(&self.eh_frame, self.eh_frame_address);
        r.seek(at)?;
        let length = r.u32()?;
        if length == 0 || length == u32::MAX || r.u32()? != 0 {
            return None;
        }
        let version = r.u8()?;
        let mut augmentation = Vec::new();
        loop {
            match r.u8()? {
                0 => break,
                c => augmentation.push(c),
            }
        }
        r.uleb()?; // code alignment
        r.uleb()?; // data alignment (sleb: only skipped)
        if version == 1 {
            r.u8()?;
        } else {
            r.uleb()?;
        }
        if augmentation.first() != Some(&b'z') {
            return augmentation.is_empty().then_some(0);
        }
        r.uleb()?;
        let mut encoding = 0;
        for &c in &augmentation[1..] {
            match c {
                b'R' => encoding = r.u8()?,
                b'P' => {
                    let personality = r.u8()?;
                    r.pointer(personality)?;
                }
                b'L' => {
                    r.u8()?;
                }
                b'S' | b'B' => {}
                _ => return None,
            }
        }
        Some(encoding)
    }
}

/// Little-endian reads from a section at `address`, for DWARF pointer encodings.
struct Reader<'a> {
    bytes: &'a [u8],
    address: u64,
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], address: u64) -> Self {
        Self {
            bytes,
            address,
            pos: 0,
        }
    }

    fn seek(&mut self, pos: usize) -> Option<()> {
        (pos <= self.bytes.len()).then(|| self.pos = pos)
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let bytes = self.bytes.get(self.pos..self.pos.checked_add(N)?)?;
        self.pos += N;
        bytes.try_into().ok()
    }

    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|[b]| b)
    }

    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }

    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_le_bytes)
    }

    fn uleb(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// A pointer in DWARF encoding `encoding`: its size and sign (low nibble), made
    /// absolute when pc-relative (0x10); other applications are not read here.
    fn pointer(&mut self, encoding: u8) -> Option<u64> {
        let field = self.address.wrapping_add(self.pos as u64);
        let value = match encoding & 0x0f {
            0x00 | 0x04 | 0x0c => u64::from_le_bytes(self.take()?),
            0x02 => u64::from(u16::from_le_bytes(self.take()?)),
            0x03 => u64::from(self.u32()?),
            0x0a => i64::from(i16::from_le_bytes(self.take()?)) as u64,
            0x0b => i64::from(self.i32()?) as u64,
            _ => return None,
        };
        match encoding & 0x70 {
            0x00 => Some(value),
            0x10 => Some(field.wrapping_add(value)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_is_rust_and_marked() {
        // Rust's std raises panics and runs drops on their way through.
        let exe = std::fs::read("/proc/self/exe").expect("read own exe");
        assert!(exception_marker(&exe).is_some());
        assert_eq!(exception_marker(b"not elf"), None);
    }

    /// Every function of this test binary that the compiler gave unwind tables is
    /// covered from its first byte to its last, and nothing past the last entry is.
    #[test]
    // Kept out of line: the test looks for its own symbol, which the optimizer may
    // otherwise fold into the harness's caller (it did once the merge of the keys work
    // changed the binary).
    #[inline(never)]
    fn functions_have_unwind_entries() {
        let exe = std::fs::read("/proc/self/exe").expect("read own exe");
        let table = FdeTable::read(&exe).expect("an .eh_frame_hdr table");
        let file = object::File::parse(&*exe).expect("elf");
        let mut checked = 0;
        for symbol in file.symbols() {
            let name = symbol.name().unwrap_or("");
            if symbol.kind() != object::SymbolKind::Text
                || symbol.size() < 2
                || !name.contains("functions_have_unwind_entries")
            {
                continue;
            }
            let (start, end) = (symbol.address(), symbol.address() + symbol.size() - 1);
            assert_eq!(table.covers(start), Some(true), "{name}");
            assert_eq!(table.covers(end), Some(true), "{name} at its last byte");
            checked += 1;
        }
        assert!(checked > 0, "this test's own function was found");
        let last = table.starts.last().expect("entries").0;
        let (begin, range) = table
            .fde_range(table.starts.last().expect("entries").1)
            .expect("fde");
        assert_eq!(begin, last);
        assert_eq!(table.covers(begin + range), Some(false));
        assert_eq!(table.covers(0), Some(false));
        assert!(FdeTable::read(b"not elf").is_none());
    }
}
