//! Processes: pidfds.

use std::{
    io,
    os::fd::{FromRawFd as _, OwnedFd},
};

use tokio::io::{Interest, unix::AsyncFd};

/// A file descriptor that becomes readable when process `pid` exits.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
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
pub fn exit_watch(pid: u32) -> io::Result<AsyncFd<OwnedFd>> {
    let pidfd = pidfd_open(pid)?;
    // SAFETY: the OwnedFd keeps the pidfd open, unchanged, for as long as the AsyncFd
    // that owns it lives.
    unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }.map_err(io::Error::from)
}
