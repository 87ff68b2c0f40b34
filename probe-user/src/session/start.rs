//! The third phase: the eBPF programs loaded, the process set seeded, the probes
//! attached, and the collector, the in-situ driver, exec following and `--listen`
//! started. From here on every exit path detaches (the [`Attachment`] does when
//! dropped), and [`super::finish`] exports first.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, RwLock},
    time::Duration,
};

use anyhow::Context as _;
use tokio::{
    sync::{mpsc, oneshot, watch},
    task::JoinHandle,
};

use super::Snapshot;
use super::find::Found;
use super::plan::Plan;
use super::probe::Probe;
use super::report::{ReportSource, Rows};
use super::{StopReason, follow, insitu, maps_watch, points, processes, stop};
use crate::aggregate::Aggregator;
use crate::attach::{self, AttachRequest, Attachment, LoadOptions};
use crate::cli::{Mode, RunArgs};
use crate::delivery::DeliveryMode;
use crate::present::{ProbeLabel, export, listen};
use crate::stream::{
    self, Collected, CollectorCommand, CollectorLinks, CollectorOptions, HitStream,
};
use crate::target::{PinnedExe, Target};
use probe_common::ProbeConfig;

/// A run measuring: what the drive and finish phases act on.
/// Fields drop in order: on an error path the probes are detached (`attachment`)
/// before the executable they were attached through is closed (`pin`), as at the end.
pub(super) struct Running {
    pub attachment: Attachment,
    pub target: Target,
    /// Held until no probe can be attached through it again (`space`): its number
    /// must not name another file meanwhile.
    pub pin: PinnedExe,
    pub several: bool,
    /// One per row, as on screen and in the summary.
    pub labels: Vec<ProbeLabel>,
    pub source: Arc<ReportSource>,
    pub commands: mpsc::Sender<CollectorCommand>,
    pub collector: JoinHandle<Collected>,
    pub snapshots: watch::Receiver<Snapshot>,
    /// The probe the TUI shows in detail, for the collector.
    pub focus: watch::Sender<Option<u32>>,
    pub in_situ: Option<insitu::Driver>,
    /// `--budget`'s duty cycle.
    pub budget: Option<super::budget::Driver>,
    /// Without --budget: the target's CPU from the start, for the hint at the end.
    pub budget_hint: Option<super::budget::Hint>,
    pub follow: Option<follow::Follow>,
    pub server: Option<JoinHandle<()>>,
    /// `--otlp`: the push thread, and the task that offers it a report every --interval.
    pub otlp: Option<(Arc<crate::present::otlp::Pusher>, JoinHandle<()>)>,
    /// Says when a probed object is replaced on disk and loaded again, and finds the
    /// probes to move when one is replaced before it is loaded.
    pub maps_watch: Option<JoinHandle<()>>,
    /// The probes to move, for the loop that holds the attachment.
    pub moves: Option<mpsc::Receiver<maps_watch::Move>>,
    pub cgroup_poller: Option<JoinHandle<()>>,
    pub others: crate::attach::bpf_stats::Others,
    /// Other tools' probes looked for again every second (one process probed).
    pub others_watch: Option<super::others::Watch>,
    /// Resolves when measuring should stop (see [`stop::shutdown_signal`]).
    pub shutdown: Pin<Box<dyn Future<Output = StopReason> + Send>>,
    pub attach_path: &'static str,
}

/// What the attach step settled.
struct Attached {
    attachment: Attachment,
    probes: Vec<Probe>,
    prepared: super::Prepared,
    skipped: Vec<export::SkippedPoint>,
    dispatch: Option<crate::attach::dispatch::Dispatch>,
    shutdown: Pin<Box<dyn Future<Output = StopReason> + Send>>,
    cgroup_poller: Option<JoinHandle<()>>,
    /// The files the probes' paths named when they were attached.
    files: std::collections::HashMap<std::path::PathBuf, crate::sys::maps::FileId>,
    /// The kernel's pair slots, and those left for a later exec's pairs.
    pair_slots: follow::PairSlots,
}

