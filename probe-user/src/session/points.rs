//! The run's probe points before they are attached: duplicates merged, the total
//! capped by `--max-probes`.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use probe_common::ProbeConfig;

use super::probe::Probe;
use crate::UsageError;
use crate::attach::{AttachError, AttachRequest, Attachment};
use crate::insn::classes::CostClass;
use crate::present::export::SkippedPoint;
use crate::spec::ProbeKind;

/// The file a point is in: its device and inode where it can be read (the same file
/// reached through `/proc/PID/exe` and through its path is one), else its path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum File {
    Inode(u64, u64),
    Path(PathBuf),
}

/// What makes two probe points one: the kernel would put the same breakpoint, running
/// the same program, at the same place. The last field says whether the point is
/// `FUNC+ret`, which holds more sites than its first `ret`: not the same as a probe on
/// that `ret` alone.
type PointKey = (File, u64, ProbeKind, bool, bool);

/// One line per object that probes are on but the target does not map (a library it
/// has not loaded, another program's path): they fire only if it maps that file later.
pub(super) fn unmapped_lines(probes: &[Probe], pid: u32) -> Vec<String> {
    let mut counts: Vec<(&std::path::Path, usize)> = Vec::new();
    for probe in probes.iter().filter(|p| p.point.load_bias.is_none()) {
        match counts.iter_mut().find(|(o, _)| *o == probe.point.object) {
            Some((_, n)) => *n += 1,
            None => counts.push((&probe.point.object, 1)),
        }
    }
    counts
        .into_iter()
        .map(|(object, n)| {
            format!(
                "probetop: pid {pid} does not map {} (yet): its {n} probe point{} fire only if it loads that file; check the object in the spec (`probetop list --pid {pid}` shows what it maps)",
                object.display(),
                if n == 1 { "" } else { "s" }
            )
        })
        .collect()
}

/// Which file each attach path is, asked once per path.
#[derive(Default)]
struct Files(HashMap<PathBuf, File>);

impl Files {
    fn of(&mut self, path: &std::path::Path) -> File {
        use std::os::unix::fs::MetadataExt as _;
        self.0
            .entry(path.to_path_buf())
            .or_insert_with(|| match std::fs::metadata(path) {
                Ok(meta) => File::Inode(meta.dev(), meta.ino()),
                Err(_) => File::Path(path.to_path_buf()),
            })
            .clone()
    }
}

/// Keeps the first of every set of identical probe points (same file, offset and
/// kind), in order: the row keeps the name and spec the user wrote first. Returns how
/// many were dropped. Without it, 2000 copies of one `-e` (or a preset and the same
/// `-e`) attached 2000 probes, each hit running 2000 programs.
pub(super) fn merge_duplicates(probes: &mut Vec<Probe>) -> usize {
    let before = probes.len();
    let mut files = Files::default();
    let mut seen: HashSet<PointKey> = HashSet::with_capacity(before);
    probes.retain(|probe| {
        let file = files.of(&probe.point.attach_path);
        seen.insert((
            file,
            probe.point.file_offset,
            probe.point.kind,
            probe.point.returns.is_some(),
            probe.pair.is_some(),
        ))
    });
    before - probes.len()
}

/// What [`share_site_semaphores`] did: lines to say, and the points it set aside.
#[derive(Debug, Default)]
pub(super) struct SharedSites {
    pub lines: Vec<String>,
    pub skipped: Vec<SkippedPoint>,
}

