//! Symbols for stripped objects: separate debug files found by build id or
//! `.gnu_debuglink`, and MiniDebugInfo (`.gnu_debugdata`, an xz-compressed ELF with a
//! `.symtab`, as Fedora ships).

use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

use super::debuginfod::Debuginfod;
use super::elf::{ElfImage, ElfSymbol};

/// Cap on MiniDebugInfo's decompressed size: a hostile file must not make us allocate
/// without bound.
pub const MAX_DEBUGDATA_BYTES: usize = 256 << 20;
/// Cap on the compressed `.gnu_debugdata` accepted.
const MAX_DEBUGDATA_COMPRESSED: usize = 64 << 20;
/// Cap on the xz decoder's memory (dictionary), in KiB: MiniDebugInfo uses small
/// dictionaries; xz's largest preset needs 64 MiB.
const XZ_MEM_LIMIT_KIB: u32 = 128 * 1024;
/// Cap on the size of a separate debug file read (real ones are at most a few GiB;
/// more is a mistake or an attack).
pub(crate) const MAX_DEBUG_FILE_BYTES: u64 = 4 << 30;

/// Where separate debug info comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub enum SymbolSource {
    /// The object's own `.symtab`.
    Symtab,
    /// Only `.dynsym`: exported functions only.
    Dynsym,
    /// `/usr/lib/debug/.build-id/xx/yyyy.debug`.
    BuildId(PathBuf),
    /// The file `.gnu_debuglink` names, with a matching CRC.
    DebugLink(PathBuf),
    /// `.gnu_debugdata` inside the object.
    MiniDebugInfo,
    /// A debug file from a debuginfod server, where it is cached.
    Debuginfod(PathBuf),
}

/// Where to look for separate debug files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugSearch {
    /// Global debug directories (`/usr/lib/debug`), holding `.build-id/` and mirrors of
    /// the objects' directories.
    pub roots: Vec<PathBuf>,
}

impl Default for DebugSearch {
    fn default() -> Self {
        Self {
            roots: vec![PathBuf::from("/usr/lib/debug")],
        }
    }
}

/// Symbols found outside the object's own tables.
#[derive(Debug, Clone)]
pub struct ExtraSymbols {
    pub source: SymbolSource,
    pub symbols: Vec<ElfSymbol>,
}

/// For an object without `.symtab`, finds the richest other symbol table: a build-id
/// debug file, then a debuglink file, then MiniDebugInfo. `object_path` is where the
/// object lives (its directory anchors debuglink), `image` the object itself.
pub fn find_extra_symbols(
    image: &ElfImage,
    object_path: &Path,
    search: &DebugSearch,
) -> Option<ExtraSymbols> {
    if let Some(found) = by_build_id(image, search) {
        return Some(found);
    }
    if let Some(found) = by_debuglink(image, object_path, search) {
        return Some(found);
    }
    mini_debuginfo(image)
}

/// Every path [`find_extra_symbols`] looks at for a separate debug file, in its order
/// (for `probetop list` to say where, when none was found), and whether the object
/// holds `.gnu_debugdata`.
pub(crate) fn looked_in(
    image: &ElfImage,
    object_path: &Path,
    search: &DebugSearch,
) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if let Some((first, rest)) = image.build_id.as_deref().and_then(<[u8]>::split_first)
        && !rest.is_empty()
    {
        let hex: String = rest.iter().map(|b| format!("{b:02x}")).collect();
        paths.extend(search.roots.iter().map(|root| {
            root.join(".build-id")
                .join(format!("{first:02x}"))
                .join(format!("{hex}.debug"))
        }));
    }
    if let (Some(link), Some(dir)) = (image.debuglink.as_ref(), object_path.parent()) {
        paths.extend(debuglink_candidates(&link.file, dir, search));
    }
    paths
}

/// Where a `.gnu_debuglink` file named `file` may be, for an object in `dir`.
fn debuglink_candidates(file: &str, dir: &Path, search: &DebugSearch) -> Vec<PathBuf> {
    let mut candidates = vec![dir.join(file), dir.join(".debug").join(file)];
    for root in &search.roots {
        // `/usr/lib/debug` + the object's absolute directory.
        let relative = dir.strip_prefix("/").unwrap_or(dir);
        candidates.push(root.join(relative).join(file));
    }
    candidates
}

fn by_build_id(image: &ElfImage, search: &DebugSearch) -> Option<ExtraSymbols> {
    let id = image.build_id.as_deref()?;
    let (first, rest) = id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    let hex: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    for root in &search.roots {
        let path = root
            .join(".build-id")
            .join(format!("{first:02x}"))
            .join(format!("{hex}.debug"));
        let Some(debug) = read_debug_file(&path, image) else {
            continue;
        };
        // The build id names the file; still check it says the same, in case of a
        // stale or misplaced file.
        if debug.build_id.as_deref() == Some(id) {
            return Some(ExtraSymbols {
                source: SymbolSource::BuildId(path),
                symbols: debug.symbols,
            });
        }
    }
    None
}

