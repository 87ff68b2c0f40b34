//! `probetop --all`: every process of the host whose mapped objects carry user-space
//! probes armed now, whoever put them there (BPF on perf events, uprobe_multi links,
//! tracefs `uprobe_events`, other probetops), one row per process.
//!
//! Each armed site gets one counting probe of probetop's own per process, on the same
//! file, offset, kind and semaphore, filtered by the kernel to that process (as
//! `probetop --pid` counts another tool's probe, `super::others`): the trap is already
//! taken there, so only probetop's counting program adds to a hit, and the counts are
//! exact and per process. One counter per site, however many tools probe it: the
//! kernel traps once per hit, and the site's price is that trap plus every owner's
//! program. A site is counted only where it is armed in the process (its byte there
//! differs from the file's), so no counter ever adds a trap (where the owner holds the
//! site with a stray semaphore offset, BCC 0.26's, the counter joins it as `--pid`'s
//! does: `super::others::held_semaphore_to_join`); sites and processes are
//! looked for again every second, and a counter whose owner's probe (or process) went
//! is detached at that look.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{oneshot, watch};

use super::Assumption;
use super::probe::{Probe, counting_config};
use super::{OtherPrice, ProgramMethod};
use crate::attach::others::{self, OtherSite, Owner, ReportedShape};
use crate::attach::{self, Attachment, KernelCounters, LoadOptions};
use crate::cli::RunArgs;
use crate::delivery::DeliveryMode;
use crate::present::export;
use crate::present::processes::{self, HostReport, ProcessRow, SiteOwner, SiteRow};
use crate::resolve::{ResolveOptions, Resolver};
use crate::sys::maps::{FileId, read_maps};
use crate::sys::procfs::{self, Stat};
use crate::target::Target;
use crate::{UsageError, privileges};
use probe_common::ProbeConfig;

/// How often processes and their probes are looked for.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Counters probetop makes room for: sites x processes.
const CAPACITY: u32 = 4096;

/// `probetop --all`.
pub(super) async fn run(args: RunArgs) -> anyhow::Result<()> {
    check_args(&args)?;
    privileges::check()?;
    for path in &args.exports {
        export::check(path, args.force)
            .map_err(|e| UsageError(format!("--export {}: {e}", path.display())))?;
    }
    if let Err(e) = attach::fds::raise_limit() {
        say!("probetop: cannot raise the open-file limit ({e}); `ulimit -n` shows it");
    }
    let stop = shutdown(args.duration.map(Duration::from_secs_f64))?;
    let started = Instant::now();
    let started_ms = unix_now_ms();
    // Names of stripped objects' sites through debuginfod too, unless --offline; the
    // servers are asked once per build id a run.
    let options = ResolveOptions {
        debuginfod: crate::resolve::debuginfod::Debuginfod::from_env(args.offline),
        ..Default::default()
    };
    let first = tokio::task::spawn_blocking({
        let options = options.clone();
        move || look_and_name(&HashSet::new(), &options)
    })
    .await
    .context("looking for probes")?;
    if first.seen.is_empty() {
        say!(
            "probetop: no process has a uprobe, uretprobe or USDT probe armed in it from any tool (BPF, uprobe_multi, tracefs){}",
            if args.no_tui {
                ""
            } else {
                "; watching for one"
            }
        );
        if args.no_tui {
            return finish(&args, &[], started, started_ms);
        }
    }
    let mut engine = Engine::load(options)?;
    engine.on_look(first);
    let (rows_tx, rows) = watch::channel(engine.rows(false));
    let (stop_tx, stop_rx) = oneshot::channel();
    let interval = Duration::from_secs_f64(args.interval);
    let task = tokio::spawn(engine.drive(interval, rows_tx, stop_rx));
    if args.no_tui {
        let reason = stop.await;
        say_stop(reason);
    } else {
        let ui = crate::present::tui::processes::run(rows, stop, open_process).await;
        match ui {
            Ok(crate::present::tui::UiExit::Shutdown(reason)) => say_stop(reason),
            Ok(crate::present::tui::UiExit::TerminalLost(e)) => {
                say!("probetop: the terminal went away ({e}): stopping");
            }
            Ok(crate::present::tui::UiExit::Quit) => {}
            Err(e) => say!("probetop: the terminal UI failed: {e}"),
        }
    }
    let _ = stop_tx.send(());
    let rows = task.await.context("the host-wide counter task")?;
    finish(&args, &rows, started, started_ms)
}

