//! Streaming: hit records out of the kernel's ring buffer and into the aggregator.
//!
//! The eBPF handlers wake user space only once a batch is queued, so the collector
//! drains on readiness and on a short timer. It runs as its own task, apart from the
//! UI, so a slow terminal never stalls the ring buffer; it publishes [`Snapshot`]s
//! over a watch channel and hands back the whole [`Aggregator`] when stopped.

use std::{
    io,
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use probe_common::{HitArgsEvent, HitEvent};
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::{mpsc, watch},
};

use crate::aggregate::{Aggregator, IntervalLog, Snapshot};
use crate::attach::KernelCounters;
use probe_common::mode;

/// How often the ring buffer is drained when no wakeup came.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How often rates close a tick and a snapshot is published.
const SNAPSHOT_INTERVAL: Duration = Duration::from_millis(100);
/// How often the kernel's counters are read (a syscall per probe, a few hundred for an
/// in-kernel histogram).
const COUNTERS_INTERVAL: Duration = Duration::from_millis(500);

/// How the collector treats hot probes.
#[derive(Debug, Clone, Copy, Default)]
pub struct CollectorOptions {
    /// Switch a ring buffer probe to in-kernel aggregation once its rate exceeds this
    /// many hits per second.
    pub auto_kernel_above: Option<f64>,
    /// Keep per-interval histograms of this length (for interval logs).
    pub interval: Option<Duration>,
}

/// What the collector hands back when it stops.
#[derive(Debug, Default)]
pub struct Collected {
    pub aggregator: Aggregator,
    pub intervals: IntervalLog,
}

/// The ring buffer, readable from tokio.
pub struct HitStream {
    ring: AsyncFd<RingBuf<MapData>>,
    /// Records shorter than a [`HitEvent`]: a bug if ever non-zero.
    pub malformed: u64,
}

impl HitStream {
    pub fn new(ring: RingBuf<MapData>) -> io::Result<Self> {
        // SAFETY: the ring buffer owns its map fd and keeps it open, unchanged, until it
        // is dropped, which the AsyncFd does no earlier than itself.
        let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(Self { ring, malformed: 0 })
    }

    /// Waits until the kernel signals queued records.
    pub async fn readable(&mut self) -> io::Result<()> {
        let mut guard = self.ring.readable_mut().await?;
        guard.clear_ready();
        Ok(())
    }

    /// Hands every queued record to `on_hit`; returns how many there were.
    pub fn drain(&mut self, mut on_hit: impl FnMut(Record)) -> usize {
        let ring = self.ring.get_mut();
        let mut count = 0;
        while let Some(bytes) = ring.next() {
            match Record::parse(&bytes) {
                Some(record) => {
                    on_hit(record);
                    count += 1;
                }
                None => self.malformed += 1,
            }
        }
        count
    }
}

/// One ring buffer record; the eBPF programs write two kinds, told apart by size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    Hit(HitEvent),
    HitWithArgs(HitArgsEvent),
}

impl Record {
    fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() >= size_of::<HitArgsEvent>() {
            // SAFETY: the slice holds a whole HitArgsEvent, a plain-integer repr(C) type
            // any bit pattern of which is valid; read_unaligned makes no alignment demand.
            let event = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<HitArgsEvent>()) };
            Some(Self::HitWithArgs(event))
        } else if bytes.len() >= size_of::<HitEvent>() {
            // SAFETY: as above, for a HitEvent.
            let event = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<HitEvent>()) };
            Some(Self::Hit(event))
        } else {
            None
        }
    }
}

/// Requests to the collector task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollectorCommand {
    /// From now on count only hits up to `at_ktime_ns` (CLOCK_MONOTONIC).
    CloseWindow { at_ktime_ns: u64 },
    /// Drain what is queued, then return the aggregator.
    Stop,
}

