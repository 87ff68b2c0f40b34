//! `--follow-exec`: when the target execs another program, its probes are detached
//! (they can no longer fire), the same specs are resolved in the new program and
//! attached there, and measuring goes on.
//!
//! Rows are only ever appended: the probes of the old program keep their ids and their
//! measurements, marked with the exec that replaced them ([`ProbeLabel::before_exec`],
//! `generation` in exports), and the new program's probes get the next ids. So the
//! aggregator, the kernel's per-probe maps (sized with room to spare, see
//! [`spare_probes`]) and every export keep one row per probe for the whole run.
//!
//! The process is the same across an exec (pid, start time, pidfd), so its exit still
//! ends the run as before; only the program changes.

use std::{
    collections::BTreeSet,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::{mpsc, oneshot};

use super::ProbeCost;
use super::StopReason;
use super::probe::{Probe, refuse_unsafe_return_probes};
use super::report::{ReportSource, unix_now_ms};
use crate::aggregate::ProbeAggregate;
use crate::attach::{Attachment, ProbeLink};
use crate::present::{
    ProbeLabel,
    export::ExecReport,
    tui::{TargetLine, UiEvent},
};
use crate::resolve::{self, ProbePoint, ResolveOptions};
use crate::spec::ProbeSpec;
use crate::stream::CollectorCommand;
use crate::sys::maps;
use crate::sys::say;
use crate::target::{PinnedExe, Target};
use probe_common::ProbeConfig;

/// How often the target's executable is looked at: exec raises no event on a pidfd.
pub(super) const EXEC_POLL: Duration = Duration::from_millis(250);
/// After an exec, the dynamic loader maps the program's libraries; probetop resolves
/// once the target's mapped files have not changed for this long ...
const LOADER_SETTLED: Duration = Duration::from_millis(60);
/// ... or after this long in any case.
const LOADER_WAIT: Duration = Duration::from_secs(1);
/// The per-probe maps get room for this many times the first program's probes more ...
const SPARE_FACTOR: u32 = 3;
/// ... at least this many ...
const SPARE_MIN: u32 = 16;
/// ... and at most this many, or one program's worth if that is more: the in-kernel
/// histograms take 4.7 KiB per probe per CPU.
const SPARE_MAX: u32 = 1024;

/// Room to reserve in the per-probe maps for the probes of later programs, when the
/// first one has `first` probes.
pub(super) fn spare_probes(first: u32) -> u32 {
    let spare = first
        .saturating_mul(SPARE_FACTOR)
        .clamp(SPARE_MIN, SPARE_MAX.max(first));
    spare.min(probe_common::MAX_PROBES.saturating_sub(first))
}

/// What following needs from the start of the run.
pub(super) struct Setup {
    pub specs: Vec<ProbeSpec>,
    pub resolve_options: ResolveOptions,
    pub force: bool,
    /// `--args`.
    pub args: usize,
    /// `--max-keys`.
    pub max_keys: usize,
    pub base_config: ProbeConfig,
    pub target: Target,
    /// Ids of the probes attached to the first program (the session holds its
    /// executable open for them).
    pub live: Vec<u32>,
    /// Whether kernel dispatch time is measured.
    pub dispatch_running: bool,
    /// The kernel's pair slots: the first free one, how many there are, and whether
    /// pairs are paired in the kernel from the start (`--mode kernel`).
    pub pair_slots: PairSlots,
}

/// Slots in the kernel's pair maps for the pairs of later programs.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PairSlots {
    pub next: u32,
    pub capacity: u32,
    pub in_kernel: bool,
}

/// The state of following the target across execs.
pub(super) struct Follow {
    specs: Vec<ProbeSpec>,
    resolve_options: ResolveOptions,
    force: bool,
    args: usize,
    max_keys: usize,
    base_config: ProbeConfig,
    /// The target as last resolved: its executable is the program probed now.
    current: Target,
    /// Execs seen so far.
    generation: u32,
    /// Ids of the probes of the program probed now (attached or not).
    live: Vec<u32>,
    /// The executable of the program probed now, held open while its probes may be
    /// attached again through it (`space`); those of older programs are retired.
    pin: Option<PinnedExe>,
    dispatch_running: bool,
    pair_slots: PairSlots,
    /// Resolving the specs in a new program, off the session's loop.
    pending: Option<tokio::task::JoinHandle<Outcome>>,
    poll: tokio::time::Interval,
}

