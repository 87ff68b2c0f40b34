//! The probe table: one row per probe, sorted and filtered; numeric columns drop by
//! priority so it fits 80 columns.

use ratatui::{
    Frame,
    layout::{Constraint, Flex, Rect},
    text::{Line, Span},
    widgets::{Block, Cell, Paragraph, Row, Table, TableState},
};

use super::app::{App, effective_offset, visible_rows};
use super::columns::{
    COLUMN_SPACING, COLUMNS, Column, HANDLER_FROM, NAME_MIN_WIDTH, OWNER_WIDTH, SortColumn, View,
    layout,
};
use crate::present::format;

const SORT_MARK_DESCENDING: &str = "▼";
const SORT_MARK_ASCENDING: &str = "▲";

/// `text` cut to `width` characters, with an ellipsis where it was cut.
pub(super) fn ellipsize(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut cut: String = text.chars().take(width - 1).collect();
    cut.push('…');
    cut
}

/// `text` cut to `width` characters in the middle: probe names differ at their ends
/// (`usdt:hotspot:method__entry` and `method__return`), so both ends stay. The end gets
/// the odd character.
pub(super) fn ellipsize_middle(text: &str, width: usize) -> String {
    let count = text.chars().count();
    if count <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let head = (width - 1) / 2;
    let tail = width - 1 - head;
    let mut cut: String = text.chars().take(head).collect();
    cut.push('…');
    cut.extend(text.chars().skip(count - tail));
    cut
}

/// What sets a probe's row apart after its name: detached, sampled, aggregated in the
/// kernel, retired by an exec.
fn mark(app: &App, id: usize, short: bool) -> String {
    let mode = app.snapshot.probes.get(id).map(|p| p.mode);
    if let Some(exec) = app.before_exec(id) {
        return if short {
            " [old]".to_string()
        } else {
            format!(" [before exec {exec}]")
        };
    }
    let mark = if !app.is_attached(id) {
        if short { " [off]" } else { " [detached]" }
    } else {
        match mode {
            Some(crate::delivery::DeliveryMode::Sample) => {
                if short {
                    " [s]"
                } else {
                    " [sampled]"
                }
            }
            Some(crate::delivery::DeliveryMode::KernelHistogram) => {
                if short {
                    " [k]"
                } else {
                    " [in-kernel]"
                }
            }
            _ => "",
        }
    };
    mark.to_string()
}

/// Width of the kind's column inside the name's (`ur`), and the space before it.
const KIND_WIDTH: usize = 2;

/// Whether the table shows each row's kind ([`crate::present::names::shows_kinds`]).
pub(super) fn shows_kinds(labels: &[crate::present::ProbeLabel]) -> bool {
    crate::present::names::shows_kinds(labels)
}

/// The rows' names, function first and without their kind, each in `width` characters
/// with its mark (and its kind after it, where the table shows kinds), as
/// [`crate::present::names::row_names`] makes them for every table.
fn probe_names(app: &App, rows: &[usize], width: usize) -> Vec<String> {
    let kinds = shows_kinds(&app.labels);
    let room = if kinds {
        width.saturating_sub(KIND_WIDTH + 1)
    } else {
        width
    };
    // Narrow columns get short marks, so the name stays readable; so does a name the
    // long mark would cut (another tool's row: `do_command <bpftrace 28964> [s]`, not
    // `do_command <bpftrace 2… [sampled]`).
    let short = room < 30;
    let marked = |id: usize| {
        let long = mark(app, id, short);
        let whole = |mark: &str| {
            let name = crate::present::names::fit_name(
                &app.labels[id].display,
                room.saturating_sub(mark.chars().count()),
            );
            !name.contains('…') || name.contains("(…)") && !name.ends_with('…')
        };
        if short || whole(&long) {
            return long;
        }
        let brief = mark(app, id, true);
        if whole(&brief) { brief } else { long }
    };
    let mut names = crate::present::names::row_names(&app.labels, rows, room, marked);
    if kinds {
        for (name, &id) in names.iter_mut().zip(rows) {
            let kind = crate::present::names::kind_mark(app.labels[id].kind);
            *name = format!("{name:<room$} {kind}");
        }
    }
    names
}

