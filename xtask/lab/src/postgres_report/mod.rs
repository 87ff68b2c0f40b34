//! `cargo xtask postgres-report`: what probing a PostgreSQL cluster through its
//! postmaster (`--follow-forks --preset postgres`) costs it, against bpftrace counting
//! the same probes, under pgbench's select-only load at a fixed rate; writes
//! docs/postgres.md.
//!
//! The load is an open loop (`pgbench -R`): the same transactions arrive whatever runs
//! beside them, so what a tool costs shows as the cluster's CPU per transaction (every
//! process of the cluster, backends reaped included) and as latency, not as fewer
//! transactions. Variants are interleaved and their order rotated from one round to the
//! next, so drift in the machine's load spreads over every variant; the report gives
//! medians with their range, and ratios taken within a round. Every run also checks
//! that probetop (and bpftrace) counted every query pgbench sent, exactly.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use std::{fs, thread};

use anyhow::{Context as _, Result, ensure};
use serde_json::{Value, json};

use crate::mysql_report::{bpftrace_counts, cpu_sum, per_query_us, rotated, safe_tag, uptime};
use crate::postgres::{Cluster, PGBENCH_SETUP_QUERIES, POSTGRES, Pgbench, PgbenchResult};
use crate::tool::{Stream, Tool};
use crate::util::doc::splice_between;
use crate::util::proc::{HostCpu, process_cpu};
use crate::{Ctx, show};

mod insitu;
mod render;

/// Markers around the generated part of docs/postgres.md; the text outside is kept.
const BEGIN_MARK: &str = "<!-- BEGIN cargo xtask postgres-report: generated, edits are lost -->";
const END_MARK: &str = "<!-- END cargo xtask postgres-report -->";

/// The probe every query passes once: the count checked against pgbench's.
const QUERY_START: &str = "usdt:postgresql:query__start";

#[derive(Debug, Clone)]
pub(crate) struct ReportOptions {
    pub seconds: u32,
    pub rounds: u32,
    pub clients: u32,
    /// Transactions per second pgbench sends, over all clients.
    pub rate: u32,
    pub scale: u32,
    /// Length of the `--in-situ` run (0: none).
    pub in_situ_seconds: u32,
    /// Where postgres.md goes.
    pub out: PathBuf,
}

/// What runs beside pgbench.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Bare,
    /// probetop, every hit streamed (ring mode, the default).
    Probetop,
    /// probetop `--mode kernel`: counted in the kernel, one hit in 64 timed.
    ProbetopKernel,
    /// bpftrace on the same probes of the binary (every process mapping it).
    Bpftrace,
}

const VARIANTS: [Variant; 4] = [
    Variant::Bare,
    Variant::Probetop,
    Variant::ProbetopKernel,
    Variant::Bpftrace,
];

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::Bare => "bare",
            Variant::Probetop => "probetop",
            Variant::ProbetopKernel => "probetop --mode kernel",
            Variant::Bpftrace => "bpftrace",
        }
    }
}

/// Everything measured in one pgbench run.
#[derive(Debug, Clone)]
struct Run {
    variant: Variant,
    round: u32,
    pgbench: PgbenchResult,
    wall_s: f64,
    /// CPU of every process of the cluster over the run.
    cluster_s: f64,
    tool_s: f64,
    host: HostCpu,
    /// Per probe: hits (probetop's export, or bpftrace's histograms).
    hits: BTreeMap<String, u64>,
    /// Processes probetop counted query__start in.
    query_pids: usize,
    /// probetop's calibrated whole cost per hit, weighted by hits (ring and kernel runs).
    estimate_ns: Option<f64>,
}

