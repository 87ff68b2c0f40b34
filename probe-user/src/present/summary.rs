//! The end-of-run table printed by headless runs.

use std::fmt::Write as _;

use super::answer;
use super::export::Report;
use super::headline;
use super::{ProbeLabel, format};
use crate::present::Snapshot;

/// Renders the run's headline (with `--in-situ`, its reconciled answer), then one row
/// per probe: what a hit cost the target and the share of one CPU its hits took, hits,
/// the average rate over the run (under `--in-situ`, over the time attached), drops,
/// then the BPF handler's own time percentiles (a part of the cost). The costs are the
/// report's (in situ where measured); a probe without hits shows `-` where it has no
/// number.
pub(crate) fn table(labels: &[ProbeLabel], snapshot: &Snapshot, report: Option<&Report>) -> String {
    let run_s = snapshot.elapsed.as_secs_f64();
    let in_situ = report.and_then(|r| r.cost.in_situ.as_ref());
    // Under --in-situ hits come only while the probes are attached: rates over that.
    let seconds = in_situ.map_or(run_s, |s| answer::attached_seconds(s, run_s));
    let headers = [
        "PROBE", "COST/HIT", "%CPU", "HITS", "HITS/S", "DROPS", "MIN", "P50", "P90", "P99",
        "P99.9", "MAX", "MEAN",
    ];
    const HANDLER_FROM: usize = 6;
    // A share over the run becomes one over the attached time, as in situ's own are.
    let share = |c: &crate::present::ProbeCostReport| match c.method {
        Some(crate::present::Method::InSitu) => c.cpu_share,
        _ => c.cpu_share.map(|s| s * run_s / seconds),
    };
    // Each probe's row, and its keyed rows under it, as groups put in cost order.
    let mut groups: Vec<Vec<Vec<String>>> = Vec::with_capacity(snapshot.probes.len());
    let mut order_keys: Vec<(Option<f64>, u64, String)> = Vec::with_capacity(groups.capacity());
    for (id, (label, probe)) in labels.iter().zip(&snapshot.probes).enumerate() {
        let cost = report
            .and_then(|r| r.probes.get(id))
            .map(|p| &p.cost)
            .filter(|_| probe.hits > 0);
        order_keys.push((
            cost.and_then(|c| c.cpu_share),
            probe.hits,
            label.full_name(),
        ));
        let mut group = Vec::new();
        let mut row = vec![
            label.full_name(),
            cost.and_then(|c| c.whole_cost_ns)
                .map_or_else(|| "-".into(), format::ns_f),
            cost.and_then(share)
                .map_or_else(|| "-".into(), headline::share_text),
            probe.hits.to_string(),
            format::count(if seconds > 0.0 {
                probe.hits as f64 / seconds
            } else {
                0.0
            }),
            probe.dropped.to_string(),
        ];
        if probe.handler.count == 0 {
            row.extend(std::iter::repeat_n("-".to_string(), 7));
        } else {
            row.extend(format::handler_cells(&probe.handler));
        }
        group.push(row);
        // A keyed probe's hits per key, under it: `name[key]`.
        for (_, keyed) in snapshot.keyed.iter().filter(|(k, _)| *k == id as u32) {
            let part = keyed.hits as f64 / probe.hits.max(1) as f64;
            let mut row = vec![
                keyed_name(&label.full_name(), keyed.key.as_str()),
                cost.and_then(|c| c.whole_cost_ns)
                    .map_or_else(|| "-".into(), format::ns_f),
                cost.and_then(share)
                    .map_or_else(|| "-".into(), |s| headline::share_text(s * part)),
                keyed.hits.to_string(),
                format::count(if seconds > 0.0 {
                    keyed.hits as f64 / seconds
                } else {
                    0.0
                }),
                "-".into(),
            ];
            if keyed.handler_ns.count == 0 {
                row.extend(std::iter::repeat_n("-".to_string(), 7));
            } else {
                row.extend(format::handler_cells(&keyed.handler_ns));
            }
            group.push(row);
        }
        groups.push(group);
    }
    let mut rows: Vec<Vec<String>> = vec![headers.iter().map(|h| h.to_string()).collect()];
    for at in cost_order(&order_keys) {
        rows.append(&mut groups[at]);
    }
    let widths = column_widths(&rows);
    let mut out = String::new();
    if let Some(report) = report {
        // With --in-situ, the reconciled answer: which number, and why.
        let _ = writeln!(
            out,
            "probes' cost to the target: {}",
            answer::headline_text(report)
        );
    }
    // The handler's columns under their own heading, above them.
    let handler_at: usize = widths[..HANDLER_FROM].iter().map(|w| w + 2).sum();
    let handler_width: usize = widths[HANDLER_FROM..].iter().map(|w| w + 2).sum::<usize>() - 2;
    let heading = "handler: the BPF program's own time per hit (part of COST/HIT)";
    let _ = writeln!(
        out,
        "{:handler_at$}{}",
        "",
        if heading.len() <= handler_width {
            heading
        } else {
            "handler (BPF program)"
        }
    );
    push_rows(&mut out, &rows, &widths);
    if let Some(s) = in_situ.filter(|s| s.seconds_off > 0.0) {
        let _ = writeln!(out, "{}", answer::rates_note(s, run_s));
    }
    let (timed, counted) = snapshot
        .probes
        .iter()
        .filter(|p| p.mode == crate::delivery::DeliveryMode::KernelHistogram)
        .fold((0, 0), |(t, c), p| (t + p.handler.count, c + p.hits));
    if timed < counted {
        let _ = writeln!(
            out,
            "in-kernel probes: every hit counted, handler times from {} of them drawn at random (--time-every; 1 times every hit)",
            format::percent(timed as f64 / counted as f64)
        );
    }
    out
}

