//! The live terminal UI: one row per probe, refreshed from collector snapshots.
//!
//! Drawing is a pure function of [`Screen`] so it can be tested on ratatui's
//! TestBackend; the terminal session around it restores the terminal on every exit
//! path, panics included.

use std::{future::Future, io, time::Duration};

use crossterm::{
    event::{Event, EventStream, KeyCode, KeyEvent, KeyEventKind, KeyModifiers},
    execute,
    terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode},
};
use futures_util::StreamExt as _;
use ratatui::{
    DefaultTerminal, Frame,
    layout::{Constraint, Layout},
    style::{Modifier, Style, Stylize as _},
    text::Line,
    widgets::{Block, Cell, Paragraph, Row, Table, TableState},
};
use tokio::sync::watch;

use super::{ProbeLabel, format};
use crate::aggregate::Snapshot;

/// Redraws at most this often.
const FRAME_INTERVAL: Duration = Duration::from_millis(100);

/// Who is being probed, for the header.
#[derive(Debug, Clone)]
pub struct TargetLine {
    pub pid: u32,
    pub comm: String,
}

/// Everything one frame shows.
pub struct Screen<'a> {
    pub target: &'a TargetLine,
    pub labels: &'a [ProbeLabel],
    pub snapshot: &'a Snapshot,
    pub table: &'a mut TableState,
}

/// Why the UI ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UiExit<R> {
    /// The user quit (q, Esc or Ctrl-C), or the terminal went away.
    Quit,
    /// `shutdown` resolved (duration, signal, target exit) with this reason.
    Shutdown(R),
}

/// Draws one frame.
pub fn draw(frame: &mut Frame, screen: &mut Screen) {
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let snap = screen.snapshot;
    let attached = screen.labels.len();
    let header_text = format!(
        " probetop  pid {} ({})  {attached} probe{}  {} events/s  {} dropped  {}s ",
        screen.target.pid,
        screen.target.comm,
        if attached == 1 { "" } else { "s" },
        format::count(snap.events_per_second),
        snap.dropped,
        snap.elapsed.as_secs(),
    );
    frame.render_widget(
        Paragraph::new(header_text).style(Style::new().add_modifier(Modifier::REVERSED)),
        header,
    );

    let columns = [
        "PROBE", "HITS", "HITS/S", "MIN", "P50", "P90", "P99", "P99.9", "MAX", "MEAN", "DROPS",
    ];
    let head = Row::new(columns.map(|c| Cell::from(c).bold()));
    let rows = screen
        .labels
        .iter()
        .zip(&snap.probes)
        .map(|(label, probe)| {
            let h = &probe.handler;
            Row::new([
                Cell::from(label.display.clone()),
                Cell::from(Line::from(probe.hits.to_string()).right_aligned()),
                Cell::from(Line::from(format::count(probe.per_second)).right_aligned()),
                Cell::from(Line::from(format::ns(h.min)).right_aligned()),
                Cell::from(Line::from(format::ns(h.p50)).right_aligned()),
                Cell::from(Line::from(format::ns(h.p90)).right_aligned()),
                Cell::from(Line::from(format::ns(h.p99)).right_aligned()),
                Cell::from(Line::from(format::ns(h.p999)).right_aligned()),
                Cell::from(Line::from(format::ns(h.max)).right_aligned()),
                Cell::from(Line::from(format::ns_f(h.mean)).right_aligned()),
                Cell::from(Line::from(probe.dropped.to_string()).right_aligned()),
            ])
        });
    let widths = [
        Constraint::Fill(1),
        Constraint::Length(10),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(6),
    ];
    let table = Table::new(rows, widths)
        .header(head)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::bordered().title(" handler time per hit "));
    frame.render_stateful_widget(table, body, screen.table);

    frame.render_widget(
        Paragraph::new(" q quit   \u{2191}\u{2193} select ").dim(),
        footer,
    );
}

/// Restores the terminal when dropped, whatever the exit path.
struct TerminalSession {
    terminal: DefaultTerminal,
}

impl TerminalSession {
    fn start() -> io::Result<Self> {
        install_panic_hook();
        enable_raw_mode()?;
        if let Err(e) = execute!(io::stdout(), EnterAlternateScreen) {
            restore_terminal();
            return Err(e);
        }
        let backend = ratatui::backend::CrosstermBackend::new(io::stdout());
        match ratatui::Terminal::new(backend) {
            Ok(terminal) => Ok(Self { terminal }),
            Err(e) => {
                restore_terminal();
                Err(e)
            }
        }
    }
}

impl Drop for TerminalSession {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        restore_terminal();
    }
}

