//! The in-situ meter over a set of processes (`--follow-forks`, several `--pid`,
//! `--cgroup`): a pre-fork server's work happens in its children, so the CPU and work
//! of a window are summed over every process of the set at that moment.
//!
//! Each member is read with its own [`TargetMeter`] (its process CPU clock, its
//! `/proc/PID/io` or its threads' wakeups), and the set's running totals add every
//! member's increments since the last reading. A process that appears counts from its
//! start when it started after the last reading (a fork of a member is a member from
//! birth), else from when it is found. A process that is gone by the next reading took
//! its CPU since the last one along (its clock and /proc files go with it): the reading
//! counts it as lost, and the pairs of windows holding such a loss are dropped, and
//! counted, rather than measured short.

use std::{
    collections::{HashMap, HashSet},
    io,
    path::PathBuf,
};

use super::{AUTO_LOOK, AUTO_MIN_COUNT, MeterError, Reading, TargetMeter, WorkMeter};
use crate::sys::{cgroup, procfs::Stat};

/// Which processes make up the set.
#[derive(Debug, Clone, Default)]
pub(crate) struct Members {
    /// The `--pid`s.
    pub roots: Vec<u32>,
    /// With every process forked from a member.
    pub follow_forks: bool,
    /// With every process in this cgroup v2 directory and its sub-cgroups.
    pub cgroup: Option<PathBuf>,
}

impl Members {
    /// Every process of the set now: the roots, the cgroup's members, and with
    /// `follow_forks` the descendants of those and of `known` (a process whose parent
    /// exited is reparented, but stays a member).
    fn now(&self, known: impl Iterator<Item = u32>) -> HashSet<u32> {
        let mut set: HashSet<u32> = self.roots.iter().copied().chain(known).collect();
        if let Some(dir) = &self.cgroup {
            set.extend(cgroup::readable_members(dir));
        }
        if self.follow_forks {
            let parents = crate::sys::procfs::parents();
            // Until nothing new: a child found may have children of its own.
            loop {
                let before = set.len();
                for &(pid, parent) in &parents {
                    if set.contains(&parent) {
                        set.insert(pid);
                    }
                }
                if set.len() == before {
                    break;
                }
            }
        }
        set
    }
}

/// One process of the set, as last read.
#[derive(Debug)]
struct Member {
    /// With the pid, names the process (a pid reused by another is another member).
    start_ticks: u64,
    meter: TargetMeter,
    cpu_ns: u64,
    work: u64,
    /// Exited, as last seen (a zombie): its CPU was final when last read, so its going
    /// loses nothing.
    exited: bool,
}

/// Reads the CPU time and work of a set of processes together.
#[derive(Debug)]
pub(crate) struct SetMeter {
    members_of: Members,
    work: WorkMeter,
    members: HashMap<u32, Member>,
    /// Running totals over every member ever read.
    cpu_ns: u64,
    work_done: u64,
    /// Members gone between two readings, so far.
    lost: u64,
    /// The boot clock at the last reading, in clock ticks (the unit of a process's start
    /// time); `None` before the first.
    last_ticks: Option<u64>,
}

impl SetMeter {
    pub(crate) fn new(members_of: Members, work: WorkMeter) -> Result<Self, MeterError> {
        let first = members_of.roots.first().copied().unwrap_or(0);
        let mut meter = Self {
            members_of,
            work,
            members: HashMap::new(),
            cpu_ns: 0,
            work_done: 0,
            lost: 0,
            last_ticks: None,
        };
        if work == WorkMeter::Auto {
            meter.work = meter.choose()?;
        }
        meter.read()?;
        if meter.members.is_empty() {
            // The roots are gone already: say so as for one process.
            return Err(MeterError::Clock {
                pid: first,
                source: io::Error::from_raw_os_error(libc::ESRCH),
            });
        }
        Ok(meter)
    }

    pub(crate) fn work(&self) -> WorkMeter {
        self.work
    }

    /// `auto` over the set: the first meter whose sum over the members moves while they
    /// work for a moment.
    fn choose(&self) -> Result<WorkMeter, MeterError> {
        let pids = self.members_of.now(std::iter::empty());
        let meters = |kind| {
            pids.iter()
                .filter_map(|&pid| TargetMeter::new(pid, kind).ok().map(|m| (pid, m)))
                .collect::<HashMap<u32, TargetMeter>>()
        };
        let mut syscalls = meters(WorkMeter::Syscalls);
        let mut wakeups = meters(WorkMeter::Wakeups);
        let sum = |meters: &mut HashMap<u32, TargetMeter>, at: &mut HashMap<u32, u64>| {
            meters
                .iter_mut()
                .filter_map(|(pid, m)| {
                    let work = m.read().ok()?.work;
                    let before = at.insert(*pid, work).unwrap_or(work);
                    Some(work.saturating_sub(before))
                })
                .sum::<u64>()
        };
        let (mut at_syscalls, mut at_wakeups) = (HashMap::new(), HashMap::new());
        sum(&mut syscalls, &mut at_syscalls);
        sum(&mut wakeups, &mut at_wakeups);
        std::thread::sleep(AUTO_LOOK);
        Ok(if sum(&mut syscalls, &mut at_syscalls) >= AUTO_MIN_COUNT {
            WorkMeter::Syscalls
        } else if sum(&mut wakeups, &mut at_wakeups) >= AUTO_MIN_COUNT {
            WorkMeter::Wakeups
        } else {
            WorkMeter::None
        })
    }

