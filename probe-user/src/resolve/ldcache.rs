//! Library names to paths through the dynamic linker's cache (`/etc/ld.so.cache`,
//! glibc's "new" format `glibc-ld.so.cache1.1`), or `ldconfig -p` when it cannot be read.

use std::path::{Path, PathBuf};

const MAGIC_NEW: &[u8] = b"glibc-ld.so.cache1.1";
const MAGIC_OLD: &[u8] = b"ld.so-1.7.0";
/// Header of the new format: magic+version (20), nlibs, len_strings, flags+pad,
/// extension offset, 3 unused words.
const NEW_HEADER_LEN: usize = 48;
const NEW_ENTRY_LEN: usize = 24;
const OLD_HEADER_LEN: usize = 16;
const OLD_ENTRY_LEN: usize = 12;

/// `flags` of an entry: ELF libc6 library, and the architecture bits.
const FLAG_TYPE_MASK: i32 = 0x00ff;
const FLAG_ELF_LIBC6: i32 = 0x0003;
const FLAG_REQUIRED_MASK: i32 = 0xff00;
const FLAG_X8664_LIB64: i32 = 0x0300;

/// One library the cache knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheEntry {
    /// The soname-like key (`libc.so.6`).
    pub name: String,
    pub path: PathBuf,
    pub flags: i32,
}

impl CacheEntry {
    /// Whether the entry is a libc6 library for the architecture probetop runs on.
    pub(crate) fn is_native(&self) -> bool {
        let arch = self.flags & FLAG_REQUIRED_MASK;
        let native = if cfg!(target_arch = "x86_64") {
            arch == FLAG_X8664_LIB64
        } else {
            true
        };
        self.flags & FLAG_TYPE_MASK == FLAG_ELF_LIBC6 && native
    }
}

/// Parses an ld.so.cache image; malformed data yields an error, never a panic.
pub(crate) fn parse(data: &[u8]) -> Result<Vec<CacheEntry>, String> {
    // An old-format prefix may precede the new table (glibc < 2.32 wrote both).
    let start = if data.starts_with(MAGIC_OLD) {
        let n = read_u32(data, MAGIC_OLD.len().next_multiple_of(4)).ok_or("truncated old header")?
            as usize;
        let end = n
            .checked_mul(OLD_ENTRY_LEN)
            .and_then(|l| l.checked_add(OLD_HEADER_LEN))
            .ok_or("bad old entry count")?;
        end.checked_next_multiple_of(8).ok_or("bad old size")?
    } else {
        0
    };
    let new = data.get(start..).ok_or("truncated cache")?;
    if !new.starts_with(MAGIC_NEW) {
        return Err("not a glibc-ld.so.cache1.1 file".into());
    }
    let nlibs = read_u32(new, 20).ok_or("truncated header")? as usize;
    let table_end = nlibs
        .checked_mul(NEW_ENTRY_LEN)
        .and_then(|l| l.checked_add(NEW_HEADER_LEN))
        .ok_or("bad entry count")?;
    if table_end > new.len() {
        return Err("entry table runs past the end".into());
    }
    let mut out = Vec::with_capacity(nlibs);
    for i in 0..nlibs {
        let at = NEW_HEADER_LEN + i * NEW_ENTRY_LEN;
        let (Some(flags), Some(key), Some(value)) = (
            read_u32(new, at),
            read_u32(new, at + 4),
            read_u32(new, at + 8),
        ) else {
            return Err("truncated entry".into());
        };
        // String offsets are relative to the start of the new-format header.
        let (Some(name), Some(path)) = (c_string(new, key), c_string(new, value)) else {
            continue;
        };
        out.push(CacheEntry {
            name,
            path: PathBuf::from(path),
            flags: flags as i32,
        });
    }
    Ok(out)
}

fn read_u32(data: &[u8], at: usize) -> Option<u32> {
    let bytes: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
    // The cache is written in the host's byte order.
    Some(u32::from_ne_bytes(bytes))
}

fn c_string(data: &[u8], at: u32) -> Option<String> {
    let rest = data.get(at as usize..)?;
    let nul = rest.iter().position(|&b| b == 0)?;
    String::from_utf8(rest.get(..nul)?.to_vec()).ok()
}