/// The order probes are reported in, the answer first: probes with hits by the share of
/// one CPU they cost the target, dearest first, then those without a price by their
/// hits; ties by name, then as given; probes without hits last, by name. `probes`: each
/// one's (share of a CPU, hits, name). The summary table, the HTML report's and the
/// end-of-run cost lines share it.
pub(crate) fn cost_order(probes: &[(Option<f64>, u64, String)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..probes.len()).collect();
    order.sort_by(|&a, &b| {
        let ((share_a, hits_a, name_a), (share_b, hits_b, name_b)) = (&probes[a], &probes[b]);
        (*hits_a == 0)
            .cmp(&(*hits_b == 0))
            .then_with(|| match (share_a, share_b) {
                (Some(x), Some(y)) => y.total_cmp(x),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => hits_b.cmp(hits_a),
            })
            .then_with(|| name_a.cmp(name_b))
            .then(a.cmp(&b))
    });
    order
}

/// A keyed row's name: the key after the probe's name, before its marks
/// (`uprobe:f[3] [sstep]`).
fn keyed_name(full: &str, key: &str) -> String {
    match full.find(" [") {
        Some(at) => format!("{}[{key}]{}", &full[..at], &full[at..]),
        None => format!("{full}[{key}]"),
    }
}

/// Renders one row per latency pair: calls, the rate over `seconds`, the latency as
/// measured and as corrected for the probes' own cost, the probes' whole cost per call
/// and its share of the corrected mean, then the calls not paired. `attached_s`, under
/// `--in-situ`: the seconds the probes were attached, which calls are counted in, so
/// the rate is over them as the probes' HITS/S is (not the whole run's, about half).
pub(crate) fn latency_table(
    rows: &[crate::aggregate::LatencyRow],
    seconds: f64,
    attached_s: Option<f64>,
) -> String {
    let headers = [
        "LATENCY",
        "CALLS",
        "CALLS/S",
        "P50",
        "P90",
        "P99",
        "P99.9",
        "MAX",
        "CORR P50",
        "CORR MEAN",
        "COST/CALL",
        "OVERHEAD",
        "RETURNS",
    ];
    let mut table: Vec<Vec<String>> = vec![headers.iter().map(|h| h.to_string()).collect()];
    for row in rows {
        let rate = if let Some(attached) = attached_s.filter(|&a| a > 0.0) {
            row.calls as f64 / attached
        } else if row.calls_per_second > 0.0 {
            row.calls_per_second
        } else if seconds > 0.0 {
            row.calls as f64 / seconds
        } else {
            0.0
        };
        let (m, c) = (&row.latency_ns, &row.latency_corrected_ns);
        let has = m.count > 0;
        let cell = |v: u64| if has { format::ns(v) } else { "-".into() };
        // A pair `--budget` detached for good counted a few calls: no rate nor share.
        let shed = |cell: String| if row.shed { "shed".into() } else { cell };
        table.push(vec![
            format!("{} ({})", row.display_name(), row.object),
            row.calls.to_string(),
            shed(format::count(rate)),
            cell(m.p50),
            cell(m.p90),
            cell(m.p99),
            cell(m.p999),
            cell(m.max),
            cell(c.p50),
            if has {
                format::ns_f(c.mean)
            } else {
                "-".into()
            },
            row.whole_cost_ns.map_or_else(|| "-".into(), format::ns_f),
            shed(format::Overhead::of(row).cell()),
            row.path.as_str().to_string(),
        ]);
    }
    let mut out = render_rows(&table);
    for row in rows {
        if row.open + row.unwound + row.unmatched + row.overflowed > 0 {
            let _ = writeln!(
                out,
                "{}: {} open at the end, {} unwound (an exception or longjmp), {} ended before the window, {} too deep to track",
                row.display_name(),
                row.open,
                row.unwound,
                row.unmatched,
                row.overflowed
            );
        }
    }
    if !rows.is_empty() {
        if let Some(attached) = attached_s {
            let _ = writeln!(
                out,
                "CALLS/S over the {attached:.1} s the probes were attached (--in-situ detached them the rest)"
            );
        }
        out.push_str(
            "CORR: less the probes' cost inside each call (one whole hit of the entry probe, and every probed hit nested in the call)\n",
        );
    }
    out
}

