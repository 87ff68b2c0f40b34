//! The markdown and JSON of a run.

use std::fmt::Write as _;
use std::{fs, thread};

use serde_json::{Value, json};

use super::*;

// ---------------------------------------------------------------------------------------
// Reporting

#[derive(Debug, Default)]
pub(super) struct Results {
    pub(super) cost: Option<CostResults>,
    pub(super) throughput: Option<ThroughputResults>,
    pub(super) attach: Option<AttachResults>,
    pub(super) memory: Option<Vec<MemoryRun>>,
    pub(super) calibration: Option<Calibration>,
    pub(super) scale: Option<ScaleResults>,
    pub(super) counting: Option<CostResults>,
    pub(super) latency: Option<CostResults>,
}

pub(super) struct Machine {
    pub(super) cpus: usize,
    pub(super) cpu_model: String,
    pub(super) kernel: String,
    pub(super) load_before: String,
    pub(super) load_after: String,
}

impl Machine {
    pub(super) fn read() -> Self {
        let cpu_model = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Self {
            cpus: thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|k| k.trim().to_string())
                .unwrap_or_default(),
            load_before: load_average(),
            load_after: String::new(),
        }
    }

    pub(super) fn load_before_1m(&self) -> f64 {
        self.load_before
            .split_whitespace()
            .next()
            .and_then(|l| l.parse().ok())
            .unwrap_or(0.0)
    }
}

pub(super) struct RunInfo {
    pub(super) machine: Machine,
    pub(super) date: String,
    pub(super) commit: String,
    pub(super) bpftrace: String,
    pub(super) command: String,
    pub(super) wall_s: f64,
    pub(super) settings: Settings,
}

pub(super) fn render_markdown(run: &RunInfo, results: &Results) -> String {
    let mut md = String::new();
    let m = &run.machine;
    let _ = writeln!(md, "## Latest run\n");
    let _ = writeln!(
        md,
        "`{}` on {}, commit {}, {:.0} min.\n",
        run.command,
        run.date,
        run.commit,
        run.wall_s / 60.0
    );
    let _ = writeln!(md, "| machine | |\n|---|---|");
    let _ = writeln!(md, "| CPUs (nproc) | {} |", m.cpus);
    let _ = writeln!(md, "| CPU model | {} |", m.cpu_model);
    let _ = writeln!(md, "| kernel | {} |", m.kernel);
    let _ = writeln!(md, "| bpftrace | {} |", run.bpftrace);
    let _ = writeln!(
        md,
        "| load average (1, 5, 15 min) | {} before, {} after |",
        m.load_before, m.load_after
    );
    md.push('\n');
    if let Some(cost) = &results.cost {
        render_cost(&mut md, cost, &run.settings);
    }
    if let Some(t) = &results.throughput {
        render_throughput(&mut md, t, &run.settings);
    }
    if let Some(a) = &results.attach {
        render_attach(&mut md, a);
    }
    if let Some(mem) = &results.memory {
        render_memory(&mut md, mem);
    }
    if let Some(c) = &results.calibration {
        render_calibration(&mut md, c);
    }
    if let Some(s) = &results.scale {
        render_scale(&mut md, s);
    }
    if let Some(c) = &results.counting {
        render_counting(&mut md, c);
    }
    if let Some(l) = &results.latency {
        render_latency(&mut md, l);
    }
    md
}

pub(super) fn warnings(md: &mut String, warnings: &[String]) {
    if warnings.is_empty() {
        return;
    }
    let _ = writeln!(md, "Warnings:\n");
    for w in warnings {
        let _ = writeln!(md, "- {w}");
    }
    md.push('\n');
}

