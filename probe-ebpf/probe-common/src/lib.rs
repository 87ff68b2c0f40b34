//! Types shared by probetop's eBPF programs and its user space.
//!
//! Everything here is `#[repr(C)]` with explicit padding so both sides agree on the layout
//! byte for byte; the eBPF side is `no_std`, so this crate is too.
#![no_std]

/// Upper bound of probe ids (BPF cookies): the most points the kernel takes in one
/// uprobe_multi link (`MAX_UPROBE_MULTI_CNT`, 1 << 20, kernel/trace/bpf_trace.c; a larger
/// link is refused with E2BIG). The per-probe maps are sized to the run's probes at load
/// time, not to this.
pub const MAX_PROBES: u32 = 1 << 20;

/// (probe, thread) pairs whose dropped hits the kernel counts apart (`THREAD_DROPS`, a
/// per-CPU LRU hash: ~100 bytes plus 8 per CPU each); beyond, the least recently
/// dropping are forgotten and the per-thread counts say they are short.
pub const THREAD_DROPS_ENTRIES: u32 = 8192;

/// Processes a run can follow at once (`--follow-forks`, `--cgroup`, several `--pid`).
pub const MAX_PROCESSES: u32 = 65536;

/// Default ring buffer size in bytes (a power of two, as the kernel requires).
pub const DEFAULT_RING_BYTES: u32 = 8 << 20;

/// Queued bytes at which a handler forces a wakeup of the consumer. Below it, records are
/// submitted without a wakeup and the consumer polls on a timer: a wakeup per record costs
/// ~775 ns per hit on a 2-vCPU VM, more than the rest of the handler.
pub const DEFAULT_WAKEUP_BYTES: u64 = 64 << 10;

/// [`DEFAULT_WAKEUP_BYTES`] in ring records of one CPU on a 2-CPU machine, the eBPF
/// side's default until user space sets its own from the machine's CPU count.
pub const DEFAULT_WAKEUP_RECORDS: u64 = wakeup_records(DEFAULT_WAKEUP_BYTES, 2);

/// Ring records each CPU queues between wakeups so that about `wakeup_bytes` are queued
/// in all when the consumer is woken. Sized by the [`HitBatch`] record, the one a
/// stream of hits produces (its size plus the ring's 8-byte header).
pub const fn wakeup_records(wakeup_bytes: u64, cpus: u64) -> u64 {
    let per_record = core::mem::size_of::<HitBatch>() as u64 + 8;
    let cpus = if cpus == 0 { 1 } else { cpus };
    let records = wakeup_bytes / per_record / cpus;
    if records == 0 { 1 } else { records }
}

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

/// Hits a CPU stages before it writes them to the ring buffer as one [`HitBatch`]
/// record: a ring record costs a lock and a cache line shared with the consumer on
/// another CPU (~85 ns a hit measured in situ, docs/cost.md), a staged hit a write to
/// this CPU's own map value.
pub const BATCH_RECORDS: usize = 16;

/// A staged batch older than this goes to the ring at the CPU's next hit, so a slow
/// probe is not held back by the batch size.
pub const FLUSH_AFTER_NS: u64 = 10_000_000;

/// The cookie of probetop's own flush probe: a hit with it writes the CPU's staged
/// batch to the ring and records nothing. User space fires it on every CPU on a timer
/// (200 ms) and before it reads the last records.
pub const FLUSH_PROBE_ID: u32 = u32::MAX;

/// Up to [`BATCH_RECORDS`] hit records of one CPU, staged in a per-CPU map and written
/// to the ring buffer at once. Only the first `len` records are hits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HitBatch {
    pub len: u32,
    pub _pad: u32,
    pub records: [HitEvent; BATCH_RECORDS],
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: HitEvent is repr(C), made only of integers, with no padding bytes.
    unsafe impl aya::Pod for super::HitEvent {}
    // SAFETY: HitBatch is repr(C), two u32s then HitEvents, with no padding bytes.
    unsafe impl aya::Pod for super::HitBatch {}
}

