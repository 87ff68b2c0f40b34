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
use crate::aggregate::{ProbeSnapshot, Snapshot};

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

    let columns = visible_columns(body.width.saturating_sub(2));
    let head = Row::new(
        std::iter::once(Cell::from("PROBE").bold()).chain(
            columns
                .iter()
                .map(|c| Cell::from(Line::from(c.title).right_aligned()).bold()),
        ),
    );
    let rows = screen
        .labels
        .iter()
        .zip(&snap.probes)
        .map(|(label, probe)| {
            Row::new(
                std::iter::once(Cell::from(probe_name(label, probe))).chain(
                    columns
                        .iter()
                        .map(|c| Cell::from(Line::from((c.value)(probe)).right_aligned())),
                ),
            )
        });
    let widths = std::iter::once(Constraint::Min(NAME_MIN_WIDTH))
        .chain(columns.iter().map(|c| Constraint::Length(c.width)));
    let table = Table::new(rows, widths)
        .header(head)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::bordered().title(" handler time per hit "));
    frame.render_stateful_widget(table, body, screen.table);

    let footer_text = match &snap.notice {
        Some(notice) => format!(" {notice}"),
        None => " q quit   \u{2191}\u{2193} select ".to_string(),
    };
    frame.render_widget(Paragraph::new(footer_text).dim(), footer);
}

/// The probe's name, marked when its hits do not all reach user space as records.
fn probe_name(label: &ProbeLabel, probe: &ProbeSnapshot) -> String {
    match probe.mode {
        probe_common::mode::SAMPLE => format!("{} [sampled]", label.display),
        probe_common::mode::KERNEL_HISTOGRAM => format!("{} [in-kernel]", label.display),
        _ => label.display.clone(),
    }
}

/// Narrowest the probe name column may get before numeric columns are hidden.
const NAME_MIN_WIDTH: u16 = 18;

/// A numeric column of the probe table.
struct Column {
    title: &'static str,
    width: u16,
    /// Lower is kept longer when the terminal is narrow.
    priority: u8,
    value: fn(&ProbeSnapshot) -> String,
}

const COLUMNS: [Column; 10] = [
    Column {
        title: "HITS",
        width: 9,
        priority: 0,
        value: |p| p.hits.to_string(),
    },
    Column {
        title: "HITS/S",
        width: 6,
        priority: 0,
        value: |p| format::count(p.per_second),
    },
    Column {
        title: "MIN",
        width: 6,
        priority: 2,
        value: |p| format::ns(p.handler.min),
    },
    Column {
        title: "P50",
        width: 6,
        priority: 0,
        value: |p| format::ns(p.handler.p50),
    },
    Column {
        title: "P90",
        width: 6,
        priority: 3,
        value: |p| format::ns(p.handler.p90),
    },
    Column {
        title: "P99",
        width: 6,
        priority: 0,
        value: |p| format::ns(p.handler.p99),
    },
    Column {
        title: "P99.9",
        width: 6,
        priority: 1,
        value: |p| format::ns(p.handler.p999),
    },
    Column {
        title: "MAX",
        width: 6,
        priority: 0,
        value: |p| format::ns(p.handler.max),
    },
    Column {
        title: "MEAN",
        width: 6,
        priority: 3,
        value: |p| format::ns_f(p.handler.mean),
    },
    Column {
        title: "DROPS",
        width: 6,
        priority: 0,
        value: |p| p.dropped.to_string(),
    },
];

/// The numeric columns that fit beside a readable probe name in `width` cells, least
/// important dropped first.
fn visible_columns(width: u16) -> Vec<&'static Column> {
    let mut shown: Vec<&Column> = COLUMNS.iter().collect();
    let needed = |cols: &[&Column]| NAME_MIN_WIDTH + cols.iter().map(|c| c.width + 1).sum::<u16>();
    for priority in (1..=3).rev() {
        if needed(&shown) <= width {
            break;
        }
        shown.retain(|c| c.priority < priority);
    }
    shown
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
    use crate::aggregate::HandlerSummary;
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
            mode: probe_common::mode::RING,
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
            whole_cost_ns: None,
            cpu_share: None,
        };
        let snapshot = Snapshot {
            elapsed: Duration::from_secs(7),
            notice: None,
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
        for title in ["HITS", "HITS/S", "P50", "P99", "MAX", "DROPS"] {
            assert!(screen.contains(title), "{title} missing:\n{screen}");
        }
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