/// Why the run stopped: the duration or a signal's name.
type Stop = Option<&'static str>;

fn say_stop(reason: Stop) {
    if let Some(name) = reason {
        say!("probetop: {name}");
    }
}

/// `probetop --pid PID` in the terminal, as a child: the process's own view, every
/// probe on it a row; Esc or q there comes back to the list.
fn open_process(pid: u32) -> std::io::Result<std::process::Child> {
    let exe = std::env::current_exe()?;
    std::process::Command::new(exe)
        .args(["--pid", &pid.to_string()])
        .spawn()
}

/// The table on stdout and the exports.
fn finish(
    args: &RunArgs,
    rows: &[ProcessRow],
    started: Instant,
    started_ms: u64,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(processes::table(rows).as_bytes())
        .and_then(|()| out.flush());
    let report = HostReport {
        started_unix_ms: started_ms,
        seconds: started.elapsed().as_secs_f64(),
        hits_method: "counting-probe-per-process",
        processes: rows,
    };
    let bytes = processes::json(&report).context("rendering the JSON export")?;
    for path in &args.exports {
        export::write_file(path, &bytes, args.force)?;
        say!("probetop: wrote {}", path.display());
    }
    Ok(())
}

fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What `--all` cannot be given with, as one line.
fn check_args(args: &RunArgs) -> Result<(), UsageError> {
    let refused = |what: &str, why: &str| Err(UsageError(format!("--all with {what}: {why}")));
    if !args.pids.is_empty() {
        return refused(
            "--pid",
            "--all watches every process; give --pid alone to watch one",
        );
    }
    if !args.probes.is_empty() || args.spec_file.is_some() || !args.presets.is_empty() {
        return refused(
            "-e/-f/--preset",
            "--all counts the probes already on processes and attaches none of its own; give the specs with --pid",
        );
    }
    let alone = [
        (args.follow_forks, "--follow-forks"),
        (args.cgroup.is_some(), "--cgroup"),
        (args.follow_exec, "--follow-exec"),
        (args.in_situ, "--in-situ"),
        (args.listen.is_some(), "--listen"),
        (args.otlp.is_some(), "--otlp"),
        (args.bpf_stats, "--bpf-stats"),
        (args.args > 0, "--args"),
    ];
    if let Some((_, flag)) = alone.iter().find(|(given, _)| *given) {
        return refused(
            flag,
            "not supported host-wide; open one process with --pid for it",
        );
    }
    if let Some(path) = args.exports.iter().find(|p| {
        !p.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    }) {
        return refused(
            &format!("--export {}", path.display()),
            "the host-wide table is exported as .json only",
        );
    }
    Ok(())
}

/// Resolves on `duration` (`None`) or SIGINT, SIGTERM, SIGHUP (the signal's name).
fn shutdown(duration: Option<Duration>) -> anyhow::Result<impl Future<Output = Stop> + use<>> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    Ok(async move {
        let deadline = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = deadline => None,
            _ = interrupt.recv() => Some("SIGINT"),
            _ = terminate.recv() => Some("SIGTERM"),
            _ = hangup.recv() => Some("SIGHUP"),
        }
    })
}

/// A probed site: which file, where, entry or return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SiteKey {
    file: FileId,
    offset: u64,
    returns: bool,
}

/// One site armed in one process, with every tool's probe there.
#[derive(Debug, Clone)]
struct ArmedSite {
    key: SiteKey,
    owners: Vec<OtherSite>,
}

/// One process with sites armed in it, as one look found it.
#[derive(Debug, Clone)]
struct Seen {
    pid: u32,
    start_ticks: u64,
    comm: String,
    sites: Vec<ArmedSite>,
}

/// Another tool's probe, with the one process a uprobe_multi link is limited to.
type LimitedSite = (OtherSite, Option<u32>);