/// Most argument values one hit record carries (`--args N`): 12, the most a USDT site
/// has (sys/sdt.h's STAP_PROBE12, libbpf's limit). Only records with arguments carry
/// them ([`HitArgsEvent`]); a plain hit's record ([`HitEvent`]) does not grow.
pub const MAX_ARGS: usize = 12;

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
    /// Non-zero: the value is a pointer, and the slot holds the 8 bytes at
    /// `value + deref - 1` instead (a string key's bytes, 8 to a slot).
    pub deref: u32,
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

/// In-kernel histogram mode: by default one hit in this many has its handler timed. Two
/// clock reads cost more than the rest of the in-kernel handler together (~90 ns of
/// ~150 ns per hit on the project's VM, docs/performance.md); the hits in between are
/// counted exactly, and a random 1/64 of hits still gives thousands of timed hits per
/// second on a hot probe.
pub const DEFAULT_TIME_EVERY: u64 = 64;

/// The `TIMING` map's value for timing one hit in `every` (at least 1): a hit is timed
/// when its per-CPU pseudo-random draw is at or above it, so 0 times every hit.
pub fn untimed_below(every: u64) -> u64 {
    if every <= 1 {
        return 0;
    }
    u64::MAX - u64::MAX / every
}

/// The per-CPU draw deciding which hits are timed: xorshift64, seeded from the CPU on
/// first use (a zero state would stay zero). Pseudo-random rather than every n-th hit,
/// because probes often fire in a fixed cycle (entry, inner entry, inner return,
/// return): an n-th-hit rule would time the same probe of the cycle every time.
#[inline(always)]
pub fn next_draw(state: u64, cpu: u32) -> u64 {
    let mut x = if state == 0 {
        0x9E37_79B9_7F4A_7C15 ^ u64::from(cpu)
    } else {
        state
    };
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

#[cfg(test)]
mod wakeup_tests {
    use super::*;

    #[test]
    fn twelve_arguments_do_not_grow_a_plain_hit() {
        // Only records with arguments carry them: the hot path's records stay as small.
        assert_eq!(core::mem::size_of::<HitEvent>(), 32);
        assert_eq!(core::mem::size_of::<HitBatch>(), 8 + 32 * BATCH_RECORDS);
        assert_eq!(core::mem::size_of::<HitArgsEvent>(), 32 + 8 + 8 * MAX_ARGS);
        assert_eq!(MAX_ARGS, 12);
    }

    #[test]
    fn the_threshold_is_split_among_cpus_in_whole_records() {
        // 520-byte batches with their 8-byte headers: 528 bytes each.
        assert_eq!(wakeup_records(64 << 10, 2), 62);
        assert_eq!(wakeup_records(64 << 10, 64), 1);
        assert_eq!(wakeup_records(64 << 10, 0), 124);
        // Never zero: a record always counts.
        assert_eq!(wakeup_records(10, 4), 1);
    }
}

#[cfg(test)]
mod timing_tests {
    use super::*;

    /// Times hits of `probes` firing in turn; returns timed hits per probe.
    fn timed_per_probe(every: u64, probes: usize, hits: usize) -> [u64; 4] {
        let threshold = untimed_below(every);
        let mut state = 0;
        let mut timed = [0u64; 4];
        for hit in 0..hits {
            state = next_draw(state, 0);
            if state >= threshold {
                timed[hit % probes] += 1;
            }
        }
        timed
    }

    #[test]
    fn every_hit_is_timed_when_every_is_one() {
        assert_eq!(untimed_below(1), 0);
        assert_eq!(untimed_below(0), 0);
        assert_eq!(timed_per_probe(1, 4, 1000), [250; 4]);
    }

    #[test]
    fn one_in_every_is_timed_without_favouring_a_probe_of_a_cycle() {
        // 4 probes in a fixed cycle, 1 in 64 timed: each probe gets ~1/64 of its
        // 1,000,000 hits (binomial sd ~124; 6 sd allowed).
        let timed = timed_per_probe(64, 4, 4_000_000);
        for (probe, &n) in timed.iter().enumerate() {
            assert!(n.abs_diff(1_000_000 / 64) < 750, "probe {probe}: {timed:?}");
        }
    }

    #[test]
    fn the_draw_never_sticks() {
        let mut state = 0;
        for cpu in 0..4 {
            state = next_draw(0, cpu);
            assert_ne!(state, 0);
        }
        for _ in 0..100_000 {
            state = next_draw(state, 0);
            assert_ne!(state, 0);
        }
    }
}

/// How a probe's hits reach user space; per probe in the `CONFIG` map.
pub mod mode {
    /// Every hit is a ring buffer record.
    pub const RING: u32 = 0;
    /// Every hit is counted in the kernel; one in `sample_every` is a record.
    pub const SAMPLE: u32 = 1;
    /// Every hit is counted in the kernel and, timed or one in `--time-every`, lands in
    /// an in-kernel per-CPU histogram; no records at all.
    pub const KERNEL_HISTOGRAM: u32 = 2;
    /// Outside the window (attached, not yet opened; or past the cut): hits count
    /// nowhere (no record, count or gap), so what user space reads is one set of hits,
    /// all inside it.
    pub const CLOSED: u32 = 3;
}

/// Per-probe settings, indexed by probe id in the `CONFIG` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeConfig {
    /// One of [`mode`].
    pub mode: u32,
    /// SAMPLE: record one hit in this many (at least 1).
    pub sample_every: u32,
    /// Arguments to capture with each record; `count` 0 captures none.
    pub args: ArgsConfig,
    /// Half of a latency pair: how the kernel pairs it in KERNEL_HISTOGRAM mode.
    pub pair: PairConfig,
}

