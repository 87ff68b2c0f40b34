//! The `?` overlay: what every column and mark means (first page), then every key and
//! mouse action (`?` again).

use ratatui::{
    Frame,
    layout::{Constraint, Flex, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Clear, Paragraph},
};

use super::app::App;

/// Every key the UI knows, as the overlay lists them.
pub(super) const KEYS: [(&str, &str); 18] = [
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
    ("", "? again: back to what the columns mean"),
];

/// What each column, mark and word on screen means, one line each.
pub(super) const MEANINGS: [(&str, &str); 21] = [
    (
        "cost",
        "status line: what all probes together cost the target,",
    ),
    // The headline's one rule (`headline::against_target`), in words.
    ("", "  a share of one CPU; then +18% on target's 17.9% (its"),
    ("", "  own CPU) when that is known within a quarter, else"),
    ("", "  90% of target's cpu: the probes' share of all it ran"),
    (
        "est / in situ",
        "estimated from `probetop calibrate`, or measured on",
    ),
    (
        "",
        "  the target by detaching the probes in turn (--in-situ)",
    ),
    (
        "PROBE  K",
        "function first; K its kind, as -e takes it (where",
    ),
    ("", "  kinds mix): u uprobe, ur uretprobe, U usdt"),
    (
        "COST/HIT",
        "what one hit costs the target: trap, kernel, program",
    ),
    ("%CPU", "share of one CPU this probe's hits cost the target"),
    ("", "  (per-probe costs do not add up: hits share caches)"),
    (
        "HITS/S HITS",
        "hits a second (last second), hits since start",
    ),
    (
        "DROPS",
        "hits whose record was lost: the ring buffer was full",
    ),
    (
        "handler",
        "P50..MEAN: the BPF program's own time, part of COST",
    ),
    (
        "[sstep]",
        "single-stepped site: the kernel cannot emulate the",
    ),
    ("", "  instruction, so each hit costs several times more"),
    (
        "[opt] [refused]",
        "site optimized by the kernel / refused by it",
    ),
    ("[k] [s] [off]", "counted in the kernel, sampled, detached"),
    (
        "caches warm/cold",
        "which calibration loop priced the hits (--assume)",
    ),
    (
        "hits … apart",
        "time between a CPU's hits (longer: colder);",
    ),
    ("", "  cost read from how slow hits ran, or that time"),
];

pub(super) fn render(frame: &mut Frame, area: Rect, app: &App) {
    let theme = app.theme;
    let (entries, title, bottom): (&[(&str, &str)], _, _) = if app.help_page == 0 {
        (&MEANINGS, " what you see ", " ? keys · any key closes ")
    } else {
        (&KEYS, " keys ", " any key closes ")
    };
    let key_width = entries
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let lines: Vec<Line> = entries
        .iter()
        .map(|(key, what)| {
            Line::from(vec![
                Span::styled(format!(" {key:<key_width$}  "), theme.key()),
                Span::raw(*what),
            ])
        })
        .collect();
    let text_width = entries
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
                .title(Span::styled(title, theme.title()))
                .title_bottom(Line::from(bottom).right_aligned()),
        ),
        popup,
    );
}
