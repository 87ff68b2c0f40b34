//! The detail pane of the selected probe: its numbers, its percentile distribution on
//! HdrHistogram's log axis, hits/s and p99 over the last minute, and the argument
//! values of its last hit.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Paragraph},
};

use super::app::App;
use super::columns::View;
use super::plot::{Plot, Series};
use super::table::ellipsize;
use crate::aggregate::{CapturedArgs, FocusDetail, HISTORY_SPAN, HistoryPoint, PercentileCurve};
use crate::present::format;

pub(super) fn render(frame: &mut Frame, area: Rect, app: &App, probe: Option<usize>) {
    let theme = app.theme;
    let Some(id) = probe else {
        frame.render_widget(Block::bordered().title(" detail "), area);
        return;
    };
    let label = &app.labels[id];
    let inner_width = area.width.saturating_sub(2) as usize;
    let name = crate::present::names::fit_title(
        &label.display,
        label.resolved.as_deref(),
        inner_width.saturating_sub(4),
    );
    let object_room = inner_width.saturating_sub(name.chars().count() + 8);
    let mut block = Block::bordered().title(Span::styled(format!(" {name} "), theme.title()));
    if object_room > 8 {
        block = block.title(
            Line::from(format!(" {} ", ellipsize_left(&label.object, object_room))).right_aligned(),
        );
    }
    let inner = block.inner(area);
    frame.render_widget(block, area);

    let mut lines = vec![totals_line(app, id, inner.width as usize)];
    lines.extend(pricing_line(app, id));
    lines.push(percentiles_line(app, id, inner.width as usize));
    if let Some(owner) = &label.owner {
        let text = match owner.strip_prefix("own+") {
            Some(others) => format!(
                "owner: probetop, sharing the breakpoint with {others}: one trap runs every program; cost is probetop's part of it"
            ),
            None => format!(
                "owner: {owner}: another tool's probe, counted by probetop's counter, priced as its owner's"
            ),
        };
        lines.push(Line::from(ellipsize(&text, inner.width as usize)));
    }
    // Half of a latency pair: the pair's latency and the probes' share of it, then a
    // keyed pair's calls per key.
    let pair: Vec<&crate::aggregate::LatencyRow> = app
        .snapshot
        .latency
        .iter()
        .filter(|r| r.starts.contains(&(id as u32)) || r.ends.contains(&(id as u32)))
        .collect();
    if let Some(row) = pair.iter().find(|r| r.key.is_none()) {
        lines.push(Line::from(ellipsize(
            &latency_line(row),
            inner.width as usize,
        )));
    }
    let keyed: Vec<String> = pair
        .iter()
        .filter(|r| r.key.is_some())
        .map(|r| {
            format!(
                "{} {} calls p50 {}",
                r.display_name(),
                r.calls,
                format::ns(r.latency_ns.p50)
            )
        })
        .chain(
            app.snapshot
                .keyed
                .iter()
                .filter(|(k, _)| *k == id as u32)
                .map(|(_, k)| format!("[{}] {} hits", k.key.as_str(), k.hits)),
        )
        .collect();
    if !keyed.is_empty() {
        lines.push(Line::from(ellipsize(
            &format!("keys: {}", keyed.join(" · ")),
            inner.width as usize,
        )));
    }
    if let Some(super::app::InSituView { detail, .. }) = &app.in_situ {
        // The whole probe set's cost as measured on the target, not this probe's.
        lines.push(Line::from(ellipsize(detail, inner.width as usize)).style(theme.dim()));
    }
    if app.args_on {
        lines.push(args_line(
            app.snapshot.probes.get(id).and_then(|p| p.last_args),
        ));
    }
    let focus = app
        .snapshot
        .focus
        .as_ref()
        .filter(|f| f.probe_id as usize == id);
    // Several processes (--follow-forks, --cgroup, several --pid): who took the hits.
    if let Some(focus) = focus.filter(|f| f.process_count > 1) {
        lines.push(processes_line(focus, inner.width as usize));
    }
    let text_height = (lines.len() as u16).min(inner.height);
    let [text_area, charts] =
        Layout::vertical([Constraint::Length(text_height), Constraint::Fill(1)]).areas(inner);
    frame.render_widget(Paragraph::new(lines), text_area);
    if charts.height < 4 {
        return;
    }

    let [left, right] =
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)])
            .spacing(1)
            .areas(charts);
    match focus {
        Some(focus) => {
            percentile_pane(frame, left, app, focus);
            history_pane(frame, right, app, &focus.history);
        }
        None => {
            let why = if app.paused {
                "paused: this probe's distribution shows once resumed"
            } else {
                "collecting..."
            };
            frame.render_widget(Paragraph::new(why).style(theme.dim()), charts);
        }
    }
}

