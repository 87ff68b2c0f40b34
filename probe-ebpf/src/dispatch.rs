//! Kernel dispatch time of the target's probe hits, measured from outside the probe's
//! own program: fentry/fexit (BPF trampolines) around the kernel functions that handle
//! a uprobe hit, filtered to the target process, joined to the probe that fired by the
//! probed address. The probe handlers themselves are untouched: the join needs nothing
//! from them, so they cost the same whether this runs or not.
//!
//! - `uprobe_notify_resume(regs)`: every breakpoint hit (uprobe, USDT, a uretprobe's
//!   entry), from the lookup through the handlers to emulation or the set-up of an
//!   out-of-line single step; a single-stepped hit comes back a second time to finish,
//!   and both halves add up to one dispatch.
//! - `handle_syscall_uprobe(regs, bp_vaddr)`: a hit of an optimized probe (kernels that
//!   turn a probed 5-byte nop into a call to a trampoline that makes a syscall).
//! - `uprobe_handle_trampoline(regs)`: a return through the uretprobe trampoline; the
//!   returning function comes from `uretprobe_dispatcher(con, func, ...)`, inside it
//!   (`uprobe_multi_link_ret_handler`, of the same arguments, for uprobe_multi links).
//!
//! Also here: `probetop_empty`, a uprobe program that does nothing, the baseline of
//! `probetop calibrate`.

use aya_ebpf::{
    Global,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{fentry, fexit, map, uprobe},
    maps::{HashMap, PerCpuArray},
    programs::{FEntryContext, FExitContext, ProbeContext},
};
use probe_common::{DispatchState, DispatchTotal, dispatch, khist};

/// The target's process id; set at load time (0: nothing is measured).
#[unsafe(no_mangle)]
static DISPATCH_TGID: Global<u32> = Global::new(0);

/// Slot of dispatches in the target that match none of probetop's probes (another
/// tool's uprobes); set at load time.
#[unsafe(no_mangle)]
static DISPATCH_OTHER_SLOT: Global<u32> = Global::new(0);

/// Per CPU: the dispatch in flight.
#[map]
static DISPATCH_STATE: PerCpuArray<DispatchState> = PerCpuArray::with_max_entries(1, 0);

/// Per slot, per CPU: dispatches and their total time. Sized at load time.
#[map]
static DISPATCH_TOTAL: PerCpuArray<DispatchTotal> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: `khist::BUCKETS` counters per slot. Sized at load time.
#[map]
static DISPATCH_HIST: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: dispatches whose start was not seen on this CPU (the thread migrated, or
/// another thread of the target took the CPU in between); not measured.
#[map]
static DISPATCH_LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Probed address in the target -> slot of its entry dispatches. Sized at load time.
#[map]
static ENTRY_SLOT: HashMap<u64, u32> = HashMap::with_max_entries(1, 0);

/// Probed function in the target -> slot of its return dispatches. Sized at load time.
#[map]
static RETURN_SLOT: HashMap<u64, u32> = HashMap::with_max_entries(1, 0);

/// Does nothing: what a probe costs with the cheapest possible program.
#[uprobe]
pub fn probetop_empty(_ctx: ProbeContext) -> u32 {
    0
}

#[fentry(function = "uprobe_notify_resume")]
pub fn probetop_notify_enter(ctx: FEntryContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    let Some(state) = DISPATCH_STATE.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
    let state = unsafe { &mut *state };
    if state.tid == tid && state.pending_sstep != 0 {
        // The second half of a single-stepped hit: same probe, time adds up.
        state.start_ns = now;
        return 0;
    }
    let regs: *const u8 = ctx.arg(0);
    // The breakpoint trap leaves ip just after the int3.
    let ip = read_reg(regs, dispatch::PT_REGS_IP).unwrap_or(0);
    *state = DispatchState {
        tid,
        pending_sstep: 0,
        start_ns: now,
        acc_ns: 0,
        addr: ip.wrapping_sub(dispatch::SWBP_INSN_SIZE),
        kind: dispatch::ENTRY,
        _pad: 0,
    };
    0
}

#[fexit(function = "uprobe_notify_resume")]
pub fn probetop_notify_exit(ctx: FExitContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(state) = DISPATCH_STATE.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
    let state = unsafe { &mut *state };
    if state.tid != tid || state.start_ns == 0 || state.kind != dispatch::ENTRY {
        count_lost();
        return 0;
    }
    let acc = state.acc_ns + now.wrapping_sub(state.start_ns);
    let regs: *const u8 = ctx.arg(0);
    let flags = read_reg(regs, dispatch::PT_REGS_FLAGS).unwrap_or(0);
    if flags & dispatch::X86_EFLAGS_TF != 0 && state.pending_sstep == 0 {
        // Off to single-step the instruction out of line; the hit is not over.
        state.acc_ns = acc;
        state.pending_sstep = 1;
        state.start_ns = 0;
        return 0;
    }
    let addr = state.addr;
    state.tid = 0;
    state.start_ns = 0;
    state.pending_sstep = 0;
    record(slot_of(&ENTRY_SLOT, addr), acc);
    0
}

#[fentry(function = "handle_syscall_uprobe")]
pub fn probetop_syscall_enter(ctx: FEntryContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    let bp_vaddr: u64 = ctx.arg(1);
    start(tid, bp_vaddr, dispatch::ENTRY);
    0
}

#[fexit(function = "handle_syscall_uprobe")]
pub fn probetop_syscall_exit(_ctx: FExitContext) -> u32 {
    finish(dispatch::ENTRY, &ENTRY_SLOT);
    0
}

#[fentry(function = "uprobe_handle_trampoline")]
pub fn probetop_return_enter(_ctx: FEntryContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    // The function is not known yet: uretprobe_dispatcher below tells.
    start(tid, 0, dispatch::RETURN);
    0
}

#[fentry(function = "uretprobe_dispatcher")]
pub fn probetop_return_func(ctx: FEntryContext) -> u32 {
    name_return(&ctx)
}

/// The consumer that runs instead of `uretprobe_dispatcher` for a uprobe_multi link's
/// return (same arguments).
#[fentry(function = "uprobe_multi_link_ret_handler")]
pub fn probetop_return_func_multi(ctx: FEntryContext) -> u32 {
    name_return(&ctx)
}

/// Names the returning function of the return dispatch in flight, from a return
/// consumer's `func` argument.
#[inline(always)]
fn name_return(ctx: &FEntryContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    let Some(state) = DISPATCH_STATE.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
    let state = unsafe { &mut *state };
    // Several consumers may run for one return: the first names the function.
    if state.tid == tid && state.kind == dispatch::RETURN && state.addr == 0 {
        state.addr = ctx.arg(1);
    }
    0
}

#[fexit(function = "uprobe_handle_trampoline")]
pub fn probetop_return_exit(_ctx: FExitContext) -> u32 {
    finish(dispatch::RETURN, &RETURN_SLOT);
    0
}

/// The current thread's id if it belongs to the target.
#[inline(always)]
fn target_tid() -> Option<u32> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let target = DISPATCH_TGID.load();
    if target == 0 || tgid != target {
        return None;
    }
    Some(pid_tgid as u32)
}

