//! The fourth phase: measuring until something stops it, headless or with the TUI;
//! meanwhile the UI's requests, the in-situ windows, followed execs and the
//! --follow-forks hint are handled here.

use std::{path::PathBuf, pin::Pin};

use tokio::sync::{mpsc, watch};

use super::Snapshot;
use super::report::{self, ReportSource};
use super::start::Running;
use super::{StopReason, budget, follow, insitu, maps_watch, others, processes};
use crate::attach::Attachment;
use crate::cli::RunArgs;
use crate::present::{
    self,
    tui::{self, UiEvent, UiExit, UiLinks, UiRequest},
};
use crate::stream::CollectorCommand;

/// How measuring ended, and what to tell on stderr at the end.
pub(super) struct Driven {
    pub reason: StopReason,
    /// What happened while the TUI had the terminal, and the hints shown in its footer.
    pub notes: Vec<String>,
    /// A --follow-forks hint was given already.
    pub hinted: bool,
}

/// One process probed: a probe still silent after a while, in a parent whose children
/// map its file, is named with --follow-forks once (or at the end).
struct Hint {
    at: Pin<Box<tokio::time::Sleep>>,
    pending: bool,
    given: bool,
}

impl Hint {
    fn new(several: bool) -> Self {
        Self {
            at: Box::pin(tokio::time::sleep(processes::HINT_AFTER)),
            pending: !several,
            given: false,
        }
    }

    /// The hint lines, once it is due.
    fn lines(&mut self, run: &Running) -> Vec<String> {
        self.pending = false;
        let lines = silent_hints(&run.source, &run.snapshots.borrow(), run.target.pid);
        self.given |= !lines.is_empty();
        lines
    }
}

pub(super) async fn drive(run: &mut Running, args: &RunArgs) -> anyhow::Result<Driven> {
    if args.no_tui {
        Ok(headless(run).await)
    } else {
        with_tui(run, args).await
    }
}

/// Looks once a second whether the probes cost the target more than the guard's
/// share; says so once a run. A cost near the line, or one that `--in-situ`'s detached
/// windows take to nothing each second, would otherwise cross it again and again and
/// repeat the same line. Not under `--budget`, which holds the cost under its own
/// ceiling: a set's attached part costs more than the line by design.
struct Guard {
    tick: tokio::time::Interval,
    warned: bool,
    /// Under `--in-situ`, the measurement after the last window change: the guard
    /// judges it, not a second the windows cut in parts.
    in_situ: Option<crate::insitu::InSituSummary>,
}

impl Guard {
    fn new() -> Self {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        Self {
            tick,
            warned: false,
            in_situ: None,
        }
    }

    /// The warning, the first time the cost crosses the line.
    fn check(&mut self, run: &Running) -> Option<String> {
        if self.warned || run.budget.is_some() {
            return None;
        }
        let snapshot = run.snapshots.borrow();
        let line = if run.in_situ.is_some() {
            present::headline::in_situ_warning(&run.labels, &snapshot, self.in_situ.as_ref()?)?
        } else {
            present::headline::live_warning(&run.labels, &snapshot)?
        };
        self.warned = true;
        Some(line)
    }
}

async fn headless(run: &mut Running) -> Driven {
    let mut teller = follow::Teller::Stderr;
    let mut hint = Hint::new(run.several);
    let mut guard = Guard::new();
    let reason = loop {
        tokio::select! {
            reason = &mut run.shutdown => break reason,
            _ = guard.tick.tick() => {
                if let Some(line) = guard.check(run) {
                    say!("probetop: warning: {line}");
                }
            }
            _ = &mut hint.at, if hint.pending => {
                for line in hint.lines(run) {
                    say!("probetop: {line}");
                }
            }
            _ = insitu::due(&run.in_situ) => {
                if let Some(summary) = change_window(&mut run.in_situ, &mut run.attachment, &run.source, &run.snapshots) {
                    guard.in_situ = Some(summary);
                }
            }
            _ = budget::due(&run.budget) => {
                if let Some(told) = budget::on_due(&mut run.budget, &mut run.attachment, &run.snapshots, &run.source) {
                    for line in told.actions {
                        say!("probetop: {line}");
                    }
                }
            }
            moved = maps_watch::next_move(&mut run.moves) => {
                maps_watch::apply(moved, &mut run.attachment, &run.source, run.target.pid);
            }
            event = follow::next_event(&mut run.follow) => {
                let mut links = follow::Links {
                    attachment: &mut run.attachment,
                    source: &run.source,
                    labels: &mut run.labels,
                    teller: &mut teller,
                };
                if let Some(reason) = follow::on_event(event, &mut run.follow, &mut links).await {
                    break reason;
                }
            }
            found = others::next_look(&mut run.others_watch) => {
                let mut links = follow::Links {
                    attachment: &mut run.attachment,
                    source: &run.source,
                    labels: &mut run.labels,
                    teller: &mut teller,
                };
                others::on_look(found, &mut run.others_watch, &mut links).await;
            }
        }
    };
    Driven {
        reason,
        notes: Vec::new(),
        hinted: hint.given,
    }
}

