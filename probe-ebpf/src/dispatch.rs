//! Kernel dispatch time of the target's probe hits, measured from outside the probe's
//! own program: fentry/fexit (BPF trampolines) around the kernel functions that handle
//! a uprobe hit, filtered to the target process, joined to the probe that fired by the
//! probed address. The probe handlers themselves are untouched: the join needs nothing
//! from them, so they cost the same whether this runs or not.
//!
//! - `uprobe_notify_resume(regs)`: every breakpoint hit (uprobe, USDT, a uretprobe's
//!   entry), from the lookup through the handlers to emulation or the set-up of an
//!   out-of-line single step; a single-stepped hit comes back a second time to finish,
//!   and both halves add up to one dispatch. It is also where a return through the
//!   int3 trampoline is handled (every return before 6.11, and on 6.11+ when the
//!   syscall trampoline is not used): a hit at the trampoline's address
//!   (`current->mm->uprobes_state.xol_area->vaddr`) is a return, of the function of
//!   the newest `return_instance` (`current->utask->return_instances->func`).
//! - `handle_syscall_uprobe(regs, bp_vaddr)`: a hit of an optimized probe (kernels that
//!   turn a probed 5-byte nop into a call to a trampoline that makes a syscall).
//! - `uprobe_handle_trampoline(regs)` (6.11+): every return, through the uretprobe
//!   syscall or nested in `uprobe_notify_resume`'s int3 path (then the outer timing
//!   stands). The returning function is named as above: the consumers that would name
//!   it (`uretprobe_dispatcher`, `uprobe_multi_link_ret_handler`) live in
//!   kernel/trace/, which the kernel never lets be traced.
//!
//! The structure offsets come from the running kernel's BTF, read by user space.
//!
//! Also here: `probetop_empty`, a uprobe program that does nothing, the baseline of
//! `probetop calibrate`.

use aya_ebpf::{
    Global,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns, bpf_probe_read_kernel,
    },
    macros::{fentry, fexit, map, uprobe},
    maps::{HashMap, LruHashMap, PerCpuArray},
    programs::{FEntryContext, FExitContext, ProbeContext},
};
use probe_common::{DispatchOffsets, DispatchState, DispatchTotal, dispatch, khist};

/// The target's process id; set at load time (0: nothing is measured).
#[unsafe(no_mangle)]
static DISPATCH_TGID: Global<u32> = Global::new(0);

/// Slot of dispatches in the target that match none of probetop's probes (another
/// tool's uprobes); set at load time.
#[unsafe(no_mangle)]
static DISPATCH_OTHER_SLOT: Global<u32> = Global::new(0);

/// Where to read the trampoline's address and the returning function; set at load
/// time (`valid` 0: returns are not told from hits in `uprobe_notify_resume`).
#[unsafe(no_mangle)]
static DISPATCH_OFFSETS: Global<DispatchOffsets> = Global::new(DispatchOffsets {
    task_mm: 0,
    mm_xol_area: 0,
    xol_vaddr: 0,
    task_utask: 0,
    utask_return_instances: 0,
    ri_func: 0,
    valid: 0,
    _pad: 0,
});

/// Per thread of the target: its dispatch in flight. Per thread, not per CPU: a thread
/// can move to another CPU inside the kernel's uprobe path (it may sleep there), and
/// always may between the two halves of a single-stepped hit (the step runs in user
/// mode); per-CPU state then mistook the next dispatch on either CPU for the wrong one
/// (a return counted as another tool's hit, seen in clean-clone runs on 6.1). LRU: a
/// thread that exits leaves its entry behind for newer threads to take. Sized at load
/// time (`dispatch::MAX_THREADS` with a target).
#[map]
static DISPATCH_STATE: LruHashMap<u32, DispatchState> =
    LruHashMap::with_max_entries(dispatch::MAX_THREADS, 0);