/// Every process with another tool's probe armed in it now. Blocking: walks every
/// process's descriptors (the BPF programs' holders) and maps.
fn look() -> Vec<Seen> {
    let found = others::discover_host();
    if found.is_empty() {
        return Vec::new();
    }
    // Grouped by site: several tools may probe one.
    let mut sites: Vec<(SiteKey, Vec<LimitedSite>)> = Vec::new();
    for (site, only) in found {
        let Ok(file) = FileId::of(&site.file) else {
            continue;
        };
        let key = SiteKey {
            file,
            offset: site.offset,
            returns: site.returns,
        };
        match sites.iter_mut().find(|(k, _)| *k == key) {
            Some((_, owners)) => owners.push((site, only)),
            None => sites.push((key, vec![(site, only)])),
        }
    }
    let me = std::process::id();
    let mut seen = Vec::new();
    for pid in procfs::all_pids() {
        if pid == me {
            continue;
        }
        let Ok(maps) = read_maps(pid) else {
            continue;
        };
        let mut armed = Vec::new();
        for (key, owners) in &sites {
            let here: Vec<OtherSite> = owners
                .iter()
                .filter(|(_, only)| only.is_none_or(|p| p == pid))
                // A probetop's probe in its own process is its machinery (the uprobe
                // that flushes each CPU's staged records), not a probe on a workload.
                .filter(|(site, _)| !(site.owner.tool == "probetop" && site.owner.pid == Some(pid)))
                .map(|(site, _)| site.clone())
                .collect();
            let Some(first) = here.first() else {
                continue;
            };
            // Only where the process takes the trap already: a counter adds none.
            if others::armed_in_maps(pid, &maps, &first.file, key.offset) == Some(true) {
                armed.push(ArmedSite {
                    key: *key,
                    owners: here,
                });
            }
        }
        if armed.is_empty() {
            continue;
        }
        let Some(stat) = Stat::of(pid) else {
            continue;
        };
        seen.push(Seen {
            pid,
            start_ticks: stat.start_ticks,
            comm: procfs::comm(pid)
                .map(|c| c.trim().to_string())
                .unwrap_or_default(),
            sites: armed,
        });
    }
    seen
}

/// A look, with the points of the sites it found that no look before had named.
struct Looked {
    seen: Vec<Seen>,
    /// Each new site's point; `None`: it could not be named (no process maps its file
    /// any more), and is not counted.
    points: Vec<(SiteKey, Option<crate::resolve::ProbePoint>)>,
}

/// [`look`], then the sites not in `known` named (one resolve per site, in the first
/// process found mapping it). Blocking, off the session's loop: it reads objects, and may
/// ask debuginfod servers for a stripped one's debug file.
fn look_and_name(known: &HashSet<SiteKey>, options: &ResolveOptions) -> Looked {
    let seen = look();
    let mut by_pid: Vec<(u32, Vec<&ArmedSite>)> = Vec::new();
    let mut taken: HashSet<SiteKey> = HashSet::new();
    for one in &seen {
        let new: Vec<&ArmedSite> = one
            .sites
            .iter()
            .filter(|armed| !known.contains(&armed.key) && taken.insert(armed.key))
            .collect();
        if !new.is_empty() {
            by_pid.push((one.pid, new));
        }
    }
    let mut points = Vec::new();
    for (pid, sites) in by_pid {
        let target = Target::open(pid).ok();
        let resolver = target.as_ref().map(|t| Resolver::new(t, options.clone()));
        for armed in sites {
            let Some(site) = armed.owners.first() else {
                continue;
            };
            let point = resolver
                .as_ref()
                .and_then(|r| r.point_at(&site.file, site.offset, site.returns))
                .map(|mut point| {
                    // Attached by the file, with each process's filter.
                    point.attach_path = site.file.clone();
                    point
                });
            points.push((armed.key, point));
        }
    }
    Looked { seen, points }
}

/// A site as named and priced once, for every process that maps its file.
#[derive(Debug, Clone)]
struct Named {
    kind: crate::spec::ProbeKind,
    name: String,
    object: String,
    point: crate::resolve::ProbePoint,
    cost: super::ProbeCost,
}

/// One counted site in one process.
#[derive(Debug)]
struct Counted {
    key: SiteKey,
    /// Its counter's probe id while attached.
    id: Option<u32>,
    named: Named,
    owners: Vec<OtherSite>,
    price_ns: Option<f64>,
    /// The counter's value when it was attached (ids are reused).
    base: u64,
    hits: u64,
    /// `hits` at the last interval's end.
    before: u64,
}

