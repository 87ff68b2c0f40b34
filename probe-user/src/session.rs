//! One probing run, start to finish: specs -> resolve -> attach -> stream -> aggregate
//! -> present, then detach and export; with `--follow-exec`, again in every program the
//! target execs ([`follow`]).

mod follow;
mod insitu;
mod maps_watch;
mod points;
mod processes;
mod specs;
mod traced;

use std::{
    future::Future,
    io,
    os::fd::{FromRawFd as _, OwnedFd},
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
    time::{Duration, SystemTime},
};

use anyhow::{Context as _, bail};
use tokio::{
    io::{Interest, unix::AsyncFd},
    signal::unix::{SignalKind, signal},
    sync::{mpsc, oneshot, watch},
};

use crate::aggregate::{Aggregator, IntervalLog, ProbeMeasurements, Snapshot};
use crate::attach::{self, AttachRequest, Attachment, LoadOptions};
use crate::cli::{Mode, RunArgs};
use crate::present::{
    self, ProbeLabel,
    export::{self, ExecReport, Interval, ProbeReport, Report},
    listen,
    tui::{self, UiEvent, UiExit, UiLinks, UiRequest},
};
use crate::resolve::{self, ProbePoint, ResolveOptions};
use crate::spec::{ProbeKind, ProbeSpec};
use crate::stream::{
    self, Collected, CollectorCommand, CollectorLinks, CollectorOptions, Copied, HitStream,
};
use crate::target::{PinnedExe, Target};
use crate::{UsageError, cost, privileges};
use probe_common::{ProbeConfig, mode};

/// Like eprintln!, but a failed write is ignored: after SIGHUP the terminal is gone, and
/// eprintln! would panic (and abort) before the exports are written.
macro_rules! say {
    ($($arg:tt)*) => {{
        // Held while the TUI has the terminal (see present::tui::say).
        $crate::present::tui::say(&format!($($arg)*));
    }};
}

/// Why measuring stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Duration,
    Signal(&'static str),
    TargetExited,
    /// The target exec'd another program; the probes no longer fire.
    TargetExeced,
    UserQuit,
    /// The TUI's terminal went away (writes and reads fail): measuring stops as on
    /// SIGHUP, and what was measured is exported.
    TerminalLost,
}

/// A resolved probe with the spec that asked for it, and the program it was resolved
/// in.
#[derive(Debug, Clone)]
struct Probe {
    spec: String,
    point: ProbePoint,
    /// Execs of the target followed before it was attached (`--follow-exec`).
    generation: u32,
    /// The program the target ran then.
    exe: PathBuf,
}

impl Probe {
    /// A point resolved in `target`'s executable is attached through `pin`, the file
    /// that was read, rather than `/proc/PID/exe`, which names whatever runs now.
    fn new(
        spec: &ProbeSpec,
        mut point: ProbePoint,
        generation: u32,
        target: &Target,
        pin: &PinnedExe,
    ) -> Self {
        if point.attach_path == target.exe_link() {
            point.attach_path = pin.path();
        }
        Self {
            spec: spec.text.clone(),
            point,
            generation,
            exe: target.exe.clone(),
        }
    }

    /// How the probe is named on screen; single-stepped and refused sites are marked.
    fn label(&self, cost: &cost::ProbeCost) -> ProbeLabel {
        let mut label = ProbeLabel::new(
            self.point.kind,
            &self.point.name,
            &self.point.object.display().to_string(),
        );
        label.resolved = self.point.resolved.clone();
        if let Some(tag) = cost::label_tag(cost) {
            label.display = format!("{} {tag}", label.display);
        }
        label
    }

    /// The kernel's view of the probe, under id `probe_id`.
    fn request(&self, probe_id: u32, config: ProbeConfig, pid: u32) -> AttachRequest<'_> {
        AttachRequest {
            probe_id,
            kind: self.point.kind,
            path: &self.point.attach_path,
            file_offset: self.point.file_offset,
            semaphore_offset: self.point.usdt.as_ref().and_then(|u| u.semaphore_offset),
            config,
            pid,
        }
    }
}

/// The config of a probe: the run's mode, and its argument recipes with `--args`
/// (a probe whose arguments cannot be read still attaches; `say` says why).
fn probe_config(
    base: ProbeConfig,
    probe: &Probe,
    args: usize,
    say: &mut dyn FnMut(String),
) -> ProbeConfig {
    let mut config = base;
    if args > 0 {
        match attach::args::args_config(&probe.point, args) {
            Ok(captured) => {
                // Fewer than asked (a USDT site with fewer arguments, a function entry's
                // six registers): said, not silently cut.
                if (captured.count as usize) < args {
                    say(format!(
                        "{}: --args {args} captures {} argument value{} of {}, all it has in registers or notes",
                        probe.spec,
                        captured.count,
                        if captured.count == 1 { "" } else { "s" },
                        probe.point.name
                    ));
                }
                config.args = captured;
            }
            Err(e) => say(format!(
                "{}: no argument values for {}: {e}",
                probe.spec, probe.point.name
            )),
        }
    }
    config
}

