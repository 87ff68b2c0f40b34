//! The second phase: the specs resolved to probe points in the target, checked, and
//! each site classified (`resolve::costs::prepare`), sites the kernel refuses set aside.

use anyhow::{Context as _, bail};

use super::plan::Plan;
use super::points;
use super::probe::{Probe, refuse_unsafe_return_probes};
use crate::UsageError;
use crate::cli::RunArgs;
use crate::present::export::SkippedPoint;
use crate::resolve::{self, ProbePoint, ResolveOptions};
use crate::target::PinnedExe;

/// The probes to attach.
pub(super) struct Found {
    pub resolve_options: ResolveOptions,
    /// The target's executable, held open for the whole run: probes on it are attached
    /// through it.
    pub pin: PinnedExe,
    pub probes: Vec<Probe>,
    pub prepared: super::Prepared,
    /// Matched, not attached: the kernel refuses them.
    pub skipped: Vec<SkippedPoint>,
}

pub(super) fn find(plan: &Plan, args: &RunArgs) -> anyhow::Result<Found> {
    let target = &plan.target;
    let pid = target.pid;
    let resolve_options = ResolveOptions {
        max_probes: args.max_probes,
        force: args.force,
        debuginfod: crate::resolve::debuginfod::Debuginfod::from_env(args.offline),
        ..Default::default()
    };
    let pin = target
        .pin_exe()
        .with_context(|| format!("cannot open the executable of pid {pid}"))?;
    let resolver = resolve::Resolver::new(target, resolve_options.clone());
    let mut probes = Vec::new();
    for spec in &plan.specs {
        let (spec, path_line) = super::probe::latency_end(&resolver, spec)?;
        if let Some(line) = path_line {
            say!("probetop: {line}");
        }
        for point in resolver.resolve(&spec)? {
            probes.push(Probe::new(&spec, point, 0, target, &pin));
        }
        for line in resolver.take_notices() {
            say!("{line}");
        }
    }
    let merged = points::merge_duplicates(&mut probes);
    if merged > 0 {
        say!("{}", points::merged_line(merged));
    }
    // Other tools' probes share the table: counted, never changed.
    let own = probes.len();
    if !plan.several {
        let mut others = super::others::probes(target, &pin.path(), &resolver, &probes);
        super::others::mark_shared(&mut probes, &mut others);
        probes.extend(others);
    }
    // The parsed objects (whole files, symbol tables) are not needed while measuring.
    drop(resolver);
    if probes.is_empty() {
        return Ok(Found {
            resolve_options,
            pin,
            probes,
            prepared: super::prepare_costs(&[]),
            skipped: Vec::new(),
        });
    }
    for line in points::unmapped_lines(&probes, pid) {
        say!("{line}");
    }
    let shared = points::share_site_semaphores(&mut probes);
    for line in &shared.lines {
        say!("{line}");
    }
    if !shared.skipped.is_empty() {
        say!(
            "{}",
            points::skipped_line(&shared.skipped, points::SITE_SEMAPHORE_HELD)
        );
    }
    points::check_total(probes.len(), args.max_probes, plan.specs.len())?;
    if probes.len() > probe_common::MAX_PROBES as usize {
        bail!(UsageError(format!(
            "{} probe points in all, more than probetop can attach at once ({}): narrow the specs",
            probes.len(),
            probe_common::MAX_PROBES
        )));
    }
    if !args.force {
        refuse_unsafe_return_probes(&probes[..own])?;
    }
    let specs = plan.specs.len();
    if specs > 0 {
        say!(
            "probetop: {own} probe point{} from {specs} spec{}",
            if own == 1 { "" } else { "s" },
            if specs == 1 { "" } else { "s" }
        );
    }
    let points: Vec<&ProbePoint> = probes.iter().map(|p| &p.point).collect();
    let mut prepared = super::prepare_costs(&points);
    if let Some(line) = &prepared.calibration_warning {
        say!("{line}");
    } else if prepared.calibration.is_none() {
        say!("{}", crate::present::NO_CALIBRATION);
    }
    let shared_skipped = shared.skipped.len();
    let mut skipped = shared.skipped;
    skipped.extend(points::skip_refused_sites(&mut probes, &mut prepared));
    if skipped.len() > shared_skipped {
        say!(
            "{}",
            points::skipped_line(&skipped[shared_skipped..], points::LISTED_REFUSED)
        );
    }
    if probes.is_empty() {
        bail!("the kernel refuses to probe every point the specs match: nothing to attach");
    }
    let spec_points: Vec<(&str, &ProbePoint)> =
        probes.iter().map(|p| (p.spec.as_str(), &p.point)).collect();
    for line in super::entry_warnings(&spec_points, &prepared.costs) {
        say!("{line}");
    }
    for (spec, point) in &spec_points {
        if let Some(returns) = point.returns.as_ref().filter(|r| r.jumps_out > 0) {
            say!(
                "{spec}: {} jump{} {} (tail calls, or to its .cold part): a return through one passes none of its {} ret instruction{} and is not counted",
                returns.jumps_out,
                if returns.jumps_out == 1 {
                    " leaves"
                } else {
                    "s leave"
                },
                point.name.trim_end_matches("+ret"),
                returns.offsets.len(),
                if returns.offsets.len() == 1 { "" } else { "s" }
            );
        }
    }
    if let Some(line) = points::ifunc_resolvers_line(&spec_points) {
        say!("{line}");
    }
    Ok(Found {
        resolve_options,
        pin,
        probes,
        prepared,
        skipped,
    })
}
