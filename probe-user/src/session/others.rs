//! Other tools' probes on the target as rows of the run: each armed site another tool
//! probes gets a counting probe of probetop's own on the same file, offset, kind and
//! semaphore, filtered to the target. The trap is the other tool's and already taken;
//! probetop's program only counts (`probe::counting_config`).
//!
//! Looked for again every second ([`Watch`]): a probe another tool adds gets its row
//! and counter; one it removes keeps its row, and probetop's counter there is detached
//! at once, as it would otherwise be the only probe left on the site, a trap the target
//! did not take before.

use std::path::{Path, PathBuf};
use std::time::Duration;

use probe_common::ProbeConfig;
use tokio::sync::oneshot;

use super::ProbeCost;
use super::follow::{Links, attached_now};
use super::probe::Probe;
use super::{OtherPrice, ProgramMethod, SharedOwner};
use crate::aggregate::ProbeAggregate;
use crate::attach::bpf_stats::OtherProgram;
use crate::attach::others::{self, OtherSite};
use crate::present::ProbeLabel;
use crate::resolve::{ResolveOptions, Resolver};
use crate::stream::CollectorCommand;
use crate::target::Target;

/// How often other tools' probes are looked for.
pub(super) const REDISCOVER: Duration = Duration::from_secs(1);

/// Row slots the programs are loaded with beyond the first probes, for other tools'
/// probes that appear while probetop runs: room in CONFIG only, as counters never use
/// the in-kernel histograms (`LoadOptions::spare_counters`).
pub(super) const SPARE: u32 = 32;

/// What one look found.
pub(super) struct Found {
    pub probes: Vec<Probe>,
    /// Other probes on the target's objects not armed in it.
    pub unarmed: usize,
    /// Other probes on files probetop could not read.
    pub unnamed: usize,
}

/// The counting probes for every other tool's probe armed in `target`, one per site and
/// owner, in the order found. `pin` is the path the target's executable is attached
/// through.
pub(super) fn find(target: &Target, pin: &Path, resolver: &Resolver<'_>) -> Found {
    let memory_of = target.live_thread.unwrap_or(target.pid);
    let mut found = Found {
        probes: Vec::new(),
        unarmed: 0,
        unnamed: 0,
    };
    for site in others::discover(target.pid) {
        if found
            .probes
            .iter()
            .any(|p| p.other.as_ref().is_some_and(|o| same_site(o, &site)))
        {
            continue;
        }
        // Only where the target already takes the trap: a counting probe must not add
        // one (a perf event filtered to another process arms nothing here).
        if others::armed_in(memory_of, &site.file, site.offset) != Some(true) {
            found.unarmed += 1;
            continue;
        }
        let Some(point) = resolver.point_at(&site.file, site.offset, site.returns) else {
            found.unnamed += 1;
            continue;
        };
        found.probes.push(Probe::of_other(point, site, target, pin));
    }
    found
}

/// [`find`] at the start of a run, saying what it found; `own` are the run's own
/// probes, whose shared sites are said.
pub(super) fn probes(
    target: &Target,
    pin: &Path,
    resolver: &Resolver<'_>,
    own: &[Probe],
) -> Vec<Probe> {
    let found = find(target, pin, resolver);
    for line in found_lines(&found, target.pid) {
        say!("probetop: {line}");
    }
    for probe in &found.probes {
        say!("probetop: {}", counting_line(probe, own));
    }
    found.probes
}

/// Whether `probe` (another tool's) is on the breakpoint of one of probetop's own
/// probes of the same kind: that probe counts its hits already, so it gets no counter
/// (a second program of probetop's on the one trap) and the own row says it is shared.
fn on_own_site(probe: &Probe, own: &[Probe]) -> bool {
    own.iter().any(|mine| {
        mine.other.is_none()
            && mine.point.kind == probe.point.kind
            && mine.point.file_offset == probe.point.file_offset
            && others::same_file(&mine.point.attach_path, &probe.point.attach_path)
    })
}

