//! The maps handed over once the probes are attached: the ring buffer to the
//! collector, and the kernel's per-probe counters and config.

use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
};
use probe_common::{KernelHistogram, PairChunk, PairCounts, PairStack, ProbeConfig, khist, pair};

use super::{AttachError, Attachment, dispatch};

impl Attachment {
    /// Takes the ring buffer of hit records (once).
    pub fn take_ring(&mut self) -> Result<RingBuf<MapData>, AttachError> {
        let map = self
            .ebpf
            .take_map("EVENTS")
            .ok_or(AttachError::MissingMap("EVENTS"))?;
        RingBuf::try_from(map).map_err(|source| AttachError::Map {
            name: "EVENTS",
            source,
        })
    }

    /// Takes the kernel-side counters and the per-probe config (once, after attaching).
    pub fn take_counters(&mut self) -> Result<KernelCounters, AttachError> {
        fn take<T>(
            ebpf: &mut Ebpf,
            name: &'static str,
            convert: impl FnOnce(aya::maps::Map) -> Result<T, aya::maps::MapError>,
        ) -> Result<T, AttachError> {
            let map = ebpf.take_map(name).ok_or(AttachError::MissingMap(name))?;
            convert(map).map_err(|source| AttachError::Map { name, source })
        }
        Ok(KernelCounters {
            drops: take(&mut self.ebpf, "DROPS", PerCpuArray::try_from)?,
            thread_drops: take(&mut self.ebpf, "THREAD_DROPS", PerCpuHashMap::try_from)?,
            hits: take(&mut self.ebpf, "HITS", PerCpuArray::try_from)?,
            histogram: take(&mut self.ebpf, "KERNEL_HISTOGRAM", PerCpuArray::try_from)?,
            gaps: take(&mut self.ebpf, "GAPS", PerCpuArray::try_from)?,
            config: take(&mut self.ebpf, "CONFIG", Array::try_from)?,
            pair_counts: take(&mut self.ebpf, "PAIR_COUNTS", PerCpuArray::try_from)?,
            pair_hist: take(&mut self.ebpf, "PAIR_HIST", PerCpuArray::try_from)?,
            pair_stacks: take(&mut self.ebpf, "PAIR_STACKS", HashMap::try_from)?,
            timing: self.timing_handle()?,
            dispatch: None,
        })
    }

    /// A second handle on the TIMING map, which stays here for the calibration's cases:
    /// auto mode changes it from the collector, which owns the counters.
    fn timing_handle(&self) -> Result<Array<MapData, u64>, AttachError> {
        let name = "TIMING";
        let Some(aya::maps::Map::Array(data)) = self.ebpf.map(name) else {
            return Err(AttachError::MissingMap(name));
        };
        let id = data
            .info()
            .map_err(|source| AttachError::Map { name, source })?
            .id();
        let data = MapData::from_id(id).map_err(|source| AttachError::Map { name, source })?;
        Array::try_from(aya::maps::Map::Array(data))
            .map_err(|source| AttachError::Map { name, source })
    }
}

/// Counts per `khist` bucket, summed over every CPU's copy of one probe's histogram.
fn sum_over_cpus<'a>(per_cpu: impl Iterator<Item = &'a KernelHistogram>) -> Vec<u64> {
    let mut totals = vec![0u64; khist::BUCKETS as usize];
    for histogram in per_cpu {
        for (total, count) in totals.iter_mut().zip(histogram.counts) {
            *total += count;
        }
    }
    totals
}

/// What the kernel counts per probe besides ring buffer records, and the per-probe
/// config, which can change while attached.
pub struct KernelCounters {
    drops: PerCpuArray<MapData, u64>,
    /// Per (probe id << 32 | thread id), per CPU: dropped hits.
    thread_drops: PerCpuHashMap<MapData, u64, u64>,
    hits: PerCpuArray<MapData, u64>,
    histogram: PerCpuArray<MapData, KernelHistogram>,
    gaps: PerCpuArray<MapData, probe_common::GapHistogram>,
    config: Array<MapData, ProbeConfig>,
    /// Latency pairs paired in the kernel: counts and histograms per slot, and each
    /// thread's open calls.
    pair_counts: PerCpuArray<MapData, PairCounts>,
    pair_hist: PerCpuArray<MapData, PairChunk>,
    pair_stacks: HashMap<MapData, u64, PairStack>,
    /// One hit in how many is timed (`probe_common::untimed_below`), for all probes.
    timing: Array<MapData, u64>,
    /// Kernel dispatch measurement, when it runs (`dispatch`).
    dispatch: Option<dispatch::Dispatch>,
}

impl KernelCounters {
    /// Hands over the dispatch measurement, read with the other counters.
    pub fn set_dispatch(&mut self, dispatch: dispatch::Dispatch) {
        self.dispatch = Some(dispatch);
    }

    /// The dispatch measurement, if it runs.
    pub fn dispatch(&self) -> Option<&dispatch::Dispatch> {
        self.dispatch.as_ref()
    }

