//! The `bpf(2)` commands aya 0.14 does not make: uprobe_multi and perf-event links with
//! a cookie, tiny probe programs, program and link info, the link and task queries.
//! The attrs of most commands carry pointers (paths, arrays, buffers) the kernel reads
//! or writes during the call, so [`call`] and [`call_fd`] are `unsafe` with that
//! contract; commands without pointers have safe functions here.

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
};

/// `enum bpf_cmd` values used.
pub(crate) const PROG_LOAD: libc::c_long = 5;
pub(crate) const OBJ_GET_INFO_BY_FD: libc::c_long = 15;
pub(crate) const TASK_FD_QUERY: libc::c_long = 20;
pub(crate) const LINK_CREATE: libc::c_long = 28;
pub(crate) const LINK_GET_FD_BY_ID: libc::c_long = 30;
pub(crate) const LINK_GET_NEXT_ID: libc::c_long = 31;
/// `enum bpf_attach_type`'s BPF_PERF_EVENT (5.15).
pub(crate) const ATTACH_PERF_EVENT: u32 = 41;

/// `bpf(cmd, attr)`; the kernel's non-negative answer.
///
/// # Safety
/// `attr` is a valid prefix of `union bpf_attr` for `cmd`, and every pointer in it is
/// valid, for the length the attr gives, for what the kernel does with it during the
/// call (reads it, or writes it).
pub(crate) unsafe fn call<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<i64> {
    // SAFETY: the caller's contract; the kernel reads size_of::<T>() bytes of attr,
    // zero-fills the rest, and may write results into it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            size_of::<T>() as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

/// `bpf(cmd, attr)` for the commands that return a new file descriptor.
///
/// # Safety
/// As [`call`]; and `cmd` is a command whose answer is a new file descriptor.
pub(crate) unsafe fn call_fd<T>(cmd: libc::c_long, attr: &T) -> io::Result<OwnedFd> {
    // SAFETY: the caller's contract; the kernel only reads attr for these commands.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_ref(attr),
            size_of::<T>() as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `union bpf_attr`'s `link_create` for a perf event target.
#[repr(C)]
struct LinkCreatePerfEvent {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    bpf_cookie: u64,
}

/// Binds `program` to `perf_event` with a link whose cookie the program reads back.
pub(crate) fn link_perf_event(
    program: BorrowedFd<'_>,
    perf_event: BorrowedFd<'_>,
    cookie: u64,
) -> io::Result<OwnedFd> {
    let attr = LinkCreatePerfEvent {
        prog_fd: program.as_raw_fd() as u32,
        target_fd: perf_event.as_raw_fd() as u32,
        attach_type: ATTACH_PERF_EVENT,
        flags: 0,
        bpf_cookie: cookie,
    };
    // SAFETY: attr is link_create's prefix of union bpf_attr, with no pointers.
    unsafe { call_fd(LINK_CREATE, &attr) }
}

/// Asks for a perf-event link of `program` to no perf event at all; the kernel's
/// answer (EBADF where it has such links: the target is checked after the attach type;
/// EINVAL where it does not). Nothing is ever attached.
pub(crate) fn link_to_no_perf_event(program: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let attr = LinkCreatePerfEvent {
        prog_fd: program.as_raw_fd() as u32,
        target_fd: u32::MAX,
        attach_type: ATTACH_PERF_EVENT,
        flags: 0,
        bpf_cookie: 0,
    };
    // SAFETY: attr is link_create's prefix of union bpf_attr, with no pointers.
    unsafe { call_fd(LINK_CREATE, &attr) }
}

/// The id of the next BPF link after `id`; `Err` (ENOENT) after the last.
pub(crate) fn link_next_id(id: u32) -> io::Result<u32> {
    // { start_id, next_id, open_flags }
    let mut attr = [id, 0u32, 0u32];
    // SAFETY: attr is the get_next_id prefix of union bpf_attr, with no pointers; the
    // kernel writes next_id into it.
    unsafe { call(LINK_GET_NEXT_ID, &mut attr) }?;
    Ok(attr[1])
}

/// A descriptor of the BPF link `id`.
pub(crate) fn link_fd_by_id(id: u32) -> io::Result<OwnedFd> {
    // { link_id, next_id, open_flags }
    let attr = [id, 0u32, 0u32];
    // SAFETY: attr is the get_fd_by_id prefix of union bpf_attr, with no pointers.
    unsafe { call_fd(LINK_GET_FD_BY_ID, &attr) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_create_has_the_kernel_layout() {
        assert_eq!(std::mem::offset_of!(LinkCreatePerfEvent, bpf_cookie), 16);
    }
}
