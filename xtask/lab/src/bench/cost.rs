//! Part 1 of the bench: CPU added to the probed thread per hit, tool by tool.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};

use super::*;

// ---------------------------------------------------------------------------------------
// 1. Cost per hit

/// Where a cost case's probe sits in the workload fixture.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Site {
    /// Entry of work_unit, whose first instruction (`push %rbp`) the kernel emulates.
    Uprobe,
    /// Return of work_unit.
    Uretprobe,
    /// The USDT probe workload:unit inside work_unit (a nop).
    Usdt,
    /// `workload_xol`, a register move the kernel must single-step out of line.
    #[value(skip)]
    SingleStep,
    /// Entry and return of work_unit as one latency pair (part `latency`).
    #[value(skip)]
    Latency,
}

impl Site {
    pub(super) fn label(self) -> &'static str {
        match self {
            Site::Uprobe => "uprobe",
            Site::Uretprobe => "uretprobe",
            Site::Usdt => "USDT",
            Site::SingleStep => "uprobe, single-stepped",
            Site::Latency => "latency pair",
        }
    }

    pub(super) fn bpftrace_probe(self, exe: &Path) -> String {
        let exe = exe.display();
        match self {
            Site::Uprobe => format!("uprobe:{exe}:work_unit"),
            Site::Uretprobe => format!("uretprobe:{exe}:work_unit"),
            Site::Usdt => format!("usdt:{exe}:workload:unit"),
            Site::SingleStep => format!("uprobe:{exe}:workload_xol"),
            Site::Latency => format!("uprobe:{exe}:work_unit"),
        }
    }

    pub(super) fn probetop_spec(self) -> &'static str {
        match self {
            Site::Uprobe => "uprobe:work_unit",
            Site::Uretprobe => "uretprobe:work_unit",
            Site::Usdt => "usdt:workload:unit",
            Site::SingleStep => "uprobe:workload_xol",
            Site::Latency => "latency:work_unit",
        }
    }
}

/// What runs on each hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Tool {
    /// bpftrace with an empty action: the probe mechanism plus an empty BPF program.
    Empty,
    /// The same with bpftrace's `/pid == N/` predicate, the usual way to scope bpftrace.
    EmptyPidFilter,
    /// `@ = count()`.
    Count,
    /// `$t = nsecs; @ = hist(nsecs - $t)`: a histogram of a ktime delta, the nearest
    /// bpftrace equivalent of probetop's measurement.
    Hist,
    ProbetopRing,
    /// In-kernel histogram, the handler of one hit in 64 timed (the default).
    ProbetopKernel,
    /// In-kernel histogram with every hit timed (`--time-every 1`): what the two clock
    /// reads per hit add.
    ProbetopKernelEveryHit,
    /// The `--compare` binary, ring mode.
    CompareRing,
    /// The `--compare` binary, in-kernel mode.
    CompareKernel,
    /// bpftrace's `count()` with `probetop --pid PID` (no spec) counting its probe: the
    /// counting probe on the same site on top of the tool's (part `counting`).
    CountCounted,
    /// bpftrace's latency idiom, `@start[tid] = nsecs` at the entry and
    /// `hist(nsecs - @start[tid])` at the return (part `latency`).
    BpftracePair,
}

