//! Prometheus text exposition (format 0.0.4), for a future `--listen` endpoint and for
//! node_exporter's textfile collector (the `.prom` export).
//!
//! Per probe, labelled `{probe="<spec>",name="<symbol>",kind="<kind>",object="<path>",id="<id>"}`
//! (another tool's probe that probetop counted adds `owner="<tool>"` and `owner_pid`):
//!
//! - `probetop_probe_hits_total` (counter): hits the probe took, received plus dropped.
//! - `probetop_probe_dropped_total` (counter): hits whose record was dropped.
//! - `probetop_handler_seconds` (summary): handler time quantiles 0.5, 0.9, 0.99, 0.999
//!   and 1 (the max), with `_sum` and `_count`. A probe without hits has no quantile
//!   lines (`_sum` and `_count` 0): no NaN.
//! - `probetop_handler_duration_seconds` (histogram): the same handler times in fixed
//!   1-2-5 log buckets from 100 ns to 10 s, which, unlike quantiles, can be summed
//!   across probes and instances.
//! - `probetop_probe_cost_seconds`, `probetop_probe_cpu_share` (gauges, label `method`:
//!   `estimate` or `in-situ`): what a hit costs the target in all, and the share of one
//!   CPU the probe's hits cost it; none for a probe without hits or price.
//!
//! Per `latency:` pair, labelled `{latency="<spec>",name="<function>",object="<path>",end_path="<how>"}`
//! (`end_path`: `uretprobe`, `ret-uprobes` or `usdt`; `name` is `START,END` for a USDT
//! pair; one spec can match several functions):
//!
//! - `probetop_latency_seconds` (histogram): every paired call's latency as measured,
//!   from the start probe's clock read to the end probe's, in the handler histogram's
//!   1-2-5 buckets (100 ns to 10 s); `_count` is the calls paired.
//! - `probetop_latency_corrected_seconds` (histogram): the same less the probes' own
//!   cost inside each call (the JSON's `latency_corrected_ns`).
//! - `probetop_latency_probe_cost_seconds` (gauge): both probes' whole cost per call;
//!   `probetop_latency_overhead_ratio` (gauge): that over the corrected mean latency.
//!   None before the probes are priced or a call ended.
//! - `probetop_latency_unpaired_total` (counter, label `why`: `unwound`, `unmatched`,
//!   `overflowed`) and `probetop_latency_open_calls` (gauge): calls not paired.
//!
//! The run's headline, labelled `method`: `probetop_cost_cpu_share` (every probe
//! together, share of one CPU), `probetop_cost_per_hit_seconds`,
//! `probetop_cost_on_target_ratio` (against the target's own CPU), and
//! `probetop_target_own_cpu_share`; or, where the target's own CPU is too small or too
//! uncertain to divide by, `probetop_cost_of_target_ratio` (the probes' share of its
//! whole CPU).
//!
//! `name` and `id` go beyond `probe`, `kind`, `object` because one spec can expand to
//! several probes (`uprobe:handle_*`), whose series would otherwise collide.
//!
//! Times come from the HDR histograms (3 significant digits): `_sum` adds each bucket's
//! middle value, and a bucket bound counts the whole HDR bucket that holds it, so both are
//! within 0.1% of the exact figures. Numbers are written as Go's `strconv.FormatFloat(v,
//! 'g', -1, 64)` writes them, like the Go client, so `le` label values match its series.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use super::{ProbeReport, Report};
use crate::aggregate::LatencyRow;

/// Summary quantiles.
const QUANTILES: [f64; 5] = [0.5, 0.9, 0.99, 0.999, 1.0];

/// Histogram bucket bounds in ns: 1-2-5 steps per decade, 100 ns to 10 s.
fn bucket_bounds_ns() -> Vec<u64> {
    let mut bounds = Vec::new();
    let mut decade = 100_u64;
    while decade <= 10_000_000_000 {
        for step in [1, 2, 5] {
            let bound = decade * step;
            if bound <= 10_000_000_000 {
                bounds.push(bound);
            }
        }
        decade *= 10;
    }
    bounds
}