pub(super) async fn start(plan: Plan, found: Found, args: &RunArgs) -> anyhow::Result<Running> {
    // Bound before anything is attached, so a taken port fails fast.
    let listener = match args.listen {
        Some(addr) => Some(
            listen::bind(addr)
                .await
                .with_context(|| format!("--listen {addr}: cannot listen there"))?,
        ),
        None => None,
    };
    let base_config = ProbeConfig {
        mode: match args.mode {
            Mode::Ring | Mode::Auto => DeliveryMode::Ring,
            Mode::Sample => DeliveryMode::Sample,
            Mode::Kernel => DeliveryMode::KernelHistogram,
        }
        .raw(),
        sample_every: args.sample_every.max(1),
        ..Default::default()
    };
    let clock_phase = clock_phase(args, &found.prepared);
    // The clock phase streams the probes attached now; those a later exec brings go
    // to the kernel at once.
    let initial_config = match clock_phase {
        Some(_) => ProbeConfig {
            mode: DeliveryMode::Ring.raw(),
            ..base_config
        },
        None => base_config,
    };
    let Found {
        resolve_options,
        pin,
        probes,
        prepared,
        skipped,
    } = found;
    let attach_began = std::time::Instant::now();
    // Attached outside the window; it opens for every probe at once below.
    let attached = attach_probes(
        &plan,
        args,
        crate::delivery::closed(initial_config),
        clock_phase.is_some(),
        probes,
        prepared,
        skipped,
    )?;
    let attached_at = std::time::Instant::now();
    let Attached {
        mut attachment,
        probes,
        mut prepared,
        skipped,
        dispatch,
        shutdown,
        cgroup_poller,
        files: probed_files,
        pair_slots,
    } = attached;
    // Under --budget the set was attached a chunk at a time, each detached at once
    // (`attach_each_detached`); probes attached again since (a refused probe's place
    // taken by another, a semaphore joined) are detached now. The budget's survey
    // attaches them a group at a time.
    let budget_set = args.budget.map(|_| {
        let attached = attachment.attached_ids();
        let before = std::time::Instant::now();
        attachment.detach_set(&attached);
        let ids = attachment.held_ids();
        super::budget::trace!(
            "a set of {} probes, none attached ({} detached again in {:.2}ms, {:.2}ms after the attach)",
            ids.len(),
            attached.len(),
            before.elapsed().as_secs_f64() * 1e3,
            before.duration_since(attached_at).as_secs_f64() * 1e3
        );
        let dear: Vec<bool> = prepared
            .costs
            .iter()
            .map(|c| {
                c.site
                    .as_ref()
                    .is_some_and(|s| s.class == crate::insn::classes::CostClass::SingleStepped)
            })
            .collect();
        (ids, dear)
    });
    let pid = plan.target.pid;
    let ring = attachment.take_ring()?;
    let flush = attachment.attach_flush()?;
    let mut counters = attachment.take_counters()?;
    let mut aggregator = Aggregator::new(probes.len());
    for (row, probe) in aggregator.probes_mut().iter_mut().zip(&probes) {
        row.mode = if probe.other.is_some() {
            DeliveryMode::Sample
        } else {
            DeliveryMode::of_config(&initial_config)
        };
        row.name = ProbeLabel::new(probe.point.kind, &probe.point.name, "").display;
        // A latency pair's probes stream every hit (`Probe::config`), as do keyed ones,
        // unless the kernel pairs them.
        if probe.pair.is_some() {
            row.mode = if probe.pair_in_kernel {
                DeliveryMode::KernelHistogram
            } else {
                DeliveryMode::Ring
            };
        }
        if let Some((key, at)) = probe.key_slot(args.args) {
            row.mode = DeliveryMode::Ring;
            row.keys = Some(crate::aggregate::HitKeys::new(key, at, args.max_keys));
        }
    }
    aggregator.latency =
        crate::aggregate::Latency::new(super::probe::latency_pairs(&probes), args.max_keys);
    let mut assumer = super::Assumer::new(args.assume, pid);
    assumer.gap_curve = prepared.costs.iter().any(|c| c.gap_curve.is_some());
    // The clock is read on streamed hits: ring and auto modes, or kernel mode's phase.
    assumer.clock = work_curve_has_clock(&prepared)
        && args.args == 0
        && match args.mode {
            Mode::Ring | Mode::Auto => true,
            Mode::Kernel => clock_phase.is_some(),
            Mode::Sample => false,
        };
    aggregator.count_processes = plan.several;
    let dispatch_running = dispatch.is_some();
    for (cost, probe) in prepared.costs.iter_mut().zip(&probes) {
        cost.captures_args = args.args > 0 || probe.pair.is_some() || probe.key.is_some();
    }
    for (cost, probe) in prepared.costs.iter_mut().zip(&probes) {
        if let Some(site) = &probe.other {
            cost.other = Some(super::others::assumed_price(cost, site));
        }
        cost.shared = super::others::assumed_shared(cost, probe);
    }
    if dispatch_running {
        crate::aggregate::measure_dispatch(&mut aggregator);
    }
    if let Some(dispatch) = dispatch {
        counters.set_dispatch(dispatch);
    }
    let others = crate::attach::bpf_stats::Others::start(pid, args.bpf_stats);
    // Nothing counts until the modes are written, so the baseline and the window's
    // start hold no hit that the records or the counts would hold and the other not.
    stream::baseline_kernel_counters(&counters, &mut aggregator);
    aggregator.open_window(stream::ktime_now_ns());
    let mut labels: Vec<ProbeLabel> = probes
        .iter()
        .zip(&prepared.costs)
        .map(|(p, cost)| p.label(cost))
        .collect();
    let mut pricer = super::Pricer::new(assumer, prepared.costs);
    // The headline sets the cost against the CPU of every process probed: with `-F`
    // a pre-fork server's children do the work.
    pricer.meter_target(process_set(&plan, pid));
    pricer.open();
    stream::start_counting(&mut counters, &aggregator)
        .context("opening the window: the probes' kernel configs cannot be written")?;
    // `--budget`'s first attached part: the hits count from here.
    let counting_since = tokio::time::Instant::now();
    // The probes fire, uncounted, from their attach until here.
    super::budget::trace!(
        "attached in {:.2}ms, counting from {:.2}ms after the attach began",
        attached_at.duration_since(attach_began).as_secs_f64() * 1e3,
        attach_began.elapsed().as_secs_f64() * 1e3
    );
    let attach_path = attachment.attach_path();
    say!(
        "probetop: attached {} probe{} to pid {} ({}) via {attach_path}",
        probes.len(),
        if probes.len() == 1 { "" } else { "s" },
        plan.target.pid,
        plan.target.comm
    );

    if let Some(phase) = clock_phase {
        say!(
            "probetop: streaming every hit for the first {:.1} s to read how cold each probe runs, then counting in the kernel (--clock-seconds)",
            phase.as_secs_f64()
        );
    }

    // A test hook: a panic with probes attached must leave none behind (see tests/attach.rs).
    if std::env::var_os("PROBETOP_TEST_PANIC_AFTER_ATTACH").is_some() {
        panic!("PROBETOP_TEST_PANIC_AFTER_ATTACH is set");
    }

    crate::present::names::distinguish(&mut labels);
    let (snapshot_tx, snapshots) = watch::channel(Snapshot::default());
    let (commands, command_rx) = mpsc::channel(16);
    let (focus, focus_rx) = watch::channel(None);
    let collector_options = CollectorOptions {
        auto_kernel_above: (args.mode == Mode::Auto).then_some(args.auto_above),
        auto_time_every: plan.time_every,
        interval: Duration::from_secs_f64(args.interval),
        keep_interval_log: args.exports.iter().any(|p| {
            p.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("hlog"))
        }),
        clock_phase,
    };
    let collector = tokio::spawn(stream::collect(
        HitStream::new(ring, Some(flush))?,
        counters,
        aggregator,
        pricer,
        collector_options,
        CollectorLinks {
            snapshots: snapshot_tx,
            commands: command_rx,
            focus: focus_rx,
        },
    ));
    let live: Vec<u32> = (0..probes.len() as u32).collect();
    let others_watch = (!plan.several).then(|| {
        super::others::Watch::new(
            plan.target.clone(),
            pin.path(),
            plan.filter_pid,
            base_config,
            &probes,
            resolve_options.clone(),
        )
    });
    let source = Arc::new(ReportSource {
        target: plan.target.clone(),
        rows: RwLock::new(Rows {
            probes,
            execs: Vec::new(),
            skipped,
            replaced: Vec::new(),
        }),
        commands: commands.clone(),
        in_situ: RwLock::new(None),
        budget: RwLock::new(None),
        attach_path,
        several: plan.several,
    });
    let respec = maps_watch::Respec {
        specs: plan.specs.clone(),
        options: resolve_options.clone(),
    };
    let watched_pid = plan.target.live_thread.unwrap_or(pid);
    let (maps_watch, moves) = match maps_watch::spawn(watched_pid, &source, &probed_files, respec) {
        Some((task, moves)) => (Some(task), Some(moves)),
        None => (None, None),
    };
    let in_situ = if args.in_situ {
        // Over the set with several processes: a pre-fork server works in its children.
        let members = process_set(&plan, pid);
        Some(insitu::Driver::start(
            members,
            args.work,
            Duration::from_secs_f64(args.in_situ_window),
            clock_phase,
        )?)
    } else {
        None
    };
    let members = process_set(&plan, pid);
    let (budget, budget_hint) = match args.budget {
        Some(asked) => (
            Some(super::budget::Driver::start(
                members,
                asked,
                Duration::from_secs_f64(args.budget_window),
                counting_since,
                budget_set.unwrap_or_default(),
            )?),
            None,
        ),
        None => (None, super::budget::Hint::start(members)),
    };
    let follow = args.follow_exec.then(|| {
        follow::Follow::new(follow::Setup {
            specs: plan.specs.clone(),
            resolve_options,
            force: args.force,
            args: args.args,
            max_keys: args.max_keys,
            base_config,
            target: plan.target.clone(),
            live,
            dispatch_running,
            pair_slots,
        })
    });
    let server = listener.map(|listener| serve(listener, &source));
    let otlp = match &args.otlp {
        Some(url) => Some(push_otlp(url, args.interval, &source)?),
        None => None,
    };
    Ok(Running {
        target: plan.target,
        pin,
        several: plan.several,
        attachment,
        labels,
        source,
        commands,
        collector,
        snapshots,
        focus,
        in_situ,
        budget,
        budget_hint,
        follow,
        server,
        otlp,
        maps_watch,
        moves,
        cgroup_poller,
        others,
        others_watch,
        shutdown,
        attach_path,
    })
}

