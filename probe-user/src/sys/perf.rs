//! `perf_event_open(2)` for uprobe events.

use std::{
    ffi::CStr,
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

/// `struct perf_event_attr` up to `config3` (PERF_ATTR_SIZE_VER8).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
    config3: u64,
}

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
// libc::Ioctl: the request is a c_ulong in glibc and a c_int in musl (the static build).
const PERF_EVENT_IOC_ENABLE: libc::Ioctl = 0x2400;

/// Opens and enables a perf event of the uprobe PMU `perf_type` at `path`+`offset` for
/// process `pid` (0: for every process). `config` is the PMU's config word (the
/// retprobe bit, a USDT semaphore's offset in the high 32 bits).
pub(crate) fn uprobe_event(
    perf_type: u32,
    config: u64,
    path: &CStr,
    offset: u64,
    pid: u32,
) -> io::Result<OwnedFd> {
    let attr = PerfEventAttr {
        kind: perf_type,
        size: size_of::<PerfEventAttr>() as u32,
        config,
        config1: path.as_ptr() as u64,
        config2: offset,
        ..Default::default()
    };
    // SAFETY: attr is a valid perf_event_attr of the size it declares, and the path it
    // points to outlives the call; the kernel copies both before returning.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            // Every process is pid -1 with one CPU named, as the kernel requires; a
            // uprobe event's program runs on every CPU whichever is named.
            if pid == 0 { -1 } else { pid as libc::pid_t },
            if pid == 0 { 0 } else { -1 as libc::c_int },
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new file descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // SAFETY: PERF_EVENT_IOC_ENABLE takes no argument and fd is a perf event.
    if unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_ENABLE, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_event_attr_has_the_kernel_layout() {
        // PERF_ATTR_SIZE_VER8, and config1/config2 where the uprobe PMU reads path/offset.
        assert_eq!(size_of::<PerfEventAttr>(), 136);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config1), 56);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config2), 64);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config3), 128);
    }
}
