//! One probing run, start to finish, as phases: [`plan`] (the arguments checked, the
//! target opened) -> [`find`] (the specs resolved to probe points) -> [`start`] (loaded,
//! attached, the collector running) -> [`drive`] (measuring until something stops it)
//! -> [`finish`] (exports written, then the probes detached). With `--follow-exec`,
//! [`follow`] resolves and attaches again in every program the target execs.

/// A line on stderr, held while the TUI has the terminal; a failed write is ignored:
/// after SIGHUP the terminal is gone, and eprintln! would panic (and abort) before the
/// exports are written.
macro_rules! say {
    ($($arg:tt)*) => {{
        $crate::sys::say(&format!($($arg)*));
    }};
}

mod budget;
mod commands;
mod drive;
mod find;
mod finish;
mod follow;
mod host;
mod insitu;
mod maps_watch;
mod others;
mod plan;
mod points;
mod probe;
mod processes;
mod report;
mod specs;
mod start;
mod stop;
mod traced;

pub(crate) use commands::{calibrate, diff, list};

use crate::cli::RunArgs;
// What the phases use of the price stage: the costs prepared before the run, the
// Pricer the collector owns, and the priced results the run's end reports.
use crate::price::{
    AssumeChoice, Assumer, Assumption, OtherPrice, Prepared, Pricer, ProbeCost, ProgramMethod, Run,
    SharedOwner, Snapshot, entry_warnings, label_tag, prepare_costs, run_report,
};

/// Why measuring stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    Duration,
    Signal(&'static str),
    TargetExited,
    /// The target exec'd another program; the probes no longer fire.
    TargetExeced,
    UserQuit,
    /// The TUI's terminal went away (writes and reads fail): measuring stops as on
    /// SIGHUP, and what was measured is exported.
    TerminalLost,
    /// `--cgroup`'s directory was removed and no `--pid` process is left to count
    /// (said by the cgroup poller).
    CgroupRemoved,
}

/// `probetop [run]`: every phase in turn. An error before [`start`] leaves nothing
/// attached; one after it drops the attachment, which detaches every probe.
pub(crate) async fn run(mut args: RunArgs) -> anyhow::Result<()> {
    if args.all {
        return host::run(args).await;
    }
    stop::stop_before_attaching()?;
    if args.assume == AssumeChoice::Gap {
        say!("probetop: --assume gap is retired: pricing as --assume clock");
        args.assume = AssumeChoice::Clock;
    }
    let plan = plan::Plan::from_args(&args)?;
    // A target that exits while probetop starts makes some step fail (a read of its
    // files, an attach to its pid): that is said as what it is. What was attached by
    // then is detached as the attachment drops.
    let target = plan.target.clone();
    let mut found = find::find(&plan, &args).map_err(|e| plan::exited_or(&target, e))?;
    if found.probes.is_empty() {
        match wait_for_probes(&plan, &args)
            .await
            .map_err(|e| plan::exited_or(&target, e))?
        {
            Some(more) => found = more,
            None => return Ok(()),
        }
    }
    let mut running = start::start(plan, found, &args)
        .await
        .map_err(|e| plan::exited_or(&target, e))?;
    let driven = drive::drive(&mut running, &args).await?;
    finish::finish(running, driven, &args).await
}

/// No spec and no other tool's probe on the target: says so in one line, then looks
/// again every second until some appear (`Some`), or the run ends first: `--duration`,
/// a signal, the target's exit (`None`, after the empty table and exports).
async fn wait_for_probes(plan: &plan::Plan, args: &RunArgs) -> anyhow::Result<Option<find::Found>> {
    use std::time::{Duration, Instant};
    let target = &plan.target;
    say!(
        "probetop: pid {} ({}) has no uprobe, uretprobe or USDT probe on it from any tool; watching for one every second, Ctrl-C stops (give -e SPEC to probe it yourself)",
        target.pid,
        target.comm
    );
    let started = Instant::now();
    let stop = stop::shutdown_signal(target, args.duration.map(Duration::from_secs_f64), true)?;
    tokio::pin!(stop);
    let mut every = tokio::time::interval(Duration::from_secs(1));
    every.tick().await;
    loop {
        tokio::select! {
            reason = &mut stop => {
                match reason {
                    StopReason::Signal(name) => say!("probetop: {name}"),
                    StopReason::TargetExited => say!("probetop: pid {} exited", target.pid),
                    _ => {}
                }
                break;
            }
            _ = every.tick() => {
                let found = find::find(plan, args)?;
                if !found.probes.is_empty() {
                    return Ok(Some(found));
                }
            }
        }
    }
    report::write_empty(target, started.elapsed(), args)?;
    Ok(None)
}
