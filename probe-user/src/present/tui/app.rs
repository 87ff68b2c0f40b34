//! The UI's state and how keys and the mouse change it. Pure: no terminal, no I/O, so
//! every interaction is testable; [`super::draw`] renders an [`App`] as it is.

use crossterm::event::{
    KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};
use ratatui::layout::{Constraint, Flex, Layout, Margin, Rect};

use super::columns::{self, Numbers, SortColumn, View};
use super::theme::Theme;
use crate::present::ProbeLabel;
use crate::present::Snapshot;
use crate::present::headline::Headline;

/// Who is being probed, for the status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TargetLine {
    pub pid: u32,
    pub comm: String,
}

/// What the UI asks of the session, which owns the probes and the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UiRequest {
    /// Detach the probe if attached, attach it again if not.
    ToggleAttach(u32),
    /// Restart every histogram and count.
    Reset,
    /// Write the exports now, without stopping.
    Export,
}

/// What the session tells the UI back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UiEvent {
    /// A probe was detached or attached again.
    Attached { probe_id: u32, attached: bool },
    /// One line for the footer: an export written, a request that failed.
    Message(String),
    /// The in-situ measurement so far (`--in-situ`): once measured, the headline
    /// (long and short form); whether the probes are attached in this window; a line
    /// for the detail pane.
    InSitu {
        headline: Option<(String, String)>,
        probes_on: bool,
        detail: String,
    },
    /// `--budget`'s part of the status line, long and short:
    /// `budget 1.0%: using 0.8% (duty 35%)`.
    Budget { long: String, short: String },
    /// The target exec'd and probetop followed (`--follow-exec`): the whole probe list
    /// (rows of the old program marked, the new program's appended), which are
    /// attached, who the target is now, and what happened.
    Followed {
        target: TargetLine,
        labels: Vec<ProbeLabel>,
        attached: Vec<bool>,
        message: String,
    },
}

/// How the table is sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sort {
    pub column: SortColumn,
    pub descending: bool,
}

impl Default for Sort {
    /// By CPU share, highest first, like top.
    fn default() -> Self {
        Self {
            column: SortColumn::CpuShare,
            descending: true,
        }
    }
}

/// Everything the screen shows, and nothing else.
#[derive(Debug, Clone)]
pub(crate) struct App {
    pub target: TargetLine,
    pub labels: Vec<ProbeLabel>,
    /// Whether `--args` captures argument values (the detail pane shows them then).
    pub args_on: bool,
    pub theme: Theme,
    /// The snapshot on screen (frozen while paused).
    pub snapshot: Snapshot,
    /// Its headline, read after the one before ([`Headline::live_after`]: the form
    /// holds at the rule's edge).
    pub headline: Headline,
    pub sort: Sort,
    /// Probes whose name or object contains this (case-insensitive) are shown.
    pub filter: String,
    /// Keys go to the filter line.
    pub editing_filter: bool,
    /// The selected probe (an id, so the selection follows it when rows move).
    pub selected: Option<usize>,
    /// First table row on screen.
    pub offset: usize,
    pub view: View,
    pub paused: bool,
    pub help: bool,
    /// The overlay's page: 0 what the columns and marks mean, 1 the keys.
    pub help_page: usize,
    /// Per probe id: attached now (the session reports changes).
    pub attached: Vec<bool>,
    /// A line for the footer until the next key (or a few seconds).
    pub message: Option<String>,
    /// The terminal's size, for mouse hit-testing and scrolling.
    pub size: (u16, u16),
    /// The in-situ measurement's status part and detail line (`--in-situ`).
    pub in_situ: Option<InSituView>,
    /// Said in the footer before the key hints for the whole run (no calibration).
    pub note: Option<&'static str>,
    /// `--budget`'s status part, long and short.
    pub budget: Option<(String, String)>,
}

/// What the UI shows of the in-situ measurement (`--in-situ`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InSituView {
    /// The measured headline, long and short; `None` until the windows gave one.
    pub headline: Option<(String, String)>,
    /// Whether the probes are attached in the current window.
    pub probes_on: bool,
    pub detail: String,
}

/// What an input asks of the event loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    Nothing,
    Redraw,
    Quit,
    Send(UiRequest),
}

/// Where each part of the screen goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Areas {
    pub status: Rect,
    pub table: Rect,
    /// Hidden on short terminals.
    pub detail: Option<Rect>,
    pub footer: Rect,
}