pub(crate) fn render_prometheus(report: &Report) -> String {
    let mut out = String::new();
    // Writes to a String cannot fail, hence the ignored fmt::Results.
    family(
        &mut out,
        "probetop_probe_hits_total",
        "counter",
        "Hits the probe took: hit records received plus records dropped.",
    );
    for p in &report.probes {
        let _ = writeln!(
            out,
            "probetop_probe_hits_total{} {}",
            labels(p, None),
            p.hits
        );
    }
    family(
        &mut out,
        "probetop_probe_dropped_total",
        "counter",
        "Hits whose record the kernel could not queue (ring buffer full).",
    );
    for p in &report.probes {
        let _ = writeln!(
            out,
            "probetop_probe_dropped_total{} {}",
            labels(p, None),
            p.dropped
        );
    }

    family(
        &mut out,
        "probetop_handler_seconds",
        "summary",
        "Handler time per received hit, from an HDR histogram (3 significant digits).",
    );
    for p in &report.probes {
        let h = &p.handler_ns;
        // Without hits there is no quantile: the lines are left out (a NaN would read
        // as a value to dashboards), `_sum` and `_count` say 0.
        for q in QUANTILES.into_iter().filter(|_| !h.is_empty()) {
            let value = seconds(h.value_at_quantile(q));
            let _ = writeln!(
                out,
                "probetop_handler_seconds{} {}",
                labels(p, Some(("quantile", go_float(q)))),
                go_float(value)
            );
        }
        let _ = writeln!(
            out,
            "probetop_handler_seconds_sum{} {}",
            labels(p, None),
            go_float(sum_seconds(h))
        );
        let _ = writeln!(
            out,
            "probetop_handler_seconds_count{} {}",
            labels(p, None),
            h.len()
        );
    }

    family(
        &mut out,
        "probetop_handler_duration_seconds",
        "histogram",
        "Handler time per received hit in fixed log buckets, summable across probes.",
    );
    let bounds = bucket_bounds_ns();
    for p in &report.probes {
        let h = &p.handler_ns;
        for &bound in &bounds {
            let _ = writeln!(
                out,
                "probetop_handler_duration_seconds_bucket{} {}",
                labels(p, Some(("le", go_float(seconds(bound))))),
                count_at_or_below(h, bound)
            );
        }
        let _ = writeln!(
            out,
            "probetop_handler_duration_seconds_bucket{} {}",
            labels(p, Some(("le", "+Inf".into()))),
            h.len()
        );
        let _ = writeln!(
            out,
            "probetop_handler_duration_seconds_sum{} {}",
            labels(p, None),
            go_float(sum_seconds(h))
        );
        let _ = writeln!(
            out,
            "probetop_handler_duration_seconds_count{} {}",
            labels(p, None),
            h.len()
        );
    }
    latency_families(&mut out, &report.latency);
    cost_families(&mut out, report);
    if let Some(in_situ) = &report.cost.in_situ {
        in_situ_families(&mut out, in_situ);
    }
    if let Some(budget) = &report.budget {
        budget_families(&mut out, budget);
    }
    out
}

/// One of a latency row's histograms.
type LatencyHistogram = fn(&LatencyRow) -> &Histogram<u64>;

/// The `latency:` pairs' families (see the module's doc); none without pairs.
fn latency_families(out: &mut String, rows: &[LatencyRow]) {
    if rows.is_empty() {
        return;
    }
    let bounds = bucket_bounds_ns();
    let histograms: [(&str, &str, LatencyHistogram); 2] = [
        (
            "probetop_latency_seconds",
            "Latency per paired call as measured, from the start probe's clock read to the end probe's.",
            |r| &r.latency_hist,
        ),
        (
            "probetop_latency_corrected_seconds",
            "Latency per paired call less the probes' own cost inside the call.",
            |r| &r.corrected_hist,
        ),
    ];
    for (name, help, hist_of) in histograms {
        family(out, name, "histogram", help);
        for row in rows {
            let h = hist_of(row);
            for &bound in &bounds {
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {}",
                    latency_labels(row, Some(("le", go_float(seconds(bound))))),
                    count_at_or_below(h, bound)
                );
            }
            let _ = writeln!(
                out,
                "{name}_bucket{} {}",
                latency_labels(row, Some(("le", "+Inf".into()))),
                h.len()
            );
            let _ = writeln!(
                out,
                "{name}_sum{} {}",
                latency_labels(row, None),
                go_float(sum_seconds(h))
            );
            let _ = writeln!(out, "{name}_count{} {}", latency_labels(row, None), h.len());
        }
    }
    family(
        out,
        "probetop_latency_probe_cost_seconds",
        "gauge",
        "What both probes of a latency pair cost the target per call, in all.",
    );
    for row in rows {
        if let Some(ns) = row.whole_cost_ns {
            let _ = writeln!(
                out,
                "probetop_latency_probe_cost_seconds{} {}",
                latency_labels(row, None),
                go_float(ns / 1e9)
            );
        }
    }
    family(
        out,
        "probetop_latency_overhead_ratio",
        "gauge",
        "The probes' whole cost per call over the corrected mean latency.",
    );
    for row in rows {
        if let Some(share) = row.overhead_share {
            let _ = writeln!(
                out,
                "probetop_latency_overhead_ratio{} {}",
                latency_labels(row, None),
                go_float(share)
            );
        }
    }
    family(
        out,
        "probetop_latency_unpaired_total",
        "counter",
        "Calls not paired: unwound (an exception or a longjmp), unmatched (an end without a start), overflowed (too deep).",
    );
    for row in rows {
        for (why, n) in [
            ("unwound", row.unwound),
            ("unmatched", row.unmatched),
            ("overflowed", row.overflowed),
        ] {
            let _ = writeln!(
                out,
                "probetop_latency_unpaired_total{} {n}",
                latency_labels(row, Some(("why", why.into())))
            );
        }
    }
    family(
        out,
        "probetop_latency_open_calls",
        "gauge",
        "Calls started and not ended yet.",
    );
    for row in rows {
        let _ = writeln!(
            out,
            "probetop_latency_open_calls{} {}",
            latency_labels(row, None),
            row.open
        );
    }
}