/// Per slot, per CPU: dispatches and their total time. Sized at load time.
#[map]
static DISPATCH_TOTAL: PerCpuArray<DispatchTotal> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: `khist::BUCKETS` counters per slot. Sized at load time.
#[map]
static DISPATCH_HIST: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: dispatches whose start was not seen (begun before the programs attached, or
/// the thread's state evicted by more than `MAX_THREADS` threads in between); not
/// measured.
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
pub(crate) fn probetop_empty(_ctx: ProbeContext) -> u32 {
    0
}

#[fentry(function = "uprobe_notify_resume")]
pub(crate) fn probetop_notify_enter(ctx: FEntryContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    let Some(state) = thread_state(tid) else {
        return 0;
    };
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: the entry is this thread's own, and the thread runs one program at a time.
    let state = unsafe { &mut *state };
    if state.tid == tid && state.pending_sstep != 0 {
        // The second half of a single-stepped hit: same probe, time adds up.
        state.start_ns = now;
        return 0;
    }
    let regs: *const u8 = ctx.arg(0);
    // The breakpoint trap leaves ip just after the int3.
    let ip = read_reg(regs, dispatch::PT_REGS_IP).unwrap_or(0);
    let addr = ip.wrapping_sub(dispatch::SWBP_INSN_SIZE);
    let offsets = DISPATCH_OFFSETS.load();
    let (addr, kind, via_notify) = match trampoline(&offsets) {
        Some(t) if t == addr => (returning_func(&offsets), dispatch::RETURN, 1),
        _ => (addr, dispatch::ENTRY, 0),
    };
    *state = DispatchState {
        tid,
        pending_sstep: 0,
        start_ns: now,
        acc_ns: 0,
        addr,
        kind,
        via_notify,
    };
    0
}

#[fexit(function = "uprobe_notify_resume")]
pub(crate) fn probetop_notify_exit(ctx: FExitContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(state) = DISPATCH_STATE.get_ptr_mut(tid) else {
        count_lost();
        return 0;
    };
    // SAFETY: the entry is this thread's own, and the thread runs one program at a time.
    let state = unsafe { &mut *state };
    if state.tid != tid || state.start_ns == 0 {
        count_lost();
        return 0;
    }
    if state.kind == dispatch::RETURN {
        finish(dispatch::RETURN, &RETURN_SLOT);
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
pub(crate) fn probetop_syscall_enter(ctx: FEntryContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    let bp_vaddr: u64 = ctx.arg(1);
    start(tid, bp_vaddr, dispatch::ENTRY);
    0
}

#[fexit(function = "handle_syscall_uprobe")]
pub(crate) fn probetop_syscall_exit(_ctx: FExitContext) -> u32 {
    finish(dispatch::ENTRY, &ENTRY_SLOT);
    0
}

#[fentry(function = "uprobe_handle_trampoline")]
pub(crate) fn probetop_return_enter(_ctx: FEntryContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    if nested_in_notify(tid) {
        return 0;
    }
    let offsets = DISPATCH_OFFSETS.load();
    start(tid, returning_func(&offsets), dispatch::RETURN);
    0
}

#[fexit(function = "uprobe_handle_trampoline")]
pub(crate) fn probetop_return_exit(_ctx: FExitContext) -> u32 {
    let Some(tid) = target_tid() else {
        return 0;
    };
    if nested_in_notify(tid) {
        return 0;
    }
    finish(dispatch::RETURN, &RETURN_SLOT);
    0
}

/// Whether `tid`'s dispatch in flight is a return begun in `uprobe_notify_resume`: the
/// int3 trampoline's path, which times it whole.
#[inline(always)]
fn nested_in_notify(tid: u32) -> bool {
    let Some(state) = DISPATCH_STATE.get_ptr(tid) else {
        return false;
    };
    // SAFETY: the entry is this thread's own, and the thread runs one program at a time.
    let state = unsafe { &*state };
    state.tid == tid
        && state.start_ns != 0
        && state.kind == dispatch::RETURN
        && state.via_notify != 0
}

/// The uretprobe trampoline's address in the current process, if it has one yet.
#[inline(always)]
fn trampoline(offsets: &DispatchOffsets) -> Option<u64> {
    if offsets.valid == 0 {
        return None;
    }
    // SAFETY: bpf_get_current_task has no preconditions.
    let task = unsafe { bpf_get_current_task() };
    let mm = read_ptr(task, offsets.task_mm)?;
    let area = read_ptr(mm, offsets.mm_xol_area)?;
    read_ptr(area, offsets.xol_vaddr)
}

/// The function the current thread returns from through the trampoline: that of its
/// newest return instance, which the kernel's handling pops first. 0 if unknown.
#[inline(always)]
fn returning_func(offsets: &DispatchOffsets) -> u64 {
    if offsets.valid == 0 {
        return 0;
    }
    // SAFETY: bpf_get_current_task has no preconditions.
    let task = unsafe { bpf_get_current_task() };
    read_ptr(task, offsets.task_utask)
        .and_then(|utask| read_ptr(utask, offsets.utask_return_instances))
        .and_then(|ri| read_ptr(ri, offsets.ri_func))
        .unwrap_or(0)
}

/// The u64 at `base + off` in kernel memory; None for a null base, a null value or a
/// failed read.
#[inline(always)]
fn read_ptr(base: u64, off: u32) -> Option<u64> {
    if base == 0 {
        return None;
    }
    let at = base.wrapping_add(off as u64) as *const u64;
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
    match unsafe { bpf_probe_read_kernel(at) } {
        Ok(0) | Err(_) => None,
        Ok(v) => Some(v),
    }
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

/// `tid`'s entry in `DISPATCH_STATE`, made if it has none.
#[inline(always)]
fn thread_state(tid: u32) -> Option<*mut DispatchState> {
    if let Some(state) = DISPATCH_STATE.get_ptr_mut(tid) {
        return Some(state);
    }
    // BPF_NOEXIST: another thread cannot make this thread's entry, so a failure here is
    // a full map that could not evict; the dispatch goes unmeasured.
    DISPATCH_STATE
        .insert(tid, DispatchState::default(), 1)
        .ok()?;
    DISPATCH_STATE.get_ptr_mut(tid)
}

#[inline(always)]
fn start(tid: u32, addr: u64, kind: u32) {
    let Some(state) = thread_state(tid) else {
        return;
    };
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: the entry is this thread's own, and the thread runs one program at a time.
    unsafe {
        *state = DispatchState {
            tid,
            pending_sstep: 0,
            start_ns: now,
            acc_ns: 0,
            addr,
            kind,
            via_notify: 0,
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
    let Some(state) = DISPATCH_STATE.get_ptr_mut(tid) else {
        count_lost();
        return;
    };
    // SAFETY: the entry is this thread's own, and the thread runs one program at a time.
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