/// Below this height the detail pane is hidden and the table takes the screen.
const DETAIL_MIN_BODY: u16 = 14;

impl Areas {
    /// The layout of a terminal of `area` showing `rows` table rows.
    pub(crate) fn of(area: Rect, rows: usize) -> Self {
        let [status, body, footer] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Fill(1),
            Constraint::Length(1),
        ])
        .areas(area);
        if body.height < DETAIL_MIN_BODY {
            return Self {
                status,
                table: body,
                detail: None,
                footer,
            };
        }
        // Borders and the header take 3 lines; the table gets at most 45% of the body
        // when many probes compete with the detail pane.
        let wanted = (rows as u16).saturating_add(3);
        let most = (body.height * 45 / 100).max(6);
        let table_height = wanted.clamp(4, most);
        let [table, detail] =
            Layout::vertical([Constraint::Length(table_height), Constraint::Fill(1)]).areas(body);
        Self {
            status,
            table,
            detail: Some(detail),
            footer,
        }
    }
}

/// Table rows that fit in a table area (inside its borders, below its header).
pub(super) fn visible_rows(table: Rect) -> usize {
    table.height.saturating_sub(3) as usize
}

/// The first row on screen such that `selected_row` is visible, moving `offset` as
/// little as possible.
pub(super) fn effective_offset(
    offset: usize,
    selected_row: Option<usize>,
    visible: usize,
    total: usize,
) -> usize {
    let visible = visible.max(1);
    let mut offset = offset.min(total.saturating_sub(visible));
    if let Some(row) = selected_row {
        if row < offset {
            offset = row;
        } else if row >= offset + visible {
            offset = row + 1 - visible;
        }
    }
    offset
}

impl App {
    pub(crate) fn new(
        target: TargetLine,
        labels: Vec<ProbeLabel>,
        args_on: bool,
        theme: Theme,
    ) -> Self {
        let count = labels.len();
        Self {
            target,
            labels,
            args_on,
            theme,
            snapshot: Snapshot::default(),
            headline: Headline::default(),
            sort: Sort::default(),
            filter: String::new(),
            editing_filter: false,
            selected: None,
            offset: 0,
            view: View::Cumulative,
            paused: false,
            help: false,
            help_page: 0,
            attached: vec![true; count],
            message: None,
            size: (80, 24),
            in_situ: None,
            budget: None,
            note: None,
        }
    }

    /// Probe ids in table order: filtered, then sorted; ties keep id order.
    pub(crate) fn rows(&self) -> Vec<usize> {
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<usize> = (0..self.labels.len())
            .filter(|&id| {
                needle.is_empty() || {
                    let label = &self.labels[id];
                    label.display.to_lowercase().contains(&needle)
                        || label.object.to_lowercase().contains(&needle)
                }
            })
            .collect();
        let column = self.effective_sort_column();
        let numbers: Vec<Numbers> = (0..self.labels.len()).map(|id| self.numbers(id)).collect();
        // By name as the rows show it, function first, then by kind.
        let by_name = |a: usize, b: usize| {
            let (a, b) = (&self.labels[a], &self.labels[b]);
            crate::present::names::unprefixed(&a.display)
                .cmp(crate::present::names::unprefixed(&b.display))
                .then(a.kind.cmp(&b.kind))
        };
        rows.sort_by(|&a, &b| {
            let order = if column == SortColumn::Name {
                by_name(a, b)
            } else {
                // Rows without a value go last whichever the direction. Values compare
                // as shown (three digits): rows whose numbers read the same keep their
                // places (name, then id, below) instead of swapping on every jitter.
                match (column.key(&numbers[a]), column.key(&numbers[b])) {
                    (Some(x), Some(y)) => as_shown(x).total_cmp(&as_shown(y)),
                    (Some(_), None) => return std::cmp::Ordering::Less,
                    (None, Some(_)) => return std::cmp::Ordering::Greater,
                    (None, None) => std::cmp::Ordering::Equal,
                }
            };
            let order = if self.sort.descending {
                order.reverse()
            } else {
                order
            };
            order.then_with(|| by_name(a, b)).then(a.cmp(&b))
        });
        rows
    }

