//! `.html` and `.svg`: reports for people, readable offline.
//!
//! The HTML page is one self-contained file: inline CSS, inline SVG, no script, no
//! external fonts or images. It holds the run (target, start, duration), a summary table
//! (one row per probe: hits, drops, handler time percentiles), a plot of every probe's
//! percentile distribution together, and one plot per probe. `latency:` pairs add a
//! table (calls, latency percentiles measured and corrected, the probes' cost per call
//! and its share) and a plot per pair, its measured and corrected latency together.
//!
//! The plots are HdrHistogram's percentile plot: x is the percentile on the usual
//! `1/(1-p)` log axis (0%, 90%, 99%, ... 99.999%, so each tail decade gets equal room),
//! y is handler time on a log axis. Points are the rows of the `.hgrm` export (Java's
//! percentile iteration, 5 ticks per half distance); the curve ends with the max at the
//! right edge. Hovering a point shows its percentile and value (SVG `<title>`).
//!
//! The `.svg` export is the all-probes plot on its own, for slides and documents.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use super::hdr::{PercentileRow, percentile_rows};
use super::{ExportError, ProbeReport, Report, UtcTime};
use crate::aggregate::HandlerSummary;

/// The rightmost percentile on the x axis: 99.999%, 10^5 on the 1/(1-p) axis.
const X_DECADES: f64 = 5.0;
const X_TICKS: [&str; 6] = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"];
/// Series colours (Tableau 10): distinct for the common colour-vision deficiencies.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}h3{margin-bottom:.2em;font-family:ui-monospace,monospace}
dl.run{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dl.run dt{font-weight:600}dl.run dd{margin:0}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace}
table{border-collapse:collapse;font-size:.9em;width:100%}th,td{padding:.3em .5em;border-bottom:1px solid #e4e4e4;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.warn{color:#b00020;font-weight:600}.muted{color:#666}.obj{overflow-wrap:anywhere;min-width:14em}
svg{max-width:100%;height:auto}footer{margin-top:2em;font-size:.85em;color:#666}
";

/// One curve of a percentile plot.
/// The y axis of the probes' plots.
const HANDLER_AXIS: &str = "handler time";

struct Series<'a> {
    label: String,
    hist: &'a Histogram<u64>,
    color: &'static str,
}

pub(crate) fn render(report: &Report) -> Result<Vec<u8>, ExportError> {
    let mut out = String::new();
    let title = format!(
        "probetop: {} (pid {})",
        report.target.comm, report.target.pid
    );
    // Writes to a String cannot fail, hence the ignored fmt::Results.
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n",
        esc(&title)
    );
    let _ = writeln!(out, "<h1>probetop report</h1>");
    // The answer first: what every probe together cost the target.
    let _ = writeln!(
        out,
        "<p class=\"headline\"><strong>What the probes cost {}:</strong> {}</p>",
        esc(&report.target.comm),
        esc(&crate::present::answer::headline_text(report))
    );
    let total_hits: u64 = report.probes.iter().map(|p| p.hits).sum();
    let total_dropped: u64 = report.probes.iter().map(|p| p.dropped).sum();
    let _ = writeln!(out, "<dl class=\"run\">");
    let mut run_row = |term: &str, value: String| {
        let _ = writeln!(out, "<dt>{term}</dt><dd>{value}</dd>");
    };
    run_row(
        "Target",
        format!(
            "<code>{}</code> pid {}",
            esc(&report.target.comm),
            report.target.pid
        ),
    );
    run_row(
        "Executable",
        format!("<code>{}</code>", esc(&report.target.exe.to_string_lossy())),
    );
    run_row(
        "Command line",
        format!("<code>{}</code>", esc(&report.target.cmdline)),
    );
    run_row(
        "Started",
        UtcTime::from_unix_ms(report.started_unix_ms).iso(),
    );
    run_row("Duration", format!("{:.3} s", report.duration_s));
    run_row(
        "Probes",
        format!(
            "{} ({} hits, {} dropped)",
            report.probes.len(),
            total_hits,
            total_dropped
        ),
    );
    let _ = writeln!(out, "</dl>");

    summary_table(&mut out, report);

    let series: Vec<Series> = report
        .probes
        .iter()
        .enumerate()
        .map(|(i, p)| Series {
            label: series_label(p),
            hist: &p.handler_ns,
            color: PALETTE[i % PALETTE.len()],
        })
        .collect();
    if report.probes.len() > 1 {
        let _ = writeln!(out, "<h2>All probes</h2>");
        out.push_str(&plot(
            &series,
            "Handler time by percentile, all probes",
            HANDLER_AXIS,
            false,
        ));
    }
    let _ = writeln!(out, "<h2>Percentile distributions</h2>");
    for (p, s) in report.probes.iter().zip(&series) {
        let _ = writeln!(out, "<section>\n<h3>{}</h3>", esc(&s.label));
        let _ = writeln!(
            out,
            "<p class=\"muted\">{} <code>{}</code> in <code class=\"obj\">{}</code> at {:#x} \
             (file offset {:#x}): {} hits, {} dropped</p>",
            p.kind,
            esc(&p.name),
            esc(&p.object),
            p.address,
            p.file_offset,
            p.hits,
            p.dropped
        );
        out.push_str(&plot(
            std::slice::from_ref(s),
            &format!("Handler time by percentile, {}", s.label),
            HANDLER_AXIS,
            false,
        ));
        let _ = writeln!(out, "</section>");
    }
    latency_section(&mut out, report);
    let _ = writeln!(
        out,
        "<footer>Written by probetop {}. Handler time is per hit, in HDR histograms of \
         nanoseconds kept to 3 significant digits: the BPF program's own part of a hit's cost. \
         Per-probe costs do not add up exactly to the set's: a hit warms the caches the next \
         probe's hit runs in; the headline is the set's.</footer>\n</body>\n</html>",
        env!("CARGO_PKG_VERSION")
    );
    Ok(out.into_bytes())
}

