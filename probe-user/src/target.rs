//! The process being probed: who it is, and checks that it is there and probe-able.

use std::{
    fs, io,
    os::fd::{AsFd as _, OwnedFd},
    path::PathBuf,
};

use serde::Serialize;

use crate::sys::procfs;

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("no process with pid {0}: check the pid (pidof NAME, pgrep -f PATTERN)")]
    NoSuchProcess(u32),
    #[error("pid {0} is a kernel thread: probetop probes user-space processes")]
    KernelThread(u32),
    #[error(
        "pid {0} exited before its probes were attached (a zombie: exited, not yet reaped; nothing left to probe)"
    )]
    Zombie(u32),
    /// The process went while probetop was starting on it (the pid was there when
    /// probetop looked): whatever failed then failed because it was gone.
    #[error("pid {0} exited before its probes were attached")]
    ExitedBeforeAttach(u32),
    /// `advice` says what to do about a refusal (see [`crate::privileges::denied_advice`]).
    #[error("cannot read /proc/{pid}/{what}: {error}{advice}")]
    Unreadable {
        pid: u32,
        what: &'static str,
        error: io::Error,
        advice: &'static str,
    },
    #[error("pid 0 is not a process")]
    PidZero,
}

impl TargetError {
    fn unreadable(pid: u32, what: &'static str, error: io::Error) -> Self {
        let advice = if error.kind() == io::ErrorKind::PermissionDenied {
            crate::privileges::denied_advice()
        } else {
            ""
        };
        Self::Unreadable {
            pid,
            what,
            error,
            advice,
        }
    }
}

/// Identity of a running process, captured once before probes are attached.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub pid: u32,
    /// The executable as the kernel names it (`/proc/PID/exe`'s link text).
    pub exe: PathBuf,
    /// `/proc/PID/comm`.
    pub comm: String,
    /// `/proc/PID/cmdline`, arguments joined by spaces.
    pub cmdline: String,
    /// Start time in clock ticks since boot (field 22 of /proc/PID/stat): with the pid,
    /// it identifies the process even if the pid is later reused.
    pub start_ticks: u64,
    /// Device and inode of the executable; they change when the process execs another
    /// program, whose code the probes no longer cover.
    #[serde(skip)]
    pub exe_identity: Option<(u64, u64)>,
    /// What tells one exec from the next when both run the same executable (whose
    /// device and inode do not change): see [`exec_token`].
    #[serde(skip)]
    pub exec_token: Option<[u8; 16]>,
    /// The thread id given instead of the process's pid, if one was.
    #[serde(skip)]
    pub given_tid: Option<u32>,
    /// A live thread, when the main thread has exited (called `pthread_exit`) while
    /// others run: the leader's /proc entries (exe, maps, root) are empty then, and a
    /// probe filtered on the leader (whose memory is gone) never fires.
    #[serde(skip)]
    pub live_thread: Option<u32>,
}