impl Follow {
    pub(super) fn new(setup: Setup) -> Self {
        let mut poll = tokio::time::interval(EXEC_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            specs: setup.specs,
            resolve_options: setup.resolve_options,
            force: setup.force,
            args: setup.args,
            max_keys: setup.max_keys,
            base_config: setup.base_config,
            current: setup.target,
            generation: 0,
            live: setup.live,
            pin: None,
            dispatch_running: setup.dispatch_running,
            pair_slots: setup.pair_slots,
            pending: None,
            poll,
        }
    }

    /// The target as last resolved.
    pub(super) fn current(&self) -> &Target {
        &self.current
    }

    /// Takes the program the target runs now as seen, so that an exec whose program
    /// could not be resolved is not noticed again and again.
    fn mark_seen(&mut self) {
        self.current.mark_exec_seen();
    }
}

/// Something for the session to act on.
#[expect(
    clippy::large_enum_variant,
    reason = "one per exec, moved once: boxing the large variant would buy nothing"
)]
pub(super) enum Event {
    /// The target runs another program now.
    Execed(PathBuf),
    /// Resolving the specs in it finished.
    Resolved(Outcome),
}

/// What resolving the specs in a program the target exec'd came to.
pub(super) enum Outcome {
    /// The pid no longer names the process (it exited; its pidfd ends the run).
    Gone,
    /// It exec'd again meanwhile: that exec is noticed next.
    Superseded(Target),
    Resolved(Resolved),
}

/// The specs resolved in a new program.
pub(super) struct Resolved {
    target: Target,
    pin: PinnedExe,
    probes: Vec<Probe>,
    costs: Vec<ProbeCost>,
    /// One line per spec that matched nothing usable, with why.
    unmatched: Vec<String>,
    /// Points resolution refused while keeping others, or attached by `--force`.
    notices: Vec<String>,
}

/// Where the session's messages go: stderr headless, the footer in the TUI (and
/// stderr again at the end, the notes).
pub(super) enum Teller<'a> {
    Stderr,
    Ui {
        events: mpsc::Sender<UiEvent>,
        target: TargetLine,
        notes: &'a mut Vec<String>,
    },
}

impl Teller<'_> {
    pub(super) fn tell(&mut self, line: String) {
        match self {
            Teller::Stderr => say(&format!("probetop: {line}")),
            Teller::Ui { events, notes, .. } => {
                // Never waits: the UI runs on the loop that sends. A full queue (the UI
                // is gone or far behind) loses the footer line, not the note.
                let _ = events.try_send(UiEvent::Message(line.clone()));
                notes.push(line);
            }
        }
    }

    /// Tells `line`, and the UI the probe list as it is now.
    pub(super) fn followed(&mut self, labels: &[ProbeLabel], attached: Vec<bool>, line: String) {
        match self {
            Teller::Stderr => say(&format!("probetop: {line}")),
            Teller::Ui {
                events,
                target,
                notes,
            } => {
                let _ = events.try_send(UiEvent::Followed {
                    target: target.clone(),
                    labels: labels.to_vec(),
                    attached,
                    message: line.clone(),
                });
                notes.push(line);
            }
        }
    }

    fn set_target(&mut self, line: TargetLine) {
        if let Teller::Ui { target, .. } = self {
            *target = line;
        }
    }
}

/// What following changes in the session.
pub(super) struct Links<'a, 'b> {
    pub attachment: &'a mut Attachment,
    pub source: &'a Arc<ReportSource>,
    /// One per row, as on screen and in the summary.
    pub labels: &'a mut Vec<ProbeLabel>,
    pub teller: &'a mut Teller<'b>,
}

