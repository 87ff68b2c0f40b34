//! The last phase: one cut for every probe, the collector stopped, what happened said,
//! the summary printed and the exports written, and only then the probes detached.

use std::{io, time::Duration};

use anyhow::{Context as _, bail};

use super::drive::{Driven, silent_probes};
use super::report::{self, build_report};
use super::start::Running;
use super::{StopReason, processes, stop, traced};
use crate::cli::RunArgs;
use crate::present::{self, export};
use crate::stream::{self, Collected, CollectorCommand};
use crate::sys;

pub(super) async fn finish(run: Running, driven: Driven, args: &RunArgs) -> anyhow::Result<()> {
    let Running {
        target,
        pin,
        several,
        attachment,
        labels,
        source,
        commands,
        collector,
        mut in_situ,
        mut budget,
        budget_hint,
        follow,
        server,
        otlp,
        maps_watch,
        cgroup_poller,
        others,
        attach_path,
        ..
    } = run;
    stop::exit_on_another_signal();
    // One cut for every probe. The probes stay attached until the exports are written:
    // detaching can take the kernel long (a grace period per perf event), and what was
    // measured must not wait on it, nor be lost if probetop is killed meanwhile. The
    // kernel stops counting at the cut, so hits after it count nowhere. A send fails
    // only if the collector is gone, and then its result says what happened.
    // In situ's last window ends at the cut too: just before it, as reading what the
    // kernel counted takes longer than stopping it.
    if let Some(driver) = in_situ.as_mut() {
        driver.finish();
    }
    if let Some(driver) = budget.as_mut() {
        driver.finish();
    }
    let (reply, closed) = tokio::sync::oneshot::channel();
    let close_ktime_ns = match commands.send(CollectorCommand::CloseWindow { reply }).await {
        Ok(()) => closed.await.unwrap_or_else(|_| stream::ktime_now_ns()),
        Err(_) => stream::ktime_now_ns(),
    };
    let closed_unix_ms = report::unix_now_ms();
    if let Some(server) = server {
        server.abort();
    }
    // The offering task stopped and gone, so the pusher is this function's alone.
    let otlp = match otlp {
        Some((pusher, task)) => {
            task.abort();
            let _ = task.await;
            std::sync::Arc::into_inner(pusher)
        }
        None => None,
    };
    if let Some(watch) = maps_watch {
        watch.abort();
    }
    if let Some(poller) = cgroup_poller {
        poller.abort();
    }
    let _ = commands.send(CollectorCommand::Stop).await;
    let Collected {
        mut aggregator,
        mut pricer,
        intervals,
    } = collector.await.context("the collector task failed")?;
    // Measured from the window's opening (or the last reset) to the cut.
    let duration =
        Duration::from_nanos(close_ktime_ns.saturating_sub(aggregator.window_start_ns()));
    let started_unix_ms = closed_unix_ms.saturating_sub(duration.as_millis() as u64);

    for note in &driven.notes {
        say!("probetop: {note}");
    }
    // What happened during the run (auto mode's moves) comes before how it ended; the
    // collector said most as they came.
    for notice in aggregator.notices.iter().skip(aggregator.notices_said) {
        say!("probetop: {notice}");
    }
    // The program probed last: the first one, unless execs were followed.
    let current = follow.as_ref().map_or(&target, |f| f.current());
    match driven.reason {
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
        StopReason::Duration
        | StopReason::UserQuit
        | StopReason::TerminalLost
        | StopReason::CgroupRemoved => {}
    }
    if !several && !driven.hinted {
        let hits: Vec<u64> = aggregator.probes().iter().map(|p| p.hits()).collect();
        for line in processes::silent_probe_hints(target.pid, &silent_probes(&source, &hits)) {
            say!("probetop: {line}");
        }
    }
    // Other tools' programs as the kernel's statistics measured them (--bpf-stats).
    let other_programs = others.finish();
    {
        let rows = source.rows();
        for (cost, probe) in pricer.costs_mut().iter_mut().zip(&rows.probes) {
            if let (Some(site), Some(assumed)) = (&probe.other, cost.other) {
                cost.other = Some(super::others::measured_price(
                    assumed,
                    site,
                    &other_programs,
                ));
            }
            super::others::measured_shared(&mut cost.shared, probe, &other_programs);
        }
    }
    let mut snapshot = pricer.snapshot(&aggregator, duration);
    let budget_summary = budget.as_mut().map(|driver| {
        let counted: Vec<u64> = snapshot.probes.iter().map(|p| p.hits).collect();
        super::budget::scale_rows(&mut snapshot, driver.scaled(&counted))
    });
    pricer.price_latency(&mut aggregator);
    let priced = pricer.measurements(&aggregator);
    let measured = &priced.measurements;
    if let Some(line) = ended_in_clock_phase(args, &measured.probes) {
        say!("probetop: {line}");
    }
    let in_situ_summary = in_situ.as_ref().map(|driver| {
        let hits: u64 = measured.probes.iter().map(|p| p.hits).sum();
        driver.summary(hits)
    });
    let run_s = duration.as_secs_f64();
    // Under --in-situ, the seconds the probes were attached (None when never detached).
    let attached_s = in_situ_summary
        .as_ref()
        .filter(|s| s.seconds_off > 0.0)
        .map(|s| present::answer::attached_seconds(s, run_s));
    // Printed after the summary table, which leads with the headline; under --in-situ
    // its rates are over the attached time, as the table's are.
    // Pairs with a half `--budget` detached for the rest of the run.
    let shed = budget
        .as_ref()
        .map(|driver| driver.shed_ids().to_vec())
        .unwrap_or_default();
    let latency_rows: Vec<crate::aggregate::LatencyRow> = measured
        .latency
        .iter()
        .cloned()
        .map(|mut row| {
            row.shed = row
                .starts
                .iter()
                .chain(&row.ends)
                .any(|id| shed.contains(id));
            row
        })
        .collect();
    let latency_table = (!latency_rows.is_empty())
        .then(|| present::summary::latency_table(&latency_rows, run_s, attached_s));
    // Priced once: the lines below and the exports show the same numbers. The report
    // is made first: with --in-situ its reconciled answer leads the lines.
    let run_cost = super::run_report(&aggregator, &priced, duration, other_programs);
    let rows = source.rows();
    let mut report = build_report(
        &target,
        &rows,
        &priced,
        &intervals,
        started_unix_ms,
        duration,
        several,
    );
    report.cost = run_cost;
    report.attach_path = Some(attach_path);
    report.target_cpu = measured.target_cpu;
    report.target_cpu_error = measured.target_cpu_error;
    report.latency = measured.latency.clone();
    report.keyed = measured.keyed.clone();
    if let Some(summary) = in_situ_summary {
        report.apply_in_situ(summary);
    }
    if let Some(summary) = budget_summary {
        report.apply_budget(summary);
    }
    let answer = present::answer::Answer::of(&report).map(|a| a.lines());
    sys::stderr::say_text(&crate::present::cost_report::report(
        &labels,
        &aggregator,
        &priced,
        duration,
        &report.cost.bracket,
        report
            .cost
            .in_situ
            .as_ref()
            .zip(answer.as_deref())
            .map(|(_, answer)| present::cost_report::InSituEnd {
                answer,
                attached_s: attached_s.unwrap_or(run_s),
            }),
    ));
    if let Some(summary) = &report.cost.in_situ {
        say!("probetop: {}", summary.details_line());
    }
    if let Some(summary) = &report.budget {
        say!("probetop: {}", summary.line());
    }
    if let Some(line) = budget_hint.and_then(|mut hint| {
        // Under --in-situ the hits are the attached windows' only.
        let attached = attached_s
            .filter(|_| run_s > 0.0)
            .map_or(1.0, |a| a / run_s);
        hint.line(
            snapshot
                .probes
                .iter()
                .filter_map(|p| p.whole_cost_ns.map(|ns| ns * p.hits as f64))
                .sum(),
            attached,
        )
    }) {
        say!("probetop: {line}");
    }
    sys::stderr::say_text(&crate::attach::bpf_stats::render(
        &report.cost.other_programs,
    ));

    // The summary table leads with the report's headline (in situ where measured).
    // After SIGHUP stdout may be a terminal that is gone: print! would panic (and abort)
    // before the exports are written, so a failed write is ignored.
    {
        use std::io::Write as _;
        let mut out = io::stdout().lock();
        let _ = out
            .write_all(
                sys::stderr::terminal_safe(&present::summary::table(
                    &labels,
                    &snapshot,
                    Some(&report),
                ))
                .as_bytes(),
            )
            .and_then(|()| match &latency_table {
                Some(table) => out.write_all(sys::stderr::terminal_safe(table).as_bytes()),
                None => Ok(()),
            })
            .and_then(|()| out.flush());
    }
    if let Some(line) = present::answer::closing(&report) {
        say!("probetop: {line}");
    }
    // The pushes so far go into the exports; the final one's count is written again
    // into the JSON exports once it is answered, so that a second signal during its wait
    // (up to 5 s) loses nothing measured.
    report.otlp = otlp.as_ref().map(present::otlp::Pusher::so_far);
    let mut failed = Vec::new();
    let mut written_json = Vec::new();
    for path in &args.exports {
        match export::write(&report, path, args.force) {
            Ok(written) => {
                for line in wrote_lines(&written) {
                    say!("probetop: {line}");
                }
                if export::is_json(path) {
                    written_json.push(path);
                }
            }
            Err(e) => failed.push(e.to_string()),
        }
    }
    // The final numbers, the exports' own, go to the collector last.
    if let Some(pusher) = otlp {
        let resource = present::otlp::resource(&report);
        let pushes = pusher.finish(&report, &resource);
        if let Some(line) = present::otlp::lost_line(&pushes) {
            say!("probetop: {line}");
        }
        if report.otlp.as_ref() != Some(&pushes) {
            report.otlp = Some(pushes);
            for path in written_json {
                if let Err(e) = export::write(&report, path, args.force) {
                    failed.push(e.to_string());
                }
            }
        }
    }
    if let Some(line) = traced::warning_at_exit(&target) {
        say!("probetop: {line}");
    }
    stop::detach_with_progress(attachment).await;
    // Held until no probe can be attached through it again (`space`): its number must
    // not name another file meanwhile.
    drop(pin);
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    Ok(())
}