impl Tool {
    pub(super) fn label(self) -> &'static str {
        match self {
            Tool::Empty => "empty BPF program",
            Tool::EmptyPidFilter => "empty, /pid == N/",
            Tool::Count => "bpftrace count()",
            Tool::Hist => "bpftrace hist()",
            Tool::ProbetopRing => "probetop ring",
            Tool::ProbetopKernel => "probetop kernel",
            Tool::ProbetopKernelEveryHit => "probetop kernel, every hit timed",
            Tool::CompareRing => "compared ring",
            Tool::CompareKernel => "compared kernel",
            Tool::CountCounted => "bpftrace count(), probetop counting it",
            Tool::BpftracePair => "bpftrace @start[tid] / hist()",
        }
    }

    pub(super) fn key(self) -> &'static str {
        match self {
            Tool::Empty => "empty",
            Tool::EmptyPidFilter => "empty_pid_filter",
            Tool::Count => "bpftrace_count",
            Tool::Hist => "bpftrace_hist",
            Tool::ProbetopRing => "probetop_ring",
            Tool::ProbetopKernel => "probetop_kernel",
            Tool::ProbetopKernelEveryHit => "probetop_kernel_every_hit_timed",
            Tool::CompareRing => "compared_ring",
            Tool::CompareKernel => "compared_kernel",
            Tool::CountCounted => "bpftrace_count_probetop_counting",
            Tool::BpftracePair => "bpftrace_start_hist",
        }
    }

    pub(super) fn is_probetop(self) -> bool {
        matches!(
            self,
            Tool::ProbetopRing
                | Tool::ProbetopKernel
                | Tool::ProbetopKernelEveryHit
                | Tool::CompareRing
                | Tool::CompareKernel
        )
    }

    pub(super) fn is_ring(self) -> bool {
        matches!(self, Tool::ProbetopRing | Tool::CompareRing)
    }

    /// The bpftrace program for `site` of the process `pid`.
    pub(super) fn bpftrace_program(self, site: Site, exe: &Path, pid: u32) -> String {
        let probe = site.bpftrace_probe(exe);
        match self {
            Tool::Empty => format!("{probe} {{ }}"),
            Tool::EmptyPidFilter => format!("{probe} /pid == {pid}/ {{ }}"),
            Tool::Count | Tool::CountCounted => format!("{probe} {{ @ = count(); }}"),
            Tool::Hist => format!("{probe} {{ $t = nsecs; @ = hist(nsecs - $t); }}"),
            Tool::BpftracePair => {
                let exit = probe.replacen("uprobe:", "uretprobe:", 1);
                format!(
                    "{probe} {{ @start[tid] = nsecs; }} \
                     {exit} {{ @h = hist(nsecs - @start[tid]); delete(@start[tid]); }}"
                )
            }
            _ => String::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Case {
    pub(super) site: Site,
    pub(super) tool: Tool,
}

/// One case in one round: the workload's median ns per call unprobed just before, and
/// probed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    pub(super) base: f64,
    pub(super) probed: f64,
    /// The tool's BPF programs while probed: run time per run, ns, as the kernel's BPF
    /// statistics count it; None if they did not run.
    pub(super) program: Option<f64>,
}

/// Which number of a sample.
#[derive(Debug, Clone, Copy)]
pub(super) enum Metric {
    /// CPU time the probed thread spends per hit.
    Cpu,
    /// Run time of the tool's programs per hit, from the kernel's BPF statistics.
    Program,
}

impl Sample {
    pub(super) fn per_hit(self) -> f64 {
        self.probed - self.base
    }

    pub(super) fn metric(self, metric: Metric) -> Option<f64> {
        match metric {
            Metric::Cpu => Some(self.per_hit()),
            Metric::Program => self.program,
        }
    }
}

/// Samples of every case, by round.
#[derive(Debug, Clone, Default)]
pub(super) struct CostResults {
    pub(super) cases: Vec<Case>,
    /// samples[case][round]; None where a round of that case failed.
    pub(super) samples: Vec<Vec<Option<Sample>>>,
    pub(super) warnings: Vec<String>,
}

impl CostResults {
    pub(super) fn index(&self, site: Site, tool: Tool) -> Option<usize> {
        self.cases
            .iter()
            .position(|c| c.site == site && c.tool == tool)
    }

    /// Per-hit costs of a case over rounds.
    pub(super) fn per_hit(&self, site: Site, tool: Tool) -> Vec<f64> {
        self.per_hit_by(Metric::Cpu, site, tool)
    }

    pub(super) fn per_hit_by(&self, metric: Metric, site: Site, tool: Tool) -> Vec<f64> {
        self.index(site, tool)
            .map(|i| {
                self.samples[i]
                    .iter()
                    .flatten()
                    .filter_map(|s| s.metric(metric))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(super) fn baselines(&self, site: Site) -> Vec<f64> {
        self.cases
            .iter()
            .zip(&self.samples)
            .filter(|(c, _)| c.site == site)
            .flat_map(|(_, s)| s.iter().flatten().map(|s| s.base))
            .collect()
    }

    /// `f(a, b)` of two cases' per-hit costs, round by round (paired: both were measured
    /// within minutes of each other).
    pub(super) fn paired(&self, a: Case, b: Case, f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
        self.paired_by(Metric::Cpu, a, b, f)
    }

    pub(super) fn paired_by(
        &self,
        metric: Metric,
        a: Case,
        b: Case,
        f: impl Fn(f64, f64) -> f64,
    ) -> Vec<f64> {
        let (Some(ia), Some(ib)) = (self.index(a.site, a.tool), self.index(b.site, b.tool)) else {
            return Vec::new();
        };
        self.samples[ia]
            .iter()
            .zip(&self.samples[ib])
            .filter_map(|(x, y)| Some(f(x.as_ref()?.metric(metric)?, y.as_ref()?.metric(metric)?)))
            .collect()
    }

    /// Added cost over the empty program of the same site: `tool - empty`, by round.
    pub(super) fn added(&self, site: Site, tool: Tool) -> Vec<f64> {
        self.added_by(Metric::Cpu, site, tool)
    }

    pub(super) fn added_by(&self, metric: Metric, site: Site, tool: Tool) -> Vec<f64> {
        let empty = Case {
            site,
            tool: Tool::Empty,
        };
        self.paired_by(metric, Case { site, tool }, empty, |x, e| x - e)
    }

    /// `(a - empty) / (b - empty)`, by round.
    pub(super) fn added_ratio(&self, site: Site, a: Tool, b: Tool) -> Vec<f64> {
        self.added_ratio_by(Metric::Cpu, site, a, b)
    }

    pub(super) fn added_ratio_by(&self, metric: Metric, site: Site, a: Tool, b: Tool) -> Vec<f64> {
        let (Some(ia), Some(ib), Some(ie)) = (
            self.index(site, a),
            self.index(site, b),
            self.index(site, Tool::Empty),
        ) else {
            return Vec::new();
        };
        (0..self.samples[ia].len())
            .filter_map(|r| {
                let e = self.samples[ie].get(r)?.as_ref()?.metric(metric)?;
                let x = self.samples[ia].get(r)?.as_ref()?.metric(metric)? - e;
                let y = self.samples[ib].get(r)?.as_ref()?.metric(metric)? - e;
                (y.abs() > f64::EPSILON).then(|| x / y)
            })
            .collect()
    }
}

/// The workload fixture running `--forever`, its batch lines on a channel.
pub(super) struct Workload {
    pub(super) proc: Proc,
}

impl Workload {
    pub(super) fn start(exe: &Path, batch: u64, rate: Option<f64>) -> Result<Self> {
        let mut cmd = Command::new(exe);
        cmd.args(["--forever", "--batch", &batch.to_string()]);
        if let Some(rate) = rate {
            cmd.args(["--rate", &format!("{rate}")]);
        }
        let proc = Proc::spawn("workload", &mut cmd)?;
        proc.wait_for("ready pid=", PATIENCE)?;
        Ok(Self { proc })
    }

    pub(super) fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// ns_per_call of the next batch line.
    pub(super) fn next_batch(&self) -> Result<f64> {
        loop {
            let line = self.proc.wait_for("batch calls=", PATIENCE)?;
            if let Some(ns) = field(&line.text, "ns_per_call") {
                return Ok(ns);
            }
        }
    }

    /// Stops the workload (SIGSTOP) and throws away every batch line it printed: lines
    /// wait in the pipe, and unprobed batches come every millisecond, so without this a
    /// "probed" sample could be made of lines printed before the probe was attached.
    pub(super) fn pause(&self) -> Result<()> {
        self.proc.signal("STOP")?;
        // Stopped, it prints nothing more: what arrives is the pipe's backlog.
        while self.proc.next_line(Duration::from_millis(200)).is_some() {}
        Ok(())
    }

    /// Continues a paused workload and returns the median ns per call of at least `n`
    /// batches over at least `at_least`. The batch in progress at the pause is thrown
    /// away: it straddles whatever happened meanwhile.
    pub(super) fn resume_and_measure(&self, n: usize, at_least: Duration) -> Result<f64> {
        self.proc.signal("CONT")?;
        self.next_batch()?;
        let started = Instant::now();
        let mut values = Vec::with_capacity(n);
        while values.len() < n || started.elapsed() < at_least {
            values.push(self.next_batch()?);
        }
        Ok(spread(&values).median)
    }
}

impl Bench {
    pub(super) fn cost(&self) -> Result<CostResults> {
        let mut cases = Vec::new();
        for &site in &self.settings.sites {
            let mut tools = vec![
                Tool::Empty,
                Tool::Count,
                Tool::Hist,
                Tool::ProbetopRing,
                Tool::ProbetopKernel,
                Tool::ProbetopKernelEveryHit,
            ];
            if self.settings.compare.is_some() {
                tools.extend([Tool::CompareRing, Tool::CompareKernel]);
            }
            // The predicate costs the same whatever fires it: measured once.
            if site == Site::Uprobe {
                tools.insert(1, Tool::EmptyPidFilter);
            }
            cases.extend(tools.into_iter().map(|tool| Case { site, tool }));
        }
        eprintln!(
            "bench: cost: {} cases x {} rounds",
            cases.len(),
            self.settings.rounds
        );
        // Every program's runs are timed by the kernel meanwhile (two clock reads per run,
        // the same for every tool, so added costs compare as before).
        let _stats = BpfStatsOn::enable()?;
        self.measure_cases(
            &self.workload,
            self.settings.batch,
            &cases,
            self.settings.rounds,
        )
    }

    /// Runs every case once per round on one long-running workload, rotating the order
    /// each round so no case always follows the same one.
    pub(super) fn measure_cases(
        &self,
        exe: &Path,
        batch: u64,
        cases: &[Case],
        rounds: usize,
    ) -> Result<CostResults> {
        let workload = Workload::start(exe, batch, None)?;
        let mut results = CostResults {
            cases: cases.to_vec(),
            samples: vec![vec![None; rounds]; cases.len()],
            warnings: Vec::new(),
        };
        for round in 0..rounds {
            for k in 0..cases.len() {
                let i = (k + round) % cases.len();
                let case = cases[i];
                match self.cost_sample(&workload, exe, case) {
                    Ok(sample) => {
                        eprintln!(
                            "bench: cost round {}/{rounds}: {} / {}: {:.0} ns per hit (unprobed {:.2} ns per call)",
                            round + 1,
                            case.site.label(),
                            case.tool.label(),
                            sample.per_hit(),
                            sample.base
                        );
                        // A probe that did not fire would show as ~0: a broken case, not a
                        // cheap one.
                        if sample.per_hit() < 100.0 {
                            results.warnings.push(format!(
                                "round {}: {} / {} cost only {:.0} ns per hit: did the probe fire?",
                                round + 1,
                                case.site.label(),
                                case.tool.label(),
                                sample.per_hit()
                            ));
                        }
                        results.samples[i][round] = Some(sample);
                    }
                    Err(e) => {
                        let msg = format!(
                            "round {}: {} / {} failed: {e:#}",
                            round + 1,
                            case.site.label(),
                            case.tool.label()
                        );
                        eprintln!("bench: {msg}");
                        results.warnings.push(msg);
                    }
                }
            }
        }
        Ok(results)
    }

    pub(super) fn cost_sample(
        &self,
        workload: &Workload,
        exe: &Path,
        case: Case,
    ) -> Result<Sample> {
        let s = &self.settings;
        workload.pause()?;
        let base = workload.resume_and_measure(1, s.baseline_for)?;
        workload.pause()?;
        let mut tool = self.start_tool(workload.pid(), exe, case)?;
        // probetop without a spec, counting the tool's probe with one of its own.
        let mut counter = if case.tool == Tool::CountCounted {
            let mut cmd = self.probetop();
            cmd.args(["--pid", &workload.pid().to_string(), "--no-tui"]);
            let counter = Proc::spawn("probetop", &mut cmd)?;
            counter.wait_for("probetop: counting bpftrace", PATIENCE)?;
            Some(counter)
        } else {
            None
        };
        let runs_before = program_runs(tool.pid());
        let probed = workload.resume_and_measure(s.probed_batches, Duration::ZERO);
        let runs_after = program_runs(tool.pid());
        if let Some(counter) = &mut counter {
            let (status, _) = counter.stop("INT", PATIENCE)?;
            ensure!(
                status.success(),
                "probetop exited with {status}: {}",
                counter.rest_text()
            );
        }
        let stopped = tool.stop("INT", PATIENCE);
        let probed = probed?;
        let (status, _) = stopped?;
        ensure!(
            status.success(),
            "{} exited with {status}: {}",
            tool.name,
            tool.rest_text()
        );
        let runs = runs_after.runs.saturating_sub(runs_before.runs);
        let program =
            (runs > 0).then(|| runs_after.ns.saturating_sub(runs_before.ns) as f64 / runs as f64);
        Ok(Sample {
            base,
            probed,
            program,
        })
    }

    /// Starts the tool of `case` on the workload and returns once its probe is live.
    pub(super) fn start_tool(&self, pid: u32, exe: &Path, case: Case) -> Result<Proc> {
        if case.tool.is_probetop() {
            let mode = if case.tool.is_ring() {
                "ring"
            } else {
                "kernel"
            };
            let (mut cmd, ours) = match (&self.settings.compare, case.tool) {
                (Some(other), Tool::CompareRing | Tool::CompareKernel) => {
                    (Command::new(other), false)
                }
                _ => (self.probetop(), true),
            };
            cmd.args(["--pid", &pid.to_string(), "--no-tui", "--mode", mode])
                .args(["-e", case.site.probetop_spec()]);
            // The mode's own price, without the streamed start that reads the clock.
            if ours && mode == "kernel" {
                cmd.args(["--clock-seconds", "0"]);
            }
            if case.tool == Tool::ProbetopKernelEveryHit {
                cmd.args(["--time-every", "1"]);
            }
            let tool = Proc::spawn("probetop", &mut cmd)?;
            // Printed once every probe is live.
            tool.wait_for("probetop: attached", PATIENCE)?;
            Ok(tool)
        } else {
            let program = case.tool.bpftrace_program(case.site, exe, pid);
            let mut cmd = Command::new("bpftrace");
            cmd.args(["-e", &program]);
            let tool = Proc::spawn("bpftrace", &mut cmd)?;
            let probes = if case.tool == Tool::BpftracePair {
                2
            } else {
                1
            };
            tool.wait_for(&format!("Attaching {probes} probe"), PATIENCE)?;
            // bpftrace prints that line before attaching and nothing after. It holds one
            // perf event per CPU for its output buffers, opened first, then one per probe.
            wait_until(PATIENCE, || {
                perf_event_fds(tool.pid()) >= self.cpus + probes
            })
            .context("waiting for bpftrace to attach its probes")?;
            Ok(tool)
        }
    }
}

pub(super) const COST_TOOLS: [Tool; 9] = [
    Tool::Empty,
    Tool::EmptyPidFilter,
    Tool::Count,
    Tool::Hist,
    Tool::ProbetopRing,
    Tool::ProbetopKernel,
    Tool::ProbetopKernelEveryHit,
    Tool::CompareRing,
    Tool::CompareKernel,
];
pub(super) const COST_SITES: [Site; 3] = [Site::Uprobe, Site::Uretprobe, Site::Usdt];
/// The tools whose added cost the tables compare: the peers, then probetop's modes.
pub(super) const ADDED_TOOLS: [Tool; 5] = [
    Tool::Count,
    Tool::Hist,
    Tool::ProbetopRing,
    Tool::ProbetopKernel,
    Tool::ProbetopKernelEveryHit,
];

/// The same comparison by the kernel's own count of each tool's program run time: the
/// handler alone, and far steadier than the thread's CPU time.
pub(super) fn render_program_cost(md: &mut String, cost: &CostResults, sites: &[Site]) {
    if !cost
        .samples
        .iter()
        .flatten()
        .flatten()
        .any(|s| s.program.is_some())
    {
        return;
    }
    let _ = writeln!(
        md,
        "\nThe tools' programs alone, as the kernel times them (run_time_ns / run_cnt of each \
         tool's BPF programs in /proc/PID/fdinfo, kernel.bpf_stats_enabled on for this part): \
         added over the empty program, ns per hit, and the ratio to `count()`. This leaves out \
         the trap and dispatch around the program, which the rows above include and which \
         are the same for every tool, so it varies far less between rounds.\n"
    );
    let _ = write!(md, "| probe | empty program |");
    for tool in ADDED_TOOLS {
        let _ = write!(md, " {} |", tool.label());
    }
    let _ = writeln!(
        md,
        " ring / count() | kernel / count() | kernel, every hit timed / count() |\n|---|---|{}---|---|---|",
        "---|".repeat(ADDED_TOOLS.len())
    );
    for &site in sites {
        let _ = write!(
            md,
            "| {} | {} |",
            site.label(),
            spread(&cost.per_hit_by(Metric::Program, site, Tool::Empty)).show(0)
        );
        for tool in ADDED_TOOLS {
            let _ = write!(
                md,
                " {} |",
                spread(&cost.added_by(Metric::Program, site, tool)).show(0)
            );
        }
        for tool in [
            Tool::ProbetopRing,
            Tool::ProbetopKernel,
            Tool::ProbetopKernelEveryHit,
        ] {
            let ratio = cost.added_ratio_by(Metric::Program, site, tool, Tool::Count);
            let _ = write!(md, " {}x |", spread(&ratio).show(2));
        }
        md.push('\n');
    }
}

pub(super) fn render_cost(md: &mut String, cost: &CostResults, s: &Settings) {
    let rounds = cost.samples.first().map_or(0, Vec::len);
    let _ = writeln!(md, "### 1. Cost per hit\n");
    let _ = writeln!(
        md,
        "CPU time the probed thread spends per call of `work_unit` (its own \
         CLOCK_THREAD_CPUTIME_ID, which includes the kernel's uprobe handling), probed minus \
         unprobed just before, in ns; median (interquartile range) over {rounds} interleaved \
         rounds of {} batches of {} calls. Unprobed, a call costs {} ns.\n",
        s.probed_batches,
        s.batch,
        spread(&cost.baselines(Site::Uprobe)).show(2)
    );
    let tools: Vec<Tool> = COST_TOOLS
        .into_iter()
        .filter(|t| cost.cases.iter().any(|c| c.tool == *t))
        .collect();
    let sites: Vec<Site> = COST_SITES
        .into_iter()
        .filter(|s| cost.cases.iter().any(|c| c.site == *s))
        .collect();
    let _ = write!(md, "| probe |");
    for tool in &tools {
        let _ = write!(md, " {} |", tool.label());
    }
    let _ = writeln!(md, "\n|---|{}", "---|".repeat(tools.len()));
    for &site in &sites {
        let _ = write!(md, "| {} |", site.label());
        for &tool in &tools {
            let _ = write!(md, " {} |", spread(&cost.per_hit(site, tool)).show(0));
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "\nAdded over the empty program of the same probe (ns per hit; `x` = ratio of added \
         costs, round by round). Goal: probetop's full measurement costs no more than \
         bpftrace's bare `count()`, i.e. a ratio to count() at or below 1. \"kernel\" counts \
         every hit and times one in 64 (the default); \"kernel/all\" times every hit.\n"
    );
    let _ = writeln!(
        md,
        "| probe | bpftrace count() | bpftrace hist() | probetop ring | probetop kernel | probetop kernel/all | ring / count() | kernel / count() | kernel/all / count() | ring / hist() | kernel / hist() | kernel/all / hist() |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &site in &sites {
        let _ = write!(md, "| {} |", site.label());
        for tool in ADDED_TOOLS {
            let _ = write!(md, " {} |", spread(&cost.added(site, tool)).show(0));
        }
        for (a, b) in [
            (Tool::ProbetopRing, Tool::Count),
            (Tool::ProbetopKernel, Tool::Count),
            (Tool::ProbetopKernelEveryHit, Tool::Count),
            (Tool::ProbetopRing, Tool::Hist),
            (Tool::ProbetopKernel, Tool::Hist),
            (Tool::ProbetopKernelEveryHit, Tool::Hist),
        ] {
            let _ = write!(md, " {}x |", spread(&cost.added_ratio(site, a, b)).show(2));
        }
        md.push('\n');
    }
    render_program_cost(md, cost, &sites);
    if let Some(other) = &s.compare {
        let _ = writeln!(
            md,
            "\nAgainst `{}` (`--compare`), added over the empty program, this build / that \
             one, round by round:\n",
            other.display()
        );
        let _ = writeln!(md, "| probe | ring | kernel |\n|---|---|---|");
        for &site in &sites {
            let _ = writeln!(
                md,
                "| {} | {}x | {}x |",
                site.label(),
                spread(&cost.added_ratio(site, Tool::ProbetopRing, Tool::CompareRing)).show(2),
                spread(&cost.added_ratio(site, Tool::ProbetopKernel, Tool::CompareKernel)).show(2),
            );
        }
    }
    let pid_filter = cost.paired(
        Case {
            site: Site::Uprobe,
            tool: Tool::EmptyPidFilter,
        },
        Case {
            site: Site::Uprobe,
            tool: Tool::Empty,
        },
        |p, e| p - e,
    );
    let _ = writeln!(
        md,
        "\nbpftrace's `/pid == N/` predicate adds {} ns per hit to an empty program. The \
         baselines here run without it, on a private copy of the fixture that nothing else \
         maps (uprobes are per inode, and bpftrace 0.17 does not scope uprobes to `-p`); \
         probetop needs no predicate: the kernel scopes its perf events to the pid.\n",
        spread(&pid_filter).show(0)
    );
    warnings(md, &cost.warnings);
}

impl Bench {
    /// Part `counting`: on the uprobe site, bpftrace `count()` alone against the same
    /// with `probetop --pid PID` counting its probe, interleaved rounds.
    pub(super) fn counting(&self) -> Result<CostResults> {
        let cases: Vec<Case> = [Tool::Count, Tool::CountCounted]
            .into_iter()
            .map(|tool| Case {
                site: Site::Uprobe,
                tool,
            })
            .collect();
        eprintln!(
            "bench: counting: {} cases x {} rounds",
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

/// What probetop's counting probe adds per hit on top of the tool's own.
pub(super) fn render_counting(md: &mut String, counting: &CostResults) {
    let count = counting.per_hit(Site::Uprobe, Tool::Count);
    let both = counting.per_hit(Site::Uprobe, Tool::CountCounted);
    let added = counting.paired(
        Case {
            site: Site::Uprobe,
            tool: Tool::CountCounted,
        },
        Case {
            site: Site::Uprobe,
            tool: Tool::Count,
        },
        |with, without| with - without,
    );
    let ratio = counting.paired(
        Case {
            site: Site::Uprobe,
            tool: Tool::CountCounted,
        },
        Case {
            site: Site::Uprobe,
            tool: Tool::Count,
        },
        |with, without| (with - without) / without,
    );
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
    let _ = writeln!(md, "### Counting another tool's probe\n");
    let _ = writeln!(
        md,
        "CPU added to the probed thread per hit of `work_unit` (emulated push), ns, medians over rounds:\n"
    );
    let _ = writeln!(md, "| case | ns per hit |\n|---|---|");
    let _ = writeln!(md, "| bpftrace count() alone | {} |", show(&count, 0));
    let _ = writeln!(
        md,
        "| bpftrace count(), probetop --pid PID counting it | {} |",
        show(&both, 0)
    );
    let _ = writeln!(
        md,
        "| added by probetop's counting probe | {} |",
        show(&added, 0)
    );
    let _ = writeln!(md, "| added / count() alone | {} |\n", show(&ratio, 2));
}
