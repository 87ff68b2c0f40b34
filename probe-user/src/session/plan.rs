//! The first phase: what the arguments ask for, checked before anything is opened
//! (bad input gets one line saying what to do), and the target opened.

use anyhow::bail;

use super::{processes, report, specs, traced};
use crate::cli::{Mode, RunArgs};
use crate::present::export;
use crate::spec::ProbeSpec;
use crate::target::Target;
use crate::{UsageError, attach, privileges};

/// A run's settings, checked, and its target.
pub(super) struct Plan {
    pub specs: Vec<ProbeSpec>,
    pub scope: processes::Scope,
    /// Several processes probed (`-F`, `--cgroup`, several `--pid`).
    pub several: bool,
    /// The first process, a thread id mapped to its process.
    pub target: Target,
    /// Whose hits the kernel's filter lets through (0: every process's).
    pub filter_pid: u32,
    /// The processes named (`--pid`), opened and checked.
    pub roots: Vec<u32>,
    pub ring_bytes: u32,
    /// `--time-every`, checked against the mode.
    pub time_every: u64,
}

impl Plan {
    pub(super) fn from_args(args: &RunArgs) -> anyhow::Result<Self> {
        let specs = specs::collect(args)?;
        let scope = processes::Scope::from_args(args)?;
        let pid = scope.primary()?;
        let several = scope.several();
        check_numbers(args, several)?;
        ring_bytes(args)?;
        time_every(args.mode, args.time_every)?;
        check_capture(args)?;
        privileges::check()?;
        // Before anything is opened: each probe on the perf-event path holds two
        // descriptors.
        if let Err(e) = attach::fds::raise_limit() {
            say!("probetop: cannot raise the open-file limit ({e}); `ulimit -n` shows it");
        }
        let target = Target::open(pid)?;
        let target_for_errors = target.clone();
        Self::with_target(args, specs, scope, several, target)
            .map_err(|e| exited_or(&target_for_errors, e))
    }

    /// The rest of the plan once the first process is open.
    fn with_target(
        args: &RunArgs,
        specs: Vec<ProbeSpec>,
        scope: processes::Scope,
        several: bool,
        target: Target,
    ) -> anyhow::Result<Self> {
        let ring_bytes = ring_bytes(args)?;
        let time_every = time_every(args.mode, args.time_every)?;
        if let Some(note) = target.identity_note() {
            say!("probetop: {note}");
        }
        // Probes fire only in the process whose memory their filter names: with the
        // main thread gone that is a live thread's, which perf events can name (a
        // uprobe_multi link's filter is the leader's).
        let filter_pid = target.live_thread.unwrap_or(target.pid);
        // Several processes: attached for every process, counted for the set's members.
        let filter_pid = if several { 0 } else { filter_pid };
        let mut roots = vec![target.pid];
        for &other in scope.pids.iter().skip(1) {
            let other = Target::open(other)?;
            traced::check_at_attach(&other, args.force)?;
            roots.push(other.pid);
        }
        traced::check_at_attach(&target, args.force)?;
        for path in &args.exports {
            report::check_export_format(&target, path)?;
            // Found now, not after the whole run: a missing or read-only directory, a
            // link, a FIFO (whose open would hang).
            export::check(path, args.force).map_err(|e| UsageError(e.to_string()))?;
        }
        Ok(Self {
            specs,
            scope,
            several,
            target,
            filter_pid,
            roots,
            ring_bytes,
            time_every,
        })
    }
}

/// `error`, unless the target is gone: whatever failed while probetop was starting on
/// a process that exited (a read of its files, an attach to its pid) failed because it
/// exited, and that is the one thing to say. Usage errors stay what they are.
pub(super) fn exited_or(target: &Target, error: anyhow::Error) -> anyhow::Error {
    // A process in the middle of its exit still reads as running for a moment after
    // its memory (and so its executable's link) is gone.
    let alive = target.is_alive() && crate::sys::procfs::exe_target(target.proc_pid()).is_ok();
    if error.downcast_ref::<UsageError>().is_some() || alive {
        return error;
    }
    crate::target::TargetError::ExitedBeforeAttach(target.pid).into()
}

fn check_numbers(args: &RunArgs, several: bool) -> anyhow::Result<()> {
    if several && args.follow_exec {
        bail!(UsageError(
            "--follow-exec follows one process: run it with one --pid, without --follow-forks or --cgroup".into()
        ));
    }
    // The numbers themselves are range-checked by the parser (cli.rs).
    Ok(())
}

/// The ring buffer's size: `--ring-kib` or `--ring-mib`, a power of two of 4 KiB or
/// more.
fn ring_bytes(args: &RunArgs) -> anyhow::Result<u32> {
    let ring_bytes = match args.ring_kib {
        Some(kib) => kib.checked_mul(1 << 10),
        None => args.ring_mib.checked_mul(1 << 20),
    };
    match ring_bytes {
        Some(bytes) if bytes.is_power_of_two() && bytes >= 4096 => Ok(bytes),
        _ => bail!(UsageError(
            "the ring buffer size must be a power of two, at least 4 KiB and below 4 GiB (--ring-mib 4, 8, 16, ...)".into()
        )),
    }
}

/// One hit in how many has its handler timed: `--time-every`, for the kernel mode and
/// for auto mode once it aggregates a probe in the kernel, where no record needs the
/// handler time of every hit.
fn time_every(mode: Mode, asked: Option<u64>) -> Result<u64, UsageError> {
    match (mode, asked) {
        (_, Some(0)) => Err(UsageError(
            "--time-every 0: give 1 to time every hit, or N to time one hit in N".into(),
        )),
        (Mode::Kernel | Mode::Auto, asked) => Ok(asked.unwrap_or(probe_common::DEFAULT_TIME_EVERY)),
        (_, None | Some(1)) => Ok(1),
        (_, Some(n)) => Err(UsageError(format!(
            "--time-every {n} applies to --mode kernel and auto only: records streamed in the other modes carry every hit's handler time"
        ))),
    }
}

/// `--in-situ`'s settings (`--args`, `--sample-every` and the window's length are
/// range-checked by the parser).
fn check_capture(args: &RunArgs) -> anyhow::Result<()> {
    if args.budget.is_some() && args.in_situ {
        bail!(UsageError(
            "--budget and --in-situ both attach and detach the probes: give one (--budget measures in situ itself where the target's CPU shows the probes)".into(),
        ));
    }
    if args.budget.is_some() && args.follow_exec {
        bail!(UsageError(
            "--budget holds one program's probes: run it without --follow-exec".into(),
        ));
    }
    if !args.in_situ {
        return Ok(());
    }
    if args.follow_exec {
        bail!(UsageError(
            "--in-situ measures one program: run it without --follow-exec".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_every_applies_where_the_kernel_aggregates() {
        assert_eq!(
            time_every(Mode::Kernel, None).ok(),
            Some(probe_common::DEFAULT_TIME_EVERY)
        );
        assert_eq!(time_every(Mode::Auto, Some(8)).ok(), Some(8));
        assert_eq!(time_every(Mode::Ring, None).ok(), Some(1));
        assert_eq!(time_every(Mode::Sample, Some(1)).ok(), Some(1));
        let refused = time_every(Mode::Ring, Some(8)).expect_err("ring streams every hit");
        assert!(
            refused.0.contains("--mode kernel and auto only"),
            "{refused}"
        );
        assert!(time_every(Mode::Kernel, Some(0)).is_err());
    }
}
