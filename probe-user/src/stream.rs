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

use crate::aggregate::{Aggregator, Snapshot};
use crate::attach::DropCounters;

/// How often the ring buffer is drained when no wakeup came.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How often rates close a tick and a snapshot is published.
const SNAPSHOT_INTERVAL: Duration = Duration::from_millis(100);
/// How often the kernel's drop counters are read (a syscall per probe).
const DROPS_INTERVAL: Duration = Duration::from_millis(500);

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
    drops: DropCounters,
    mut aggregator: Aggregator,
    snapshots: watch::Sender<Snapshot>,
    mut commands: mpsc::Receiver<CollectorCommand>,
) -> Aggregator {
    let started = Instant::now();
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    let mut publish = tokio::time::interval(SNAPSHOT_INTERVAL);
    let mut read_drops = tokio::time::interval(DROPS_INTERVAL);
    for timer in [&mut poll, &mut publish, &mut read_drops] {
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    let mut last_tick = Instant::now();
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
            _ = read_drops.tick() => update_drops(&drops, &mut aggregator),
            _ = publish.tick() => {
                let now = Instant::now();
                aggregator.tick(now - last_tick);
                last_tick = now;
                snapshots.send_replace(aggregator.snapshot(started.elapsed()));
            }
            command = commands.recv() => match command {
                Some(CollectorCommand::CloseWindow { at_ktime_ns }) => {
                    aggregator.close_window(at_ktime_ns);
                }
                Some(CollectorCommand::Stop) | None => break,
            },
        }
    }
    stream.drain(|record| aggregator.record_any(&record));
    update_drops(&drops, &mut aggregator);
    aggregator.unknown_records += stream.malformed;
    snapshots.send_replace(aggregator.snapshot(started.elapsed()));
    aggregator
}

fn update_drops(drops: &DropCounters, aggregator: &mut Aggregator) {
    for id in 0..aggregator.probes().len() {
        // A failed read keeps the last known count; the map lives as long as we do.
        if let Ok(dropped) = drops.read(id as u32) {
            aggregator.set_dropped(id, dropped);
        }
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