/// Marks each of probetop's own probes that sits on the breakpoint of one of `others`,
/// the row then saying which tool's probe shares its trap, and drops the others of the
/// same kind there: the own probe counts their hits.
pub(super) fn mark_shared(own: &mut [Probe], others: &mut Vec<Probe>) {
    for mine in own.iter_mut().filter(|p| p.other.is_none()) {
        let sharing: Vec<&Probe> = others
            .iter()
            .filter(|o| {
                o.point.file_offset == mine.point.file_offset
                    && others::same_file(&o.point.attach_path, &mine.point.attach_path)
            })
            .collect();
        let tags: Vec<String> = sharing.iter().filter_map(|o| o.owner_tag()).collect();
        if !tags.is_empty() {
            mine.shared_with = Some(tags.join(", "));
        }
        mine.shared_sites = sharing.iter().filter_map(|o| o.other.clone()).collect();
    }
    others.retain(|other| !on_own_site(other, own));
}

fn found_lines(found: &Found, pid: u32) -> Vec<String> {
    let mut lines = Vec::new();
    if found.unarmed > 0 {
        lines.push(format!(
            "{} other probe{} on objects pid {pid} maps {} armed in it (another process's, or not enabled): not counted",
            found.unarmed,
            plural(found.unarmed),
            if found.unarmed == 1 { "is not" } else { "are not" }
        ));
    }
    if found.unnamed > 0 {
        lines.push(format!(
            "{} other probe{} on files probetop cannot read in pid {pid}: not counted",
            found.unnamed,
            plural(found.unnamed)
        ));
    }
    lines
}

/// The line said when probetop starts counting another tool's probe.
fn counting_line(probe: &Probe, own: &[Probe]) -> String {
    let owner = probe.owner_tag().unwrap_or_default();
    let shared = own.iter().find(|mine| {
        mine.other.is_none()
            && mine.point.file_offset == probe.point.file_offset
            && others::same_file(&mine.point.attach_path, &probe.point.attach_path)
    });
    match shared {
        Some(mine) => format!(
            "{} shares its breakpoint with {owner}'s {} probe: one trap runs both programs",
            mine.spec, probe.point.kind
        ),
        None => format!(
            "counting {owner}'s {}:{} ({}+{:#x})",
            probe.point.kind,
            probe.point.name,
            probe.point.object.display(),
            probe.point.file_offset
        ),
    }
}

/// The semaphore offset to attach `probe` with, after the kernel refused it with EINVAL
/// (it keeps one semaphore offset per site, and another tool registered another): the
/// offset the kernel holds, read from its log, when joining with it writes nothing into
/// `pid` (a stray offset outside any writable mapping: Debian's BCC 0.26 passes its
/// stack's garbage, 0x6, in the ELF header). The owner's probe stays as it was: same
/// site, same semaphore, one more consumer. For another tool's probe (probetop's counter)
/// that registered none as far as probetop saw, and for probetop's own probe without a
/// semaphore of its own (a uprobe on a function BCC probes too); sets it on `probe`.
/// `None` when there is nothing safe to join with.
pub(super) fn held_semaphore_to_join(
    probe: &mut Probe,
    error: &crate::attach::AttachError,
    pid: u32,
) -> Option<u64> {
    if !error.site_held() {
        return None;
    }
    let safe_held = |file: &Path, offset: u64| {
        let held = others::held_semaphore(file, offset)?;
        (held != 0 && others::semaphore_writes_nothing(pid, file, held)).then_some(held)
    };
    let own_semaphore = probe.semaphore_offset();
    match probe.other.as_mut() {
        Some(site) if site.ref_ctr_offset == 0 => {
            let held = safe_held(&site.file, site.offset)?;
            site.ref_ctr_offset = held;
            Some(held)
        }
        Some(_) => None,
        // A USDT probe's own semaphore must be raised for its site to fire: not given up.
        None if own_semaphore.is_none() => {
            let held = safe_held(&probe.point.attach_path, probe.point.file_offset)?;
            probe.shared_semaphore = Some(held);
            Some(held)
        }
        None => None,
    }
}

