//! Part 5 of the bench: `probetop calibrate` and a cross-check of it.

use std::fmt::Write as _;
use std::process::Stdio;

use anyhow::{Context as _, Result};

use super::*;
/// `probetop calibrate --json`'s types (this module's `Calibration` is the bench's part).
use crate::util::listing as calibrate;

// ---------------------------------------------------------------------------------------
// 5. Calibration

/// `probetop calibrate`'s table, and the same mechanisms measured by the bench its own way
/// (bpftrace's empty program on the workload fixture): two methods that must agree.
#[derive(Debug, Clone, Default)]
pub(super) struct Calibration {
    /// `probetop calibrate --json`, when it ran.
    pub(super) probetop: Option<calibrate::Calibration>,
    /// Why it did not.
    pub(super) probetop_error: Option<String>,
    pub(super) cross_check: CalibrationTable,
}

#[derive(Debug, Clone, Default)]
pub(super) struct CalibrationTable {
    /// (mechanism, `probetop calibrate`'s case of it, ns per hit by round).
    pub(super) rows: Vec<(&'static str, Option<calibrate::Case>, Vec<f64>)>,
    pub(super) warnings: Vec<String>,
}

impl Bench {
    pub(super) fn calibration(&self, cost: Option<&CostResults>) -> Result<Calibration> {
        let mut calibration = Calibration::default();
        eprintln!("bench: calibration: probetop calibrate (about a minute)");
        let out = self
            .probetop()
            .args(["calibrate", "--json"])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .context("running probetop calibrate")?;
        if out.status.success() {
            match serde_json::from_slice::<calibrate::Calibration>(&out.stdout) {
                Ok(v) => calibration.probetop = Some(v),
                Err(e) => calibration.probetop_error = Some(format!("unreadable JSON: {e}")),
            }
        } else {
            calibration.probetop_error = Some(format!("probetop calibrate: {}", out.status));
        }
        let rounds = self.settings.calibration_rounds;
        let table = &mut calibration.cross_check;
        // What the nop adds to a call, next to nothing: not the same quantity as
        // calibrate's row (the whole call of a function holding the site), so no ratio.
        table.rows.push((
            "USDT compiled in, not attached: added per call",
            None,
            self.unattached_usdt(rounds)?,
        ));
        // The empty-program cases of the cost part, or measured here without it.
        let empties = match cost {
            Some(cost) => cost.clone(),
            None => {
                let cases: Vec<Case> = [Site::Usdt, Site::Uprobe, Site::Uretprobe]
                    .into_iter()
                    .map(|site| Case {
                        site,
                        tool: Tool::Empty,
                    })
                    .collect();
                self.measure_cases(&self.workload, self.settings.batch, &cases, rounds)?
            }
        };
        // A single step costs ~10x an emulated probe: smaller batches keep samples short.
        let xol = self.measure_cases(
            &self.workload,
            self.settings.batch / 10,
            &[Case {
                site: Site::SingleStep,
                tool: Tool::Empty,
            }],
            rounds,
        )?;
        table.warnings.extend(xol.warnings.iter().cloned());
        table.rows.push((
            "USDT (nop), empty program",
            Some(calibrate::Case::UsdtHit),
            empties.per_hit(Site::Usdt, Tool::Empty),
        ));
        table.rows.push((
            "uprobe on push %rbp (emulated), empty program",
            Some(calibrate::Case::UprobeEmulated),
            empties.per_hit(Site::Uprobe, Tool::Empty),
        ));
        table.rows.push((
            "uprobe on mov (single-stepped), empty program",
            Some(calibrate::Case::UprobeSingleStepped),
            xol.per_hit(Site::SingleStep, Tool::Empty),
        ));
        table.rows.push((
            "uretprobe, empty program",
            Some(calibrate::Case::Uretprobe),
            empties.per_hit(Site::Uretprobe, Tool::Empty),
        ));
        Ok(calibration)
    }

