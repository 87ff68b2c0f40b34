//! Resolution: probe specs to probe points, the exact places in files the kernel
//! attaches to, read from ELF symbol tables, USDT notes and the target's /proc maps.

pub mod elf;
pub mod glob;
pub mod maps;
pub mod symbols;

use std::path::{Path, PathBuf};

use crate::spec::{ProbeKind, ProbeSpec};
use crate::target::Target;

use self::elf::ElfImage;
use self::glob::Glob;
use self::symbols::SymbolTable;

/// Default cap on the probe points one spec may expand to.
pub const DEFAULT_MAX_PROBES: usize = 1000;

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
    /// The symbol as stored (mangled) for uprobes; `provider:name` for USDT.
    pub symbol: String,
    /// Where the object is loaded in the target: runtime address minus `address`.
    /// `None` when resolving a file, or when the target has not mapped the object (yet).
    pub load_bias: Option<u64>,
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

/// Knobs of resolution.
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    /// Most probe points one spec may expand to.
    pub max_probes: usize,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        Self {
            max_probes: DEFAULT_MAX_PROBES,
        }
    }
}

/// Resolves `spec` in `target` to the points to attach, with default options.
pub fn resolve(target: &Target, spec: &ProbeSpec) -> Result<Vec<ProbePoint>, ResolveError> {
    resolve_with(target, spec, &ResolveOptions::default())
}

/// Resolves `spec` in `target` to the points to attach.
pub fn resolve_with(
    target: &Target,
    spec: &ProbeSpec,
    _opts: &ResolveOptions,
) -> Result<Vec<ProbePoint>, ResolveError> {
    if spec.kind == ProbeKind::Usdt || spec.object.is_some() {
        return Err(ResolveError::Unsupported { kind: spec.kind });
    }
    let read_path = target.exe_link();
    let object = load(&read_path)?;
    let maps = maps::read_maps(target.pid).unwrap_or_default();
    let id = maps::FileId::of(&read_path).ok();
    let exe_text = target.exe.to_string_lossy();
    let bias = maps::load_bias(&object.image, maps::mappings_of(&maps, id, &exe_text));
    let glob = Glob::new(&spec.name);
    let points: Vec<ProbePoint> = object
        .symbols
        .matching(&glob)
        .map(|f| ProbePoint {
            kind: spec.kind,
            object: target.exe.clone(),
            attach_path: read_path.clone(),
            name: f.name.display.clone(),
            address: f.address,
            file_offset: f.file_offset,
            symbol: f.name.raw.clone(),
            load_bias: bias,
        })
        .collect();
    if points.is_empty() {
        return Err(ResolveError::SymbolNotFound {
            name: spec.name.clone(),
            object: target.exe.clone(),
            hint: String::new(),
        });
    }
    Ok(points)
}

/// An object read and indexed.
struct LoadedObject {
    image: ElfImage,
    symbols: SymbolTable,
}

fn load(path: &Path) -> Result<LoadedObject, ResolveError> {
    let data = std::fs::read(path).map_err(|source| ResolveError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let image = ElfImage::parse(&data).map_err(|e| ResolveError::Elf {
        path: path.to_path_buf(),
        reason: e.0,
    })?;
    let symbols = SymbolTable::build(&image.symbols, &image);
    Ok(LoadedObject { image, symbols })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_main_function_resolves() {
        let me = Target::open(std::process::id()).expect("self");
        let spec = ProbeSpec::parse("uprobe:main").expect("spec");
        let points = resolve(&me, &spec).expect("resolve main");
        assert_eq!(points.len(), 1);
        let p = &points[0];
        assert_eq!(p.name, "main");
        assert!(p.file_offset > 0 && p.load_bias.is_some());
    }
}
