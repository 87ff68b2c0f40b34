//! What a report is made of besides the measurements: the probe rows, the execs
//! followed, the points skipped; and the way to ask the running collector for a copy
//! (exports on `e`, scrapes of `--listen`).

use std::{
    path::{Path, PathBuf},
    sync::RwLock,
    time::{Duration, SystemTime},
};

use tokio::sync::{mpsc, oneshot};

use super::Run;
use super::probe::Probe;
use crate::UsageError;
use crate::aggregate::IntervalLog;
use crate::present::export::{self, ExecReport, Interval, ProbeReport, Report};
use crate::stream::{self, CollectorCommand, Copied};
use crate::target::Target;

/// Every probe row of the run, and the execs followed: rows are only ever appended
/// (`--follow-exec`), so a probe id indexes them for the whole run.
#[derive(Debug, Clone, Default)]
pub(super) struct Rows {
    pub probes: Vec<Probe>,
    pub execs: Vec<ExecReport>,
    /// Points matched but not attached (the kernel refuses them).
    pub skipped: Vec<export::SkippedPoint>,
    /// Probed objects replaced on disk and loaded again ([`super::maps_watch`]).
    pub replaced: Vec<export::ReplacedObject>,
}

/// What a report needs besides the measurements, and the way to ask the collector for
/// them while it runs (exports on `e`, scrapes of `--listen`).
pub(super) struct ReportSource {
    pub target: Target,
    /// Written by the session when it follows an exec; read by reports.
    pub rows: RwLock<Rows>,
    pub commands: mpsc::Sender<CollectorCommand>,
    /// The in-situ measurement so far (`--in-situ`), updated at every window change.
    pub in_situ: RwLock<Option<crate::insitu::InSituSummary>>,
    /// `--budget`'s duty cycle so far (for `--listen`).
    pub budget: RwLock<Option<crate::insitu::budget::BudgetSummary>>,
    pub attach_path: &'static str,
    /// Several processes probed: reports split each probe by process.
    pub several: bool,
}