fn by_debuglink(
    image: &ElfImage,
    object_path: &Path,
    search: &DebugSearch,
) -> Option<ExtraSymbols> {
    let link = image.debuglink.as_ref()?;
    let dir = object_path.parent()?;
    for path in debuglink_candidates(&link.file, dir, search) {
        // The object itself may be named like its link (a debug file next to it is
        // named differently): never take the object for its own debug file.
        if same_file(&path, object_path) {
            continue;
        }
        let Ok(data) = read_capped(&path, MAX_DEBUG_FILE_BYTES) else {
            continue;
        };
        if crc32fast::hash(&data) != link.crc {
            continue;
        }
        let Some(debug) = parse_compatible(&data, image) else {
            continue;
        };
        return Some(ExtraSymbols {
            source: SymbolSource::DebugLink(path),
            symbols: debug.symbols,
        });
    }
    None
}

/// The debug file of `image` from a debuginfod server (or its cache), when it has a
/// build id and a server has the file. Asked last: only where nothing local names the
/// functions.
pub(crate) fn from_debuginfod(
    image: &ElfImage,
    object_path: &Path,
    debuginfod: &Debuginfod,
) -> Option<ExtraSymbols> {
    let id = image.build_id.as_deref()?;
    let (path, debug) = debuginfod.find(id, object_path, |data| {
        parse_compatible(data, image).filter(|debug| debug.build_id.as_deref() == Some(id))
    })?;
    Some(ExtraSymbols {
        source: SymbolSource::Debuginfod(path),
        symbols: debug.symbols,
    })
}

fn mini_debuginfo(image: &ElfImage) -> Option<ExtraSymbols> {
    let compressed = image.gnu_debugdata.as_deref()?;
    let data = decompress_xz(compressed, MAX_DEBUGDATA_BYTES).ok()?;
    let inner = parse_compatible(&data, image)?;
    Some(ExtraSymbols {
        source: SymbolSource::MiniDebugInfo,
        symbols: inner.symbols,
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn read_debug_file(path: &Path, object: &ElfImage) -> Option<ElfImage> {
    let data = read_capped(path, MAX_DEBUG_FILE_BYTES).ok()?;
    parse_compatible(&data, object)
}

/// Parses `data` as debug info for `object`: same class, byte order and machine.
fn parse_compatible(data: &[u8], object: &ElfImage) -> Option<ElfImage> {
    let debug = ElfImage::parse(data).ok()?;
    (debug.is_64 == object.is_64
        && debug.big_endian == object.big_endian
        && debug.machine == object.machine)
        .then_some(debug)
}

/// Reads a file, refusing files larger than `cap`.
pub fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    // Sized from the file's length up front: growing by doubling copied a 25 MiB
    // mariadbd several times over, a tenth of resolving it.
    let expected = file
        .metadata()
        .map_or(0, |m| m.len().min(cap.saturating_add(1)));
    let mut data = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    file.take(cap.saturating_add(1)).read_to_end(&mut data)?;
    if data.len() as u64 > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {cap} bytes"),
        ));
    }
    Ok(data)
}

/// Why xz data could not be decompressed.
#[derive(Debug, thiserror::Error)]
pub enum XzError {
    #[error("compressed data larger than {MAX_DEBUGDATA_COMPRESSED} bytes")]
    InputTooLarge,
    #[error("decompresses to more than {0} bytes")]
    OutputTooLarge(usize),
    #[error("bad xz data: {0}")]
    Corrupt(String),
}

/// Decompresses an xz stream, failing once the output would exceed `cap` bytes.
pub fn decompress_xz(compressed: &[u8], cap: usize) -> Result<Vec<u8>, XzError> {
    if compressed.len() > MAX_DEBUGDATA_COMPRESSED {
        return Err(XzError::InputTooLarge);
    }
    // The decoder streams; its dictionary is bounded by the memory limit (KiB).
    let reader = lzma_rust2::XzReader::new_mem_limit(compressed, false, XZ_MEM_LIMIT_KIB);
    let mut out = Vec::new();
    reader
        .take(cap as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| XzError::Corrupt(e.to_string()))?;
    if out.len() > cap {
        return Err(XzError::OutputTooLarge(cap));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compresses with the `xz` tool, as MiniDebugInfo is built.
    fn xz(data: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        let mut child = Command::new("xz")
            .args(["-c", "-T1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run xz (apt-get install xz-utils)");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(data)
            .expect("feed xz");
        let out = child.wait_with_output().expect("xz output");
        assert!(out.status.success());
        out.stdout
    }

    #[test]
    fn xz_round_trip_and_cap() {
        let data = vec![7u8; 100_000];
        let packed = xz(&data);
        assert_eq!(decompress_xz(&packed, 1 << 20).expect("fits"), data);
        assert!(matches!(
            decompress_xz(&packed, 50_000),
            Err(XzError::OutputTooLarge(50_000))
        ));
    }

    #[test]
    fn xz_garbage_is_an_error() {
        assert!(decompress_xz(b"", 1 << 20).is_err());
        assert!(decompress_xz(b"\xfd7zXZ\0garbage", 1 << 20).is_err());
        // A bomb: 64 MiB of zeros packs to ~10 KiB; a 1 MiB cap stops it early.
        let bomb = xz(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 64 << 10);
        assert!(matches!(
            decompress_xz(&bomb, 1 << 20),
            Err(XzError::OutputTooLarge(_))
        ));
        let mut packed = xz(b"hello world hello world");
        let n = packed.len();
        if let Some(b) = packed.get_mut(n / 2) {
            *b ^= 0xff;
        }
        assert!(decompress_xz(&packed, 1 << 20).is_err());
        for len in 0..n {
            let _ = decompress_xz(packed.get(..len).unwrap_or_default(), 1 << 20);
        }
    }
}