/// Waits for the next event; never resolves without `--follow-exec`. Cancel-safe: a
/// resolution in progress stays pending in `follow`.
pub(super) async fn next_event(follow: &mut Option<Follow>) -> Event {
    let Some(follow) = follow.as_mut() else {
        return std::future::pending().await;
    };
    if let Some(pending) = follow.pending.as_mut() {
        // The task does not panic (and a panic aborts the release build); if it did,
        // nothing was resolved.
        let outcome = pending.await.unwrap_or(Outcome::Gone);
        follow.pending = None;
        return Event::Resolved(outcome);
    }
    loop {
        follow.poll.tick().await;
        if let Some(exe) = follow.current.exec_changed() {
            return Event::Execed(exe);
        }
    }
}

/// Acts on an event; `Some` ends the run.
pub(super) async fn on_event(
    event: Event,
    follow: &mut Option<Follow>,
    links: &mut Links<'_, '_>,
) -> Option<StopReason> {
    let follow = follow.as_mut()?;
    match event {
        Event::Execed(exe) => {
            execed(follow, links, exe);
            None
        }
        Event::Resolved(Outcome::Gone) => {
            follow.mark_seen();
            None
        }
        Event::Resolved(Outcome::Superseded(target)) => {
            follow.current = target;
            None
        }
        Event::Resolved(Outcome::Resolved(resolved)) => attach(follow, links, resolved).await,
    }
}

/// The target runs `exe` now: detach the old program's probes, and start resolving.
fn execed(follow: &mut Follow, links: &mut Links<'_, '_>, exe: PathBuf) {
    follow.generation += 1;
    let generation = follow.generation;
    let pid = follow.current.pid;
    let old = std::mem::take(&mut follow.live);
    // Their offsets mean nothing in the new program: forgotten, never attached again.
    let retired: Vec<ProbeLink> = links.attachment.retire_set(&old);
    // Nothing can attach through the old program's file any more.
    follow.pin = None;
    for &id in &old {
        if let Some(label) = links.labels.get_mut(id as usize) {
            label.before_exec = Some(generation);
        }
    }
    links.source.update_rows(|rows| {
        rows.execs.push(ExecReport {
            generation,
            exe: exe.display().to_string(),
            at_unix_ms: unix_now_ms(),
            probes_attached: 0,
        })
    });
    if follow.dispatch_running {
        crate::attach::dispatch::stop_dispatch(links.attachment);
        follow.dispatch_running = false;
        links.teller.tell(format!(
            "kernel dispatch time was measured up to exec {generation}; the whole cost of later probes is estimated from calibration alone"
        ));
    }
    let detached = match old.len() {
        0 => String::new(),
        n => format!(
            ": {n} probe{} on {} detached, measurements kept",
            plural(n),
            follow.current.exe.display()
        ),
    };
    let attached = attached_now(links);
    links.teller.followed(
        links.labels,
        attached,
        format!(
            "pid {pid} exec'd {} (exec {generation}){detached}; resolving the specs in it",
            exe.display()
        ),
    );
    let job = Job {
        process: follow.current.clone(),
        specs: follow.specs.clone(),
        options: follow.resolve_options.clone(),
        force: follow.force,
        generation,
    };
    follow.pending = Some(tokio::task::spawn_blocking(move || {
        // Closing a probe waits for the kernel's grace period: here, off the loop that
        // runs the UI.
        drop(retired);
        job.run()
    }));
}