/// A latency pair's half, as the kernel pairs it: in KERNEL_HISTOGRAM mode a probe with
/// a `role` is paired in the kernel (per thread, a stack of [`pair::DEPTH`] open calls)
/// and its calls' durations land in the pair's in-kernel histogram; in RING mode it
/// streams every hit with the stack pointer and user space pairs them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairConfig {
    /// [`pair::NONE`], [`pair::START`] or [`pair::END`].
    pub role: u32,
    /// The pair's index in the pair maps (`PAIR_COUNTS`, `PAIR_HIST`, `PAIR_STACKS`).
    pub slot: u32,
    /// Bytes the end's stack pointer lies above its start's: 8 at a uretprobe (the
    /// return address popped), 0 at a `ret` instruction.
    pub sp_back: u32,
    /// Non-zero: frames are told apart by the stack pointer (functions); zero: last
    /// in, first out (USDT pairs, which have no frame).
    pub checks_frames: u32,
}

/// In-kernel latency pairs: the per-thread stack of open calls, the per-pair counts,
/// and the duration histogram, whose buckets are the counts of an HDR histogram of 1 ns
/// lowest value and 3 significant digits (what user space keeps), so a bucket read back
/// at its lowest value is recorded in the same HDR bucket: nothing lost but the
/// values past [`pair::MAX_EXP`].
pub mod pair {
    pub const NONE: u32 = 0;
    pub const START: u32 = 1;
    pub const END: u32 = 2;
    /// Open calls of one pair kept per thread; deeper ones are counted as overflowed.
    pub const DEPTH: usize = 16;
    /// (pair, thread) stacks kept at once (an LRU: the least recently used go first).
    pub const STACK_ENTRIES: u32 = 8192;
    /// HDR's half sub-bucket count for 3 significant digits (2048 sub-buckets).
    const HALF_BITS: u32 = 10;
    /// Durations from 2^MAX_EXP ns (~550 s) on share the last bucket.
    pub const MAX_EXP: u32 = 39;
    /// Buckets per histogram: HDR's counts array up to 2^MAX_EXP.
    pub const BUCKETS: u32 = (MAX_EXP - HALF_BITS + 1) << HALF_BITS;
    /// Buckets per map value: a per-CPU value is at most 32 KiB.
    pub const CHUNK: usize = 512;
    /// Map values per histogram.
    pub const CHUNKS: u32 = BUCKETS / CHUNK as u32;
    /// Histograms per pair: calls with no probed hit nested inside, and the rest.
    pub const HISTOGRAMS: u32 = 2;

    /// HDR's counts index of `ns` (lowest trackable 1, 3 significant digits).
    #[inline(always)]
    pub fn bucket(ns: u64) -> u32 {
        if ns >> MAX_EXP != 0 {
            return BUCKETS - 1;
        }
        let bucket = 64 - HALF_BITS - 1 - (ns | ((2 << HALF_BITS) - 1)).leading_zeros();
        let sub = (ns >> bucket) as u32;
        ((bucket + 1) << HALF_BITS) + sub - (1 << HALF_BITS)
    }

