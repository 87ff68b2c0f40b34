//! Which processes count (`--follow-forks`, `--cgroup`, several `--pid`): the probes are
//! then attached without the kernel's pid filter, and each hit is kept only if its
//! process (tgid) is in `PROCESSES`. User space fills the set at start; with
//! `--follow-forks` the `task_newtask` tracepoint adds every process a member forks
//! before the child can run, so no hit of a new child is missed, and
//! `sched_process_free` takes a process out once its pid can be reused.
use aya_ebpf::{
    Global,
    helpers::bpf_get_current_pid_tgid,
    macros::{map, tracepoint},
    maps::HashMap,
    programs::TracePointContext,
};
use probe_common::MAX_PROCESSES;

/// 1: a hit counts only in a process of `PROCESSES`. Set at load time.
#[unsafe(no_mangle)]
static FILTER_PROCESSES: Global<u32> = Global::new(0);

/// Byte offsets of the tracepoints' fields, read by user space from their `format`
/// files at load time (they moved between kernels: `sched_process_free`'s `comm`
/// became a `__data_loc` in 6.x).
#[unsafe(no_mangle)]
static NEWTASK_PID_AT: Global<u32> = Global::new(8);
#[unsafe(no_mangle)]
static NEWTASK_FLAGS_AT: Global<u32> = Global::new(32);
#[unsafe(no_mangle)]
static FREE_PID_AT: Global<u32> = Global::new(12);

/// The processes (tgids) whose hits count, when `FILTER_PROCESSES` is set.
#[map]
static PROCESSES: HashMap<u32, u8> = HashMap::with_max_entries(MAX_PROCESSES, 0);

const CLONE_THREAD: u64 = 0x0001_0000;

/// Whether this hit's process counts.
#[inline(always)]
pub(crate) fn counts_here() -> bool {
    if FILTER_PROCESSES.load() == 0 {
        return true;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: the value is only tested for presence, never read through.
    unsafe { PROCESSES.get(tgid) }.is_some()
}

/// A new task: a process forked by a member joins the set (a new thread of a member
/// needs nothing: its tgid is the member's). Runs in the parent, before the child runs.
#[tracepoint]
pub(crate) fn probetop_newtask(ctx: TracePointContext) -> u32 {
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: the value is only tested for presence, never read through.
    if unsafe { PROCESSES.get(parent) }.is_none() {
        return 0;
    }
    // SAFETY: read_at reads the tracepoint's record through a helper that checks it.
    let flags: u64 = unsafe { ctx.read_at(NEWTASK_FLAGS_AT.load() as usize) }.unwrap_or(0);
    if flags & CLONE_THREAD != 0 {
        return 0;
    }
    // SAFETY: as above.
    if let Ok(child) = unsafe { ctx.read_at::<u32>(NEWTASK_PID_AT.load() as usize) } {
        // A full set drops the child: user space sees the set's size and says so.
        let _ = PROCESSES.insert(child, 1, 0);
    }
    0
}

/// A task freed: if it was a member's leader, its pid may be reused from now on (a
/// leader is freed only after every thread of its process).
#[tracepoint]
pub(crate) fn probetop_free(ctx: TracePointContext) -> u32 {
    // SAFETY: read_at reads the tracepoint's record through a helper that checks it.
    if let Ok(pid) = unsafe { ctx.read_at::<u32>(FREE_PID_AT.load() as usize) } {
        let _ = PROCESSES.remove(pid);
    }
    0
}