/// `by process: 8439 1000 · 8440 990 · … (13)`: the processes with most records.
fn processes_line(focus: &FocusDetail, width: usize) -> Line<'static> {
    let listed: Vec<String> = focus
        .processes
        .iter()
        .map(|(pid, n)| format!("{pid} {}", format::count(*n as f64)))
        .collect();
    let more = if focus.process_count > focus.processes.len() {
        " · …"
    } else {
        ""
    };
    let text = format!(
        "by process ({}): {}{more}",
        focus.process_count,
        listed.join(" · ")
    );
    Line::from(ellipsize(&text, width))
}

/// Keeps the end of a path, which names the file: `…/lib/x86_64/libc.so.6`.
fn ellipsize_left(text: &str, width: usize) -> String {
    let count = text.chars().count();
    if count <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let tail: String = text.chars().skip(count - (width - 1)).collect();
    format!("…{tail}")
}

/// The probe's numbers in a line `width` wide; its state goes last, whole or in a short
/// form or not at all, so that the pane's edge never cuts a word.
fn totals_line(app: &App, id: usize, width: usize) -> Line<'static> {
    let theme = app.theme;
    let n = app.numbers(id);
    let probe = app.snapshot.probes.get(id);
    // Each state long and short.
    let mode = match probe.map(|p| (p.mode, p.handler.count, p.hits)) {
        Some((crate::delivery::DeliveryMode::Sample, _, _)) => {
            ("sampled".to_string(), "sampled".to_string())
        }
        // --time-every: the histogram holds the timed hits, the counts every hit.
        Some((crate::delivery::DeliveryMode::KernelHistogram, timed, hits)) if timed < hits => {
            let share = format::percent(timed as f64 / hits as f64);
            (
                format!("in-kernel histogram, {share} of hits timed"),
                format!("in-kernel, {share} timed"),
            )
        }
        Some((crate::delivery::DeliveryMode::KernelHistogram, _, _)) => {
            ("in-kernel histogram".to_string(), "in-kernel".to_string())
        }
        _ => ("every hit streamed".to_string(), "streamed".to_string()),
    };
    let state = match app.before_exec(id) {
        Some(exec) => (format!("replaced by exec {exec}"), format!("exec {exec}")),
        None if app.is_attached(id) => mode,
        None => ("detached".to_string(), "detached".to_string()),
    };
    let drops = Span::styled(
        format!("drops {}", n.dropped),
        if n.dropped > 0 {
            theme.warning()
        } else {
            Default::default()
        },
    );
    // A probe without hits cost nothing: no price to show.
    let cost = n
        .whole_cost_ns
        .filter(|_| n.hits > 0)
        .map_or_else(|| "-".into(), format::ns_f);
    let cpu = n
        .cpu_share
        .filter(|_| n.hits > 0)
        .map_or_else(|| "-".into(), format::percent);
    // The cost first: a narrow pane cuts the end of the line.
    let head = format!(
        "cost/hit {cost} · {cpu} of a CPU · hits {} · {}/s · ",
        n.hits,
        format::count(n.per_second)
    );
    let used = head.chars().count() + drops.content.chars().count();
    let (long, short) = state;
    let state = [long, short]
        .into_iter()
        .map(|s| format!(" · {s}"))
        .find(|s| used + s.chars().count() <= width);
    let mut spans = vec![Span::raw(head), drops];
    spans.extend(state.map(Span::raw));
    Line::from(spans)
}

/// What priced the probe's hits when the time between them did: the typical time
/// before a hit on its CPU, and the code run in it (`?` explains).
fn pricing_line(app: &App, id: usize) -> Option<Line<'static>> {
    let n = app.numbers(id);
    let gap_us = n.gap_median_us.filter(|_| n.hits > 0)?;
    // In words a reader knows: what told a hot hit from a cold one, and how far apart
    // the hits came.
    let how = match n.reading {
        Some(crate::present::GapReading::Gap) | None => "cost read from the time between hits",
        Some(crate::present::GapReading::HandlerClock) => "cost read from how slow its hits ran",
        Some(crate::present::GapReading::StreamedClock) => {
            "cost read from how slow its hits ran at the start"
        }
    };
    // The median in the first bucket, gaps under 1 us (back-to-back hits), is 0.
    let median = if gap_us > 0.0 {
        format::ns_f(gap_us * 1e3)
    } else {
        "under 1us".to_string()
    };
    let text = format!("{how}; on a CPU, hits {median} apart (median)");
    Some(Line::from(text).style(app.theme.dim()))
}