    /// The lowest value of bucket `index`.
    pub fn lowest(index: u32) -> u64 {
        if index < (1 << HALF_BITS) {
            return u64::from(index);
        }
        let bucket = (index >> HALF_BITS) - 1;
        let sub = u64::from(index & ((1 << HALF_BITS) - 1)) + (1 << HALF_BITS);
        sub << bucket
    }

    /// Map index of the chunk holding `bucket` of histogram `which` of pair `slot`.
    #[inline(always)]
    pub fn chunk(slot: u32, which: u32, bucket: u32) -> u32 {
        (slot * HISTOGRAMS + which) * CHUNKS + bucket / CHUNK as u32
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn buckets_are_contiguous_and_their_lowest_values_land_in_them() {
            let mut last = 0;
            for index in 0..BUCKETS {
                let low = lowest(index);
                assert_eq!(bucket(low), index, "{index}");
                if index > 0 {
                    assert!(low > last);
                    assert_eq!(bucket(low - 1), index - 1, "{index}");
                }
                last = low;
            }
            assert_eq!(bucket(u64::MAX), BUCKETS - 1);
            assert_eq!(bucket(2047), 2047);
            assert_eq!(lowest(bucket(2049)), 2048);
            assert_eq!(BUCKETS % CHUNK as u32, 0);
        }
    }
}

/// One open call of a pair on a thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairFrame {
    pub start_ns: u64,
    /// The stack pointer at the start (frames of the same function told apart).
    pub sp: u64,
    /// Probe hits of the pair inside the call so far (nested or recursive calls).
    pub nested: u64,
}

/// One thread's open calls of one pair, keyed `slot << 32 | tid`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairStack {
    /// Frames in use, innermost last.
    pub depth: u32,
    /// Calls open beyond [`pair::DEPTH`], not timed.
    pub overflow: u32,
    pub frames: [PairFrame; pair::DEPTH],
}

/// One pair's counts on one CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairCounts {
    /// Calls paired: a start and its end.
    pub calls: u64,
    /// Calls whose frame an exception or longjmp unwound (no end seen).
    pub unwound: u64,
    /// Starts not tracked (more than [`pair::DEPTH`] open on a thread).
    pub overflowed: u64,
    /// Paired calls with probe hits nested inside, and those hits.
    pub nested_calls: u64,
    pub nested_hits: u64,
}

/// [`pair::CHUNK`] buckets of a pair's histogram, on one CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairChunk {
    pub counts: [u64; pair::CHUNK],
}

#[cfg(feature = "user")]
mod pod_pair {
    // SAFETY: each type is repr(C), made only of integers (and arrays of integer
    // structs), with no padding bytes.
    unsafe impl aya::Pod for super::PairConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PairFrame {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PairStack {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PairCounts {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PairChunk {}
}

/// One probe's in-kernel histogram on one CPU: a count per [`khist`] bucket of its timed
/// hits. One map value per probe, so user space reads a probe's histogram with one
/// lookup instead of one per bucket.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelHistogram {
    pub counts: [u64; khist::BUCKETS as usize],
}

#[cfg(feature = "user")]
mod pod_histogram {
    // SAFETY: repr(C), an array of integers only, no padding.
    unsafe impl aya::Pod for super::KernelHistogram {}
}

/// One probe's gap histogram on one CPU: per [`gap`] bucket, how many of its hits came
/// that long after the previous hit on the same CPU (the caches' temperature; see
/// `probe-user/src/calibrate/gap.rs`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GapHistogram {
    pub counts: [u64; gap::BUCKETS as usize],
}

#[cfg(feature = "user")]
mod pod_gaps {
    // SAFETY: repr(C), an array of integers only, no padding.
    unsafe impl aya::Pod for super::GapHistogram {}
}

/// Powers-of-two buckets of the time between two hits on one CPU: bucket 0 holds gaps
/// under 2^MIN_EXP ns (1 us), bucket b >= 1 gaps in [2^(MIN_EXP+b-1), 2^(MIN_EXP+b)),
/// the last one everything from 2^(MIN_EXP+BUCKETS-2) ns (~268 ms) on.
pub mod gap {
    pub const MIN_EXP: u32 = 10;
    pub const BUCKETS: u32 = 20;