/// One hit in how many has its handler timed: `--time-every`, for the kernel mode and
/// for auto mode once it aggregates a probe in the kernel, where no record needs the
/// handler time of every hit.
fn time_every(mode: Mode, asked: Option<u64>) -> Result<u64, UsageError> {
    match (mode, asked) {
        (_, Some(0)) => Err(UsageError(
            "--time-every 0: give 1 to time every hit, or N to time one hit in N".into(),
        )),
        (Mode::Kernel | Mode::Auto, asked) => Ok(asked.unwrap_or(probe_common::DEFAULT_TIME_EVERY)),
        (_, None | Some(1)) => Ok(1),
        (_, Some(n)) => Err(UsageError(format!(
            "--time-every {n} applies to --mode kernel and auto only: records streamed in the other modes carry every hit's handler time"
        ))),
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let specs = specs::collect(&args)?;
    let scope = processes::Scope::from_args(&args)?;
    let pid = scope.primary()?;
    let several = scope.several();
    if several && args.follow_exec {
        bail!(UsageError(
            "--follow-exec follows one process: run it with one --pid, without --follow-forks or --cgroup".into()
        ));
    }
    if let Some(d) = args.duration
        && !(d.is_finite() && d > 0.0)
    {
        bail!(UsageError(format!(
            "--duration {d}: give a positive number of seconds"
        )));
    }
    if !(args.interval.is_finite() && args.interval >= 0.01) {
        bail!(UsageError(format!(
            "--interval {}: give at least 0.01 seconds",
            args.interval
        )));
    }
    let ring_bytes = match args.ring_kib {
        Some(kib) => kib.checked_mul(1 << 10),
        None => args.ring_mib.checked_mul(1 << 20),
    };
    let ring_bytes = match ring_bytes {
        Some(bytes) if bytes.is_power_of_two() && bytes >= 4096 => bytes,
        _ => bail!(UsageError(
            "the ring buffer size must be a power of two, at least 4 KiB and below 4 GiB (--ring-mib 4, 8, 16, ...)".into()
        )),
    };
    let time_every = time_every(args.mode, args.time_every)?;
    if args.args > probe_common::MAX_ARGS {
        bail!(UsageError(format!(
            "--args {}: a hit carries at most {} argument values (the most a USDT site has, as in libbpf)",
            args.args,
            probe_common::MAX_ARGS
        )));
    }
    if args.sample_every == 0 {
        bail!(UsageError(
            "--sample-every 0: give 1 to stream every hit, or N to stream one hit in N".into()
        ));
    }
    check_in_situ(&args)?;
    privileges::check()?;
    // Before anything is opened: each probe on the perf-event path holds two descriptors.
    if let Err(e) = attach::fds::raise_limit() {
        say!("probetop: cannot raise the open-file limit ({e}); `ulimit -n` shows it");
    }
    let target = Target::open(pid)?;
    if let Some(note) = target.identity_note() {
        say!("probetop: {note}");
    }
    // A thread id was mapped to its process.
    let pid = target.pid;
    // Probes fire only in the process whose memory their filter names: with the main
    // thread gone that is a live thread's, which perf events can name (a uprobe_multi
    // link's filter is the leader's).
    let filter_pid = target.live_thread.unwrap_or(pid);
    // Several processes: attached for every process, counted for the set's members.
    let filter_pid = if several { 0 } else { filter_pid };
    let mut roots = vec![pid];
    for &other in scope.pids.iter().skip(1) {
        let other = Target::open(other)?;
        traced::check_at_attach(&other, args.force)?;
        roots.push(other.pid);
    }
    traced::check_at_attach(&target, args.force)?;
    for path in &args.exports {
        check_export_format(&target, path)?;
        // Found now, not after the whole run: a missing or read-only directory, a link,
        // a FIFO (whose open would hang).
        export::check(path, args.force).map_err(|e| UsageError(e.to_string()))?;
    }

    let resolve_options = ResolveOptions {
        max_probes: args.max_probes,
        ..Default::default()
    };
    // Held open for the whole run: probes on the executable are attached through it.
    let pin = target
        .pin_exe()
        .with_context(|| format!("cannot open the executable of pid {pid}"))?;
    let resolver = resolve::Resolver::new(&target, resolve_options.clone());
    let mut probes = Vec::new();
    for spec in &specs {
        for point in resolver.resolve(spec)? {
            probes.push(Probe::new(spec, point, 0, &target, &pin));
        }
    }
    // The parsed objects (whole files, symbol tables) are not needed while measuring.
    drop(resolver);
    let merged = points::merge_duplicates(&mut probes);
    if merged > 0 {
        say!("{}", points::merged_line(merged));
    }
    for line in points::unmapped_lines(&probes, pid) {
        say!("{line}");
    }
    points::check_total(probes.len(), args.max_probes, specs.len())?;
    if probes.len() > probe_common::MAX_PROBES as usize {
        bail!(UsageError(format!(
            "{} probe points in all, more than probetop can attach at once ({}): narrow the specs",
            probes.len(),
            probe_common::MAX_PROBES
        )));
    }
    if !args.force {
        refuse_go_return_probes(&probes)?;
    }
    say!(
        "probetop: {} probe point{} from {} spec{}",
        probes.len(),
        if probes.len() == 1 { "" } else { "s" },
        specs.len(),
        if specs.len() == 1 { "" } else { "s" }
    );

    let base_config = ProbeConfig {
        mode: match args.mode {
            Mode::Ring | Mode::Auto => mode::RING,
            Mode::Sample => mode::SAMPLE,
            Mode::Kernel => mode::KERNEL_HISTOGRAM,
        },
        sample_every: args.sample_every.max(1),
        ..Default::default()
    };
    let wants_intervals = args.exports.iter().any(|p| {
        p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("hlog"))
    });
    let collector_options = CollectorOptions {
        auto_kernel_above: (args.mode == Mode::Auto).then_some(args.auto_above),
        auto_time_every: time_every,
        interval: Duration::from_secs_f64(args.interval),
        keep_interval_log: wants_intervals,
    };
    // Bound before anything is attached, so a taken port fails fast.
    let listener = match args.listen {
        Some(addr) => Some(
            listen::bind(addr)
                .await
                .with_context(|| format!("--listen {addr}: cannot listen there"))?,
        ),
        None => None,
    };
    let points: Vec<&ProbePoint> = probes.iter().map(|p| &p.point).collect();
    let mut prepared = cost::prepare(&points);
    let mut skipped = points::skip_refused_sites(&mut probes, &mut prepared);
    if !skipped.is_empty() {
        say!("{}", points::skipped_line(&skipped, points::LISTED_REFUSED));
    }
    if probes.is_empty() {
        bail!("the kernel refuses to probe every point the specs match: nothing to attach");
    }
    let spec_points: Vec<(&str, &ProbePoint)> =
        probes.iter().map(|p| (p.spec.as_str(), &p.point)).collect();
    for line in cost::entry_warnings(&spec_points, &prepared.costs) {
        say!("{line}");
    }
    if let Some(line) = points::ifunc_resolvers_line(&spec_points) {
        say!("{line}");
    }
    // Kernel dispatch is timed for one process's hits.
    let dispatch_wanted = !several
        && !args.no_dispatch
        && probes.len() <= cost::dispatch::MAX_DISPATCH_PROBES as usize;
    if !args.no_dispatch && !dispatch_wanted && !several {
        say!(
            "probetop: kernel dispatch time is measured for at most {} probes; whole cost per hit comes from calibration alone",
            cost::dispatch::MAX_DISPATCH_PROBES
        );
    }
    let spare_probes = if args.follow_exec {
        follow::spare_probes(probes.len() as u32)
    } else {
        0
    };
    let kernel_histograms = matches!(args.mode, Mode::Kernel | Mode::Auto);
    if kernel_histograms {
        say_kernel_histogram_memory(probes.len() + spare_probes as usize);
    }
    let mut attachment = Attachment::load(LoadOptions {
        ring_bytes,
        probe_count: probes.len() as u32,
        spare_probes,
        dispatch_tgid: dispatch_wanted.then_some(pid),
        // Only the kernel and auto modes ever aggregate in the kernel.
        kernel_histograms,
        // Auto mode streams every hit, timed, until it switches a probe.
        time_every: if args.mode == Mode::Auto {
            1
        } else {
            time_every
        },
        attach_path: target.live_thread.map(|_| attach::AttachPath::PerfEvent),
        filter_processes: several,
        ..Default::default()
    })?;
    // Before any probe: the set must hold the processes when the first hit fires.
    let cgroup_poller = if several {
        // A process forked in a cgroup is born in it: followed at once rather than
        // found by the next read of cgroup.procs, after its first hits.
        attachment.track_processes(scope.follow_forks || scope.cgroup.is_some())?;
        let mut set = attachment.take_process_set()?;
        let members = processes::seed(&mut set, &scope, &roots)?;
        say!(
            "probetop: probing {members} process{}{}{}; the probes fire in every process mapping their files, where the eBPF program ignores the others' hits (docs/user-guide.md#several-processes)",
            if members == 1 { "" } else { "es" },
            if scope.follow_forks {
                ", and every process they fork"
            } else {
                ""
            },
            scope.cgroup.as_ref().map_or(String::new(), |d| format!(
                ", and every process that enters {}",
                d.display()
            )),
        );
        scope
            .cgroup
            .clone()
            .map(|dir| processes::spawn_cgroup_poller(set, dir, args.no_tui))
    } else {
        None
    };
    if attachment.attach_path() == attach::AttachPath::PerfEvent.name() {
        let slots = probes.len() as u64 + u64::from(spare_probes);
        attach::fds::check_room(slots).map_err(|line| anyhow::anyhow!(line))?;
    }
    let mut dispatch = if !dispatch_wanted {
        None
    } else {
        cost::start_dispatch(&mut attachment, &prepared.sites)
    };
    // Signals are handled from here on, so an interrupt while attaching still detaches.
    let shutdown = shutdown_signal(
        &target,
        args.duration.map(Duration::from_secs_f64),
        !args.follow_exec,
    )?;
    // All at once: one uprobe_multi link per file and program where the kernel has them.
    let config_of = |probe: &Probe| {
        probe_config(base_config, probe, args.args, &mut |line| {
            say!("probetop: {line}")
        })
    };
    let requests: Vec<AttachRequest> = probes
        .iter()
        .enumerate()
        .map(|(id, probe)| probe.request(id as u32, config_of(probe), filter_pid))
        .collect();
    let outcomes = attachment.attach_each(&requests);
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
        filter_pid,
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
    if skipped.len() > skipped_before {
        let late = &skipped[skipped_before..];
        say!("{}", points::skipped_line(late, points::REFUSED_AT_ATTACH));
        // Its maps were filled by probe id before the ids moved.
        if dispatch.is_some() {
            cost::stop_dispatch(&mut attachment);
            dispatch = None;
            say!(
                "probetop: kernel dispatch time is not measured in this run (probe ids moved); whole cost per hit comes from calibration alone"
            );
        }
    }
    let ring = attachment.take_ring()?;
    let flush = attachment.attach_flush()?;
    let mut counters = attachment.take_counters()?;
    let mut aggregator = Aggregator::new(probes.len());
    for (row, probe) in aggregator.probes_mut().iter_mut().zip(&probes) {
        row.mode = base_config.mode;
        row.name = ProbeLabel::new(probe.point.kind, &probe.point.name, "").display;
    }
    aggregator.assumer = cost::assume::Assumer::new(args.assume, pid);
    aggregator.assumer.gap_curve = prepared.costs.iter().any(|c| c.gap_curve.is_some());
    aggregator.count_processes = several;
    let dispatch_running = dispatch.is_some();
    cost::install(&mut aggregator, prepared.costs, dispatch_running);
    if let Some(dispatch) = dispatch {
        counters.set_dispatch(dispatch);
    }
    let others = cost::bpf_stats::Others::start(pid, args.bpf_stats);
    aggregator.open_window(stream::ktime_now_ns());
    stream::baseline_kernel_counters(&counters, &mut aggregator);
    let attach_path = attachment.attach_path();
    say!(
        "probetop: attached {} probe{} to pid {} ({}) via {attach_path}",
        probes.len(),
        if probes.len() == 1 { "" } else { "s" },
        target.pid,
        target.comm
    );

    // A test hook: a panic with probes attached must leave none behind (see tests/attach.rs).
    if std::env::var_os("PROBETOP_TEST_PANIC_AFTER_ATTACH").is_some() {
        panic!("PROBETOP_TEST_PANIC_AFTER_ATTACH is set");
    }

    let mut labels: Vec<ProbeLabel> = probes
        .iter()
        .zip(aggregator.probes())
        .map(|(p, measured)| p.label(&measured.cost))
        .collect();
    let (snapshot_tx, snapshot_rx) = watch::channel(Snapshot::default());
    let (command_tx, command_rx) = mpsc::channel(16);
    let (focus_tx, focus_rx) = watch::channel(None);
    let collector = tokio::spawn(stream::collect(
        HitStream::new(ring, Some(flush))?,
        counters,
        aggregator,
        collector_options,
        CollectorLinks {
            snapshots: snapshot_tx,
            commands: command_rx,
            focus: focus_rx,
        },
    ));
    let live: Vec<u32> = (0..probes.len() as u32).collect();
    let source = Arc::new(ReportSource {
        target: target.clone(),
        rows: RwLock::new(Rows {
            probes,
            execs: Vec::new(),
            skipped,
            replaced: Vec::new(),
        }),
        commands: command_tx.clone(),
        in_situ: RwLock::new(None),
        attach_path,
        several,
    });
    let maps_watch = maps_watch::spawn(target.live_thread.unwrap_or(pid), &source);
    let mut in_situ = if args.in_situ {
        Some(insitu::Driver::start(
            pid,
            args.work,
            Duration::from_secs_f64(args.in_situ_window),
        )?)
    } else {
        None
    };
    let session_snapshots = snapshot_rx.clone();
    let mut follow = args.follow_exec.then(|| {
        follow::Follow::new(follow::Setup {
            specs: specs.clone(),
            resolve_options: resolve_options.clone(),
            force: args.force,
            args: args.args,
            base_config,
            target: target.clone(),
            live,
            dispatch_running,
        })
    });

    let server = listener.map(|listener| {
        match listener.local_addr() {
            Ok(addr) => say!("probetop: serving metrics on http://{addr}/metrics"),
            Err(e) => say!("probetop: serving metrics (address unknown: {e})"),
        }
        let source = source.clone();
        tokio::spawn(listen::serve(listener, move || {
            let source = source.clone();
            async move {
                let report = source.report(false).await?;
                Some(export::prometheus::render_prometheus(&report))
            }
        }))
    });

    // What happened while the TUI had the terminal, told again on stderr at the end.
    let mut notes = Vec::new();
    // One process probed: a probe still silent after a while, in a parent whose
    // children map its file, is named with --follow-forks once (or at the end).
    let hint_at = tokio::time::sleep(processes::HINT_AFTER);
    tokio::pin!(hint_at);
    let mut hint_pending = !several;
    let mut hinted = false;
    // Said in the TUI's footer, and again on stderr at the end.
    let mut hint_notes = Vec::new();
    let reason = if args.no_tui {
        let mut teller = follow::Teller::Stderr;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                reason = &mut shutdown => break reason,
                _ = &mut hint_at, if hint_pending => {
                    hint_pending = false;
                    for line in silent_hints(&source, &session_snapshots.borrow(), target.pid) {
                        say!("probetop: {line}");
                        hinted = true;
                    }
                }
                _ = insitu::due(&in_situ) => {
                    change_window(&mut in_situ, &mut attachment, &source, &session_snapshots);
                }
                event = follow::next_event(&mut follow) => {
                    let mut links = follow::Links {
                        attachment: &mut attachment,
                        source: &source,
                        labels: &mut labels,
                        teller: &mut teller,
                    };
                    if let Some(reason) = follow::on_event(event, &mut follow, &mut links).await {
                        break reason;
                    }
                }
            }
        }
    } else {
        let (request_tx, mut request_rx) = mpsc::channel(8);
        // Each request yields at most one event and at most 8 requests queue, so the
        // session's sends (awaited while the UI is not polled) always find room; events
        // of an exec are sent without waiting (see follow::Teller).
        let (event_tx, event_rx) = mpsc::channel(64);
        let mut teller = follow::Teller::Ui {
            events: event_tx.clone(),
            target: tui::TargetLine {
                pid: target.pid,
                comm: target.comm.clone(),
            },
            notes: &mut notes,
        };
        let app = tui::App::new(
            tui::TargetLine {
                pid: target.pid,
                comm: target.comm.clone(),
            },
            labels.clone(),
            args.args > 0,
            tui::Theme::from_env(),
        );
        let ui = tui::run(
            app,
            UiLinks {
                snapshots: snapshot_rx.clone(),
                focus: focus_tx,
                requests: request_tx,
                events: event_rx,
            },
            shutdown,
        );
        tokio::pin!(ui);
        let exit = loop {
            tokio::select! {
                exit = &mut ui => break exit?,
                _ = &mut hint_at, if hint_pending => {
                    hint_pending = false;
                    let lines = silent_hints(&source, &session_snapshots.borrow(), target.pid);
                    for line in lines {
                        let _ = event_tx.try_send(UiEvent::Message(line.clone()));
                        hint_notes.push(line);
                        hinted = true;
                    }
                }
                Some(request) = request_rx.recv() => {
                    handle_request(request, &mut attachment, &mut in_situ, &source, &args.exports, args.force, &event_tx).await;
                }
                _ = insitu::due(&in_situ) => {
                    if let Some(summary) = change_window(&mut in_situ, &mut attachment, &source, &session_snapshots) {
                        // The UI may be busy; the next change sends a newer one.
                        let _ = event_tx.try_send(in_situ_event(&summary));
                    }
                }
                event = follow::next_event(&mut follow) => {
                    let mut links = follow::Links {
                        attachment: &mut attachment,
                        source: &source,
                        labels: &mut labels,
                        teller: &mut teller,
                    };
                    if let Some(reason) = follow::on_event(event, &mut follow, &mut links).await {
                        break UiExit::Shutdown(reason);
                    }
                }
            }
        };
        match exit {
            UiExit::Quit => StopReason::UserQuit,
            UiExit::Shutdown(reason) => reason,
            UiExit::TerminalLost(e) => {
                notes.push(format!("the terminal is gone ({e}): stopping"));
                StopReason::TerminalLost
            }
        }
    };

    // One cut for every probe. The probes stay attached until the exports are written:
    // detaching can take the kernel long (a grace period per perf event), and what was
    // measured must not wait on it, nor be lost if probetop is killed meanwhile. Hits
    // after the cut are not counted. A send fails only if the collector is gone, and
    // then its result says what happened.
    let close_ktime_ns = stream::ktime_now_ns();
    let closed_unix_ms = unix_now_ms();
    let close = CollectorCommand::CloseWindow {
        at_ktime_ns: close_ktime_ns,
    };
    let _ = command_tx.send(close).await;
    if let Some(driver) = in_situ.as_mut() {
        driver.finish();
    }
    if let Some(server) = server {
        server.abort();
    }
    if let Some(watch) = maps_watch {
        watch.abort();
    }
    if let Some(poller) = cgroup_poller {
        poller.abort();
    }
    let _ = command_tx.send(CollectorCommand::Stop).await;
    let Collected {
        aggregator,
        intervals,
    } = collector.await.context("the collector task failed")?;
    // Measured from the window's opening (or the last reset) to the cut.
    let duration =
        Duration::from_nanos(close_ktime_ns.saturating_sub(aggregator.window_start_ns()));
    let started_unix_ms = closed_unix_ms.saturating_sub(duration.as_millis() as u64);

    notes.extend(hint_notes);
    for note in &notes {
        say!("probetop: {note}");
    }
    // What happened during the run (auto mode's switches) comes before how it ended.
    for notice in &aggregator.notices {
        say!("probetop: {notice}");
    }
    // The program probed last: the first one, unless execs were followed.
    let current = follow.as_ref().map_or(&target, |f| f.current());
    match reason {
        StopReason::TargetExited => say!("probetop: pid {} exited", target.pid),
        StopReason::TargetExeced => say!(
            "probetop: pid {} exec'd {}: probes on {} no longer fire; measurements up to the exec follow",
            target.pid,
            current
                .exec_changed()
                .map_or_else(|| "another program".into(), |p| p.display().to_string()),
            current.exe.display()
        ),
        StopReason::Signal(name) => say!("probetop: {name}"),
        StopReason::Duration | StopReason::UserQuit | StopReason::TerminalLost => {}
    }
    if !several && !hinted {
        let hits: Vec<u64> = aggregator.probes().iter().map(|p| p.hits()).collect();
        for line in processes::silent_probe_hints(target.pid, &silent_probes(&source, &hits)) {
            say!("probetop: {line}");
        }
    }
    let snapshot = aggregator.snapshot(duration);
    // After SIGHUP stdout may be a terminal that is gone: print! would panic (and abort)
    // before the exports are written, so a failed write is ignored.
    {
        use std::io::Write as _;
        let mut out = io::stdout().lock();
        let _ = out
            .write_all(present::summary::table(&labels, &snapshot).as_bytes())
            .and_then(|()| out.flush());
    }
    let other_programs = others.finish();
    let measured = aggregator.measurements();
    let in_situ_summary = in_situ.as_ref().map(|driver| {
        let hits: u64 = measured.probes.iter().map(|p| p.hits).sum();
        driver.summary(hits)
    });
    {
        // As above: a terminal gone after SIGHUP must not stop the exports.
        use std::io::Write as _;
        let mut err = io::stderr().lock();
        let _ = err.write_all(cost::report(&labels, &aggregator, duration).as_bytes());
        if let Some(summary) = &in_situ_summary {
            let _ = writeln!(err, "probetop: {}", summary.line());
        }
        let _ = err.write_all(cost::bpf_stats::render(&other_programs).as_bytes());
    }

    let rows = source.rows();
    let mut report = build_report(
        &target,
        &rows,
        &measured.probes,
        &intervals,
        started_unix_ms,
        duration,
        several,
    );
    report.cost = cost::run_report(&aggregator, duration, other_programs);
    report.attach_path = Some(attach_path);
    if let Some(summary) = in_situ_summary {
        report.apply_in_situ(summary);
    }
    let mut failed = Vec::new();
    for path in &args.exports {
        match export::write(&report, path, args.force) {
            Ok(written) => {
                for file in written {
                    say!("probetop: wrote {}", file.display());
                }
            }
            Err(e) => failed.push(e.to_string()),
        }
    }
    if let Some(line) = traced::warning_at_exit(&target) {
        say!("probetop: {line}");
    }
    detach_with_progress(attachment).await;
    // Held until no probe can be attached through it again (`space`): its number must
    // not name another file meanwhile.
    drop(pin);
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    Ok(())
}

