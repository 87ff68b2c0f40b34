//! tracefs, where the kernel names its tracepoints: probetop reads two of them to keep
//! a process set current (`--follow-forks`, `--cgroup`, several `--pid`). A machine
//! booted without systemd (a VM's init, a container) may not have it mounted; then
//! probetop, as root, mounts it where the kernel expects it, as perf does, and leaves it
//! mounted: another tool may be using it by the time probetop exits.

use std::{io, path::Path};

/// Where tracefs is looked for, the usual place first.
pub(crate) const ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Where tracefs was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tracefs {
    /// Mounted before probetop looked.
    Found(&'static str),
    /// Mounted by probetop just now.
    MountedNow(&'static str),
}

/// Finds tracefs, mounting it at `/sys/kernel/tracing` when it is nowhere.
pub(crate) fn find_or_mount() -> io::Result<Tracefs> {
    if let Some(root) = ROOTS
        .iter()
        .find(|root| Path::new(root).join("events").is_dir())
    {
        return Ok(Tracefs::Found(root));
    }
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: every pointer is a NUL-terminated literal that outlives the call, and
    // tracefs takes no data argument (null is allowed).
    let rc = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            c"/sys/kernel/tracing".as_ptr(),
            c"tracefs".as_ptr(),
            flags,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Tracefs::MountedNow(ROOTS[0]))
}

/// The uprobe events defined through tracefs (`uprobe_events`: `perf probe`, a line
/// written by hand, BCC's older attach path), one definition a line.
pub(crate) fn uprobe_events(root: &str) -> io::Result<String> {
    std::fs::read_to_string(Path::new(root).join("uprobe_events"))
}

/// Whether the event `group/name` is enabled for ftrace (its `enable` file reads 1);
/// `None` when it cannot be read.
pub(crate) fn event_enabled(root: &str, group: &str, name: &str) -> Option<bool> {
    let text = std::fs::read_to_string(
        Path::new(root)
            .join("events")
            .join(group)
            .join(name)
            .join("enable"),
    )
    .ok()?;
    Some(text.trim() != "0")
}