async fn with_tui(run: &mut Running, args: &RunArgs) -> anyhow::Result<Driven> {
    let (request_tx, mut request_rx) = mpsc::channel(8);
    // Each request yields at most one event and at most 8 requests queue, so the
    // session's sends (awaited while the UI is not polled) always find room; events of
    // an exec are sent without waiting (see follow::Teller).
    let (event_tx, event_rx) = mpsc::channel(64);
    // What happened while the TUI had the terminal, told again on stderr at the end.
    let mut notes = Vec::new();
    // Said in the TUI's footer, and again on stderr at the end.
    let mut hint_notes = Vec::new();
    let mut hint = Hint::new(run.several);
    let target_line = tui::TargetLine {
        pid: run.target.pid,
        comm: run.target.comm.clone(),
    };
    let mut teller = follow::Teller::Ui {
        events: event_tx.clone(),
        target: target_line.clone(),
        notes: &mut notes,
    };
    let mut app = tui::App::new(
        target_line,
        run.labels.clone(),
        args.args > 0,
        tui::Theme::from_env(),
    );
    if !matches!(crate::calibrate::table::load_cached(), Ok(Some(_))) {
        app.note = Some(crate::present::NO_CALIBRATION_FOOTER);
    }
    // The UI ends on the shutdown future too; it is not polled again after.
    let shutdown = std::mem::replace(&mut run.shutdown, Box::pin(std::future::pending()));
    let ui = tui::run(
        app,
        UiLinks {
            snapshots: run.snapshots.clone(),
            focus: run.focus.clone(),
            requests: request_tx,
            events: event_rx,
        },
        shutdown,
    );
    tokio::pin!(ui);
    let mut guard = Guard::new();
    let exit = loop {
        tokio::select! {
            exit = &mut ui => break exit?,
            // The footer shows it live; stderr gets it when the TUI gives the terminal back.
            _ = guard.tick.tick() => {
                if let Some(line) = guard.check(run) {
                    hint_notes.push(format!("warning: {line}"));
                }
            }
            _ = &mut hint.at, if hint.pending => {
                for line in hint.lines(run) {
                    let _ = event_tx.try_send(UiEvent::Message(line.clone()));
                    hint_notes.push(line);
                }
            }
            Some(request) = request_rx.recv() => {
                handle_request(request, run, &args.exports, args.force, &event_tx).await;
            }
            moved = maps_watch::next_move(&mut run.moves) => {
                maps_watch::apply(moved, &mut run.attachment, &run.source, run.target.pid);
            }
            _ = budget::due(&run.budget) => {
                if let Some(told) = budget::on_due(&mut run.budget, &mut run.attachment, &run.snapshots, &run.source) {
                    for probe_id in told.detached {
                        let _ = event_tx.try_send(UiEvent::Attached { probe_id, attached: false });
                    }
                    for line in told.actions {
                        let _ = event_tx.try_send(UiEvent::Message(line.clone()));
                        hint_notes.push(line);
                    }
                    if !told.status.is_empty() {
                        // The duty and what the probes use, in the status line.
                        let _ = event_tx.try_send(UiEvent::Budget {
                            long: told.status,
                            short: told.status_short,
                        });
                    }
                }
            }
            _ = insitu::due(&run.in_situ) => {
                if let Some(summary) = change_window(&mut run.in_situ, &mut run.attachment, &run.source, &run.snapshots) {
                    // The UI may be busy; the next change sends a newer one.
                    let on = run.in_situ.as_ref().is_some_and(|d| d.probes_on());
                    let _ = event_tx.try_send(in_situ_event(&summary, on));
                    guard.in_situ = Some(summary);
                }
            }
            event = follow::next_event(&mut run.follow) => {
                let mut links = follow::Links {
                    attachment: &mut run.attachment,
                    source: &run.source,
                    labels: &mut run.labels,
                    teller: &mut teller,
                };
                if let Some(reason) = follow::on_event(event, &mut run.follow, &mut links).await {
                    break UiExit::Shutdown(reason);
                }
            }
            found = others::next_look(&mut run.others_watch) => {
                let mut links = follow::Links {
                    attachment: &mut run.attachment,
                    source: &run.source,
                    labels: &mut run.labels,
                    teller: &mut teller,
                };
                others::on_look(found, &mut run.others_watch, &mut links).await;
            }
        }
    };
    let reason = match exit {
        UiExit::Quit => StopReason::UserQuit,
        UiExit::Shutdown(reason) => reason,
        UiExit::TerminalLost(e) => {
            notes.push(format!("the terminal is gone ({e}): stopping"));
            StopReason::TerminalLost
        }
    };
    notes.extend(hint_notes);
    Ok(Driven {
        reason,
        notes,
        hinted: hint.given,
    })
}