    /// The sort column in force: CPU share falls back to hits/s while no probe has a
    /// CPU share.
    pub(crate) fn effective_sort_column(&self) -> SortColumn {
        if self.sort.column == SortColumn::CpuShare
            && self.snapshot.probes.iter().all(|p| p.cpu_share.is_none())
        {
            SortColumn::PerSecond
        } else {
            self.sort.column
        }
    }

    /// The numbers of probe `id` in the current view (zero before the first snapshot).
    pub(crate) fn numbers(&self, id: usize) -> Numbers {
        self.snapshot
            .probes
            .get(id)
            .map(|p| Numbers::of(p, self.view))
            .unwrap_or_default()
    }

    pub(crate) fn is_attached(&self, id: usize) -> bool {
        self.attached.get(id).copied().unwrap_or(true)
    }

    /// The exec that replaced probe `id`'s program, if one did: the row no longer fires.
    pub(crate) fn before_exec(&self, id: usize) -> Option<u32> {
        self.labels.get(id).and_then(|l| l.before_exec)
    }

    /// (attached, all) among the probes of the program the target runs now.
    pub(crate) fn attached_count(&self) -> (usize, usize) {
        let live = (0..self.labels.len()).filter(|&id| self.before_exec(id).is_none());
        live.fold((0, 0), |(attached, all), id| {
            (attached + usize::from(self.is_attached(id)), all + 1)
        })
    }

    /// The selected probe, or the first row's when the selection is filtered out.
    pub(crate) fn selected_probe(&self, rows: &[usize]) -> Option<usize> {
        match self.selected {
            Some(id) if rows.contains(&id) => Some(id),
            _ => rows.first().copied(),
        }
    }

    /// Areas of the current terminal size.
    pub(crate) fn areas(&self) -> Areas {
        Areas::of(Rect::new(0, 0, self.size.0, self.size.1), self.labels.len())
    }

    /// Takes a new snapshot unless paused; returns whether the screen would change.
    pub(crate) fn update(&mut self, snapshot: Snapshot) -> bool {
        if self.paused || !differs_on_screen(&self.snapshot, &snapshot) {
            return false;
        }
        self.headline = Headline::live_after(&snapshot, Some(&self.headline));
        self.snapshot = snapshot;
        true
    }

    pub(crate) fn apply(&mut self, event: UiEvent) {
        match event {
            UiEvent::Attached { probe_id, attached } => {
                if let Some(slot) = self.attached.get_mut(probe_id as usize) {
                    *slot = attached;
                }
                let name = self
                    .labels
                    .get(probe_id as usize)
                    .map_or("probe", |l| l.display.as_str());
                self.message = Some(format!(
                    "{name} {}",
                    if attached {
                        "attached again"
                    } else {
                        "detached"
                    }
                ));
            }
            UiEvent::Message(text) => self.message = Some(text),
            UiEvent::InSitu {
                headline,
                probes_on,
                detail,
            } => {
                self.in_situ = Some(InSituView {
                    headline,
                    probes_on,
                    detail,
                })
            }
            UiEvent::Budget { long, short } => self.budget = Some((long, short)),
            UiEvent::Followed {
                target,
                labels,
                attached,
                message,
            } => {
                // Ids are stable (rows are only appended), so the selection stays put.
                self.target = target;
                self.labels = labels;
                self.attached = attached;
                self.message = Some(message);
                self.keep_selection_visible();
            }
        }
    }

    pub(crate) fn resize(&mut self, width: u16, height: u16) {
        self.size = (width, height);
        self.keep_selection_visible();
    }

    pub(crate) fn on_key(&mut self, key: &KeyEvent) -> Effect {
        if key.kind == KeyEventKind::Release {
            return Effect::Nothing;
        }
        let had_message = self.message.take().is_some();
        let effect = self.key_effect(key);
        self.keep_selection_visible();
        match effect {
            Effect::Nothing if had_message => Effect::Redraw,
            other => other,
        }
    }