pub(super) fn to_json(run: &RunInfo, results: &Results) -> Value {
    let m = &run.machine;
    let mut out = json!({
        "date": run.date,
        "commit": run.commit,
        "command": run.command,
        "wall_s": round(run.wall_s),
        "machine": {
            "cpus": m.cpus, "cpu_model": m.cpu_model, "kernel": m.kernel,
            "load_before": m.load_before, "load_after": m.load_after,
            "bpftrace": run.bpftrace,
        },
        "settings": {
            "quick": run.settings.quick, "rounds": run.settings.rounds,
            "batch": run.settings.batch, "probed_batches": run.settings.probed_batches,
            "sustain_s": run.settings.sustain_s,
        },
    });
    if let Some(cost) = &results.cost {
        let mut per_site = serde_json::Map::new();
        for site in COST_SITES {
            let mut tools = serde_json::Map::new();
            for tool in COST_TOOLS {
                if cost.index(site, tool).is_some() {
                    tools.insert(
                        tool.key().into(),
                        json!({
                            "per_hit_ns": spread(&cost.per_hit(site, tool)).json(),
                            "added_over_empty_ns": spread(&cost.added(site, tool)).json(),
                            "program_ns_per_hit":
                                spread(&cost.per_hit_by(Metric::Program, site, tool)).json(),
                            "program_added_over_empty_ns":
                                spread(&cost.added_by(Metric::Program, site, tool)).json(),
                        }),
                    );
                }
            }
            tools.insert(
                "unprobed_ns_per_call".into(),
                spread(&cost.baselines(site)).json(),
            );
            tools.insert(
                "ratio_added_ring_to_count".into(),
                spread(&cost.added_ratio(site, Tool::ProbetopRing, Tool::Count)).json(),
            );
            tools.insert(
                "ratio_added_kernel_to_count".into(),
                spread(&cost.added_ratio(site, Tool::ProbetopKernel, Tool::Count)).json(),
            );
            for (key, tool) in [
                ("program_ratio_added_ring_to_count", Tool::ProbetopRing),
                ("program_ratio_added_kernel_to_count", Tool::ProbetopKernel),
                (
                    "program_ratio_added_kernel_every_hit_timed_to_count",
                    Tool::ProbetopKernelEveryHit,
                ),
            ] {
                tools.insert(
                    key.into(),
                    spread(&cost.added_ratio_by(Metric::Program, site, tool, Tool::Count)).json(),
                );
            }
            tools.insert(
                "ratio_added_kernel_every_hit_timed_to_count".into(),
                spread(&cost.added_ratio(site, Tool::ProbetopKernelEveryHit, Tool::Count)).json(),
            );
            tools.insert(
                "ratio_added_ring_to_hist".into(),
                spread(&cost.added_ratio(site, Tool::ProbetopRing, Tool::Hist)).json(),
            );
            tools.insert(
                "ratio_added_kernel_to_hist".into(),
                spread(&cost.added_ratio(site, Tool::ProbetopKernel, Tool::Hist)).json(),
            );
            per_site.insert(site.label().to_lowercase(), Value::Object(tools));
        }
        out["cost"] = json!({"sites": per_site, "warnings": cost.warnings});
    }
    if let Some(t) = &results.throughput {
        let run_json = |r: &ThroughputRun| {
            json!({
                "mode": r.mode, "offered_per_s": r.offered, "seconds": r.seconds,
                "rate_per_s": round(r.rate()), "calls": r.calls, "hits": r.hits,
                "received": r.received, "dropped": r.dropped, "lossless": r.lossless(),
                "probetop_cpu_cores": round(r.cpu_cores),
                "probetop_cpu_pct_per_100k": round(r.cpu_per_100k()),
            })
        };
        out["throughput"] = json!({
            "threads": t.threads,
            "best": t.best.iter().map(|(mode, best)| json!({
                "mode": mode, "run": best.as_ref().map(run_json),
            })).collect::<Vec<_>>(),
            "runs": t.runs.iter().map(run_json).collect::<Vec<_>>(),
        });
    }
    if let Some(a) = &results.attach {
        out["attach"] = json!({
            "binary_mib": round(a.binary_mib),
            "symbols": a.symbols,
            "sets": a.sets.iter().map(|s| json!({
                "name": s.name,
                "probetop_specs": s.probetop_specs,
                "runs": s.runs.iter().map(|r| json!({
                    "tool": r.tool, "probes": r.probes, "live_s": round(r.live_s),
                    "said_s": round(r.said_s), "exit_s": round(r.exit_s), "hits": r.hits,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
    }
    if let Some(mem) = &results.memory {
        out["memory"] = json!(
            mem.iter()
                .map(
                    |r| json!({"probes": r.probes, "vmhwm_kib": r.peak_kib, "compared_vmhwm_kib": r.compared_peak_kib, "refused": r.replaced})
                )
                .collect::<Vec<_>>()
        );
    }
    if let Some(c) = &results.calibration {
        out["calibration"] = json!({
            "probetop_calibrate": c.probetop,
            "probetop_calibrate_error": c.probetop_error,
            "cross_check": {
                "method": "bench workload fixture, bpftrace empty program",
                "rows": c.cross_check.rows.iter().map(|(name, case, v)| json!({
                    "mechanism": name, "case": case.map_or(json!(""), |c| json!(c)),
                    "ns_per_hit": spread(v).json(),
                })).collect::<Vec<_>>(),
                "warnings": c.cross_check.warnings,
            },
        });
    }
    if let Some(s) = &results.scale {
        out["scale"] = scale_json(s);
    }
    out
}