/// The all-probes percentile plot as a standalone SVG document.
pub(crate) fn render_svg(report: &Report) -> Result<Vec<u8>, ExportError> {
    let series: Vec<Series> = report
        .probes
        .iter()
        .enumerate()
        .map(|(i, p)| Series {
            label: series_label(p),
            hist: &p.handler_ns,
            color: PALETTE[i % PALETTE.len()],
        })
        .collect();
    let title = format!(
        "Handler time by percentile: {} (pid {}), {}",
        report.target.comm,
        report.target.pid,
        UtcTime::from_unix_ms(report.started_unix_ms).iso()
    );
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&plot(&series, &title, HANDLER_AXIS, true));
    Ok(out.into_bytes())
}

/// One plot of an overlay page: its title, y axis, and curves (label, histogram).
pub(crate) struct Overlay<'a> {
    pub title: String,
    pub y_label: &'static str,
    pub curves: Vec<(String, &'a Histogram<u64>)>,
}

/// A self-contained page (`probetop diff --html`): `heading`, then `intro_html` (HTML the
/// caller escaped), then the plots, curves of one plot overlaid in the palette's order.
pub(crate) fn overlay_page(heading: &str, intro_html: &str, plots: &[Overlay]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n{intro_html}",
        esc(heading),
        esc(heading)
    );
    for overlay in plots {
        let series: Vec<Series> = overlay
            .curves
            .iter()
            .enumerate()
            .map(|(i, (label, hist))| Series {
                label: label.clone(),
                hist,
                color: PALETTE[i % PALETTE.len()],
            })
            .collect();
        let _ = writeln!(out, "<section>\n<h3>{}</h3>", esc(&overlay.title));
        out.push_str(&plot(&series, &overlay.title, overlay.y_label, false));
        let _ = writeln!(out, "</section>");
    }
    let _ = writeln!(
        out,
        "<footer>Written by probetop {}.</footer>\n</body>\n</html>",
        env!("CARGO_PKG_VERSION")
    );
    out
}

/// The spec and the id: one spec can expand to several probes.
fn series_label(p: &ProbeReport) -> String {
    format!("{} (#{})", p.spec, p.id)
}