/// The table's title count: `4 probes`, or `4 uprobes` when all are of one kind (the
/// rows then show none).
fn probes_shown(app: &App, shown: usize) -> String {
    let total = app.labels.len();
    let noun = match app.labels.first().map(|l| l.kind) {
        Some(kind) if !shows_kinds(&app.labels) => match kind {
            crate::spec::ProbeKind::Uprobe => "uprobe",
            crate::spec::ProbeKind::Uretprobe => "uretprobe",
            crate::spec::ProbeKind::Usdt => "USDT probe",
        },
        _ => "probe",
    };
    let plural = if total == 1 { "" } else { "s" };
    if app.filter.is_empty() {
        format!(" {total} {noun}{plural} ")
    } else {
        format!(" {shown} of {total} {noun}{plural} ")
    }
}

pub(super) fn render(frame: &mut Frame, area: Rect, app: &App) {
    let theme = app.theme;
    let inner_width = area.width.saturating_sub(2);
    let (owner, columns) = layout(&app.labels, inner_width);
    let sort_column = app.effective_sort_column();
    let mark = if app.sort.descending {
        SORT_MARK_DESCENDING
    } else {
        SORT_MARK_ASCENDING
    };
    let title_cell = |title: &str, sorted: bool, right: bool| {
        let text = if sorted {
            format!("{title}{mark}")
        } else {
            title.to_string()
        };
        let style = if sorted {
            theme.sorted_header()
        } else {
            theme.header()
        };
        let line = Line::from(Span::styled(text, style));
        Cell::from(if right { line.right_aligned() } else { line })
    };
    let name_width = {
        let numeric: u16 = columns
            .iter()
            .map(|c| c.width + COLUMN_SPACING)
            .sum::<u16>()
            + if owner {
                OWNER_WIDTH + COLUMN_SPACING
            } else {
                0
            };
        inner_width.saturating_sub(numeric).max(NAME_MIN_WIDTH) as usize
    };
    // The kind's column, inside the name's, is titled `K`, after the sort mark.
    let by_name = sort_column == SortColumn::Name;
    let probe_title = if shows_kinds(&app.labels) {
        let title = if by_name {
            format!("PROBE{mark}")
        } else {
            "PROBE".to_string()
        };
        let room = name_width.saturating_sub(KIND_WIDTH + 1);
        let style = if by_name {
            theme.sorted_header()
        } else {
            theme.header()
        };
        Cell::from(Line::from(Span::styled(format!("{title:<room$} K"), style)))
    } else {
        title_cell("PROBE", by_name, false)
    };
    let head = Row::new(
        std::iter::once(probe_title).chain(
            columns
                .iter()
                .map(|c| title_cell(c.title, sort_column == c.sort, true))
                .chain(owner.then(|| title_cell("OWNER", false, false))),
        ),
    );
    let rows = app.rows();
    let selected_id = app.selected_probe(&rows);
    let selected_row = selected_id.and_then(|id| rows.iter().position(|&r| r == id));
    let visible = visible_rows(area);
    let offset = effective_offset(app.offset, selected_row, visible, rows.len());
    let names = probe_names(app, &rows, name_width);
    let table_rows = rows.iter().zip(names).map(|(&id, name)| {
        let numbers = app.numbers(id);
        let row = Row::new(
            std::iter::once(Cell::from(name))
                .chain(columns.iter().map(|c| {
                    let text = (c.value)(&numbers);
                    let mut line = Line::from(text).right_aligned();
                    if c.sort == SortColumn::Drops && numbers.dropped > 0 {
                        line = line.style(theme.warning());
                    }
                    Cell::from(line)
                }))
                .chain(owner.then(|| {
                    let text = app.labels[id].owner.as_deref().unwrap_or("own");
                    Cell::from(ellipsize_middle(text, usize::from(OWNER_WIDTH)))
                })),
        );
        if app.is_attached(id) {
            row
        } else {
            row.style(theme.detached())
        }
    });
    let widths = std::iter::once(Constraint::Min(NAME_MIN_WIDTH))
        .chain(columns.iter().map(|c| Constraint::Length(c.width)))
        .chain(owner.then_some(Constraint::Length(OWNER_WIDTH)));
    let view = match app.view {
        View::Cumulative => " cumulative ".to_string(),
        View::Interval => format!(" last {} interval ", format::seconds(app.snapshot.interval)),
    };
    let shown = probes_shown(app, rows.len());
    // The probe count on the left: the right of the border heads the handler's columns.
    let mut block = Block::bordered().title(Line::from(vec![
        Span::styled(" cost to the target ", theme.title()),
        Span::raw("·"),
        Span::raw(view),
        Span::raw("·"),
        Span::raw(shown),
    ]));
    if let Some(notice) = &app.snapshot.notice {
        block = block.title_bottom(Line::from(format!(" {notice} ")).style(theme.dim()));
    }
    // Hits come only while the probes are attached: the rates say so.
    if app.in_situ.is_some() {
        block = block.title_bottom(Line::from(IN_SITU_RATES).style(theme.dim()).right_aligned());
    }
    let table = Table::new(table_rows, widths)
        .header(head)
        .flex(Flex::Start)
        .column_spacing(COLUMN_SPACING)
        .row_highlight_style(theme.selected_row())
        .block(block);
    let mut state = TableState::new()
        .with_offset(offset)
        .with_selected(selected_row);
    frame.render_stateful_widget(table, area, &mut state);
    render_handler_heading(frame, area, &columns, owner, app);

    if rows.is_empty() && area.height > 3 {
        let text = if app.filter.is_empty() {
            "no probes".to_string()
        } else {
            format!("no probe matches \"{}\"", app.filter)
        };
        let line = Rect::new(area.x + 2, area.y + 2, area.width.saturating_sub(4), 1);
        frame.render_widget(Paragraph::new(text).style(theme.dim()), line);
    }
}