    fn key_effect(&mut self, key: &KeyEvent) -> Effect {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('c') {
            return Effect::Quit;
        }
        if self.help {
            // `?` turns the page; any other key closes the overlay.
            if matches!(key.code, KeyCode::Char('?') | KeyCode::F(1)) && self.help_page == 0 {
                self.help_page = 1;
            } else {
                self.help = false;
            }
            return Effect::Redraw;
        }
        if self.editing_filter {
            return self.filter_key(key);
        }
        match key.code {
            KeyCode::Char('q') => Effect::Quit,
            KeyCode::Esc => {
                if self.filter.is_empty() {
                    Effect::Quit
                } else {
                    self.filter.clear();
                    Effect::Redraw
                }
            }
            KeyCode::Char('?') | KeyCode::F(1) => {
                self.help = true;
                self.help_page = 0;
                Effect::Redraw
            }
            KeyCode::Char('/') => {
                self.editing_filter = true;
                Effect::Redraw
            }
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::PageDown => self.move_selection(self.page()),
            KeyCode::PageUp => self.move_selection(-self.page()),
            KeyCode::Home | KeyCode::Char('g') => self.move_selection(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => self.move_selection(isize::MAX / 2),
            KeyCode::Char('<') | KeyCode::Char(',') => self.shift_sort(-1),
            KeyCode::Char('>') | KeyCode::Char('.') => self.shift_sort(1),
            KeyCode::Char('I') => {
                self.sort.descending = !self.sort.descending;
                Effect::Redraw
            }
            KeyCode::Char('i') => {
                self.view = match self.view {
                    View::Cumulative => View::Interval,
                    View::Interval => View::Cumulative,
                };
                Effect::Redraw
            }
            KeyCode::Char('p') => {
                self.paused = !self.paused;
                Effect::Redraw
            }
            KeyCode::Char('r') => Effect::Send(UiRequest::Reset),
            KeyCode::Char('e') => Effect::Send(UiRequest::Export),
            KeyCode::Char(' ') => match self.selected_probe(&self.rows()) {
                Some(id) => match self.before_exec(id) {
                    // Its offset means nothing in the program the target runs now.
                    Some(exec) => {
                        self.message = Some(format!(
                            "{} was replaced by exec {exec}: it cannot attach again",
                            self.labels[id].display
                        ));
                        Effect::Redraw
                    }
                    None => Effect::Send(UiRequest::ToggleAttach(id as u32)),
                },
                None => Effect::Nothing,
            },
            _ => Effect::Nothing,
        }
    }

    fn filter_key(&mut self, key: &KeyEvent) -> Effect {
        match key.code {
            KeyCode::Enter => self.editing_filter = false,
            KeyCode::Esc => {
                self.editing_filter = false;
                self.filter.clear();
            }
            KeyCode::Backspace => {
                self.filter.pop();
            }
            KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                self.filter.clear()
            }
            KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
                self.filter.push(c)
            }
            _ => return Effect::Nothing,
        }
        Effect::Redraw
    }

    pub(crate) fn on_mouse(&mut self, mouse: &MouseEvent) -> Effect {
        if self.help {
            if matches!(mouse.kind, MouseEventKind::Down(_)) {
                self.help = false;
                return Effect::Redraw;
            }
            return Effect::Nothing;
        }
        let effect = match mouse.kind {
            MouseEventKind::ScrollDown => self.move_selection(1),
            MouseEventKind::ScrollUp => self.move_selection(-1),
            MouseEventKind::Down(MouseButton::Left) => self.click(mouse.column, mouse.row),
            _ => Effect::Nothing,
        };
        self.keep_selection_visible();
        effect
    }

    /// A left click: on a column title sorts by it (again: the other way), on a row
    /// selects it.
    fn click(&mut self, x: u16, y: u16) -> Effect {
        let table = self.areas().table;
        let inner = table.inner(Margin::new(1, 1));
        if !inner.contains((x, y).into()) {
            return Effect::Nothing;
        }
        if y == inner.y {
            let (owner, columns) = columns::layout(&self.labels, inner.width);
            let rects = column_rects(inner, &columns, owner);
            let Some(index) = rects.iter().position(|r| x >= r.x && x < r.right()) else {
                return Effect::Nothing;
            };
            let column = if index == 0 {
                SortColumn::Name
            } else if let Some(column) = columns.get(index - 1) {
                column.sort
            } else {
                // The OWNER column does not sort.
                return Effect::Nothing;
            };
            if self.sort.column == column {
                self.sort.descending = !self.sort.descending;
            } else {
                self.sort = Sort {
                    column,
                    descending: column.descending_by_default(),
                };
            }
            return Effect::Redraw;
        }
        let rows = self.rows();
        let visible = visible_rows(table);
        let offset = effective_offset(
            self.offset,
            self.selected_probe(&rows)
                .and_then(|id| rows.iter().position(|&r| r == id)),
            visible,
            rows.len(),
        );
        let row = offset + (y - inner.y - 1) as usize;
        match rows.get(row) {
            Some(&id) if self.selected != Some(id) => {
                self.selected = Some(id);
                self.offset = offset;
                Effect::Redraw
            }
            Some(&id) => {
                self.selected = Some(id);
                Effect::Nothing
            }
            None => Effect::Nothing,
        }
    }

    fn page(&self) -> isize {
        visible_rows(self.areas().table).max(1) as isize
    }

    fn move_selection(&mut self, by: isize) -> Effect {
        let rows = self.rows();
        if rows.is_empty() {
            return Effect::Nothing;
        }
        let current = self
            .selected_probe(&rows)
            .and_then(|id| rows.iter().position(|&r| r == id))
            .unwrap_or(0);
        let next = current.saturating_add_signed(by).min(rows.len() - 1);
        let before = self.selected;
        self.selected = Some(rows[next]);
        if before == self.selected {
            Effect::Nothing
        } else {
            Effect::Redraw
        }
    }

    /// Moves the sort to the next column on screen to the left or right.
    fn shift_sort(&mut self, by: isize) -> Effect {
        let inner_width = self.areas().table.width.saturating_sub(2);
        let order: Vec<SortColumn> = std::iter::once(SortColumn::Name)
            .chain(
                columns::layout(&self.labels, inner_width)
                    .1
                    .iter()
                    .map(|c| c.sort),
            )
            .collect();
        let current = order
            .iter()
            .position(|&c| c == self.sort.column)
            .unwrap_or(0);
        let next = current.saturating_add_signed(by).min(order.len() - 1);
        if order[next] == self.sort.column {
            return Effect::Nothing;
        }
        self.sort = Sort {
            column: order[next],
            descending: order[next].descending_by_default(),
        };
        Effect::Redraw
    }

    /// Keeps `offset` such that the selected row is on screen.
    fn keep_selection_visible(&mut self) {
        let rows = self.rows();
        let selected_row = self
            .selected_probe(&rows)
            .and_then(|id| rows.iter().position(|&r| r == id));
        self.offset = effective_offset(
            self.offset,
            selected_row,
            visible_rows(self.areas().table),
            rows.len(),
        );
    }
}