/// One process counted.
#[derive(Debug)]
struct Process {
    pid: u32,
    start_ticks: u64,
    comm: String,
    sites: Vec<Counted>,
    /// Sites the kernel refused a counter on: not tried again.
    refused: Vec<SiteKey>,
    first: Instant,
    last: Instant,
    cpu_first: Option<u64>,
    cpu_before: Option<u64>,
    cpu_last: Option<u64>,
    exited: bool,
}

/// The counters and what they counted.
struct Engine {
    attachment: Attachment,
    counters: KernelCounters,
    processes: Vec<Process>,
    /// Names and prices by site, shared by the processes mapping it.
    named: HashMap<SiteKey, Option<Named>>,
    next_id: u32,
    free: Vec<u32>,
    /// Ids retired at the last look: free from the next (a hit may still land on
    /// one until the kernel's grace period ends).
    cooling: Vec<u32>,
    ticks_per_s: f64,
    last_tick: Instant,
    /// How sites are named: the run's debuginfod servers, and what they were asked.
    options: ResolveOptions,
}

impl Engine {
    fn load(options: ResolveOptions) -> anyhow::Result<Self> {
        let mut attachment = Attachment::load(LoadOptions {
            // Counters never stream a record: the smallest ring.
            ring_bytes: 1 << 16,
            probe_count: CAPACITY,
            kernel_histograms: false,
            ..Default::default()
        })
        .context("loading probetop's counting program")?;
        let counters = attachment.take_counters()?;
        Ok(Self {
            attachment,
            counters,
            processes: Vec::new(),
            named: HashMap::new(),
            next_id: 0,
            free: Vec::new(),
            cooling: Vec::new(),
            ticks_per_s: crate::sys::clock::clock_ticks_per_second().unwrap_or(100) as f64,
            last_tick: Instant::now(),
            options,
        })
    }