/// Undoes [`held_semaphore_to_join`] when the attach with the held offset failed too,
/// so the row says what was refused.
pub(super) fn unjoin(probe: &mut Probe) {
    match probe.other.as_mut() {
        Some(site) => site.ref_ctr_offset = 0,
        None => probe.shared_semaphore = None,
    }
}

/// The line said when a probe joined another tool's site with its semaphore: probetop's
/// counter of that tool's probe, or a probe of probetop's own on the same breakpoint.
pub(super) fn joined_line(probe: &Probe, held: u64) -> String {
    let how = format!(
        "the semaphore offset {held:#x} it registered (the kernel keeps one per site; nothing is written into the target there)"
    );
    match probe.owner_tag() {
        Some(owner) => format!(
            "counting {owner}'s {}:{} ({}+{:#x}) with {how}",
            probe.point.kind,
            probe.point.name,
            probe.point.object.display(),
            probe.point.file_offset
        ),
        None => format!(
            "{} ({}) attached on {}'s site ({}+{:#x}) with {how}",
            probe.spec,
            probe.point.name,
            probe.shared_with.as_deref().unwrap_or("another tool"),
            probe.point.object.display(),
            probe.point.file_offset
        ),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Whether two other tools' probes are one row: same owner, file, offset and kind.
fn same_site(a: &OtherSite, b: &OtherSite) -> bool {
    a.owner == b.owner
        && a.offset == b.offset
        && a.returns == b.returns
        && others::same_file(&a.file, &b.file)
}

/// The price of another tool's probe before its program was measured: a BPF program
/// as dear as probetop's counting one (the calibration's); a tracefs event's ftrace
/// work as the calibration's own events' (its record, each fetched argument by kind,
/// each further instance; not priced without the bare event's row).
pub(super) fn assumed_price(cost: &ProbeCost, site: &OtherSite) -> OtherPrice {
    match site.prog_id {
        Some(_) => OtherPrice {
            program_ns: cost.counting_ns(),
            program_method: ProgramMethod::AssumedCounting,
        },
        None => match cost
            .basis
            .and_then(|b| b.tracefs_event_ns(site.shape.as_ref()))
        {
            Some(ns) => OtherPrice {
                program_ns: Some(ns),
                program_method: ProgramMethod::CalibratedTracefs,
            },
            None => OtherPrice {
                program_ns: None,
                program_method: ProgramMethod::NotPriced,
            },
        },
    }
}

/// The other tools' programs on the breakpoint of `probe` (one of probetop's own), as
/// priced before their programs were measured.
pub(super) fn assumed_shared(cost: &ProbeCost, probe: &Probe) -> Vec<SharedOwner> {
    probe
        .shared_sites
        .iter()
        .map(|site| SharedOwner {
            owner: site.owner.clone(),
            price: assumed_price(cost, site),
        })
        .collect()
}

/// The same with their programs as the kernel's BPF statistics measured them, where
/// they did.
pub(super) fn measured_shared(
    shared: &mut [SharedOwner],
    probe: &Probe,
    programs: &[OtherProgram],
) {
    for (owner, site) in shared.iter_mut().zip(&probe.shared_sites) {
        owner.price = measured_price(owner.price, site, programs);
    }
}

/// The owner's program per run as the kernel's BPF statistics measured it over the
/// window (`--bpf-stats`), where they did; else the price stays assumed.
pub(super) fn measured_price(
    assumed: OtherPrice,
    site: &OtherSite,
    programs: &[OtherProgram],
) -> OtherPrice {
    let measured = site.prog_id.and_then(|id| {
        programs
            .iter()
            .find(|p| p.prog_id == id)
            .and_then(|p| p.avg_run_ns)
    });
    match measured {
        Some(ns) => OtherPrice {
            program_ns: Some(ns),
            program_method: ProgramMethod::BpfStats,
        },
        None => assumed,
    }
}

/// Other tools' probes looked for again while the run measures.
pub(super) struct Watch {
    target: Target,
    /// The path the target's executable is attached through (held by the session).
    pin: PathBuf,
    filter_pid: u32,
    base_config: ProbeConfig,
    /// Rows counting another tool's probe now, by probe id.
    live: Vec<(u32, OtherSite)>,
    /// Sites where the kernel refused a counter (another semaphore offset on the site:
    /// Debian's BCC 0.26 registers a stray one): not tried again, else each look would
    /// add one more uncounted row.
    refused: Vec<OtherSite>,
    pending: Option<tokio::task::JoinHandle<Found>>,
    poll: tokio::time::Interval,
    /// The run's resolve options: its debuginfod servers, and what they were asked.
    options: ResolveOptions,
}

impl Watch {
    pub(super) fn new(
        target: Target,
        pin: PathBuf,
        filter_pid: u32,
        base_config: ProbeConfig,
        rows: &[Probe],
        options: ResolveOptions,
    ) -> Self {
        let mut poll = tokio::time::interval(REDISCOVER);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            target,
            pin,
            filter_pid,
            base_config,
            live: rows
                .iter()
                .enumerate()
                .filter_map(|(id, p)| Some((id as u32, p.other.clone()?)))
                .collect(),
            refused: Vec::new(),
            pending: None,
            poll,
            options,
        }
    }
}

/// The next look's result; never resolves without a watch. Cancel-safe: a look in
/// progress stays pending.
pub(super) async fn next_look(watch: &mut Option<Watch>) -> Found {
    let Some(watch) = watch.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        if let Some(pending) = watch.pending.as_mut() {
            let found = pending.await.unwrap_or(Found {
                probes: Vec::new(),
                unarmed: 0,
                unnamed: 0,
            });
            watch.pending = None;
            return found;
        }
        watch.poll.tick().await;
        let target = watch.target.clone();
        let pin = watch.pin.clone();
        let options = watch.options.clone();
        // Walks every process's descriptors and reads objects: off the session's loop.
        watch.pending = Some(tokio::task::spawn_blocking(move || {
            let resolver = Resolver::new(&target, options);
            find(&target, &pin, &resolver)
        }));
    }
}

