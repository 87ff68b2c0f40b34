//! Streaming: hit records out of the kernel's ring buffer and into the aggregator.
//!
//! The eBPF handlers wake user space only once a batch is queued, so the collector
//! drains on readiness and on a short timer. It runs as its own task, apart from the
//! UI, so a slow terminal never stalls the ring buffer; it publishes [`Snapshot`]s
//! over a watch channel and hands back the whole [`Aggregator`] when stopped.

use std::{
    collections::HashMap,
    io,
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use probe_common::ProbeConfig;
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::{mpsc, oneshot, watch},
};

use crate::aggregate::{Aggregator, AutoMove, IntervalLog, MoveReason, OwnUsage, ProbeAggregate};
use crate::attach::dispatch::Dispatch;
use crate::attach::{KernelCounters, StagedFlush};
use crate::delivery::DeliveryMode;
use crate::price::Run;
use crate::price::{Pricer, ProbeCost, Snapshot};
use crate::record::Record;
use probe_common::dispatch as slots;

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
pub(crate) struct CollectorOptions {
    /// `--mode auto`: move ring buffer probes, busiest first, to in-kernel aggregation
    /// once the run streams more than this many hits per second in all, or the ring
    /// buffer drops records.
    pub auto_kernel_above: Option<f64>,
    /// With `auto_kernel_above`: once a probe is switched, time the handler of one hit in
    /// this many (`--time-every`), as the kernel mode does; until then every hit is timed.
    pub auto_time_every: u64,
    /// Length of a live interval: the UI's last-interval view and time series, and the
    /// histograms of an interval log.
    pub interval: Duration,
    /// Keep every interval's histograms (for interval logs).
    pub keep_interval_log: bool,
    /// In-kernel mode's clock phase (`--clock-seconds`): the probes start streaming
    /// every hit, timed, and go to the kernel after this long.
    pub clock_phase: Option<Duration>,
}

impl Default for CollectorOptions {
    fn default() -> Self {
        Self {
            auto_kernel_above: None,
            auto_time_every: 1,
            interval: Duration::from_secs(1),
            keep_interval_log: false,
            clock_phase: None,
        }
    }
}

/// What the collector hands back when it stops.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    pub aggregator: Aggregator,
    /// Prices the end-of-run report as it priced the live snapshots.
    pub pricer: Pricer,
    pub intervals: IntervalLog,
}

/// A copy of the measurements so far ([`CollectorCommand::Copy`]).
#[derive(Debug, Default)]
pub(crate) struct Copied {
    pub measurements: Run,
    /// Empty unless asked for.
    pub intervals: IntervalLog,
}

/// The ring buffer, readable from tokio.
pub(crate) struct HitStream {
    ring: AsyncFd<RingBuf<MapData>>,
    /// Fires the flush probe, so hits staged on a CPU reach the ring.
    flush: Option<StagedFlush>,
    /// Records shorter than a [`probe_common::HitEvent`]: a bug if ever non-zero.
    pub malformed: u64,
}