impl Run {
    fn us_per_tx(&self) -> f64 {
        per_query_us(self.cluster_s, self.pgbench.transactions)
    }
    fn total_hits(&self) -> u64 {
        self.hits.values().sum()
    }
    fn hits_per_tx(&self) -> f64 {
        self.total_hits() as f64 / self.pgbench.transactions.max(1) as f64
    }
    /// query__start's count less pgbench's own connection's: every client transaction
    /// is one query.
    fn queries_counted(&self) -> Option<u64> {
        (self.variant != Variant::Bare).then(|| {
            self.hits
                .get(QUERY_START)
                .copied()
                .unwrap_or(0)
                .saturating_sub(PGBENCH_SETUP_QUERIES)
        })
    }
    fn exact(&self) -> Option<bool> {
        self.queries_counted()
            .map(|q| q == self.pgbench.transactions)
    }
    fn to_json(&self) -> Value {
        json!({
            "variant": self.variant.label(), "round": self.round,
            "transactions": self.pgbench.transactions, "failed": self.pgbench.failed,
            "tps": self.pgbench.tps, "latency_ms": self.pgbench.latency_ms,
            "lag_ms": self.pgbench.lag_ms, "wall_s": self.wall_s,
            "cluster_cpu_s": self.cluster_s, "tool_cpu_s": self.tool_s,
            "host_busy_s": self.host.busy, "host_steal_s": self.host.steal,
            "hits": self.hits, "query_pids": self.query_pids,
            "estimate_ns": self.estimate_ns, "queries_counted": self.queries_counted(),
        })
    }
}

struct Report {
    options: ReportOptions,
    probetop: PathBuf,
    cluster: Cluster,
    pgbench: Pgbench,
    /// The preset's specs of one point each, as written (not its `latency:` pairs).
    specs: Vec<String>,
    bpftrace_file: PathBuf,
    bpftrace_script: String,
    work: PathBuf,
    /// Children the postmaster has with no client connected.
    baseline_children: usize,
    runs: Vec<Run>,
    in_situ: Option<insitu::InSituRun>,
    commands: BTreeMap<&'static str, String>,
}