impl Target {
    /// Reads the identity of `pid`, refusing pids that cannot be probed.
    pub fn open(asked: u32) -> Result<Self, TargetError> {
        if asked == 0 {
            return Err(TargetError::PidZero);
        }
        // A thread id names its process: probes are per process. /proc/TID exists for
        // every thread, though it is not listed.
        let pid = procfs::tgid(asked).unwrap_or(asked);
        let stat = match procfs::Stat::read(pid) {
            Ok(stat) => stat,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(TargetError::NoSuchProcess(pid));
            }
            Err(error) => return Err(TargetError::unreadable(pid, "stat", error)),
        };
        let stat = stat.ok_or_else(|| {
            TargetError::unreadable(
                pid,
                "stat",
                io::Error::new(io::ErrorKind::InvalidData, "unexpected format"),
            )
        })?;
        let start_ticks = stat.start_ticks;
        let live_thread = if stat.state == 'Z' {
            Some(live_thread(pid).ok_or(TargetError::Zombie(pid))?)
        } else {
            None
        };
        let proc_pid = live_thread.unwrap_or(pid);
        // The process may exit between each of these reads: an error then says so,
        // not what the read of a dead process gave.
        let gone = || {
            procfs::Stat::of(pid)
                .is_none_or(|now| now.start_ticks != start_ticks || now.state == 'Z')
        };
        let exe = match procfs::exe_target(proc_pid) {
            Ok(exe) => exe,
            Err(_) if gone() => return Err(TargetError::ExitedBeforeAttach(pid)),
            // Kernel threads have no executable; their link reads as ENOENT.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(TargetError::KernelThread(pid));
            }
            Err(error) => return Err(TargetError::unreadable(pid, "exe", error)),
        };
        let comm = procfs::comm(pid)
            .map(|c| c.trim_end().to_string())
            .unwrap_or_default();
        let cmdline = procfs::cmdline(pid)
            .map(|args| args.join(" "))
            .unwrap_or_default();
        Ok(Self {
            pid,
            exe,
            comm,
            cmdline,
            start_ticks,
            exe_identity: procfs::exe_identity(proc_pid),
            exec_token: exec_token(proc_pid),
            given_tid: (asked != pid).then_some(asked),
            live_thread,
        })
    }

    /// The id whose /proc entries describe the process: its own, or a live thread's
    /// when the main thread has exited.
    pub fn proc_pid(&self) -> u32 {
        self.live_thread.unwrap_or(self.pid)
    }

    /// The line said when the target is not simply the pid given, if it is not.
    pub fn identity_note(&self) -> Option<String> {
        match (self.given_tid, self.live_thread) {
            (Some(tid), _) => Some(format!(
                "{tid} is a thread of process {} ({}): probing the whole process",
                self.pid, self.comm
            )),
            (None, Some(thread)) => Some(format!(
                "the main thread of pid {} has exited while others run: probing them through thread {thread}",
                self.pid
            )),
            (None, None) => None,
        }
    }

    /// The program the process runs now, if it is no longer the one probed: it called
    /// exec. `None` while it runs the same executable (or cannot be read).
    pub fn exec_changed(&self) -> Option<PathBuf> {
        let now = procfs::exe_identity(self.proc_pid())?;
        // An unreadable token (the process going) says nothing about an exec.
        let token_changed = self.exec_token.is_some()
            && exec_token(self.proc_pid()).is_some_and(|t| Some(t) != self.exec_token);
        if Some(now) == self.exe_identity && !token_changed {
            return None;
        }
        procfs::exe_target(self.proc_pid()).ok()
    }

    /// Takes the program the process runs now as the one probed (its executable and
    /// exec), so that an exec is noticed once.
    pub fn mark_exec_seen(&mut self) {
        self.exe_identity = procfs::exe_identity(self.proc_pid());
        self.exec_token = exec_token(self.proc_pid());
    }

    /// Device and inode of the executable the process runs now.
    pub fn current_exe_identity(&self) -> Option<(u64, u64)> {
        procfs::exe_identity(self.proc_pid())
    }

    /// A path to the executable that stays valid while the process lives, even if the
    /// file is deleted or replaced on disk: the kernel resolves it to the mapped inode.
    pub fn exe_link(&self) -> PathBuf {
        procfs::exe(self.proc_pid())
    }

    /// Whether `other` is this same process (the same pid and start time), perhaps
    /// running another program since: an exec keeps both.
    pub fn same_process(&self, other: &Target) -> bool {
        self.pid == other.pid && self.start_ticks == other.start_ticks
    }

    /// Opens the executable the process runs now, so the kernel can be handed exactly
    /// that file ([`PinnedExe::path`]) even if the process execs again in between.
    pub fn pin_exe(&self) -> io::Result<PinnedExe> {
        use std::os::unix::fs::MetadataExt as _;
        let file = fs::File::open(self.exe_link())?;
        let meta = file.metadata()?;
        Ok(PinnedExe {
            identity: (meta.dev(), meta.ino()),
            fd: file.into(),
        })
    }

    /// Whether `pid` still names this same process (not exited, not reused).
    pub fn is_alive(&self) -> bool {
        procfs::Stat::of(self.pid).is_some_and(|stat| {
            stat.start_ticks == self.start_ticks
                && (stat.state != 'Z' || live_thread(self.pid).is_some())
        })
    }
}

/// A process that ptrace-attached to a thread of the target (gdb, strace, rr).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracer {
    pub pid: u32,
    pub comm: String,
}

impl Target {
    /// The tracer of the first traced thread of the process, if any thread is traced
    /// (`TracerPid` in /proc/PID/task/TID/status; strace -f and gdb trace every thread).
    pub fn tracer(&self) -> Option<Tracer> {
        let tasks = procfs::threads(self.pid).ok()?;
        tasks.into_iter().find_map(|task| {
            let status = procfs::thread_file(self.pid, task, "status").ok()?;
            let tid = status_field(&status, "TracerPid:")?;
            if tid == 0 {
                return None;
            }
            // TracerPid names the tracing thread; say its process.
            let pid = procfs::tgid(tid).unwrap_or(tid);
            Some(Tracer {
                pid,
                comm: procfs::comm(pid)
                    .map(|c| c.trim_end().to_string())
                    .unwrap_or_else(|_| "?".into()),
            })
        })
    }
}

