//! probetop's eBPF programs, one per probe kind. Each measures its own handler time with
//! two `bpf_ktime_get_ns()` reads: on every hit, or on a random one in N when the
//! `TIMING` map says so (in-kernel histograms; the clock reads are most of the handler's
//! cost). The probe id rides in the BPF cookie set at attach time; a per-probe
//! [`ProbeConfig`] says how the hit reaches user space: a ring buffer record (optionally
//! with argument values), a 1-in-N sample, or an in-kernel count and histogram.
// Built for the BPF target; host builds (clippy, `cargo test --workspace`) only type-check.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

mod dispatch;
mod processes;

use aya_ebpf::{
    EbpfContext as _, Global,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_kernel, bpf_probe_read_user, generated::bpf_get_attach_cookie,
    },
    macros::{map, uprobe, uretprobe},
    maps::{Array, LruHashMap, LruPerCpuHashMap, PerCpuArray, RingBuf},
    programs::{ProbeContext, RetProbeContext},
};
use probe_common::{
    ArgSpec, BATCH_RECORDS, DEFAULT_RING_BYTES, DEFAULT_WAKEUP_RECORDS, FLUSH_AFTER_NS,
    FLUSH_PROBE_ID, GapHistogram, HitArgsEvent, HitBatch, HitEvent, KernelHistogram, MAX_ARGS,
    PairChunk, PairConfig, PairCounts, PairStack, ProbeConfig, arg_kind, gap, khist, mode,
    next_draw, pair,
};

const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;

type Ctx = *mut core::ffi::c_void;

/// Records a CPU queues between two wakeups of the consumer; set by user space at load
/// time from the wakeup threshold in bytes.
#[unsafe(no_mangle)]
static WAKEUP_RECORDS: Global<u64> = Global::new(DEFAULT_WAKEUP_RECORDS);

/// Hit records for user space. Its size is set by user space at load time.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// Per CPU: hit records staged for the ring buffer (`HitBatch`).
#[map]
static STAGED: PerCpuArray<HitBatch> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: records queued since this CPU last woke the consumer.
#[map]
static SINCE_WAKEUP: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Per probe id, per CPU: hits whose record did not fit in the ring buffer. Sized to the
/// probe count at load time.
#[map]
static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Per (probe id << 32 | thread id), per CPU: hits whose record did not fit in the ring
/// buffer, so that per-thread counts can hold them too (records carry the thread; a
/// dropped hit has none). Per CPU because a CPU flushing its batch counts drops of
/// threads that may be running elsewhere. LRU: past its size the least recently
/// dropping threads are forgotten, which user space sees as a sum short of `DROPS`'.
#[map]
static THREAD_DROPS: LruPerCpuHashMap<u64, u64> =
    LruPerCpuHashMap::with_max_entries(probe_common::THREAD_DROPS_ENTRIES, 0);

/// Per probe id, per CPU: every hit of a probe not streamed in full (SAMPLE and
/// KERNEL_HISTOGRAM modes). Sized to the probe count at load time.
#[map]
static HITS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// A hit is timed when its draw is at or above this (`probe_common::untimed_below`); 0,
/// the initial value, times every hit. Set by user space, also while attached.
#[map]
static TIMING: Array<u64> = Array::with_max_entries(1, 0);

/// Per CPU: the state of the draw deciding which hits are timed.
#[map]
static DRAW: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Per probe id: how its hits reach user space. Sized to the probe count at load time.
#[map]
static CONFIG: Array<ProbeConfig> = Array::with_max_entries(1, 0);

/// Per CPU and probe id: the histogram of the timed hits in KERNEL_HISTOGRAM mode. Sized
/// at load time.
#[map]
static KERNEL_HISTOGRAM: PerCpuArray<KernelHistogram> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: the clock at this CPU's last hit if it was drawn to be timed, else 0. The hit
/// after a drawn one is timed too and counts the gap between them: every gap in ring
/// mode, one in `--time-every` (a random sample) in in-kernel mode.
#[map]
static LAST_HIT: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Per probe id, per CPU: the gaps counted before its hits (`LAST_HIT`). Sized at load
/// time.
#[map]
static GAPS: PerCpuArray<GapHistogram> = PerCpuArray::with_max_entries(1, 0);

