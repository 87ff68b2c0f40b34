//! Resource limits.

use std::io;

/// The soft and hard `RLIMIT_NOFILE` (open file descriptors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileLimit {
    pub soft: u64,
    pub hard: u64,
}

impl FileLimit {
    /// The hard limit is unlimited.
    #[cfg(test)]
    pub(crate) fn unlimited(&self) -> bool {
        self.hard == libc::RLIM_INFINITY
    }
}

/// This process's `RLIMIT_NOFILE`.
pub(crate) fn open_files() -> io::Result<FileLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FileLimit {
        soft: limit.rlim_cur,
        hard: limit.rlim_max,
    })
}

/// Sets the soft `RLIMIT_NOFILE` (at most the hard one, which needs no privilege).
pub(crate) fn set_open_files_soft(soft: u64) -> io::Result<()> {
    let now = open_files()?;
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: now.hard,
    };
    // SAFETY: setrlimit reads one rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Descriptors open in this process now (0 if /proc/self/fd cannot be read).
pub(crate) fn open_files_now() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64)
}
