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
use probe_common::{BATCH_RECORDS, HitArgsEvent, HitBatch, HitEvent, ProbeConfig};
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::{mpsc, oneshot, watch},
};

use crate::aggregate::{Aggregator, IntervalLog, Measurements, OwnUsage, ProbeAggregate, Snapshot};
use crate::attach::{KernelCounters, StagedFlush};
use probe_common::mode;

/// How often the ring buffer is drained when no wakeup came.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How often rates close a tick and a snapshot is published.
const SNAPSHOT_INTERVAL: Duration = Duration::from_millis(100);
/// How often the kernel's counters are read (a syscall per probe, a few hundred for an
/// in-kernel histogram).
const COUNTERS_INTERVAL: Duration = Duration::from_millis(500);

/// How often probetop measures its own CPU and memory.
const OWN_USAGE_INTERVAL: Duration = Duration::from_secs(1);

/// How the collector treats hot probes and intervals.
#[derive(Debug, Clone, Copy)]
pub struct CollectorOptions {
    /// Switch a ring buffer probe to in-kernel aggregation once its rate exceeds this
    /// many hits per second.
    pub auto_kernel_above: Option<f64>,
    /// With `auto_kernel_above`: once a probe is switched, time the handler of one hit in
    /// this many (`--time-every`), as the kernel mode does; until then every hit is timed.
    pub auto_time_every: u64,
    /// Length of a live interval: the UI's last-interval view and time series, and the
    /// histograms of an interval log.
    pub interval: Duration,
    /// Keep every interval's histograms (for interval logs).
    pub keep_interval_log: bool,
}

impl Default for CollectorOptions {
    fn default() -> Self {
        Self {
            auto_kernel_above: None,
            auto_time_every: 1,
            interval: Duration::from_secs(1),
            keep_interval_log: false,
        }
    }
}

/// What the collector hands back when it stops.
#[derive(Debug, Default)]
pub struct Collected {
    pub aggregator: Aggregator,
    pub intervals: IntervalLog,
}

/// A copy of the measurements so far ([`CollectorCommand::Copy`]).
#[derive(Debug, Default)]
pub struct Copied {
    pub measurements: Measurements,
    /// Empty unless asked for.
    pub intervals: IntervalLog,
}

/// The ring buffer, readable from tokio.
pub struct HitStream {
    ring: AsyncFd<RingBuf<MapData>>,
    /// Fires the flush probe, so hits staged on a CPU reach the ring.
    flush: Option<StagedFlush>,
    /// Records shorter than a [`HitEvent`]: a bug if ever non-zero.
    pub malformed: u64,
}

impl HitStream {
    pub fn new(ring: RingBuf<MapData>, flush: Option<StagedFlush>) -> io::Result<Self> {
        // SAFETY: the ring buffer owns its map fd and keeps it open, unchanged, until it
        // is dropped, which the AsyncFd does no earlier than itself.
        let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(Self {
            ring,
            flush,
            malformed: 0,
        })
    }