/// Per (pair slot << 32 | thread id): the thread's open calls of a latency pair paired
/// in the kernel. Kept when empty (no delete per call); an LRU, so the threads that
/// stopped calling go first. Sized at load time (1 without pairs).
#[map]
static PAIR_STACKS: LruHashMap<u64, PairStack> =
    LruHashMap::with_max_entries(pair::STACK_ENTRIES, 0);

/// Per pair slot, per CPU: calls paired in the kernel, unwound, overflowed. Sized at
/// load time.
#[map]
static PAIR_COUNTS: PerCpuArray<PairCounts> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: the durations of the calls paired in the kernel, `pair::CHUNKS` values per
/// histogram, two histograms per pair slot (`pair::chunk`). Sized at load time.
#[map]
static PAIR_HIST: PerCpuArray<PairChunk> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: a new thread's first stack, written here and copied into `PAIR_STACKS`
/// (too large for the BPF stack).
#[map]
static PAIR_NEW: PerCpuArray<PairStack> = PerCpuArray::with_max_entries(1, 0);

/// Function entry, or a USDT site.
#[uprobe]
pub(crate) fn probetop_uprobe(ctx: ProbeContext) -> u32 {
    on_hit(ctx.as_ptr())
}

/// Function return.
#[uretprobe]
pub(crate) fn probetop_uretprobe(ctx: RetProbeContext) -> u32 {
    on_hit(ctx.as_ptr())
}

#[inline(always)]
fn on_hit(ctx: Ctx) -> u32 {
    // Decided first, so that a timed hit's clock covers the whole handler. A hit right
    // after a drawn one on the same CPU is timed too: its gap is the sample.
    let drawn = is_timed();
    let last_hit = LAST_HIT.get_ptr_mut(0);
    // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
    let previous = last_hit.map_or(0, |last| unsafe { *last });
    let timed = drawn || previous != 0;
    let start = if timed {
        // SAFETY: bpf_ktime_get_ns has no preconditions.
        unsafe { bpf_ktime_get_ns() }
    } else {
        0
    };
    // SAFETY: ctx is the program's own context pointer, as the helper requires.
    let probe_id = unsafe { bpf_get_attach_cookie(ctx) } as u32;
    if probe_id == FLUSH_PROBE_ID {
        flush_staged();
        return 0;
    }
    // After the clock: a counted hit's handler time includes this test.
    if !processes::counts_here() {
        return 0;
    }
    let Some(config) = CONFIG.get(probe_id) else {
        return 0;
    };
    if config.mode == mode::CLOSED {
        return 0;
    }
    if previous != 0 {
        count_gap(probe_id, start.wrapping_sub(previous));
    }
    if let Some(last) = last_hit {
        // SAFETY: as above.
        unsafe { *last = if drawn { start } else { 0 } };
    }
    // Records carry a timestamp: untimed hits (only while TIMING is set, which user
    // space does in kernel mode, and in auto mode once a probe is in the kernel) read
    // the clock here instead.
    let record_start = || {
        if timed {
            start
        } else {
            // SAFETY: bpf_ktime_get_ns has no preconditions.
            unsafe { bpf_ktime_get_ns() }
        }
    };
    match config.mode {
        mode::KERNEL_HISTOGRAM if config.pair.role != pair::NONE => {
            let now = record_start();
            if pair_in_kernel(ctx, &config.pair, now) {
                if count_hit(probe_id).is_some() && drawn {
                    count_in_kernel(probe_id, start);
                }
            } else {
                // An end whose start the kernel does not hold (begun before the window,
                // or while the pair streamed): user space may hold it.
                send_record(ctx, probe_id, config, now);
            }
        }
        mode::KERNEL_HISTOGRAM => {
            // The hit after a drawn one read the clock for its gap alone: one hit in
            // `--time-every` is timed, as asked.
            if count_hit(probe_id).is_some() && drawn {
                count_in_kernel(probe_id, start);
            }
        }
        mode::SAMPLE => {
            let Some(n) = count_hit(probe_id) else {
                return 0;
            };
            let every = u64::from(config.sample_every.max(1));
            if n.is_multiple_of(every) {
                send_record(ctx, probe_id, config, record_start());
            }
        }
        _ => send_record(ctx, probe_id, config, record_start()),
    }
    0
}

