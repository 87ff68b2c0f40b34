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
use crate::present::headline;

/// A part of the status line, in a long and a short form; higher priorities are
/// dropped first, one at a time, when even the short forms do not fit.
struct Part {
    long: String,
    short: String,
    priority: u8,
    warn: bool,
    /// Keeps its long form until nothing else can be shortened or dropped.
    sticky: bool,
    /// Keeps its long form after the sticky parts gave theirs up (`--budget`'s).
    firm: bool,
}

pub(super) fn render_status(frame: &mut Frame, area: Rect, app: &App) {
    let theme = app.theme;
    let snap = &app.snapshot;
    // Rows of a program the target exec'd away from are neither attached nor missing.
    let (attached, live_probes) = app.attached_count();
    // In a detached window of --in-situ no probe is attached, and that is the plan.
    let window_off = app.in_situ.as_ref().is_some_and(|view| !view.probes_on);
    let attached = if window_off { 0 } else { attached };
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
        sticky: false,
        firm: false,
    };
    // The headline leads: what every probe together costs the target, against its own
    // CPU, per hit, and how that was obtained. Measured on the target (`--in-situ`)
    // wins over the estimate once the windows gave a number.
    let live = &app.headline;
    let headline = match &app.in_situ {
        Some(view) => {
            let window = if view.probes_on {
                "probes on"
            } else {
                "probes off"
            };
            match &view.headline {
                Some((long, short)) => Part {
                    long: format!("{long}, {window}"),
                    short: format!("{short}, {window}"),
                    priority: 0,
                    warn: false,
                    sticky: true,
                    firm: false,
                },
                None => Part {
                    long: format!("{}, in situ measuring, {window}", live.status()),
                    short: format!("{}, in situ measuring, {window}", live.status_short()),
                    priority: 0,
                    warn: false,
                    sticky: true,
                    firm: false,
                },
            }
        }
        None => Part {
            long: live.status(),
            short: live.status_short(),
            priority: 0,
            warn: live.too_dear(),
            sticky: true,
            firm: false,
        },
    };
    // Counts are padded to their abbreviated width (`format::count` turns 9999 into
    // 10.0k): a number crossing a digit must not move the line into another layout.
    let parts: Vec<Part> = [
        Some(headline),
        Some(part("probetop".into(), "probetop".into(), 6, false)),
        Some(part(
            format!("pid {} ({})", app.target.pid, app.target.comm),
            format!("pid {} {}", app.target.pid, app.target.comm),
            1,
            false,
        )),
        // `--budget` keeps its long form at every width down to 80 columns: under it
        // the attached count (which the duty cycle does not move) gives way first.
        app.budget.as_ref().map(|(long, short)| Part {
            long: long.clone(),
            short: short.clone(),
            priority: 0,
            warn: false,
            sticky: true,
            firm: true,
        }),
        Some(part(
            format!("{attached}/{live_probes} probes attached"),
            format!("{attached}/{live_probes} attached"),
            if app.budget.is_some() && attached == live_probes {
                1
            } else {
                0
            },
            attached < live_probes && !window_off,
        )),
        Some(part(
            format!("{:>5} events/s", format::count(snap.events_per_second)),
            format!("{:>5} ev/s", format::count(snap.events_per_second)),
            2,
            false,
        )),
        Some(part(
            format!("{} drops", snap.dropped),
            format!("{} drops", snap.dropped),
            if snap.dropped > 0 { 0 } else { 4 },
            snap.dropped > 0,
        )),
        Some(part(
            format!("self: cpu {cpu:>5}, rss {rss}"),
            format!("self {cpu:>5} {rss}"),
            3,
            false,
        )),
        Some(part(
            format::clock(snap.elapsed),
            format::clock(snap.elapsed),
            5,
            false,
        )),
    ]
    .into_iter()
    .flatten()
    .collect();
    let paused = app.paused.then_some("PAUSED");
    let budget = (area.width as usize).saturating_sub(paused.map_or(0, |p| p.len() + 2));
    // Long forms with every part, then short forms dropping parts until they fit; the
    // headline keeps its long form until the last but one, `--budget`'s until the last.
    let levels = std::iter::once((true, 2, 6))
        .chain((0..=6).rev().map(|keep| (false, 2, keep)))
        .chain([(false, 1, 0), (false, 0, 0)]);
    // How long a part stays long: 2 sticky and firm parts, 1 firm ones, 0 none.
    let is_long = |p: &Part, long: bool, kept: u8| -> bool {
        long || (p.sticky && kept >= 2) || (p.firm && kept >= 1)
    };
    let text_of = |p: &Part, long: bool, kept: u8| -> usize {
        if is_long(p, long, kept) {
            p.long.chars().count()
        } else {
            p.short.chars().count()
        }
    };
    let (long, kept, keep) = levels
        .into_iter()
        .find(|&(long, kept, keep)| {
            let separator = if long { 3 } else { 2 };
            // A leading space, the parts, a separator between each two.
            let width: usize = parts
                .iter()
                .filter(|p| p.priority <= keep)
                .map(|p| separator + text_of(p, long, kept))
                .sum();
            width + 1 - separator <= budget
        })
        .unwrap_or((false, 0, 0));
    let separator = if long { " · " } else { "  " };
    let mut spans = vec![Span::raw(" ")];
    for (i, p) in parts.into_iter().filter(|p| p.priority <= keep).enumerate() {
        if i > 0 {
            spans.push(Span::raw(separator));
        }
        let text = if is_long(&p, long, kept) {
            p.long
        } else {
            p.short
        };
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

pub(super) fn render_footer(frame: &mut Frame, area: Rect, app: &App) {
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
    } else if let Some(warning) = cost_warning(app, (area.width as usize).saturating_sub(1)) {
        Line::from(Span::styled(format!(" {warning}"), theme.warning()))
    } else {
        let mut spans = Vec::new();
        let mut used = 0;
        // The filter in force keeps its place: the hints and the note fill what is left.
        let filter = (!app.filter.is_empty()).then(|| format!(" /{}", app.filter));
        let room =
            (area.width as usize).saturating_sub(filter.as_ref().map_or(0, |f| f.chars().count()));
        for (at, (key, what)) in HINTS.into_iter().enumerate() {
            // A run-long note (no calibration) comes after quit and help, if it fits.
            if let (2, Some(note)) = (at, app.note) {
                let note = format!("  {note}");
                if used + note.chars().count() <= room {
                    used += note.chars().count();
                    spans.push(Span::styled(note, theme.key()));
                }
            }
            let separator = if spans.is_empty() { 0 } else { 2 };
            let width = separator + key.chars().count() + 1 + what.len();
            if used + width > room {
                break;
            }
            used += width;
            if separator > 0 {
                spans.push(Span::raw("  "));
            }
            spans.push(Span::styled(key, theme.key()));
            spans.push(Span::styled(format!(" {what}"), theme.dim()));
        }
        if let Some(filter) = filter {
            spans.push(Span::styled(filter, theme.key()));
        }
        Line::from(spans)
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// The guard: once the probes cost the target more than 5% of a CPU or of its own CPU,
/// the footer says so in `width` characters, naming the dearest probes (keys stay in `?`).
/// Not under `--budget`: the budget holds the cost, and its status says what it uses.
pub(super) fn cost_warning(app: &App, width: usize) -> Option<String> {
    if app.budget.is_some() {
        return None;
    }
    headline::live_warning_fit(&app.labels, &app.snapshot, &app.headline, width)
}