    /// Flushes every CPU's staged hits into the ring, then drains it: what reports and
    /// window cuts read holds every hit so far.
    pub fn drain_all(&mut self, on_hit: impl FnMut(Record)) -> usize {
        if let Some(flush) = &self.flush {
            flush.flush_now();
        }
        self.drain(on_hit)
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
            let parsed = Record::parse_each(&bytes, |record| {
                on_hit(record);
                count += 1;
            });
            if !parsed {
                self.malformed += 1;
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
    /// The hit, with or without its arguments.
    pub fn hit(&self) -> &HitEvent {
        match self {
            Self::Hit(hit) => hit,
            Self::HitWithArgs(event) => &event.hit,
        }
    }

    /// Hands each hit of one ring record to `on_hit`: a batch holds several. False for
    /// a record too short to be any.
    pub fn parse_each(bytes: &[u8], mut on_hit: impl FnMut(Self)) -> bool {
        if bytes.len() >= size_of::<HitBatch>() {
            // SAFETY: the slice holds a whole HitBatch, a plain-integer repr(C) type any
            // bit pattern of which is valid; read_unaligned makes no alignment demand.
            let batch = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<HitBatch>()) };
            let len = (batch.len as usize).min(BATCH_RECORDS);
            batch.records[..len]
                .iter()
                .for_each(|hit| on_hit(Self::Hit(*hit)));
            return true;
        }
        match Self::parse(bytes) {
            Some(record) => {
                on_hit(record);
                true
            }
            None => false,
        }
    }

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
#[derive(Debug)]
pub enum CollectorCommand {
    /// From now on count only hits up to `at_ktime_ns` (CLOCK_MONOTONIC).
    CloseWindow { at_ktime_ns: u64 },
    /// Restart every histogram and count: only hits from `at_ktime_ns` on count.
    Reset { at_ktime_ns: u64 },
    /// Drain what is queued and send a copy of what reports need (with the interval log
    /// if `with_intervals`), for exports and scrapes while running.
    Copy {
        with_intervals: bool,
        reply: oneshot::Sender<Copied>,
    },
    /// Append probes (of a program the target exec'd) to the aggregator, with their
    /// kernel configs written (the collector owns the CONFIG map) and their kernel
    /// counters baselined. The reply comes once they are in, before any can be hit, or
    /// says why they could not be added (then none was).
    AddProbes {
        probes: Vec<(ProbeAggregate, ProbeConfig)>,
        reply: oneshot::Sender<Result<(), String>>,
    },
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

/// Where the collector's output goes and what steers it.
pub struct CollectorLinks {
    /// A snapshot every [`SNAPSHOT_INTERVAL`].
    pub snapshots: watch::Sender<Snapshot>,
    pub commands: mpsc::Receiver<CollectorCommand>,
    /// The probe the UI shows in detail: its distributions go into every snapshot.
    pub focus: watch::Receiver<Option<u32>>,
}

/// Runs until [`CollectorCommand::Stop`] or until every sender is gone, then returns
/// everything aggregated.
pub async fn collect(
    mut stream: HitStream,
    mut counters: KernelCounters,
    mut aggregator: Aggregator,
    options: CollectorOptions,
    links: CollectorLinks,
) -> Collected {
    let CollectorLinks {
        snapshots,
        mut commands,
        mut focus,
    } = links;
    let mut focus_open = true;
    let interval_length = options.interval.max(Duration::from_millis(10));
    let mut started = Instant::now();
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    let mut publish = tokio::time::interval(SNAPSHOT_INTERVAL);
    let mut read_counters = tokio::time::interval(COUNTERS_INTERVAL);
    let mut read_own_usage = tokio::time::interval(OWN_USAGE_INTERVAL);
    let mut interval_timer = tokio::time::interval_at(
        tokio::time::Instant::now() + interval_length,
        interval_length,
    );
    for timer in [
        &mut poll,
        &mut publish,
        &mut read_counters,
        &mut read_own_usage,
        &mut interval_timer,
    ] {
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    let mut last_tick = Instant::now();
    let mut counters_frozen = false;
    let mut intervals = IntervalLog::default();
    let mut interval_start = Duration::ZERO;
    let mut own_meter = OwnUsageMeter::default();
    let mut own = OwnUsage::default();
    let snapshot =
        |aggregator: &Aggregator, elapsed: Duration, own: OwnUsage, focus: Option<u32>| {
            let mut snapshot = aggregator.snapshot(elapsed);
            snapshot.interval = interval_length;
            snapshot.own = own;
            snapshot.focus = focus.and_then(|id| aggregator.focus_detail(id));
            snapshot
        };
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
            _ = read_own_usage.tick() => {
                own = own_meter.measure();
                aggregator.assumer.observe();
            }
            _ = publish.tick() => {
                let now = Instant::now();
                aggregator.tick(now - last_tick);
                last_tick = now;
                if let Some(limit) = options.auto_kernel_above {
                    switch_hot_probes(&mut counters, &mut aggregator, limit, options.auto_time_every);
                }
                snapshots.send_replace(snapshot(&aggregator, started.elapsed(), own, *focus.borrow()));
            }
            // A new selection gets its details at once rather than at the next tick.
            changed = focus.changed(), if focus_open => {
                if changed.is_err() {
                    focus_open = false;
                } else {
                    let focused = *focus.borrow_and_update();
                    snapshots.send_replace(snapshot(&aggregator, started.elapsed(), own, focused));
                }
            }
            _ = interval_timer.tick() => {
                stream.drain(|record| aggregator.record_any(&record));
                let now = started.elapsed();
                let length = now.saturating_sub(interval_start);
                aggregator.roll_interval(length);
                if options.keep_interval_log {
                    intervals.close_interval(
                        &mut aggregator,
                        interval_start.as_secs_f64(),
                        length.min(interval_length).as_secs_f64(),
                    );
                } else {
                    aggregator.probes_mut().iter_mut().for_each(|p| p.clear_interval());
                }
                interval_start = now;
            }
            command = commands.recv() => match command {
                Some(CollectorCommand::CloseWindow { at_ktime_ns }) => {
                    stream.drain_all(|record| aggregator.record_any(&record));
                    aggregator.close_window(at_ktime_ns);
                    // Kernel counts carry no timestamps: take them at the cut, not later.
                    read_kernel_counters(&counters, &mut aggregator);
                    if let Some(dispatch) = counters.dispatch() {
                        crate::cost::read_dispatch(dispatch, &mut aggregator, true);
                    }
                    counters_frozen = true;
                }
                Some(CollectorCommand::Reset { at_ktime_ns }) => {
                    // Fold in what the kernel counted so far, so that it becomes the
                    // baseline the reset starts from.
                    stream.drain_all(|record| aggregator.record_any(&record));
                    read_kernel_counters(&counters, &mut aggregator);
                    aggregator.reset(at_ktime_ns);
                    if let Some(dispatch) = counters.dispatch() {
                        crate::cost::baseline_dispatch(dispatch, &mut aggregator);
                    }
                    intervals = IntervalLog::default();
                    started = Instant::now();
                    interval_start = Duration::ZERO;
                    interval_timer.reset();
                    snapshots.send_replace(snapshot(&aggregator, started.elapsed(), own, *focus.borrow()));
                }
                Some(CollectorCommand::Copy { with_intervals, reply }) => {
                    stream.drain_all(|record| aggregator.record_any(&record));
                    // The asker may have given up; nothing to do then.
                    let _ = reply.send(Copied {
                        measurements: aggregator.measurements(),
                        intervals: if with_intervals { intervals.clone() } else { IntervalLog::default() },
                    });
                }
                Some(CollectorCommand::AddProbes { probes, reply }) => {
                    let result = add_probes(&mut counters, &mut aggregator, probes);
                    // The session waits for this before attaching them.
                    let _ = reply.send(result);
                }
                Some(CollectorCommand::Stop) | None => break,
            },
        }
    }
    stream.drain_all(|record| aggregator.record_any(&record));
    if !counters_frozen {
        read_kernel_counters(&counters, &mut aggregator);
        if let Some(dispatch) = counters.dispatch() {
            crate::cost::read_dispatch(dispatch, &mut aggregator, true);
        }
    }
    aggregator.unknown_records += stream.malformed;
    if options.keep_interval_log {
        let now = started.elapsed();
        intervals.close_interval(
            &mut aggregator,
            interval_start.as_secs_f64(),
            (now - interval_start).as_secs_f64(),
        );
    }
    snapshots.send_replace(snapshot(
        &aggregator,
        started.elapsed(),
        own,
        *focus.borrow(),
    ));
    Collected {
        aggregator,
        intervals,
    }
}

/// probetop's own CPU time and resident memory, from /proc/self (read by the collector,
/// never by the UI's render path).
#[derive(Debug, Default)]
struct OwnUsageMeter {
    /// (when, utime + stime in clock ticks) at the last reading.
    last: Option<(Instant, u64)>,
}

impl OwnUsageMeter {
    fn measure(&mut self) -> OwnUsage {
        let now = Instant::now();
        let ticks = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| cpu_ticks_of_stat(&stat));
        // SAFETY: sysconf has no memory-safety preconditions.
        let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let cpu_share = match (self.last, ticks) {
            (Some((then, before)), Some(ticks)) if ticks_per_second > 0 => {
                let seconds = (now - then).as_secs_f64();
                (seconds > 0.0).then(|| {
                    ticks.saturating_sub(before) as f64 / ticks_per_second as f64 / seconds
                })
            }
            _ => None,
        };
        self.last = ticks.map(|t| (now, t));
        // SAFETY: sysconf has no memory-safety preconditions.
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let rss_bytes = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|statm| resident_pages_of_statm(&statm))
            .filter(|_| page_size > 0)
            .map(|pages| pages * page_size as u64);
        OwnUsage {
            cpu_share,
            rss_bytes,
        }
    }
}