/// Pairs a latency pair's hit in the kernel; false for an end the kernel holds no start
/// of, which the caller streams instead.
#[inline(always)]
fn pair_in_kernel(ctx: Ctx, config: &PairConfig, now: u64) -> bool {
    // SAFETY: ctx is this hit's pt_regs; a constant offset into it is a plain ctx read.
    let sp = unsafe { (*(ctx as *const aya_ebpf::bindings::pt_regs)).rsp };
    let key = (u64::from(config.slot) << 32) | u64::from(current_tid());
    let Some(counts) = PAIR_COUNTS.get_ptr_mut(config.slot) else {
        return true;
    };
    // SAFETY: the value is this CPU's own, and BPF programs do not migrate mid-run.
    let counts = unsafe { &mut *counts };
    let checks = config.checks_frames != 0;
    if config.role == pair::START {
        match PAIR_STACKS.get_ptr_mut(key) {
            // SAFETY: a map value, live while the program runs (RCU); only this thread
            // writes its own stack.
            Some(stack) => pair_push(unsafe { &mut *stack }, counts, checks, sp, now),
            None => {
                let Some(fresh) = PAIR_NEW.get_ptr_mut(0) else {
                    return true;
                };
                // SAFETY: this CPU's scratch value.
                let fresh = unsafe { &mut *fresh };
                fresh.depth = 1;
                fresh.overflow = 0;
                fresh.frames[0] = probe_common::PairFrame {
                    start_ns: now,
                    sp,
                    nested: 0,
                };
                // By reference: a copy would not fit the BPF stack (512 bytes).
                #[allow(
                    clippy::needless_borrows_for_generic_args,
                    reason = "a PairStack by value is copied onto the BPF stack"
                )]
                let _ = PAIR_STACKS.insert(key, &*fresh, 0);
            }
        }
        return true;
    }
    let Some(stack) = PAIR_STACKS.get_ptr_mut(key) else {
        return false;
    };
    // SAFETY: as above.
    let stack = unsafe { &mut *stack };
    let frame_sp = sp.wrapping_sub(u64::from(config.sp_back));
    if checks {
        // Frames below the returning one are gone without a return: unwound.
        pop_unwound(stack, counts, frame_sp, false);
    }
    let depth = stack.depth as usize;
    let Some(top) = stack
        .frames
        .get(core::hint::black_box(depth.wrapping_sub(1)))
        .copied()
    else {
        // No tracked call left: an overflowed one's end, or one the kernel never saw.
        if stack.overflow > 0 {
            stack.overflow -= 1;
            return true;
        }
        return false;
    };
    let deeper = if checks {
        top.sp != frame_sp
    } else {
        stack.overflow > 0
    };
    if deeper {
        // Deeper than every tracked frame: an overflowed call's end (last in, first
        // out), or a call begun before the kernel held this pair.
        if stack.overflow > 0 {
            stack.overflow -= 1;
            return true;
        }
        return false;
    }
    stack.depth = depth as u32 - 1;
    if let Some(parent) = stack
        .frames
        .get_mut(core::hint::black_box(depth.wrapping_sub(2)))
    {
        parent.nested += 2 + top.nested;
    }
    counts.calls += 1;
    let nested = top.nested != 0;
    if nested {
        counts.nested_calls += 1;
        counts.nested_hits += top.nested;
    }
    pair_record(
        config.slot,
        u32::from(nested),
        now.wrapping_sub(top.start_ns),
    );
    true
}

