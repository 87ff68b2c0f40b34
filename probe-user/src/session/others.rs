//! Other tools' probes on the target as rows of the run: each armed site another tool
//! probes gets a counting probe of probetop's own on the same file, offset, kind and
//! semaphore, filtered to the target. The trap is the other tool's and already taken;
//! probetop's program only counts (`probe::counting_config`).

use super::probe::Probe;
use crate::cost::estimate::{OtherPrice, ProgramMethod};
use crate::cost::others::{self, OtherSite};
use crate::cost::{ProbeCost, bpf_stats::OtherProgram};
use crate::resolve::Resolver;
use crate::target::{PinnedExe, Target};

/// The counting probes for every other tool's probe armed in `target`, one per site and
/// owner, in the order found; `own` are the run's own probes, whose shared sites are
/// said.
pub(super) fn probes(
    target: &Target,
    pin: &PinnedExe,
    resolver: &Resolver<'_>,
    own: &[Probe],
) -> Vec<Probe> {
    let memory_of = target.live_thread.unwrap_or(target.pid);
    let mut found: Vec<Probe> = Vec::new();
    let mut unarmed = 0usize;
    let mut unnamed = 0usize;
    for site in others::discover(target.pid) {
        if found
            .iter()
            .any(|p| p.other.as_ref().is_some_and(|o| same_site(o, &site)))
        {
            continue;
        }
        // Only where the target already takes the trap: a counting probe must not add
        // one (a perf event filtered to another process arms nothing here).
        if others::armed_in(memory_of, &site.file, site.offset) != Some(true) {
            unarmed += 1;
            continue;
        }
        let Some(point) = resolver.point_at(&site.file, site.offset, site.returns) else {
            unnamed += 1;
            continue;
        };
        found.push(Probe::of_other(point, site, target, pin));
    }
    if unarmed > 0 {
        say!(
            "probetop: {unarmed} other probe{} on objects pid {} maps {} armed in it (another process's, or not enabled): not counted",
            if unarmed == 1 { "" } else { "s" },
            target.pid,
            if unarmed == 1 { "is not" } else { "are not" }
        );
    }
    if unnamed > 0 {
        say!(
            "probetop: {unnamed} other probe{} on files probetop cannot read in pid {}: not counted",
            if unnamed == 1 { "" } else { "s" },
            target.pid
        );
    }
    for probe in &found {
        let owner = probe.owner_tag().unwrap_or_default();
        let shared = own.iter().find(|mine| {
            mine.point.file_offset == probe.point.file_offset
                && others::same_file(&mine.point.attach_path, &probe.point.attach_path)
        });
        match shared {
            Some(mine) => say!(
                "probetop: {} shares its breakpoint with {owner}'s {} probe: one trap runs both programs",
                mine.spec,
                probe.point.kind
            ),
            None => say!(
                "probetop: counting {owner}'s {}:{} ({}+{:#x})",
                probe.point.kind,
                probe.point.name,
                probe.point.object.display(),
                probe.point.file_offset
            ),
        }
    }
    found
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
/// write is not priced.
pub(super) fn assumed_price(cost: &ProbeCost, site: &OtherSite) -> OtherPrice {
    match site.prog_id {
        Some(_) => OtherPrice {
            program_ns: cost.counting_ns(),
            program_method: ProgramMethod::AssumedCounting,
        },
        None => OtherPrice {
            program_ns: None,
            program_method: ProgramMethod::NotPriced,
        },
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