impl HitStream {
    pub(crate) fn new(ring: RingBuf<MapData>, flush: Option<StagedFlush>) -> io::Result<Self> {
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
    pub(crate) fn drain_all(&mut self, on_hit: impl FnMut(Record)) -> usize {
        if let Some(flush) = &self.flush {
            flush.flush_now();
        }
        self.drain(on_hit)
    }

    /// Waits until the kernel signals queued records.
    pub(crate) async fn readable(&mut self) -> io::Result<()> {
        let mut guard = self.ring.readable_mut().await?;
        guard.clear_ready();
        Ok(())
    }

    /// Hands every queued record to `on_hit`; returns how many there were.
    pub(crate) fn drain(&mut self, mut on_hit: impl FnMut(Record)) -> usize {
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

/// Requests to the collector task.
#[derive(Debug)]
pub(crate) enum CollectorCommand {
    /// Stop counting: the kernel counts no more hits, the window closes at that moment,
    /// and everything counted is read. The reply is the cut on CLOCK_MONOTONIC, ns.
    CloseWindow { reply: oneshot::Sender<u64> },
    /// Restart every histogram and count: only hits from now on count.
    Reset,
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
        probes: Vec<(ProbeAggregate, ProbeConfig, ProbeCost)>,
        /// Their latency pairs, by the ids they get.
        pairs: Vec<crate::aggregate::PairSetup>,
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// `--budget`'s shedding: these probes, where they stream every hit for no need
    /// of their own, go to in-kernel aggregation (as `--mode auto` moves hot ones).
    ToKernel { probes: Vec<u32> },
    /// Drain what is queued, then return the aggregator.
    Stop,
}

/// Now on the clock `bpf_ktime_get_ns()` reads (CLOCK_MONOTONIC), in ns.
pub(crate) fn ktime_now_ns() -> u64 {
    crate::sys::clock::monotonic_ns()
}

/// Where the collector's output goes and what steers it.
pub(crate) struct CollectorLinks {
    /// A snapshot every [`SNAPSHOT_INTERVAL`].
    pub snapshots: watch::Sender<Snapshot>,
    pub commands: mpsc::Receiver<CollectorCommand>,
    /// The probe the UI shows in detail: its distributions go into every snapshot.
    pub focus: watch::Receiver<Option<u32>>,
}

/// Runs until [`CollectorCommand::Stop`] or until every sender is gone, then returns
/// everything aggregated.
pub(crate) async fn collect(
    mut stream: HitStream,
    mut counters: KernelCounters,
    mut aggregator: Aggregator,
    mut pricer: Pricer,
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
    let mut clock_phase_ends = options.clock_phase.map(|length| Instant::now() + length);
    let mut intervals = IntervalLog::default();
    let mut interval_start = Duration::ZERO;
    let mut own_meter = OwnUsageMeter::default();
    let mut own = OwnUsage::default();
    let mut auto = options
        .auto_kernel_above
        .map(|limit| AutoMode::new(limit, options.auto_time_every));
    // Without auto mode nothing moves when the ring buffer drops: said once.
    let mut drops_said = false;
    let snapshot = |aggregator: &Aggregator,
                    pricer: &Pricer,
                    elapsed: Duration,
                    own: OwnUsage,
                    focus: Option<u32>| {
        let mut snapshot = pricer.snapshot(aggregator, elapsed);
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
                pricer.pool_gaps(&aggregator);
                // After the cut a move would make a stopped probe count again: the arm
                // runs only before it.
                if let Some(auto) = auto.as_mut() {
                    auto.judge(&mut stream, &mut counters, &mut aggregator);
                } else if !drops_said {
                    drops_said = say_drops_without_auto(&mut aggregator);
                }
            }
            _ = read_own_usage.tick() => {
                own = own_meter.measure();
                pricer.observe();
            }
            _ = publish.tick() => {
                let now = Instant::now();
                aggregator.tick(now - last_tick);
                last_tick = now;
                if !counters_frozen
                    && let Some(end) = clock_phase_ends
                    && end_clock_phase(&mut stream, &mut counters, &mut aggregator, options.auto_time_every, now >= end)
                {
                    clock_phase_ends = None;
                    // In situ starts counting at this snapshot: its hits as of now, not
                    // as of the last read of the kernel's counters.
                    read_kernel_counters(&counters, &mut aggregator);
                    pricer.pool_gaps(&aggregator);
                }
                pricer.price_latency(&mut aggregator);
                say_new_notices(&mut aggregator);
                snapshots.send_replace(snapshot(&aggregator, &pricer, started.elapsed(), own, *focus.borrow()));
            }
            // A new selection gets its details at once rather than at the next tick.
            changed = focus.changed(), if focus_open => {
                if changed.is_err() {
                    focus_open = false;
                } else {
                    let focused = *focus.borrow_and_update();
                    snapshots.send_replace(snapshot(&aggregator, &pricer, started.elapsed(), own, focused));
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
                Some(CollectorCommand::CloseWindow { reply }) => {
                    // Kernel counts carry no timestamps: once the kernel has stopped
                    // counting, the records, counts and gaps read next are the same hits,
                    // every one before the cut (a gap counted after a cut taken first
                    // would have no hit).
                    stop_counting(&mut counters, &mut aggregator);
                    let at_ktime_ns = ktime_now_ns();
                    stream.drain_all(|record| aggregator.record_any(&record));
                    aggregator.close_window(at_ktime_ns);
                    read_kernel_counters(&counters, &mut aggregator);
                    pricer.pool_gaps(&aggregator);
                    if let Some(dispatch) = counters.dispatch() {
                        read_dispatch(dispatch, &mut aggregator, true);
                    }
                    counters_frozen = true;
                    // The session may have given up waiting; the cut stands.
                    let _ = reply.send(at_ktime_ns);
                }
                Some(CollectorCommand::Reset) => {
                    // As at the window's ends: nothing counts while what the kernel
                    // counted so far is folded in and becomes the baseline, so the new
                    // window's records, counts and gaps start with the same hit.
                    stop_counting(&mut counters, &mut aggregator);
                    stream.drain_all(|record| aggregator.record_any(&record));
                    read_kernel_counters(&counters, &mut aggregator);
                    pricer.pool_gaps(&aggregator);
                    aggregator.reset(ktime_now_ns());
                    pricer.open();
                    if let Some(dispatch) = counters.dispatch() {
                        baseline_dispatch(dispatch, &mut aggregator);
                    }
                    if let Err(e) = start_counting(&mut counters, &aggregator) {
                        aggregator.notices.push(format!(
                            "after the reset some probes count nothing: their kernel configs cannot be written ({e})"
                        ));
                    }
                    intervals = IntervalLog::default();
                    if let Some(auto) = auto.as_mut() {
                        auto.restart();
                    }
                    started = Instant::now();
                    interval_start = Duration::ZERO;
                    interval_timer.reset();
                    snapshots.send_replace(snapshot(&aggregator, &pricer, started.elapsed(), own, *focus.borrow()));
                }
                Some(CollectorCommand::Copy { with_intervals, reply }) => {
                    stream.drain_all(|record| aggregator.record_any(&record));
                    // The asker may have given up; nothing to do then.
                    let _ = reply.send(Copied {
                        measurements: pricer.measurements(&aggregator),
                        intervals: if with_intervals { intervals.clone() } else { IntervalLog::default() },
                    });
                }
                Some(CollectorCommand::AddProbes { probes, pairs, reply }) => {
                    // Past the cut, new probes would count hits the window no longer holds.
                    let result = if counters_frozen {
                        Err("the run is ending".to_string())
                    } else {
                        add_probes(&mut counters, &mut aggregator, &mut pricer, probes)
                    };
                    if result.is_ok() {
                        aggregator.latency.add_pairs(pairs);
                    }
                    // The session waits for this before attaching them.
                    let _ = reply.send(result);
                }
                Some(CollectorCommand::ToKernel { probes }) => {
                    // Past the cut a mode written would make a stopped probe count again.
                    if !counters_frozen {
                        move_to_kernel(&mut counters, &mut aggregator, &probes, options.auto_time_every);
                    }
                }
                Some(CollectorCommand::Stop) | None => break,
            },
        }
    }
    stream.drain_all(|record| aggregator.record_any(&record));
    if !counters_frozen {
        read_kernel_counters(&counters, &mut aggregator);
        pricer.pool_gaps(&aggregator);
        if let Some(dispatch) = counters.dispatch() {
            read_dispatch(dispatch, &mut aggregator, true);
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
        &pricer,
        started.elapsed(),
        own,
        *focus.borrow(),
    ));
    Collected {
        aggregator,
        pricer,
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
        let ticks = crate::sys::procfs::Stat::own().map(|stat| stat.cpu_ticks());
        let ticks_per_second = crate::sys::clock::clock_ticks_per_second().unwrap_or(0);
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
        let page_size = crate::sys::clock::page_size().unwrap_or(0);
        let rss_bytes = crate::sys::procfs::own_resident_pages()
            .filter(|_| page_size > 0)
            .map(|pages| pages * page_size);
        OwnUsage {
            cpu_share,
            rss_bytes,
        }
    }
}

/// Reads drops, and for probes not streaming every hit, the kernel's own counts. A
/// failed read keeps the last known numbers; the maps live as long as we do.
fn read_kernel_counters(counters: &KernelCounters, aggregator: &mut Aggregator) {
    if let Some(dispatch) = counters.dispatch() {
        read_dispatch(dispatch, aggregator, false);
    }
    let mut dropping = false;
    for (id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
        let id = id as u32;
        if let Ok(dropped) = counters.drops(id) {
            dropping |= dropped > 0;
            probe.set_dropped_total(dropped);
        }
        if probe.mode.counts_in_kernel()
            && let Ok(total) = counters.hits(id)
        {
            probe.set_counted_hits(total);
        }
        // A probe switched by auto mode keeps its ring buffer counts and adds these.
        if probe.mode == DeliveryMode::KernelHistogram
            && let Ok(totals) = counters.histogram(id)
        {
            probe.apply_kernel_histogram(&totals);
        }
        if let Ok(gaps) = counters.gaps(id) {
            probe.measured.gaps.update(gaps);
        }
    }
    read_kernel_pairs(counters, aggregator);
    // A walk of the kernel's table: only once hits were dropped.
    if dropping {
        for (id, tid, total) in counters.thread_drops() {
            if let Some(probe) = aggregator.probes_mut().get_mut(id as usize) {
                probe.set_thread_dropped_total(tid, total);
            }
        }
    }
}

/// Reads the latency pairs the kernel pairs: their counts, their histograms when calls
/// were added, and the calls open (a walk of the threads' stacks).
fn read_kernel_pairs(counters: &KernelCounters, aggregator: &mut Aggregator) {
    let in_kernel: Vec<(usize, u32)> = aggregator
        .latency
        .kernel_pairs()
        .filter(|(_, _, ids)| {
            ids.iter().any(|&id| {
                aggregator
                    .probes()
                    .get(id as usize)
                    .is_some_and(|p| p.mode == DeliveryMode::KernelHistogram)
            })
        })
        .map(|(at, slot, _)| (at, slot))
        .collect();
    if in_kernel.is_empty() {
        return;
    }
    let open = counters.pair_open();
    for (at, slot) in in_kernel {
        let Ok(counts) = counters.pair_counts(slot) else {
            continue;
        };
        let histograms = (aggregator.latency.kernel_calls_seen(at) != Some(counts.calls))
            .then(|| {
                Some([
                    counters.pair_histogram(slot, 0).ok()?,
                    counters.pair_histogram(slot, 1).ok()?,
                ])
            })
            .flatten();
        let read = crate::aggregate::KernelPairRead {
            counts,
            histograms,
            open: open.get(&slot).copied().unwrap_or(0),
        };
        aggregator.latency.apply_kernel(at, read);
    }
}

/// Moves latency pair `pair` (an index of `aggregator.latency`, one the kernel can
/// pair) to the kernel: its ends first, so that a call begun while streaming ends
/// streamed (an end the kernel holds no start of is streamed), then its starts. Returns
/// whether every half moved.
pub(crate) fn pair_to_kernel(
    counters: &mut KernelCounters,
    aggregator: &mut Aggregator,
    pair: usize,
) -> bool {
    if !aggregator
        .latency
        .kernel_pairs()
        .any(|(at, _, _)| at == pair)
    {
        return false;
    }
    let Some((starts, ends)) = aggregator.latency.halves_of(pair) else {
        return false;
    };
    let mut moved = true;
    for id in ends.into_iter().chain(starts) {
        if counters
            .set_mode(id, DeliveryMode::KernelHistogram)
            .is_err()
        {
            moved = false;
            continue;
        }
        if let Some(probe) = aggregator.probes_mut().get_mut(id as usize) {
            probe.mode = DeliveryMode::KernelHistogram;
            probe.keep_streamed_clock();
        }
    }
    moved
}

/// Opens the window in the kernel: every probe, attached outside it
/// ([`crate::delivery::closed`]), counts from now on in its aggregate's mode.
pub(crate) fn start_counting(
    counters: &mut KernelCounters,
    aggregator: &Aggregator,
) -> Result<(), aya::maps::MapError> {
    for (id, probe) in aggregator.probes().iter().enumerate() {
        counters.set_mode(id as u32, probe.mode)?;
    }
    Ok(())
}

/// Stops every probe counting in the kernel (the window's cut). A probe whose config
/// cannot be written keeps counting, and its counts may hold a few hits past the cut:
/// said, never fatal, as the run's measurements are about to be written.
fn stop_counting(counters: &mut KernelCounters, aggregator: &mut Aggregator) {
    let mut failed = 0;
    for id in 0..aggregator.probes().len() {
        if counters.stop_counting(id as u32).is_err() {
            failed += 1;
        }
    }
    if failed > 0 {
        aggregator.notices.push(format!(
            "{failed} probe{} could not be stopped at the cut: {} counts may hold a few later hits",
            if failed == 1 { "" } else { "s" },
            if failed == 1 { "its" } else { "their" }
        ));
    }
}

/// Takes the kernel's counts as they are when the window opens: hits counted before are
/// not measured. Call it before announcing that probes are live.
pub(crate) fn baseline_kernel_counters(counters: &KernelCounters, aggregator: &mut Aggregator) {
    if let Some(dispatch) = counters.dispatch() {
        baseline_dispatch(dispatch, aggregator);
    }
    let all = 0..aggregator.probes().len();
    baseline_probes(counters, aggregator, all);
}

/// Writes the configs of new probes (ids following the aggregator's), then appends
/// them, baselined.
fn add_probes(
    counters: &mut KernelCounters,
    aggregator: &mut Aggregator,
    pricer: &mut Pricer,
    probes: Vec<(ProbeAggregate, ProbeConfig, ProbeCost)>,
) -> Result<(), String> {
    let first = aggregator.probes().len();
    for (offset, (_, config, _)) in probes.iter().enumerate() {
        let id = (first + offset) as u32;
        counters
            .set_config(id, *config)
            .map_err(|e| format!("cannot configure probe {id}: {e}"))?;
    }
    let (probes, costs): (Vec<_>, Vec<_>) = probes
        .into_iter()
        .map(|(probe, _, cost)| (probe, cost))
        .unzip();
    aggregator.add_probes(probes);
    pricer.add(costs);
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
            DeliveryMode::Sample | DeliveryMode::KernelHistogram => counters.hits(id).unwrap_or(0),
            _ => 0,
        };
        let histogram = match probe.mode {
            DeliveryMode::KernelHistogram => counters.histogram(id).unwrap_or_default(),
            _ => Vec::new(),
        };
        probe.baseline_kernel_counts(counted, &histogram);
        probe
            .measured
            .gaps
            .baseline(counters.gaps(id).unwrap_or_default());
    }
}

