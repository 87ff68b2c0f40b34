//! The end-of-run table printed by headless runs.

use std::fmt::Write as _;

use super::export::Report;
use super::headline::{self, Headline};
use super::{ProbeLabel, format};
use crate::aggregate::Snapshot;

/// Renders the run's headline, then one row per probe: what a hit cost the target and
/// the share of one CPU its hits took, hits, the average rate over the run, drops, then
/// the BPF handler's own time percentiles (a part of the cost). The costs are the
/// report's (in situ where measured); a probe without hits shows `-` where it has no
/// number.
pub fn table(labels: &[ProbeLabel], snapshot: &Snapshot, report: Option<&Report>) -> String {
    let seconds = snapshot.elapsed.as_secs_f64();
    let headers = [
        "PROBE", "COST/HIT", "%CPU", "HITS", "HITS/S", "DROPS", "MIN", "P50", "P90", "P99",
        "P99.9", "MAX", "MEAN",
    ];
    const HANDLER_FROM: usize = 6;
    let mut rows: Vec<Vec<String>> = vec![headers.iter().map(|h| h.to_string()).collect()];
    for (id, (label, probe)) in labels.iter().zip(&snapshot.probes).enumerate() {
        let cost = report
            .and_then(|r| r.probes.get(id))
            .map(|p| &p.cost)
            .filter(|_| probe.hits > 0);
        let mut row = vec![
            label.full_name(),
            cost.and_then(|c| c.whole_cost_ns)
                .map_or_else(|| "-".into(), format::ns_f),
            cost.and_then(|c| c.cpu_share)
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
        rows.push(row);
    }
    let widths: Vec<usize> = (0..headers.len())
        .map(|col| {
            rows.iter()
                .map(|r| r[col].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    if let Some(report) = report {
        let _ = writeln!(
            out,
            "probes' cost to the target: {}",
            Headline::of_report(report).sentence()
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
    for row in &rows {
        for (col, cell) in row.iter().enumerate() {
            let width = widths[col];
            // The probe name reads left-aligned, numbers right-aligned.
            let _ = if col == 0 {
                write!(out, "{cell:<width$}")
            } else {
                write!(out, "  {cell:>width$}")
            };
        }
        out.push('\n');
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::{HandlerSummary, ProbeSnapshot};
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
}
