//! What resolution gives: the exact places in files the kernel attaches to.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::usdt_args::{UsdtArg, UsdtArgError};
use crate::insn::sites::ReturnSites;
use crate::spec::ProbeKind;

/// One place to attach one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePoint {
    pub kind: ProbeKind,
    /// The file as the user knows it (for display and exports).
    pub object: PathBuf,
    /// The path handed to the kernel; for the main executable `/proc/PID/exe`, which
    /// stays valid if the file on disk is replaced; for other mapped objects
    /// `/proc/PID/root/PATH` (the target's mount namespace), or
    /// `/proc/PID/map_files/...` when the file was deleted.
    pub attach_path: PathBuf,
    /// Symbol (demangled where it applies) or `provider:name`.
    pub name: String,
    /// Virtual address in the object (st_value, or the USDT note's pc).
    pub address: u64,
    /// File offset the kernel attaches at.
    pub file_offset: u64,
    /// The symbol as stored (mangled) for uprobes; `provider:name` for USDT.
    pub symbol: String,
    /// Runtime address minus link-time address of the object in the target. `None`
    /// when resolving a file, or when the target has not mapped the object (yet).
    pub load_bias: Option<u64>,
    /// USDT details (`kind == Usdt` only).
    pub usdt: Option<UsdtSite>,
    /// Where the point sits in its function (uprobes and uretprobes only).
    pub function: Option<FunctionSpan>,
    /// What `name`, as the user wrote it, resolved to when that is another name: the
    /// symbol table's preferred alias (`__libc_calloc` for `calloc`), or the
    /// implementation an IFUNC chose in the target (`__strlen_avx2` for `strlen`).
    pub resolved: Option<String>,
    /// An IFUNC matched by a pattern, left at its resolver (which runs once at load), as
    /// `probetop list` shows it: the run says so, naming a way to probe the
    /// implementation.
    pub ifunc_resolver: bool,
    /// `uprobe:FUNC+ret`: every `ret` of the function, each probed, all counted as this
    /// one point; `address` and `file_offset` are the first one's.
    pub returns: Option<ReturnSites>,
}

/// A uprobe's place in its function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionSpan {
    /// Bytes from the function's entry to the point: 0 at the entry, OFFSET for
    /// `uprobe:FUNC+OFFSET`.
    pub offset: u64,
    /// The function's size in the symbol table (0: not given).
    pub size: u64,
    /// Bytes from the entry to the first other function symbol that starts inside
    /// the function, if one does (a second entry point).
    pub inner_symbol: Option<u64>,
}

impl ProbePoint {
    /// File offset of the function's entry (uprobes and uretprobes).
    pub fn entry_file_offset(&self) -> Option<u64> {
        self.function.map(|f| self.file_offset - f.offset)
    }

    /// The file offsets of the sites after the first, which `file_offset` holds: the
    /// other `ret` instructions of `uprobe:FUNC+ret`; none for other points.
    pub fn more_file_offsets(&self) -> Vec<u64> {
        match (&self.returns, self.entry_file_offset()) {
            (Some(returns), Some(entry)) => returns
                .offsets
                .iter()
                .skip(1)
                .map(|offset| entry + offset)
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// What a USDT probe point carries beyond its location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtSite {
    pub provider: String,
    pub name: String,
    /// Link-time address of the semaphore (`None`: the probe has none).
    pub semaphore_address: Option<u64>,
    /// File offset of the semaphore: the kernel's `ref_ctr_offset`.
    pub semaphore_offset: Option<u64>,
    /// The argument string as the note stores it.
    pub args_raw: String,
    /// Parsed arguments, or why they do not parse (the probe itself still attaches).
    pub args: Result<Vec<UsdtArg>, UsdtArgError>,
    /// Link-time addresses of the symbols named by arguments (`sym+8(%rip)`), for the
    /// ones the object's symbol tables know.
    pub arg_symbols: BTreeMap<String, u64>,
    /// The site is its function's first instruction, where a 5-byte nop the kernel
    /// optimizes is safe (nothing lives below %rsp yet); elsewhere it would be
    /// `insn::classes::CostClass::Unsafe`.
    pub at_function_entry: bool,
}

impl UsdtSite {
    /// Runtime address of argument `index` when it is a memory operand that does not
    /// depend on registers (`%rip`-relative or absolute); `Ok(None)` for other operands.
    pub fn arg_static_address(
        &self,
        index: usize,
        load_bias: u64,
    ) -> Result<Option<u64>, UsdtArgError> {
        let args = self.args.as_ref().map_err(Clone::clone)?;
        let Some(arg) = args.get(index) else {
            return Ok(None);
        };
        arg.static_address(|s| self.arg_symbols.get(s).copied(), load_bias)
    }
}