/// `--mode auto`: the run's hits weighed whole, since the ring buffer and its one
/// reader carry every streaming probe's records together. A probe moves into the kernel
/// when the run streams more than `--auto-above` hits a second in all, or when the ring
/// dropped records; the busiest go first, until the rest fit. Counts stay exact across
/// a move (the hits streamed and dropped before it, counted in the kernel after it), and
/// the probe's histogram goes on from the streamed hits with the in-kernel ones.
#[derive(Debug)]
struct AutoMode {
    /// `--auto-above`: hits per second the run may stream in all.
    limit: f64,
    /// `--time-every`, from the first move on.
    time_every: u64,
    /// At the last judgement: when, and the run's records received and dropped by then.
    last: (Instant, u64, u64),
    /// Each probe's hits offered to the ring (received and dropped) at the last
    /// judgement, by probe id: its rate since, which the drops read at this judgement
    /// are in (the rate window closes them into its ticks later).
    offered: Vec<u64>,
    /// Drops went on with nothing left to move: said once.
    said_stuck: bool,
}

/// One probe still streaming, as auto mode weighs it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Streaming {
    id: usize,
    per_second: f64,
    /// A latency pair's half or a keyed probe streams every hit: user space pairs or
    /// keys each record.
    movable: bool,
}

/// The shortest span auto mode judges rates over.
const MIN_JUDGED: Duration = Duration::from_millis(200);

