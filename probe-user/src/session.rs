//! One probing run, start to finish: specs -> resolve -> attach -> stream -> aggregate
//! -> present, then detach and export.

use std::{
    future::Future,
    io,
    os::fd::{FromRawFd as _, OwnedFd},
    path::Path,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, bail};
use tokio::{
    io::{Interest, unix::AsyncFd},
    signal::unix::{SignalKind, signal},
    sync::{mpsc, watch},
};

use crate::aggregate::{Aggregator, IntervalLog, Snapshot};
use crate::attach::{self, AttachRequest, Attachment, LoadOptions};
use crate::cli::{Mode, RunArgs};
use crate::present::{
    self, ProbeLabel,
    export::{self, Interval, ProbeReport, Report},
    tui::{self, UiExit},
};
use crate::resolve::{self, ProbePoint, ResolveOptions};
use crate::spec::{ProbeKind, ProbeSpec};
use crate::stream::{self, Collected, CollectorCommand, CollectorOptions, HitStream};
use crate::target::Target;
use crate::{UsageError, preset, privileges};
use probe_common::{ProbeConfig, mode};

/// Why measuring stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Duration,
    Signal(&'static str),
    TargetExited,
    /// The target exec'd another program; the probes no longer fire.
    TargetExeced,
    UserQuit,
}

/// A resolved probe with the spec that asked for it.
struct Probe {
    spec: String,
    point: ProbePoint,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let specs = collect_specs(&args)?;
    let pid = args.pid.ok_or_else(|| {
        UsageError("which process? give --pid PID (for example --pid $(pidof mariadbd))".into())
    })?;
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
    if !args.ring_mib.is_power_of_two() {
        bail!(UsageError(format!(
            "--ring-mib {}: the kernel needs a power of two (4, 8, 16, ...)",
            args.ring_mib
        )));
    }
    privileges::check()?;
    let target = Target::open(pid)?;
    for path in &args.exports {
        check_export_format(&target, path)?;
    }

    let resolve_options = ResolveOptions {
        max_probes: args.max_probes,
        ..Default::default()
    };
    let mut probes = Vec::new();
    for spec in &specs {
        for point in resolve::resolve_with(&target, spec, &resolve_options)? {
            probes.push(Probe {
                spec: spec.text.clone(),
                point,
            });
        }
    }
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
    eprintln!(
        "probetop: {} probe point{} from {} spec{}",
        probes.len(),
        if probes.len() == 1 { "" } else { "s" },
        specs.len(),
        if specs.len() == 1 { "" } else { "s" }
    );

    let probe_config = ProbeConfig {
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
        interval: wants_intervals.then(|| Duration::from_secs_f64(args.interval)),
    };
    let mut attachment = Attachment::load(LoadOptions {
        ring_bytes: args.ring_mib << 20,
        probe_count: probes.len() as u32,
        ..Default::default()
    })?;
    // Signals are handled from here on, so an interrupt while attaching still detaches.
    let shutdown = shutdown_signal(&target, args.duration.map(Duration::from_secs_f64))?;
    for (id, probe) in probes.iter().enumerate() {
        let mut config = probe_config;
        if args.args > 0 {
            match attach::args::args_config(&probe.point, args.args) {
                Ok(captured) => config.args = captured,
                Err(e) => eprintln!(
                    "probetop: {}: no argument values for {}: {e}",
                    probe.spec, probe.point.name
                ),
            }
        }
        let request = AttachRequest {
            probe_id: id as u32,
            kind: probe.point.kind,
            path: &probe.point.attach_path,
            file_offset: probe.point.file_offset,
            semaphore_offset: probe.point.usdt.as_ref().and_then(|u| u.semaphore_offset),
            config,
            pid,
        };
        attachment
            .attach(&request)
            .with_context(|| format!("attaching {}", probe.spec))?;
    }
    let ring = attachment.take_ring()?;
    let counters = attachment.take_counters()?;
    let mut aggregator = Aggregator::new(probes.len());
    for probe in aggregator.probes_mut() {
        probe.mode = probe_config.mode;
    }
    aggregator.open_window(stream::ktime_now_ns());
    stream::baseline_kernel_counters(&counters, &mut aggregator);
    let started = Instant::now();
    let started_unix_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    eprintln!(
        "probetop: attached {} probe{} to pid {} ({})",
        probes.len(),
        if probes.len() == 1 { "" } else { "s" },
        target.pid,
        target.comm
    );

    // A test hook: a panic with probes attached must leave none behind (see tests/attach.rs).
    if std::env::var_os("PROBETOP_TEST_PANIC_AFTER_ATTACH").is_some() {
        panic!("PROBETOP_TEST_PANIC_AFTER_ATTACH is set");
    }

    let labels: Vec<ProbeLabel> = probes
        .iter()
        .map(|p| {
            ProbeLabel::new(
                p.point.kind,
                &p.point.name,
                &p.point.object.display().to_string(),
            )
        })
        .collect();
    let (snapshot_tx, snapshot_rx) = watch::channel(Snapshot::default());
    let (command_tx, command_rx) = mpsc::channel(4);
    let collector = tokio::spawn(stream::collect(
        HitStream::new(ring)?,
        counters,
        aggregator,
        collector_options,
        snapshot_tx,
        command_rx,
    ));