/// The kernel keeps one USDT semaphore offset (`ref_ctr_offset`) per probed site (file
/// and offset, whatever the kind) and refuses a second probe there that does not carry
/// the same one (EINVAL, "ref_ctr_offset mismatch" in the kernel log): a uprobe at
/// `FUNC+OFF` on a semaphore-guarded USDT site of the same run sank the whole
/// uprobe_multi link. The probes without one carry the site's semaphore instead: the
/// kernel raises it once per process whatever the number of probes on the site, so
/// the target sees what the USDT probe alone does, for as long as either is attached.
/// A probe with a semaphore of its own other than the site's (two notes disagreeing)
/// is set aside, naming the spec that holds the site.
pub(super) fn share_site_semaphores(probes: &mut Vec<Probe>) -> SharedSites {
    let mut out = SharedSites::default();
    let mut files = Files::default();
    // Each site's semaphore, and the probe that brought it.
    let mut sites: HashMap<(File, u64), (u64, usize)> = HashMap::new();
    let keys: Vec<(File, u64)> = probes
        .iter()
        .map(|p| (files.of(&p.point.attach_path), p.point.file_offset))
        .collect();
    let mut keep = vec![true; probes.len()];
    for (i, probe) in probes.iter().enumerate() {
        let Some(semaphore) = probe.semaphore_offset() else {
            continue;
        };
        match sites.get(&keys[i]) {
            None => {
                sites.insert(keys[i].clone(), (semaphore, i));
            }
            Some(&(theirs, _)) if theirs == semaphore => {}
            Some(&(theirs, holder)) => {
                keep[i] = false;
                let holder = &probes[holder];
                out.skipped.push(skipped_point(
                    probe,
                    format!(
                        "its site is also {} ({}), whose semaphore is at file offset {theirs:#x}, not {semaphore:#x}: the kernel keeps one per site",
                        holder.spec, holder.point.name
                    ),
                ));
            }
        }
    }
    // (probe, the probe whose semaphore it carries now)
    let mut shared: Vec<(usize, usize)> = Vec::new();
    for (i, probe) in probes.iter_mut().enumerate() {
        if probe.semaphore_offset().is_some() {
            continue;
        }
        if let Some(&(semaphore, holder)) = sites.get(&keys[i]) {
            probe.shared_semaphore = Some(semaphore);
            shared.push((i, holder));
        }
    }
    if !shared.is_empty() {
        let named: Vec<String> = shared
            .iter()
            .map(|&(i, holder)| {
                format!(
                    "{} (on the site of {})",
                    probes[i].spec, probes[holder].spec
                )
            })
            .collect();
        let shown: Vec<&str> = named.iter().take(3).map(String::as_str).collect();
        out.lines.push(format!(
            "probetop: {} probe{} on a USDT site with a semaphore: {}{}; the kernel keeps one semaphore per site, so it is raised while any probe there is attached",
            named.len(),
            if named.len() == 1 { "" } else { "s" },
            shown.join(", "),
            if named.len() > shown.len() { ", ..." } else { "" }
        ));
    }
    if !out.skipped.is_empty() {
        let mut flags = keep.into_iter();
        probes.retain(|_| flags.next().unwrap_or(true));
    }
    out
}

/// The line said when duplicates were merged.
pub(super) fn merged_line(merged: usize) -> String {
    format!(
        "probetop: merged {merged} duplicate probe point{} (same object, offset and kind; each row keeps the spec written first)",
        if merged == 1 { "" } else { "s" }
    )
}