/// With drops seen, the streaming probes may go on offering the ring this share of what
/// its reader took meanwhile: what it took while dropping is its most, and the reader
/// shares the machine with the target.
const KEPT_SHARE: f64 = 0.5;

/// The probes to move, busiest first: until what still streams is at most `limit`
/// hits/s, and, when records were dropped while the reader took `kept` a second, at
/// most [`KEPT_SHARE`] of that.
fn choose_moves(streaming: &[Streaming], limit: f64, kept: Option<f64>) -> Vec<usize> {
    let target = kept.map_or(limit, |kept| limit.min(kept * KEPT_SHARE));
    let mut left: f64 = streaming.iter().map(|s| s.per_second).sum();
    let mut movable: Vec<&Streaming> = streaming
        .iter()
        .filter(|s| s.movable && s.per_second > 0.0)
        .collect();
    movable.sort_by(|a, b| b.per_second.total_cmp(&a.per_second));
    let mut chosen = Vec::new();
    for probe in movable {
        if left <= target {
            break;
        }
        left -= probe.per_second;
        chosen.push(probe.id);
    }
    chosen
}

impl AutoMode {
    fn new(limit: f64, time_every: u64) -> Self {
        Self {
            limit,
            time_every,
            last: (Instant::now(), 0, 0),
            offered: Vec::new(),
            said_stuck: false,
        }
    }