/// The processes probed: `pid`, or with several the roots, their forks (`-F`) and the
/// cgroup's members.
fn process_set(plan: &Plan, pid: u32) -> crate::insitu::Members {
    crate::insitu::Members {
        roots: if plan.several {
            plan.roots.clone()
        } else {
            vec![pid]
        },
        follow_forks: plan.scope.follow_forks,
        cgroup: plan.scope.cgroup.clone(),
    }
}

/// Whether the calibration's work curve holds the ring handler's clock.
fn work_curve_has_clock(prepared: &super::Prepared) -> bool {
    prepared.costs.iter().any(|cost| {
        cost.work_curve
            .as_ref()
            .is_some_and(|work| work.has_ring_clock())
    })
}

/// How long the probes stream first in `--mode kernel` so that the ring handler's clock
/// can price their in-kernel hits (`--clock-seconds`): only where the estimate may read
/// it (`--assume clock` or `auto`; no `--args`; a calibration whose work curve
/// holds the clock).
fn clock_phase(args: &RunArgs, prepared: &super::Prepared) -> Option<Duration> {
    use super::AssumeChoice;
    (args.mode == Mode::Kernel
        && matches!(args.assume, AssumeChoice::Clock | AssumeChoice::Auto)
        && args.args == 0
        && work_curve_has_clock(prepared)
        && args.clock_seconds.is_finite()
        && args.clock_seconds > 0.0)
        .then(|| Duration::from_secs_f64(args.clock_seconds))
}