/// A start: frames at or below its stack pointer are gone (unwound), then it opens a
/// frame, or counts as overflowed past `pair::DEPTH`.
#[inline(always)]
fn pair_push(stack: &mut PairStack, counts: &mut PairCounts, checks: bool, sp: u64, now: u64) {
    if checks {
        pop_unwound(stack, counts, sp, true);
    }
    let depth = stack.depth as usize;
    match stack.frames.get_mut(core::hint::black_box(depth)) {
        Some(frame) => {
            *frame = probe_common::PairFrame {
                start_ns: now,
                sp,
                nested: 0,
            };
            stack.depth = depth as u32 + 1;
        }
        None => {
            stack.overflow += 1;
            counts.overflowed += 1;
        }
    }
}

/// Pops the frames an unwind left: those whose stack pointer is below `sp` (or at it,
/// `inclusive`), each counted as unwound, its hits given to the frame below. Calls
/// overflowed past them were deeper still: gone too.
#[inline(always)]
fn pop_unwound(stack: &mut PairStack, counts: &mut PairCounts, sp: u64, inclusive: bool) {
    let mut depth = stack.depth as usize;
    let mut popped = false;
    for _ in 0..pair::DEPTH {
        let Some(top) = stack
            .frames
            .get(core::hint::black_box(depth.wrapping_sub(1)))
            .copied()
        else {
            break;
        };
        let gone = if inclusive { top.sp <= sp } else { top.sp < sp };
        if !gone {
            break;
        }
        depth -= 1;
        popped = true;
        counts.unwound += 1;
        if let Some(parent) = stack
            .frames
            .get_mut(core::hint::black_box(depth.wrapping_sub(1)))
        {
            parent.nested += 1 + top.nested;
        }
    }
    if popped {
        stack.depth = depth as u32;
        stack.overflow = 0;
    }
}

/// Counts a call of `ns` in histogram `which` of pair `slot`.
#[inline(always)]
fn pair_record(slot: u32, which: u32, ns: u64) {
    let bucket = core::hint::black_box(pair::bucket(ns));
    let Some(chunk) = PAIR_HIST.get_ptr_mut(pair::chunk(slot, which, bucket)) else {
        return;
    };
    let at = core::hint::black_box(bucket as usize % pair::CHUNK);
    // SAFETY: the value is this CPU's own, and BPF programs do not migrate mid-run.
    if let Some(count) = unsafe { (*chunk).counts.get_mut(at) } {
        *count += 1;
    }
}

/// Counts a gap before a hit of `probe_id`.
#[inline(always)]
fn count_gap(probe_id: u32, gap_ns: u64) {
    let Some(histogram) = GAPS.get_ptr_mut(probe_id) else {
        return;
    };
    // Opaque to LLVM, as in count_in_kernel: the verifier needs the bounds check.
    let bucket = core::hint::black_box(gap::bucket(gap_ns)) as usize;
    // SAFETY: the value is this CPU's own, and BPF programs do not migrate mid-run.
    if let Some(slot) = unsafe { (*histogram).counts.get_mut(bucket) } {
        *slot += 1;
    }
}

/// Whether this hit's handler is timed: always, unless `TIMING` asks for a random share.
#[inline(always)]
fn is_timed() -> bool {
    let untimed_below = match TIMING.get(0) {
        Some(&value) => value,
        None => 0,
    };
    if untimed_below == 0 {
        return true;
    }
    let Some(state) = DRAW.get_ptr_mut(0) else {
        return true;
    };
    // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run;
    // bpf_get_smp_processor_id has no preconditions.
    let draw = unsafe {
        *state = next_draw(*state, bpf_get_smp_processor_id());
        *state
    };
    draw >= untimed_below
}

/// Counts a hit of `probe_id` on this CPU; returns this CPU's count so far, `None` for
/// an id outside the map.
#[inline(always)]
fn count_hit(probe_id: u32) -> Option<u64> {
    let hits = HITS.get_ptr_mut(probe_id)?;
    // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
    unsafe {
        *hits += 1;
        Some(*hits)
    }
}