    /// The window starts over (a reset): so do the run's received and dropped records.
    fn restart(&mut self) {
        self.last = (Instant::now(), 0, 0);
        self.offered.clear();
    }

    /// Judges the run after a read of the kernel's counters (the drops), and moves what
    /// [`choose_moves`] picks; each move is said once, as a notice.
    fn judge(
        &mut self,
        stream: &mut HitStream,
        counters: &mut KernelCounters,
        aggregator: &mut Aggregator,
    ) {
        let now = Instant::now();
        let (received, dropped) = (aggregator.received(), aggregator.dropped());
        let (then, received_then, dropped_then) = self.last;
        let seconds = (now - then).as_secs_f64();
        // Rates over less than a few ticks say little (the first read, at the start).
        if seconds < MIN_JUDGED.as_secs_f64() {
            return;
        }
        self.last = (now, received, dropped);
        let new_drops = dropped.saturating_sub(dropped_then);
        // What the reader took while the ring dropped.
        let kept = (new_drops > 0 && seconds > 0.0)
            .then(|| received.saturating_sub(received_then) as f64 / seconds);
        let offered: Vec<u64> = aggregator
            .probes()
            .iter()
            .map(|p| p.received + p.dropped)
            .collect();
        let since = |id: usize| {
            let before = self.offered.get(id).copied().unwrap_or(0);
            if seconds > 0.0 {
                offered.get(id).map_or(0, |n| n.saturating_sub(before)) as f64 / seconds
            } else {
                0.0
            }
        };
        // A latency pair the kernel can pair moves whole (both halves, ends first).
        let mut pair_of: HashMap<usize, usize> = HashMap::new();
        for (at, _, ids) in aggregator.latency.kernel_pairs() {
            for id in ids {
                pair_of.insert(id as usize, at);
            }
        }
        let streaming: Vec<Streaming> = aggregator
            .probes()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.mode == DeliveryMode::Ring)
            .map(|(id, _)| Streaming {
                id,
                per_second: since(id),
                movable: !aggregator.streams_every_hit(id as u32) || pair_of.contains_key(&id),
            })
            .collect();
        self.offered = offered;
        let run_per_second: f64 = streaming.iter().map(|s| s.per_second).sum();
        let chosen = choose_moves(&streaming, self.limit, kept);
        if chosen.is_empty() {
            if new_drops > 0 && !self.said_stuck {
                self.say_stuck(aggregator, &streaming, new_drops);
            }
            return;
        }
        let reason = if kept.is_some() {
            MoveReason::Dropped
        } else {
            MoveReason::AboveLimit
        };
        let after =
            Duration::from_nanos(ktime_now_ns().saturating_sub(aggregator.window_start_ns()));
        let mut moved = Vec::new();
        for id in chosen {
            if let Some(&pair) = pair_of.get(&id) {
                let halves = aggregator
                    .latency
                    .halves_of(pair)
                    .map(|(starts, ends)| starts.into_iter().chain(ends).collect::<Vec<u32>>())
                    .unwrap_or_default();
                if halves.iter().any(|&half| moved.contains(&(half as usize))) {
                    continue;
                }
                if pair_to_kernel(counters, aggregator, pair) {
                    moved.extend(halves.into_iter().map(|half| half as usize));
                }
                continue;
            }
            if counters
                .set_mode(id as u32, DeliveryMode::KernelHistogram)
                .is_err()
            {
                continue;
            }
            let Some(probe) = aggregator.probes_mut().get_mut(id) else {
                continue;
            };
            probe.mode = DeliveryMode::KernelHistogram;
            // The ring handler's clock so far prices its in-kernel hits (`--assume
            // clock`); its handler histogram goes on holding both, as the user guide says.
            probe.keep_streamed_clock();
            moved.push(id);
        }
        if moved.is_empty() {
            return;
        }
        // What the moved probes staged on each CPU reaches the ring (or is counted
        // dropped) now: the run's drops from here on came after the move.
        stream.drain_all(|record| aggregator.record_any(&record));
        read_drops(counters, aggregator);
        let run_dropped = aggregator.dropped();
        if self.time_every > 1
            && let Err(e) = counters.set_time_every(self.time_every)
        {
            aggregator.notices.push(format!(
                "cannot time one hit in {} from now on ({e}): every hit stays timed",
                self.time_every
            ));
        }
        let limit = self.limit;
        for id in moved {
            let Some(probe) = aggregator.probes_mut().get_mut(id) else {
                continue;
            };
            let per_second = streaming
                .iter()
                .find(|s| s.id == id)
                .map_or(0.0, |s| s.per_second);
            probe.moved = Some(AutoMove {
                after,
                reason,
                per_second,
                run_per_second,
                run_dropped,
            });
            let name = probe_name(id, probe);
            let why = match (reason, kept) {
                (MoveReason::Dropped, Some(kept)) => format!(
                    "{name} fires {per_second:.0} hits/s; the ring buffer dropped {new_drops} records in {seconds:.1} s, its reader taking {kept:.0}/s of the {run_per_second:.0} hits/s streamed"
                ),
                _ if per_second > limit => {
                    format!("{name} fires {per_second:.0} hits/s, above {limit:.0}")
                }
                _ => format!(
                    "{name} fires {per_second:.0} hits/s; the run streams {run_per_second:.0} hits/s in all, above {limit:.0}"
                ),
            };
            // No record carries its `--args` values from now on.
            let args = if probe.last_args.is_some() {
                "; its argument values shown stay those of its last streamed hit"
            } else {
                ""
            };
            aggregator.notices.push(format!(
                "{why}: aggregating it in the kernel from now on{args}"
            ));
        }
    }

    /// Records dropped with nothing left to move: the probes streaming every hit carry
    /// the run. Said once.
    fn say_stuck(&mut self, aggregator: &mut Aggregator, streaming: &[Streaming], new_drops: u64) {
        let stuck: Vec<String> = streaming
            .iter()
            .filter(|s| !s.movable && s.per_second > 0.0)
            .filter_map(|s| Some(probe_name(s.id, aggregator.probes().get(s.id)?)))
            .collect();
        if stuck.is_empty() {
            return;
        }
        self.said_stuck = true;
        aggregator.notices.push(format!(
            "the ring buffer dropped {new_drops} records, and what still streams cannot move into the kernel: {} stream every hit (a latency pair's halves pair their records, a keyed probe keys them, in user space); their hits stay counted exactly, their latency and key rows miss the dropped calls",
            stuck.join(", ")
        ));
    }
}

