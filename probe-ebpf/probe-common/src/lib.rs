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

/// Most argument values one hit record carries (`--args N`).
pub const MAX_ARGS: usize = 6;

/// How the eBPF program fetches one argument value; mirrors the x86-64 forms of USDT
/// argument specs, which also cover function arguments (registers) and return values.
pub mod arg_kind {
    /// No argument.
    pub const NONE: u32 = 0;
    /// `offset` is the value.
    pub const CONST: u32 = 1;
    /// A register: `regs[reg_off]`.
    pub const REG: u32 = 2;
    /// Memory at a register plus a displacement: `*(regs[reg_off] + offset)`.
    pub const REG_DEREF: u32 = 3;
    /// Memory at base + index * scale + displacement.
    pub const REG_INDEXED: u32 = 4;
    /// Memory at an absolute address: `*(offset)` (a %rip-relative operand resolved at
    /// attach time).
    pub const MEM_ABS: u32 = 5;
}

/// One argument's fetch recipe.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArgSpec {
    /// Constant value, displacement, or absolute address, by `kind`.
    pub offset: u64,
    /// One of [`arg_kind`].
    pub kind: u32,
    /// Byte offset of the base register in `struct pt_regs`.
    pub reg_off: u32,
    /// Byte offset of the index register in `struct pt_regs` (REG_INDEXED).
    pub index_off: u32,
    /// Index scale: 1, 2, 4 or 8 (REG_INDEXED).
    pub scale: u32,
    /// Right shift applied to a register first: 8 for `%ah`-style high byte registers.
    pub reg_shift: u32,
    /// 64 - 8 * size: shifting left then right by it truncates to the argument's size.
    pub bitshift: u32,
    /// Non-zero: sign-extend from the argument's size.
    pub signed: u32,
    pub _pad: u32,
}

/// The arguments to capture for one probe, indexed by probe id in the `ARGS` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArgsConfig {
    /// How many of `args` to fetch (at most [`MAX_ARGS`]).
    pub count: u32,
    pub _pad: u32,
    pub args: [ArgSpec; MAX_ARGS],
}

/// A hit record with argument values, written by the `*_args` programs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HitArgsEvent {
    pub hit: HitEvent,
    /// How many of `args` hold values.
    pub count: u32,
    /// Bit i set: argument i could not be read (unmapped memory).
    pub faulted: u32,
    pub args: [u64; MAX_ARGS],
}

#[cfg(feature = "user")]
mod pod_args {
    // SAFETY: each type is repr(C), made only of integers (and arrays and structs of
    // them), with its padding spelled out as fields.
    unsafe impl aya::Pod for super::ArgSpec {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ArgsConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::HitArgsEvent {}
}