/// Parses `ldconfig -p` output: `\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6`.
pub(crate) fn parse_ldconfig_output(text: &str) -> Vec<CacheEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, path) = line.split_once(" => ")?;
            let left = left.trim();
            let (name, tags) = left.split_once(' ')?;
            let native = if cfg!(target_arch = "x86_64") {
                tags.contains("x86-64")
            } else {
                true
            };
            let flags = FLAG_ELF_LIBC6 | if native { FLAG_X8664_LIB64 } else { 0x0800 };
            Some(CacheEntry {
                name: name.to_string(),
                path: PathBuf::from(path.trim()),
                flags,
            })
        })
        .collect()
}

/// The cache's entries: the file under `root` (`/` or `/proc/PID/root`), else `ldconfig -p`.
pub(crate) fn entries(root: &Path) -> Vec<CacheEntry> {
    let file = root.join("etc/ld.so.cache");
    if let Ok(data) = std::fs::read(&file)
        && let Ok(entries) = parse(&data)
    {
        return entries;
    }
    std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| parse_ldconfig_output(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_default()
}

/// Whether a library file name answers to `name` as users write it: `libc` matches
/// `libc.so.6` and `libc-2.31.so`, `libstdc++` matches `libstdc++.so.6`, and a name with
/// `.so` matches itself and its versioned forms.
pub(crate) fn library_name_matches(name: &str, file_name: &str) -> bool {
    if file_name == name {
        return true;
    }
    let Some(rest) = file_name.strip_prefix(name) else {
        return false;
    };
    if name.contains(".so") {
        return rest.starts_with('.');
    }
    rest.starts_with(".so")
        || rest
            .strip_prefix('-')
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
}

/// Looks `name` up in the cache entries: native entries first, in cache order.
pub(crate) fn lookup(entries: &[CacheEntry], name: &str) -> Option<PathBuf> {
    let matches = |e: &&CacheEntry| library_name_matches(name, &e.name);
    entries
        .iter()
        .filter(|e| e.is_native())
        .find(matches)
        .or_else(|| entries.iter().find(matches))
        .map(|e| e.path.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(library_name_matches("libc", "libc.so.6"));
        assert!(library_name_matches("libc", "libc-2.31.so"));
        assert!(!library_name_matches("libc", "libcrypto.so.3"));
        assert!(!library_name_matches("libc", "libc-client.so"));
        assert!(library_name_matches("libstdc++", "libstdc++.so.6"));
        assert!(library_name_matches("libz.so", "libz.so.1"));
        assert!(!library_name_matches("libz.so", "libz.sox"));
        assert!(library_name_matches("libz.so.1", "libz.so.1"));
    }

    #[test]
    fn this_machines_cache_agrees_with_ldconfig() {
        let data = std::fs::read("/etc/ld.so.cache").expect("ld.so.cache");
        let parsed = parse(&data).expect("parse ld.so.cache");
        // /sbin is not on a Debian user's PATH.
        let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or("ldconfig");
        let out = std::process::Command::new(ldconfig)
            .arg("-p")
            .output()
            .expect("ldconfig -p");
        let text = String::from_utf8_lossy(&out.stdout);
        let listed = parse_ldconfig_output(&text);
        assert!(!listed.is_empty());
        assert_eq!(parsed.len(), listed.len());
        for (a, b) in parsed.iter().zip(&listed) {
            assert_eq!((&a.name, &a.path), (&b.name, &b.path));
            assert_eq!(a.is_native(), b.is_native(), "{a:?}");
        }
        let libc = lookup(&parsed, "libc").expect("libc in cache");
        assert!(libc.to_string_lossy().ends_with("libc.so.6"), "{libc:?}");
    }

    #[test]
    fn garbage_caches_are_errors() {
        assert!(parse(b"").is_err());
        assert!(parse(b"glibc-ld.so.cache1.1").is_err());
        let mut huge = b"glibc-ld.so.cache1.1".to_vec();
        huge.extend_from_slice(&u32::MAX.to_ne_bytes());
        huge.resize(48, 0);
        assert!(parse(&huge).is_err());
        let mut old = b"ld.so-1.7.0\0".to_vec();
        old.extend_from_slice(&u32::MAX.to_ne_bytes());
        assert!(parse(&old).is_err());
        // Entries pointing past the end are skipped.
        let mut one = b"glibc-ld.so.cache1.1".to_vec();
        one.extend_from_slice(&1u32.to_ne_bytes());
        one.resize(48, 0);
        one.extend_from_slice(&0x0303i32.to_ne_bytes());
        one.extend_from_slice(&9999u32.to_ne_bytes());
        one.extend_from_slice(&9999u32.to_ne_bytes());
        one.resize(72, 0);
        assert_eq!(parse(&one), Ok(vec![]));
    }
}