/// (spec, file) of the probes of the first program with no hit so far.
fn silent_probes(source: &ReportSource, hits: &[u64]) -> Vec<(String, PathBuf)> {
    source
        .rows()
        .probes
        .iter()
        .zip(hits)
        .filter(|(probe, hits)| **hits == 0 && probe.generation == 0)
        .map(|(probe, _)| (probe.spec.clone(), probe.point.attach_path.clone()))
        .collect()
}

/// The --follow-forks hint lines for the probes silent in `snapshot`.
fn silent_hints(source: &ReportSource, snapshot: &Snapshot, pid: u32) -> Vec<String> {
    let hits: Vec<u64> = snapshot.probes.iter().map(|p| p.hits).collect();
    // Before the first snapshot nothing is known yet.
    if hits.is_empty() {
        return Vec::new();
    }
    processes::silent_probe_hints(pid, &silent_probes(source, &hits))
}

/// Detaches every probe, saying how it goes when it takes a while; a second SIGINT or
/// SIGTERM stops waiting (what was measured is written by then) and exits, leaving the
/// kernel to detach what is left as it closes probetop's descriptors.
async fn detach_with_progress(mut attachment: Attachment) {
    let total = attachment.attached_ids().len();
    let detach = tokio::task::spawn_blocking(move || {
        attachment.detach_all();
        drop(attachment);
    });
    tokio::pin!(detach);
    let started = std::time::Instant::now();
    // Once after a second, then every five: enough to show it is moving.
    let mut told = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(5),
    );
    let (mut interrupt, mut terminate) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (Some(i), Some(t)),
        _ => (None, None),
    };
    let again = async {
        match (interrupt.as_mut(), terminate.as_mut()) {
            (Some(i), Some(t)) => tokio::select! {
                _ = i.recv() => "SIGINT",
                _ = t.recv() => "SIGTERM",
            },
            _ => std::future::pending().await,
        }
    };
    tokio::pin!(again);
    loop {
        tokio::select! {
            _ = &mut detach => break,
            _ = told.tick() => say!(
                "probetop: detaching {total} probe{}: {:.0} s so far (the kernel waits a grace period per probe; SIGINT again to exit now)",
                if total == 1 { "" } else { "s" },
                started.elapsed().as_secs_f64()
            ),
            name = &mut again => {
                say!("probetop: {name} again: exiting now; the kernel detaches the rest as it closes probetop's descriptors");
                std::process::exit(0);
            }
        }
    }
    if started.elapsed() >= Duration::from_secs(1) {
        say!(
            "probetop: detached {total} probes in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    } else {
        say!("probetop: detached");
    }
}