/// Loads the programs, seeds the process set, and attaches every probe; signals are
/// handled from before the first probe, so an interrupt while attaching still detaches.
fn attach_probes(
    plan: &Plan,
    args: &RunArgs,
    base_config: ProbeConfig,
    clock_phase: bool,
    mut probes: Vec<Probe>,
    mut prepared: super::Prepared,
    mut skipped: Vec<export::SkippedPoint>,
) -> anyhow::Result<Attached> {
    let target = &plan.target;
    let several = plan.several;
    // Kernel dispatch is timed for one process's hits.
    let dispatch_wanted = !several
        && !args.no_dispatch
        && probes.len() <= crate::attach::dispatch::MAX_DISPATCH_PROBES as usize;
    if !args.no_dispatch && !dispatch_wanted && !several {
        say!(
            "probetop: kernel dispatch time is measured for at most {} probes; whole cost per hit comes from calibration alone",
            crate::attach::dispatch::MAX_DISPATCH_PROBES
        );
    }
    let spare_probes = if args.follow_exec {
        follow::spare_probes(probes.len() as u32)
    } else {
        0
    };
    // Other tools' probes that appear while probetop runs: counted, never histogrammed.
    let spare_counters = if several { 0 } else { super::others::SPARE };
    let kernel_histograms = matches!(args.mode, Mode::Kernel | Mode::Auto);
    if kernel_histograms {
        say_kernel_histogram_memory(probes.len() + spare_probes as usize);
    }
    // Unkeyed latency pairs the kernel can pair: from the start in kernel mode, once
    // busy in auto mode; a later exec's pairs get the spare slots.
    let pairs = if kernel_histograms {
        super::probe::count_pairs(&probes)
    } else {
        0
    };
    let pair_slots = if args.follow_exec { pairs * 2 } else { pairs };
    let next_slot =
        super::probe::assign_pair_slots(&mut probes, 0, pair_slots, args.mode == Mode::Kernel);
    let pair_slots = follow::PairSlots {
        next: next_slot,
        capacity: pair_slots,
        in_kernel: args.mode == Mode::Kernel,
    };
    let load_options = LoadOptions {
        ring_bytes: plan.ring_bytes,
        probe_count: probes.len() as u32,
        spare_probes,
        spare_counters,
        dispatch_tgid: dispatch_wanted.then_some(target.pid),
        // Only the kernel and auto modes ever aggregate in the kernel.
        kernel_histograms,
        pair_slots: pair_slots.capacity,
        // Auto mode and the clock phase stream every hit, timed, until they switch a
        // probe.
        time_every: if args.mode == Mode::Auto || clock_phase {
            1
        } else {
            plan.time_every
        },
        attach_path: target.live_thread.map(|_| attach::AttachPath::PerfEvent),
        filter_processes: several,
        ..Default::default()
    };
    check_memory_room(&load_options)?;
    let mut attachment = Attachment::load(load_options)?;
    // Before any probe: the set must hold the processes when the first hit fires.
    let cgroup_watch = if several {
        seed_processes(plan, args, &mut attachment)?
    } else {
        None
    };
    let (cgroup_poller, cgroup_removed) =
        cgroup_watch.map_or((None, None), |w| (Some(w.poller), Some(w.removed)));
    if attachment.attach_path() == attach::AttachPath::PerfEvent.name() {
        let slots = probes.len() as u64 + u64::from(spare_probes) + u64::from(spare_counters);
        attach::fds::check_room(slots).map_err(|line| anyhow::anyhow!(line))?;
    }
    let mut dispatch = if !dispatch_wanted {
        None
    } else {
        // `probetop calibrate` said so already when it met the same refusal.
        let told = prepared.calibration.as_ref().is_some_and(|c| {
            c.dispatch.is_empty()
                && c.dispatch_error
                    .as_deref()
                    .is_some_and(|e| e.contains("refused"))
        });
        crate::attach::dispatch::start_dispatch(&mut attachment, &prepared.sites, told)
    };
    let shutdown = stop::shutdown_signal(
        target,
        args.duration.map(Duration::from_secs_f64),
        !args.follow_exec,
    )?;
    // The cgroup removed, with no --pid process to count without it, ends the run too.
    let shutdown: Pin<Box<dyn Future<Output = StopReason> + Send>> = match cgroup_removed {
        Some(removed) => Box::pin(async move {
            tokio::pin!(shutdown);
            tokio::select! {
                reason = &mut shutdown => reason,
                Ok(()) = removed => StopReason::CgroupRemoved,
            }
        }),
        None => Box::pin(shutdown),
    };
    // All at once: one uprobe_multi link per file and program where the kernel has them.
    let config_of =
        |probe: &Probe| probe.config(base_config, args.args, &mut |line| say!("probetop: {line}"));
    let requests: Vec<AttachRequest> = probes
        .iter()
        .enumerate()
        .map(|(id, probe)| probe.request(id as u32, config_of(probe), plan.filter_pid))
        .collect();
    let files = maps_watch::identities(&probes);
    let outcomes = if args.budget.is_some() {
        attach_each_detached(&mut attachment, &requests)
    } else {
        attachment.attach_each(&requests)
    };
    drop(requests);
    let skipped_before = skipped.len();
    let attached = points::go_on_without_refused(
        outcomes,
        points::Attached {
            attachment: &mut attachment,
            probes: &mut probes,
            prepared: &mut prepared,
            skipped: &mut skipped,
        },
        &config_of,
        plan.filter_pid,
    );
    attached.map_err(|e| {
        let spec = e
            .probe_id()
            .and_then(|id| probes.get(id as usize))
            .map_or("the probes".to_string(), |probe| {
                format!("{} ({})", probe.spec, probe.point.name)
            });
        anyhow::Error::new(e).context(format!("attaching {spec}"))
    })?;
    if several && let Some(line) = processes::file_wide_semaphores_line(&probes) {
        say!("{line}");
    }
    if skipped.len() > skipped_before {
        let late = &skipped[skipped_before..];
        for line in points::late_skipped_lines(late) {
            say!("{line}");
        }
        // Its maps were filled by probe id before the ids moved.
        if dispatch.is_some() {
            crate::attach::dispatch::stop_dispatch(&mut attachment);
            dispatch = None;
            say!(
                "probetop: kernel dispatch time is not measured in this run (probe ids moved); whole cost per hit comes from calibration alone"
            );
        }
    }
    Ok(Attached {
        attachment,
        probes,
        prepared,
        skipped,
        dispatch,
        shutdown,
        cgroup_poller,
        files,
        pair_slots,
    })
}

