//! Processes: pidfds, ids, timer slack, waiting on a descriptor.

use std::{
    io,
    os::fd::{FromRawFd as _, OwnedFd},
};

use tokio::io::{Interest, unix::AsyncFd};

/// A file descriptor that becomes readable when process `pid` exits.
pub(crate) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `pid`'s pidfd, registered with tokio: readable once the process exits. Needs a
/// tokio runtime.
pub(crate) fn exit_watch(pid: u32) -> io::Result<AsyncFd<OwnedFd>> {
    let pidfd = pidfd_open(pid)?;
    // SAFETY: the OwnedFd keeps the pidfd open, unchanged, for as long as the AsyncFd
    // that owns it lives.
    unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }.map_err(io::Error::from)
}

/// Asks process `pid` to end (SIGTERM): a probetop probetop started itself
/// (`probetop --all`'s view of one process) when the run stops meanwhile.
pub(crate) fn terminate(pid: u32) -> io::Result<()> {
    // SAFETY: kill(2) takes a pid and a signal number; no memory is passed.
    if unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether probetop runs setuid or setgid (real and effective ids differ).
pub(crate) fn runs_setid() -> bool {
    // SAFETY: these getters have no preconditions and cannot fail.
    let (uid, euid, gid, egid) = unsafe {
        (
            libc::getuid(),
            libc::geteuid(),
            libc::getgid(),
            libc::getegid(),
        )
    };
    uid != euid || gid != egid
}

/// Whether the effective user is root.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Sleeps of the calling thread as short as asked: the default timer slack (50 us)
/// stretches short ones. Best effort.
pub(crate) fn least_timer_slack() {
    // SAFETY: prctl with integer arguments only; PR_SET_TIMERSLACK concerns this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
}

/// Waits up to `timeout_ms` for `fd` to be readable; whether it is.
pub(crate) fn wait_readable(fd: std::os::fd::BorrowedFd<'_>, timeout_ms: i32) -> bool {
    use std::os::fd::AsRawFd as _;
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call; the BorrowedFd keeps the
    // descriptor open meanwhile.
    unsafe { libc::poll(&mut poll, 1, timeout_ms) > 0 }
}

/// The kernel's release as uname(2) gives it (`uname -r`).
pub(crate) fn uname_release() -> Option<String> {
    // SAFETY: utsname is plain data (arrays of c_char); all zeroes is a valid value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes within the utsname it is given, which lives for the call.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    let bytes: Vec<u8> = uts
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Some(String::from_utf8_lossy(&bytes).into_owned())
}
