//! The live terminal UI: a sortable, filterable probe table, the selected probe's detail
//! pane, a status line, and a help overlay.
//!
//! [`draw`] is a pure function of an [`App`] (one component per pane: `table`,
//! `detail`, `status`, `help`), tested on ratatui's TestBackend. [`run`] owns the
//! terminal: it restores it on every exit path, panics included, and redraws at most
//! every [`FRAME_INTERVAL`] and only when something on screen changed. Nothing here does
//! I/O but writing the frame: the collector measures, the session acts on requests.
//!
//! A terminal that goes away (ssh dropped, terminal window killed) makes every write
//! and read fail: the UI then ends with [`UiExit::TerminalLost`], never an error or a
//! panic, so the session still writes its exports and detaches.

mod app;
mod columns;
mod detail;
mod help;
mod plot;
pub(crate) mod processes;
mod status;
mod table;
mod theme;

#[cfg(test)]
mod tests;

use std::{future::Future, io, mem::ManuallyDrop, time::Duration};

use crossterm::{
    event::{DisableMouseCapture, EnableMouseCapture, Event, EventStream},
    execute,
    terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode},
};
use futures_util::StreamExt as _;
use ratatui::{DefaultTerminal, Frame, widgets::Paragraph};
use tokio::sync::{mpsc, watch};

#[cfg(test)]
use app::Sort;
pub(crate) use app::{App, Effect, TargetLine, UiEvent, UiRequest};
#[cfg(test)]
use columns::{SortColumn, View};
pub(crate) use theme::Theme;

use crate::present::Snapshot;
use crate::sys;

/// Redraws at most this often.
const FRAME_INTERVAL: Duration = Duration::from_millis(100);
/// A footer message goes after this long.
const MESSAGE_TIME: Duration = Duration::from_secs(6);
/// Smaller than this, the screen only says so.
const MIN_SIZE: (u16, u16) = (40, 8);

/// Why the UI ended.
#[derive(Debug)]
pub(crate) enum UiExit<R> {
    /// The user quit (q, Esc or Ctrl-C).
    Quit,
    /// `shutdown` resolved (duration, signal, target exit) with this reason.
    Shutdown(R),
    /// Writing to or reading from the terminal failed, or its input ended: it is gone
    /// (a hangup), or unusable; nothing more can be shown.
    TerminalLost(io::Error),
}

/// Draws one frame of `app`.
pub(crate) fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    if area.width < MIN_SIZE.0 || area.height < MIN_SIZE.1 {
        frame.render_widget(
            Paragraph::new(format!(
                "probetop needs at least {}x{}: this terminal is {}x{}",
                MIN_SIZE.0, MIN_SIZE.1, area.width, area.height
            ))
            .wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    let areas = app::Areas::of(area, app.labels.len());
    status::render_status(frame, areas.status, app);
    table::render(frame, areas.table, app);
    if let Some(detail) = areas.detail {
        let rows = app.rows();
        detail::render(frame, detail, app, app.selected_probe(&rows));
    }
    status::render_footer(frame, areas.footer, app);
    if app.help {
        help::render(frame, area, app);
    }
    if app.theme.ascii {
        theme::to_ascii(frame.buffer_mut());
    }
}

/// The channels between the UI and the rest of probetop.
pub(crate) struct UiLinks {
    /// Snapshots from the collector.
    pub snapshots: watch::Receiver<Snapshot>,
    /// Which probe the detail pane shows, for the collector.
    pub focus: watch::Sender<Option<u32>>,
    /// Detach, reset, export: the session carries them out.
    pub requests: mpsc::Sender<UiRequest>,
    /// What the session reports back.
    pub events: mpsc::Receiver<UiEvent>,
}

/// Restores the terminal when dropped, whatever the exit path.
struct TerminalSession {
    /// Dropped by hand: ratatui's own drop prints with `eprintln!` when it cannot show
    /// the cursor, which panics (and, with `panic = "abort"`, kills probetop before
    /// its exports) when the terminal is gone.
    terminal: ManuallyDrop<DefaultTerminal>,
}

impl TerminalSession {
    fn start() -> io::Result<Self> {
        install_panic_hook();
        enable_raw_mode()?;
        if let Err(e) = execute!(io::stdout(), EnterAlternateScreen, EnableMouseCapture) {
            restore_terminal();
            return Err(e);
        }
        let backend = ratatui::backend::CrosstermBackend::new(io::stdout());
        match ratatui::Terminal::new(backend) {
            Ok(terminal) => {
                // Released by the drop below, whichever way the UI ends.
                sys::stderr::hold();
                Ok(Self {
                    terminal: ManuallyDrop::new(terminal),
                })
            }
            Err(e) => {
                restore_terminal();
                Err(e)
            }
        }
    }
}

impl Drop for TerminalSession {
    fn drop(&mut self) {
        if self.terminal.show_cursor().is_ok() {
            // SAFETY: dropped once, here, and never used again; with the cursor shown
            // ratatui's drop writes nothing.
            unsafe { ManuallyDrop::drop(&mut self.terminal) };
        }
        // Otherwise it is left undropped: a few buffers, freed at exit.
        restore_terminal();
        // What was said while the screen was the TUI's, on the restored terminal.
        sys::stderr::release();
    }
}

fn restore_terminal() {
    let _ = disable_raw_mode();
    let _ = execute!(io::stdout(), DisableMouseCapture, LeaveAlternateScreen);
}

/// Restores the terminal before the default hook prints the panic, so the message is
/// readable and the shell usable. Installed once.
fn install_panic_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            previous(info);
        }));
    });
}