/// A thread of process `pid` that has not exited, if any.
fn live_thread(pid: u32) -> Option<u32> {
    let tasks = procfs::threads(pid).ok()?;
    tasks.into_iter().find_map(|tid| {
        let stat = procfs::thread_file(pid, tid, "stat").ok()?;
        let state = procfs::Stat::parse(&stat)?.state;
        (!matches!(state, 'Z' | 'X')).then_some(tid)
    })
}

/// A number field of /proc/PID/status, such as `TracerPid:` or `Tgid:`.
fn status_field(status: &str, key: &str) -> Option<u32> {
    procfs::status_field(status, key)?.parse().ok()
}

/// An executable held open by probetop.
///
/// `/proc/PID/exe` names whatever the process runs at the moment it is read: a probe
/// resolved in one program and attached through it after an exec would land at a
/// meaningless offset in the next one. Attached through [`Self::path`] instead, it
/// goes to the file that was resolved, which the process then maps (or, after another
/// exec, no longer maps: the probe never fires).
#[derive(Debug)]
pub struct PinnedExe {
    fd: OwnedFd,
    /// Device and inode of the file held.
    pub identity: (u64, u64),
}

impl PinnedExe {
    /// A path that names the held file for as long as this lives.
    pub fn path(&self) -> PathBuf {
        procfs::own_fd_path(self.fd.as_fd())
    }
}

/// The 16 random bytes the kernel puts on a new program's stack at every exec
/// (`AT_RANDOM` in the auxiliary vector), read from the process's memory: a new exec of
/// the same executable has new ones, and nothing in /proc counts execs. (The start time
/// and the executable stay; addresses would too with ASLR off.) `None` if unreadable.
fn exec_token(pid: u32) -> Option<[u8; 16]> {
    const AT_RANDOM: u64 = 25;
    let address = procfs::auxv_value(pid, AT_RANDOM)?;
    let mut token = [0u8; 16];
    procfs::read_memory(pid, address, &mut token).ok()?;
    Some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_a_target() {
        let me = Target::open(std::process::id()).expect("own process");
        assert!(me.is_alive());
        assert!(me.exe_identity.is_some());
        assert_eq!(me.exec_changed(), None);
        // Each exec has its own token, even of the same executable.
        assert!(me.exec_token.is_some());
        assert_eq!(exec_token(std::process::id()), me.exec_token);
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .expect("run sleep");
        // Spawned is not yet exec'd: until then the child is a copy of this process,
        // token included, and its new auxv is written after its new name. Asleep under
        // its new name, it is past the exec.
        let (comm, stat) = (
            format!("/proc/{}/comm", child.id()),
            format!("/proc/{}/stat", child.id()),
        );
        for _ in 0..400 {
            let named = fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sleep");
            let asleep = fs::read_to_string(&stat)
                .ok()
                .and_then(|s| procfs::Stat::parse(&s))
                .is_some_and(|s| s.state == 'S');
            if named && asleep {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let token = exec_token(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(token.is_some() && token != me.exec_token);
        assert!(me.exe.is_absolute());
        assert!(!me.comm.is_empty());
    }

    #[test]
    fn a_pinned_executable_is_the_running_one() {
        let me = Target::open(std::process::id()).expect("own process");
        let pin = me.pin_exe().expect("pin");
        assert_eq!(Some(pin.identity), me.exe_identity);
        use std::os::unix::fs::MetadataExt as _;
        let meta = fs::metadata(pin.path()).expect("the pinned path resolves");
        assert_eq!((meta.dev(), meta.ino()), pin.identity);
        assert!(me.same_process(&me.clone()));
    }

    #[test]
    fn missing_and_zero_pids() {
        assert!(matches!(Target::open(0), Err(TargetError::PidZero)));
        // pid_max is at most 2^22, so this pid cannot exist.
        assert!(matches!(
            Target::open(4_999_999),
            Err(TargetError::NoSuchProcess(4_999_999))
        ));
    }

    #[test]
    #[ignore = "needs root (reads /proc/2/exe)"]
    fn kernel_thread_is_refused() {
        // kthreadd is pid 2 on Linux.
        assert!(matches!(Target::open(2), Err(TargetError::KernelThread(2))));
    }
}