/// Carries out what the UI asked; the outcome goes back to it as an event.
async fn handle_request(
    request: UiRequest,
    run: &mut Running,
    exports: &[PathBuf],
    force: bool,
    events: &mpsc::Sender<UiEvent>,
) {
    let Running {
        attachment,
        in_situ,
        budget,
        source,
        ..
    } = run;
    // The UI may be gone already (it quit); its events then have nowhere to go.
    match request {
        UiRequest::ToggleAttach(probe_id) => {
            let suspended = in_situ.as_ref().is_some_and(|d| d.is_suspended(probe_id))
                || budget.as_ref().is_some_and(|d| d.is_suspended(probe_id));
            let attached = attachment.is_attached(probe_id) || suspended;
            // In an OFF window of --in-situ or --budget the change applies to the set that
            // comes back.
            let redirected = match (in_situ.as_mut(), budget.as_mut()) {
                (Some(d), _) => d.redirect(probe_id, !attached),
                (_, Some(d)) => d.redirect(probe_id, !attached),
                _ => None,
            };
            if let Some(now) = redirected {
                let _ = events
                    .send(UiEvent::Attached {
                        probe_id,
                        attached: now,
                    })
                    .await;
                return;
            }
            let event = if attached {
                attachment.detach(probe_id);
                UiEvent::Attached {
                    probe_id,
                    attached: false,
                }
            } else {
                match attachment.reattach(probe_id) {
                    Ok(()) => UiEvent::Attached {
                        probe_id,
                        attached: true,
                    },
                    Err(e) => {
                        UiEvent::Message(format!("cannot attach probe {probe_id} again: {e}"))
                    }
                }
            };
            let _ = events.send(event).await;
        }
        UiRequest::Reset => {
            if source.commands.send(CollectorCommand::Reset).await.is_err() {
                let _ = events
                    .send(UiEvent::Message(
                        "reset failed: the collector has stopped".into(),
                    ))
                    .await;
            }
        }
        UiRequest::Export => {
            // Copying, rendering and writing happen off the UI's and the session's path.
            let source = source.clone();
            let events = events.clone();
            let paths = report::snapshot_export_paths(
                exports,
                source.target.pid,
                report::unix_now_ms() / 1000,
            );
            tokio::spawn(async move {
                let message = match source.report(true).await {
                    Some(report) => tokio::task::spawn_blocking(move || {
                        report::write_exports(&report, &paths, force)
                    })
                    .await
                    .unwrap_or_else(|e| format!("export failed: {e}")),
                    None => "export failed: the collector has stopped".into(),
                };
                let _ = events.send(UiEvent::Message(message)).await;
            });
        }
    }
}

/// The --follow-forks hint lines for the probes silent in `snapshot`.
fn silent_hints(source: &ReportSource, snapshot: &Snapshot, pid: u32) -> Vec<String> {
    let hits: Vec<u64> = snapshot.probes.iter().map(|p| p.hits).collect();
    // Before the first snapshot nothing is known yet.
    if hits.is_empty() {
        return Vec::new();
    }
    processes::silent_probe_hints(pid, &silent_probes(source, &hits))
}

/// (spec, file) of the probes of the first program with no hit so far.
pub(super) fn silent_probes(source: &ReportSource, hits: &[u64]) -> Vec<(String, PathBuf)> {
    source
        .rows()
        .probes
        .iter()
        .zip(hits)
        .filter(|(probe, hits)| **hits == 0 && probe.generation == 0)
        .map(|(probe, _)| (probe.spec.clone(), probe.point.attach_path.clone()))
        .collect()
}

/// Ends an in-situ window and starts the next; the summary so far, or `None` without
/// `--in-situ` (or once it stopped on an error, which is said).
fn change_window(
    driver: &mut Option<insitu::Driver>,
    attachment: &mut Attachment,
    source: &ReportSource,
    snapshots: &watch::Receiver<Snapshot>,
) -> Option<crate::insitu::InSituSummary> {
    let active = driver.as_mut()?;
    let (hits, streaming) = {
        let snapshot = snapshots.borrow();
        let hits: u64 = snapshot.probes.iter().map(|p| p.hits).sum();
        // Before the collector's first snapshot no row says its mode: still streaming.
        let streaming = snapshot.probes.is_empty()
            || snapshot
                .probes
                .iter()
                .any(|p| p.mode == crate::delivery::DeliveryMode::Ring);
        (hits, streaming)
    };
    match active.change(attachment, hits, streaming) {
        Ok(true) => {}
        Ok(false) => return None,
        Err(e) => {
            say!(
                "probetop: in situ measurement stopped: {}",
                crate::error_line(&e)
            );
            *driver = None;
            return None;
        }
    }
    let summary = active.summary(hits);
    *source
        .in_situ
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(summary.clone());
    Some(summary)
}

/// What the TUI shows of an in-situ summary: the measured headline once there is one,
/// the window's state and a detail line.
fn in_situ_event(summary: &crate::insitu::InSituSummary, probes_on: bool) -> UiEvent {
    let headline = (summary.verdict == crate::insitu::Verdict::Measured)
        .then(|| present::headline::Headline::of_in_situ(summary))
        .flatten()
        .map(|h| (h.status(), h.status_short()));
    UiEvent::InSitu {
        headline,
        probes_on,
        detail: summary.line(),
    }
}