/// The `latency:` pairs: a table (calls, latency measured and corrected, the probes'
/// cost per call and its share) and one plot per pair, measured and corrected together.
fn latency_section(out: &mut String, report: &Report) {
    if report.latency.is_empty() {
        return;
    }
    let _ = writeln!(out, "<h2>Latency</h2>");
    let _ = writeln!(
        out,
        "<p class=\"muted\">Each call from its start probe's clock read to its end probe's. \
         Corrected: less the probes' own cost inside the call. Overhead: both probes' whole \
         cost per call over the corrected mean latency.</p>"
    );
    let _ = writeln!(
        out,
        "<table>\n<thead><tr><th>Function</th><th>Object</th><th class=\"n\">Calls</th>\
         <th class=\"n\">Calls/s</th><th></th><th class=\"n\">p50</th><th class=\"n\">p90</th>\
         <th class=\"n\">p99</th><th class=\"n\">p99.9</th><th class=\"n\">Max</th>\
         <th class=\"n\" title=\"both probes' whole cost per call\">Cost/call</th>\
         <th class=\"n\">Overhead</th></tr></thead>\n<tbody>"
    );
    for row in &report.latency {
        let calls_per_second = if row.calls_per_second > 0.0 {
            row.calls_per_second
        } else if report.duration_s > 0.0 {
            row.calls as f64 / report.duration_s
        } else {
            0.0
        };
        let times = |s: &HandlerSummary| -> String {
            [s.p50, s.p90, s.p99, s.p999, s.max]
                .iter()
                .map(|&ns| {
                    if s.count == 0 {
                        "<td class=\"n muted\">&ndash;</td>".to_string()
                    } else {
                        format!(
                            "<td class=\"n\" title=\"{ns} ns\">{}</td>",
                            human_ns(ns as f64)
                        )
                    }
                })
                .collect()
        };
        let cost = row.whole_cost_ns.map_or_else(
            || "<td rowspan=\"2\" class=\"n muted\">&ndash;</td>".to_string(),
            |ns| {
                format!(
                    "<td rowspan=\"2\" class=\"n\" title=\"{ns:.0} ns\">{}</td>",
                    human_ns(ns)
                )
            },
        );
        let share = match crate::present::format::Overhead::of(row) {
            crate::present::format::Overhead::Unknown => {
                "<td rowspan=\"2\" class=\"n muted\">&ndash;</td>".to_string()
            }
            crate::present::format::Overhead::Share(s) => {
                format!("<td rowspan=\"2\" class=\"n\">{:.2}%</td>", s * 100.0)
            }
            crate::present::format::Overhead::MoreThanTheCall => {
                "<td rowspan=\"2\" class=\"n\">probes cost more than the call</td>".to_string()
            }
        };
        let _ = writeln!(
            out,
            "<tr><td rowspan=\"2\"><code>{}</code><br><span class=\"muted\">{}, {} ends</span></td>\
             <td rowspan=\"2\" class=\"obj\"><code>{}</code></td><td rowspan=\"2\" class=\"n\">{}</td>\
             <td rowspan=\"2\" class=\"n\">{:.1}</td><td>measured</td>{}\
             {cost}{share}</tr>\n\
             <tr><td>corrected</td>{}</tr>",
            esc(&row.display_name()),
            esc(&row.spec),
            row.path.as_str(),
            esc(&row.object),
            row.calls,
            calls_per_second,
            times(&row.latency_ns),
            times(&row.latency_corrected_ns),
        );
    }
    let _ = writeln!(out, "</tbody>\n</table>");
    for row in &report.latency {
        let label = format!("{} ({})", row.display_name(), row.spec);
        let series = [
            Series {
                label: format!("{label}, measured"),
                hist: &row.latency_hist,
                color: PALETTE[0],
            },
            Series {
                label: format!("{label}, corrected"),
                hist: &row.corrected_hist,
                color: PALETTE[1],
            },
        ];
        let _ = writeln!(out, "<section>\n<h3>latency {}</h3>", esc(&label));
        let _ = writeln!(
            out,
            "<p class=\"muted\"><code>{}</code> in <code class=\"obj\">{}</code>: {} calls, \
             {} open, {} unwound, {} unmatched</p>",
            esc(&row.display_name()),
            esc(&row.object),
            row.calls,
            row.open,
            row.unwound,
            row.unmatched
        );
        out.push_str(&plot(
            &series,
            &format!("Latency by percentile, {label}"),
            "latency",
            false,
        ));
        let _ = writeln!(out, "</section>");
    }
}

