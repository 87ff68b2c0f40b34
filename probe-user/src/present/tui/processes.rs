//! `probetop --all`'s screen: the processes with probes armed in them, sorted by CPU
//! share like top, refreshed as the session sends rows. Enter hands the terminal to
//! `probetop --pid PID` (the session starts it) and takes it back when that exits (Esc
//! or q there); q, Esc or Ctrl-C here quit.

use std::{future::Future, io, process::Child, time::Duration};

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
use ratatui::{
    Frame,
    layout::{Constraint, Layout},
    style::{Modifier, Style},
    text::Line,
    widgets::{Paragraph, Row, Table, TableState},
};
use tokio::sync::watch;

use super::{FRAME_INTERVAL, TerminalSession, UiExit};
use crate::present::processes::{self, ProcessRow};
use crate::sys;

/// What the list shows and which row is selected.
#[derive(Debug, Default)]
pub(crate) struct ProcessList {
    pub rows: Vec<ProcessRow>,
    /// The selected process, by pid: it stays selected as rows move.
    pub selected: Option<u32>,
    pub message: Option<String>,
}

/// What a key asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ListEffect {
    Nothing,
    Redraw,
    Quit,
    Open(u32),
}

impl ProcessList {
    fn index(&self) -> Option<usize> {
        let pid = self.selected?;
        self.rows.iter().position(|r| r.pid == pid)
    }

    /// New rows; the selection follows its process, or the first row.
    pub(crate) fn update(&mut self, rows: Vec<ProcessRow>) {
        self.rows = rows;
        if self.index().is_none() {
            self.selected = self.rows.first().map(|r| r.pid);
        }
    }

    pub(crate) fn on_key(&mut self, key: &KeyEvent) -> ListEffect {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return ListEffect::Quit;
        }
        let last = self.rows.len().saturating_sub(1);
        let at = self.index().unwrap_or(0);
        let to = match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return ListEffect::Quit,
            KeyCode::Enter => {
                return match self.index().and_then(|i| self.rows.get(i)) {
                    Some(row) if !row.exited => ListEffect::Open(row.pid),
                    Some(row) => {
                        self.message = Some(format!("pid {} exited", row.pid));
                        ListEffect::Redraw
                    }
                    None => ListEffect::Nothing,
                };
            }
            KeyCode::Up | KeyCode::Char('k') => at.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => (at + 1).min(last),
            KeyCode::Home | KeyCode::Char('g') => 0,
            KeyCode::End | KeyCode::Char('G') => last,
            KeyCode::PageUp => at.saturating_sub(10),
            KeyCode::PageDown => (at + 10).min(last),
            _ => return ListEffect::Nothing,
        };
        self.selected = self.rows.get(to).map(|r| r.pid);
        ListEffect::Redraw
    }
}

/// Draws the list: a title line, the table, a footer.
pub(crate) fn draw(frame: &mut Frame, list: &ProcessList) {
    let [title, table, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(
        Paragraph::new(Line::from(format!(
            "probetop --all: {} process{} with user-space probes of any tool, by CPU share",
            list.rows.len(),
            if list.rows.len() == 1 { "" } else { "es" }
        )))
        .style(Style::default().add_modifier(Modifier::BOLD)),
        title,
    );
    if list.rows.is_empty() {
        frame.render_widget(
            Paragraph::new(
                "no process has a uprobe, uretprobe or USDT probe armed in it now; watching",
            ),
            table,
        );
    } else {
        let header =
            Row::new(processes::HEADERS).style(Style::default().add_modifier(Modifier::REVERSED));
        let rows = list.rows.iter().map(|r| Row::new(processes::cells(r)));
        let widths = [
            Constraint::Length(8),
            Constraint::Length(16),
            Constraint::Length(6),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Min(10),
        ];
        let widget = Table::new(rows, widths)
            .header(header)
            .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED));
        let mut state = TableState::default().with_selected(list.index());
        frame.render_stateful_widget(widget, table, &mut state);
    }
    let text = list.message.clone().unwrap_or_else(|| {
        // Within 80 columns, an ssh terminal's default: `q: quit` was cut off there.
        "Enter: open it (as probetop --pid; Esc comes back)  ↑↓: select  q: quit".into()
    });
    frame.render_widget(Paragraph::new(text), footer);
}