    /// Bucket of a gap of `ns`.
    #[inline(always)]
    pub fn bucket(ns: u64) -> u32 {
        if ns < (1 << MIN_EXP) {
            return 0;
        }
        let exp = 63 - ns.leading_zeros();
        let b = exp - MIN_EXP + 1;
        if b >= BUCKETS { BUCKETS - 1 } else { b }
    }

    /// The gap a bucket stands for: its geometric middle, ns (0 for bucket 0, the last
    /// bucket's lower bound times 1.41).
    pub fn middle_ns(index: u32) -> f64 {
        if index == 0 {
            return 0.0;
        }
        let low = (1u64 << (MIN_EXP + index - 1)) as f64;
        low * core::f64::consts::SQRT_2
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn buckets_are_powers_of_two_from_a_microsecond() {
            assert_eq!(bucket(0), 0);
            assert_eq!(bucket(1023), 0);
            assert_eq!(bucket(1024), 1);
            assert_eq!(bucket(2047), 1);
            assert_eq!(bucket(2048), 2);
            assert_eq!(bucket(1 << 20), 11);
            assert_eq!(bucket(u64::MAX), BUCKETS - 1);
            for b in 1..BUCKETS {
                let low = 1u64 << (MIN_EXP + b - 1);
                assert_eq!(bucket(low), b);
                assert!(middle_ns(b) > low as f64 && middle_ns(b) < 2.0 * low as f64);
            }
        }
    }
}

/// Log-linear buckets of the in-kernel histogram: exact below 32 ns, then 16 buckets per
/// power of two (at most 1/16 relative width, so a bucket's midpoint is within 3.2%).
pub mod khist {
    /// Sub-buckets per power of two, as a bit count.
    const SUB_BITS: u32 = 4;
    const SUB: u64 = 1 << SUB_BITS;
    /// Values below this each have their own bucket.
    const EXACT: u64 = 2 * SUB;
    /// Highest power of two tracked: 2^39 ns (~550 s); larger values share the last bucket.
    const MAX_EXP: u32 = 39;
    /// Buckets per probe.
    pub const BUCKETS: u32 = EXACT as u32 + (MAX_EXP - SUB_BITS) * SUB as u32;

    /// Bucket of `ns`.
    #[inline(always)]
    pub fn bucket(ns: u64) -> u32 {
        if ns < EXACT {
            return ns as u32;
        }
        let exp = 63 - ns.leading_zeros();
        if exp > MAX_EXP {
            return BUCKETS - 1;
        }
        let sub = ((ns >> (exp - SUB_BITS)) & (SUB - 1)) as u32;
        EXACT as u32 + (exp - SUB_BITS - 1) * SUB as u32 + sub
    }

