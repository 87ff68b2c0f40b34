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

mod commands;
mod drive;
mod find;
mod finish;
mod follow;
mod insitu;
mod maps_watch;
mod plan;
mod points;
mod probe;
mod processes;
mod report;
mod specs;
mod start;
mod stop;
mod traced;

pub use commands::{calibrate, list};

use crate::cli::RunArgs;

/// Why measuring stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
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
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    stop::stop_before_attaching()?;
    let plan = plan::Plan::from_args(&args)?;
    // A target that exits while probetop starts makes some step fail (a read of its
    // files, an attach to its pid): that is said as what it is. What was attached by
    // then is detached as the attachment drops.
    let target = plan.target.clone();
    let found = find::find(&plan, &args).map_err(|e| plan::exited_or(&target, e))?;
    let mut running = start::start(plan, found, &args)
        .await
        .map_err(|e| plan::exited_or(&target, e))?;
    let driven = drive::drive(&mut running, &args).await?;
    finish::finish(running, driven, &args).await
}
