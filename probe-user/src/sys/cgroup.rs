//! Reader of cgroup v2 directories (`--cgroup`): the one place that names
//! `cgroup.procs`, for the session's process set and the in-situ meter's; and of the
//! memory limit of probetop's own cgroup (v2 `memory.max`, or v1's
//! `memory.limit_in_bytes` on hosts that still mount the v1 memory controller).

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
pub(crate) enum Kind {
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
pub(crate) fn kind(dir: &Path) -> io::Result<Kind> {
    let c_path = CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: all-zero bytes are a valid `statfs` (integers and arrays of them).
    let mut stats: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs reads the NUL-terminated path `c_path` holds and writes one
    // `statfs` into `stats`, which lives across the call.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut stats) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // f_type is an i64 with glibc and a u64 with musl (the static dist build); a
    // magic that does not fit an i64 is no cgroup's.
    #[allow(
        clippy::useless_conversion,
        clippy::unnecessary_fallible_conversions,
        reason = "f_type is an i64 with glibc, a u64 with musl"
    )]
    let magic = i64::try_from(stats.f_type).unwrap_or(-1);
    Ok(match magic {
        CGROUP2_MAGIC if dir.join(PROCS).is_file() => Kind::V2,
        CGROUP1_MAGIC => Kind::V1,
        _ => Kind::Other,
    })
}

/// Which directory `dir` is now (its inode): a cgroup removed and made again at the
/// same path is another one. `None` once it is gone.
pub(crate) fn identity(dir: &Path) -> Option<(u64, u64)> {
    fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// Every process in a cgroup v2 directory and its sub-cgroups, in `cgroup.procs`
/// order; the first directory or list that cannot be read fails it, but for a
/// sub-cgroup removed during the walk (a unit or container that stopped: its processes
/// are gone), which a host where they come and go would otherwise fail every round.
pub(crate) fn members(dir: &Path) -> io::Result<Vec<u32>> {
    walk(dir, false)
}

/// As [`members`], but a directory or list that cannot be read counts as empty (a
/// sub-cgroup removed meanwhile: its processes are gone or counted already).
pub(crate) fn readable_members(dir: &Path) -> Vec<u32> {
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

/// The memory probetop's own cgroup (and its ancestors) still allow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryRoom {
    /// The tightest limit on the way up, bytes, and the directory that sets it.
    pub limit: u64,
    pub dir: PathBuf,
    /// Bytes that directory's cgroup uses now, less its inactive page cache (which the
    /// kernel reclaims before it kills anything).
    pub used: u64,
}

impl MemoryRoom {
    /// Bytes left under the limit.
    pub(crate) fn left(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }
}

/// Limits at or above this are "no limit" (v1 writes 2^63 rounded to a page).
const NO_LIMIT: u64 = 1 << 62;

/// The tightest memory limit over probetop's own cgroup and its ancestors, or `None`
/// when there is none (or it cannot be read).
pub(crate) fn own_memory_room() -> Option<MemoryRoom> {
    let cgroups = fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (mount, path, v2) = memory_cgroup_of(&cgroups, &mountinfo)?;
    let (limit_file, usage_file, inactive_key) = if v2 {
        ("memory.max", "memory.current", "inactive_file")
    } else {
        (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        )
    };
    let read_u64 = |dir: &Path, name: &str| -> Option<u64> {
        fs::read_to_string(dir.join(name)).ok()?.trim().parse().ok()
    };
    let mut tightest: Option<MemoryRoom> = None;
    let mut dir = mount.join(path.trim_start_matches('/'));
    loop {
        // "max" (v2) does not parse: no limit here.
        if let Some(limit) = read_u64(&dir, limit_file).filter(|&l| l < NO_LIMIT) {
            let usage = read_u64(&dir, usage_file).unwrap_or(0);
            let inactive = fs::read_to_string(dir.join("memory.stat"))
                .ok()
                .and_then(|stat| stat_value(&stat, inactive_key))
                .unwrap_or(0);
            let room = MemoryRoom {
                limit,
                dir: dir.clone(),
                used: usage.saturating_sub(inactive),
            };
            if tightest.as_ref().is_none_or(|t| room.left() < t.left()) {
                tightest = Some(room);
            }
        }
        if dir == mount || !dir.pop() || !dir.starts_with(&mount) {
            break;
        }
    }
    tightest
}

/// `key VALUE` in a `memory.stat`.
fn stat_value(stat: &str, key: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Where the memory controller of this process's cgroup is: the mount point, the
/// cgroup's path below it, and whether it is cgroup v2. A v1 memory hierarchy wins
/// where there is one (its controller is then not in v2).
fn memory_cgroup_of(cgroups: &str, mountinfo: &str) -> Option<(PathBuf, String, bool)> {
    // mountinfo: ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS... - FSTYPE SOURCE SUPER_OPTIONS
    let mounts: Vec<(&str, &str, &str, &str)> = mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let mut rest = right.split(' ');
            let fstype = rest.next()?;
            let options = rest.nth(1).unwrap_or("");
            Some((*fields.get(3)?, *fields.get(4)?, fstype, options))
        })
        .collect();
    let relative = |path: &str, root: &str| -> String {
        path.strip_prefix(root)
            .filter(|_| root != "/")
            .unwrap_or(path)
            .to_string()
    };
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == "memory")
            && let Some((root, point, _, _)) = mounts.iter().find(|(_, _, fstype, options)| {
                *fstype == "cgroup" && options.split(',').any(|o| o == "memory")
            })
        {
            return Some((PathBuf::from(point), relative(path, root), false));
        }
    }
    let path = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
    let (root, point, _, _) = mounts
        .iter()
        .find(|(_, _, fstype, _)| *fstype == "cgroup2")?;
    let dir = PathBuf::from(point).join(relative(path, root).trim_start_matches('/'));
    // The memory controller is in v2 only where its files are.
    dir.join("memory.current")
        .is_file()
        .then(|| (PathBuf::from(point), relative(path, root), true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_memory_controller_v1_or_v2() {
        let v1 = "4:memory:/a/b\n0::/\n";
        let mountinfo = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
            41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            memory_cgroup_of(v1, mountinfo),
            Some((
                PathBuf::from("/sys/fs/cgroup/memory"),
                "/a/b".to_string(),
                false
            ))
        );
        assert_eq!(
            stat_value(
                "cache 5\ninactive_file 7\ntotal_inactive_file 9\n",
                "inactive_file"
            ),
            Some(7)
        );
        assert_eq!(
            stat_value("total_inactive_file 9\n", "total_inactive_file"),
            Some(9)
        );
    }

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