fn summary_table(out: &mut String, report: &Report) {
    let _ = writeln!(out, "<h2>Summary</h2>");
    let _ = writeln!(
        out,
        "<table>\n<thead><tr><th>#</th><th>Probe</th><th>Object</th>\
         <th class=\"n\" title=\"what one hit costs the target in all: trap, kernel, BPF program, return\">Cost/hit</th>\
         <th class=\"n\" title=\"share of one CPU the probe's hits cost the target\">%CPU</th>\
         <th class=\"n\">Hits</th><th class=\"n\">Dropped</th>\
         <th class=\"n group\" colspan=\"7\">Handler: the BPF program's own time per hit (part of the cost)</th></tr>\
         <tr><th colspan=\"7\"></th><th class=\"n\">Min</th>\
         <th class=\"n\">Mean</th><th class=\"n\">p50</th><th class=\"n\">p90</th>\
         <th class=\"n\">p99</th><th class=\"n\">p99.9</th><th class=\"n\">Max</th></tr></thead>\n<tbody>"
    );
    // Dearest first, as the summary table and the end-of-run lines.
    let keys: Vec<(Option<f64>, u64, String)> = report
        .probes
        .iter()
        .map(|p| {
            (
                p.cost.cpu_share.filter(|_| p.hits > 0),
                p.hits,
                format!("{}:{}", p.kind, p.name),
            )
        })
        .collect();
    // Two probes whose names read the same (one USDT probe at two sites) get their
    // site's file offset, ` @0x4f2a10`, as the TUI and the summary table give it.
    let mut seen: std::collections::HashMap<&str, usize> = Default::default();
    for (_, _, name) in &keys {
        *seen.entry(name.as_str()).or_default() += 1;
    }
    for (p, (_, _, name)) in crate::present::summary::cost_order(&keys)
        .into_iter()
        .filter_map(|at| report.probes.get(at).zip(keys.get(at)))
    {
        let site = if seen.get(name.as_str()).copied().unwrap_or(0) > 1 {
            format!(" @{:#x}", p.file_offset)
        } else {
            String::new()
        };
        let s = HandlerSummary::of(&p.handler_ns);
        let time = |ns: f64| {
            if s.count == 0 {
                "<td class=\"n muted\">&ndash;</td>".to_string()
            } else {
                format!("<td class=\"n\" title=\"{ns} ns\">{}</td>", human_ns(ns))
            }
        };
        let dropped_class = if p.dropped > 0 { "n warn" } else { "n" };
        let cost = match p.cost.whole_cost_ns {
            Some(ns) => format!(
                "<td class=\"n\" title=\"{ns:.0} ns, {}\">{}</td>",
                crate::present::headline::probe_method(&p.cost),
                human_ns(ns)
            ),
            None => "<td class=\"n muted\">&ndash;</td>".to_string(),
        };
        let share = match p.cost.cpu_share {
            Some(share) => format!(
                "<td class=\"n\">{}</td>",
                crate::present::headline::share_text(share)
            ),
            None => "<td class=\"n muted\">&ndash;</td>".to_string(),
        };
        let _ = writeln!(
            out,
            "<tr><td class=\"n\">{}</td><td><code>{}</code><br><span class=\"muted\">{} \
             <code>{}{site}</code></span></td><td class=\"obj\"><code>{}</code></td>\
             {cost}{share}<td class=\"n\">{}</td><td class=\"{dropped_class}\">{}</td>{}{}{}{}{}{}{}</tr>",
            p.id,
            esc(&p.spec),
            p.kind,
            esc(&p.name),
            esc(&p.object),
            p.hits,
            p.dropped,
            time(s.min as f64),
            time(s.mean),
            time(s.p50 as f64),
            time(s.p90 as f64),
            time(s.p99 as f64),
            time(s.p999 as f64),
            time(s.max as f64),
        );
    }
    let _ = writeln!(out, "</tbody>\n</table>");
}