/// Ends an in-situ window and starts the next; the summary so far, or `None` without
/// `--in-situ` (or once it stopped on an error, which is said).
fn change_window(
    driver: &mut Option<insitu::Driver>,
    attachment: &mut Attachment,
    source: &ReportSource,
    snapshots: &watch::Receiver<Snapshot>,
) -> Option<cost::insitu::InSituSummary> {
    let active = driver.as_mut()?;
    if let Err(e) = active.change(attachment) {
        say!(
            "probetop: in situ measurement stopped: {}",
            crate::error_line(&e)
        );
        *driver = None;
        return None;
    }
    let hits: u64 = snapshots.borrow().probes.iter().map(|p| p.hits).sum();
    let summary = active.summary(hits);
    *source
        .in_situ
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(summary.clone());
    Some(summary)
}

/// What the TUI shows of an in-situ summary: a status part and a detail line.
fn in_situ_event(summary: &cost::insitu::InSituSummary) -> UiEvent {
    let status = match (summary.verdict, summary.added_share) {
        (cost::insitu::Verdict::Measured, Some(share)) => {
            format!("in situ {} cpu", present::format::percent(share.mean))
        }
        (verdict, _) => format!("in situ: {}", verdict.as_str()),
    };
    UiEvent::InSitu {
        status,
        detail: summary.line(),
    }
}