impl ReportSource {
    /// A copy of the rows now.
    pub(super) fn rows(&self) -> Rows {
        // Nothing panics while holding the lock; if something did, the rows are whole.
        self.rows
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Changes the rows (the session, following an exec).
    pub(super) fn update_rows(&self, change: impl FnOnce(&mut Rows)) {
        change(
            &mut self
                .rows
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }

    /// A report of everything measured up to now; `None` once the collector has stopped.
    pub(super) async fn report(&self, with_intervals: bool) -> Option<Report> {
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
        let duration = Duration::from_nanos(
            now_ktime_ns.saturating_sub(measurements.measurements.window_start_ns),
        );
        let mut report = build_report(
            &self.target,
            &self.rows(),
            &measurements,
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
        report.budget = self
            .budget
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        report.attach_path = Some(self.attach_path);
        report.target_cpu = measurements.measurements.target_cpu;
        report.target_cpu_error = measurements.measurements.target_cpu_error;
        report.cost.assumption = measurements.assumption;
        report.latency = measurements.measurements.latency;
        report.keyed = measurements.measurements.keyed;
        Some(report)
    }
}

/// Writes `report` to every path; one line saying what was written or what failed.
pub(super) fn write_exports(report: &Report, paths: &[PathBuf], force: bool) -> String {
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
/// without `--export`, `probetop-<pid>-<unix time>.json` in the working directory. A
/// second `e` in the same second (or onto a name a file already has) gets `-2`, `-3`,
/// ... after the time: no export overwrites another.
pub(super) fn snapshot_export_paths(exports: &[PathBuf], pid: u32, unix_secs: u64) -> Vec<PathBuf> {
    use std::sync::{Mutex, PoisonError};
    // The stamps this run gave out last: (second, how many in it).
    static LAST: Mutex<(u64, u32)> = Mutex::new((0, 0));
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    let mut seq = if last.0 == unix_secs { last.1 + 1 } else { 1 };
    loop {
        let stamp = match seq {
            1 => unix_secs.to_string(),
            n => format!("{unix_secs}-{n}"),
        };
        let paths = stamped_paths(exports, pid, &stamp);
        if seq >= 1000 || !paths.iter().any(|p| p.exists()) {
            *last = (unix_secs, seq);
            return paths;
        }
        seq += 1;
    }
}

/// [`snapshot_export_paths`] with `stamp` in each name.
fn stamped_paths(exports: &[PathBuf], pid: u32, stamp: &str) -> Vec<PathBuf> {
    if exports.is_empty() {
        return vec![PathBuf::from(format!("probetop-{pid}-{stamp}.json"))];
    }
    exports
        .iter()
        .map(|path| {
            let mut name = path.file_stem().unwrap_or_default().to_os_string();
            name.push(format!("-{stamp}"));
            if let Some(ext) = path.extension() {
                name.push(".");
                name.push(ext);
            }
            path.with_file_name(name)
        })
        .collect()
}

pub(super) fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn empty_report(target: &Target, started_unix_ms: u64, duration_s: f64) -> Report {
    Report {
        target: target.clone(),
        started_unix_ms,
        duration_s,
        probes: Vec::new(),
        cost: Default::default(),
        execs: Vec::new(),
        attach_path: None,
        skipped: Vec::new(),
        replaced: Vec::new(),
        target_cpu: None,
        target_cpu_error: None,
        budget: None,
        latency: Vec::new(),
        keyed: Vec::new(),
        otlp: None,
    }
}

/// A run that found nothing to probe: the empty summary table on stdout and every
/// `--export` written with no probe in it.
pub(super) fn write_empty(
    target: &Target,
    waited: Duration,
    args: &crate::cli::RunArgs,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let snapshot = super::Snapshot {
        elapsed: waited,
        ..Default::default()
    };
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(crate::present::summary::table(&[], &snapshot, None).as_bytes())
        .and_then(|()| out.flush());
    let started = unix_now_ms().saturating_sub(waited.as_millis() as u64);
    let report = empty_report(target, started, waited.as_secs_f64());
    for path in &args.exports {
        for file in export::write(&report, path, args.force)? {
            say!("probetop: wrote {}", file.display());
        }
    }
    Ok(())
}

/// Fails early, before anything is attached, on an export path probetop cannot write.
pub(super) fn check_export_format(target: &Target, path: &Path) -> anyhow::Result<()> {
    let empty = empty_report(target, 0, 0.0);
    export::render(&empty, path)
        .map_err(|e| UsageError(format!("--export {}: {e}", path.display())))?;
    Ok(())
}

pub(super) fn build_report(
    target: &Target,
    rows: &Rows,
    priced: &Run,
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
            .zip(&priced.measurements.probes)
            .zip(priced.probe_reports(duration))
            .enumerate()
            .map(|(id, ((probe, measured), cost))| ProbeReport {
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
                cost: crate::present::headline::unpriced_without_hits(
                    cost,
                    measured.hits,
                    probe.other.as_ref().is_some_and(|site| !site.counted),
                ),
                intervals: intervals
                    .of_probe(id as u32)
                    .into_iter()
                    .map(|i| Interval {
                        start_s: i.start_s,
                        length_s: i.length_s,
                        handler_ns: i.handler_ns,
                    })
                    .collect(),
                other: probe.other.clone(),
                moved: measured.moved,
            })
            .collect(),
        cost: Default::default(),
        execs: rows.execs.clone(),
        attach_path: None,
        skipped: rows.skipped.clone(),
        replaced: rows.replaced.clone(),
        target_cpu: None,
        target_cpu_error: None,
        budget: None,
        latency: Vec::new(),
        keyed: Vec::new(),
        otlp: None,
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
        // Twice in one second: another name, never the same file.
        assert_eq!(
            snapshot_export_paths(&[PathBuf::from("/tmp/out/run.json")], 42, 7),
            [PathBuf::from("/tmp/out/run-7-2.json")]
        );
        assert_eq!(
            snapshot_export_paths(&[PathBuf::from("/tmp/out/run.json")], 42, 8),
            [PathBuf::from("/tmp/out/run-8.json")]
        );
    }
}