/// Acts on a look: counters for the probes that appeared, detached for those gone.
pub(super) async fn on_look(found: Found, watch: &mut Option<Watch>, links: &mut Links<'_, '_>) {
    let Some(watch) = watch.as_mut() else {
        return;
    };
    let gone: Vec<u32> = watch
        .live
        .iter()
        .filter(|(_, site)| {
            !found
                .probes
                .iter()
                .any(|p| p.other.as_ref().is_some_and(|o| same_site(o, site)))
        })
        .map(|(id, _)| *id)
        .collect();
    if !gone.is_empty() {
        let retired = links.attachment.retire_set(&gone);
        // Each close waits for the kernel's grace period: off the loop.
        tokio::task::spawn_blocking(move || drop(retired));
        watch.live.retain(|(id, _)| !gone.contains(id));
        let names: Vec<String> = gone
            .iter()
            .filter_map(|&id| links.labels.get(id as usize))
            .map(|l| l.display.clone())
            .collect();
        for &id in &gone {
            if let Some(label) = links.labels.get_mut(id as usize) {
                label.display.push_str(" (gone)");
            }
        }
        let attached = attached_now(links);
        links.teller.followed(
            links.labels,
            attached,
            format!(
                "{} went: row{} kept, counting stopped",
                names.join(", "),
                plural(names.len())
            ),
        );
    }
    let rows = links.source.rows();
    let new: Vec<Probe> = found
        .probes
        .into_iter()
        .filter(|p| {
            p.other.as_ref().is_some_and(|site| {
                !watch.live.iter().any(|(_, live)| same_site(live, site))
                    && !watch.refused.iter().any(|r| same_site(r, site))
            }) && !on_own_site(p, &rows.probes)
        })
        .collect();
    if !new.is_empty() {
        add(watch, links, new).await;
    }
}