/// Rows of cells, the first column left-aligned, the others right-aligned.
fn render_rows(rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    push_rows(&mut out, rows, &column_widths(rows));
    out
}

/// Each column's width: its widest cell, in characters.
fn column_widths(rows: &[Vec<String>]) -> Vec<usize> {
    let columns = rows.first().map_or(0, Vec::len);
    (0..columns)
        .map(|col| {
            rows.iter()
                .map(|r| r[col].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// Appends `rows` to `out` in columns of `widths`, two spaces apart: the first column
/// (a name) left-aligned, the others (numbers) right-aligned.
fn push_rows(out: &mut String, rows: &[Vec<String>], widths: &[usize]) {
    for row in rows {
        for (col, cell) in row.iter().enumerate() {
            let width = widths[col];
            let _ = if col == 0 {
                write!(out, "{cell:<width$}")
            } else {
                write!(out, "  {cell:>width$}")
            };
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::HandlerSummary;
    use crate::present::ProbeSnapshot;
    use crate::spec::ProbeKind;

    #[test]
    fn aligned_rows() {
        let labels = vec![ProbeLabel::new(ProbeKind::Uprobe, "work_unit", "/bin/w")];
        let snapshot = Snapshot {
            elapsed: std::time::Duration::from_secs(4),
            probes: vec![ProbeSnapshot {
                mode: crate::delivery::DeliveryMode::Ring,
                hits: 100_000,
                dropped: 0,
                per_second: 0.0,
                handler: HandlerSummary {
                    count: 100_000,
                    min: 90,
                    mean: 250.4,
                    p50: 240,
                    p90: 300,
                    p99: 1200,
                    p999: 5000,
                    max: 30_000,
                },
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = table(&labels, &snapshot, None);
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("PROBE"));
        assert!(lines[1].starts_with("uprobe:work_unit"));
        assert!(lines[1].contains("100000"));
        assert!(lines[1].contains("1.20us"));
        assert!(lines[1].contains("25.0k"), "average rate: {}", lines[1]);
        assert_eq!(lines[0].len(), lines[1].len());
        // A probe without hits: `-` for its times, never 0ns.
        let mut idle = snapshot.clone();
        idle.probes[0].hits = 0;
        idle.probes[0].handler = HandlerSummary::default();
        let text = table(&labels, &idle, None);
        let row = text.lines().nth(2).expect("row");
        assert!(!row.contains("0ns"), "{row}");
        assert_eq!(
            row.split_whitespace().filter(|c| *c == "-").count(),
            9,
            "{row}"
        );
        // Unpriced, no report: `-` under the cost columns.
        let text = table(&labels, &snapshot, None);
        let cells: Vec<&str> = text
            .lines()
            .nth(2)
            .expect("row")
            .split_whitespace()
            .collect();
        assert_eq!(&cells[1..3], ["-", "-"]);
    }

    #[test]
    fn probes_are_reported_dearest_first_and_without_hits_last() {
        let probes = |rows: &[(Option<f64>, u64, &str)]| -> Vec<(Option<f64>, u64, String)> {
            rows.iter()
                .map(|(s, h, n)| (*s, *h, n.to_string()))
                .collect()
        };
        // Spec order: a probe without hits, a cheap one, two tied, the dearest.
        let order = cost_order(&probes(&[
            (None, 0, "uprobe:main"),
            (Some(0.001), 500, "uprobe:leaf"),
            (Some(0.02), 900, "uprobe:zeta"),
            (Some(0.02), 100, "uprobe:alpha"),
            (Some(0.05), 10, "uprobe:dear"),
        ]));
        assert_eq!(order, [4, 3, 2, 1, 0]);
        // No calibration: no share, so by hits; ties by name; no hits last by name.
        let order = cost_order(&probes(&[
            (None, 0, "uprobe:b"),
            (None, 10, "uprobe:few"),
            (None, 0, "uprobe:a"),
            (None, 3000, "uprobe:many"),
            (None, 10, "uprobe:else"),
        ]));
        assert_eq!(order, [3, 4, 1, 2, 0]);
    }

    #[test]
    fn the_table_reads_in_cost_order() {
        use crate::present::export::ProbeReport;
        let labels: Vec<ProbeLabel> = ["main", "work_unit", "leaf_ret"]
            .iter()
            .map(|n| ProbeLabel::new(ProbeKind::Uprobe, n, "/bin/w"))
            .collect();
        let mut snapshot = Snapshot {
            elapsed: std::time::Duration::from_secs(4),
            probes: vec![ProbeSnapshot::default(); 3],
            ..Default::default()
        };
        snapshot.probes[1].hits = 4000;
        snapshot.probes[2].hits = 8000;
        let mut report = crate::present::export::testing::sample_report();
        report.probes = (0..3)
            .map(|id| {
                let mut p: ProbeReport = report.probes[0].clone();
                p.id = id;
                p.hits = snapshot.probes[id as usize].hits;
                p.cost.whole_cost_ns = Some(1000.0);
                p.cost.cpu_share = Some(p.hits as f64 * 1e-6 / 4.0);
                p
            })
            .collect();
        let text = table(&labels, &snapshot, Some(&report));
        let names: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("PROBE"))
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(
            names,
            ["uprobe:leaf_ret", "uprobe:work_unit", "uprobe:main"],
            "{text}"
        );
    }

    #[test]
    fn a_latency_row_shows_its_latency_cost_and_share() {
        let summary = |p50| HandlerSummary {
            count: 300,
            min: p50 - 100,
            mean: p50 as f64,
            p50,
            p90: p50 + 100,
            p99: p50 + 200,
            p999: p50 + 300,
            max: p50 + 400,
        };
        let row = crate::aggregate::LatencyRow {
            spec: "latency:spin".into(),
            name: "spin".into(),
            key: None,
            object: "/bin/w".into(),
            path: crate::aggregate::EndPath::RetUprobes,
            starts: vec![0],
            ends: vec![1],
            calls: 300,
            calls_per_second: 150.0,
            open: 0,
            unwound: 2,
            unmatched: 0,
            overflowed: 0,
            latency_ns: summary(20_600),
            corrected_applied: true,
            latency_corrected_ns: summary(20_000),
            whole_cost_ns: Some(1_000.0),
            overhead_share: Some(0.05),
            shed: false,
            latency_hist: hdrhistogram::Histogram::new(3).expect("3 digits"),
            corrected_hist: hdrhistogram::Histogram::new(3).expect("3 digits"),
        };
        let text = latency_table(std::slice::from_ref(&row), 2.0, None);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("LATENCY"), "{text}");
        for cell in [
            "spin (/bin/w)",
            "300",
            "150",
            "20.6us",
            "20.0us",
            "5.0%",
            "ret-uprobes",
        ] {
            assert!(lines[1].contains(cell), "{cell:?} in {text}");
        }
        assert_eq!(lines[0].len(), lines[1].len());
        assert!(lines[2].contains("2 unwound"), "{text}");
        assert!(!text.contains("CALLS/S over the"), "{text}");

        // Under --in-situ the calls came in the 1.2 s attached: 250 a second, said so.
        let text = latency_table(&[row], 2.0, Some(1.2));
        let lines: Vec<&str> = text.lines().collect();
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(&cells[2..4], ["300", "250"], "{text}");
        assert_eq!(
            lines[3],
            "CALLS/S over the 1.2 s the probes were attached (--in-situ detached them the rest)"
        );
    }
}