/// Probes attached at once under `--budget`: a few at a time.
const BUDGET_ATTACH_CHUNK: usize = 32;

/// Under `--budget`: each probe attached (so that what the kernel refuses is known now,
/// as without a budget) and detached again at once, a chunk at a time, so that the whole
/// set is never attached before the budget's survey has priced it. Attached whole, ~830
/// glob probes on mariadbd cost 1.5 CPUs until the detach, uncounted (2026-11-28); a
/// chunk's probes are armed for its two calls' milliseconds. The survey attaches them
/// again a group at a time.
fn attach_each_detached(
    attachment: &mut Attachment,
    requests: &[AttachRequest],
) -> Vec<Result<(), crate::attach::AttachError>> {
    let began = std::time::Instant::now();
    let mut outcomes = Vec::with_capacity(requests.len());
    let (mut armed_ms, mut longest_ms) = (0.0, 0.0_f64);
    for chunk in requests.chunks(BUDGET_ATTACH_CHUNK) {
        let before = std::time::Instant::now();
        let out = attachment.attach_each(chunk);
        let ok: Vec<u32> = chunk
            .iter()
            .zip(&out)
            .filter(|(_, o)| o.is_ok())
            .map(|(r, _)| r.probe_id)
            .collect();
        attachment.detach_set(&ok);
        let ms = before.elapsed().as_secs_f64() * 1e3;
        armed_ms += ms;
        longest_ms = longest_ms.max(ms);
        outcomes.extend(out);
    }
    super::budget::trace!(
        "attached and detached {} probes {} at a time in {:.2}ms (calls {armed_ms:.2}ms, the longest chunk {longest_ms:.2}ms)",
        requests.len(),
        BUDGET_ATTACH_CHUNK,
        began.elapsed().as_secs_f64() * 1e3
    );
    outcomes
}