/// Outside auto mode (`--mode ring`, `sample`, or `kernel`'s clock phase) a full ring
/// buffer's records are lost to the histograms, the per-thread counts and the latency and
/// key rows: said once, with the mode that keeps them. Returns whether it was said.
fn say_drops_without_auto(aggregator: &mut Aggregator) -> bool {
    let dropped = aggregator.dropped();
    if dropped == 0 {
        return false;
    }
    aggregator.notices.push(format!(
        "the ring buffer dropped {dropped} records: their hits stay counted, but they are not timed, split by thread, paired or keyed; --mode auto (the default) moves the busiest probes into the kernel instead, where every hit is counted and one in --time-every timed"
    ));
    true
}

/// Reads every probe's drops from the kernel (a failed read keeps the last count).
fn read_drops(counters: &KernelCounters, aggregator: &mut Aggregator) {
    for (id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
        if let Ok(dropped) = counters.drops(id as u32) {
            probe.set_dropped_total(dropped);
        }
    }
}

/// Moves the ring buffer probes `ids` to in-kernel aggregation, as
/// auto mode does (a latency pair's and a keyed probe's keep streaming).
fn move_to_kernel(
    counters: &mut KernelCounters,
    aggregator: &mut Aggregator,
    ids: &[u32],
    time_every: u64,
) {
    let mut moved = false;
    for &id in ids {
        if aggregator.streams_every_hit(id) {
            continue;
        }
        if let Some(probe) = aggregator.probes_mut().get_mut(id as usize)
            && probe.mode == DeliveryMode::Ring
            && counters.set_mode(id, DeliveryMode::KernelHistogram).is_ok()
        {
            probe.mode = DeliveryMode::KernelHistogram;
            probe.keep_streamed_clock();
            moved = true;
        }
    }
    if moved
        && time_every > 1
        && let Err(e) = counters.set_time_every(time_every)
    {
        aggregator.notices.push(format!(
            "cannot time one hit in {time_every} from now on ({e}): every hit stays timed"
        ));
    }
}

