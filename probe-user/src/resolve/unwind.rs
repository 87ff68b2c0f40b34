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
//! `--force` when both hold):
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
//!    `pthread_exit` would, without killing the process.
//! 2. The function runs other code while its frame is on the stack: it calls, jumps
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
use crate::cost::sites;

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

/// Answers [`Self::unwinds_through`] for many points, reading each object once.
#[derive(Default)]
pub struct UnwindCheck {
    markers: HashMap<PathBuf, Option<&'static str>>,
}

impl UnwindCheck {
    /// Why an exception can unwind through the function of `point` (a uretprobe's,
    /// at the function's entry), naming the marker its object has; `None` when none
    /// can. An object that cannot be read counts as having none: it cannot be
    /// attached either.
    pub fn unwinds_through(&mut self, point: &ProbePoint) -> Option<&'static str> {
        let marker = *self
            .markers
            .entry(point.attach_path.clone())
            .or_insert_with(|| {
                std::fs::read(&point.attach_path)
                    .ok()
                    .and_then(|data| exception_marker(&data))
            });
        let marker = marker?;
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
}
