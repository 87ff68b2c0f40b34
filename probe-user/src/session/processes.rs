//! Which processes a run probes: one `--pid` (the kernel's own pid filter), or a set
//! (several `--pid`, `--follow-forks`, `--cgroup`) whose hits the eBPF programs keep
//! while the probes are attached for every process mapping the files. Also the hint for
//! a probe silent in a process whose children map its file.
use std::{
    collections::{BTreeSet, HashMap},
    path::PathBuf,
    time::Duration,
};

use crate::sys::{
    cgroup,
    maps::{self, FileId},
};
use crate::{UsageError, attach::ProcessSet, cli::RunArgs};

/// How often a cgroup's member list is read again for processes moved into it.
const CGROUP_POLL: Duration = Duration::from_millis(200);

/// How long a probe may stay at 0 hits before the --follow-forks hint looks at it.
pub(super) const HINT_AFTER: Duration = Duration::from_secs(5);

/// The processes asked for.
#[derive(Debug, Clone)]
pub(super) struct Scope {
    pub pids: Vec<u32>,
    pub follow_forks: bool,
    pub cgroup: Option<PathBuf>,
}

impl Scope {
    pub fn from_args(args: &RunArgs) -> Result<Self, UsageError> {
        if let Some(dir) = &args.cgroup
            && !cgroup::is_cgroup_dir(dir)
        {
            return Err(UsageError(format!(
                "--cgroup {}: not a cgroup v2 directory (no cgroup.procs in it); give a directory under /sys/fs/cgroup",
                dir.display()
            )));
        }
        Ok(Self {
            pids: args.pids.clone(),
            follow_forks: args.follow_forks,
            cgroup: args.cgroup.clone(),
        })
    }

    /// Whether hits are filtered by the set rather than by the kernel's pid filter.
    pub fn several(&self) -> bool {
        self.pids.len() > 1 || self.follow_forks || self.cgroup.is_some()
    }

    /// The process the specs are resolved in, whose exit ends the run: the first
    /// `--pid`, else the cgroup's first member.
    pub fn primary(&self) -> Result<u32, UsageError> {
        if let Some(&pid) = self.pids.first() {
            return Ok(pid);
        }
        let Some(dir) = &self.cgroup else {
            return Err(UsageError(
                "which process? give --pid PID (for example --pid $(pidof mariadbd)) or --cgroup PATH".into(),
            ));
        };
        let members = cgroup::members(dir)
            .map_err(|e| UsageError(format!("--cgroup {}: cannot read it: {e}", dir.display())))?;
        members.into_iter().next().ok_or_else(|| {
            UsageError(format!(
                "--cgroup {}: no process in it: give --pid too, or start the service first",
                dir.display()
            ))
        })
    }
}

/// Fills the set: the roots (already mapped to their processes), the cgroup's
/// members, and with `--follow-forks` every descendant. Run after the fork tracepoint
/// is attached: a process forked by a member after the member joined is added by the
/// kernel; one forked before is in /proc when its parent's children are looked for,
/// which happens after the parent joined. Returns how many processes the set holds.
pub(super) fn seed(set: &mut ProcessSet, scope: &Scope, roots: &[u32]) -> anyhow::Result<usize> {
    for &pid in roots {
        set.add(pid)?;
    }
    if let Some(dir) = &scope.cgroup {
        for pid in cgroup::members(dir)? {
            set.add(pid)?;
        }
    }
    if scope.follow_forks {
        // Until nothing new: a child found may have children of its own.
        loop {
            let mut added = false;
            for (pid, parent) in crate::sys::procfs::parents() {
                if set.contains(parent) && set.add(pid)? {
                    added = true;
                }
            }
            if !added {
                break;
            }
        }
    }
    Ok(set.members().len())
}

/// Adds processes moved into the cgroup later (a `docker exec`, a restarted unit's new
/// main process), every 200 ms until aborted; their forks join at once with
/// `--follow-forks`, and a process forked inside is found here otherwise.
/// With `announce` (headless runs), each newcomer is said on stderr.
pub(super) fn spawn_cgroup_poller(
    mut set: ProcessSet,
    dir: PathBuf,
    announce: bool,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(CGROUP_POLL);
        loop {
            tick.tick().await;
            let Ok(members) = cgroup::members(&dir) else {
                continue;
            };
            for pid in members {
                // A full set or a failed update: the next round tries again.
                if set.add(pid).unwrap_or(false) && announce {
                    crate::sys::say(&format!(
                        "probetop: pid {pid} entered {}: probing it",
                        dir.display()
                    ));
                }
            }
        }
    })
}

/// Every process descended from `root` now.
fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, parent) in crate::sys::procfs::parents() {
        children.entry(parent).or_default().push(pid);
    }
    let mut found = Vec::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        for &child in children.get(&pid).map_or(&[][..], Vec::as_slice) {
            found.push(child);
            todo.push(child);
        }
    }
    found.sort_unstable();
    found
}

/// A file as /proc/PID/maps names it: device major, minor, and inode.
type FileKey = (u32, u32, u64);

/// (device, inode) of every file `pid` maps.
fn mapped_files(pid: u32) -> BTreeSet<FileKey> {
    let Ok(maps) = maps::read_maps(pid) else {
        return BTreeSet::new();
    };
    maps.iter()
        .filter(|m| m.inode != 0)
        .map(|m| (m.dev_major, m.dev_minor, m.inode))
        .collect()
}

/// For probes that took no hit in `pid` alone: a line naming the descendants of `pid`
/// that map the probe's file, and `--follow-forks`. `silent` holds (spec, file) of each
/// such probe; one line per file.
pub(super) fn silent_probe_hints(pid: u32, silent: &[(String, PathBuf)]) -> Vec<String> {
    if silent.is_empty() {
        return Vec::new();
    }
    let family = descendants(pid);
    if family.is_empty() {
        return Vec::new();
    }
    let maps: Vec<(u32, BTreeSet<FileKey>)> =
        family.iter().map(|&p| (p, mapped_files(p))).collect();
    let mut by_file: Vec<(PathBuf, Vec<&str>)> = Vec::new();
    for (spec, file) in silent {
        match by_file.iter_mut().find(|(f, _)| f == file) {
            Some((_, specs)) => specs.push(spec),
            None => by_file.push((file.clone(), vec![spec])),
        }
    }
    let mut lines = Vec::new();
    for (file, specs) in by_file {
        let Ok(id) = FileId::of(&file) else {
            continue;
        };
        let key = (id.dev_major, id.dev_minor, id.inode);
        let mapping: Vec<u32> = maps
            .iter()
            .filter(|(_, files)| files.contains(&key))
            .map(|(p, _)| *p)
            .collect();
        if mapping.is_empty() {
            continue;
        }
        let shown: Vec<String> = mapping.iter().take(5).map(u32::to_string).collect();
        let more = if mapping.len() > 5 {
            format!(" and {} more", mapping.len() - 5)
        } else {
            String::new()
        };
        lines.push(format!(
            "{} took 0 hits in pid {pid}, but {} of its child processes map the same file (pid {}{more}): the work may happen there; --follow-forks probes them too",
            specs.join(", "),
            mapping.len(),
            shown.join(", "),
        ));
    }
    lines
}