#[inline(always)]
fn count_in_kernel(probe_id: u32, start: u64) {
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let handler_ns = unsafe { bpf_ktime_get_ns() } - start;
    // Opaque to LLVM, which proves the bucket in range and drops get_mut's check; the
    // verifier cannot prove it, and needs the check before indexing the map value.
    let bucket = core::hint::black_box(khist::bucket(handler_ns)) as usize;
    if let Some(histogram) = KERNEL_HISTOGRAM.get_ptr_mut(probe_id) {
        // SAFETY: the value is this CPU's own, and BPF programs do not migrate mid-run;
        // get_mut bounds the index for the verifier.
        if let Some(slot) = unsafe { (*histogram).counts.get_mut(bucket) } {
            *slot += 1;
        }
    }
}

#[inline(always)]
fn send_record(ctx: Ctx, probe_id: u32, config: &ProbeConfig, start: u64) {
    if config.args.count > 0 {
        send_record_with_args(ctx, probe_id, config, start);
        return;
    }
    stage_record(probe_id, start);
}

/// Stages this hit's record in the CPU's batch; a full or old batch goes to the ring
/// first, so the hit that finds it so pays for the write and its handler time says so.
#[inline(always)]
fn stage_record(probe_id: u32, start: u64) {
    let Some(batch) = STAGED.get_ptr_mut(0) else {
        count_drop(probe_id, current_tid());
        return;
    };
    // SAFETY: the batch is this CPU's own, and BPF programs do not migrate mid-run.
    let batch = unsafe { &mut *batch };
    let len = batch.len as usize;
    if len >= BATCH_RECORDS
        || (len > 0 && start.wrapping_sub(batch.records[0].ktime_ns) >= FLUSH_AFTER_NS)
    {
        flush_batch(batch);
    }
    // Opaque to LLVM so the verifier sees the bounds check get_mut makes.
    let at = core::hint::black_box(batch.len) as usize;
    let Some(slot) = batch.records.get_mut(at) else {
        count_drop(probe_id, current_tid());
        return;
    };
    *slot = hit_header(probe_id, start);
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    slot.handler_ns = unsafe { bpf_ktime_get_ns() } - start;
    batch.len = at as u32 + 1;
}

/// Writes this CPU's staged records to the ring, if any.
#[inline(always)]
fn flush_staged() {
    if let Some(batch) = STAGED.get_ptr_mut(0) {
        // SAFETY: the batch is this CPU's own, and BPF programs do not migrate mid-run.
        let batch = unsafe { &mut *batch };
        if batch.len > 0 {
            flush_batch(batch);
        }
    }
}

/// One ring record for the whole batch; when the ring is full, its hits count as
/// dropped, each for its own probe.
#[inline(always)]
fn flush_batch(batch: &mut HitBatch) {
    if EVENTS.output::<HitBatch>(&*batch, wakeup_flag()).is_err() {
        for i in 0..BATCH_RECORDS {
            if i >= batch.len as usize {
                break;
            }
            count_drop(batch.records[i].probe_id, batch.records[i].tid);
        }
    }
    batch.len = 0;
}

#[inline(always)]
fn send_record_with_args(ctx: Ctx, probe_id: u32, config: &ProbeConfig, start: u64) {
    let Some(mut entry) = EVENTS.reserve::<HitArgsEvent>(0) else {
        count_drop(probe_id, current_tid());
        return;
    };
    let event = entry.write(HitArgsEvent {
        hit: hit_header(probe_id, start),
        count: 0,
        faulted: 0,
        args: [0; MAX_ARGS],
    });
    let count = (config.args.count as usize).min(MAX_ARGS);
    for i in 0..MAX_ARGS {
        if i >= count {
            break;
        }
        match fetch_arg(ctx, &config.args.args[i]) {
            Some(value) => event.args[i] = value,
            None => event.faulted |= 1 << i,
        }
    }
    event.count = count as u32;
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    event.hit.handler_ns = unsafe { bpf_ktime_get_ns() } - start;
    entry.submit(wakeup_flag());
}