    /// The workload with its USDT site against the same code without it, both unprobed:
    /// the two run in turn (the other stopped) so they never share the CPUs.
    pub(super) fn unattached_usdt(&self, rounds: usize) -> Result<Vec<f64>> {
        let with = Workload::start(&self.workload, self.settings.batch, None)?;
        let without = Workload::start(&self.workload_nousdt, self.settings.batch, None)?;
        with.pause()?;
        without.pause()?;
        let one = |w: &Workload| -> Result<f64> {
            let ns = w.resume_and_measure(1, self.settings.baseline_for * 2);
            w.pause()?;
            ns
        };
        let mut diffs = Vec::new();
        for round in 0..rounds {
            let (a, b) = if round % 2 == 0 {
                let a = one(&with)?;
                (a, one(&without)?)
            } else {
                let b = one(&without)?;
                (one(&with)?, b)
            };
            eprintln!("bench: calibration: unattached USDT {a:.2} vs none {b:.2} ns per call");
            diffs.push(a - b);
        }
        // Stopped processes ignore SIGTERM until continued; Proc's drop kills them.
        Ok(diffs)
    }
}

pub(super) fn render_calibration(md: &mut String, c: &Calibration) {
    let _ = writeln!(md, "### 5. Calibration\n");
    let rows = c
        .probetop
        .as_ref()
        .map(|v| v.rows.as_slice())
        .unwrap_or_default();
    if rows.is_empty() {
        let _ = writeln!(
            md,
            "`probetop calibrate` gave no table: {}\n",
            c.probetop_error.as_deref().unwrap_or("no rows")
        );
    } else {
        let _ = writeln!(
            md,
            "`probetop calibrate`: what the probe mechanisms cost the traced thread per hit \
             (its own workload, empty programs), median, IQR and 95% bootstrap interval of \
             the median over {} repetitions.\n",
            c.probetop.as_ref().map_or(0, |v| v.reps)
        );
        let _ = writeln!(
            md,
            "| mechanism | median ns | IQR | 95% CI |\n|---|---|---|---|"
        );
        for row in rows {
            let ns = &row.ns;
            let decimals = if ns.median < 10.0 { 2 } else { 0 };
            let _ = writeln!(
                md,
                "| {} | {:.*} | {:.*}-{:.*} | {:.*}-{:.*} |",
                row.label,
                decimals,
                ns.median,
                decimals,
                ns.q1,
                decimals,
                ns.q3,
                decimals,
                ns.ci_low,
                decimals,
                ns.ci_high,
            );
        }
        md.push('\n');
    }
    let calibrated = |case: Option<calibrate::Case>| {
        rows.iter()
            .find(|r| Some(r.case) == case)
            .map(|r| r.ns.median)
    };
    let _ = writeln!(
        md,
        "Cross-check, a second method: the bench's workload fixture with bpftrace's empty \
         program, per-hit CPU time against an unprobed baseline, median (IQR) over rounds.\n"
    );
    let _ = writeln!(
        md,
        "| mechanism | bench, ns per hit | probetop calibrate | bench / calibrate |\n|---|---|---|---|"
    );
    for (name, case, values) in &c.cross_check.rows {
        let measured = spread(values);
        let decimals = if measured.median < 10.0 { 2 } else { 0 };
        let (cal, ratio) = match calibrated(*case) {
            Some(cal) if cal > 0.0 && measured.n > 0 => (
                format!("{cal:.*}", decimals),
                format!("{:.2}", measured.median / cal),
            ),
            Some(cal) => (format!("{cal:.*}", decimals), "-".into()),
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            md,
            "| {name} | {} | {cal} | {ratio} |",
            measured.show(decimals)
        );
    }
    md.push('\n');
    warnings(md, &c.cross_check.warnings);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `calibrate --json` read through probetop's own types: its rows in the table, and
    /// the cross-check divided by the row of the same case.
    #[test]
    fn the_calibration_table_reads_calibrate_json() {
        let summary = |median: f64| {
            serde_json::json!({"n": 5, "median": median, "q1": median - 1.0,
                "q3": median + 1.0, "ci_low": median - 2.0, "ci_high": median + 2.0})
        };
        let text = serde_json::json!({
            "format": 4, "kernel_release": "6.18", "cpu_model": "x", "cpus": 2,
            "created_unix_s": 0, "reps": 5, "calls": 1000, "optimizes_nop5": false,
            "rows": [
                {"case": "usdt-hit", "label": "USDT hit", "ns": summary(800.0), "samples": []},
                {"case": "uretprobe", "label": "uretprobe", "ns": summary(1500.0), "samples": []},
            ],
            "handler_ring_ns": null, "handler_kernel_ns": null,
            "dispatch": [], "dispatch_error": null,
        });
        let c = Calibration {
            probetop: Some(serde_json::from_value(text).expect("a calibration")),
            probetop_error: None,
            cross_check: CalibrationTable {
                rows: vec![
                    (
                        "USDT (nop), empty program",
                        Some(calibrate::Case::UsdtHit),
                        vec![880.0],
                    ),
                    ("not in calibrate", None, vec![3.0]),
                ],
                warnings: Vec::new(),
            },
        };
        let mut md = String::new();
        render_calibration(&mut md, &c);
        assert!(md.contains("over 5 repetitions"), "{md}");
        assert!(
            md.contains("| USDT hit | 800 | 799-801 | 798-802 |\n"),
            "{md}"
        );
        assert!(
            md.contains("| uretprobe | 1500 | 1499-1501 | 1498-1502 |\n"),
            "{md}"
        );
        assert!(md.contains("| USDT (nop), empty program | 880 "), "{md}");
        assert!(md.contains("| 800 | 1.10 |\n"), "{md}");
        assert!(md.contains("| not in calibrate | 3.00 "), "{md}");
        assert!(md.contains("| - | - |\n"), "{md}");
    }
}