// Plot geometry, in SVG user units.
const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 40.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 56.0;
/// Height of one legend entry (the legend is below the plot).
const LEGEND_LINE: f64 = 18.0;

/// Position on the x axis (0..=X_DECADES) of a percentile level in percent.
fn x_decades(level: f64) -> f64 {
    if level >= 100.0 {
        return X_DECADES;
    }
    (1.0 / (1.0 - level / 100.0)).log10().clamp(0.0, X_DECADES)
}

/// The percentile plot of `series` as an `<svg>` element; `standalone` adds the XML
/// namespace declaration and a white background for use outside a page.
fn plot(series: &[Series], title: &str, y_label: &str, standalone: bool) -> String {
    let mut out = String::new();
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let has_curves = series.iter().any(|s| !s.hist.is_empty());
    let legend_h = if series.len() > 1 && has_curves {
        series.len() as f64 * LEGEND_LINE + 6.0
    } else {
        0.0
    };
    let total_h = HEIGHT + legend_h;
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{total_h}\" \
         viewBox=\"0 0 {WIDTH} {total_h}\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\">"
    );
    let _ = writeln!(out, "<title>{}</title>", esc(title));
    if standalone {
        let _ = writeln!(
            out,
            "<rect width=\"{WIDTH}\" height=\"{total_h}\" fill=\"#fff\"/>"
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"600\">{}</text>",
        LEFT + plot_w / 2.0,
        esc(title)
    );

    let recorded: Vec<&Series> = series.iter().filter(|s| !s.hist.is_empty()).collect();
    if recorded.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#666\">No hits recorded.</text>\n</svg>",
            LEFT + plot_w / 2.0,
            TOP + plot_h / 2.0
        );
        return out;
    }

    // y axis: whole decades around every recorded value (values are >= 1 ns).
    let lo = recorded
        .iter()
        .map(|s| s.hist.min().max(1))
        .min()
        .unwrap_or(1);
    let hi = recorded
        .iter()
        .map(|s| s.hist.max().max(1))
        .max()
        .unwrap_or(1);
    let y_lo = (lo as f64).log10().floor() as i32;
    let mut y_hi = (hi as f64).log10().ceil() as i32;
    if y_hi <= y_lo {
        y_hi = y_lo + 1;
    }
    let x_of = |decades: f64| LEFT + decades / X_DECADES * plot_w;
    let y_of = |ns: f64| {
        let frac = (ns.max(1.0).log10() - f64::from(y_lo)) / f64::from(y_hi - y_lo);
        TOP + plot_h - frac * plot_h
    };

    // Grid and axes.
    let _ = writeln!(out, "<g stroke=\"#e3e3e3\" stroke-width=\"1\">");
    for exp in y_lo..y_hi {
        for step in [2.0, 5.0] {
            let y = y_of(step * 10f64.powi(exp));
            let _ = writeln!(
                out,
                "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#f1f1f1\"/>",
                LEFT + plot_w
            );
        }
    }
    for exp in y_lo..=y_hi {
        let y = y_of(10f64.powi(exp));
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>",
            LEFT + plot_w
        );
    }
    for k in 0..X_TICKS.len() {
        let x = x_of(k as f64);
        let _ = writeln!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{TOP}\" y2=\"{:.1}\"/>",
            TOP + plot_h
        );
    }
    let _ = writeln!(out, "</g>");
    let _ = writeln!(
        out,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#888\"/>"
    );
    for exp in y_lo..=y_hi {
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>",
            LEFT - 6.0,
            y_of(10f64.powi(exp)),
            decade_label(exp)
        );
    }
    for (k, label) in X_TICKS.iter().enumerate() {
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            x_of(k as f64),
            TOP + plot_h + 16.0
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#444\">percentile</text>",
        LEFT + plot_w / 2.0,
        TOP + plot_h + 38.0
    );
    let _ = writeln!(
        out,
        "<text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\" fill=\"#444\">{}</text>",
        TOP + plot_h / 2.0,
        esc(y_label)
    );

    // Curves.
    for s in &recorded {
        let rows = percentile_rows(s.hist, 5);
        let points: Vec<(f64, f64, &PercentileRow)> = rows
            .iter()
            .map(|r| (x_of(x_decades(r.level)), y_of(r.value as f64), r))
            .collect();
        let path: Vec<String> = points
            .iter()
            .map(|(x, y, _)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            out,
            "<g><title>{}</title>\n<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" \
             stroke-linejoin=\"round\" points=\"{}\"/>",
            esc(&s.label),
            s.color,
            path.join(" ")
        );
        for (x, y, r) in &points {
            let _ = writeln!(
                out,
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.2\" fill=\"{}\"><title>{}: {} at {}</title></circle>",
                s.color,
                esc(&s.label),
                human_ns(r.value as f64),
                percentile_label(r.level)
            );
        }
        let _ = writeln!(out, "</g>");
    }

    // Legend below the plot, where it hides no curve.
    if series.len() > 1 {
        for (i, s) in series.iter().enumerate() {
            let y = HEIGHT + LEGEND_LINE * (i as f64 + 0.5);
            let note = if s.hist.is_empty() { " (no hits)" } else { "" };
            let _ = writeln!(
                out,
                "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-width=\"3\"/>\
                 <text x=\"{:.1}\" y=\"{y:.1}\" dominant-baseline=\"middle\">{}{note}</text>",
                LEFT + 16.0,
                s.color,
                LEFT + 22.0,
                esc(&s.label)
            );
        }
    }
    let _ = writeln!(out, "</svg>");
    out
}

