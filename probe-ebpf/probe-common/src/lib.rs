//! Types shared by probetop's eBPF programs and its user space.
//!
//! Everything here is `#[repr(C)]` with explicit padding so both sides agree on the layout
//! byte for byte; the eBPF side is `no_std`, so this crate is too.
#![no_std]

/// Upper bound of probe ids (BPF cookies); sizes the per-probe maps.
pub const MAX_PROBES: u32 = 16384;

/// Default ring buffer size in bytes (a power of two, as the kernel requires).
pub const DEFAULT_RING_BYTES: u32 = 8 << 20;

/// Queued bytes at which a handler forces a wakeup of the consumer. Below it, records are
/// submitted without a wakeup and the consumer polls on a timer: a wakeup per record costs
/// ~775 ns per hit on a 2-vCPU VM, more than the rest of the handler.
pub const DEFAULT_WAKEUP_BYTES: u64 = 64 << 10;

/// One record per probe hit, written by the eBPF programs into the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HitEvent {
    /// Index of the probe in user space's probe table, carried as the BPF cookie.
    pub probe_id: u32,
    /// Thread group id: the process.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU the handler ran on.
    pub cpu: u32,
    /// `bpf_ktime_get_ns()` at handler entry (CLOCK_MONOTONIC).
    pub ktime_ns: u64,
    /// Handler time: `bpf_ktime_get_ns()` at its end minus at its start.
    pub handler_ns: u64,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: HitEvent is repr(C), made only of integers, with no padding bytes.
    unsafe impl aya::Pod for super::HitEvent {}
}