/// utime + stime (fields 14 and 15) of a /proc/PID/stat line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its closing `)`.
fn cpu_ticks_of_stat(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Resident pages, the second field of /proc/PID/statm.
fn resident_pages_of_statm(statm: &str) -> Option<u64> {
    statm.split_whitespace().nth(1)?.parse().ok()
}

/// Reads drops, and for probes not streaming every hit, the kernel's own counts. A
/// failed read keeps the last known numbers; the maps live as long as we do.
fn read_kernel_counters(counters: &KernelCounters, aggregator: &mut Aggregator) {
    if let Some(dispatch) = counters.dispatch() {
        crate::cost::read_dispatch(dispatch, aggregator, false);
    }
    let mut dropping = false;
    for (id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
        let id = id as u32;
        if let Ok(dropped) = counters.drops(id) {
            dropping |= dropped > 0;
            probe.set_dropped_total(dropped);
        }
        if matches!(probe.mode, mode::SAMPLE | mode::KERNEL_HISTOGRAM)
            && let Ok(total) = counters.hits(id)
        {
            probe.set_counted_hits(total);
        }
        // A probe switched by auto mode keeps its ring buffer counts and adds these.
        if probe.mode == mode::KERNEL_HISTOGRAM
            && let Ok(totals) = counters.histogram(id)
        {
            probe.apply_kernel_histogram(&totals);
        }
        if let Ok(gaps) = counters.gaps(id) {
            probe.cost.gaps.update(gaps);
        }
    }
    // A walk of the kernel's table: only once hits were dropped.
    if dropping {
        for (id, tid, total) in counters.thread_drops() {
            if let Some(probe) = aggregator.probes_mut().get_mut(id as usize) {
                probe.set_thread_dropped_total(tid, total);
            }
        }
    }
    pool_gaps(aggregator);
}

/// Gives every probe the gaps of all of them, for those with too few of their own.
fn pool_gaps(aggregator: &mut Aggregator) {
    if aggregator
        .probes()
        .iter()
        .all(|p| p.cost.gap_curve.is_none())
    {
        return;
    }
    let pooled =
        crate::cost::gap::GapCounts::pooled(aggregator.probes().iter().map(|p| &p.cost.gaps));
    for probe in aggregator.probes_mut() {
        probe.cost.gaps_pooled = pooled.clone();
    }
}

/// Takes the kernel's counts as they are when the window opens: hits counted before are
/// not measured. Call it before announcing that probes are live.
pub fn baseline_kernel_counters(counters: &KernelCounters, aggregator: &mut Aggregator) {
    if let Some(dispatch) = counters.dispatch() {
        crate::cost::baseline_dispatch(dispatch, aggregator);
    }
    let all = 0..aggregator.probes().len();
    baseline_probes(counters, aggregator, all);
}

/// Writes the configs of new probes (ids following the aggregator's), then appends
/// them, baselined.
fn add_probes(
    counters: &mut KernelCounters,
    aggregator: &mut Aggregator,
    probes: Vec<(ProbeAggregate, ProbeConfig)>,
) -> Result<(), String> {
    let first = aggregator.probes().len();
    for (offset, (_, config)) in probes.iter().enumerate() {
        let id = (first + offset) as u32;
        counters
            .set_config(id, *config)
            .map_err(|e| format!("cannot configure probe {id}: {e}"))?;
    }
    aggregator.add_probes(probes.into_iter().map(|(probe, _)| probe).collect());
    let end = aggregator.probes().len();
    baseline_probes(counters, aggregator, first..end);
    Ok(())
}

/// [`baseline_kernel_counters`] for the probes `ids` alone, without dispatch.
fn baseline_probes(
    counters: &KernelCounters,
    aggregator: &mut Aggregator,
    ids: std::ops::Range<usize>,
) {
    let first = ids.start;
    let probes = aggregator.probes_mut().get_mut(ids).unwrap_or_default();
    for (offset, probe) in probes.iter_mut().enumerate() {
        let id = (first + offset) as u32;
        let counted = match probe.mode {
            mode::SAMPLE | mode::KERNEL_HISTOGRAM => counters.hits(id).unwrap_or(0),
            _ => 0,
        };
        let histogram = match probe.mode {
            mode::KERNEL_HISTOGRAM => counters.histogram(id).unwrap_or_default(),
            _ => Vec::new(),
        };
        probe.baseline_kernel_counts(counted, &histogram);
        probe
            .cost
            .gaps
            .baseline(counters.gaps(id).unwrap_or_default());
    }
}

/// Moves ring buffer probes hotter than `limit` hits/s to in-kernel aggregation, which
/// costs the target less per hit and user space nothing per hit. From the first switch
/// on, one hit in `time_every` is timed, as in the kernel mode: a probe still streaming
/// reads the clock of an untimed hit after its config lookup, a few ns later.
fn switch_hot_probes(
    counters: &mut KernelCounters,
    aggregator: &mut Aggregator,
    limit: f64,
    time_every: u64,
) {
    let mut switched = Vec::new();
    for (id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
        let rate = probe.rate.per_second();
        if probe.mode == mode::RING
            && rate > limit
            && counters.set_mode(id as u32, mode::KERNEL_HISTOGRAM).is_ok()
        {
            probe.mode = mode::KERNEL_HISTOGRAM;
            switched.push((probe_name(id, probe), rate));
        }
    }
    if !switched.is_empty()
        && time_every > 1
        && let Err(e) = counters.set_time_every(time_every)
    {
        aggregator.notices.push(format!(
            "cannot time one hit in {time_every} from now on ({e}): every hit stays timed"
        ));
    }
    for (name, rate) in switched {
        aggregator.notices.push(format!(
            "{name} fires {rate:.0} hits/s, above {limit:.0}: aggregating it in the kernel from now on"
        ));
    }
}

/// How notices name a probe: as its row does, or by id when the row's name is unknown.
fn probe_name(id: usize, probe: &ProbeAggregate) -> String {
    if probe.name.is_empty() {
        format!("probe {id}")
    } else {
        probe.name.clone()
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
            args: [7, u64::MAX, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        };
        assert_eq!(
            Record::parse(&bytes_of(&with_args)),
            Some(Record::HitWithArgs(with_args))
        );
        assert_eq!(Record::parse(&[0u8; 31]), None);
    }

    #[test]
    fn a_batch_yields_its_staged_hits_only() {
        let mut batch = HitBatch {
            len: 3,
            ..Default::default()
        };
        for (i, record) in batch.records.iter_mut().enumerate() {
            record.probe_id = i as u32;
        }
        let mut ids = Vec::new();
        assert!(Record::parse_each(&bytes_of(&batch), |r| match r {
            Record::Hit(hit) => ids.push(hit.probe_id),
            Record::HitWithArgs(_) => panic!("a batch holds plain hits"),
        }));
        assert_eq!(ids, [0, 1, 2]);
        // A length past the array (never written) stops at the array.
        batch.len = 1000;
        let mut seen = 0;
        assert!(Record::parse_each(&bytes_of(&batch), |_| seen += 1));
        assert_eq!(seen, BATCH_RECORDS);
        assert!(!Record::parse_each(&[0u8; 31], |_| ()));
    }

    #[test]
    fn own_usage_fields() {
        // A command name with spaces and a parenthesis must not shift the fields.
        let stat = "1234 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 17 0 0 20 0 1 0";
        assert_eq!(cpu_ticks_of_stat(stat), Some(267));
        assert_eq!(
            resident_pages_of_statm("5000 1200 300 10 0 900 0\n"),
            Some(1200)
        );
        let mut meter = OwnUsageMeter::default();
        let first = meter.measure();
        assert!(first.rss_bytes.is_some_and(|b| b > 0));
        assert_eq!(first.cpu_share, None, "no rate from one reading");
        assert!(meter.measure().cpu_share.is_some());
    }
}
