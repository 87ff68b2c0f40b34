//! Part 7 of the bench: what a latency pair costs per call, probetop's `latency:FUNC`
//! (ring and kernel modes) against bpftrace's idiom on the same function,
//! `uprobe {@start[tid] = nsecs} uretprobe {@h = hist(nsecs - @start[tid]);
//! delete(@start[tid])}`. Each case is measured as the cost part measures (the workload's
//! own ns per call of `work_unit`, unprobed just before and probed), in rounds with the
//! order rotated, and compared round by round.

use std::fmt::Write as _;

use anyhow::Result;

use super::*;

/// The tools of the part: the peer first, then probetop's modes.
pub(super) const LATENCY_TOOLS: [Tool; 3] =
    [Tool::BpftracePair, Tool::ProbetopRing, Tool::ProbetopKernel];

impl Bench {
    pub(super) fn latency(&self) -> Result<CostResults> {
        let cases: Vec<Case> = LATENCY_TOOLS
            .into_iter()
            .map(|tool| Case {
                site: Site::Latency,
                tool,
            })
            .collect();
        eprintln!(
            "bench: latency: {} cases x {} rounds",
            cases.len(),
            self.settings.rounds
        );
        self.measure_cases(
            &self.workload,
            self.settings.batch,
            &cases,
            self.settings.rounds,
        )
    }
}

/// The table: ns added per call, the loop's time probed over unprobed, and probetop's
/// added cost over bpftrace's, each a median over rounds with its IQR.
pub(super) fn render_latency(md: &mut String, latency: &CostResults) {
    let show = |values: &[f64], digits: usize| {
        if values.is_empty() {
            return "-".to_string();
        }
        let s = spread(values);
        format!(
            "{:.digits$} (IQR {:.digits$}..{:.digits$})",
            s.median, s.q1, s.q3
        )
    };
    let case = |tool| Case {
        site: Site::Latency,
        tool,
    };
    let _ = writeln!(md, "### A latency pair per call\n");
    let _ = writeln!(
        md,
        "Entry and return of `work_unit` (the workload fixture), one pair per call: CPU added \
         to the probed thread per call, ns, and the fixture's own ns per call probed over \
         unprobed (its loop time with and without), medians over rounds:\n"
    );
    let _ = writeln!(
        md,
        "| tool | ns added per call | loop time probed / unprobed | added / bpftrace's |\n|---|---|---|---|"
    );
    for tool in LATENCY_TOOLS {
        let added = latency.per_hit(Site::Latency, tool);
        let ratio: Vec<f64> = latency
            .index(Site::Latency, tool)
            .map(|i| {
                latency.samples[i]
                    .iter()
                    .flatten()
                    .filter(|s| s.base > 0.0)
                    .map(|s| s.probed / s.base)
                    .collect()
            })
            .unwrap_or_default();
        let against = if tool == Tool::BpftracePair {
            "1".to_string()
        } else {
            show(
                &latency.paired(case(tool), case(Tool::BpftracePair), |x, b| x / b),
                2,
            )
        };
        let label = match tool {
            Tool::ProbetopRing => "probetop `latency:work_unit`, ring",
            Tool::ProbetopKernel => "probetop `latency:work_unit`, kernel",
            _ => "bpftrace 0.17 `@start[tid]` / `hist(nsecs - @start[tid])`",
        };
        let _ = writeln!(
            md,
            "| {label} | {} | {} | {against} |",
            show(&added, 0),
            show(&ratio, 2)
        );
    }
    let base = latency.baselines(Site::Latency);
    if !base.is_empty() {
        let _ = writeln!(
            md,
            "\nUnprobed, `work_unit` takes {} ns per call.",
            show(&base, 2)
        );
    }
    md.push('\n');
    warnings(md, &latency.warnings);
}
