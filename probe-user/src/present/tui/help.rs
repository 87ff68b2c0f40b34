//! The `?` overlay: every key and mouse action.

use ratatui::{
    Frame,
    layout::{Constraint, Flex, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Clear, Paragraph},
};

use super::app::App;

/// Every key the UI knows, as the overlay lists them.
pub const KEYS: [(&str, &str); 18] = [
    (
        "q  Ctrl-C",
        "quit (detaches every probe, writes --export files)",
    ),
    ("Esc", "clear the filter, or quit"),
    ("?  F1", "this help; any key closes it"),
    ("↑ ↓  j k", "select a probe"),
    ("PgUp PgDn", "select a page up or down"),
    ("Home End  g G", "select the first or last probe"),
    ("< >  , .", "sort by the column to the left or right"),
    ("I", "invert the sort order"),
    (
        "/",
        "filter probes by name or object; Enter keeps, Esc clears",
    ),
    ("i", "cumulative numbers, or the last interval's"),
    ("p", "pause the display (probes keep counting)"),
    ("r", "reset: histograms and counts restart now"),
    ("space", "detach the selected probe, or attach it again"),
    ("e", "export now (same formats as --export, or JSON)"),
    ("click", "select a row; on a column title, sort by it"),
    ("wheel", "move the selection"),
    ("", "default sort: CPU share, else hits/s"),
    ("", "marks: [k] in-kernel, [s] sampled, [off] detached"),
];

pub fn render(frame: &mut Frame, area: Rect, app: &App) {
    let theme = app.theme;
    let key_width = KEYS
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let lines: Vec<Line> = KEYS
        .iter()
        .map(|(key, what)| {
            Line::from(vec![
                Span::styled(format!(" {key:<key_width$}  "), theme.key()),
                Span::raw(*what),
            ])
        })
        .collect();
    let text_width = KEYS
        .iter()
        .map(|(_, w)| w.chars().count())
        .max()
        .unwrap_or(0)
        + key_width
        + 4;
    let width = (text_width as u16 + 2).min(area.width);
    let height = (lines.len() as u16 + 2).min(area.height);
    let [popup] = Layout::horizontal([Constraint::Length(width)])
        .flex(Flex::Center)
        .areas(area);
    let [popup] = Layout::vertical([Constraint::Length(height)])
        .flex(Flex::Center)
        .areas(popup);
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::bordered()
                .title(Span::styled(" keys ", theme.title()))
                .title_bottom(Line::from(" any key closes ").right_aligned()),
        ),
        popup,
    );
}