pub(crate) fn postgres_report(ctx: &Ctx, options: ReportOptions) -> Result<()> {
    ensure!(
        crate::is_root()?,
        "the report attaches real probes: run it as root"
    );
    let mut packages = crate::postgres::PACKAGES.to_vec();
    packages.push("bpftrace");
    crate::install_apt(ctx, &packages)?;
    crate::build(ctx)?;
    let probetop = ctx.target_dir().join("release/probetop");
    ensure!(
        probetop.is_file(),
        "{} is missing after the build",
        probetop.display()
    );
    let preset = fs::read_to_string(ctx.root.join("presets/postgres.txt"))
        .context("reading presets/postgres.txt")?;
    let specs = crate::mysql_report::point_specs(&preset);
    let work = ctx.target_dir().join("postgres-report-work");
    if work.exists() {
        fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let bpftrace_script = bpftrace_script(&specs)?;
    let bpftrace_file = work.join("postgres.bt");
    fs::write(&bpftrace_file, &bpftrace_script)
        .with_context(|| format!("writing {}", bpftrace_file.display()))?;

    let started = Instant::now();
    let uptime_before = uptime();
    let runs = VARIANTS.len() as u32 * options.rounds;
    println!(
        "postgres-report: {runs} pgbench runs of {} s and a {} s in-situ run, about {:.1} min",
        options.seconds,
        options.in_situ_seconds,
        // Measured: a run takes its -T plus ~3 s (attach, settle, detach).
        (f64::from(runs) * (f64::from(options.seconds) + 3.0)
            + f64::from(options.in_situ_seconds)
            + 30.0)
            / 60.0
    );
    let cluster = Cluster::start()?;
    crate::postgres::Pgbench::init(&cluster, options.scale)?;
    let pgbench = Pgbench {
        clients: options.clients,
        rate: options.rate,
    };
    let mut report = Report {
        probetop,
        baseline_children: cluster.children().len(),
        cluster,
        pgbench,
        specs,
        bpftrace_file,
        bpftrace_script,
        work,
        runs: Vec::new(),
        in_situ: None,
        commands: BTreeMap::new(),
        options,
    };
    report
        .commands
        .insert("postgres", report.cluster.command_line.clone());
    report.commands.insert(
        "init",
        show(report.cluster.client("pgbench").args([
            "-i",
            "-q",
            "-s",
            &report.options.scale.to_string(),
            crate::postgres::DATABASE,
        ])),
    );
    report.warm_up()?;
    for round in 0..report.options.rounds {
        for variant in rotated(&VARIANTS, round as usize) {
            let run = report.measure(variant, round)?;
            report.runs.push(run);
        }
    }
    if report.options.in_situ_seconds > 0 {
        report.in_situ = Some(report.in_situ_run()?);
    }
    ensure!(
        report.cluster.query("SELECT 1")? == "1",
        "postgres stopped answering during the report"
    );
    let uptime_after = uptime();
    report.write(&uptime_before, &uptime_after, started.elapsed())
}

/// bpftrace doing what probetop's handler does, as near as it can: read the clock at the
/// start and the end of the handler and keep a histogram of the difference per probe.
/// On the binary's path without `-p`: bpftrace then probes every process mapping it, as
/// `--follow-forks` does (with `-p` it would see the postmaster only).
fn bpftrace_script(specs: &[String]) -> Result<String> {
    let mut script = String::from(
        "// Written by cargo xtask postgres-report; BEGIN runs once every probe is attached.\n\
         BEGIN { printf(\"ready\\n\"); }\n",
    );
    for spec in specs {
        let (kind, name) = spec
            .split_once(':')
            .with_context(|| format!("preset line {spec:?} is not KIND:NAME"))?;
        let _ = writeln!(
            script,
            "{kind}:{POSTGRES}:{name} {{ $t = nsecs; @{} = hist(nsecs - $t); }}",
            safe_tag(spec)
        );
    }
    Ok(script)
}

impl Report {
    /// A short run first: the tables in shared buffers, the catalog caches warm. With
    /// probetop attached, which also says whether this machine has a calibration (the
    /// per-hit estimate needs one) and makes it if not.
    fn warm_up(&mut self) -> Result<()> {
        let run = self.measure(Variant::Probetop, u32::MAX)?;
        if run.estimate_ns.is_none() {
            println!("postgres-report: no whole-cost estimate: running `probetop calibrate`");
            crate::run(Command::new(&self.probetop).arg("calibrate"))?;
        }
        Ok(())
    }

    /// The probetop command of a variant.
    fn probetop_command(&self, variant: Variant, json: &std::path::Path) -> Command {
        let mut cmd = Command::new(&self.probetop);
        cmd.arg("--pid").arg(self.cluster.pid().to_string()).args([
            "--follow-forks",
            "--no-tui",
            "--preset",
            "postgres",
        ]);
        if variant == Variant::ProbetopKernel {
            cmd.args(["--mode", "kernel"]);
        }
        cmd.arg("-o").arg(json);
        cmd
    }

    /// One pgbench run with `variant` beside it (`round` u32::MAX: the warm-up).
    fn measure(&mut self, variant: Variant, round: u32) -> Result<Run> {
        let warm_up = round == u32::MAX;
        let label = if warm_up {
            "warm-up".to_string()
        } else {
            format!("r{round}-{}", variant.label().replace([' ', '-'], "_"))
        };
        let json_path = self.work.join(format!("{label}.json"));
        let mut tool = match variant {
            Variant::Bare => None,
            Variant::Probetop | Variant::ProbetopKernel => {
                let cmd = self.probetop_command(variant, &json_path);
                if !warm_up {
                    self.commands
                        .entry(if variant == Variant::Probetop {
                            "probetop"
                        } else {
                            "probetop-kernel"
                        })
                        .or_insert_with(|| show(&cmd));
                }
                Some(Tool::start(cmd, "attached", Stream::Stderr)?)
            }
            Variant::Bpftrace => {
                let mut cmd = Command::new("bpftrace");
                cmd.arg(&self.bpftrace_file);
                self.commands
                    .entry("bpftrace")
                    .or_insert_with(|| show(&cmd));
                Some(Tool::start(cmd, "ready", Stream::Stdout)?)
            }
        };
        if tool.is_some() {
            // Attach-time work done before the window opens.
            thread::sleep(Duration::from_millis(500));
        }
        let seconds = if warm_up { 3 } else { self.options.seconds };
        println!(
            "postgres-report: {} {}",
            variant.label(),
            if warm_up {
                "warm-up".to_string()
            } else {
                format!("round {}", round + 1)
            }
        );
        self.commands
            .entry("pgbench")
            .or_insert_with(|| show(&self.pgbench.command(&self.cluster, self.options.seconds)));

        let settle = Duration::from_secs(10);
        self.cluster.settle(self.baseline_children, settle)?;
        let host0 = HostCpu::now()?;
        let cpu0 = self.cluster.cpu_seconds()?;
        let tool0 = match &tool {
            Some(t) => cpu_sum(process_cpu(t.pid, false)?),
            None => 0.0,
        };
        let t0 = Instant::now();
        let result = self.pgbench.run(&self.cluster, seconds);
        // The backends exit once pgbench disconnects: their CPU is the postmaster's
        // reaped children's once they are gone.
        self.cluster.settle(self.baseline_children, settle)?;
        let wall_s = t0.elapsed().as_secs_f64();
        let cpu1 = self.cluster.cpu_seconds()?;
        let tool1 = match &tool {
            Some(t) => cpu_sum(process_cpu(t.pid, false)?),
            None => 0.0,
        };
        let host = HostCpu::now()?.since(host0);
        let output = tool.as_mut().map(Tool::stop).transpose()?;
        drop(tool);
        let pgbench = result?;
        ensure!(
            pgbench.failed == 0,
            "{} of pgbench's transactions failed",
            pgbench.failed
        );
        let mut run = Run {
            variant,
            round,
            pgbench,
            wall_s,
            cluster_s: cpu1 - cpu0,
            tool_s: tool1 - tool0,
            host,
            hits: BTreeMap::new(),
            query_pids: 0,
            estimate_ns: None,
        };
        match variant {
            Variant::Probetop | Variant::ProbetopKernel => {
                let export = crate::util::export::read(&json_path)?;
                let (mut weighted, mut counted) = (0.0, 0u64);
                for p in export.probe_rows() {
                    let (spec, hits) = (p.spec.to_string(), p.hits);
                    if let Some(ns) = p.whole_cost_ns {
                        weighted += ns * hits as f64;
                        counted += hits;
                    }
                    if spec == QUERY_START {
                        run.query_pids = p.pids.len();
                    }
                    // A USDT probe's sites are a probe each: sum them.
                    *run.hits.entry(spec).or_insert(0) += hits;
                }
                run.estimate_ns = (counted > 0).then(|| weighted / counted as f64);
            }
            Variant::Bpftrace => {
                let text = output.unwrap_or_default();
                fs::write(self.work.join(format!("{label}.txt")), &text)
                    .context("saving bpftrace's output")?;
                let counts = bpftrace_counts(&text);
                for spec in &self.specs {
                    let hits = counts.get(&safe_tag(spec)).copied().unwrap_or(0);
                    run.hits.insert(spec.clone(), hits);
                }
            }
            Variant::Bare => {}
        }
        println!(
            "postgres-report:   {:.0} TPS, {} transactions, latency {:.3} ms, cluster {:.1} us/tx, tool {:.1}% of a core, {:.2} hits/tx{}",
            run.pgbench.tps,
            run.pgbench.transactions,
            run.pgbench.latency_ms,
            run.us_per_tx(),
            run.tool_s / run.wall_s.max(1e-9) * 100.0,
            run.hits_per_tx(),
            match run.queries_counted() {
                Some(q) => format!(", {q} queries counted"),
                None => String::new(),
            }
        );
        thread::sleep(Duration::from_millis(500));
        Ok(run)
    }
}