/// `--in-situ`'s settings, checked before anything is attached.
fn check_in_situ(args: &RunArgs) -> Result<(), UsageError> {
    if !args.in_situ {
        return Ok(());
    }
    if !(args.in_situ_window.is_finite() && args.in_situ_window >= 0.1) {
        return Err(UsageError(format!(
            "--in-situ-window {}: give at least 0.1 seconds",
            args.in_situ_window
        )));
    }
    if args.follow_exec {
        return Err(UsageError(
            "--in-situ measures one program: run it without --follow-exec".into(),
        ));
    }
    if args.pids.len() > 1 || args.follow_forks || args.cgroup.is_some() {
        return Err(UsageError(
            "--in-situ measures one process: run it with one --pid, without --follow-forks or --cgroup".into(),
        ));
    }
    Ok(())
}

/// Every probe row of the run, and the execs followed: rows are only ever appended
/// (`--follow-exec`), so a probe id indexes them for the whole run.
#[derive(Debug, Clone, Default)]
struct Rows {
    probes: Vec<Probe>,
    execs: Vec<ExecReport>,
    /// Points matched but not attached (the kernel refuses them).
    skipped: Vec<export::SkippedPoint>,
    /// Probed objects replaced on disk and loaded again ([`maps_watch`]).
    replaced: Vec<export::ReplacedObject>,
}