/// Attaches what was resolved in the new program; `Some` if it cannot be and the run
/// ends as it would without `--follow-exec`.
async fn attach(
    follow: &mut Follow,
    links: &mut Links<'_, '_>,
    resolved: Resolved,
) -> Option<StopReason> {
    let Resolved {
        target,
        pin,
        mut probes,
        costs,
        unmatched,
        notices,
    } = resolved;
    let generation = follow.generation;
    let pid = target.pid;
    let exe = target.exe.display().to_string();
    links.teller.set_target(TargetLine {
        pid,
        comm: target.comm.clone(),
    });
    for line in &unmatched {
        links.teller.tell(format!("exec {generation}: {line}"));
    }
    for line in &notices {
        let line = line.strip_prefix("probetop: ").unwrap_or(line);
        links.teller.tell(format!("exec {generation}: {line}"));
    }
    if probes.is_empty() {
        follow.current = target;
        let attached = attached_now(links);
        links.teller.followed(
            links.labels,
            attached,
            format!(
                "exec {generation}: no spec matches {exe}; nothing attached, waiting for pid {pid} to exec again or exit"
            ),
        );
        return None;
    }
    let first = links.labels.len();
    let capacity = links.attachment.capacity() as usize;
    if first + probes.len() > capacity {
        links.teller.tell(format!(
            "exec {generation}: {} more probes do not fit the {capacity} probetop made room for; stopping as without --follow-exec",
            probes.len()
        ));
        return Some(StopReason::TargetExeced);
    }

    // The latency pairs of this program, numbered as the ids its probes get.
    let slots = follow.pair_slots;
    let next_slot =
        super::probe::assign_pair_slots(&mut probes, slots.next, slots.capacity, slots.in_kernel);
    let mut pairs = super::probe::latency_pairs(&probes);
    for pair in &mut pairs {
        for id in pair.starts.iter_mut().chain(pair.ends.iter_mut()) {
            *id += first as u32;
        }
    }
    // The rows and their configs go in before any probe can be hit, so no hit finds
    // an unknown id or another probe's config.
    let mut notes = Vec::new();
    let configs: Vec<ProbeConfig> = probes
        .iter()
        .map(|probe| {
            probe.config(follow.base_config, follow.args, &mut |line| {
                notes.push(line)
            })
        })
        .collect();
    let rows = costs
        .iter()
        .zip(&configs)
        .zip(&probes)
        .map(|((cost, config), point)| {
            let mut probe = ProbeAggregate::default();
            probe.mode = crate::delivery::DeliveryMode::of_config(config);
            probe.name = ProbeLabel::new(point.point.kind, &point.point.name, "").display;
            // Kernel dispatch is not measured for these (it stopped at the exec).
            probe.keys = point
                .key_slot(follow.args)
                .map(|(key, at)| crate::aggregate::HitKeys::new(key, at, follow.max_keys));
            let mut cost = cost.clone();
            cost.captures_args = config.args.count > 0;
            (probe, *config, cost)
        })
        .collect();
    let (reply, added) = oneshot::channel();
    let add = CollectorCommand::AddProbes {
        probes: rows,
        pairs,
        reply,
    };
    // Fails only if the collector is gone: the run is ending anyway.
    if links.source.commands.send(add).await.is_err() {
        return None;
    }
    match added.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            links.teller.tell(format!(
                "exec {generation}: {e}; stopping as without --follow-exec"
            ));
            return Some(StopReason::TargetExeced);
        }
        Err(_) => return None,
    }
    follow.pair_slots.next = next_slot;
    // From here on this is the program probed: its next exec is the one to notice.
    // (Had the run stopped above, the end would say which program the probes were on.)
    follow.current = target;
    let mut attached = 0;
    let requests: Vec<_> = probes
        .iter()
        .zip(configs)
        .enumerate()
        .map(|(offset, (probe, config))| probe.request((first + offset) as u32, config, pid))
        .collect();
    let outcomes = links.attachment.attach_configured_all(&requests);
    for (probe, outcome) in probes.iter().zip(outcomes) {
        match outcome {
            Ok(()) => attached += 1,
            Err(e) => notes.push(format!(
                "cannot attach {} ({}): {e}",
                probe.spec, probe.point.name
            )),
        }
    }
    for line in notes {
        links.teller.tell(format!("exec {generation}: {line}"));
    }
    follow.live = (first..first + probes.len()).map(|id| id as u32).collect();
    follow.pin = Some(pin);
    links.labels.extend(
        probes
            .iter()
            .zip(&costs)
            .map(|(probe, cost)| probe.label(cost)),
    );
    links.source.update_rows(|rows| {
        rows.probes.extend(probes);
        if let Some(exec) = rows.execs.iter_mut().rfind(|e| e.generation == generation) {
            exec.probes_attached = attached;
        }
    });
    let unmatched = match unmatched.len() {
        0 => String::new(),
        n => format!("; {n} spec{} matched nothing", plural(n)),
    };
    let comm = &follow.current.comm;
    let attached_ids = attached_now(links);
    links.teller.followed(
        links.labels,
        attached_ids,
        format!(
            "exec {generation}: attached {attached} probe{} to pid {pid} ({comm}) in {exe}{unmatched}",
            plural(attached)
        ),
    );
    None
}