/// A latency pair's calls, latency percentiles, corrected median, cost per call and
/// its share.
pub(super) fn latency_line(row: &crate::aggregate::LatencyRow) -> String {
    let m = &row.latency_ns;
    if m.count == 0 {
        return format!("latency: no call ended yet ({} open)", row.open);
    }
    format!(
        "latency {} calls · {}/s · p50 {} p90 {} p99 {} p99.9 {} max {} · corrected p50 {} · cost/call {} ({}) · returns {}{}",
        row.calls,
        format::count(row.calls_per_second),
        format::ns(m.p50),
        format::ns(m.p90),
        format::ns(m.p99),
        format::ns(m.p999),
        format::ns(m.max),
        format::ns(row.latency_corrected_ns.p50),
        row.whole_cost_ns.map_or_else(|| "-".into(), format::ns_f),
        match format::Overhead::of(row) {
            format::Overhead::MoreThanTheCall => "probes cost more than the call".into(),
            overhead => format!("{} of it", overhead.cell()),
        },
        row.path.as_str(),
        if row.unwound + row.open > 0 {
            format!(" · {} unwound, {} open", row.unwound, row.open)
        } else {
            String::new()
        }
    )
}

fn percentiles_line(app: &App, id: usize, width: usize) -> Line<'static> {
    let n = app.numbers(id);
    let h = n.handler;
    if h.count == 0 {
        let when = match app.view {
            View::Cumulative => "yet",
            View::Interval => "in the last interval",
        };
        return Line::from(format!("handler time: no hits {when}")).style(app.theme.dim());
    }
    let [min, p50, p90, p99, p999, max, mean] = format::handler_cells(&h);
    let numbers =
        format!("min {min} p50 {p50} p90 {p90} p99 {p99} p99.9 {p999} max {max} mean {mean}");
    // Say what the numbers are when there is room.
    let prefixed = format!("handler (BPF program's own time) {numbers}");
    Line::from(if prefixed.chars().count() <= width {
        prefixed
    } else {
        numbers
    })
}

/// `args 42 (0x2a) · ? · 7`: decimal and hex, `?` where reading faulted.
fn args_line(args: Option<CapturedArgs>) -> Line<'static> {
    let Some(args) = args else {
        return Line::from("last args: none captured yet");
    };
    if args.count == 0 {
        return Line::from("last args: none");
    }
    let values: Vec<String> = args
        .values()
        .map(|v| match v {
            Some(v) if v < 10 => v.to_string(),
            Some(v) => format!("{v} ({v:#x})"),
            None => "?".into(),
        })
        .collect();
    Line::from(format!("last args: {}", values.join(" · ")))
}

/// Percentile labels on the `log10(1/(1-p))` axis: one per decade.
const PERCENTILE_LABELS: [&str; 6] = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"];

/// x position of a percentile on HdrHistogram's plot: `log10(1/(1-p))`.
fn percentile_x(percentile: f64) -> f64 {
    let rest = 1.0 - percentile / 100.0;
    if rest <= 0.0 {
        PERCENTILE_LABELS.len() as f64 - 1.0
    } else {
        (-rest.log10()).clamp(0.0, PERCENTILE_LABELS.len() as f64 - 1.0)
    }
}

/// Round-number labels for the log ns axis: `100ns`, `1us`, `10ms`.
fn decade_label(exponent: i32) -> String {
    const UNITS: [(i32, &str); 4] = [(9, "s"), (6, "ms"), (3, "us"), (0, "ns")];
    for (scale, unit) in UNITS {
        if exponent >= scale {
            return format!("{}{unit}", 10u64.pow((exponent - scale) as u32));
        }
    }
    "1ns".into()
}