/// What a report needs besides the measurements, and the way to ask the collector for
/// them while it runs (exports on `e`, scrapes of `--listen`).
struct ReportSource {
    target: Target,
    /// Written by the session when it follows an exec; read by reports.
    rows: RwLock<Rows>,
    commands: mpsc::Sender<CollectorCommand>,
    /// The in-situ measurement so far (`--in-situ`), updated at every window change.
    in_situ: RwLock<Option<cost::insitu::InSituSummary>>,
    attach_path: &'static str,
    /// Several processes probed: reports split each probe by process.
    several: bool,
}

impl ReportSource {
    /// A copy of the rows now.
    fn rows(&self) -> Rows {
        // Nothing panics while holding the lock; if something did, the rows are whole.
        self.rows
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Changes the rows (the session, following an exec).
    fn update_rows(&self, change: impl FnOnce(&mut Rows)) {
        change(
            &mut self
                .rows
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }

    /// A report of everything measured up to now; `None` once the collector has stopped.
    async fn report(&self, with_intervals: bool) -> Option<Report> {
        let (reply, copy) = oneshot::channel();
        self.commands
            .send(CollectorCommand::Copy {
                with_intervals,
                reply,
            })
            .await
            .ok()?;
        let Copied {
            measurements,
            intervals,
        } = copy.await.ok()?;
        let now_ktime_ns = stream::ktime_now_ns();
        let duration =
            Duration::from_nanos(now_ktime_ns.saturating_sub(measurements.window_start_ns));
        let mut report = build_report(
            &self.target,
            &self.rows(),
            &measurements.probes,
            &intervals,
            unix_now_ms().saturating_sub(duration.as_millis() as u64),
            duration,
            self.several,
        );
        let in_situ = self
            .in_situ
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(summary) = in_situ {
            report.apply_in_situ(summary);
        }
        report.attach_path = Some(self.attach_path);
        Some(report)
    }
}

/// Carries out what the UI asked; the outcome goes back to it as an event.
async fn handle_request(
    request: UiRequest,
    attachment: &mut Attachment,
    in_situ: &mut Option<insitu::Driver>,
    source: &Arc<ReportSource>,
    exports: &[PathBuf],
    force: bool,
    events: &mpsc::Sender<UiEvent>,
) {
    // The UI may be gone already (it quit); its events then have nowhere to go.
    match request {
        UiRequest::ToggleAttach(probe_id) => {
            let suspended = in_situ.as_ref().is_some_and(|d| d.is_suspended(probe_id));
            let attached = attachment.is_attached(probe_id) || suspended;
            // In an OFF window of --in-situ the change applies to the set that comes back.
            if let Some(now) = in_situ
                .as_mut()
                .and_then(|d| d.redirect(probe_id, !attached))
            {
                let _ = events
                    .send(UiEvent::Attached {
                        probe_id,
                        attached: now,
                    })
                    .await;
                return;
            }
            let event = if attached {
                attachment.detach(probe_id);
                UiEvent::Attached {
                    probe_id,
                    attached: false,
                }
            } else {
                match attachment.reattach(probe_id) {
                    Ok(()) => UiEvent::Attached {
                        probe_id,
                        attached: true,
                    },
                    Err(e) => {
                        UiEvent::Message(format!("cannot attach probe {probe_id} again: {e}"))
                    }
                }
            };
            let _ = events.send(event).await;
        }
        UiRequest::Reset => {
            let reset = CollectorCommand::Reset {
                at_ktime_ns: stream::ktime_now_ns(),
            };
            if source.commands.send(reset).await.is_err() {
                let _ = events
                    .send(UiEvent::Message(
                        "reset failed: the collector has stopped".into(),
                    ))
                    .await;
            }
        }
        UiRequest::Export => {
            // Copying, rendering and writing happen off the UI's and the session's path.
            let source = source.clone();
            let events = events.clone();
            let paths = snapshot_export_paths(exports, source.target.pid, unix_now_ms() / 1000);
            tokio::spawn(async move {
                let message = match source.report(true).await {
                    Some(report) => {
                        tokio::task::spawn_blocking(move || write_exports(&report, &paths, force))
                            .await
                            .unwrap_or_else(|e| format!("export failed: {e}"))
                    }
                    None => "export failed: the collector has stopped".into(),
                };
                let _ = events.send(UiEvent::Message(message)).await;
            });
        }
    }
}

/// Writes `report` to every path; one line saying what was written or what failed.
fn write_exports(report: &Report, paths: &[PathBuf], force: bool) -> String {
    let mut written = Vec::new();
    let mut failed = Vec::new();
    for path in paths {
        match export::write(report, path, force) {
            Ok(files) => written.extend(files.iter().map(|f| f.display().to_string())),
            Err(e) => failed.push(e.to_string()),
        }
    }
    match (written.is_empty(), failed.is_empty()) {
        (_, true) => format!("wrote {}", written.join(", ")),
        (true, false) => format!("export failed: {}", failed.join("; ")),
        (false, false) => format!(
            "wrote {}; failed: {}",
            written.join(", "),
            failed.join("; ")
        ),
    }
}

/// Where `e` writes: beside each `--export` path, with the time in its name
/// (`run.json` -> `run-<unix time>.json`) so the exit's export does not overwrite it;
/// without `--export`, `probetop-<pid>-<unix time>.json` in the working directory.
fn snapshot_export_paths(exports: &[PathBuf], pid: u32, unix_secs: u64) -> Vec<PathBuf> {
    if exports.is_empty() {
        return vec![PathBuf::from(format!("probetop-{pid}-{unix_secs}.json"))];
    }
    exports
        .iter()
        .map(|path| {
            let mut name = path.file_stem().unwrap_or_default().to_os_string();
            name.push(format!("-{unix_secs}"));
            if let Some(ext) = path.extension() {
                name.push(".");
                name.push(ext);
            }
            path.with_file_name(name)
        })
        .collect()
}

fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Fails early, before anything is attached, on an export path probetop cannot write.
fn check_export_format(target: &Target, path: &Path) -> anyhow::Result<()> {
    let empty = Report {
        target: target.clone(),
        started_unix_ms: 0,
        duration_s: 0.0,
        probes: Vec::new(),
        cost: Default::default(),
        execs: Vec::new(),
        attach_path: None,
        skipped: Vec::new(),
        replaced: Vec::new(),
    };
    export::render(&empty, path)
        .map_err(|e| UsageError(format!("--export {}: {e}", path.display())))?;
    Ok(())
}

fn build_report(
    target: &Target,
    rows: &Rows,
    measured: &[ProbeMeasurements],
    intervals: &IntervalLog,
    started_unix_ms: u64,
    duration: Duration,
    several_processes: bool,
) -> Report {
    Report {
        target: target.clone(),
        started_unix_ms,
        duration_s: duration.as_secs_f64(),
        probes: rows
            .probes
            .iter()
            .zip(measured)
            .enumerate()
            .map(|(id, (probe, measured))| ProbeReport {
                id: id as u32,
                spec: probe.spec.clone(),
                kind: probe.point.kind,
                name: probe.point.name.clone(),
                resolved: probe.point.resolved.clone(),
                object: probe.point.object.display().to_string(),
                address: probe.point.address,
                file_offset: probe.point.file_offset,
                generation: probe.generation,
                exe: probe.exe.display().to_string(),
                mode: measured.mode,
                last_args: measured.last_args.map(|a| a.values().collect()),
                threads: measured.threads.clone(),
                processes: if several_processes {
                    measured.processes.clone()
                } else {
                    Vec::new()
                },
                threads_cover: measured.threads_cover,
                threads_dropped: measured.threads_dropped.clone(),
                hits: measured.hits,
                dropped: measured.dropped,
                handler_ns: measured.handler_ns.clone(),
                cost: cost::probe_report(measured, duration),
                intervals: intervals
                    .of_probe(id as u32)
                    .into_iter()
                    .map(|i| Interval {
                        start_s: i.start_s,
                        length_s: i.length_s,
                        handler_ns: i.handler_ns,
                    })
                    .collect(),
            })
            .collect(),
        cost: Default::default(),
        execs: rows.execs.clone(),
        attach_path: None,
        skipped: rows.skipped.clone(),
        replaced: rows.replaced.clone(),
    }
}

/// Go moves goroutine stacks, so the return address a uretprobe plants can be copied
/// to a stack the kernel does not track: the probe misfires or the target crashes.
fn refuse_go_return_probes(probes: &[Probe]) -> anyhow::Result<()> {
    let mut checked = std::collections::HashMap::new();
    for probe in probes
        .iter()
        .filter(|p| p.point.kind == ProbeKind::Uretprobe)
    {
        let is_go = *checked
            .entry(probe.point.attach_path.clone())
            .or_insert_with(|| resolve::elf::is_go_binary(&probe.point.attach_path));
        if is_go {
            bail!(UsageError(format!(
                "{}: {} is a Go program, and uretprobes on Go functions break when Go moves a goroutine's stack (the target can crash); use uprobe instead, or --force to attach anyway",
                probe.spec,
                probe.point.object.display()
            )));
        }
    }
    Ok(())
}

/// Resolves when measuring should stop: after `duration`, on SIGINT, SIGTERM or
/// SIGHUP (a lost terminal), when the target exits, or with `stop_on_exec` when it
/// execs another program.
fn shutdown_signal(
    target: &Target,
    duration: Option<Duration>,
    stop_on_exec: bool,
) -> anyhow::Result<impl Future<Output = StopReason> + use<>> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    // SAFETY: the OwnedFd keeps the pidfd open, unchanged, for as long as the AsyncFd
    // that owns it lives.
    let exited =
        unsafe { AsyncFd::register_with_interest(pidfd_open(target.pid)?, Interest::READABLE) }
            .map_err(io::Error::from)?;
    // The pidfd names whatever process has the pid now; make sure that is still ours.
    // An exec keeps the pid, the start time and the pidfd: only an exit ends it.
    if !target.is_alive() {
        bail!("pid {} exited before probes were attached", target.pid);
    }
    let watched = target.clone();
    Ok(async move {
        // exec raises no event on a pidfd, so look every quarter second.
        let execed = async {
            if !stop_on_exec {
                // Followed instead (see follow::next_event).
                return std::future::pending().await;
            }
            let mut every = tokio::time::interval(follow::EXEC_POLL);
            loop {
                every.tick().await;
                if watched.exec_changed().is_some() {
                    break;
                }
            }
        };
        let deadline = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = deadline => StopReason::Duration,
            _ = interrupt.recv() => StopReason::Signal("SIGINT"),
            _ = terminate.recv() => StopReason::Signal("SIGTERM"),
            _ = hangup.recv() => StopReason::Signal("SIGHUP"),
            _ = exited.readable() => StopReason::TargetExited,
            _ = execed => StopReason::TargetExeced,
        }
    })
}