/// Several processes: the set the eBPF program counts hits of, seeded before any probe
/// is attached; with `--cgroup`, the poller that keeps it to the cgroup, and what
/// resolves when the cgroup's removal ends the run.
fn seed_processes(
    plan: &Plan,
    args: &RunArgs,
    attachment: &mut Attachment,
) -> anyhow::Result<Option<CgroupWatch>> {
    let scope = &plan.scope;
    // A process forked in a cgroup is born in it: followed at once rather than found
    // by the next read of cgroup.procs, after its first hits.
    attachment.track_processes(scope.follow_forks || scope.cgroup.is_some())?;
    let mut set = attachment.take_process_set()?;
    let members = processes::seed(&mut set, scope, &plan.roots)?;
    say!(
        "probetop: probing {members} process{}{}{}; the probes fire in every process mapping their files, where the eBPF program ignores the others' hits (docs/user-guide.md#several-processes)",
        if members == 1 { "" } else { "es" },
        if scope.follow_forks {
            ", and every process they fork"
        } else {
            ""
        },
        scope.cgroup.as_ref().map_or(String::new(), |d| format!(
            ", and every process that enters {} while it is there",
            d.display()
        )),
    );
    let Some(dir) = scope.cgroup.clone() else {
        return Ok(None);
    };
    let poll = processes::CgroupPoll {
        dir,
        named: scope.pids.clone(),
        follow_forks: scope.follow_forks,
        announce: args.no_tui,
    };
    let (poller, removed) = processes::spawn_cgroup_poller(set, poll);
    Ok(Some(CgroupWatch { poller, removed }))
}

