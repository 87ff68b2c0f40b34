//! Part 5 of the bench: `probetop calibrate` and a cross-check of it.

use std::fmt::Write as _;
use std::process::Stdio;

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::*;

// ---------------------------------------------------------------------------------------
// 5. Calibration

/// `probetop calibrate`'s table, and the same mechanisms measured by the bench its own way
/// (bpftrace's empty program on the workload fixture): two methods that must agree.
#[derive(Debug, Clone, Default)]
pub(super) struct Calibration {
    /// `probetop calibrate --json`, when it ran.
    pub(super) probetop: Option<Value>,
    /// Why it did not.
    pub(super) probetop_error: Option<String>,
    pub(super) cross_check: CalibrationTable,
}

#[derive(Debug, Clone, Default)]
pub(super) struct CalibrationTable {
    /// (mechanism, `probetop calibrate`'s case of it, ns per hit by round).
    pub(super) rows: Vec<(&'static str, &'static str, Vec<f64>)>,
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
            match serde_json::from_slice::<Value>(&out.stdout) {
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
            "",
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
            "usdt-hit",
            empties.per_hit(Site::Usdt, Tool::Empty),
        ));
        table.rows.push((
            "uprobe on push %rbp (emulated), empty program",
            "uprobe-emulated",
            empties.per_hit(Site::Uprobe, Tool::Empty),
        ));
        table.rows.push((
            "uprobe on mov (single-stepped), empty program",
            "uprobe-single-stepped",
            xol.per_hit(Site::SingleStep, Tool::Empty),
        ));
        table.rows.push((
            "uretprobe, empty program",
            "uretprobe",
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
        .and_then(|v| v["rows"].as_array())
        .cloned()
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
            c.probetop
                .as_ref()
                .and_then(|v| v["reps"].as_u64())
                .unwrap_or(0)
        );
        let _ = writeln!(
            md,
            "| mechanism | median ns | IQR | 95% CI |\n|---|---|---|---|"
        );
        for row in &rows {
            let ns = &row["ns"];
            let f = |k: &str| ns[k].as_f64().unwrap_or(f64::NAN);
            let decimals = if f("median") < 10.0 { 2 } else { 0 };
            let _ = writeln!(
                md,
                "| {} | {:.*} | {:.*}-{:.*} | {:.*}-{:.*} |",
                row["label"].as_str().unwrap_or("?"),
                decimals,
                f("median"),
                decimals,
                f("q1"),
                decimals,
                f("q3"),
                decimals,
                f("ci_low"),
                decimals,
                f("ci_high"),
            );
        }
        md.push('\n');
    }
    let calibrated = |case: &str| {
        if case.is_empty() {
            return None;
        }
        rows.iter()
            .find(|r| r["case"] == case)
            .and_then(|r| r["ns"]["median"].as_f64())
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
        let (cal, ratio) = match calibrated(case) {
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
