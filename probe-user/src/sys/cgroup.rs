//! Reader of cgroup v2 directories (`--cgroup`): the one place that names
//! `cgroup.procs`, for the session's process set and the in-situ meter's.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

/// The file of a cgroup v2 directory that lists its processes.
const PROCS: &str = "cgroup.procs";

/// Whether `dir` is a cgroup v2 directory (it has a `cgroup.procs`).
pub fn is_cgroup_dir(dir: &Path) -> bool {
    dir.join(PROCS).is_file()
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
        assert!(is_cgroup_dir(&root));
        assert!(!is_cgroup_dir(&bare));
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