    /// Hits of `probe_id` whose record did not fit in the ring buffer, over all CPUs.
    pub fn drops(&self, probe_id: u32) -> Result<u64, aya::maps::MapError> {
        Ok(self.drops.get(&probe_id, 0)?.iter().sum())
    }

    /// Dropped hits per (probe id, thread id), over all CPUs: every pair the kernel's
    /// table holds (it forgets the least recently dropping past
    /// `probe_common::THREAD_DROPS_ENTRIES`).
    pub fn thread_drops(&self) -> Vec<(u32, u32, u64)> {
        self.thread_drops
            .iter()
            .filter_map(Result::ok)
            .map(|(key, per_cpu)| ((key >> 32) as u32, key as u32, per_cpu.iter().sum::<u64>()))
            .collect()
    }

    /// Every hit of a probe in SAMPLE or KERNEL_HISTOGRAM mode, over all CPUs.
    pub fn hits(&self, probe_id: u32) -> Result<u64, aya::maps::MapError> {
        Ok(self.hits.get(&probe_id, 0)?.iter().sum())
    }

    /// The in-kernel histogram of `probe_id`'s timed hits: counts per `khist` bucket, over
    /// all CPUs.
    pub fn histogram(&self, probe_id: u32) -> Result<Vec<u64>, aya::maps::MapError> {
        Ok(sum_over_cpus(self.histogram.get(&probe_id, 0)?.iter()))
    }

    /// `probe_id`'s gap histogram (`probe_common::gap` buckets) over all CPUs.
    pub fn gaps(&self, probe_id: u32) -> Result<Vec<u64>, aya::maps::MapError> {
        let mut totals = vec![0u64; probe_common::gap::BUCKETS as usize];
        for histogram in self.gaps.get(&probe_id, 0)?.iter() {
            for (total, count) in totals.iter_mut().zip(histogram.counts) {
                *total += count;
            }
        }
        Ok(totals)
    }

    /// Pair `slot`'s counts in the kernel, over all CPUs (cumulative).
    pub fn pair_counts(&self, slot: u32) -> Result<PairCounts, aya::maps::MapError> {
        let mut total = PairCounts::default();
        for c in self.pair_counts.get(&slot, 0)?.iter() {
            total.calls += c.calls;
            total.unwound += c.unwound;
            total.overflowed += c.overflowed;
            total.nested_calls += c.nested_calls;
            total.nested_hits += c.nested_hits;
        }
        Ok(total)
    }

    /// Histogram `which` (0: calls with nothing nested, 1: the rest) of pair `slot`:
    /// counts per `probe_common::pair` bucket over all CPUs (cumulative).
    pub fn pair_histogram(&self, slot: u32, which: u32) -> Result<Vec<u64>, aya::maps::MapError> {
        let mut totals = vec![0u64; pair::BUCKETS as usize];
        for (at, part) in totals.chunks_mut(pair::CHUNK).enumerate() {
            let index = pair::chunk(slot, which, (at * pair::CHUNK) as u32);
            for chunk in self.pair_histogram_chunk(index)?.iter() {
                for (total, count) in part.iter_mut().zip(chunk.counts) {
                    *total += count;
                }
            }
        }
        Ok(totals)
    }

    fn pair_histogram_chunk(
        &self,
        index: u32,
    ) -> Result<aya::maps::PerCpuValues<PairChunk>, aya::maps::MapError> {
        self.pair_hist.get(&index, 0)
    }

    /// Calls open in the kernel per pair slot: every thread's stack, summed.
    pub fn pair_open(&self) -> std::collections::HashMap<u32, u64> {
        let mut open = std::collections::HashMap::new();
        for (key, stack) in self.pair_stacks.iter().filter_map(Result::ok) {
            let calls = u64::from(stack.depth.min(pair::DEPTH as u32)) + u64::from(stack.overflow);
            *open.entry((key >> 32) as u32).or_insert(0) += calls;
        }
        open
    }

    /// Writes the config of a probe about to be attached
    /// ([`Attachment::attach_configured`]).
    pub fn set_config(
        &mut self,
        probe_id: u32,
        config: ProbeConfig,
    ) -> Result<(), aya::maps::MapError> {
        self.config.set(probe_id, config, 0)
    }

    /// Times the handler of one hit in `every` from now on (1: every hit).
    pub fn set_time_every(&mut self, every: u64) -> Result<(), aya::maps::MapError> {
        self.timing.set(0, probe_common::untimed_below(every), 0)
    }

    /// From its next hit on, `probe_id`'s hits count nowhere: no record, count or gap.
    /// The window's cut, so that everything read after it covers the same hits.
    pub fn stop_counting(&mut self, probe_id: u32) -> Result<(), aya::maps::MapError> {
        let config = self.config.get(&probe_id, 0)?;
        self.config
            .set(probe_id, crate::delivery::closed(config), 0)
    }

    /// Switches how `probe_id`'s hits reach user space, from its next hit on.
    pub fn set_mode(
        &mut self,
        probe_id: u32,
        mode: crate::delivery::DeliveryMode,
    ) -> Result<(), aya::maps::MapError> {
        let mut config = self.config.get(&probe_id, 0)?;
        config.mode = mode.raw();
        self.config.set(probe_id, config, 0)
    }
}