    /// The set's totals now. Fails only when no member can be read at all.
    pub(crate) fn read(&mut self) -> Result<Reading, MeterError> {
        let now_ticks = crate::sys::procfs::boot_ticks();
        let kind = match self.work {
            // Resolved in `new`; never read as auto.
            WorkMeter::Auto => WorkMeter::None,
            kind => kind,
        };
        let pids = self.members_of.now(self.members.keys().copied());
        let mut covered = 0u32;
        for pid in pids {
            let Some(stat) = Stat::of(pid) else {
                continue;
            };
            if self
                .members
                .get(&pid)
                .is_some_and(|m| m.start_ticks != stat.start_ticks)
            {
                // The pid was reused: the member it named is gone.
                self.members.remove(&pid);
                self.lost += 1;
            }
            if let Some(member) = self.members.get_mut(&pid) {
                member.exited = matches!(stat.state, 'Z' | 'X');
                continue;
            }
            let Ok(mut meter) = TargetMeter::new(pid, kind) else {
                continue;
            };
            let Ok(now) = meter.read() else {
                continue;
            };
            // Born since the last reading: all it did is in this window.
            let from_birth = self.last_ticks.is_some_and(|last| stat.start_ticks >= last);
            let (cpu_ns, work) = if from_birth {
                (0, 0)
            } else {
                (now.cpu_ns, now.work)
            };
            self.members.insert(
                pid,
                Member {
                    start_ticks: stat.start_ticks,
                    meter,
                    cpu_ns,
                    work,
                    exited: false,
                },
            );
        }
        let mut gone = Vec::new();
        for (&pid, member) in &mut self.members {
            match member.meter.read() {
                Ok(now) => {
                    self.cpu_ns += now.cpu_ns.saturating_sub(member.cpu_ns);
                    self.work_done += now.work.saturating_sub(member.work);
                    member.cpu_ns = now.cpu_ns;
                    member.work = now.work;
                    covered += 1;
                }
                Err(_) => gone.push(pid),
            }
        }
        for pid in gone {
            if self.members.remove(&pid).is_some_and(|m| !m.exited) {
                self.lost += 1;
                // It ran in the window that ends here.
                covered += 1;
            }
        }
        self.last_ticks = now_ticks;
        if self.members.is_empty() && covered == 0 {
            let pid = self.members_of.roots.first().copied().unwrap_or(0);
            return Err(MeterError::Clock {
                pid,
                source: io::Error::from_raw_os_error(libc::ESRCH),
            });
        }
        Ok(Reading {
            at: std::time::Instant::now(),
            cpu_ns: self.cpu_ns,
            work: self.work_done,
            processes: covered,
            lost: self.lost,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::{BufRead as _, BufReader, Write as _};

    #[test]
    fn a_child_counts_from_its_birth_and_its_exit_is_a_loss() {
        // A shell that forks a child, then kills and reaps it, each step on a line.
        let mut sh = std::process::Command::new("sh")
            .args([
                "-c",
                "read a; sleep 30 & echo $!; read b; kill $!; wait; echo gone; read c",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        let mut to_sh = sh.stdin.take().expect("stdin");
        let mut from_sh = BufReader::new(sh.stdout.take().expect("stdout"));
        let mut step = |line: &mut String| {
            to_sh.write_all(b"go\n").expect("write");
            line.clear();
            from_sh.read_line(line).expect("read");
        };
        let mut meter = SetMeter::new(
            Members {
                roots: vec![sh.id()],
                follow_forks: true,
                cgroup: None,
            },
            WorkMeter::Syscalls,
        )
        .expect("meter");
        let first = meter.read().expect("read");
        assert_eq!((first.processes, first.lost), (1, 0));
        let mut line = String::new();
        step(&mut line);
        assert!(line.trim().parse::<u32>().is_ok(), "{line}");
        let with_child = meter.read().expect("read");
        assert_eq!((with_child.processes, with_child.lost), (2, 0));
        // Its exec of sleep took syscalls, counted from its birth.
        assert!(with_child.work > first.work);
        step(&mut line);
        assert_eq!(line.trim(), "gone");
        let after = meter.read().expect("read");
        assert_eq!((after.processes, after.lost), (2, 1), "{after:?}");
        let last = meter.read().expect("read");
        assert_eq!((last.processes, last.lost), (1, 1), "{last:?}");
        to_sh.write_all(b"go\n").expect("write");
        assert!(sh.wait().expect("wait").success());
    }

    #[test]
    fn a_set_of_one_reads_as_the_process() {
        let own = std::process::id();
        let mut set = SetMeter::new(
            Members {
                roots: vec![own],
                ..Default::default()
            },
            WorkMeter::None,
        )
        .expect("meter");
        let before = set.read().expect("read");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = set.read().expect("read");
        assert!(after.cpu_ns > before.cpu_ns);
        assert_eq!(after.processes, 1);
    }

    #[test]
    fn a_set_whose_roots_are_gone_is_refused() {
        // pid_max is at most 2^22: this pid cannot exist.
        let refused = SetMeter::new(
            Members {
                roots: vec![1 << 23],
                ..Default::default()
            },
            WorkMeter::None,
        );
        assert!(refused.is_err());
    }
}
