//! The end-of-run table printed by headless runs.

use std::fmt::Write as _;

use super::{ProbeLabel, format};
use crate::aggregate::Snapshot;

/// Renders one row per probe: hits, the average rate over the run, drops and
/// handler-time percentiles.
pub fn table(labels: &[ProbeLabel], snapshot: &Snapshot) -> String {
    let seconds = snapshot.elapsed.as_secs_f64();
    let headers = [
        "PROBE", "HITS", "DROPS", "HITS/S", "MIN", "P50", "P90", "P99", "P99.9", "MAX", "MEAN",
    ];
    let mut rows: Vec<Vec<String>> = vec![headers.iter().map(|h| h.to_string()).collect()];
    for (label, probe) in labels.iter().zip(&snapshot.probes) {
        let mut row = vec![
            label.full_name(),
            probe.hits.to_string(),
            probe.dropped.to_string(),
            format::count(if seconds > 0.0 {
                probe.hits as f64 / seconds
            } else {
                0.0
            }),
        ];
        row.extend(format::handler_cells(&probe.handler));
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
        let text = table(&labels, &snapshot);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("PROBE"));
        assert!(lines[1].starts_with("uprobe:work_unit"));
        assert!(lines[1].contains("100000"));
        assert!(lines[1].contains("1.20us"));
        assert!(lines[1].contains("25.0k"), "average rate: {}", lines[1]);
        assert_eq!(lines[0].len(), lines[1].len());
    }
}