/// Says the notices not said yet (auto mode's moves, as they happen), once each.
fn say_new_notices(aggregator: &mut Aggregator) {
    for notice in aggregator.notices.iter().skip(aggregator.notices_said) {
        crate::sys::say(&format!("probetop: {notice}"));
    }
    aggregator.notices_said = aggregator.notices.len();
}

/// Clocked hits after which a probe leaves the clock phase before it ends: a hot probe
/// (the reason for `--mode kernel`) streams for a fraction of a second, not the phase.
const CLOCK_PHASE_HITS: u64 = 5_000;

/// The clock phase (`--clock-seconds`): a streaming probe goes to the kernel once it has
/// [`CLOCK_PHASE_HITS`] records, or every one when `over`. The hits it streamed so far
/// (flushed and drained first) become its streamed clock. Once none streams, one hit in
/// `time_every` is timed from then on (every one until then: a record's clock must
/// cover its whole handler). Returns whether the phase is over.
fn end_clock_phase(
    stream: &mut HitStream,
    counters: &mut KernelCounters,
    aggregator: &mut Aggregator,
    time_every: u64,
    over: bool,
) -> bool {
    let (mut switched, mut stayed, mut streaming) = (Vec::new(), 0, 0);
    for (id, probe) in aggregator.probes().iter().enumerate() {
        // A latency pair's probes keep streaming: their records are paired (and a
        // keyed probe's, counted under their keys).
        if probe.mode != DeliveryMode::Ring || aggregator.streams_every_hit(id as u32) {
            continue;
        }
        if !over && probe.received < CLOCK_PHASE_HITS {
            streaming += 1;
            continue;
        }
        match counters.set_mode(id as u32, DeliveryMode::KernelHistogram) {
            Ok(()) => switched.push(id),
            Err(_) => stayed += 1,
        }
    }
    if !switched.is_empty() {
        stream.drain_all(|record| aggregator.record_any(&record));
        let probes = aggregator.probes_mut();
        for &id in &switched {
            probes[id].end_clock_phase();
        }
    }
    if streaming > 0 {
        return false;
    }
    if time_every > 1
        && let Err(e) = counters.set_time_every(time_every)
    {
        aggregator.notices.push(format!(
            "cannot time one hit in {time_every} from now on ({e}): every hit stays timed"
        ));
    }
    if stayed > 0 {
        aggregator.notices.push(format!(
            "{stayed} probe{} could not go to the kernel after the clock phase: streaming every hit",
            if stayed == 1 { "" } else { "s" }
        ));
    }
    true
}

/// How notices name a probe: as its row does, or by id when the row's name is unknown.
fn probe_name(id: usize, probe: &ProbeAggregate) -> String {
    if probe.name.is_empty() {
        format!("probe {id}")
    } else {
        probe.name.clone()
    }
}

