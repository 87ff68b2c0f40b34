//! Per CPU, the time its idle task ran, so that a gap between two hits splits into the
//! time the CPU was idle and the time it ran code (the hitting thread's or another's):
//! the caches the trap path needs are evicted by the code run, not by the time alone.
//! The `sched_switch` tracepoint charges the time since the CPU's previous switch to the
//! task switched out; the idle task has pid 0. A raw tracepoint: the classic one builds a
//! perf record of the switch (both tasks' names and states) before the program runs,
//! which at tens of thousands of switches a second cost a server ~1% of a CPU (measured
//! with `cargo xtask insitu-check`'s presence blocks, docs/mysqld.md).
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{map, raw_tracepoint},
    maps::PerCpuArray,
    programs::RawTracePointContext,
};

/// Slot of [`IDLE`] holding the clock at this CPU's last context switch (0: none seen
/// yet, the tracepoint is not attached or has not run here).
const LAST_SWITCH: u32 = 0;
/// Slot of [`IDLE`] holding the idle ns this CPU accumulated since the program loaded.
const IDLE_TOTAL: u32 = 1;

#[map]
static IDLE: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn probetop_sched_switch(_ctx: RawTracePointContext) -> u32 {
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // The task being switched out is still current here.
    let idle_ran = bpf_get_current_pid_tgid() as u32 == 0;
    if let (Some(last), Some(total)) = (IDLE.get_ptr_mut(LAST_SWITCH), IDLE.get_ptr_mut(IDLE_TOTAL))
    {
        // SAFETY: the slots are this CPU's own, and the scheduler runs this with
        // interrupts off.
        unsafe {
            if idle_ran && *last != 0 {
                *total += now.saturating_sub(*last);
            }
            *last = now;
        }
    }
    0
}

/// This CPU's idle ns so far, or `None` while no switch was seen (the busy time of a
/// gap is then unknown).
#[inline(always)]
pub fn idle_total() -> Option<u64> {
    let seen = IDLE.get(LAST_SWITCH).is_some_and(|last| *last != 0);
    if !seen {
        return None;
    }
    IDLE.get(IDLE_TOTAL).copied()
}