#[inline(always)]
fn hit_header(probe_id: u32, start: u64) -> HitEvent {
    let pid_tgid = bpf_get_current_pid_tgid();
    HitEvent {
        probe_id,
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        // SAFETY: bpf_get_smp_processor_id has no preconditions.
        cpu: unsafe { bpf_get_smp_processor_id() },
        ktime_ns: start,
        handler_ns: 0,
    }
}

/// Reads the register at byte offset `off` of the saved `struct pt_regs`.
#[inline(always)]
fn read_reg(ctx: Ctx, off: u32) -> Option<u64> {
    // The verifier refuses variable offsets into ctx itself, so read through a helper.
    // SAFETY: ctx points at this hit's pt_regs; a bad offset only makes the helper fail.
    let at = unsafe { (ctx as *const u8).add(off as usize) } as *const u64;
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
    unsafe { bpf_probe_read_kernel(at) }.ok()
}

/// Reads 8 bytes of the target's memory; the spec's bitshift keeps the argument's size.
#[inline(always)]
fn read_user(at: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_user checks the user address and fails cleanly.
    unsafe { bpf_probe_read_user(at as *const u64) }.ok()
}

/// Fetches one argument following its spec; None if memory could not be read.
#[inline(always)]
fn fetch_arg(ctx: Ctx, spec: &ArgSpec) -> Option<u64> {
    let raw = match spec.kind {
        arg_kind::CONST => spec.offset,
        arg_kind::REG => read_reg(ctx, spec.reg_off)? >> (spec.reg_shift & 63),
        arg_kind::REG_DEREF => read_user(read_reg(ctx, spec.reg_off)?.wrapping_add(spec.offset))?,
        arg_kind::REG_INDEXED => {
            let base = read_reg(ctx, spec.reg_off)?;
            let index = read_reg(ctx, spec.index_off)?;
            read_user(
                base.wrapping_add(index.wrapping_mul(u64::from(spec.scale)))
                    .wrapping_add(spec.offset),
            )?
        }
        arg_kind::MEM_ABS => read_user(spec.offset)?,
        _ => return None,
    };
    let shift = spec.bitshift & 63;
    let value = if spec.signed != 0 {
        (((raw << shift) as i64) >> shift) as u64
    } else {
        (raw << shift) >> shift
    };
    if spec.deref != 0 {
        return read_user(value.wrapping_add(u64::from(spec.deref - 1)));
    }
    Some(value)
}

/// Wake the consumer only once enough is queued; it polls on a timer for the rest.
/// Counted per CPU rather than asking the ring how much is queued: that query is a
/// helper call reading the consumer's position, a cache line the consumer writes from
/// another CPU (25-60 ns more per record, docs/performance.md).
#[inline(always)]
fn wakeup_flag() -> u64 {
    let Some(queued) = SINCE_WAKEUP.get_ptr_mut(0) else {
        return BPF_RB_NO_WAKEUP;
    };
    // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
    unsafe {
        *queued += 1;
        if *queued >= WAKEUP_RECORDS.load() {
            *queued = 0;
            return BPF_RB_FORCE_WAKEUP;
        }
    }
    BPF_RB_NO_WAKEUP
}

#[inline(always)]
fn current_tid() -> u32 {
    bpf_get_current_pid_tgid() as u32
}

/// Counts a dropped hit of `probe_id` on thread `tid`: per CPU for the probe, and per
/// thread.
#[inline(always)]
fn count_drop(probe_id: u32, tid: u32) {
    if let Some(slot) = DROPS.get_ptr_mut(probe_id) {
        // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
        unsafe { *slot += 1 }
    }
    let key = (u64::from(probe_id) << 32) | u64::from(tid);
    match THREAD_DROPS.get_ptr_mut(key) {
        // SAFETY: this CPU's own value, live while the program runs (RCU); BPF programs
        // do not migrate mid-run.
        Some(count) => unsafe { *count += 1 },
        // Sets this CPU's value (the others' are zero); a full map evicts the least
        // recently used entry.
        None => {
            let _ = THREAD_DROPS.insert(key, 1, 0);
        }
    }
}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