/// Takes the kernel's dispatch totals (and histograms) as the window opens.
fn baseline_dispatch(dispatch: &Dispatch, aggregator: &mut Aggregator) {
    for (id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
        let id = id as u32;
        let Some(measure) = probe.measured.dispatch.as_mut() else {
            continue;
        };
        let entry = dispatch.total(id, slots::ENTRY).unwrap_or_default();
        let ret = dispatch.total(id, slots::RETURN).unwrap_or_default();
        measure.baseline(entry, ret);
        measure.baseline_histograms(
            dispatch.histogram(id, slots::ENTRY).unwrap_or_default(),
            dispatch.histogram(id, slots::RETURN).unwrap_or_default(),
        );
    }
    dispatch.rebase();
    aggregator.dispatch_hooks = Some(dispatch.hooks);
    if let Some(other) = aggregator.other_dispatch.as_mut() {
        *other = Default::default();
    }
    if let Some(unmeasured) = aggregator.dispatch_unmeasured.as_mut() {
        *unmeasured = 0;
    }
}

/// Reads the kernel's dispatch totals into the aggregator; with `histograms`, the
/// histograms too (hundreds of reads per probe: at the end of a run, not every tick).
/// A failed read keeps the last numbers.
fn read_dispatch(dispatch: &Dispatch, aggregator: &mut Aggregator, histograms: bool) {
    for (id, probe) in aggregator.probes_mut().iter_mut().enumerate() {
        let id = id as u32;
        let Some(measure) = probe.measured.dispatch.as_mut() else {
            continue;
        };
        if let (Ok(entry), Ok(ret)) = (
            dispatch.total(id, slots::ENTRY),
            dispatch.total(id, slots::RETURN),
        ) {
            measure.update(entry, ret);
        }
        if histograms
            && let (Ok(entry), Ok(ret)) = (
                dispatch.histogram(id, slots::ENTRY),
                dispatch.histogram(id, slots::RETURN),
            )
        {
            measure.set_histograms(&entry, &ret);
        }
    }
    if let (Some(other), Ok(now)) = (
        aggregator.other_dispatch.as_mut(),
        dispatch.other_since_base(),
    ) {
        *other = now;
    }
    if let (Some(unmeasured), Ok(now)) = (
        aggregator.dispatch_unmeasured.as_mut(),
        dispatch.lost_since_base(),
    ) {
        *unmeasured = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_usage_fields() {
        let mut meter = OwnUsageMeter::default();
        let first = meter.measure();
        assert!(first.rss_bytes.is_some_and(|b| b > 0));
        assert_eq!(first.cpu_share, None, "no rate from one reading");
        assert!(meter.measure().cpu_share.is_some());
    }

    #[test]
    fn drops_outside_auto_mode_are_said_naming_auto() {
        let mut aggregator = Aggregator::new(2);
        assert!(!say_drops_without_auto(&mut aggregator), "nothing dropped");
        assert!(aggregator.notices.is_empty());
        aggregator.set_dropped(1, 7);
        assert!(say_drops_without_auto(&mut aggregator));
        assert_eq!(aggregator.notices.len(), 1);
        let line = &aggregator.notices[0];
        assert!(line.contains("dropped 7 records"), "{line}");
        assert!(line.contains("--mode auto (the default)"), "{line}");
    }

    fn streaming(rates: &[(f64, bool)]) -> Vec<Streaming> {
        rates
            .iter()
            .enumerate()
            .map(|(id, &(per_second, movable))| Streaming {
                id,
                per_second,
                movable,
            })
            .collect()
    }

    #[test]
    fn the_run_is_weighed_whole_not_each_probe() {
        // Each of three under the limit, together above it: the busiest go until the
        // rest fit.
        let run = streaming(&[(60_000.0, true), (90_000.0, true), (80_000.0, true)]);
        assert_eq!(choose_moves(&run, 100_000.0, None), [1, 2]);
        // Under the limit and nothing dropped: nothing moves.
        assert!(choose_moves(&run, 300_000.0, None).is_empty());
        // One probe above the limit alone moves, as it always did.
        let one = streaming(&[(250_000.0, true), (10.0, true)]);
        assert_eq!(choose_moves(&one, 200_000.0, None), [0]);
    }

    #[test]
    fn drops_move_the_busiest_until_half_of_what_the_reader_took_is_left() {
        // 100k hits/s streamed, the reader took 60k/s while dropping: what stays must be
        // at most 30k/s, so the 50k and the 30k probes move (20k is left).
        let run = streaming(&[(30_000.0, true), (50_000.0, true), (20_000.0, true)]);
        assert_eq!(choose_moves(&run, 200_000.0, Some(60_000.0)), [1, 0]);
        // A latency pair's half cannot move: the others go, even all of them.
        let pair = streaming(&[(40_000.0, false), (10_000.0, true), (5_000.0, true)]);
        assert_eq!(choose_moves(&pair, 200_000.0, Some(20_000.0)), [1, 2]);
        // A probe not hit is no load: it stays.
        let idle = streaming(&[(0.0, true), (10_000.0, true)]);
        assert_eq!(choose_moves(&idle, 200_000.0, Some(1_000.0)), [1]);
    }
}
