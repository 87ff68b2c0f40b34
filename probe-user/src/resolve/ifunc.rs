//! IFUNC symbols (`strlen`, `memcpy` in glibc): the symbol's address is a resolver that
//! runs once, at load, and returns the implementation for this CPU (`__strlen_avx2`).
//! A probe there counts nothing. The dynamic linker wrote the resolver's choice into
//! the GOT slot of each `R_X86_64_IRELATIVE` relocation whose addend is the resolver:
//! reading that slot in the running process gives the implementation it calls.

use super::elf::ElfImage;
use super::symbols::{Function, SymbolTable};

/// Why the implementation behind an IFUNC could not be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IfuncError {
    #[error("the object has no IRELATIVE relocation for it, so its choice cannot be read")]
    NoRelocation,
    #[error("the target's memory cannot be read at {address:#x}: {error}")]
    Unreadable { address: u64, error: String },
    #[error("its GOT slot holds {value:#x}, which is not code of this object (not bound yet?)")]
    Elsewhere { value: u64 },
}

/// Where an IFUNC's calls go in the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Implementation {
    /// Link-time address in the object.
    pub address: u64,
    /// File offset of `address`.
    pub file_offset: u64,
    /// The function there, if the symbol tables name it (stripped libc does not).
    pub function: Option<Function>,
}

impl Implementation {
    /// The implementation's name, or its address where the symbol tables name none.
    pub(crate) fn name(&self) -> String {
        match &self.function {
            Some(f) => f.name.display.clone(),
            None => format!("implementation at {:#x}", self.address),
        }
    }
}

/// Where a probe on the IFUNC whose resolver is at `resolver` goes, as a run and
/// `probetop list` both decide it: the implementation process `pid` calls, read from
/// its GOT; `None` without a process (a file) or a load bias (an object it does not
/// map), where only the resolver is known.
pub(super) fn chosen(
    pid: Option<u32>,
    load_bias: Option<u64>,
    image: &ElfImage,
    table: &SymbolTable,
    resolver: u64,
) -> Option<Result<Implementation, IfuncError>> {
    let (pid, bias) = pid.zip(load_bias)?;
    Some(implementation(pid, image, table, bias, resolver))
}

/// The implementation process `pid` calls for the IFUNC whose resolver is at
/// `resolver` (link-time) in `image`, loaded at `load_bias`.
pub(crate) fn implementation(
    pid: u32,
    image: &ElfImage,
    table: &SymbolTable,
    load_bias: u64,
    resolver: u64,
) -> Result<Implementation, IfuncError> {
    let slot = image
        .irelative
        .iter()
        .find(|r| r.resolver == resolver)
        .ok_or(IfuncError::NoRelocation)?;
    let address = load_bias.wrapping_add(slot.got);
    let value = read_u64(pid, address).map_err(|error| IfuncError::Unreadable {
        address,
        error: error.to_string(),
    })?;
    // Before relocation the slot holds the link-time resolver address; a value that is
    // not in this object's code is not a choice we can probe here.
    let chosen = value.wrapping_sub(load_bias);
    let file_offset = image
        .vaddr_to_offset(chosen, Some(true))
        .filter(|_| chosen != resolver)
        .ok_or(IfuncError::Elsewhere { value })?;
    let function = table
        .functions
        .binary_search_by_key(&chosen, |f| f.address)
        .ok()
        .and_then(|i| table.functions.get(i))
        .cloned();
    Ok(Implementation {
        address: chosen,
        file_offset,
        function,
    })
}

/// Eight bytes of process `pid`'s memory at `address` (little-endian, x86-64 only).
fn read_u64(pid: u32, address: u64) -> std::io::Result<u64> {
    let mut bytes = [0u8; 8];
    crate::sys::procfs::read_memory(pid, address, &mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}