/// A file descriptor that becomes readable when process `pid` exits.
fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `probetop calibrate`: measures what a hit costs here, prints it, caches it.
pub fn calibrate(args: crate::cli::CalibrateArgs) -> anyhow::Result<()> {
    use cost::calibrate::{self, CalibrateOptions};
    privileges::check()?;
    let mut options = if args.quick {
        CalibrateOptions::quick()
    } else {
        CalibrateOptions::full()
    };
    if let Some(reps) = args.reps {
        if reps < 3 {
            bail!(UsageError(format!(
                "--reps {reps}: give at least 3 (a median and quartiles need them)"
            )));
        }
        options.reps = reps;
    }
    options.dispatch = !args.no_dispatch;
    if args.no_gap || args.cold_only {
        options.gap_reps = 0;
    }
    if args.no_cold {
        options.cold = None;
    }
    if let Some(cold) = options.cold.as_mut() {
        for (mib, bytes, flag) in [
            (args.cold_data_mib, &mut cold.data_bytes, "--cold-data-mib"),
            (args.cold_code_mib, &mut cold.code_bytes, "--cold-code-mib"),
        ] {
            if let Some(mib) = mib {
                if !(0.0..=4096.0).contains(&mib) {
                    bail!(UsageError(format!("{flag} {mib}: give 0 to 4096")));
                }
                *bytes = (mib * f64::from(1 << 20)) as u64;
            }
        }
        if let Some(iters) = args.cold_iters {
            cold.iters = iters.max(1);
        }
    }
    if args.cold_only {
        if options.cold.is_none() {
            bail!(UsageError(
                "--cold-only and --no-cold: nothing to measure".into()
            ));
        }
        options.hot = false;
    }
    let save = !args.no_save && !args.cold_only;
    let calibration = calibrate::run(options, |phase| say!("probetop calibrate: {phase}"))?;
    if args.json {
        crate::error_line::write_stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&calibration)?
        ))?;
    } else {
        crate::error_line::write_stdout(&calibration.render_text())?;
    }
    if save {
        let path = calibrate::save(&calibration)?;
        say!("probetop calibrate: saved {}", path.display());
    }
    Ok(())
}