fn percentile_pane(frame: &mut Frame, area: Rect, app: &App, focus: &FocusDetail) {
    let theme = app.theme;
    let (curve, what): (&PercentileCurve, String) = match app.view {
        View::Cumulative => (&focus.cumulative, "since attach".into()),
        View::Interval => (
            &focus.interval,
            format!("last {}", format::seconds(app.snapshot.interval)),
        ),
    };
    let [title, plot_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    frame.render_widget(
        Paragraph::new(format!("handler time by percentile, {what}")).style(theme.title()),
        title,
    );
    if curve.points.is_empty() {
        frame.render_widget(Paragraph::new("no hits").style(theme.dim()), plot_area);
        return;
    }
    let points: Vec<(f64, f64)> = curve
        .points
        .iter()
        .map(|&(p, v)| (percentile_x(p), (v.max(1) as f64).log10()))
        .collect();
    let lowest = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let highest = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let lo = lowest.floor() as i32;
    let hi = (highest.ceil() as i32).max(lo + 1);
    let series = [Series {
        points: &points,
        color: theme.distribution(),
    }];
    Plot {
        x_bounds: [0.0, PERCENTILE_LABELS.len() as f64 - 1.0],
        y_bounds: [f64::from(lo), f64::from(hi)],
        x_labels: PERCENTILE_LABELS
            .iter()
            .enumerate()
            .map(|(i, t)| (i as f64, t.to_string()))
            .collect(),
        y_labels: (lo..=hi).map(|e| (f64::from(e), decade_label(e))).collect(),
        series: series.into(),
        label_style: theme.dim(),
    }
    .render(frame, plot_area);
}

/// Points of a time series over the last minute: x in seconds before now (0 = the end of
/// the last closed interval).
fn series_points(
    history: &[HistoryPoint],
    value: impl Fn(&HistoryPoint) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let mut end = 0.0;
    let mut points: Vec<(f64, f64)> = history
        .iter()
        .rev()
        .filter_map(|h| {
            let x = -end;
            end += h.length.as_secs_f64();
            value(h).map(|v| (x, v))
        })
        .collect();
    points.reverse();
    points
}

fn history_pane(frame: &mut Frame, area: Rect, app: &App, history: &[HistoryPoint]) {
    let theme = app.theme;
    let [rate_area, p99_area] =
        Layout::vertical([Constraint::Fill(1), Constraint::Fill(1)]).areas(area);
    TimeSeries {
        name: "hits/s",
        points: series_points(history, |h| Some(h.per_second)),
        label: format::count,
        color: theme.rate(),
    }
    .render(frame, rate_area, app);
    TimeSeries {
        name: "p99",
        points: series_points(history, |h| h.p99_ns.map(|v| v as f64)),
        label: |v| format::ns(v.round() as u64),
        color: theme.latency(),
    }
    .render(frame, p99_area, app);
}

/// One quantity over the last minute, with its latest value in the title.
struct TimeSeries {
    name: &'static str,
    points: Vec<(f64, f64)>,
    label: fn(f64) -> String,
    color: ratatui::style::Color,
}

impl TimeSeries {
    fn render(&self, frame: &mut Frame, area: Rect, app: &App) {
        let theme = app.theme;
        let span = HISTORY_SPAN.as_secs_f64();
        let [title, plot_area] =
            Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
        let now = self
            .points
            .last()
            .filter(|p| p.0 == 0.0)
            .map_or_else(|| "-".into(), |p| (self.label)(p.1));
        frame.render_widget(
            Paragraph::new(format!("{}, last {span:.0}s: {now}", self.name)).style(theme.title()),
            title,
        );
        if self.points.is_empty() {
            frame.render_widget(Paragraph::new("no data yet").style(theme.dim()), plot_area);
            return;
        }
        let top = self.points.iter().map(|p| p.1).fold(0.0, f64::max);
        let top = if top > 0.0 { top * 1.1 } else { 1.0 };
        Plot {
            x_bounds: [-span, 0.0],
            y_bounds: [0.0, top],
            x_labels: vec![
                (-span, format!("-{span:.0}s")),
                (-span / 2.0, format!("-{:.0}s", span / 2.0)),
                (0.0, "now".to_string()),
            ],
            y_labels: vec![(0.0, "0".into()), (top, (self.label)(top))],
            series: vec![Series {
                points: &self.points,
                color: self.color,
            }],
            label_style: theme.dim(),
        }
        .render(frame, plot_area);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn percentiles_on_the_log_axis() {
        assert_eq!(percentile_x(0.0), 0.0);
        assert!((percentile_x(90.0) - 1.0).abs() < 1e-9);
        assert!((percentile_x(99.9) - 3.0).abs() < 1e-9);
        assert_eq!(percentile_x(100.0), 5.0);
    }

    #[test]
    fn decade_labels() {
        assert_eq!(decade_label(0), "1ns");
        assert_eq!(decade_label(2), "100ns");
        assert_eq!(decade_label(3), "1us");
        assert_eq!(decade_label(7), "10ms");
        assert_eq!(decade_label(9), "1s");
    }

    #[test]
    fn history_ends_now() {
        let point = |per_second| HistoryPoint {
            length: Duration::from_secs(1),
            per_second,
            p99_ns: None,
        };
        let points = series_points(&[point(1.0), point(2.0), point(3.0)], |h| {
            Some(h.per_second)
        });
        assert_eq!(points, [(-2.0, 1.0), (-1.0, 2.0), (0.0, 3.0)]);
        assert!(series_points(&[point(1.0)], |h| h.p99_ns.map(|v| v as f64)).is_empty());
    }

    #[test]
    fn paths_keep_their_end() {
        assert_eq!(ellipsize_left("/usr/lib/libc.so.6", 10), "…libc.so.6");
        assert_eq!(ellipsize_left("/bin/w", 10), "/bin/w");
    }
}