    /// Lowest and highest value of bucket `index` (inclusive).
    pub fn bounds(index: u32) -> (u64, u64) {
        if u64::from(index) < EXACT {
            return (u64::from(index), u64::from(index));
        }
        let rel = index - EXACT as u32;
        let exp = rel / SUB as u32 + SUB_BITS + 1;
        let sub = u64::from(rel % SUB as u32);
        let width = 1u64 << (exp - SUB_BITS);
        let low = (1u64 << exp) + sub * width;
        (low, low + width - 1)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn buckets_cover_values_without_gaps() {
            let mut expected_low = 0;
            for index in 0..BUCKETS {
                let (low, high) = bounds(index);
                assert_eq!(low, expected_low, "bucket {index}");
                assert!(high >= low);
                assert_eq!(bucket(low), index, "low of {index}");
                assert_eq!(bucket(high), index, "high of {index}");
                if index >= EXACT as u32 {
                    // Relative width at most 1/16.
                    assert!(
                        (high - low + 1) * 16 <= low,
                        "bucket {index}: {low}..{high}"
                    );
                }
                expected_low = high + 1;
            }
            assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        }

        #[test]
        fn known_values() {
            assert_eq!(bucket(0), 0);
            assert_eq!(bucket(31), 31);
            assert_eq!(bounds(bucket(32)), (32, 33));
            assert_eq!(bounds(bucket(1000)), (992, 1023));
            assert_eq!(bounds(bucket(1024)), (1024, 1087));
        }
    }
}

#[cfg(feature = "user")]
mod pod_config {
    // SAFETY: repr(C), integers and arrays of integer structs only, padding spelled out.
    unsafe impl aya::Pod for super::ProbeConfig {}
}

/// Kernel dispatch time: fentry/fexit programs around the kernel's uprobe handling
/// measure, per hit of the target, the in-kernel time from the top of the uprobe path
/// to its end (lookup, handlers, emulation or single-step setup), which a clock inside
/// the probe's own handler cannot see.
pub mod dispatch {
    /// Slots per probe in the dispatch totals and histograms: hits of its entry
    /// breakpoint, and returns through the uretprobe trampoline.
    pub const SLOTS_PER_PROBE: u32 = 2;
    /// Slot offset of the entry breakpoint (uprobe, USDT, a uretprobe's entry).
    pub const ENTRY: u32 = 0;
    /// Slot offset of the return (uretprobe).
    pub const RETURN: u32 = 1;
    /// The trap flag in eflags: set when the kernel leaves a hit to single-step the
    /// probed instruction out of line, the second half of which comes back later.
    pub const X86_EFLAGS_TF: u64 = 0x100;
    /// Byte offset of `ip` in x86-64 `struct pt_regs`.
    pub const PT_REGS_IP: usize = 128;
    /// Byte offset of `flags` in x86-64 `struct pt_regs`.
    pub const PT_REGS_FLAGS: usize = 144;
    /// The `int3` the kernel plants is one byte: the trap leaves `ip` just after it.
    pub const SWBP_INSN_SIZE: u64 = 1;
    /// Threads of the target whose dispatch state is kept at once (48 bytes each): more
    /// than a busy server runs; beyond it the least recently trapped thread's is dropped.
    pub const MAX_THREADS: u32 = 8192;
}

/// One thread's dispatch in flight: set at fentry, read at fexit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchState {
    /// The thread in the kernel's uprobe path, 0 before its first dispatch.
    pub tid: u32,
    /// Non-zero: the first half of a single-stepped hit ended; its second half (after
    /// the out-of-line step) adds to `acc_ns`.
    pub pending_sstep: u32,
    /// `bpf_ktime_get_ns()` at fentry.
    pub start_ns: u64,
    /// Time of the halves already ended.
    pub acc_ns: u64,
    /// The probed address (entry) or the probed function (return) in the target.
    pub addr: u64,
    /// [`dispatch::ENTRY`] or [`dispatch::RETURN`].
    pub kind: u32,
    /// Non-zero: a return timed from `uprobe_notify_resume` (the trampoline's int3),
    /// which `uprobe_handle_trampoline`, nested in it on 6.11+, leaves alone.
    pub via_notify: u32,
}

/// Byte offsets in the running kernel's structures, read from its BTF at load time:
/// what the dispatch programs follow to tell a uretprobe's return from a probe hit
/// (`current->mm->uprobes_state.xol_area->vaddr`, the trampoline) and to name the
/// returning function (`current->utask->return_instances->func`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchOffsets {
    /// `task_struct.mm`
    pub task_mm: u32,
    /// `mm_struct.uprobes_state.xol_area`
    pub mm_xol_area: u32,
    /// `xol_area.vaddr`
    pub xol_vaddr: u32,
    /// `task_struct.utask`
    pub task_utask: u32,
    /// `uprobe_task.return_instances`
    pub utask_return_instances: u32,
    /// `return_instance.func`
    pub ri_func: u32,
    /// Non-zero when every offset above was found.
    pub valid: u32,
    pub _pad: u32,
}

/// Dispatches counted in one slot, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchTotal {
    pub count: u64,
    pub sum_ns: u64,
}

#[cfg(feature = "user")]
mod pod_dispatch {
    // SAFETY: repr(C), integers only, padding spelled out.
    unsafe impl aya::Pod for super::DispatchState {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::DispatchTotal {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::DispatchOffsets {}
}
