//! How measuring stops: what ends it ([`shutdown_signal`]), and detaching at the end
//! ([`detach_with_progress`]), which a second signal may cut short.

use std::{
    future::Future,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use anyhow::bail;
use tokio::signal::unix::{SignalKind, signal};

use super::{StopReason, follow};
use crate::attach::Attachment;
use crate::sys;
use crate::target::Target;

/// Set once [`shutdown_signal`] has the signals: from then on a stop is the run's own
/// (measurements cut, exported, probes detached).
static RUN_HAS_SIGNALS: AtomicBool = AtomicBool::new(false);

/// Until [`shutdown_signal`] takes them, SIGINT, SIGTERM and SIGHUP stop probetop at
/// once, with a line, as a stop: nothing is measured yet, and what the start made (the
/// programs, probes being attached) goes with probetop's descriptors. Without it the
/// default action killed probetop silently (exit 143 on SIGTERM) while it resolved.
pub(super) fn stop_before_attaching() -> anyhow::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
            _ = hangup.recv() => "SIGHUP",
        };
        if !RUN_HAS_SIGNALS.load(Ordering::SeqCst) {
            say!("probetop: stopped by {name} before attaching: nothing measured");
            std::process::exit(0);
        }
    });
    Ok(())
}

/// Resolves when measuring should stop: after `duration`, on SIGINT, SIGTERM or
/// SIGHUP (a lost terminal), when the target exits, or with `stop_on_exec` when it
/// execs another program.
pub(super) fn shutdown_signal(
    target: &Target,
    duration: Option<Duration>,
    stop_on_exec: bool,
) -> anyhow::Result<impl Future<Output = StopReason> + use<>> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    RUN_HAS_SIGNALS.store(true, Ordering::SeqCst);
    let exited = sys::process::exit_watch(target.pid)?;
    // The pidfd names whatever process has the pid now; make sure that is still ours.
    // An exec keeps the pid, the start time and the pidfd: only an exit ends it.
    if !target.is_alive() {
        bail!(crate::target::TargetError::ExitedBeforeAttach(target.pid));
    }
    let watched = target.clone();
    Ok(async move {
        // exec raises no event on a pidfd, so look every quarter second.
        let execed = async {
            if !stop_on_exec {
                // Followed instead (see follow::next_event).
                return std::future::pending().await;
            }
            let mut every = tokio::time::interval(follow::EXEC_POLL);
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

/// From the stop on, while probetop cuts the window, writes the exports and detaches:
/// SIGINT or SIGTERM (a second one, after a stop by signal) exits at once, cutting the
/// exports and the wait, and leaving the kernel to detach every probe as it closes
/// probetop's descriptors (as it does however probetop ends). Listened to from the first
/// moment of the exit: a signal before the detach began was lost, and the exit went on
/// for seconds.
pub(super) fn exit_on_another_signal() {
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        };
        say!(
            "probetop: {name} again: exiting now; the kernel detaches the probes as it closes probetop's descriptors"
        );
        std::process::exit(0);
    });
}

/// Detaches every probe, saying how it goes when it takes a while; a second SIGINT or
/// SIGTERM ([`exit_on_another_signal`]) stops waiting and exits.
pub(super) async fn detach_with_progress(mut attachment: Attachment) {
    let total = attachment.attached_ids().len();
    let detach = tokio::task::spawn_blocking(move || {
        attachment.detach_all();
        drop(attachment);
    });
    tokio::pin!(detach);
    let started = std::time::Instant::now();
    // Once after a second, then every five: enough to show it is moving.
    let mut told = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(5),
    );
    loop {
        tokio::select! {
            _ = &mut detach => break,
            _ = told.tick() => say!(
                "probetop: detaching {total} probe{}: {:.0} s so far (the kernel waits a grace period per probe; SIGINT again to exit now)",
                if total == 1 { "" } else { "s" },
                started.elapsed().as_secs_f64()
            ),
        }
    }
    if started.elapsed() >= Duration::from_secs(1) {
        say!(
            "probetop: detached {total} probes in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    } else {
        say!("probetop: detached");
    }
}