/// `value` to three significant digits, as the table shows it.
fn as_shown(value: f64) -> f64 {
    if value == 0.0 || !value.is_finite() {
        return value;
    }
    let scale = 10f64.powi(2 - value.abs().log10().floor() as i32);
    (value * scale).round() / scale
}

/// The areas of the name column and each numeric column inside the table's borders,
/// computed as ratatui's Table computes them.
pub(super) fn column_rects(inner: Rect, columns: &[&columns::Column], owner: bool) -> Vec<Rect> {
    let widths = std::iter::once(Constraint::Min(columns::NAME_MIN_WIDTH))
        .chain(columns.iter().map(|c| Constraint::Length(c.width)))
        .chain(owner.then_some(Constraint::Length(columns::OWNER_WIDTH)));
    Layout::horizontal(widths)
        .flex(Flex::Start)
        .spacing(columns::COLUMN_SPACING)
        .split(Rect::new(inner.x, inner.y, inner.width, 1))
        .to_vec()
}

/// Whether `new` would draw differently from `old`: the clock shows whole seconds, so
/// a snapshot that only moved the clock within a second changes nothing.
fn differs_on_screen(old: &Snapshot, new: &Snapshot) -> bool {
    // Destructured so that a new field cannot be forgotten here.
    let Snapshot {
        elapsed,
        notice,
        probes,
        events_per_second,
        received,
        dropped,
        interval,
        focus,
        own,
        assumption,
        target_cpu,
        target_cpu_error,
        latency,
        keyed,
        calibrated,
    } = new;
    elapsed.as_secs() != old.elapsed.as_secs()
        || *notice != old.notice
        || *probes != old.probes
        || *events_per_second != old.events_per_second
        || *received != old.received
        || *dropped != old.dropped
        || *interval != old.interval
        || *focus != old.focus
        || *own != old.own
        || *target_cpu != old.target_cpu
        || *target_cpu_error != old.target_cpu_error
        || *latency != old.latency
        || *keyed != old.keyed
        || *calibrated != old.calibrated
        || assumption.as_ref().map(|d| d.assumes) != old.assumption.as_ref().map(|d| d.assumes)
}
