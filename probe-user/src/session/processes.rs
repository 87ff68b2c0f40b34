//! Which processes a run probes: one `--pid` (the kernel's own pid filter), or a set
//! (several `--pid`, `--follow-forks`, `--cgroup`) whose hits the eBPF programs keep
//! while the probes are attached for every process mapping the files. Also the hint for
//! a probe silent in a process whose children map its file.
use std::{
    collections::{BTreeSet, HashMap},
    path::PathBuf,
    time::Duration,
};

use tokio::sync::oneshot;

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
    pub(super) fn from_args(args: &RunArgs) -> Result<Self, UsageError> {
        if let Some(dir) = &args.cgroup {
            let refused = |why: String| UsageError(format!("--cgroup {}: {why}", dir.display()));
            match cgroup::kind(dir) {
                Ok(cgroup::Kind::V2) => {}
                // Its cgroup.procs reads like v2's, and what it would be taken for fails
                // later with an unrelated error.
                Ok(cgroup::Kind::V1) => {
                    return Err(refused(
                        "a cgroup v1 directory; --cgroup needs a cgroup v2 directory (the cgroup2 mount: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host)".into(),
                    ));
                }
                Ok(cgroup::Kind::Other) => {
                    return Err(refused(
                        "not a cgroup v2 directory; --cgroup needs a directory of the cgroup2 mount (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host)".into(),
                    ));
                }
                Err(e) => return Err(refused(format!("cannot read it: {e}"))),
            }
        }
        Ok(Self {
            pids: args.pids.clone(),
            follow_forks: args.follow_forks,
            cgroup: args.cgroup.clone(),
        })
    }

    /// Whether hits are filtered by the set rather than by the kernel's pid filter.
    pub(super) fn several(&self) -> bool {
        self.pids.len() > 1 || self.follow_forks || self.cgroup.is_some()
    }

    /// The process the specs are resolved in, whose exit ends the run: the first
    /// `--pid`, else the cgroup's first member.
    pub(super) fn primary(&self) -> anyhow::Result<u32> {
        if let Some(&pid) = self.pids.first() {
            return Ok(pid);
        }
        let Some(dir) = &self.cgroup else {
            anyhow::bail!(crate::MissingInput(
                "which process? give --pid PID (for example --pid $(pidof mariadbd)) or --cgroup PATH".into(),
            ));
        };
        let members = cgroup::members(dir)
            .map_err(|e| UsageError(format!("--cgroup {}: cannot read it: {e}", dir.display())))?;
        Ok(members.into_iter().next().ok_or_else(|| {
            UsageError(format!(
                "--cgroup {}: no process in it: give --pid too, or start the service first",
                dir.display()
            ))
        })?)
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

/// What the cgroup poller keeps the set to.
pub(super) struct CgroupPoll {
    pub dir: PathBuf,
    /// The `--pid` processes: counted whether in the cgroup or not.
    pub named: Vec<u32>,
    /// `-F`: the processes forked from the named ones count too, wherever they are.
    pub follow_forks: bool,
    /// Say each process that enters or leaves (headless runs).
    pub announce: bool,
}

/// Keeps the set to the cgroup every 200 ms until aborted: adds processes moved in
/// later (a `docker exec`, a restarted unit's new main process; their forks join at
/// once with the `task_newtask` tracepoint), and takes out those that left it (unless
/// named with `--pid`, or forked from one with `-F`), so their later hits are not
/// counted. When the cgroup is removed (every process left it) that is said once; the
/// receiver then resolves if nothing named with `--pid` is left to count, which ends
/// the run (docs/user-guide.md#several-processes).
pub(super) fn spawn_cgroup_poller(
    mut set: ProcessSet,
    poll: CgroupPoll,
) -> (tokio::task::JoinHandle<()>, oneshot::Receiver<()>) {
    let (removed, ends) = oneshot::channel();
    let task = tokio::spawn(async move {
        let identity = cgroup::identity(&poll.dir);
        let mut tick = tokio::time::interval(CGROUP_POLL);
        loop {
            tick.tick().await;
            // A cgroup made again at the same path is another one: its processes were
            // not asked for.
            if identity.is_some() && cgroup::identity(&poll.dir) == identity {
                keep_to_cgroup(&mut set, &poll);
                continue;
            }
            let dir = poll.dir.display();
            if poll.named.is_empty() {
                crate::sys::say(&format!(
                    "probetop: {dir} was removed (no process is left in it): stopping, as nothing in it can be counted any more"
                ));
                let _ = removed.send(());
            } else {
                take_out(&mut set, &poll, &BTreeSet::new());
                crate::sys::say(&format!(
                    "probetop: {dir} was removed (no process is left in it): counting the --pid processes alone from now on"
                ));
            }
            return;
        }
    });
    (task, ends)
}

/// One round of the poller: the cgroup's processes in, those that left it out.
fn keep_to_cgroup(set: &mut ProcessSet, poll: &CgroupPoll) {
    // The set before the cgroup: a process forked inside after this read joins both,
    // in that order (the kernel puts a child in its cgroup before the `task_newtask`
    // tracepoint adds it to the set), so it is never taken for one that left.
    let before = set.members();
    // Unreadable now (removed meanwhile): the next round says so.
    let Ok(members) = cgroup::members(&poll.dir) else {
        return;
    };
    for &pid in &members {
        // A full set or a failed update: the next round tries again.
        if set.add(pid).unwrap_or(false) && poll.announce {
            crate::sys::say(&format!(
                "probetop: pid {pid} entered {}: probing it",
                poll.dir.display()
            ));
        }
    }
    let inside: BTreeSet<u32> = members.into_iter().collect();
    if before
        .iter()
        .all(|pid| inside.contains(pid) || poll.named.contains(pid))
    {
        return;
    }
    // The walk reads one directory after the other: a process moved between two of
    // them meanwhile can be missed, but not by two walks in a row.
    let Ok(again) = cgroup::members(&poll.dir) else {
        return;
    };
    let inside: BTreeSet<u32> = inside.into_iter().chain(again).collect();
    take_out(set, poll, &inside);
}

/// Takes out of the set every process not `inside` the cgroup, but those named with
/// `--pid` and, with `-F`, those forked from them.
fn take_out(set: &mut ProcessSet, poll: &CgroupPoll, inside: &BTreeSet<u32>) {
    let mut left: Vec<u32> = set
        .members()
        .into_iter()
        .filter(|pid| !inside.contains(pid) && !poll.named.contains(pid))
        .collect();
    if left.is_empty() {
        return;
    }
    if poll.follow_forks && !poll.named.is_empty() {
        let parents: HashMap<u32, u32> = crate::sys::procfs::parents().into_iter().collect();
        left.retain(|&pid| !descends_from(pid, &poll.named, &parents));
    }
    for pid in left {
        // An exited process leaves its cgroup before its pid is freed: taken out
        // silently (the kernel would at the free).
        let alive =
            crate::sys::procfs::Stat::of(pid).is_some_and(|s| !matches!(s.state, 'Z' | 'X'));
        if set.remove(pid).unwrap_or(false) && alive && poll.announce {
            crate::sys::say(&format!(
                "probetop: pid {pid} left {}: its hits are not counted from now on",
                poll.dir.display()
            ));
        }
    }
}

/// Whether `pid` was forked (at any depth) from one of `roots`.
fn descends_from(pid: u32, roots: &[u32], parents: &HashMap<u32, u32>) -> bool {
    let mut at = pid;
    // A parent chain is short; the bound only guards against a cycle in a racy read.
    for _ in 0..4096 {
        match parents.get(&at) {
            Some(&parent) if roots.contains(&parent) => return true,
            Some(&parent) if parent > 1 && parent != at => at = parent,
            _ => return false,
        }
    }
    false
}

/// With several processes the probes are attached for every process mapping their
/// files, and so is a USDT probe's semaphore: the kernel raises it in each of them,
/// counted or not, and their code guarded by it (argument preparation, often a
/// formatted string) runs while probetop is attached. One line naming them, if any.
pub(super) fn file_wide_semaphores_line(probes: &[super::probe::Probe]) -> Option<String> {
    let mut names: Vec<&str> = Vec::new();
    let mut objects: Vec<String> = Vec::new();
    for probe in probes {
        if probe
            .point
            .usdt
            .as_ref()
            .is_none_or(|u| u.semaphore_offset.is_none())
        {
            continue;
        }
        if !names.contains(&probe.point.name.as_str()) {
            names.push(&probe.point.name);
        }
        let object = probe.point.object.display().to_string();
        if !objects.contains(&object) {
            objects.push(object);
        }
    }
    if names.is_empty() {
        return None;
    }
    let shown = names.iter().take(3).copied().collect::<Vec<_>>().join(", ");
    let more = match names.len() {
        0..=3 => String::new(),
        n => format!(" and {} more", n - 3),
    };
    Some(format!(
        "probetop: the semaphore of {shown}{more} is raised in every process mapping {}, not only those counted (with several processes probes are file-wide): their code guarded by it runs while probetop is attached",
        objects.join(", ")
    ))
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

#[cfg(test)]
mod tests {
    use super::descends_from;

    #[test]
    fn descent_follows_the_parent_chain() {
        // 10 -> 20 -> 30; 40 of init.
        let parents = [(20, 10), (30, 20), (40, 1), (10, 1)].into_iter().collect();
        assert!(descends_from(30, &[10], &parents));
        assert!(descends_from(20, &[10], &parents));
        assert!(!descends_from(40, &[10], &parents));
        assert!(
            !descends_from(10, &[10], &parents),
            "a root is no descendant of itself"
        );
        assert!(!descends_from(99, &[10], &parents), "gone");
    }
}