    /// Runs until `stop`: a look every second, the rows every `interval`; returns the
    /// final rows once every counter is detached.
    async fn drive(
        mut self,
        interval: Duration,
        rows: watch::Sender<Vec<ProcessRow>>,
        mut stop: oneshot::Receiver<()>,
    ) -> Vec<ProcessRow> {
        let mut looks = tokio::time::interval(LOOK_EVERY);
        looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        looks.tick().await;
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        let mut pending: Option<tokio::task::JoinHandle<Looked>> = None;
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = looks.tick(), if pending.is_none() => {
                    let known: HashSet<SiteKey> = self.named.keys().copied().collect();
                    let options = self.options.clone();
                    pending = Some(tokio::task::spawn_blocking(move || {
                        look_and_name(&known, &options)
                    }));
                }
                found = async {
                    match pending.as_mut() {
                        Some(look) => look.await,
                        None => std::future::pending().await,
                    }
                }, if pending.is_some() => {
                    pending = None;
                    if let Ok(found) = found {
                        self.on_look(found);
                    }
                }
                _ = ticks.tick() => {
                    self.read();
                    rows.send_replace(self.rows(false));
                }
            }
        }
        self.read();
        for process in &mut self.processes {
            process.exited |= !alive(process.pid, process.start_ticks);
        }
        let last = self.rows(true);
        let attachment = self.attachment;
        // Each close waits for the kernel's grace period: off the loop.
        let _ = tokio::task::spawn_blocking(move || drop(attachment)).await;
        last
    }

    fn say(&self, line: String) {
        say!("probetop: {line}");
    }

    /// Counters for the sites and processes that appeared, detached for those gone.
    fn on_look(&mut self, looked: Looked) {
        let Looked {
            seen: found,
            points,
        } = looked;
        self.free.append(&mut self.cooling);
        self.read();
        let now = Instant::now();
        // Gone: the process, or a site's every probe in it.
        let mut retire = Vec::new();
        for process in &mut self.processes {
            let seen = found
                .iter()
                .find(|s| s.pid == process.pid && s.start_ticks == process.start_ticks);
            if seen.is_none() {
                process.exited |= !alive(process.pid, process.start_ticks);
            }
            for site in &mut process.sites {
                let still = seen.is_some_and(|s| s.sites.iter().any(|a| a.key == site.key));
                if !still && let Some(id) = site.id.take() {
                    retire.push(id);
                }
            }
        }
        if !retire.is_empty() {
            let links = self.attachment.retire_set(&retire);
            std::thread::spawn(move || drop(links));
            self.cooling.extend(retire);
        }
        self.price_new_sites(points);
        let mut lines = Vec::new();
        for seen in found {
            let index = match self
                .processes
                .iter()
                .position(|p| p.pid == seen.pid && p.start_ticks == seen.start_ticks)
            {
                Some(index) => index,
                None => {
                    let cpu = Stat::of(seen.pid).map(|s| s.cpu_ticks());
                    self.processes.push(Process {
                        pid: seen.pid,
                        start_ticks: seen.start_ticks,
                        comm: seen.comm.clone(),
                        sites: Vec::new(),
                        refused: Vec::new(),
                        first: now,
                        last: now,
                        cpu_first: cpu,
                        cpu_before: cpu,
                        cpu_last: cpu,
                        exited: false,
                    });
                    self.processes.len() - 1
                }
            };
            for armed in seen.sites {
                let process = &self.processes[index];
                let live = process
                    .sites
                    .iter()
                    .any(|s| s.key == armed.key && s.id.is_some());
                if live || process.refused.contains(&armed.key) {
                    continue;
                }
                let Some(Some(named)) = self.named.get(&armed.key).cloned() else {
                    continue;
                };
                if let Some(line) = self.count(index, armed, named) {
                    lines.push(line);
                }
            }
        }
        for line in lines {
            self.say(line);
        }
    }

    /// Prices the sites no look named before (one calibration read per look); those
    /// not named are kept as such, not tried again.
    fn price_new_sites(&mut self, points: Vec<(SiteKey, Option<crate::resolve::ProbePoint>)>) {
        let mut new: Vec<(SiteKey, crate::resolve::ProbePoint)> = Vec::new();
        for (key, point) in points {
            match point {
                Some(point) => new.push((key, point)),
                None => {
                    self.named.insert(key, None);
                }
            }
        }
        if new.is_empty() {
            return;
        }
        let points: Vec<&crate::resolve::ProbePoint> = new.iter().map(|(_, p)| p).collect();
        let costs = super::prepare_costs(&points).costs;
        for ((key, point), cost) in new.into_iter().zip(costs) {
            self.named.insert(
                key,
                Some(Named {
                    kind: point.kind,
                    name: point.name.clone(),
                    object: point.object.display().to_string(),
                    point,
                    cost,
                }),
            );
        }
    }

    /// Attaches the counter of `armed` in process `index`; the line to say.
    fn count(&mut self, index: usize, mut armed: ArmedSite, named: Named) -> Option<String> {
        let process = &self.processes[index];
        let pid = process.pid;
        let id = match self.free.pop() {
            Some(id) => id,
            None if self.next_id < self.attachment.capacity() => {
                self.next_id += 1;
                self.next_id - 1
            }
            None => {
                return Some(format!(
                    "pid {pid}: {}:{} not counted: the {} counters probetop made room for are taken",
                    named.kind,
                    named.name,
                    self.attachment.capacity()
                ));
            }
        };
        let site = armed.owners.first()?.clone();
        let mut probe = Probe {
            spec: format!("{}:{}", named.kind, named.name),
            point: named.point.clone(),
            generation: 0,
            exe: PathBuf::new(),
            shared_semaphore: None,
            other: Some(site),
            shared_with: None,
            shared_sites: Vec::new(),
            pair: None,
            key: None,
            pair_slot: None,
            pair_in_kernel: false,
        };
        let config = counting_config(ProbeConfig {
            mode: DeliveryMode::Sample.raw(),
            ..Default::default()
        });
        let base = self.counters.hits(id).unwrap_or(0);
        let mut joined = None;
        let outcome = match self.counters.set_config(id, config) {
            Err(e) => Err(e.to_string()),
            Ok(()) => {
                let first = self
                    .attachment
                    .attach_configured(&probe.request(id, config, pid));
                match first {
                    Ok(()) => Ok(()),
                    // The owner holds the site with a stray semaphore offset (BCC 0.26):
                    // joined with it where that writes nothing into this process, as
                    // `--pid` does.
                    Err(e) => match super::others::held_semaphore_to_join(&mut probe, &e, pid) {
                        Some(held) => {
                            let again = self
                                .attachment
                                .attach_configured(&probe.request(id, config, pid));
                            joined = again.is_ok().then_some(held);
                            again.map_err(|e| e.to_string())
                        }
                        None => Err(e.to_string()),
                    },
                }
            }
        };
        if let (Some(first), Some(site)) = (armed.owners.first_mut(), &probe.other)
            && joined.is_some()
        {
            first.ref_ctr_offset = site.ref_ctr_offset;
        }
        let owners_text = processes::owners_text(&owners_of(&armed.owners));
        let process = &mut self.processes[index];
        if let Err(e) = outcome {
            self.free.push(id);
            process.refused.push(armed.key);
            return Some(format!(
                "pid {pid} ({}): cannot count {owners_text}'s {}:{}: {e}",
                process.comm, named.kind, named.name
            ));
        }
        let price_ns = price(&named.cost, &armed.owners);
        let joined = joined.map_or(String::new(), |held| {
            format!(
                " with the semaphore offset {held:#x} it registered (the kernel keeps one per site; nothing is written into the process there)"
            )
        });
        let line = format!(
            "counting pid {pid} ({}): {owners_text}'s {}:{} ({}+{:#x}){joined}",
            process.comm, named.kind, named.name, named.object, armed.key.offset
        );
        // A site that came back keeps its row and its hits.
        match process.sites.iter_mut().find(|s| s.key == armed.key) {
            Some(counted) => {
                counted.id = Some(id);
                counted.base = base.wrapping_sub(counted.hits);
                counted.owners = armed.owners;
                counted.price_ns = price_ns;
            }
            None => process.sites.push(Counted {
                key: armed.key,
                id: Some(id),
                named,
                owners: armed.owners,
                price_ns,
                base,
                hits: 0,
                before: 0,
            }),
        }
        Some(line)
    }

    /// Reads every live counter, and each live process's CPU time.
    fn read(&mut self) {
        let now = Instant::now();
        for process in &mut self.processes {
            for site in &mut process.sites {
                if let Some(id) = site.id
                    && let Ok(total) = self.counters.hits(id)
                {
                    site.hits = total.wrapping_sub(site.base);
                }
            }
            if !process.exited {
                process.last = now;
                if let Some(stat) =
                    Stat::of(process.pid).filter(|s| s.start_ticks == process.start_ticks)
                {
                    process.cpu_last = Some(stat.cpu_ticks());
                }
            }
        }
    }

    /// The rows: over the last interval, or with `whole_run` over all the time each
    /// process was counted (every process ever counted).
    fn rows(&mut self, whole_run: bool) -> Vec<ProcessRow> {
        let now = Instant::now();
        let interval = now.duration_since(self.last_tick).as_secs_f64();
        self.last_tick = now;
        let mut rows = Vec::new();
        for process in &mut self.processes {
            let seconds = if whole_run {
                process.last.duration_since(process.first).as_secs_f64()
            } else {
                interval
            };
            let (cpu_from, hits_of): (Option<u64>, fn(&Counted) -> u64) = if whole_run {
                (process.cpu_first, |s| s.hits)
            } else {
                (process.cpu_before, |s| s.hits - s.before.min(s.hits))
            };
            let hits: u64 = process.sites.iter().map(hits_of).sum();
            let cost_ns: f64 = process
                .sites
                .iter()
                .filter_map(|s| s.price_ns.map(|p| p * hits_of(s) as f64))
                .sum();
            let priced = process.sites.iter().any(|s| s.price_ns.is_some());
            let live = process.sites.iter().filter(|s| s.id.is_some()).count();
            let whole_cost_ns = if !priced {
                None
            } else if hits > 0 {
                Some(cost_ns / hits as f64)
            } else {
                let prices: Vec<f64> = process.sites.iter().filter_map(|s| s.price_ns).collect();
                Some(prices.iter().sum::<f64>() / prices.len() as f64)
            };
            let per_s = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
            let cpu_share = priced.then(|| per_s(cost_ns) / 1e9);
            let process_cpu = match (cpu_from, process.cpu_last) {
                (Some(from), Some(to)) if seconds > 0.0 => {
                    Some(per_s(to.saturating_sub(from) as f64 / self.ticks_per_s))
                }
                _ => None,
            };
            let share_of_process = match (cpu_share, process_cpu) {
                (Some(share), Some(cpu)) if cpu > 0.0 => Some((share / cpu).min(1.0)),
                _ => None,
            };
            let mut owners: Vec<Owner> = Vec::new();
            for site in &process.sites {
                for owner in owners_of(&site.owners) {
                    if !owners.contains(&owner) {
                        owners.push(owner);
                    }
                }
            }
            let row = ProcessRow {
                pid: process.pid,
                comm: process.comm.clone(),
                // Live: armed now; over the run: every site counted in it.
                probes: if whole_run { process.sites.len() } else { live },
                hits,
                hits_per_s: per_s(hits as f64),
                whole_cost_ns,
                cpu_share,
                process_cpu,
                share_of_process,
                owners,
                exited: process.exited,
                seconds,
                sites: process
                    .sites
                    .iter()
                    .map(|s| SiteRow {
                        kind: s.named.kind.to_string(),
                        name: s.named.name.clone(),
                        object: s.named.object.clone(),
                        hits: s.hits,
                        whole_cost_ns: s.price_ns,
                        whole_cost_method: if s.price_ns.is_some() {
                            "calibrated-trap-and-owner-program"
                        } else {
                            "not-priced"
                        },
                        owners: distinct(s.owners.iter().map(|site| SiteOwner {
                            owner: site.owner.clone(),
                            shape: site.shape.map(ReportedShape::from),
                        })),
                        gone: s.id.is_none(),
                    })
                    .collect(),
            };
            if !whole_run {
                for site in &mut process.sites {
                    site.before = site.hits;
                }
                process.cpu_before = process.cpu_last;
            }
            // Live: processes with probes armed now or hit in the interval.
            if whole_run || live > 0 || row.hits > 0 {
                rows.push(row);
            }
        }
        processes::sort(&mut rows);
        rows
    }
}