/// Runs the list until the user quits, `shutdown` resolves or the terminal is lost.
/// `open` starts `probetop --pid PID` on the terminal for Enter.
pub(crate) async fn run<R>(
    mut rows: watch::Receiver<Vec<ProcessRow>>,
    shutdown: impl Future<Output = R>,
    open: fn(u32) -> io::Result<Child>,
) -> io::Result<UiExit<R>> {
    let mut list = ProcessList::default();
    list.update(rows.borrow_and_update().clone());
    let mut session = TerminalSession::start()?;
    let mut input = Input::start();
    let mut frames = tokio::time::interval(FRAME_INTERVAL);
    frames.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut dirty = true;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            reason = &mut shutdown => return Ok(UiExit::Shutdown(reason)),
            changed = rows.changed() => {
                if changed.is_ok() {
                    list.update(rows.borrow_and_update().clone());
                    dirty = true;
                }
            }
            event = input.events.recv() => {
                let effect = match event {
                    Some(Ok(Event::Key(key))) => list.on_key(&key),
                    Some(Ok(Event::Resize(..))) => ListEffect::Redraw,
                    Some(Ok(_)) => ListEffect::Nothing,
                    Some(Err(e)) => return Ok(UiExit::TerminalLost(e)),
                    None => return Ok(UiExit::TerminalLost(io::ErrorKind::UnexpectedEof.into())),
                };
                match effect {
                    ListEffect::Nothing => {}
                    ListEffect::Redraw => dirty = true,
                    ListEffect::Quit => return Ok(UiExit::Quit),
                    ListEffect::Open(pid) => {
                        // The terminal is the child's until it exits: nothing here
                        // reads it (a reader would take the child's keys), and lines
                        // said meanwhile wait for the list.
                        tokio::task::block_in_place(|| input.stop());
                        drop(session);
                        sys::stderr::hold();
                        let waited = wait_child(open(pid), &mut shutdown).await;
                        session = TerminalSession::start()?;
                        input = Input::start();
                        if let Err(e) = session.terminal.clear() {
                            return Ok(UiExit::TerminalLost(e));
                        }
                        dirty = true;
                        match waited {
                            Ok(None) => list.message = None,
                            Ok(Some(reason)) => return Ok(UiExit::Shutdown(reason)),
                            Err(e) => list.message = Some(format!("cannot open pid {pid}: {e}")),
                        }
                    }
                }
            }
            _ = frames.tick(), if dirty => {
                let drawn = tokio::task::block_in_place(|| session.terminal.draw(|frame| draw(frame, &list)));
                if let Err(e) = drawn {
                    return Ok(UiExit::TerminalLost(e));
                }
                dirty = false;
            }
        }
        // Lines said meanwhile go to the footer, the last one shown.
        if let Some(line) = sys::stderr::take_new().pop() {
            list.message = Some(line);
            dirty = true;
        }
    }
}

/// The terminal's input, read by a thread that can be stopped: while `probetop --pid`
/// runs on the terminal, no thread of this process may read it.
struct Input {
    events: tokio::sync::mpsc::Receiver<io::Result<Event>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Input {
    /// How long a read waits before it looks at the stop flag.
    const POLL: Duration = Duration::from_millis(50);

    fn start() -> Self {
        let (tx, events) = tokio::sync::mpsc::channel(64);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let event = match crossterm::event::poll(Self::POLL) {
                    Ok(false) => continue,
                    Ok(true) => crossterm::event::read(),
                    Err(e) => Err(e),
                };
                let failed = event.is_err();
                if tx.blocking_send(event).is_err() || failed {
                    break;
                }
            }
        });
        Self {
            events,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the reader and waits for it (at most [`Self::POLL`]).
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Its last event, if any, must not block it on a full channel.
        while self.events.try_recv().is_ok() {}
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Input {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Waits for the process view to exit; if `shutdown` resolves first, asks it to stop
/// (SIGTERM: it detaches its probes and exits), waits, and returns the reason.
async fn wait_child<R>(
    child: io::Result<Child>,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = R>>,
) -> io::Result<Option<R>> {
    let mut child = child?;
    let pid = child.id();
    let exited = sys::process::exit_watch(pid)?;
    let reason = tokio::select! {
        _ = exited.readable() => None,
        reason = shutdown.as_mut() => {
            let _ = sys::process::terminate(pid);
            let _ = exited.readable().await;
            Some(reason)
        }
    };
    // Exited: reaped at once.
    let status = child.wait()?;
    if reason.is_none() && !status.success() {
        return Err(io::Error::other(format!("probetop --pid {pid}: {status}")));
    }
    // A moment for its last lines (the summary) before the list covers them.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn enter_opens_the_selected_process_and_keys_move_and_quit() {
        let row = |pid| ProcessRow {
            pid,
            comm: "w".into(),
            ..Default::default()
        };
        let mut list = ProcessList::default();
        list.update(vec![row(10), row(20)]);
        assert_eq!(list.on_key(&key(KeyCode::Enter)), ListEffect::Open(10));
        assert_eq!(list.on_key(&key(KeyCode::Down)), ListEffect::Redraw);
        assert_eq!(list.on_key(&key(KeyCode::Enter)), ListEffect::Open(20));
        // The selection follows its process when the rows move.
        list.update(vec![row(20), row(10)]);
        assert_eq!(list.on_key(&key(KeyCode::Enter)), ListEffect::Open(20));
        assert_eq!(list.on_key(&key(KeyCode::Esc)), ListEffect::Quit);
        let mut terminal =
            ratatui::Terminal::new(ratatui::backend::TestBackend::new(100, 8)).expect("test");
        terminal.draw(|f| draw(f, &list)).expect("draws");
        let screen = format!("{:?}", terminal.backend().buffer());
        assert!(screen.contains("OWNERS"), "{screen}");
        // At 80 columns the footer's keys are whole, quitting included.
        let mut terminal =
            ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 8)).expect("test");
        terminal.draw(|f| draw(f, &list)).expect("draws");
        let screen = terminal.backend().to_string();
        assert!(
            screen.contains(
                "Enter: open it (as probetop --pid; Esc comes back)  ↑↓: select  q: quit"
            ),
            "{screen}"
        );
    }
}