/// New rows and counters for other tools' probes that appeared.
async fn add(watch: &mut Watch, links: &mut Links<'_, '_>, probes: Vec<Probe>) {
    let first = links.labels.len();
    let capacity = links.attachment.capacity() as usize;
    if first + probes.len() > capacity {
        links.teller.tell(format!(
            "{} more probes of other tools do not fit the {capacity} rows probetop made room for: not counted",
            probes.len()
        ));
        return;
    }
    let points: Vec<&crate::resolve::ProbePoint> = probes.iter().map(|p| &p.point).collect();
    let mut costs = super::prepare_costs(&points).costs;
    let mut configs = Vec::new();
    let mut rows = Vec::new();
    for (probe, cost) in probes.iter().zip(&mut costs) {
        if let Some(site) = &probe.other {
            cost.other = Some(assumed_price(cost, site));
        }
        let config = probe.config(watch.base_config, 0, &mut |_| {});
        let mut row = ProbeAggregate::default();
        row.mode = crate::delivery::DeliveryMode::of_config(&config);
        row.name = ProbeLabel::new(probe.point.kind, &probe.point.name, "").display;
        configs.push(config);
        rows.push((row, config, cost.clone()));
    }
    let (reply, added) = oneshot::channel();
    let command = CollectorCommand::AddProbes {
        probes: rows,
        reply,
    };
    // Fails only if the collector is gone: the run is ending anyway.
    if links.source.commands.send(command).await.is_err() {
        return;
    }
    match added.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            links
                .teller
                .tell(format!("other tools' new probes not counted: {e}"));
            return;
        }
        Err(_) => return,
    }
    let requests: Vec<_> = probes
        .iter()
        .zip(&configs)
        .enumerate()
        .map(|(offset, (probe, config))| {
            probe.request((first + offset) as u32, *config, watch.filter_pid)
        })
        .collect();
    let mut outcomes = links.attachment.attach_configured_all(&requests);
    drop(requests);
    let mut probes = probes;
    let mut joined: Vec<Option<String>> = vec![None; probes.len()];
    for (offset, (probe, outcome)) in probes.iter_mut().zip(outcomes.iter_mut()).enumerate() {
        if let Err(e) = outcome
            && let Some(held) = held_semaphore_to_join(probe, e, watch.target.pid)
        {
            let id = (first + offset) as u32;
            let retried = links.attachment.attach_configured_all(&[probe.request(
                id,
                configs[offset],
                watch.filter_pid,
            )]);
            if let Some(Ok(())) = retried.into_iter().next() {
                *outcome = Ok(());
                joined[offset] = Some(joined_line(probe, held));
            } else {
                // Not joined after all: the row says what was refused.
                unjoin(probe);
            }
        }
    }
    let mut lines = Vec::new();
    for (offset, (probe, outcome)) in probes.iter_mut().zip(outcomes).enumerate() {
        match outcome {
            Ok(()) => {
                if let Some(site) = &probe.other {
                    watch.live.push(((first + offset) as u32, site.clone()));
                }
                lines.push(
                    joined[offset]
                        .take()
                        .unwrap_or_else(|| counting_line(probe, &links.source.rows().probes)),
                );
            }
            Err(e) => {
                if let Some(site) = &mut probe.other {
                    site.counted = false;
                    watch.refused.push(site.clone());
                }
                lines.push(format!(
                    "cannot count {} ({}): {e}",
                    probe.spec, probe.point.name
                ));
            }
        }
    }
    links.labels.extend(
        probes
            .iter()
            .zip(&costs)
            .map(|(probe, cost)| probe.label(cost)),
    );
    links.source.update_rows(|rows| rows.probes.extend(probes));
    let attached = attached_now(links);
    links
        .teller
        .followed(links.labels, attached, lines.join("; "));
}