/// `{latency="..",name="..",object="..",end_path=".."}`, `key=".."` on a keyed row, plus
/// an optional extra label.
fn latency_labels(row: &LatencyRow, extra: Option<(&str, String)>) -> String {
    let mut s = format!(
        "{{latency=\"{}\",name=\"{}\",object=\"{}\",end_path=\"{}\"",
        escape_label(&row.spec),
        escape_label(&row.name),
        escape_label(&row.object),
        row.path.as_str()
    );
    // A keyed pair's row of one key: the pair's labels and `key`.
    if let Some(key) = &row.key {
        let _ = write!(s, ",key=\"{}\"", escape_label(key.as_str()));
    }
    if let Some((name, value)) = extra {
        let _ = write!(s, ",{name}=\"{}\"", escape_label(&value));
    }
    s.push('}');
    s
}

/// One number of a probe, for a family of per-probe lines.
type ProbeValue = fn(&ProbeReport) -> Option<f64>;

/// What the probes cost the target, always (estimated, or measured with `--in-situ`):
/// per probe, the whole cost of a hit and the share of one CPU; for the run, the
/// headline. `method` says how each number was obtained. A probe without hits or
/// without a price has no line.
fn cost_families(out: &mut String, report: &Report) {
    use crate::present::headline::{self, Headline};
    let per_probe: [(&str, &str, ProbeValue); 2] = [
        (
            "probetop_probe_cost_seconds",
            "Whole cost of one hit to the target (trap, kernel, BPF program, return), seconds; method: estimate or in-situ.",
            |p| p.cost.whole_cost_ns.map(|ns| ns * 1e-9),
        ),
        (
            "probetop_probe_cpu_share",
            "Share of one CPU the probe's hits cost the target (0.01: 1% of one CPU); per-probe shares do not add up exactly to the set's (see probetop_cost_cpu_share).",
            |p| p.cost.cpu_share,
        ),
    ];
    for (name, help, value) in per_probe {
        let lines: Vec<String> = report
            .probes
            .iter()
            .filter_map(|p| {
                let method = headline::probe_method(&p.cost);
                value(p).map(|v| {
                    format!(
                        "{name}{} {}",
                        labels(p, Some(("method", method.into()))),
                        go_float(v)
                    )
                })
            })
            .collect();
        if !lines.is_empty() {
            family(out, name, "gauge", help);
            for line in lines {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    let h = Headline::of_report(report);
    let method = h.method.as_str();
    let run = [
        (
            "probetop_cost_cpu_share",
            "The headline: share of one CPU all probes together cost the target.",
            h.cpu_share,
        ),
        (
            "probetop_cost_per_hit_seconds",
            "Whole cost of a hit to the target over every probe, weighted by hits, seconds.",
            h.per_hit_ns.map(|ns| ns * 1e-9),
        ),
        (
            "probetop_cost_on_target_ratio",
            "The probes' cost over the target's own CPU (0.18: the probes add 18% to what the target itself uses).",
            h.on_target(),
        ),
        (
            "probetop_cost_of_target_ratio",
            "Where the target's own CPU is too small or too uncertain to divide by: the probes' share of its whole CPU (0.9: 90% of what it ran).",
            h.of_target,
        ),
    ];
    for (name, help, value) in run {
        let Some(value) = value else { continue };
        family(out, name, "gauge", help);
        let _ = writeln!(out, "{name}{{method=\"{method}\"}} {}", go_float(value));
    }
    if let Some(own) = h.target_own {
        family(
            out,
            "probetop_target_own_cpu_share",
            "gauge",
            "The target's own CPU, the probes' cost taken out, share of one CPU.",
        );
        let _ = writeln!(out, "probetop_target_own_cpu_share {}", go_float(own));
    }
}

/// `--budget`: what was asked, what the probes used (mean and bounds), and the duty.
fn budget_families(out: &mut String, b: &crate::insitu::budget::BudgetSummary) {
    let unit = b.budget.unit();
    family(
        out,
        "probetop_budget_asked",
        "gauge",
        "The --budget asked (unit: share of the target's CPU, or CPU seconds per second).",
    );
    let _ = writeln!(
        out,
        "probetop_budget_asked{{unit=\"{unit}\"}} {}",
        go_float(b.budget.asked())
    );
    if let Some(used) = b.used {
        family(
            out,
            "probetop_budget_used",
            "gauge",
            "What the probes cost over the run in the budget's unit (bound: estimate and its known error).",
        );
        for (bound, value) in [("mean", used.mean), ("low", used.low), ("high", used.high)] {
            let _ = writeln!(
                out,
                "probetop_budget_used{{unit=\"{unit}\",bound=\"{bound}\"}} {}",
                go_float(value)
            );
        }
    }
    family(
        out,
        "probetop_budget_duty_ratio",
        "gauge",
        "The share of each period the probes are attached for.",
    );
    let _ = writeln!(out, "probetop_budget_duty_ratio {}", go_float(b.duty));
}

/// `--in-situ`: the added CPU and cost per hit measured on the target, each with the
/// bounds of its 95% interval, and the windows behind them.
fn in_situ_families(out: &mut String, s: &crate::insitu::InSituSummary) {
    let intervals = [
        (
            "probetop_in_situ_cpu_share",
            "Added CPU of the target while the probes are attached, measured in situ (share of one CPU; bound: mean and 95% interval).",
            s.added_share,
            1.0,
        ),
        (
            "probetop_in_situ_per_hit_seconds",
            "Added CPU of the target per hit, measured in situ (bound: mean and 95% interval).",
            s.per_hit_ns,
            1e-9,
        ),
        (
            "probetop_in_situ_per_hit_cpu_alone_seconds",
            "Added CPU of the target per hit by its CPU per second alone, from the same windows as the work meter's (bound: mean and 95% interval).",
            s.per_hit_cpu_alone_ns,
            1e-9,
        ),
        (
            "probetop_in_situ_work_moved_ratio",
            "How the target's work rate moved while the probes were attached, relative to the detached windows around (-0.02: 2% less work; bound: mean and 95% interval).",
            s.work_moved,
            1.0,
        ),
    ];
    for (name, help, interval, scale) in intervals {
        let Some(i) = interval else { continue };
        family(out, name, "gauge", help);
        for (bound, value) in [("mean", i.mean), ("low", i.low), ("high", i.high)] {
            let _ = writeln!(
                out,
                "{name}{{bound=\"{bound}\"}} {}",
                go_float(value * scale)
            );
        }
    }
    family(
        out,
        "probetop_in_situ_windows",
        "gauge",
        "In-situ windows so far with the probes attached (on) and detached (off).",
    );
    let _ = writeln!(
        out,
        "probetop_in_situ_windows{{state=\"on\"}} {}",
        s.windows_on
    );
    let _ = writeln!(
        out,
        "probetop_in_situ_windows{{state=\"off\"}} {}",
        s.windows_off
    );
    family(
        out,
        "probetop_in_situ_measured",
        "gauge",
        "1 once the in-situ interval is narrow enough to give a number, else 0 (run longer).",
    );
    let measured = s.verdict == crate::insitu::Verdict::Measured;
    let _ = writeln!(out, "probetop_in_situ_measured {}", u8::from(measured));
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Total handler time: each HDR bucket's middle value times its count, summed exactly in
/// integers (counts in the millions times values up to 60 s overflow f64's exact range).
fn sum_seconds(h: &Histogram<u64>) -> f64 {
    let ns: u128 = h
        .iter_recorded()
        .map(|v| {
            u128::from(h.median_equivalent(v.value_iterated_to())) * u128::from(v.count_at_value())
        })
        .sum();
    ns as f64 / 1e9
}

/// Values at or below `bound_ns`, counting the whole HDR bucket that holds the bound
/// (values in it are indistinguishable from the bound).
fn count_at_or_below(h: &Histogram<u64>, bound_ns: u64) -> u64 {
    if bound_ns >= h.high() {
        return h.len();
    }
    h.count_between(0, bound_ns)
}

/// `{probe="..",name="..",kind="..",object="..",id=".."}` plus an optional extra label.
fn labels(p: &ProbeReport, extra: Option<(&str, String)>) -> String {
    let mut s = format!(
        "{{probe=\"{}\",name=\"{}\",kind=\"{}\",object=\"{}\",id=\"{}\"",
        escape_label(&p.spec),
        escape_label(&p.name),
        p.kind,
        escape_label(&p.object),
        p.id
    );
    // Another tool's probe, counted by probetop: who put it there.
    if let Some(site) = &p.other {
        let _ = write!(s, ",owner=\"{}\"", escape_label(&site.owner.tool));
        if let Some(pid) = site.owner.pid {
            let _ = write!(s, ",owner_pid=\"{pid}\"");
        }
    }
    if let Some((name, value)) = extra {
        let _ = write!(s, ",{name}=\"{}\"", escape_label(&value));
    }
    s.push('}');
    s
}

/// Label values escape backslash, double quote and line feed.
fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// HELP text escapes backslash and line feed.
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Go's `strconv.FormatFloat(v, 'g', -1, 64)`: shortest digits, exponent form when the
/// decimal exponent is below -4 or at least 6 (Go's fixed threshold for shortest 'g'),
/// e.g. `1e-07`, `0.0001`, `2.5`, `123456`, `1.234567e+06`, plus the exposition
/// format's `NaN`, `+Inf`, `-Inf`.
pub(crate) fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let sci = format!("{:e}", v);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        // Rust's Display is the same shortest digits in positional form.
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};

    use super::super::testing::{rich_report, sample_report};
    use super::*;

    /// One sample of the text format.
    #[derive(Debug)]
    struct Sample {
        name: String,
        labels: BTreeMap<String, String>,
        value: f64,
    }

    /// A small parser of the text format (0.0.4) that also checks what scrapers insist
    /// on: HELP and TYPE once per family and before its samples, valid names, escapes
    /// that undo, samples of a family kept together, no duplicate series.
    fn parse(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
        let is_name = |s: &str| {
            let mut chars = s.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        };
        let mut types: BTreeMap<String, String> = BTreeMap::new();
        let mut helps: HashSet<String> = HashSet::new();
        let mut samples = Vec::new();
        let mut series = HashSet::new();
        let mut finished_families: HashSet<String> = HashSet::new();
        let mut current_family: Option<String> = None;
        assert!(text.ends_with('\n'), "exposition ends with a newline");
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# ") {
                let mut parts = rest.splitn(3, ' ');
                let keyword = parts.next().expect("keyword");
                let name = parts.next().expect("metric name").to_string();
                let arg = parts.next().expect("argument");
                assert!(is_name(&name), "bad name {name:?}");
                match keyword {
                    "HELP" => assert!(helps.insert(name.clone()), "second HELP for {name}"),
                    "TYPE" => {
                        assert!(
                            ["counter", "gauge", "summary", "histogram", "untyped"].contains(&arg),
                            "type {arg}"
                        );
                        assert!(
                            types.insert(name.clone(), arg.into()).is_none(),
                            "second TYPE for {name}"
                        );
                    }
                    other => panic!("unknown comment keyword {other}"),
                }
                continue;
            }
            assert!(!line.starts_with('#') && !line.is_empty(), "line {line:?}");
            let name_end = line.find(['{', ' ']).expect("name end");
            let name = &line[..name_end];
            assert!(is_name(name), "bad name {name:?}");
            let mut labels = BTreeMap::new();
            let mut rest = &line[name_end..];
            if let Some(body) = rest.strip_prefix('{') {
                let mut chars = body.char_indices().peekable();
                loop {
                    let (start, c) = chars.next().expect("label or }");
                    if c == '}' {
                        rest = &body[start + 1..];
                        break;
                    }
                    let eq = body[start..].find('=').expect("=") + start;
                    let label = &body[start..eq];
                    assert!(
                        is_name(label) && !label.starts_with("__"),
                        "label {label:?}"
                    );
                    while chars.peek().expect("more").0 <= eq {
                        chars.next();
                    }
                    assert_eq!(chars.next().expect("quote").1, '"');
                    let mut value = String::new();
                    loop {
                        match chars.next().expect("closing quote").1 {
                            '"' => break,
                            '\\' => match chars.next().expect("escape").1 {
                                '\\' => value.push('\\'),
                                '"' => value.push('"'),
                                'n' => value.push('\n'),
                                other => panic!("bad escape \\{other}"),
                            },
                            '\n' => panic!("raw newline in label"),
                            c => value.push(c),
                        }
                    }
                    assert!(
                        labels.insert(label.to_string(), value).is_none(),
                        "dup label"
                    );
                    if chars.peek().expect("after value").1 == ',' {
                        chars.next();
                    }
                }
            }
            let value_text = rest.strip_prefix(' ').expect("space before value");
            assert!(!value_text.contains(' '), "timestamps are not written");
            let value = match value_text {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                "NaN" => f64::NAN,
                v => v.parse().expect("float value"),
            };
            // The family: a histogram or summary's suffixed samples belong to the base.
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    name.strip_suffix(suffix).filter(|base| {
                        types
                            .get(*base)
                            .is_some_and(|t| t == "histogram" || t == "summary")
                    })
                })
                .unwrap_or(name)
                .to_string();
            assert!(types.contains_key(&family), "no TYPE before {name}");
            if current_family.as_ref() != Some(&family) {
                if let Some(previous) = current_family.replace(family.clone()) {
                    finished_families.insert(previous);
                }
                assert!(!finished_families.contains(&family), "{family} split up");
            }
            assert!(
                series.insert(format!("{name}{labels:?}")),
                "duplicate series {name}{labels:?}"
            );
            samples.push(Sample {
                name: name.to_string(),
                labels,
                value,
            });
        }
        (types, samples)
    }

    fn find<'a>(
        samples: &'a [Sample],
        name: &str,
        id: u32,
        extra: Option<(&str, &str)>,
    ) -> &'a Sample {
        samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.get("id").is_some_and(|i| *i == id.to_string())
                    && extra.is_none_or(|(k, v)| s.labels.get(k).is_some_and(|l| l == v))
            })
            .unwrap_or_else(|| panic!("{name} of probe {id} {extra:?}"))
    }

    #[test]
    fn sample_counters_exactly() {
        let text = render_prometheus(&sample_report());
        assert!(text.starts_with(
            "# HELP probetop_probe_hits_total Hits the probe took: hit records received plus records dropped.\n\
             # TYPE probetop_probe_hits_total counter\n\
             probetop_probe_hits_total{probe=\"uprobe:work_unit\",name=\"work_unit\",kind=\"uprobe\",object=\"/usr/bin/fixture\",id=\"0\"} 5\n"
        ));
        assert!(text.contains(
            "probetop_handler_seconds{probe=\"uprobe:work_unit\",name=\"work_unit\",kind=\"uprobe\",object=\"/usr/bin/fixture\",id=\"0\",quantile=\"0.5\"} 3e-07\n"
        ));
        assert!(text.contains(",le=\"5e-06\"} 5\n"));
    }

    #[test]
    fn cost_gauges_always_with_their_method() {
        let mut report = sample_report();
        report.probes[0].cost.whole_cost_ns = Some(2000.0);
        report.probes[0].cost.cpu_share = Some(0.03);
        report.probes[0].cost.method = Some(crate::present::Method::Calibration);
        report.target_cpu = Some(0.2);
        let text = render_prometheus(&report);
        assert!(!text.contains("NaN"), "{text}");
        let (types, samples) = parse(&text);
        assert_eq!(types["probetop_probe_cost_seconds"], "gauge");
        let cost = find(
            &samples,
            "probetop_probe_cost_seconds",
            0,
            Some(("method", "estimate")),
        );
        assert!((cost.value - 2e-6).abs() < 1e-15);
        let share = find(&samples, "probetop_probe_cpu_share", 0, None);
        assert_eq!(share.value, 0.03);
        // The unpriced probe has no cost line.
        assert!(
            !samples
                .iter()
                .any(|s| s.name == "probetop_probe_cost_seconds" && s.labels["id"] == "1")
        );
        let run = |name: &str| {
            samples
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("{name}"))
        };
        assert_eq!(run("probetop_cost_cpu_share").value, 0.03);
        assert_eq!(run("probetop_cost_cpu_share").labels["method"], "estimate");
        assert!((run("probetop_target_own_cpu_share").value - 0.17).abs() < 1e-9);
        assert!((run("probetop_cost_on_target_ratio").value - 0.03 / 0.17).abs() < 1e-9);
    }

    #[test]
    fn parsed_values_match_the_report() {
        let report = rich_report();
        let (types, samples) = parse(&render_prometheus(&report));
        assert_eq!(types["probetop_probe_hits_total"], "counter");
        assert_eq!(types["probetop_probe_dropped_total"], "counter");
        assert_eq!(types["probetop_handler_seconds"], "summary");
        assert_eq!(types["probetop_handler_duration_seconds"], "histogram");
        for p in &report.probes {
            let h = &p.handler_ns;
            let hits = find(&samples, "probetop_probe_hits_total", p.id, None);
            assert_eq!(hits.value, p.hits as f64);
            // Escapes undo to the original strings.
            assert_eq!(hits.labels["probe"], p.spec);
            assert_eq!(hits.labels["object"], p.object);
            assert_eq!(hits.labels["name"], p.name);
            assert_eq!(hits.labels["kind"], p.kind.as_str());
            assert_eq!(
                find(&samples, "probetop_probe_dropped_total", p.id, None).value,
                p.dropped as f64
            );
            for (q, label) in [
                (0.5, "0.5"),
                (0.9, "0.9"),
                (0.99, "0.99"),
                (0.999, "0.999"),
                (1.0, "1"),
            ] {
                // Without hits no quantile line at all: no NaN.
                if h.is_empty() {
                    assert!(!samples.iter().any(|s| {
                        s.name == "probetop_handler_seconds"
                            && s.labels.get("id") == Some(&p.id.to_string())
                            && s.labels.contains_key("quantile")
                    }));
                    continue;
                }
                let s = find(
                    &samples,
                    "probetop_handler_seconds",
                    p.id,
                    Some(("quantile", label)),
                );
                assert_eq!(s.value, h.value_at_quantile(q) as f64 / 1e9);
            }
            let count = find(&samples, "probetop_handler_seconds_count", p.id, None).value;
            assert_eq!(count, h.len() as f64);
            let sum = find(&samples, "probetop_handler_seconds_sum", p.id, None).value;
            assert!((sum - h.mean() * h.len() as f64 / 1e9).abs() <= 1e-9 * sum.max(1.0));

            // Buckets: ascending bounds, cumulative counts, +Inf equal to _count.
            let buckets: Vec<(f64, f64)> = samples
                .iter()
                .filter(|s| {
                    s.name == "probetop_handler_duration_seconds_bucket"
                        && s.labels["id"] == p.id.to_string()
                })
                .map(|s| {
                    let le = match s.labels["le"].as_str() {
                        "+Inf" => f64::INFINITY,
                        v => v.parse().expect("le"),
                    };
                    (le, s.value)
                })
                .collect();
            assert_eq!(buckets.len(), 26);
            assert!(
                buckets
                    .windows(2)
                    .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
            );
            assert_eq!(buckets.last().expect("+Inf").1, h.len() as f64);
            for (le, n) in &buckets[..25] {
                let bound = (le * 1e9).round() as u64;
                assert_eq!(*n as u64, h.count_between(0, bound), "le {le}");
            }
            assert_eq!(
                find(
                    &samples,
                    "probetop_handler_duration_seconds_count",
                    p.id,
                    None
                )
                .value,
                h.len() as f64
            );
        }
    }

    #[test]
    fn label_and_help_escaping() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(escape_help("a\\b\"c\nd"), "a\\\\b\"c\\nd");
    }

    #[test]
    fn floats_as_go_writes_them() {
        for (v, s) in [
            (1e-7, "1e-07"),
            (2.5e-5, "2.5e-05"),
            (0.0001, "0.0001"),
            (0.5, "0.5"),
            (1.0, "1"),
            (10.0, "10"),
            (123456.0, "123456"),
            (999999.0, "999999"),
            (1234567.0, "1.234567e+06"),
            (1e21, "1e+21"),
            (-2.5e-7, "-2.5e-07"),
            (0.0, "0"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
        ] {
            assert_eq!(go_float(v), s);
        }
    }

    #[test]
    fn in_situ_intervals_each_have_their_three_bounds() {
        use crate::insitu::{InSituSummary, Interval, WorkMeter};
        let interval = |mean: f64| Interval {
            mean,
            low: mean * 0.5,
            high: mean * 1.5,
        };
        let mut report = rich_report();
        report.cost.in_situ = Some(InSituSummary {
            work: WorkMeter::Wakeups,
            per_hit_ns: Some(interval(1000.0)),
            work_moved: Some(interval(-0.004)),
            per_hit_cpu_alone_ns: Some(interval(1100.0)),
            detach_ms: Some(3.0),
            attach_ms: Some(5.0),
            churn_cpu_ms: Some(0.1),
            ..super::super::testing::in_situ(interval(0.02), Some(0.3))
        });
        let (types, samples) = parse(&render_prometheus(&report));
        let value = |name: &str, bound: &str| {
            samples
                .iter()
                .find(|s| s.name == name && s.labels.get("bound").is_some_and(|b| b == bound))
                .unwrap_or_else(|| panic!("{name}{{bound={bound}}}"))
                .value
        };
        for (name, mean) in [
            ("probetop_in_situ_cpu_share", 0.02),
            ("probetop_in_situ_per_hit_seconds", 1e-6),
            ("probetop_in_situ_per_hit_cpu_alone_seconds", 1.1e-6),
            ("probetop_in_situ_work_moved_ratio", -0.004),
        ] {
            assert_eq!(types[name], "gauge");
            for (bound, want) in [("mean", mean), ("low", mean * 0.5), ("high", mean * 1.5)] {
                let got = value(name, bound);
                assert!(
                    (got - want).abs() <= want.abs() * 1e-9,
                    "{name} {bound}: {got}"
                );
            }
        }
    }

    #[test]
    fn a_keyed_pairs_row_of_one_key_has_the_pairs_labels_and_its_key() {
        let mut report = super::super::testing::latency_report();
        let mut keyed = report.latency[0].clone();
        keyed.key = Some(crate::aggregate::RowKey::Value("COM_QUERY".into()));
        keyed.latency_hist.reset();
        keyed.latency_hist.saturating_record(5_000);
        report.latency.push(keyed);
        let text = render_prometheus(&report);
        let labels = "latency=\"latency:work_unit\",name=\"work_unit\",object=\"/usr/bin/fixture\",end_path=\"uretprobe\"";
        let counts: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("probetop_latency_seconds_count{"))
            .collect();
        assert_eq!(
            counts,
            [
                format!("probetop_latency_seconds_count{{{labels}}} 1001"),
                format!("probetop_latency_seconds_count{{{labels},key=\"COM_QUERY\"}} 1"),
            ]
        );
        let tags = super::super::hdr::latency_tags(&report.latency);
        assert_eq!(tags, ["latency.work_unit", "latency.work_unit_COM_QUERY_"]);
    }

    #[test]
    fn a_latency_pair_is_a_histogram_family_of_its_calls() {
        let report = super::super::testing::latency_report();
        let text = render_prometheus(&report);
        let l = &report.latency[0];
        let labels = "latency=\"latency:work_unit\",name=\"work_unit\",object=\"/usr/bin/fixture\",end_path=\"uretprobe\"";
        let value = |line: &str| -> String {
            text.lines()
                .find(|l| l.starts_with(line))
                .and_then(|l| l.rsplit(' ').next())
                .unwrap_or_else(|| panic!("no {line} in\n{text}"))
                .to_string()
        };
        assert!(text.contains("# TYPE probetop_latency_seconds histogram"));
        for family in [
            "probetop_latency_seconds",
            "probetop_latency_corrected_seconds",
        ] {
            assert_eq!(value(&format!("{family}_count{{{labels}}} ")), "1001");
            assert_eq!(
                value(&format!("{family}_bucket{{{labels},le=\"+Inf\"}} ")),
                "1001"
            );
            // 1000 calls of 10-20 us, one of 2 ms.
            assert_eq!(
                value(&format!("{family}_bucket{{{labels},le=\"0.001\"}} ")),
                "1000"
            );
        }
        let sum: f64 = value(&format!("probetop_latency_seconds_sum{{{labels}}} "))
            .parse()
            .expect("sum");
        let exact = l.latency_hist.mean() * 1001.0 / 1e9;
        assert!((sum - exact).abs() <= exact * 1e-3, "{sum} {exact}");
        assert_eq!(
            value(&format!("probetop_latency_probe_cost_seconds{{{labels}}} ")),
            "3e-07"
        );
        assert_eq!(
            value(&format!(
                "probetop_latency_unpaired_total{{{labels},why=\"unwound\"}} "
            )),
            "0"
        );
    }

    /// `promtool check metrics` (Prometheus' own parser and linter) accepts the output.
    /// promtool is in Debian's `prometheus` package.
    #[test]
    #[ignore = "needs promtool (Debian prometheus)"]
    fn promtool_accepts_it() {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        let mut text = render_prometheus(&rich_report());
        // With a latency pair's families too (a run has one or the other here, so the
        // sample reports' families are not repeated).
        let latency = render_prometheus(&super::super::testing::latency_report());
        let families: Vec<&str> = latency
            .lines()
            .filter(|l| {
                let name = l
                    .trim_start_matches("# HELP ")
                    .trim_start_matches("# TYPE ");
                name.starts_with("probetop_latency_")
            })
            .collect();
        assert!(families.len() > 40, "{latency}");
        for line in families {
            text.push_str(line);
            text.push('\n');
        }
        let mut child = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("promtool cannot run ({e}): apt-get install prometheus"));
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write to promtool");
        let out = child.wait_with_output().expect("promtool finishes");
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "promtool check metrics: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