/// `--mode kernel` asked for, but the run ended before some probes left the clock
/// phase (`--clock-seconds`): their numbers are ring mode's, which the export's `mode`
/// says and this line explains.
fn ended_in_clock_phase(
    args: &RunArgs,
    probes: &[crate::aggregate::ProbeMeasurements],
) -> Option<String> {
    use crate::delivery::DeliveryMode;
    if args.mode != crate::cli::Mode::Kernel {
        return None;
    }
    let streamed = probes
        .iter()
        .filter(|p| p.mode == DeliveryMode::Ring)
        .count();
    (streamed > 0).then(|| {
        format!(
            "the run ended within --mode kernel's clock phase (--clock-seconds {}): {streamed} of {} probes streamed every hit to the end, so their numbers are ring mode's (\"mode\": \"ring\" in exports); run longer, or pass --clock-seconds 0, to measure in the kernel",
            args.clock_seconds,
            probes.len()
        )
    })
}

/// What an export wrote, a line a file; an export of many files (`.hgrm`, one per probe:
/// 186 with `uprobe:THD::*`) in one line, its first and last file named, so the lines
/// that matter above it stay on the screen.
fn wrote_lines(files: &[std::path::PathBuf]) -> Vec<String> {
    const NAMED: usize = 3;
    match files {
        [first, .., last] if files.len() > NAMED => vec![format!(
            "wrote {} files, one per probe and latency row: {} to {}",
            files.len(),
            first.display(),
            last.display()
        )],
        _ => files
            .iter()
            .map(|f| format!("wrote {}", f.display()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    #[test]
    fn many_files_of_one_export_are_one_line() {
        let files = |n: usize| -> Vec<PathBuf> {
            (0..n)
                .map(|i| PathBuf::from(format!("run.f{i}.hgrm")))
                .collect()
        };
        assert_eq!(
            super::wrote_lines(&files(3)),
            [
                "wrote run.f0.hgrm",
                "wrote run.f1.hgrm",
                "wrote run.f2.hgrm"
            ]
        );
        assert_eq!(
            super::wrote_lines(&files(186)),
            ["wrote 186 files, one per probe and latency row: run.f0.hgrm to run.f185.hgrm"]
        );
        assert!(super::wrote_lines(&[]).is_empty());
    }
}