/// `probetop list`: every probe point of a process or file that matches a pattern.
pub fn list(args: crate::cli::ListArgs) -> anyhow::Result<()> {
    use crate::resolve::list::{ListSource, list};
    let mut operands = args.operands.into_iter();
    let source = match args.pid {
        Some(pid) => {
            // The same checks as a probing run, so a bad pid gets the same message.
            Target::open(pid)?;
            ListSource::Pid(pid)
        }
        None => ListSource::Path(operands.next().map(Into::into).ok_or_else(|| {
            UsageError("list what? give --pid PID or the path of an ELF file".into())
        })?),
    };
    let pattern = operands.next();
    if let Some(extra) = operands.next() {
        bail!(UsageError(format!(
            "unexpected {extra:?}: list takes [--pid PID | PATH] [PATTERN]"
        )));
    }
    let listing = list(&source, pattern.as_deref())?;
    if args.json {
        crate::error_line::write_stdout(&format!("{}\n", present::list::render_json(&listing)?))?;
    } else {
        crate::error_line::write_stdout(&present::list::render_text(&listing))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_exports_are_named_by_time() {
        assert_eq!(
            snapshot_export_paths(&[], 42, 1_700_000_000),
            [PathBuf::from("probetop-42-1700000000.json")]
        );
        assert_eq!(
            snapshot_export_paths(
                &[PathBuf::from("/tmp/out/run.json"), PathBuf::from("r.hgrm")],
                42,
                7
            ),
            [
                PathBuf::from("/tmp/out/run-7.json"),
                PathBuf::from("r-7.hgrm")
            ]
        );
    }
}