/// Per row: whether its probe is attached now.
pub(super) fn attached_now(links: &Links<'_, '_>) -> Vec<bool> {
    (0..links.labels.len())
        .map(|id| links.attachment.is_attached(id as u32))
        .collect()
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Resolving the specs in the program a target exec'd, on a blocking thread.
struct Job {
    /// The target before the exec: the same process must be there.
    process: Target,
    specs: Vec<ProbeSpec>,
    options: ResolveOptions,
    force: bool,
    generation: u32,
}

impl Job {
    fn run(self) -> Outcome {
        let pid = self.process.pid;
        wait_for_loader(pid);
        // Still the same process (an exec keeps the pid and the start time)?
        let target = match Target::open(pid) {
            Ok(target) if target.same_process(&self.process) => target,
            _ => return Outcome::Gone,
        };
        let Ok(pin) = target.pin_exe() else {
            return Outcome::Gone;
        };
        if Some(pin.identity) != target.exe_identity {
            return Outcome::Superseded(target);
        }
        let mut probes = Vec::new();
        let mut unmatched = Vec::new();
        let mut notices = Vec::new();
        // One resolver for every spec: each object is read once.
        let resolver = resolve::Resolver::new(&target, self.options.clone());
        for spec in &self.specs {
            // A latency pair's end as at the start: by uretprobe where that is safe in
            // this program, else at the ret instructions.
            let (spec, path_line) = match super::probe::latency_end(&resolver, spec) {
                Ok(end) => end,
                Err(e) => {
                    unmatched.push(format!("{}: {e}", spec.text));
                    continue;
                }
            };
            if let Some(line) = path_line {
                notices.push(line);
            }
            let spec = &spec;
            match resolver.resolve(spec) {
                Ok(points) => {
                    let found: Vec<Probe> = points
                        .into_iter()
                        .map(|point| Probe::new(spec, point, self.generation, &target, &pin))
                        .collect();
                    match refuse_unsafe_return_probes(&found) {
                        Err(e) if !self.force => unmatched.push(e.to_string()),
                        _ => probes.extend(found),
                    }
                }
                Err(e) => unmatched.push(format!("{}: {e}", spec.text)),
            }
        }
        notices.extend(resolver.take_notices());
        // As at the start: identical points are attached once.
        super::points::merge_duplicates(&mut probes);
        // Said at the start already, for the same specs.
        let _ = super::points::share_site_semaphores(&mut probes);
        // Symbols were read through /proc/PID/exe: if that is another file now, they
        // may be another program's.
        if target.current_exe_identity() != Some(pin.identity) {
            return Outcome::Superseded(target);
        }
        let points: Vec<&ProbePoint> = probes.iter().map(|p| &p.point).collect();
        let costs = super::prepare_costs(&points).costs;
        Outcome::Resolved(Resolved {
            target,
            pin,
            probes,
            costs,
            unmatched,
            notices,
        })
    }
}

/// Waits, at most [`LOADER_WAIT`], until the files `pid` maps stop changing: the
/// dynamic loader maps a new program's libraries right after the exec.
fn wait_for_loader(pid: u32) {
    let mapped = || -> Option<BTreeSet<String>> {
        let maps = maps::read_maps(pid).ok()?;
        Some(
            maps.into_iter()
                .filter(|m| m.is_file())
                .filter_map(|m| m.path)
                .collect(),
        )
    };
    let started = Instant::now();
    let mut last = mapped();
    let mut settled_since = Instant::now();
    while started.elapsed() < LOADER_WAIT {
        std::thread::sleep(Duration::from_millis(20));
        let now = mapped();
        if now != last {
            last = now;
            settled_since = Instant::now();
        } else if settled_since.elapsed() >= LOADER_SETTLED {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spare_room_for_later_programs() {
        assert_eq!(spare_probes(1), 16);
        assert_eq!(spare_probes(10), 30);
        assert_eq!(spare_probes(500), 1024);
        assert_eq!(spare_probes(2000), 2000);
        assert_eq!(
            spare_probes(probe_common::MAX_PROBES - 5),
            5,
            "never past the kernel maps' limit"
        );
    }
}