/// `--max-probes` caps every spec's matches (in the resolver) and the run's total here.
pub(super) fn check_total(total: usize, max: usize, specs: usize) -> Result<(), UsageError> {
    if total > max {
        return Err(UsageError(format!(
            "{total} probe points from {specs} spec{} in all, more than --max-probes {max}: narrow the specs, or raise --max-probes",
            if specs == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

/// Drops the points whose instruction `list` already marks as refused (a segment or
/// lock prefix, an opcode the kernel will not probe): the kernel fails the attach with
/// ENOTSUPP (524), and on a uprobe_multi link one such point sank the whole glob. Their
/// costs and sites go with them; returns what was skipped.
pub(super) fn skip_refused_sites(
    probes: &mut Vec<Probe>,
    prepared: &mut super::Prepared,
) -> Vec<SkippedPoint> {
    // A test hook: leaves the refusals to the kernel, to test the way on at attach.
    if std::env::var_os("PROBETOP_TEST_NO_SITE_FILTER").is_some() {
        return Vec::new();
    }
    let refused: Vec<bool> = prepared
        .costs
        .iter()
        .map(|c| {
            c.site
                .as_ref()
                .is_some_and(|s| s.class == CostClass::Refused)
        })
        .collect();
    let skipped = probes
        .iter()
        .zip(&prepared.costs)
        .filter_map(|(probe, cost)| {
            let site = cost
                .site
                .as_ref()
                .filter(|s| s.class == CostClass::Refused)?;
            let why = format!(
                "{} ({})",
                site.reason.unwrap_or("refused"),
                site.instruction
            );
            Some(skipped_point(probe, why))
        })
        .collect();
    let mut keep = refused.iter().map(|r| !r);
    let mut flags = keep.clone();
    probes.retain(|_| flags.next().unwrap_or(true));
    let mut flags = keep.clone();
    prepared.costs.retain(|_| flags.next().unwrap_or(true));
    prepared.sites.retain(|_| keep.next().unwrap_or(true));
    skipped
}

fn skipped_point(probe: &Probe, why: String) -> SkippedPoint {
    SkippedPoint {
        spec: probe.spec.clone(),
        name: probe.point.name.clone(),
        object: probe.point.object.display().to_string(),
        file_offset: probe.point.file_offset,
        why,
    }
}

/// Why `list` marks points refused, in the line said when they are skipped.
pub(super) const LISTED_REFUSED: &str = "a prefix or opcode the kernel will not put a breakpoint on; `probetop list` marks them refused";
/// Why points on a site another probe of the run holds with another semaphore are skipped.
pub(super) const SITE_SEMAPHORE_HELD: &str = "another probe of the run holds their site with another USDT semaphore; the export's skipped points name it";
/// Why points the kernel refused at attach time are skipped.
pub(super) const REFUSED_AT_ATTACH: &str = "the kernel answered ENOTSUPP at attach";

/// The line said when points were skipped, and `why`.
pub(super) fn skipped_line(skipped: &[SkippedPoint], why: &str) -> String {
    let names: Vec<&str> = skipped.iter().take(3).map(|s| s.name.as_str()).collect();
    format!(
        "probetop: skipped {} probe point{} the kernel refuses to probe ({why}): {}{}",
        skipped.len(),
        if skipped.len() == 1 { "" } else { "s" },
        names.join(", "),
        if skipped.len() > names.len() {
            ", ..."
        } else {
            ""
        }
    )
}

/// What an attach left to do after the kernel refused some points one by one.
pub(super) struct Attached<'a> {
    pub attachment: &'a mut Attachment,
    pub probes: &'a mut Vec<Probe>,
    pub prepared: &'a mut super::Prepared,
    pub skipped: &'a mut Vec<SkippedPoint>,
}

/// Goes on without the points the kernel refused at attach time (ones `list` could not
/// tell): probe ids must stay `0..n`, so the attached probes with the highest ids move
/// into the refused ones' ids (detached and attached again under the new id, a few
/// links at most), and the rows follow. `Err` with the first failure of any other kind.
/// `config` gives a probe's config; probes fire in `filter_pid` only.
pub(super) fn go_on_without_refused(
    outcomes: Vec<Result<(), AttachError>>,
    run: Attached<'_>,
    config: &dyn Fn(&Probe) -> ProbeConfig,
    filter_pid: u32,
) -> Result<(), AttachError> {
    // (probe id, why the kernel refused it)
    let mut refused: Vec<(usize, String)> = Vec::new();
    let mut run = run;
    for (id, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(()) => {}
            Err(error) if error.point_refused() => {
                refused.push((id, REFUSED_AT_ATTACH.to_string()))
            }
            Err(error) if joined_held_semaphore(&mut run, id, &error, config, filter_pid) => {}
            Err(error) if error.site_held() => refused.push((id, site_held_why(&run.probes[id]))),
            Err(error) => return Err(error),
        }
    }
    if refused.is_empty() {
        return Ok(());
    }
    for (id, why) in &refused {
        run.skipped
            .push(skipped_point(&run.probes[*id], why.clone()));
    }
    let refused: Vec<usize> = refused.into_iter().map(|(id, _)| id).collect();
    let refused_set: HashSet<usize> = refused.iter().copied().collect();
    let keep = run.probes.len() - refused.len();
    let holes: Vec<usize> = refused.iter().copied().filter(|&id| id < keep).collect();
    let movers: Vec<usize> = (keep..run.probes.len())
        .filter(|id| !refused_set.contains(id))
        .collect();
    let mover_ids: Vec<u32> = movers.iter().map(|&id| id as u32).collect();
    // Their links close here (each waits for the kernel's grace period).
    drop(run.attachment.retire_set(&mover_ids));
    for (&hole, &mover) in holes.iter().zip(&movers) {
        run.probes.swap(hole, mover);
        run.prepared.costs.swap(hole, mover);
        run.prepared.sites.swap(hole, mover);
    }
    run.probes.truncate(keep);
    run.prepared.costs.truncate(keep);
    run.prepared.sites.truncate(keep);
    let configs: Vec<ProbeConfig> = holes.iter().map(|&id| config(&run.probes[id])).collect();
    let requests: Vec<AttachRequest> = holes
        .iter()
        .zip(&configs)
        .map(|(&id, &config)| run.probes[id].request(id as u32, config, filter_pid))
        .collect();
    run.attachment.attach_all(&requests)
}

/// A probe the kernel refused with EINVAL (another tool holds the site with another
/// semaphore offset: probetop's counter of that tool's probe, or a probe of its own on
/// the same breakpoint) attached again with the owner's offset where that writes
/// nothing into the target (`others::held_semaphore_to_join`); whether it is attached
/// now.
fn joined_held_semaphore(
    run: &mut Attached<'_>,
    id: usize,
    error: &AttachError,
    config: &dyn Fn(&Probe) -> ProbeConfig,
    filter_pid: u32,
) -> bool {
    let probe = &mut run.probes[id];
    let Some(held) = super::others::held_semaphore_to_join(probe, error, filter_pid) else {
        return false;
    };
    let request = probe.request(id as u32, config(probe), filter_pid);
    if run
        .attachment
        .attach_all(std::slice::from_ref(&request))
        .is_ok()
    {
        say!("probetop: {}", super::others::joined_line(probe, held));
        return true;
    }
    super::others::unjoin(&mut run.probes[id]);
    false
}

/// Why the kernel refused `probe` with EINVAL: another tool holds its site with another
/// USDT semaphore offset (the run's own probes share theirs, [`share_site_semaphores`]),
/// named as far as the kernel shows it.
fn site_held_why(probe: &Probe) -> String {
    let site = format!(
        "{}+{:#x}",
        probe.point.object.display(),
        probe.point.file_offset
    );
    let ours = match probe.semaphore_offset() {
        Some(offset) => format!("with its semaphore at file offset {offset:#x}"),
        None => "without a semaphore".to_string(),
    };
    let holders = crate::attach::bpf_stats::holders_at(
        &probe.point.attach_path,
        probe.point.file_offset,
        &[std::process::id()],
    );
    let held_by = if holders.is_empty() {
        "a probe of another tool (not a BPF program probetop can see: a perf or tracefs uprobe?)"
            .to_string()
    } else {
        holders
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    format!(
        "its site {site} is held by {held_by}, and the kernel keeps one USDT semaphore per site: this probe, {ours}, cannot join it (EINVAL; the kernel log says `ref_ctr_offset mismatch`); stop the other probe, or probe a point beside it"
    )
}

/// One line per point skipped because another holds its site, at most this many.
const SITE_HELD_LINES: usize = 5;

/// The lines said for points skipped at attach time: one for those the kernel will not
/// probe, and one each (up to [`SITE_HELD_LINES`]) for those whose site another holds.
pub(super) fn late_skipped_lines(late: &[SkippedPoint]) -> Vec<String> {
    let (plain, held): (Vec<&SkippedPoint>, Vec<&SkippedPoint>) =
        late.iter().partition(|s| s.why == REFUSED_AT_ATTACH);
    let mut lines = Vec::new();
    if !plain.is_empty() {
        let plain: Vec<SkippedPoint> = plain.into_iter().cloned().collect();
        lines.push(skipped_line(&plain, REFUSED_AT_ATTACH));
    }
    for point in held.iter().take(SITE_HELD_LINES) {
        lines.push(format!(
            "probetop: {} ({}) not attached: {}",
            point.spec, point.name, point.why
        ));
    }
    if held.len() > SITE_HELD_LINES {
        lines.push(format!(
            "probetop: and {} more probe points not attached for the same reason (the export's skipped points list them)",
            held.len() - SITE_HELD_LINES
        ));
    }
    lines
}

/// Most IFUNC names one line shows.
const IFUNC_NAMES_SHOWN: usize = 5;

/// One line about IFUNCs a pattern matched: they are probed at their resolvers, which
/// run once at load and so count (nearly) nothing; naming one probes what it chose.
pub(super) fn ifunc_resolvers_line(
    points: &[(&str, &crate::resolve::ProbePoint)],
) -> Option<String> {
    let names: Vec<&str> = points
        .iter()
        .filter(|(_, p)| p.ifunc_resolver)
        .map(|(_, p)| p.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    let more = names.len().saturating_sub(IFUNC_NAMES_SHOWN);
    let mut shown = names
        .iter()
        .take(IFUNC_NAMES_SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if more > 0 {
        shown.push_str(&format!(" and {more} more"));
    }
    Some(format!(
        "probetop: warning: {} IFUNC{} matched by a pattern ({shown}) probed at {} once at load: such a probe counts nearly nothing; name one (uprobe:libc:strlen) to probe the implementation the target calls",
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        if names.len() == 1 {
            "its resolver, which runs"
        } else {
            "their resolvers, which run"
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_above_the_cap_are_refused() {
        assert!(check_total(3, 3, 2).is_ok());
        let refused = check_total(4, 3, 2).expect_err("above the cap");
        assert!(refused.0.contains("more than --max-probes 3"), "{refused}");
    }
}