#[inline(always)]
fn start(tid: u32, addr: u64, kind: u32) {
    let Some(state) = DISPATCH_STATE.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
    unsafe {
        *state = DispatchState {
            tid,
            pending_sstep: 0,
            start_ns: now,
            acc_ns: 0,
            addr,
            kind,
            _pad: 0,
        };
    }
}

#[inline(always)]
fn finish(kind: u32, slots: &HashMap<u64, u32>) {
    let Some(tid) = target_tid() else {
        return;
    };
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(state) = DISPATCH_STATE.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
    let state = unsafe { &mut *state };
    if state.tid != tid || state.start_ns == 0 || state.kind != kind {
        count_lost();
        return;
    }
    let elapsed = now.wrapping_sub(state.start_ns);
    let addr = state.addr;
    state.tid = 0;
    state.start_ns = 0;
    record(slot_of(slots, addr), elapsed);
}

#[inline(always)]
fn slot_of(slots: &HashMap<u64, u32>, addr: u64) -> u32 {
    // SAFETY: the value is a plain u32 copied out at once; user space fills the map
    // before attaching and never changes an entry afterwards.
    match unsafe { slots.get(addr) } {
        Some(slot) => *slot,
        None => DISPATCH_OTHER_SLOT.load(),
    }
}

#[inline(always)]
fn record(slot: u32, ns: u64) {
    if let Some(total) = DISPATCH_TOTAL.get_ptr_mut(slot) {
        // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
        unsafe {
            (*total).count += 1;
            (*total).sum_ns += ns;
        }
    }
    let index = slot
        .wrapping_mul(khist::BUCKETS)
        .wrapping_add(khist::bucket(ns));
    if let Some(counter) = DISPATCH_HIST.get_ptr_mut(index) {
        // SAFETY: as above.
        unsafe { *counter += 1 }
    }
}

#[inline(always)]
fn count_lost() {
    if let Some(lost) = DISPATCH_LOST.get_ptr_mut(0) {
        // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
        unsafe { *lost += 1 }
    }
}

/// Reads the register at byte offset `off` of a kernel `struct pt_regs`.
#[inline(always)]
fn read_reg(regs: *const u8, off: usize) -> Option<u64> {
    // SAFETY: regs is the traced function's pt_regs argument; a bad pointer only makes
    // the helper fail.
    let at = unsafe { regs.add(off) } as *const u64;
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
    unsafe { bpf_probe_read_kernel(at) }.ok()
}