/// The heading over the handler's columns, on the table's top border: those columns
/// are the BPF program's own time per hit, a part of COST/HIT, not the whole.
fn render_handler_heading(
    frame: &mut Frame,
    area: Rect,
    columns: &[&Column],
    owner: bool,
    app: &App,
) {
    let Some(from) = columns
        .iter()
        .position(|c| COLUMNS[HANDLER_FROM..].iter().any(|h| std::ptr::eq(h, *c)))
    else {
        return;
    };
    let inner = Rect::new(
        area.x + 1,
        area.y + 1,
        area.width.saturating_sub(2),
        area.height.saturating_sub(2),
    );
    let rects = super::app::column_rects(inner, columns, owner);
    // rects[0] is the name column; the OWNER column, where shown, is last.
    let rects = &rects[..rects.len() - usize::from(owner)];
    let (Some(start), Some(end)) = (rects.get(from + 1), rects.last()) else {
        return;
    };
    let span = end.right().saturating_sub(start.x) as usize;
    let Some(text) = [
        " handler: BPF program's own time ",
        " BPF program's own time ",
        " BPF handler ",
        " handler ",
    ]
    .into_iter()
    .find(|t| t.chars().count() <= span) else {
        return;
    };
    let width = text.chars().count() as u16;
    let at = Rect::new(end.right().saturating_sub(width), area.y, width, 1);
    frame.render_widget(Paragraph::new(Span::styled(text, app.theme.title())), at);
}

/// Under the table with `--in-situ`: its live rates count hits only while attached.
pub(super) const IN_SITU_RATES: &str =
    " --in-situ: HITS/S, %CPU count hits only while attached (0 when off) ";
