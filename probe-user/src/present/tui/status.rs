//! The status line (target, probes, rates, drops, probetop's own cost) and the footer
//! (key hints, the filter being typed, or the latest message).

use ratatui::{
    Frame,
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
};

use super::app::App;
use crate::present::format;

/// A part of the status line, in a long and a short form; higher priorities are
/// dropped first when even the short forms do not fit.
struct Part {
    long: String,
    short: String,
    priority: u8,
    warn: bool,
}

pub fn render_status(frame: &mut Frame, area: Rect, app: &App) {
    let theme = app.theme;
    let snap = &app.snapshot;
    // Rows of a program the target exec'd away from are neither attached nor missing.
    let (attached, live) = app.attached_count();
    let cpu = snap
        .own
        .cpu_share
        .map_or_else(|| "-".into(), format::percent);
    let rss = snap.own.rss_bytes.map_or_else(|| "-".into(), format::bytes);
    let part = |long: String, short: String, priority, warn| Part {
        long,
        short,
        priority,
        warn,
    };
    // What the probes cost the target, in all (hits/s x whole cost per hit), once this
    // machine is calibrated.
    // Measured on the target (`--in-situ`) wins over the estimate.
    let in_situ = app.in_situ.as_ref().map(|(status, _)| {
        part(
            status.clone(),
            status.replacen("in situ", "situ", 1).replace(" cpu", ""),
            1,
            false,
        )
    });
    let target_cost = in_situ.or_else(|| {
        // Hot or cold: which calibration loop priced the hits (--assume).
        let caches = snap.assumption.as_ref().map_or("", |d| match d.assumes {
            crate::price::assume::Assumption::Hot => " hot",
            crate::price::assume::Assumption::Cold => " cold",
            crate::price::assume::Assumption::Clock => " clock",
        });
        snap.cpu_share().map(|share| {
            let long = format!("probes cost target {} cpu", format::percent(share));
            part(
                if caches.is_empty() {
                    long
                } else {
                    format!("{long},{caches} caches")
                },
                format!("target {}{caches}", format::percent(share)),
                1,
                false,
            )
        })
    });
    let parts: Vec<Part> = [
        Some(part("probetop".into(), "probetop".into(), 3, false)),
        Some(part(
            format!("pid {} ({})", app.target.pid, app.target.comm),
            format!("pid {} {}", app.target.pid, app.target.comm),
            0,
            false,
        )),
        Some(part(
            format!("{attached}/{live} probes attached"),
            format!("{attached}/{live} attached"),
            0,
            attached < live,
        )),
        Some(part(
            format!("{} events/s", format::count(snap.events_per_second)),
            format!("{} ev/s", format::count(snap.events_per_second)),
            0,
            false,
        )),
        Some(part(
            format!("{} drops", snap.dropped),
            format!("{} drops", snap.dropped),
            0,
            snap.dropped > 0,
        )),
        target_cost,
        Some(part(
            format!("self: cpu {cpu}, rss {rss}"),
            format!("self {cpu} {rss}"),
            1,
            false,
        )),
        Some(part(
            format::clock(snap.elapsed),
            format::clock(snap.elapsed),
            2,
            false,
        )),
    ]
    .into_iter()
    .flatten()
    .collect();
    let paused = app.paused.then_some("PAUSED");
    let budget = (area.width as usize).saturating_sub(paused.map_or(0, |p| p.len() + 2));
    // Long forms with every part, then short forms dropping parts until they fit.
    let levels = [(true, 3), (false, 3), (false, 2), (false, 1), (false, 0)];
    let (long, keep) = levels
        .into_iter()
        .find(|&(long, keep)| {
            let separator = if long { 3 } else { 2 };
            // A leading space, the parts, a separator between each two.
            let width: usize = parts
                .iter()
                .filter(|p| p.priority <= keep)
                .map(|p| {
                    separator
                        + if long {
                            p.long.chars().count()
                        } else {
                            p.short.chars().count()
                        }
                })
                .sum();
            width + 1 - separator <= budget
        })
        .unwrap_or((false, 0));
    let separator = if long { " · " } else { "  " };
    let mut spans = vec![Span::raw(" ")];
    for (i, p) in parts.into_iter().filter(|p| p.priority <= keep).enumerate() {
        if i > 0 {
            spans.push(Span::raw(separator));
        }
        let text = if long { p.long } else { p.short };
        spans.push(if p.warn {
            Span::styled(text, theme.status_bar().patch(theme.warning()))
        } else {
            Span::raw(text)
        });
    }
    frame.render_widget(
        Paragraph::new(Line::from(spans)).style(theme.status_bar()),
        area,
    );
    if let Some(paused) = paused {
        let width = paused.len() as u16 + 2;
        let at = Rect::new(
            area.right().saturating_sub(width),
            area.y,
            width.min(area.width),
            1,
        );
        frame.render_widget(
            Paragraph::new(format!(" {paused} ")).style(theme.paused().patch(theme.status_bar())),
            at,
        );
    }
}

/// Key hints shown in the footer, most useful first (cut at the terminal's width).
const HINTS: [(&str, &str); 9] = [
    ("q", "quit"),
    ("?", "help"),
    ("/", "filter"),
    ("<>", "sort"),
    ("i", "view"),
    ("p", "pause"),
    ("r", "reset"),
    ("␣", "detach"),
    ("e", "export"),
];

pub fn render_footer(frame: &mut Frame, area: Rect, app: &App) {
    let theme = app.theme;
    let line = if app.editing_filter {
        Line::from(vec![
            Span::styled("/", theme.key()),
            Span::raw(app.filter.clone()),
            Span::styled("█", theme.dim()),
            Span::styled("   enter keep · esc clear", theme.dim()),
        ])
    } else if let Some(message) = &app.message {
        Line::from(format!(" {message}"))
    } else {
        let mut spans = Vec::new();
        let mut used = 0;
        for (at, (key, what)) in HINTS.into_iter().enumerate() {
            // A run-long note (no calibration) comes after quit and help, if it fits.
            if let (2, Some(note)) = (at, app.note) {
                let note = format!("  {note}");
                if used + note.chars().count() <= area.width as usize {
                    used += note.chars().count();
                    spans.push(Span::styled(note, theme.key()));
                }
            }
            let separator = if spans.is_empty() { 0 } else { 2 };
            let width = separator + key.chars().count() + 1 + what.len();
            if used + width > area.width as usize {
                break;
            }
            used += width;
            if separator > 0 {
                spans.push(Span::raw("  "));
            }
            spans.push(Span::styled(key, theme.key()));
            spans.push(Span::styled(format!(" {what}"), theme.dim()));
        }
        if !app.filter.is_empty() {
            let filter = format!(" /{}", app.filter);
            if used + filter.len() <= area.width as usize {
                spans.push(Span::styled(filter, theme.key()));
            }
        }
        Line::from(spans)
    };
    frame.render_widget(Paragraph::new(line), area);
}