/// `1 ns`, `10 ns`, `100 ns`, `1 µs`, ... for 10^exp ns.
fn decade_label(exp: i32) -> String {
    const UNITS: [&str; 4] = ["ns", "µs", "ms", "s"];
    let unit = (exp.max(0) / 3).min(3);
    let mantissa = 10_u64.pow((exp.max(0) - unit * 3) as u32);
    format!("{mantissa} {}", UNITS[unit as usize])
}

/// `99.9%` style, without trailing zeros.
fn percentile_label(level: f64) -> String {
    let fixed = format!("{level:.4}");
    format!("p{}", fixed.trim_end_matches('0').trim_end_matches('.'))
}

/// A time in ns to 3 significant digits with a readable unit: `850 ns`, `1.20 µs`,
/// `45.6 ms`, `2.00 s`.
pub(crate) fn human_ns(ns: f64) -> String {
    const UNITS: [(&str, f64); 4] = [("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)];
    let mut chosen = UNITS[UNITS.len() - 1];
    for (unit, scale) in UNITS {
        // Move up while the number would print as 1000 or more (999.96 ns -> 1.00 µs).
        if ns / scale < 999.5 {
            chosen = (unit, scale);
            break;
        }
    }
    let (unit, scale) = chosen;
    let v = ns / scale;
    if scale == 1.0 && ns.fract() == 0.0 {
        // Whole nanoseconds read best without decimals.
        return format!("{v:.0} {unit}");
    }
    let decimals = if v >= 99.95 {
        0
    } else if v >= 9.995 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {unit}")
}

/// Escapes text for HTML and XML content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // XML 1.0 forbids most control characters even as references.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::{rich_report, sample_report};
    use super::*;

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).expect("utf8")
    }

    #[test]
    fn a_latency_pair_has_a_row_and_a_plot() {
        let report = super::super::testing::latency_report();
        let html = String::from_utf8(render(&report).expect("renders")).expect("utf8");
        let at = html.find("<h2>Latency</h2>").expect("latency section");
        let section = &html[at..];
        assert!(
            section.contains("<td rowspan=\"2\" class=\"n\">1001</td>"),
            "{section}"
        );
        assert!(section.contains("<td>corrected</td>"));
        assert!(section.contains("Latency by percentile, work_unit (latency:work_unit)"));
        assert!(section.contains("work_unit (latency:work_unit), corrected"));
        // Both curves drawn, and the axis says what it is.
        assert!(section.matches("<polyline").count() >= 2, "{section}");
        assert!(section.contains(">latency</text>"));
    }

    #[test]
    fn page_is_self_contained() {
        let html = text(render(&rich_report()).expect("renders"));
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.trim_end().ends_with("</html>"));
        for forbidden in [
            "<script", "http://", "https://", "src=", "<link", "@import", "url(",
        ] {
            let outside_svg_ns = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
            assert!(!outside_svg_ns.contains(forbidden), "found {forbidden}");
        }
        // A plot per probe plus the all-probes plot.
        assert_eq!(
            html.matches("<svg ").count(),
            rich_report().probes.len() + 1
        );
        assert!(html.contains("No hits recorded."));
    }

    #[test]
    fn summary_table_has_every_probe_escaped() {
        let report = rich_report();
        let html = text(render(&report).expect("renders"));
        assert_eq!(
            html.matches("<tr><td class=\"n\">").count(),
            report.probes.len()
        );
        // The object path's quotes are escaped, never raw inside markup.
        assert!(html.contains("/opt/my &quot;app&quot;\\dir,x/lib"));
        assert!(!html.contains("my \"app\""));
        assert!(html.contains("<td class=\"n warn\">17</td>"));
    }

    #[test]
    fn sample_summary_values() {
        let html = text(render(&sample_report()).expect("renders"));
        assert!(html.contains("<td class=\"n\" title=\"100 ns\">100 ns</td>"));
        assert!(html.contains("<td class=\"n\" title=\"5003 ns\">5.00 µs</td>"));
    }

    #[test]
    fn svg_is_well_formed_xml() {
        // Every element is closed and attributes are quoted: a tag balance check is enough
        // for the markup this module writes.
        let svg = text(render_svg(&rich_report()).expect("renders"));
        assert!(svg.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns="));
        let mut stack: Vec<String> = Vec::new();
        let mut rest = svg.split_once("?>").expect("declaration").1;
        while let Some(open) = rest.find('<') {
            let close = rest[open..].find('>').expect("tag end") + open;
            let tag = &rest[open + 1..close];
            rest = &rest[close + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "closing {name}");
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().expect("name");
                stack.push(name.to_string());
            }
            assert_eq!(tag.matches('"').count() % 2, 0, "quotes in <{tag}>");
        }
        assert!(stack.is_empty(), "unclosed {stack:?}");
        // Legend names every probe, including the one without hits.
        assert!(svg.contains("usdt:/opt/my app/lib.so:prov:never (#4) (no hits)"));
    }

    #[test]
    fn curve_points_follow_the_histogram() {
        let report = sample_report();
        let svg = text(render_svg(&report).expect("renders"));
        // The final point is the max at the right edge (99.999%).
        assert!(svg.contains("5.00 µs at p100</title>"));
        let right_edge = format!("cx=\"{:.1}\"", WIDTH - RIGHT);
        assert!(svg.contains(&right_edge));
    }

    #[test]
    fn human_units() {
        assert_eq!(human_ns(850.0), "850 ns");
        assert_eq!(human_ns(1200.4), "1.20 µs");
        assert_eq!(human_ns(45_600_000.0), "45.6 ms");
        assert_eq!(human_ns(999.96), "1.00 µs");
        assert_eq!(human_ns(2e9), "2.00 s");
        assert_eq!(human_ns(120e9), "120 s");
        assert_eq!(human_ns(5.5), "5.50 ns");
    }

    #[test]
    fn axis_labels() {
        assert_eq!(decade_label(0), "1 ns");
        assert_eq!(decade_label(2), "100 ns");
        assert_eq!(decade_label(3), "1 µs");
        assert_eq!(decade_label(10), "10 s");
        assert_eq!(percentile_label(99.9), "p99.9");
        assert_eq!(percentile_label(50.0), "p50");
        assert!((x_decades(99.0) - 2.0).abs() < 1e-9);
        assert_eq!(x_decades(100.0), X_DECADES);
    }
}
