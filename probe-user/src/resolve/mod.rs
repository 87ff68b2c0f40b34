//! Resolution: probe specs to probe points, the exact places in files the kernel
//! attaches to, read from ELF symbol tables, USDT notes and the target's /proc maps.

use std::path::PathBuf;

use crate::spec::{ProbeKind, ProbeSpec};
use crate::target::Target;

/// One place to attach one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePoint {
    pub kind: ProbeKind,
    /// The file as the user knows it (for display and exports).
    pub object: PathBuf,
    /// The path handed to the kernel; for the main executable `/proc/PID/exe`, which
    /// stays valid if the file on disk is replaced.
    pub attach_path: PathBuf,
    /// Symbol (demangled where it applies) or `provider:name`.
    pub name: String,
    /// Virtual address in the object (st_value, or the USDT note's pc).
    pub address: u64,
    /// File offset the kernel attaches at.
    pub file_offset: u64,
}

/// Why a spec resolved to nothing usable.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an ELF file probetop can read: {reason}")]
    Elf { path: PathBuf, reason: String },
    #[error("symbol {name:?} not found in {object}{hint}")]
    SymbolNotFound {
        name: String,
        object: PathBuf,
        hint: String,
    },
    #[error("{kind} probes on objects other than the main executable come later")]
    Unsupported { kind: ProbeKind },
}

/// Resolves `spec` in `target` to the points to attach.
pub fn resolve(target: &Target, spec: &ProbeSpec) -> Result<Vec<ProbePoint>, ResolveError> {
    if spec.kind == ProbeKind::Usdt || spec.object.is_some() {
        return Err(ResolveError::Unsupported { kind: spec.kind });
    }
    let attach_path = target.exe_link();
    let data = std::fs::read(&attach_path).map_err(|source| ResolveError::Read {
        path: target.exe.clone(),
        source,
    })?;
    let elf_error = |reason: String| ResolveError::Elf {
        path: target.exe.clone(),
        reason,
    };
    let file = object::File::parse(&*data).map_err(|e| elf_error(e.to_string()))?;
    use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};
    let address = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| {
            s.is_definition() && s.kind() == object::SymbolKind::Text && s.name() == Ok(&spec.name)
        })
        .map(|s| s.address())
        .ok_or_else(|| ResolveError::SymbolNotFound {
            name: spec.name.clone(),
            object: target.exe.clone(),
            hint: String::new(),
        })?;
    let file_offset = file
        .segments()
        .find_map(|seg| {
            let (offset, size) = seg.file_range();
            (address >= seg.address() && address < seg.address() + size)
                .then(|| address - seg.address() + offset)
        })
        .ok_or_else(|| elf_error(format!("{:#x} is not in a loaded segment", address)))?;
    Ok(vec![ProbePoint {
        kind: spec.kind,
        object: target.exe.clone(),
        attach_path,
        name: spec.name.clone(),
        address,
        file_offset,
    }])
}