/// Whether the process `pid` started at `start_ticks` still runs (a zombie does not).
fn alive(pid: u32, start_ticks: u64) -> bool {
    Stat::of(pid).is_some_and(|s| s.start_ticks == start_ticks && s.state != 'Z')
}

/// The owners of a site's probes, each once.
fn owners_of(sites: &[OtherSite]) -> Vec<Owner> {
    distinct(sites.iter().map(|site| site.owner.clone()))
}

/// `items` each once, in their first order.
fn distinct<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut kept: Vec<T> = Vec::new();
    for item in items {
        if !kept.contains(&item) {
            kept.push(item);
        }
    }
    kept
}

/// A hit's whole cost at a site, ns: the trap of its class once, plus every owner's
/// program (assumed as dear as probetop's counting one; a tracefs event's record as the
/// calibration's own event's, or not priced without that row). `None` without a calibration.
fn price(cost: &super::ProbeCost, owners: &[OtherSite]) -> Option<f64> {
    let prices: Vec<OtherPrice> = owners
        .iter()
        .map(|site| super::others::assumed_price(cost, site))
        .collect();
    let program_ns: f64 = prices.iter().filter_map(|p| p.program_ns).sum();
    let has = |method| prices.iter().any(|p| p.program_method == method);
    let program_method = if has(ProgramMethod::AssumedCounting) {
        ProgramMethod::AssumedCounting
    } else if has(ProgramMethod::CalibratedTracefs) {
        ProgramMethod::CalibratedTracefs
    } else {
        ProgramMethod::NotPriced
    };
    let mut cost = cost.clone();
    cost.other = Some(OtherPrice {
        program_ns: Some(program_ns),
        program_method,
    });
    cost.estimate_unmeasured(DeliveryMode::Sample, None, 1.0, Assumption::Hot)
        .map(|e| e.whole_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> RunArgs {
        use clap::Parser as _;
        crate::cli::Cli::try_parse_from([&["probetop", "--all"], args].concat())
            .expect("parses")
            .run
    }

    #[test]
    fn all_refuses_what_it_cannot_do_in_one_line() {
        let line = |args: &[&str]| check_args(&parse(args)).expect_err("refused").0;
        assert!(line(&["--pid", "1"]).starts_with("--all with --pid:"));
        assert!(line(&["-e", "uprobe:f"]).starts_with("--all with -e/-f/--preset:"));
        assert!(line(&["--in-situ"]).starts_with("--all with --in-situ:"));
        assert!(line(&["--export", "x.csv"]).contains(".json only"));
        assert!(check_args(&parse(&["--no-tui", "--export", "x.json", "-d", "2"])).is_ok());
    }
}