/// Runs the UI until the user quits, `shutdown` resolves or the terminal is lost; fails
/// only when the terminal cannot be set up.
pub(crate) async fn run<R>(
    mut app: App,
    links: UiLinks,
    shutdown: impl Future<Output = R>,
) -> io::Result<UiExit<R>> {
    let UiLinks {
        mut snapshots,
        focus,
        requests,
        mut events,
    } = links;
    let mut session = TerminalSession::start()?;
    let size = match session.terminal.size() {
        Ok(size) => size,
        Err(e) => return Ok(UiExit::TerminalLost(e)),
    };
    app.resize(size.width, size.height);
    let mut input = EventStream::new();
    let mut frames = tokio::time::interval(FRAME_INTERVAL);
    frames.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut dirty = true;
    let mut collector_done = false;
    let mut session_done = false;
    let message_expiry = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(shutdown, message_expiry);
    let mut message_shown: Option<String> = None;
    loop {
        tokio::select! {
            reason = &mut shutdown => return Ok(UiExit::Shutdown(reason)),
            changed = snapshots.changed(), if !collector_done => {
                // After the collector ends the last snapshot stays on screen.
                collector_done = changed.is_err();
                let snapshot = snapshots.borrow_and_update().clone();
                dirty |= app.update(snapshot);
            }
            event = events.recv(), if !session_done => match event {
                Some(event) => {
                    app.apply(event);
                    dirty = true;
                }
                None => session_done = true,
            },
            event = input.next() => {
                let effect = match event {
                    Some(Ok(Event::Key(key))) => app.on_key(&key),
                    Some(Ok(Event::Mouse(mouse))) => app.on_mouse(&mouse),
                    Some(Ok(Event::Resize(width, height))) => {
                        app.resize(width, height);
                        Effect::Redraw
                    }
                    Some(Ok(_)) => Effect::Nothing,
                    Some(Err(e)) => return Ok(UiExit::TerminalLost(e)),
                    // The terminal is gone: nothing left to show.
                    None => return Ok(UiExit::TerminalLost(io::ErrorKind::UnexpectedEof.into())),
                };
                match effect {
                    Effect::Nothing => {}
                    Effect::Redraw => dirty = true,
                    Effect::Quit => return Ok(UiExit::Quit),
                    Effect::Send(request) => {
                        app.message = Some(pending_message(request).into());
                        dirty = true;
                        // A full queue means the session is busy with earlier requests:
                        // say so rather than wait.
                        if requests.try_send(request).is_err() {
                            app.message = Some("busy: try again in a moment".into());
                        }
                    }
                }
            }
            _ = &mut message_expiry, if message_shown.is_some() => {
                app.message = None;
                dirty = true;
            }
            _ = frames.tick(), if dirty => {
                // Writing to the terminal can block; keep it off the collector's worker.
                let drawn = tokio::task::block_in_place(|| session.terminal.draw(|frame| draw(frame, &app)));
                if let Err(e) = drawn {
                    return Ok(UiExit::TerminalLost(e));
                }
                dirty = false;
            }
        }
        // Lines said meanwhile (they would garble the screen on stderr) go to the footer.
        for line in sys::stderr::take_new() {
            app.apply(UiEvent::Message(line));
            dirty = true;
        }
        // The collector computes the selected probe's details; tell it at once.
        let rows = app.rows();
        let selected = app.selected_probe(&rows).map(|id| id as u32);
        focus.send_if_modified(|current| {
            let changed = *current != selected;
            *current = selected;
            changed
        });
        // A new message starts its own expiry.
        if app.message != message_shown {
            message_shown.clone_from(&app.message);
            if message_shown.is_some() {
                message_expiry
                    .as_mut()
                    .reset(tokio::time::Instant::now() + MESSAGE_TIME);
            }
        }
    }
}

fn pending_message(request: UiRequest) -> &'static str {
    match request {
        UiRequest::ToggleAttach(_) => "detaching / attaching...",
        UiRequest::Reset => "reset: counting from now",
        UiRequest::Export => "exporting...",
    }
}