/// Now on the clock `bpf_ktime_get_ns()` reads (CLOCK_MONOTONIC), in ns.
pub fn ktime_now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Runs until [`CollectorCommand::Stop`] or until every sender is gone, then returns
/// everything aggregated.
pub async fn collect(
    mut stream: HitStream,
    mut counters: KernelCounters,
    mut aggregator: Aggregator,
    options: CollectorOptions,
    snapshots: watch::Sender<Snapshot>,
    mut commands: mpsc::Receiver<CollectorCommand>,
) -> Collected {
    let started = Instant::now();
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    let mut publish = tokio::time::interval(SNAPSHOT_INTERVAL);
    let mut read_counters = tokio::time::interval(COUNTERS_INTERVAL);
    for timer in [&mut poll, &mut publish, &mut read_counters] {
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    let mut last_tick = Instant::now();
    let mut counters_frozen = false;
    let mut intervals = IntervalLog::default();
    let interval_length = options.interval.unwrap_or(Duration::MAX);
    let mut interval_timer = tokio::time::interval_at(
        tokio::time::Instant::now() + options.interval.unwrap_or(Duration::from_secs(3600)),
        options.interval.unwrap_or(Duration::from_secs(3600)),
    );
    let mut interval_start = Duration::ZERO;
    loop {
        tokio::select! {
            ready = stream.readable() => {
                if ready.is_err() {
                    // Readiness failed (cannot on a live map fd); fall back to the timer.
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
                stream.drain(|record| aggregator.record_any(&record));
            }
            _ = poll.tick() => {
                stream.drain(|record| aggregator.record_any(&record));
            }
            _ = read_counters.tick(), if !counters_frozen => {
                read_kernel_counters(&counters, &mut aggregator);
            }
            _ = publish.tick() => {
                let now = Instant::now();
                aggregator.tick(now - last_tick);
                last_tick = now;
                if let Some(limit) = options.auto_kernel_above {
                    switch_hot_probes(&mut counters, &mut aggregator, limit);
                }
                snapshots.send_replace(aggregator.snapshot(started.elapsed()));
            }
            _ = interval_timer.tick(), if options.interval.is_some() => {
                stream.drain(|record| aggregator.record_any(&record));
                let now = started.elapsed();
                let length = (now - interval_start).min(interval_length);
                intervals.close_interval(&mut aggregator, interval_start.as_secs_f64(), length.as_secs_f64());
                interval_start = now;
            }
            command = commands.recv() => match command {
                Some(CollectorCommand::CloseWindow { at_ktime_ns }) => {
                    aggregator.close_window(at_ktime_ns);
                    // Kernel counts carry no timestamps: take them at the cut, not later.
                    read_kernel_counters(&counters, &mut aggregator);
                    if let Some(dispatch) = counters.dispatch() {
                        crate::cost::read_dispatch(dispatch, &mut aggregator, true);
                    }
                    counters_frozen = true;
                }
                Some(CollectorCommand::Stop) | None => break,
            },
        }
    }
    stream.drain(|record| aggregator.record_any(&record));
    if !counters_frozen {
        read_kernel_counters(&counters, &mut aggregator);
        if let Some(dispatch) = counters.dispatch() {
            crate::cost::read_dispatch(dispatch, &mut aggregator, true);
        }
    }
    aggregator.unknown_records += stream.malformed;
    if options.interval.is_some() {
        let now = started.elapsed();
        intervals.close_interval(
            &mut aggregator,
            interval_start.as_secs_f64(),
            (now - interval_start).as_secs_f64(),
        );
    }
    snapshots.send_replace(aggregator.snapshot(started.elapsed()));
    Collected {
        aggregator,
        intervals,
    }
}

/// Reads drops, and for probes not streaming every hit, the kernel's own counts. A
/// failed read keeps the last known numbers; the maps live as long as we do.
fn read_kernel_counters(counters: &KernelCounters, aggregator: &mut Aggregator) {
    if let Some(dispatch) = counters.dispatch() {
        crate::cost::read_dispatch(dispatch, aggregator, false);
    }
    for (id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
        let id = id as u32;
        if let Ok(dropped) = counters.drops(id) {
            probe.dropped = dropped;
        }
        if probe.mode == mode::SAMPLE
            && let Ok(total) = counters.sampled_hits(id)
        {
            probe.set_sampled_hits(total);
        }
        // A probe switched by auto mode keeps its ring buffer counts and adds these.
        if (probe.mode == mode::KERNEL_HISTOGRAM || probe.kernel_hits > 0)
            && let Ok(totals) = counters.histogram(id)
        {
            probe.apply_kernel_histogram(&totals);
        }
    }
}

/// Takes the kernel's counts as they are when the window opens: hits counted before are
/// not measured. Call it before announcing that probes are live.
pub fn baseline_kernel_counters(counters: &KernelCounters, aggregator: &mut Aggregator) {
    if let Some(dispatch) = counters.dispatch() {
        crate::cost::baseline_dispatch(dispatch, aggregator);
    }
    for (id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
        let id = id as u32;
        let sampled = match probe.mode {
            mode::SAMPLE => counters.sampled_hits(id).unwrap_or(0),
            _ => 0,
        };
        let histogram = match probe.mode {
            mode::KERNEL_HISTOGRAM => counters.histogram(id).unwrap_or_default(),
            _ => Vec::new(),
        };
        probe.baseline_kernel_counts(sampled, &histogram);
    }
}

/// Moves ring buffer probes hotter than `limit` hits/s to in-kernel aggregation, which
/// costs the target less per hit and user space nothing per hit.
fn switch_hot_probes(counters: &mut KernelCounters, aggregator: &mut Aggregator, limit: f64) {
    let mut switched = Vec::new();
    for (id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
        let rate = probe.rate.per_second();
        if probe.mode == mode::RING
            && rate > limit
            && counters.set_mode(id as u32, mode::KERNEL_HISTOGRAM).is_ok()
        {
            probe.mode = mode::KERNEL_HISTOGRAM;
            switched.push((id, rate));
        }
    }
    for (id, rate) in switched {
        aggregator.notices.push(format!(
            "probe {id} fires {rate:.0} hits/s, above {limit:.0}: aggregating it in the kernel from now on"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T>(value: &T) -> Vec<u8> {
        // SAFETY: reading the bytes of a plain repr(C) value for a test.
        unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
            .to_vec()
    }

    #[test]
    fn records_are_told_apart_by_size() {
        let hit = HitEvent {
            probe_id: 3,
            handler_ns: 99,
            ..Default::default()
        };
        assert_eq!(Record::parse(&bytes_of(&hit)), Some(Record::Hit(hit)));
        let with_args = HitArgsEvent {
            hit,
            count: 2,
            faulted: 0,
            args: [7, u64::MAX, 0, 0, 0, 0],
        };
        assert_eq!(
            Record::parse(&bytes_of(&with_args)),
            Some(Record::HitWithArgs(with_args))
        );
        assert_eq!(Record::parse(&[0u8; 31]), None);
    }
}