    let reason = if args.no_tui {
        shutdown.await
    } else {
        let target_line = tui::TargetLine {
            pid: target.pid,
            comm: target.comm.clone(),
        };
        match tui::run(target_line, labels.clone(), snapshot_rx.clone(), shutdown).await? {
            UiExit::Quit => StopReason::UserQuit,
            UiExit::Shutdown(reason) => reason,
        }
    };

    // One cut for every probe, although the kernel detaches them one at a time. A send
    // fails only if the collector is gone, and then its result says what happened.
    let close = CollectorCommand::CloseWindow {
        at_ktime_ns: stream::ktime_now_ns(),
    };
    let duration = started.elapsed();
    let _ = command_tx.send(close).await;
    attachment.detach_all();
    let _ = command_tx.send(CollectorCommand::Stop).await;
    let Collected {
        aggregator,
        intervals,
    } = collector.await.context("the collector task failed")?;
    drop(attachment);

    match reason {
        StopReason::TargetExited => eprintln!("probetop: pid {} exited", target.pid),
        StopReason::TargetExeced => eprintln!(
            "probetop: pid {} exec'd {}: probes on {} no longer fire; measurements up to the exec follow",
            target.pid,
            target
                .exec_changed()
                .map_or_else(|| "another program".into(), |p| p.display().to_string()),
            target.exe.display()
        ),
        StopReason::Signal(name) => eprintln!("probetop: {name}, detached"),
        StopReason::Duration | StopReason::UserQuit => {}
    }
    for notice in &aggregator.notices {
        eprintln!("probetop: {notice}");
    }
    let snapshot = aggregator.snapshot(duration);
    print!("{}", present::summary::table(&labels, &snapshot));

    let report = build_report(
        &target,
        &probes,
        &aggregator,
        &intervals,
        started_unix_ms,
        duration,
    );
    let mut failed = Vec::new();
    for path in &args.exports {
        match export::write(&report, path, args.force) {
            Ok(written) => {
                for file in written {
                    eprintln!("probetop: wrote {}", file.display());
                }
            }
            Err(e) => failed.push(e.to_string()),
        }
    }
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    Ok(())
}

/// Specs from -e and -f, parsed; a malformed one is a usage error with a caret.
fn collect_specs(args: &RunArgs) -> anyhow::Result<Vec<ProbeSpec>> {
    let mut texts: Vec<String> = args.probes.clone();
    if let Some(file) = &args.spec_file {
        let content = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read spec file {}", file.display()))?;
        texts.extend(spec_lines(&content));
    }
    for name in &args.presets {
        let text = preset::text(name).map_err(|e| UsageError(format!("--preset: {e}")))?;
        texts.extend(spec_lines(text));
    }
    if texts.is_empty() {
        bail!(UsageError(
            "no probes: give at least one -e SPEC (for example -e uprobe:my_func) or a --preset"
                .into()
        ));
    }
    texts
        .iter()
        .map(|t| ProbeSpec::parse(t).map_err(|e| UsageError(format!("bad probe spec: {e}")).into()))
        .collect()
}

/// Lines of a spec file without comments and blanks.
fn spec_lines(content: &str) -> impl Iterator<Item = String> + '_ {
    content
        .lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|line| !line.is_empty())
        .map(str::to_string)
}

/// Fails early, before anything is attached, on an export path probetop cannot write.
fn check_export_format(target: &Target, path: &Path) -> anyhow::Result<()> {
    let empty = Report {
        target: target.clone(),
        started_unix_ms: 0,
        duration_s: 0.0,
        probes: Vec::new(),
    };
    export::render(&empty, path)
        .map_err(|e| UsageError(format!("--export {}: {e}", path.display())))?;
    Ok(())
}

fn build_report(
    target: &Target,
    probes: &[Probe],
    aggregator: &Aggregator,
    intervals: &IntervalLog,
    started_unix_ms: u64,
    duration: Duration,
) -> Report {
    Report {
        target: target.clone(),
        started_unix_ms,
        duration_s: duration.as_secs_f64(),
        probes: probes
            .iter()
            .zip(aggregator.probes())
            .enumerate()
            .map(|(id, (probe, measured))| ProbeReport {
                id: id as u32,
                spec: probe.spec.clone(),
                kind: probe.point.kind,
                name: probe.point.name.clone(),
                object: probe.point.object.display().to_string(),
                address: probe.point.address,
                file_offset: probe.point.file_offset,
                mode: measured.mode,
                last_args: measured.last_args.map(|a| a.values().collect()),
                threads: {
                    let mut threads: Vec<(u32, u64)> =
                        measured.threads.iter().map(|(t, n)| (*t, *n)).collect();
                    threads.sort_unstable();
                    threads
                },
                hits: measured.hits(),
                dropped: measured.dropped,
                handler_ns: measured.handler_ns.clone(),
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
/// SIGHUP (a lost terminal), or when the target exits.
fn shutdown_signal(
    target: &Target,
    duration: Option<Duration>,
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
    if !target.is_alive() {
        bail!("pid {} exited before probes were attached", target.pid);
    }
    let watched = target.clone();
    Ok(async move {
        // exec raises no event on a pidfd, so look every quarter second.
        let execed = async {
            let mut every = tokio::time::interval(Duration::from_millis(250));
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
        println!("{}", present::list::render_json(&listing)?);
    } else {
        print!("{}", present::list::render_text(&listing));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_file_lines() {
        let lines: Vec<String> =
            spec_lines("# probes\nuprobe:a\n\n  uretprobe:b  # return\n#x\n").collect();
        assert_eq!(lines, ["uprobe:a", "uretprobe:b"]);
    }
}
