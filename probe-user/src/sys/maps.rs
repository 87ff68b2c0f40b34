//! `/proc/PID/maps`: which files a process has mapped, and where. `resolve` turns a
//! mapping into a load bias (`resolve::elf::load_bias`); `cost`, `calibrate` and
//! `session` read it too.

use std::{fs, io, path::Path};

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    /// `rwxp`-style permissions.
    pub perms: String,
    /// File offset of `start`.
    pub offset: u64,
    /// Device as `major:minor` (hex in the file).
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    /// The path, without the ` (deleted)` suffix; `None` for anonymous mappings.
    /// Pseudo-paths like `[heap]` and `[vdso]` are kept as they are.
    pub path: Option<String>,
    /// The file was deleted (or replaced) after it was mapped.
    pub deleted: bool,
}

impl MapEntry {
    /// Whether the mapping is executable.
    pub fn executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// Whether this maps a file (not anonymous, not `[heap]`-style).
    pub fn is_file(&self) -> bool {
        self.inode != 0 && self.path.as_deref().is_some_and(|p| p.starts_with('/'))
    }
}

/// This process's executable, as a path the kernel resolves even when the file was
/// replaced on disk since.
pub(crate) const OWN_EXE: &str = "/proc/self/exe";

/// Reads and parses `/proc/PID/maps`.
pub(crate) fn read_maps(pid: u32) -> io::Result<Vec<MapEntry>> {
    Ok(parse_maps(&fs::read_to_string(format!(
        "/proc/{pid}/maps"
    ))?))
}

/// Parses maps text; lines that do not parse are skipped.
pub(crate) fn parse_maps(text: &str) -> Vec<MapEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MapEntry> {
    // Five space-separated fields, then padding, then the path (which may hold spaces).
    let mut rest = line;
    let mut field = || -> Option<&str> {
        let trimmed = rest.trim_start_matches(' ');
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (f, r) = trimmed.split_at(end);
        rest = r;
        (!f.is_empty()).then_some(f)
    };
    let range = field()?;
    let perms = field()?;
    let offset = field()?;
    let dev = field()?;
    let inode = field()?;
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    let path = rest.trim_start_matches(' ');
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(p) => (p, true),
        None => (path, false),
    };
    Some(MapEntry {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms: perms.to_string(),
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev_major: u32::from_str_radix(major, 16).ok()?,
        dev_minor: u32::from_str_radix(minor, 16).ok()?,
        inode: inode.parse().ok()?,
        path: (!path.is_empty()).then(|| path.to_string()),
        deleted,
    })
}

/// Identity of a file as maps shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
}

impl FileId {
    /// The identity of the file at `path` (following symlinks, so `/proc/PID/exe` works).
    pub(crate) fn of(path: &Path) -> io::Result<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = fs::metadata(path)?;
        let dev = meta.dev();
        // glibc's gnu_dev_major/minor encoding.
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        Ok(Self {
            dev_major: u32::try_from(major).unwrap_or(u32::MAX),
            dev_minor: u32::try_from(minor).unwrap_or(u32::MAX),
            inode: meta.ino(),
        })
    }

    /// Whether `entry` maps this file.
    pub(crate) fn matches(&self, entry: &MapEntry) -> bool {
        entry.inode == self.inode
            && entry.dev_major == self.dev_major
            && entry.dev_minor == self.dev_minor
    }
}

/// The mappings of one file: by identity when known, else by path.
pub(crate) fn mappings_of<'a>(
    maps: &'a [MapEntry],
    id: Option<FileId>,
    path: &'a str,
) -> impl Iterator<Item = &'a MapEntry> + 'a {
    maps.iter().filter(move |m| match id {
        Some(id) if id.matches(m) => true,
        _ => m.path.as_deref() == Some(path),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
55d0c8a00000-55d0c8a01000 r--p 00000000 fd:01 1234  /opt/my app/bin (x)
55d0c8a01000-55d0c8a02000 r-xp 00001000 fd:01 1234  /opt/my app/bin (x)
7f0000000000-7f0000001000 r-xp 00000000 08:02 99 /usr/lib/libgone.so (deleted)
7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]
7ffd3000-7ffd4000 rw-p 00000000 00:00 0
garbage line
";

    #[test]
    fn parses_spaces_deleted_and_anonymous() {
        let maps = parse_maps(SAMPLE);
        assert_eq!(maps.len(), 5);
        let m = &maps[1];
        assert_eq!(
            (m.start, m.end, m.offset, m.inode),
            (0x55d0c8a01000, 0x55d0c8a02000, 0x1000, 1234)
        );
        assert_eq!((m.dev_major, m.dev_minor), (0xfd, 1));
        assert_eq!(m.path.as_deref(), Some("/opt/my app/bin (x)"));
        assert!(m.executable() && !m.deleted && m.is_file());
        assert_eq!(maps[2].path.as_deref(), Some("/usr/lib/libgone.so"));
        assert!(maps[2].deleted);
        assert_eq!(maps[3].path.as_deref(), Some("[stack]"));
        assert!(!maps[3].is_file());
        assert_eq!(maps[4].path, None);
    }

    #[test]
    fn own_maps_have_own_exe() {
        let maps = read_maps(std::process::id()).expect("own maps");
        let id = FileId::of(Path::new("/proc/self/exe")).expect("stat own exe");
        assert!(maps.iter().any(|m| id.matches(m) && m.executable()));
    }
}
