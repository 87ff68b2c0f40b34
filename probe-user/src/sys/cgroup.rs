//! Reader of cgroup v2 directories (`--cgroup`): the one place that names
//! `cgroup.procs`, for the session's process set and the in-situ meter's.

use std::{
    ffi::CString,
    fs, io,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

/// The file of a cgroup v2 directory that lists its processes.
const PROCS: &str = "cgroup.procs";

/// `statfs`'s `f_type` of cgroup2 (`CGROUP2_SUPER_MAGIC`, linux/magic.h) ...
const CGROUP2_MAGIC: i64 = 0x6367_7270;
/// ... and of a cgroup v1 hierarchy (`CGROUP_SUPER_MAGIC`).
const CGROUP1_MAGIC: i64 = 0x0027_e0eb;

/// What a directory given as a cgroup is, by the filesystem it is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A cgroup v2 directory (it has a `cgroup.procs`).
    V2,
    /// A directory of a cgroup v1 hierarchy: its `cgroup.procs` lists its processes
    /// too, but not those of its sub-cgroups in the same way, and its controllers are
    /// another interface.
    V1,
    /// Not a cgroup at all, or a cgroup2 file other than a directory.
    Other,
}

/// What `dir` is: its filesystem's magic number (`statfs`), and for cgroup2 a
/// `cgroup.procs` in it.
pub fn kind(dir: &Path) -> io::Result<Kind> {
    let c_path = CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: all-zero bytes are a valid `statfs` (integers and arrays of them).
    let mut stats: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs reads the NUL-terminated path `c_path` holds and writes one
    // `statfs` into `stats`, which lives across the call.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut stats) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(
        clippy::useless_conversion,
        reason = "f_type is an i64 on x86-64, another integer elsewhere"
    )]
    let magic = i64::from(stats.f_type);
    Ok(match magic {
        CGROUP2_MAGIC if dir.join(PROCS).is_file() => Kind::V2,
        CGROUP1_MAGIC => Kind::V1,
        _ => Kind::Other,
    })
}

/// Which directory `dir` is now (its inode): a cgroup removed and made again at the
/// same path is another one. `None` once it is gone.
pub fn identity(dir: &Path) -> Option<(u64, u64)> {
    fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// Every process in a cgroup v2 directory and its sub-cgroups, in `cgroup.procs`
/// order; the first directory or list that cannot be read fails it, but for a
/// sub-cgroup removed during the walk (a unit or container that stopped: its processes
/// are gone), which a host where they come and go would otherwise fail every round.
pub fn members(dir: &Path) -> io::Result<Vec<u32>> {
    walk(dir, false)
}

/// As [`members`], but a directory or list that cannot be read counts as empty (a
/// sub-cgroup removed meanwhile: its processes are gone or counted already).
pub fn readable_members(dir: &Path) -> Vec<u32> {
    walk(dir, true).unwrap_or_default()
}

/// Walks `dir` and its sub-cgroups; with `skip_unreadable` it never fails.
fn walk(dir: &Path, skip_unreadable: bool) -> io::Result<Vec<u32>> {
    let root = dir;
    let mut pids = Vec::new();
    let mut dirs: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let vanished = |e: &io::Error| dir != root && e.kind() == io::ErrorKind::NotFound;
        let fails = |e: &io::Error| !skip_unreadable && !vanished(e);
        match fs::read_to_string(dir.join(PROCS)) {
            Ok(procs) => pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok())),
            Err(e) if fails(&e) => return Err(e),
            Err(_) => continue,
        }
        match fs::read_dir(&dir) {
            Ok(entries) => dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            ),
            Err(e) if fails(&e) => return Err(e),
            Err(_) => {}
        }
    }
    Ok(pids)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree of fake cgroup directories: the walk reads every level. A sub-cgroup with
    /// no list is one removed meanwhile (cgroupfs gives every directory one), which both
    /// readers skip; the root gone fails the strict reader alone.
    #[test]
    fn walks_sub_cgroups_strictly_or_leniently() {
        let root = std::env::temp_dir().join(format!("probetop-cgroup-{}", std::process::id()));
        let sub = root.join("sub");
        let bare = sub.join("bare");
        fs::create_dir_all(&bare).unwrap();
        fs::write(root.join(PROCS), "10\n11\n").unwrap();
        fs::write(sub.join(PROCS), "12\nnot a pid\n").unwrap();
        // A temporary directory is no cgroup, whatever files it holds.
        assert_eq!(kind(&root).unwrap(), Kind::Other);
        assert_eq!(readable_members(&root), vec![10, 11, 12]);
        assert_eq!(members(&root).unwrap(), vec![10, 11, 12]);
        fs::write(bare.join(PROCS), "13\n").unwrap();
        assert_eq!(members(&root).unwrap(), vec![10, 11, 12, 13]);
        let gone = root.join("gone");
        assert_eq!(readable_members(&gone), Vec::<u32>::new());
        assert_eq!(
            members(&gone).map_err(|e| e.kind()),
            Err(io::ErrorKind::NotFound)
        );
        fs::remove_dir_all(&root).unwrap();
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    /// The cgroup2 root of this machine, where one is mounted, is told apart from
    /// ordinary directories by its filesystem, not by its files.
    #[test]
    fn a_cgroup2_mount_is_v2() {
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let v2 = mounts.lines().find_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, at, fs_type) = (fields.next()?, fields.next()?, fields.next()?);
            (fs_type == "cgroup2").then(|| PathBuf::from(at))
        });
        match v2 {
            Some(root) => assert_eq!(kind(&root).unwrap(), Kind::V2),
            None => eprintln!("skipped: no cgroup2 mount on this machine"),
        }
        assert_eq!(kind(Path::new("/")).unwrap(), Kind::Other);
        assert!(kind(Path::new("/nonexistent/probetop")).is_err());
    }
}
