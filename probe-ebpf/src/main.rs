//! probetop's eBPF programs: one per probe kind. Each measures its own handler time with
//! two `bpf_ktime_get_ns()` reads and streams one [`HitEvent`] per hit through a ring
//! buffer; the probe id rides in the BPF cookie set at attach time.
#![no_std]
#![no_main]

use aya_ebpf::{
    EbpfContext as _, Global,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        generated::bpf_get_attach_cookie,
    },
    macros::{map, uprobe, uretprobe},
    maps::{PerCpuArray, RingBuf},
    programs::{ProbeContext, RetProbeContext},
};
use probe_common::{DEFAULT_RING_BYTES, DEFAULT_WAKEUP_BYTES, HitEvent, MAX_PROBES};

const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
const BPF_RB_AVAIL_DATA: u64 = 0;

/// Queued bytes at which a handler wakes the consumer; set by user space at load time.
#[unsafe(no_mangle)]
static WAKEUP_BYTES: Global<u64> = Global::new(DEFAULT_WAKEUP_BYTES);

/// Hit records for user space. Its size is set by user space at load time.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

/// Per probe id, per CPU: hits whose record did not fit in the ring buffer.
#[map]
static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_PROBES, 0);

#[uprobe]
pub fn probetop_uprobe(ctx: ProbeContext) -> u32 {
    record_hit(ctx.as_ptr())
}

#[uretprobe]
pub fn probetop_uretprobe(ctx: RetProbeContext) -> u32 {
    record_hit(ctx.as_ptr())
}

#[inline(always)]
fn record_hit(ctx: *mut core::ffi::c_void) -> u32 {
    let start = unsafe { bpf_ktime_get_ns() };
    // SAFETY: ctx is the program's own context pointer, as the helper requires.
    let probe_id = unsafe { bpf_get_attach_cookie(ctx) } as u32;
    let Some(mut entry) = EVENTS.reserve::<HitEvent>(0) else {
        count_drop(probe_id);
        return 0;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: bpf_get_smp_processor_id has no preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let event = entry.write(HitEvent {
        probe_id,
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        cpu,
        ktime_ns: start,
        handler_ns: 0,
    });
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    event.handler_ns = unsafe { bpf_ktime_get_ns() } - start;
    entry.submit(wakeup_flag());
    0
}

/// Wake the consumer only once a batch is queued; it polls on a timer for the rest.
#[inline(always)]
fn wakeup_flag() -> u64 {
    if EVENTS.query(BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES.load() {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

#[inline(always)]
fn count_drop(probe_id: u32) {
    if let Some(slot) = DROPS.get_ptr_mut(probe_id) {
        // SAFETY: the slot is this CPU's own, and BPF programs do not migrate mid-run.
        unsafe { *slot += 1 }
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