fn restore_terminal() {
    let _ = disable_raw_mode();
    let _ = execute!(io::stdout(), LeaveAlternateScreen);
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

/// Runs the UI until the user quits or `shutdown` resolves.
pub async fn run<R>(
    target: TargetLine,
    labels: Vec<ProbeLabel>,
    mut snapshots: watch::Receiver<Snapshot>,
    shutdown: impl Future<Output = R>,
) -> io::Result<UiExit<R>> {
    let mut session = TerminalSession::start()?;
    let mut events = EventStream::new();
    let mut table = TableState::default().with_selected(Some(0));
    let mut frames = tokio::time::interval(FRAME_INTERVAL);
    frames.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut dirty = true;
    let mut collector_done = false;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            reason = &mut shutdown => return Ok(UiExit::Shutdown(reason)),
            changed = snapshots.changed(), if !collector_done => {
                // After the collector ends the last snapshot stays on screen.
                collector_done = changed.is_err();
                dirty = true;
            }
            event = events.next() => match event {
                Some(Ok(Event::Key(key))) => {
                    if is_quit(&key) {
                        return Ok(UiExit::Quit);
                    }
                    dirty |= handle_key(&key, &mut table, labels.len());
                }
                Some(Ok(Event::Resize(..))) => dirty = true,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                // The terminal is gone: nothing left to show.
                None => return Ok(UiExit::Quit),
            },
            _ = frames.tick(), if dirty => {
                let snapshot = snapshots.borrow_and_update().clone();
                let mut screen = Screen {
                    target: &target,
                    labels: &labels,
                    snapshot: &snapshot,
                    table: &mut table,
                };
                // Writing to the terminal can block; keep it off the collector's worker.
                tokio::task::block_in_place(|| {
                    session.terminal.draw(|frame| draw(frame, &mut screen))
                })?;
                dirty = false;
            }
        }
    }
}

fn is_quit(key: &KeyEvent) -> bool {
    key.kind != KeyEventKind::Release
        && match key.code {
            KeyCode::Char('q') | KeyCode::Esc => true,
            KeyCode::Char('c') => key.modifiers.contains(KeyModifiers::CONTROL),
            _ => false,
        }
}

/// Moves the selection; returns whether anything changed.
fn handle_key(key: &KeyEvent, table: &mut TableState, rows: usize) -> bool {
    if key.kind == KeyEventKind::Release || rows == 0 {
        return false;
    }
    let current = table.selected().unwrap_or(0);
    let next = match key.code {
        KeyCode::Down | KeyCode::Char('j') => (current + 1).min(rows - 1),
        KeyCode::Up | KeyCode::Char('k') => current.saturating_sub(1),
        KeyCode::Home => 0,
        KeyCode::End => rows - 1,
        _ => return false,
    };
    table.select(Some(next));
    next != current
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::{HandlerSummary, ProbeSnapshot};
    use crate::spec::ProbeKind;
    use ratatui::{Terminal, backend::TestBackend};

    fn render(width: u16, height: u16, snapshot: &Snapshot, labels: &[ProbeLabel]) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
        let target = TargetLine {
            pid: 4242,
            comm: "workload".into(),
        };
        let mut table = TableState::default().with_selected(Some(0));
        terminal
            .draw(|frame| {
                draw(
                    frame,
                    &mut Screen {
                        target: &target,
                        labels,
                        snapshot,
                        table: &mut table,
                    },
                )
            })
            .expect("draw");
        let buffer = terminal.backend().buffer();
        (0..height)
            .map(|y| {
                (0..width)
                    .map(|x| buffer[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn rows_show_percentiles() {
        let labels = vec![
            ProbeLabel::new(ProbeKind::Uprobe, "work_unit", "/w"),
            ProbeLabel::new(ProbeKind::Uretprobe, "leaf_ret", "/w"),
        ];
        let probe = ProbeSnapshot {
            hits: 1234,
            dropped: 0,
            per_second: 20_000.0,
            handler: HandlerSummary {
                count: 1234,
                min: 90,
                mean: 250.0,
                p50: 240,
                p90: 300,
                p99: 1200,
                p999: 5000,
                max: 30_000,
            },
        };
        let snapshot = Snapshot {
            elapsed: Duration::from_secs(7),
            probes: vec![probe, probe],
            events_per_second: 40_000.0,
            received: 2468,
            dropped: 0,
        };
        let screen = render(100, 10, &snapshot, &labels);
        assert!(screen.contains("pid 4242 (workload)"), "{screen}");
        assert!(screen.contains("2 probes"), "{screen}");
        assert!(screen.contains("40.0k events/s"), "{screen}");
        assert!(screen.contains("uprobe:work_unit"), "{screen}");
        assert!(screen.contains("uretprobe:leaf_ret"), "{screen}");
        assert!(screen.contains("1.20us"), "{screen}");
        assert!(screen.contains("30.0us"), "{screen}");
    }

    #[test]
    fn fits_80_columns() {
        let labels = vec![ProbeLabel::new(ProbeKind::Uprobe, "work_unit", "/w")];
        let snapshot = Snapshot {
            probes: vec![ProbeSnapshot::default()],
            ..Default::default()
        };
        let screen = render(80, 24, &snapshot, &labels);
        assert!(screen.contains("uprobe:work_unit"), "{screen}");
        assert!(screen.contains("DROPS"), "{screen}");
    }

    #[test]
    fn keys_move_selection_within_bounds() {
        let mut table = TableState::default().with_selected(Some(0));
        let key = |code| KeyEvent::new(code, KeyModifiers::NONE);
        assert!(!handle_key(&key(KeyCode::Up), &mut table, 3));
        assert!(handle_key(&key(KeyCode::Down), &mut table, 3));
        assert!(handle_key(&key(KeyCode::End), &mut table, 3));
        assert_eq!(table.selected(), Some(2));
        assert!(!handle_key(&key(KeyCode::Down), &mut table, 3));
        assert!(is_quit(&key(KeyCode::Char('q'))));
        assert!(is_quit(&KeyEvent::new(
            KeyCode::Char('c'),
            KeyModifiers::CONTROL
        )));
        assert!(!is_quit(&key(KeyCode::Char('c'))));
    }
}