/// `--cgroup`'s poller, and what resolves when the cgroup's removal ends the run.
struct CgroupWatch {
    poller: JoinHandle<()>,
    removed: oneshot::Receiver<()>,
}

/// `--listen`: serves what was measured so far, as Prometheus text or protobuf.
fn serve(listener: tokio::net::TcpListener, source: &Arc<ReportSource>) -> JoinHandle<()> {
    match listener.local_addr() {
        Ok(addr) => say!("probetop: serving metrics on http://{addr}/metrics"),
        Err(e) => say!("probetop: serving metrics (address unknown: {e})"),
    }
    let source = source.clone();
    tokio::spawn(listen::serve(listener, move |format| {
        let source = source.clone();
        async move {
            let report = source.report(false).await?;
            Some(match format {
                listen::Format::Text => export::prometheus::render_prometheus(&report).into_bytes(),
                listen::Format::Protobuf => export::promproto::render_protobuf(&report),
            })
        }
    }))
}

/// `--otlp`: a report every `interval` seconds, offered to the push thread (which never
/// holds this task up).
fn push_otlp(
    url: &str,
    interval: f64,
    source: &Arc<ReportSource>,
) -> anyhow::Result<(Arc<crate::present::otlp::Pusher>, JoinHandle<()>)> {
    let pusher = Arc::new(
        crate::present::otlp::Pusher::start(url.to_string())
            .with_context(|| format!("--otlp {url}: cannot start the push thread"))?,
    );
    say!("probetop: pushing metrics to {url} every {interval} s");
    let source = source.clone();
    let task = tokio::spawn({
        let pusher = pusher.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(interval));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut resource = None;
            loop {
                tick.tick().await;
                let Some(report) = source.report(false).await else {
                    return;
                };
                let resource =
                    resource.get_or_insert_with(|| crate::present::otlp::resource(&report));
                pusher.offer(&report, resource);
            }
        }
    });
    Ok((pusher, task))
}

/// Refuses, before anything is attached, a run whose probes need more memory than the
/// memory cgroup probetop runs in allows: the kernel would kill it mid-run and what it
/// measured would be lost.
fn check_memory_room(options: &LoadOptions) -> anyhow::Result<()> {
    let Some(room) = crate::sys::cgroup::own_memory_room() else {
        return Ok(());
    };
    let slots = u64::from(options.probe_count.saturating_add(options.spare_probes));
    let own = slots * crate::aggregate::BYTES_PER_PROBE;
    let kernel = attach::kernel_memory_bytes(options);
    let need = own + kernel;
    if need > room.left() {
        let mib = |bytes: u64| bytes.div_ceil(1 << 20);
        anyhow::bail!(
            "{slots} probes need about {} MiB more memory ({} KiB each in probetop, {} MiB of kernel maps; docs/performance.md), but the memory cgroup {} allows {} MiB more (limit {} MiB): raise its limit, or probe fewer points (--max-probes)",
            mib(need),
            crate::aggregate::BYTES_PER_PROBE >> 10,
            mib(kernel),
            room.dir.display(),
            room.left() >> 20,
            mib(room.limit)
        );
    }
    Ok(())
}

/// The in-kernel histograms are per-CPU arrays of 592 counters per probe: on a large
/// host with many probes that is real kernel memory, so say how much when it is.
fn say_kernel_histogram_memory(probe_slots: usize) {
    let cpus = aya::util::nr_cpus().unwrap_or(1);
    let bytes = probe_slots * probe_common::khist::BUCKETS as usize * 8 * cpus;
    if bytes >= 64 << 20 {
        say!(
            "probetop: in-kernel histograms take {} MiB of kernel memory ({probe_slots} probe slots x {} buckets x {cpus} CPUs); --mode ring takes none",
            bytes >> 20,
            probe_common::khist::BUCKETS
        );
    }
}
