//! `cargo xtask bench`: what probetop costs, measured against bpftrace on this machine.
//!
//! Five measurements, each taken as a ratio within one run, because the machine is a
//! shared 2-vCPU VM whose speed drifts with what else runs on it:
//!
//! 1. **cost**: CPU added to the probed thread per hit, for uprobe, uretprobe and USDT, by
//!    an empty BPF program, bpftrace's `count()`, bpftrace's `hist()` of a ktime delta and
//!    probetop in ring and in-kernel modes. Cases are interleaved in rounds, each paired
//!    with an unprobed baseline taken just before it; medians and IQR over rounds.
//! 2. **throughput**: the highest hit rate from every CPU that probetop takes for a whole
//!    run without losing one event, in ring and in-kernel modes, and probetop's own CPU.
//! 3. **attach**: time from starting the tool to every probe live on mariadbd, probetop
//!    against bpftrace on the same probes.
//! 4. **memory**: probetop's peak RSS with 1, 100 and 1000 probes attached.
//! 5. **calibration**: what the probe mechanisms themselves cost per hit here (unattached
//!    USDT, USDT, uprobe, single-stepped uprobe, uretprobe), with empty programs.
//!
//! A full run writes the generated block of docs/performance.md and docs/performance.json;
//! `--quick` (a smoke run), `--only` and `--out` write under the target directory instead,
//! so they never overwrite the committed results.
//!
//! Every target is a private copy of its binary: uprobes are set per inode, and bpftrace
//! 0.17 does not scope uprobes to a pid, so probing the shared fixture or /usr/sbin/mariadbd
//! would also trap in other people's processes (and their programs would trap in ours).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use std::{fs, thread};

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::{Value, json};

use super::mysql::{MARIADBD, Mariadb, ServerOptions};
use super::{Ctx, build, fixtures, is_root, show};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// A smoke run of every part in under 3 minutes (fewer rounds, shorter runs).
    #[arg(long)]
    quick: bool,
    /// Run only these parts.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Part>,
    /// Rounds of the interleaved per-hit cost measurement (default 7, quick 2).
    #[arg(long)]
    rounds: Option<usize>,
    /// Length of a sustained throughput run in seconds (default 60, quick 3).
    #[arg(long)]
    seconds: Option<f64>,
    /// Where to write performance.md and performance.json. Default: docs/ for a full run
    /// of every part, <target>/bench/ otherwise.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Probes of the cost part (default: all three).
    #[arg(long, value_enum, value_delimiter = ',')]
    sites: Vec<Site>,
    /// Another probetop binary (say, a build from before an optimisation) to measure in the
    /// cost part too, interleaved with this one: its before/after ratio.
    #[arg(long, value_name = "PROBETOP")]
    compare: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Cost,
    Throughput,
    Attach,
    Memory,
    Calibration,
}

/// How long and how often things are measured.
#[derive(Debug, Clone)]
struct Settings {
    quick: bool,
    /// Rounds of the cost cases.
    rounds: usize,
    /// workload --batch: calls per CPU-time sample.
    batch: u64,
    /// Probed batches per cost sample.
    probed_batches: usize,
    /// Unprobed batches are short (~1 ms); a baseline collects them for this long.
    baseline_for: Duration,
    /// Sustained throughput runs.
    sustain_s: f64,
    /// Runs of the search for the lossless rate, when the flood itself loses events.
    search_s: f64,
    /// Paced rates (hits/s, all threads) at which probetop's CPU is also measured.
    paced_rates: Vec<f64>,
    attach_reps: usize,
    memory_reps: usize,
    /// Rounds of the calibration-only cases (unattached USDT, single step).
    calibration_rounds: usize,
    /// Probes of the cost part.
    sites: Vec<Site>,
    /// A second probetop measured in the cost part.
    compare: Option<PathBuf>,
}

impl Settings {
    fn new(args: &BenchArgs) -> Self {
        let quick = args.quick;
        Self {
            quick,
            rounds: args.rounds.unwrap_or(if quick { 2 } else { 7 }).max(1),
            batch: if quick { 100_000 } else { 200_000 },
            probed_batches: if quick { 3 } else { 5 },
            baseline_for: Duration::from_millis(if quick { 200 } else { 400 }),
            sustain_s: args.seconds.unwrap_or(if quick { 3.0 } else { 60.0 }),
            search_s: if quick { 2.0 } else { 10.0 },
            paced_rates: if quick {
                vec![100_000.0]
            } else {
                vec![100_000.0, 300_000.0]
            },
            attach_reps: if quick { 1 } else { 3 },
            memory_reps: if quick { 1 } else { 3 },
            calibration_rounds: if quick { 2 } else { 5 },
            sites: if args.sites.is_empty() {
                COST_SITES.to_vec()
            } else {
                args.sites.clone()
            },
            compare: args.compare.clone(),
        }
    }
}

/// Generous bound for a tool to start or stop: bpftrace compiles with LLVM first, and
/// detaching hundreds of uprobes takes seconds (one RCU grace period each).
const PATIENCE: Duration = Duration::from_secs(180);

const DOC_BEGIN: &str =
    "<!-- bench:begin: generated by `cargo xtask bench`; edit outside the markers -->";
const DOC_END: &str = "<!-- bench:end -->";

pub fn run(ctx: &Ctx, args: &BenchArgs) -> Result<()> {
    ensure!(is_root()?, "the bench attaches real probes: run it as root");
    let settings = Settings::new(args);
    let parts: Vec<Part> = if args.only.is_empty() {
        vec![
            Part::Cost,
            Part::Throughput,
            Part::Attach,
            Part::Memory,
            Part::Calibration,
        ]
    } else {
        let mut parts = args.only.clone();
        parts.sort();
        parts.dedup();
        parts
    };
    // Only a complete run with the default settings replaces the committed results.
    let complete = parts.len() == 5
        && !settings.quick
        && args.rounds.is_none()
        && args.seconds.is_none()
        && args.sites.is_empty()
        && args.compare.is_none();
    let out_dir = match &args.out {
        Some(dir) => dir.clone(),
        None if complete => ctx.root.join("docs"),
        None => ctx.target_dir().join("bench"),
    };

    check_tools(&parts)?;
    fixtures(ctx)?;
    build(ctx)?;
    let bench = Bench::new(ctx, settings)?;
    let machine = Machine::read();
    eprintln!(
        "bench: {} on {} ({} CPUs), load {} before starting{}",
        if bench.settings.quick {
            "quick run"
        } else {
            "full run"
        },
        machine.cpu_model,
        machine.cpus,
        machine.load_before,
        if machine.load_before_1m() >= 1.0 {
            " (not quiet: the numbers will be noisier; the load is recorded)"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let mut results = Results::default();
    let mut cost_cases = None;
    for part in &parts {
        let t = Instant::now();
        match part {
            Part::Cost => {
                let cost = bench.cost()?;
                cost_cases = Some(cost.clone());
                results.cost = Some(cost);
            }
            Part::Throughput => results.throughput = Some(bench.throughput()?),
            Part::Attach => results.attach = Some(bench.attach()?),
            Part::Memory => results.memory = Some(bench.memory()?),
            Part::Calibration => {
                results.calibration = Some(bench.calibration(cost_cases.as_ref())?)
            }
        }
        eprintln!("bench: {part:?} took {:.0} s", t.elapsed().as_secs_f64());
    }
    let mut machine = machine;
    machine.load_after = load_average();
    let run = RunInfo {
        machine,
        date: command_line(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))
            .unwrap_or_default(),
        commit: commit(ctx),
        bpftrace: command_line(Command::new("bpftrace").arg("--version")).unwrap_or_default(),
        command: format!(
            "cargo xtask bench{}",
            std::env::args()
                .skip_while(|a| a != "bench")
                .skip(1)
                .map(|a| format!(" {a}"))
                .collect::<String>()
        ),
        wall_s: started.elapsed().as_secs_f64(),
        settings: bench.settings.clone(),
    };
    let markdown = render_markdown(&run, &results);
    println!("{markdown}");
    write_outputs(&out_dir, &markdown, &to_json(&run, &results))?;
    Ok(())
}

fn check_tools(parts: &[Part]) -> Result<()> {
    let needs_bpftrace = parts
        .iter()
        .any(|p| matches!(p, Part::Cost | Part::Attach | Part::Calibration));
    if needs_bpftrace {
        ensure!(
            command_line(Command::new("bpftrace").arg("--version")).is_some(),
            "bpftrace is missing: `cargo xtask setup` installs it"
        );
    }
    if parts.contains(&Part::Attach) && !Path::new(MARIADBD).is_file() {
        // Only the bench needs a database server, so it is installed here rather than by
        // `cargo xtask setup` on every machine.
        eprintln!("bench: {MARIADBD} is missing: installing mariadb-server");
        let mut apt = Command::new("apt-get");
        apt.args(["install", "-y", "-q", "mariadb-server"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null());
        super::run(&mut apt)?;
    }
    Ok(())
}

/// Replaces the generated block of performance.md (keeping what is written around it)
/// and writes performance.json.
fn write_outputs(dir: &Path, markdown: &str, json: &Value) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let md_path = dir.join("performance.md");
    let block = format!("{DOC_BEGIN}\n{markdown}\n{DOC_END}");
    let doc = match fs::read_to_string(&md_path) {
        Ok(old) => match (old.find(DOC_BEGIN), old.find(DOC_END)) {
            (Some(begin), Some(end)) if begin < end => {
                format!("{}{block}{}", &old[..begin], &old[end + DOC_END.len()..])
            }
            _ => format!("{old}\n{block}\n"),
        },
        Err(_) => format!("# Performance\n\n{block}\n"),
    };
    fs::write(&md_path, doc).with_context(|| format!("writing {}", md_path.display()))?;
    let json_path = dir.join("performance.json");
    let text = serde_json::to_string_pretty(json).context("serializing the results")?;
    fs::write(&json_path, format!("{text}\n"))
        .with_context(|| format!("writing {}", json_path.display()))?;
    eprintln!(
        "bench: wrote {} and {}",
        md_path.display(),
        json_path.display()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The bench: paths and the parts

struct Bench {
    settings: Settings,
    probetop: PathBuf,
    /// Private copies of the binaries (see the module comment), removed on drop.
    work: WorkDir,
    workload: PathBuf,
    workload_nousdt: PathBuf,
    threads: PathBuf,
    cpus: usize,
}

impl Bench {
    fn new(ctx: &Ctx, settings: Settings) -> Result<Self> {
        let probetop = ctx.target_dir().join("release/probetop");
        ensure!(
            probetop.is_file(),
            "{} is missing after the build",
            probetop.display()
        );
        let work = WorkDir::create()?;
        let build = ctx.root.join("fixtures/build/c");
        let copy = |name: &str| -> Result<PathBuf> {
            let to = work.path.join(name);
            fs::copy(build.join(name), &to)
                .with_context(|| format!("copying {} to {}", name, to.display()))?;
            Ok(to)
        };
        Ok(Self {
            workload: copy("workload")?,
            workload_nousdt: copy("workload-nousdt")?,
            threads: copy("threads")?,
            probetop,
            work,
            settings,
            cpus: thread::available_parallelism().map_or(1, |n| n.get()),
        })
    }

    fn probetop(&self) -> Command {
        Command::new(&self.probetop)
    }
}

/// A temporary directory, removed on drop.
struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    fn create() -> Result<Self> {
        let path = std::env::temp_dir().join(format!("probetop-bench-{}", std::process::id()));
        fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

// ---------------------------------------------------------------------------------------
// 1. Cost per hit

/// Where a cost case's probe sits in the workload fixture.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Site {
    /// Entry of work_unit, whose first instruction (`push %rbp`) the kernel emulates.
    Uprobe,
    /// Return of work_unit.
    Uretprobe,
    /// The USDT probe workload:unit inside work_unit (a nop).
    Usdt,
    /// `workload_xol`, a register move the kernel must single-step out of line.
    #[value(skip)]
    SingleStep,
}

impl Site {
    fn label(self) -> &'static str {
        match self {
            Site::Uprobe => "uprobe",
            Site::Uretprobe => "uretprobe",
            Site::Usdt => "USDT",
            Site::SingleStep => "uprobe, single-stepped",
        }
    }

    fn bpftrace_probe(self, exe: &Path) -> String {
        let exe = exe.display();
        match self {
            Site::Uprobe => format!("uprobe:{exe}:work_unit"),
            Site::Uretprobe => format!("uretprobe:{exe}:work_unit"),
            Site::Usdt => format!("usdt:{exe}:workload:unit"),
            Site::SingleStep => format!("uprobe:{exe}:workload_xol"),
        }
    }

    fn probetop_spec(self) -> &'static str {
        match self {
            Site::Uprobe => "uprobe:work_unit",
            Site::Uretprobe => "uretprobe:work_unit",
            Site::Usdt => "usdt:workload:unit",
            Site::SingleStep => "uprobe:workload_xol",
        }
    }
}

/// What runs on each hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tool {
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
}

impl Tool {
    fn label(self) -> &'static str {
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
        }
    }

    fn key(self) -> &'static str {
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
        }
    }

    fn is_probetop(self) -> bool {
        matches!(
            self,
            Tool::ProbetopRing
                | Tool::ProbetopKernel
                | Tool::ProbetopKernelEveryHit
                | Tool::CompareRing
                | Tool::CompareKernel
        )
    }

    fn is_ring(self) -> bool {
        matches!(self, Tool::ProbetopRing | Tool::CompareRing)
    }

    /// The bpftrace program for `site` of the process `pid`.
    fn bpftrace_program(self, site: Site, exe: &Path, pid: u32) -> String {
        let probe = site.bpftrace_probe(exe);
        match self {
            Tool::Empty => format!("{probe} {{ }}"),
            Tool::EmptyPidFilter => format!("{probe} /pid == {pid}/ {{ }}"),
            Tool::Count => format!("{probe} {{ @ = count(); }}"),
            Tool::Hist => format!("{probe} {{ $t = nsecs; @ = hist(nsecs - $t); }}"),
            _ => String::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Case {
    site: Site,
    tool: Tool,
}

/// One case in one round: the workload's median ns per call unprobed just before, and
/// probed.
#[derive(Debug, Clone, Copy)]
struct Sample {
    base: f64,
    probed: f64,
    /// The tool's BPF programs while probed: run time per run, ns, as the kernel's BPF
    /// statistics count it; None if they did not run.
    program: Option<f64>,
}

/// Which number of a sample.
#[derive(Debug, Clone, Copy)]
enum Metric {
    /// CPU time the probed thread spends per hit.
    Cpu,
    /// Run time of the tool's programs per hit, from the kernel's BPF statistics.
    Program,
}

impl Sample {
    fn per_hit(self) -> f64 {
        self.probed - self.base
    }

    fn metric(self, metric: Metric) -> Option<f64> {
        match metric {
            Metric::Cpu => Some(self.per_hit()),
            Metric::Program => self.program,
        }
    }
}

/// Samples of every case, by round.
#[derive(Debug, Clone, Default)]
struct CostResults {
    cases: Vec<Case>,
    /// samples[case][round]; None where a round of that case failed.
    samples: Vec<Vec<Option<Sample>>>,
    warnings: Vec<String>,
}

impl CostResults {
    fn index(&self, site: Site, tool: Tool) -> Option<usize> {
        self.cases
            .iter()
            .position(|c| c.site == site && c.tool == tool)
    }

    /// Per-hit costs of a case over rounds.
    fn per_hit(&self, site: Site, tool: Tool) -> Vec<f64> {
        self.per_hit_by(Metric::Cpu, site, tool)
    }

    fn per_hit_by(&self, metric: Metric, site: Site, tool: Tool) -> Vec<f64> {
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

    fn baselines(&self, site: Site) -> Vec<f64> {
        self.cases
            .iter()
            .zip(&self.samples)
            .filter(|(c, _)| c.site == site)
            .flat_map(|(_, s)| s.iter().flatten().map(|s| s.base))
            .collect()
    }

    /// `f(a, b)` of two cases' per-hit costs, round by round (paired: both were measured
    /// within minutes of each other).
    fn paired(&self, a: Case, b: Case, f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
        self.paired_by(Metric::Cpu, a, b, f)
    }

    fn paired_by(&self, metric: Metric, a: Case, b: Case, f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
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
    fn added(&self, site: Site, tool: Tool) -> Vec<f64> {
        self.added_by(Metric::Cpu, site, tool)
    }

    fn added_by(&self, metric: Metric, site: Site, tool: Tool) -> Vec<f64> {
        let empty = Case {
            site,
            tool: Tool::Empty,
        };
        self.paired_by(metric, Case { site, tool }, empty, |x, e| x - e)
    }

    /// `(a - empty) / (b - empty)`, by round.
    fn added_ratio(&self, site: Site, a: Tool, b: Tool) -> Vec<f64> {
        self.added_ratio_by(Metric::Cpu, site, a, b)
    }

    fn added_ratio_by(&self, metric: Metric, site: Site, a: Tool, b: Tool) -> Vec<f64> {
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
struct Workload {
    proc: Proc,
}

impl Workload {
    fn start(exe: &Path, batch: u64, rate: Option<f64>) -> Result<Self> {
        let mut cmd = Command::new(exe);
        cmd.args(["--forever", "--batch", &batch.to_string()]);
        if let Some(rate) = rate {
            cmd.args(["--rate", &format!("{rate}")]);
        }
        let proc = Proc::spawn("workload", &mut cmd)?;
        proc.wait_for("ready pid=", PATIENCE)?;
        Ok(Self { proc })
    }

    fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// ns_per_call of the next batch line.
    fn next_batch(&self) -> Result<f64> {
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
    fn pause(&self) -> Result<()> {
        self.proc.signal("STOP")?;
        // Stopped, it prints nothing more: what arrives is the pipe's backlog.
        while self.proc.next_line(Duration::from_millis(200)).is_some() {}
        Ok(())
    }

    /// Continues a paused workload and returns the median ns per call of at least `n`
    /// batches over at least `at_least`. The batch in progress at the pause is thrown
    /// away: it straddles whatever happened meanwhile.
    fn resume_and_measure(&self, n: usize, at_least: Duration) -> Result<f64> {
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
    fn cost(&self) -> Result<CostResults> {
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
    fn measure_cases(
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

    fn cost_sample(&self, workload: &Workload, exe: &Path, case: Case) -> Result<Sample> {
        let s = &self.settings;
        workload.pause()?;
        let base = workload.resume_and_measure(1, s.baseline_for)?;
        workload.pause()?;
        let mut tool = self.start_tool(workload.pid(), exe, case)?;
        let runs_before = program_runs(tool.pid());
        let probed = workload.resume_and_measure(s.probed_batches, Duration::ZERO);
        let runs_after = program_runs(tool.pid());
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
    fn start_tool(&self, pid: u32, exe: &Path, case: Case) -> Result<Proc> {
        if case.tool.is_probetop() {
            let mode = if case.tool.is_ring() {
                "ring"
            } else {
                "kernel"
            };
            let mut cmd = match (&self.settings.compare, case.tool) {
                (Some(other), Tool::CompareRing | Tool::CompareKernel) => Command::new(other),
                _ => self.probetop(),
            };
            cmd.args(["--pid", &pid.to_string(), "--no-tui", "--mode", mode])
                .args(["-e", case.site.probetop_spec()]);
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
            tool.wait_for("Attaching 1 probe", PATIENCE)?;
            // bpftrace prints that line before attaching and nothing after. It holds one
            // perf event per CPU for its output buffers, opened first, then one per probe.
            wait_until(PATIENCE, || perf_event_fds(tool.pid()) > self.cpus)
                .context("waiting for bpftrace to attach its probe")?;
            Ok(tool)
        }
    }
}

// ---------------------------------------------------------------------------------------
// 2. Throughput

#[derive(Debug, Clone)]
struct ThroughputRun {
    mode: &'static str,
    /// Requested hits/s over every thread; None: unpaced.
    offered: Option<f64>,
    seconds: f64,
    calls: u64,
    hits: u64,
    dropped: u64,
    received: u64,
    /// probetop's CPU time while the load ran, as a fraction of one core.
    cpu_cores: f64,
}

impl ThroughputRun {
    fn rate(&self) -> f64 {
        self.calls as f64 / self.seconds
    }

    /// Every hit counted, none dropped.
    fn lossless(&self) -> bool {
        self.dropped == 0 && self.hits == self.calls
    }

    /// probetop's CPU per 100k hits/s, in % of one core.
    fn cpu_per_100k(&self) -> f64 {
        100.0 * self.cpu_cores / (self.rate() / 100_000.0)
    }

    fn describe(&self) -> String {
        format!(
            "{} {}: {:.0} hits/s for {:.0} s, {} of {} hits counted, {} dropped, probetop {:.1}% of a core",
            self.mode,
            self.offered
                .map_or("flood".to_string(), |r| format!("paced {r:.0}/s")),
            self.rate(),
            self.seconds,
            self.hits,
            self.calls,
            self.dropped,
            100.0 * self.cpu_cores
        )
    }
}

#[derive(Debug, Clone, Default)]
struct ThroughputResults {
    /// Per mode: the highest lossless run, if any.
    best: Vec<(&'static str, Option<ThroughputRun>)>,
    runs: Vec<ThroughputRun>,
    threads: usize,
}

impl Bench {
    fn throughput(&self) -> Result<ThroughputResults> {
        let s = &self.settings;
        let mut results = ThroughputResults {
            threads: self.cpus,
            ..Default::default()
        };
        for mode in ["ring", "kernel"] {
            // Unpaced threads on every CPU: the fastest the kernel fires probes here, with
            // probetop competing for the same CPUs. If that loses nothing, it is the answer.
            let flood = self.throughput_run(mode, None, s.sustain_s)?;
            eprintln!("bench: throughput: {}", flood.describe());
            results.runs.push(flood.clone());
            let best = if flood.lossless() {
                Some(flood.clone())
            } else {
                self.lossless_search(mode, &flood, &mut results.runs)?
            };
            for &rate in &s.paced_rates {
                if rate < flood.rate() {
                    let run = self.throughput_run(mode, Some(rate), s.search_s)?;
                    eprintln!("bench: throughput: {}", run.describe());
                    results.runs.push(run);
                }
            }
            results.best.push((mode, best));
        }
        Ok(results)
    }

    /// Bisects the paced rate below a lossy flood with short runs, then confirms the best
    /// with a sustained run (stepping down while that loses events).
    fn lossless_search(
        &self,
        mode: &'static str,
        flood: &ThroughputRun,
        runs: &mut Vec<ThroughputRun>,
    ) -> Result<Option<ThroughputRun>> {
        let s = &self.settings;
        let (mut low, mut high) = (0.0, flood.rate());
        for _ in 0..if s.quick { 2 } else { 4 } {
            let rate = if low == 0.0 {
                high / 2.0
            } else {
                (low + high) / 2.0
            };
            let run = self.throughput_run(mode, Some(rate), s.search_s)?;
            eprintln!("bench: throughput search: {}", run.describe());
            if run.lossless() {
                low = rate;
            } else {
                high = rate;
            }
            runs.push(run);
        }
        let mut rate = low;
        for _ in 0..3 {
            if rate <= 0.0 {
                return Ok(None);
            }
            let run = self.throughput_run(mode, Some(rate), s.sustain_s)?;
            eprintln!("bench: throughput confirm: {}", run.describe());
            runs.push(run.clone());
            if run.lossless() {
                return Ok(Some(run));
            }
            rate *= 0.8;
        }
        Ok(None)
    }

    fn throughput_run(
        &self,
        mode: &'static str,
        offered: Option<f64>,
        seconds: f64,
    ) -> Result<ThroughputRun> {
        let threads = self.cpus;
        let mut cmd = Command::new(&self.threads);
        cmd.args([
            "--threads",
            &threads.to_string(),
            "--seconds",
            &format!("{seconds}"),
        ]);
        if let Some(rate) = offered {
            cmd.args(["--rate", &format!("{}", rate / threads as f64)]);
        }
        let target = Proc::spawn("threads", &mut cmd)?;
        target.wait_for("ready pid=", PATIENCE)?;
        let export = self.work.path.join(format!("throughput-{mode}.json"));
        let mut cmd = self.probetop();
        cmd.args([
            "--pid",
            &target.pid().to_string(),
            "--no-tui",
            "--mode",
            mode,
        ])
        .args(["-e", "uprobe:work_unit", "--export"])
        .arg(&export);
        let mut probetop = Proc::spawn("probetop", &mut cmd)?;
        probetop.wait_for("probetop: attached", PATIENCE)?;
        let pt = probetop.pid();
        let first = (Instant::now(), cpu_seconds(pt)?);
        target.signal("USR1")?;
        // probetop's CPU while the load runs: sampled until the target says it is done
        // (probetop exits soon after, taking its /proc entry with it).
        let mut last = first;
        let deadline = Instant::now() + Duration::from_secs_f64(seconds) + PATIENCE;
        let done = loop {
            match target.next_line(Duration::from_millis(100)) {
                Some(line) if line.text.starts_with("done calls=") => break line,
                Some(_) => {}
                None => ensure!(
                    Instant::now() < deadline,
                    "the threads fixture did not finish"
                ),
            }
            if let Ok(cpu) = cpu_seconds(pt) {
                last = (Instant::now(), cpu);
            }
        };
        let calls = field(&done.text, "calls").context("no calls= in the done line")? as u64;
        let status = probetop.wait(PATIENCE)?;
        ensure!(
            status.success(),
            "probetop exited with {status}: {}",
            probetop.rest_text()
        );
        let report = read_json(&export)?;
        let probe = &report["probes"][0];
        let number = |v: &Value| v.as_u64().context("a number is missing from the export");
        Ok(ThroughputRun {
            mode,
            offered,
            seconds,
            calls,
            hits: number(&probe["hits"])?,
            dropped: number(&probe["dropped"])?,
            received: number(&probe["handler_ns"]["count"])?,
            cpu_cores: (last.1 - first.1) / (last.0 - first.0).as_secs_f64().max(1e-3),
        })
    }
}

// ---------------------------------------------------------------------------------------
// 3. Attach latency

#[derive(Debug, Clone)]
struct AttachRun {
    tool: &'static str,
    probes: usize,
    /// Seconds from spawning the tool until its last probe was attached.
    live_s: f64,
    /// probetop: its `attached` line; bpftrace: its `Attaching N probes...` line, printed
    /// before it attaches anything.
    said_s: f64,
    /// Seconds from SIGINT to exit (detaching every probe).
    exit_s: f64,
    /// Hits counted of the driven query.
    hits: u64,
}

#[derive(Debug, Clone)]
struct AttachSet {
    name: &'static str,
    probetop_specs: Vec<String>,
    runs: Vec<AttachRun>,
}

#[derive(Debug, Clone, Default)]
struct AttachResults {
    sets: Vec<AttachSet>,
    binary_mib: f64,
    symbols: String,
}

/// Functions of mariadbd that every query goes through.
const NAMED: &[&str] = &[
    "dispatch_command",
    "do_command",
    "mysql_parse",
    "mysql_execute_command",
    "close_thread_tables",
];

impl Bench {
    fn attach(&self) -> Result<AttachResults> {
        // A copy of the binary (see the module comment), with a small buffer pool: the
        // attach part sends three queries.
        let db = Mariadb::start(&ServerOptions {
            buffer_pool_mib: 32,
            private_binary: true,
            ..ServerOptions::default()
        })?;
        let pid = db.pid();
        // bpftrace 0.17 matches mangled names; probetop also matches demangled ones. The
        // named set is given to each tool the way its users would write it; the globs are
        // the same text for both.
        let listing =
            command_json(
                self.probetop()
                    .args(["list", "--pid", &pid.to_string(), "--json"]),
            )?;
        let mut mangled = Vec::new();
        for name in NAMED {
            let symbol = listing["points"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| {
                    p["object"].as_str() == Some(&db.exe().display().to_string())
                        && p["name"]
                            .as_str()
                            .is_some_and(|n| n.split('(').next() == Some(name))
                })
                .and_then(|p| p["symbol"].as_str())
                .with_context(|| format!("{name} is not in mariadbd's symbols"))?;
            mangled.push(symbol.to_string());
        }
        let exe = db.exe().display().to_string();
        let sets: Vec<(&'static str, Vec<String>, Vec<String>)> = vec![
            (
                "5 named functions",
                NAMED.iter().map(|n| format!("uprobe:{n}")).collect(),
                mangled
                    .iter()
                    .map(|m| format!("uprobe:{exe}:{m}"))
                    .collect(),
            ),
            (
                "glob *dispatch*",
                vec!["uprobe:*dispatch*".into()],
                vec![format!("uprobe:{exe}:*dispatch*")],
            ),
            (
                "glob _ZN3THD* (THD methods)",
                vec!["uprobe:_ZN3THD*".into()],
                vec![format!("uprobe:{exe}:_ZN3THD*")],
            ),
        ];
        let mut results = AttachResults {
            binary_mib: fs::metadata(db.exe()).map_or(0.0, |m| m.len() as f64 / (1 << 20) as f64),
            symbols: listing["objects"][0]["symbols"]["kind"]
                .as_str()
                .unwrap_or("?")
                .to_string(),
            ..Default::default()
        };
        for (name, specs, bpftrace_probes) in sets {
            let mut set = AttachSet {
                name,
                probetop_specs: specs.clone(),
                runs: Vec::new(),
            };
            for rep in 0..self.settings.attach_reps {
                // Alternate which tool goes first: the second finds the binary's pages cached.
                let mut order = vec![AttachTool::Probetop, AttachTool::Bpftrace];
                if self.settings.compare.is_some() {
                    order.push(AttachTool::Compared);
                }
                if rep % 2 == 1 {
                    order.reverse();
                }
                for tool in order {
                    let run = match tool {
                        AttachTool::Bpftrace => self.attach_bpftrace(&db, &bpftrace_probes)?,
                        AttachTool::Probetop => {
                            self.attach_probetop(&self.probetop, "probetop", &db, &specs)?
                        }
                        AttachTool::Compared => {
                            let bin = self.settings.compare.as_ref().context("no --compare")?;
                            self.attach_probetop(bin, "compared", &db, &specs)?
                        }
                    };
                    eprintln!(
                        "bench: attach {name}: {} {} probes live after {:.3} s, exit {:.2} s, {} hits",
                        run.tool, run.probes, run.live_s, run.exit_s, run.hits
                    );
                    set.runs.push(run);
                }
            }
            results.sets.push(set);
        }
        Ok(results)
    }

    fn attach_probetop(
        &self,
        bin: &Path,
        tool_name: &'static str,
        db: &Mariadb,
        specs: &[String],
    ) -> Result<AttachRun> {
        let export = self.work.path.join("attach.json");
        let mut cmd = Command::new(bin);
        cmd.args(["--pid", &db.pid().to_string(), "--no-tui", "--export"])
            .arg(&export);
        for spec in specs {
            cmd.args(["-e", spec]);
        }
        let (tool, watch) = watch_attach("probetop", &mut cmd, "probetop: attached")?;
        // `probetop: N probe point(s) from M spec(s)`
        let probes = tool
            .seen(" from ")
            .and_then(|l| l.text.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0);
        let (exit_s, _) = drive_and_stop(db, tool)?;
        let report = read_json(&export)?;
        let hits = report["probes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["hits"].as_u64())
            .sum();
        Ok(AttachRun {
            tool: tool_name,
            probes,
            live_s: watch.live_s,
            said_s: watch.said_s,
            exit_s,
            hits,
        })
    }

    fn attach_bpftrace(&self, db: &Mariadb, probes: &[String]) -> Result<AttachRun> {
        let program = format!("{} {{ @[probe] = count(); }}", probes.join(","));
        let mut cmd = Command::new("bpftrace");
        cmd.args(["-e", &program]);
        let (tool, watch) = watch_attach("bpftrace", &mut cmd, "Attaching ")?;
        let count = tool
            .seen("Attaching ")
            .and_then(|l| l.text.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0);
        let (exit_s, output) = drive_and_stop(db, tool)?;
        // `@[uprobe:...]: N` lines, printed at exit.
        let hits = output
            .iter()
            .filter(|l| l.starts_with("@["))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        Ok(AttachRun {
            tool: "bpftrace",
            probes: count,
            live_s: watch.live_s,
            said_s: watch.said_s,
            exit_s,
            hits,
        })
    }
}

/// The tools of the attach part, in the order of a repetition.
#[derive(Debug, Clone, Copy)]
enum AttachTool {
    Probetop,
    Bpftrace,
    /// The `--compare` binary.
    Compared,
}

struct AttachWatch {
    live_s: f64,
    said_s: f64,
}

/// Starts a tool and watches its perf events (one per attached probe, plus one per CPU
/// for bpftrace's output buffers, opened before its probes) until it has said `ready` and
/// their count has not changed for a second. Live is when the count first reached its
/// final value.
fn watch_attach(name: &str, cmd: &mut Command, ready: &str) -> Result<(Proc, AttachWatch)> {
    let tool = Proc::spawn(name, cmd)?;
    let started = tool.started;
    let mut said = None;
    let mut count = 0;
    let mut changed = Instant::now();
    loop {
        let now = Instant::now();
        let n = perf_event_fds(tool.pid());
        if n != count {
            count = n;
            changed = now;
        }
        if said.is_none()
            && let Some(line) = tool.seen(ready)
        {
            said = Some(line.at);
        }
        if said.is_some() && count > 0 && now - changed > Duration::from_secs(1) {
            break;
        }
        ensure!(
            now - started < PATIENCE,
            "{name} did not finish attaching: {}",
            tool.rest_text()
        );
        ensure!(
            tool.running(),
            "{name} exited while attaching: {}",
            tool.rest_text()
        );
        thread::sleep(Duration::from_millis(5));
    }
    let said = said.context("the ready line vanished")?;
    Ok((
        tool,
        AttachWatch {
            live_s: (changed - started).as_secs_f64(),
            said_s: (said - started).as_secs_f64(),
        },
    ))
}

/// Drives three known queries through the probes, then stops the tool with SIGINT;
/// returns the seconds it took to exit (detaching) and its stdout.
fn drive_and_stop(db: &Mariadb, mut tool: Proc) -> Result<(f64, Vec<String>)> {
    for _ in 0..3 {
        db.query("SELECT 1")?;
    }
    let (status, took) = tool.stop("INT", PATIENCE)?;
    ensure!(
        status.success(),
        "{} exited with {status}: {}",
        tool.name,
        tool.rest_text()
    );
    let out = tool
        .drain()
        .into_iter()
        .filter(|l| !l.stderr)
        .map(|l| l.text)
        .collect();
    Ok((took.as_secs_f64(), out))
}

// ---------------------------------------------------------------------------------------
// 4. Memory

#[derive(Debug, Clone)]
struct MemoryRun {
    probes: usize,
    /// VmHWM, KiB, one per repetition.
    peak_kib: Vec<u64>,
    /// The same of the `--compare` binary, measured in turn.
    compared_peak_kib: Vec<u64>,
    /// libc functions the kernel refused to probe, replaced by others.
    replaced: Vec<String>,
}

impl Bench {
    fn memory(&self) -> Result<Vec<MemoryRun>> {
        let target = Workload::start(&self.workload, 10_000, Some(1000.0))?;
        let listing = command_json(self.probetop().args([
            "list",
            "--pid",
            &target.pid().to_string(),
            "--json",
        ]))?;
        // Functions of libc that have one probe point each, a name that is no glob, and a
        // first instruction the kernel will put a uprobe on: it refuses a lock prefix
        // (pthread_spin_lock) and VEX/EVEX encodings (the *_avx2 string functions), and
        // probetop then attaches nothing. Each refusal caught later costs a whole run.
        let mut counts: BTreeMap<String, (usize, bool)> = BTreeMap::new();
        let mut images: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for point in listing["points"].as_array().into_iter().flatten() {
            let Some(object) = point["object"].as_str().filter(|o| o.contains("/libc.so")) else {
                continue;
            };
            if point["kind"] != "uprobe" {
                continue;
            }
            let Some(name) = point["name"].as_str() else {
                continue;
            };
            if !images.contains_key(object) {
                let bytes = fs::read(object).with_context(|| format!("reading {object}"))?;
                images.insert(object.to_string(), bytes);
            }
            let first = point["file_offset"]
                .as_u64()
                .and_then(|o| images.get(object)?.get(usize::try_from(o).ok()?).copied());
            let probeable = first.is_some_and(|b| !matches!(b, 0xf0 | 0xc4 | 0xc5 | 0x62));
            let entry = counts.entry(name.to_string()).or_insert((0, true));
            entry.0 += 1;
            entry.1 &= probeable;
        }
        let names: Vec<&String> = counts
            .iter()
            .filter(|(n, (c, ok))| *c == 1 && *ok && !n.contains(['*', '?', '[', '#', ' ']))
            .map(|(n, _)| n)
            .collect();
        ensure!(
            names.len() >= 1000,
            "libc has only {} plain function names",
            names.len()
        );
        let mut runs = Vec::new();
        for probes in [1usize, 100, 1000] {
            // Spread over the alphabet rather than the first N, which would all be __*.
            let step = names.len() / probes;
            let mut chosen: Vec<&str> = (0..probes).map(|i| names[i * step].as_str()).collect();
            // Replacements for functions the kernel refuses to probe: uprobes cannot
            // decode some first instructions (the VEX-encoded one of
            // __memset_avx2_unaligned, for one) and probetop then attaches nothing.
            let mut spare = names
                .iter()
                .map(|n| n.as_str())
                .filter(|n| !chosen.contains(n))
                .collect::<Vec<_>>()
                .into_iter();
            let mut run = MemoryRun {
                probes,
                peak_kib: Vec::new(),
                compared_peak_kib: Vec::new(),
                replaced: Vec::new(),
            };
            let file = self.work.path.join(format!("memory-{probes}.spec"));
            while run.peak_kib.len() < self.settings.memory_reps {
                let specs: String = chosen
                    .iter()
                    .map(|n| format!("uprobe:libc:{n}\n"))
                    .collect();
                fs::write(&file, specs).with_context(|| format!("writing {}", file.display()))?;
                match self.peak_rss(&self.probetop, target.pid(), &file, probes)? {
                    Ok(kib) => {
                        eprintln!("bench: memory: {probes} probes: VmHWM {kib} KiB");
                        run.peak_kib.push(kib);
                        if let Some(bin) = &self.settings.compare {
                            match self.peak_rss(bin, target.pid(), &file, probes)? {
                                Ok(kib) => {
                                    eprintln!(
                                        "bench: memory: {probes} probes: compared VmHWM {kib} KiB"
                                    );
                                    run.compared_peak_kib.push(kib);
                                }
                                Err(refused) => {
                                    bail!("the compared probetop refused {refused}, this one not")
                                }
                            }
                        }
                    }
                    Err(refused) => {
                        let slot = chosen.iter().position(|n| *n == refused.as_str());
                        let (Some(slot), Some(other)) = (slot, spare.next()) else {
                            bail!("probetop refused {refused}, and it cannot be replaced");
                        };
                        ensure!(run.replaced.len() < 200, "too many libc functions refused");
                        eprintln!(
                            "bench: memory: the kernel refuses a uprobe on {refused}; using {other}"
                        );
                        run.replaced.push(refused);
                        chosen[slot] = other;
                    }
                }
            }
            runs.push(run);
        }
        Ok(runs)
    }

    /// Runs probetop with the specs in `file` for 2 s and returns its peak RSS in KiB,
    /// or `Err(function)` when attaching to that libc function was refused.
    fn peak_rss(
        &self,
        bin: &Path,
        pid: u32,
        file: &Path,
        probes: usize,
    ) -> Result<Result<u64, String>> {
        let mut cmd = Command::new(bin);
        cmd.args(["--pid", &pid.to_string(), "--no-tui", "-f"])
            .arg(file)
            .args(["--duration", "2"]);
        let mut tool = Proc::spawn("probetop", &mut cmd)?;
        let attached = match tool.wait_for("probetop: attached", PATIENCE) {
            Ok(line) => line,
            Err(e) => {
                // `probetop: attaching uprobe:libc:NAME: cannot attach ...`
                let refused = tool.drain().iter().find_map(|l| {
                    let rest = l.text.split("attaching uprobe:libc:").nth(1)?;
                    Some(rest.split(':').next()?.to_string())
                });
                return match refused {
                    Some(name) => Ok(Err(name)),
                    None => Err(e),
                };
            }
        };
        let n: usize = attached
            .text
            .split_whitespace()
            .nth(2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        ensure!(n == probes, "probetop attached {n} probes, not {probes}");
        let mut peak = 0;
        while tool.running() {
            if let Some(kib) = status_kib(tool.pid(), "VmHWM:") {
                peak = kib;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let status = tool.wait(PATIENCE)?;
        ensure!(
            status.success(),
            "probetop exited with {status}: {}",
            tool.rest_text()
        );
        Ok(Ok(peak))
    }
}

// ---------------------------------------------------------------------------------------
// 5. Calibration

/// `probetop calibrate`'s table, and the same mechanisms measured by the bench its own way
/// (bpftrace's empty program on the workload fixture): two methods that must agree.
#[derive(Debug, Clone, Default)]
struct Calibration {
    /// `probetop calibrate --json`, when it ran.
    probetop: Option<Value>,
    /// Why it did not.
    probetop_error: Option<String>,
    cross_check: CalibrationTable,
}

#[derive(Debug, Clone, Default)]
struct CalibrationTable {
    /// (mechanism, `probetop calibrate`'s case of it, ns per hit by round).
    rows: Vec<(&'static str, &'static str, Vec<f64>)>,
    warnings: Vec<String>,
}

impl Bench {
    fn calibration(&self, cost: Option<&CostResults>) -> Result<Calibration> {
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
    fn unattached_usdt(&self, rounds: usize) -> Result<Vec<f64>> {
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

// ---------------------------------------------------------------------------------------
// Processes

/// One line of a child's output, with when it was read.
#[derive(Debug, Clone)]
struct Line {
    at: Instant,
    text: String,
    stderr: bool,
}

/// A child process whose stdout and stderr lines arrive, timestamped, on a channel;
/// killed on drop.
struct Proc {
    name: String,
    child: Child,
    started: Instant,
    lines: mpsc::Receiver<Line>,
    /// Lines already taken off the channel, for `seen` and error messages.
    seen: std::cell::RefCell<Vec<Line>>,
}

impl Proc {
    fn spawn(name: &str, cmd: &mut Command) -> Result<Self> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", show(cmd)))?;
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().context("stdout not captured")?;
        let err = child.stderr.take().context("stderr not captured")?;
        forward(out, false, tx.clone());
        forward(err, true, tx);
        Ok(Self {
            name: name.to_string(),
            child,
            started,
            lines: rx,
            seen: Default::default(),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn running(&self) -> bool {
        Path::new(&format!("/proc/{}/stat", self.pid())).exists()
            && proc_state(self.pid()).is_none_or(|s| s != 'Z')
    }

    /// The next line, if one comes within `timeout`.
    fn next_line(&self, timeout: Duration) -> Option<Line> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        self.seen.borrow_mut().push(line.clone());
        Some(line)
    }

    /// Waits for a line containing `needle`; fails after `timeout` or at end of output.
    fn wait_for(&self, needle: &str, timeout: Duration) -> Result<Line> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.borrow_mut().push(line.clone());
                    if line.text.contains(needle) {
                        return Ok(line);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!(
                        "{} printed no {needle:?} in {timeout:?}: {}",
                        self.name,
                        self.rest_text()
                    )
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!(
                        "{} ended without printing {needle:?}: {}",
                        self.name,
                        self.rest_text()
                    )
                }
            }
        }
    }

    /// A line containing `needle` read so far (or queued now).
    fn seen(&self, needle: &str) -> Option<Line> {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.borrow_mut().push(line);
        }
        self.seen
            .borrow()
            .iter()
            .find(|l| l.text.contains(needle))
            .cloned()
    }

    /// Every line: those seen and those left until end of output (after exit).
    fn drain(&self) -> Vec<Line> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.borrow_mut().push(line);
        }
        self.seen.borrow().clone()
    }

    /// The last lines printed, for error messages.
    fn rest_text(&self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.borrow_mut().push(line);
        }
        let seen = self.seen.borrow();
        let tail: Vec<&str> = seen
            .iter()
            .rev()
            .take(8)
            .rev()
            .map(|l| l.text.as_str())
            .collect();
        tail.join(" | ")
    }

    fn signal(&self, signal: &str) -> Result<()> {
        let status = Command::new("kill")
            .args(["-s", signal, &self.pid().to_string()])
            .status()
            .context("running kill")?;
        ensure!(status.success(), "kill -s {signal} {} failed", self.pid());
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().context("waiting for a child")? {
                return Ok(status);
            }
            ensure!(
                Instant::now() < deadline,
                "{} did not exit within {timeout:?}",
                self.name
            );
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// Sends `signal` and waits for the exit; returns the status and how long it took.
    fn stop(&mut self, signal: &str, timeout: Duration) -> Result<(ExitStatus, Duration)> {
        if let Some(status) = self.child.try_wait().context("waiting for a child")? {
            return Ok((status, Duration::ZERO));
        }
        let sent = Instant::now();
        self.signal(signal)?;
        let status = self.wait(timeout)?;
        Ok((status, sent.elapsed()))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn forward(stream: impl Read + Send + 'static, stderr: bool, tx: mpsc::Sender<Line>) {
    thread::spawn(move || {
        for text in BufReader::new(stream).lines() {
            let Ok(text) = text else { break };
            let line = Line {
                at: Instant::now(),
                text,
                stderr,
            };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

/// Polls `ready` every few ms until it holds; fails after `timeout`.
fn wait_until(timeout: Duration, mut ready: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !ready() {
        ensure!(Instant::now() < deadline, "timed out after {timeout:?}");
        thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// /proc

/// Perf event file descriptors a process holds: one per uprobe it attached.
/// Run time and runs of a process's BPF programs so far.
#[derive(Debug, Clone, Copy, Default)]
struct ProgramRuns {
    ns: u64,
    runs: u64,
}

/// The BPF programs `pid` holds, each once, from /proc/PID/fdinfo: the kernel counts
/// their runs and run time while kernel.bpf_stats_enabled is 1.
fn program_runs(pid: u32) -> ProgramRuns {
    let mut total = ProgramRuns::default();
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return total;
    };
    let mut seen = std::collections::BTreeSet::new();
    for entry in dir.flatten() {
        if !fs::read_link(entry.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:bpf-prog") {
            continue;
        }
        let fd = entry.file_name();
        let Ok(info) = fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.to_string_lossy()))
        else {
            continue;
        };
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(id), Some(ns), Some(runs)) =
            (field("prog_id"), field("run_time_ns"), field("run_cnt"))
            && seen.insert(id)
        {
            total.ns += ns;
            total.runs += runs;
        }
    }
    total
}

/// kernel.bpf_stats_enabled on while this lives, then back to what it was.
struct BpfStatsOn {
    previous: String,
}

const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStatsOn {
    fn enable() -> Result<Self> {
        let previous = fs::read_to_string(BPF_STATS_SYSCTL)
            .with_context(|| format!("reading {BPF_STATS_SYSCTL}"))?;
        fs::write(BPF_STATS_SYSCTL, "1").with_context(|| format!("writing {BPF_STATS_SYSCTL}"))?;
        Ok(Self { previous })
    }
}

impl Drop for BpfStatsOn {
    fn drop(&mut self) {
        if let Err(e) = fs::write(BPF_STATS_SYSCTL, self.previous.trim()) {
            eprintln!("bench: could not restore {BPF_STATS_SYSCTL}: {e}");
        }
    }
}

fn perf_event_fds(pid: u32) -> usize {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:[perf_event]")
        })
        .count()
}

/// Fields of /proc/PID/stat after the command name (which may hold spaces).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

fn proc_state(pid: u32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let fields = stat_fields(pid).with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields 14 and 15 of stat(5); `fields` starts at field 3 (state).
    let ticks: u64 = fields
        .get(11..13)
        .context("short /proc/PID/stat")?
        .iter()
        .map(|t| t.parse::<u64>().unwrap_or(0))
        .sum();
    Ok(ticks as f64 / clock_ticks())
}

/// USER_HZ, the unit of utime and stime.
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        command_line(Command::new("getconf").arg("CLK_TCK"))
            .and_then(|t| t.parse().ok())
            .unwrap_or(100.0)
    })
}

/// A `kB` field of /proc/PID/status.
fn status_kib(pid: u32, key: &str) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Small helpers

/// Parses `key=value` out of a fixture's report line.
fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

fn read_json(path: &Path) -> Result<Value> {
    let text = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Runs a command that prints JSON.
fn command_json(cmd: &mut Command) -> Result<Value> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", show(cmd)))?;
    ensure!(
        out.status.success(),
        "{} failed: {}",
        show(cmd),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("parsing the output of {}", show(cmd)))
}

/// The first line a command prints, if it succeeds.
fn command_line(cmd: &mut Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    })
}

fn commit(ctx: &Ctx) -> String {
    let head = command_line(
        Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(&ctx.root),
    )
    .unwrap_or_else(|| "unknown".into());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(&ctx.root)
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    if dirty {
        format!("{head}+changes")
    } else {
        head
    }
}

// ---------------------------------------------------------------------------------------
// Statistics

/// Median and quartiles (linear interpolation between order statistics).
#[derive(Debug, Clone, Copy, Default)]
struct Spread {
    median: f64,
    q1: f64,
    q3: f64,
    n: usize,
}

fn spread(values: &[f64]) -> Spread {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return Spread {
            median: f64::NAN,
            q1: f64::NAN,
            q3: f64::NAN,
            n: 0,
        };
    }
    Spread {
        median: quantile(&sorted, 0.5),
        q1: quantile(&sorted, 0.25),
        q3: quantile(&sorted, 0.75),
        n: sorted.len(),
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Spread {
    /// `812 (790-830)`: median and interquartile range.
    fn show(&self, decimals: usize) -> String {
        if self.n == 0 {
            return "-".into();
        }
        if self.n == 1 {
            return format!("{:.*}", decimals, self.median);
        }
        format!(
            "{:.*} ({:.*}-{:.*})",
            decimals, self.median, decimals, self.q1, decimals, self.q3
        )
    }

    fn json(&self) -> Value {
        if self.n == 0 {
            return Value::Null;
        }
        json!({"median": round(self.median), "q1": round(self.q1), "q3": round(self.q3), "n": self.n})
    }
}

fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

// ---------------------------------------------------------------------------------------
// Reporting

#[derive(Debug, Default)]
struct Results {
    cost: Option<CostResults>,
    throughput: Option<ThroughputResults>,
    attach: Option<AttachResults>,
    memory: Option<Vec<MemoryRun>>,
    calibration: Option<Calibration>,
}

struct Machine {
    cpus: usize,
    cpu_model: String,
    kernel: String,
    load_before: String,
    load_after: String,
}

impl Machine {
    fn read() -> Self {
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

    fn load_before_1m(&self) -> f64 {
        self.load_before
            .split_whitespace()
            .next()
            .and_then(|l| l.parse().ok())
            .unwrap_or(0.0)
    }
}

struct RunInfo {
    machine: Machine,
    date: String,
    commit: String,
    bpftrace: String,
    command: String,
    wall_s: f64,
    settings: Settings,
}

fn render_markdown(run: &RunInfo, results: &Results) -> String {
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
    md
}

const COST_TOOLS: [Tool; 9] = [
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
const COST_SITES: [Site; 3] = [Site::Uprobe, Site::Uretprobe, Site::Usdt];
/// The tools whose added cost the tables compare: the peers, then probetop's modes.
const ADDED_TOOLS: [Tool; 5] = [
    Tool::Count,
    Tool::Hist,
    Tool::ProbetopRing,
    Tool::ProbetopKernel,
    Tool::ProbetopKernelEveryHit,
];

/// The same comparison by the kernel's own count of each tool's program run time: the
/// handler alone, and far steadier than the thread's CPU time.
fn render_program_cost(md: &mut String, cost: &CostResults, sites: &[Site]) {
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

fn render_cost(md: &mut String, cost: &CostResults, s: &Settings) {
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

fn render_throughput(md: &mut String, t: &ThroughputResults, s: &Settings) {
    let _ = writeln!(md, "### 2. Pipeline throughput\n");
    let _ = writeln!(
        md,
        "`uprobe:work_unit` hit from {} threads (one per CPU) of the `threads` fixture, \
         unpaced (flood: as fast as the kernel fires the probe with probetop running) or \
         paced. Lossless: every hit counted (`hits` = the fixture's own count) and none \
         dropped. probetop's CPU is utime+stime from /proc/PID/stat while the load runs.\n",
        t.threads
    );
    let _ = writeln!(
        md,
        "| mode | highest lossless rate, {:.0} s | probetop CPU, % of a core | per 100k hits/s |",
        s.sustain_s
    );
    let _ = writeln!(md, "|---|---|---|---|");
    for (mode, best) in &t.best {
        match best {
            Some(run) => {
                let _ = writeln!(
                    md,
                    "| {mode} | {:.0} hits/s ({}) | {:.1} | {:.1} |",
                    run.rate(),
                    run.offered
                        .map_or("flood".into(), |r| format!("paced {r:.0}")),
                    100.0 * run.cpu_cores,
                    run.cpu_per_100k()
                );
            }
            None => {
                let _ = writeln!(md, "| {mode} | none lossless | - | - |");
            }
        }
    }
    let _ = writeln!(md, "\nEvery run:\n");
    let _ = writeln!(
        md,
        "| mode | load | s | hits/s | hits counted / calls | dropped | probetop % core | per 100k hits/s |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for run in &t.runs {
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.0} | {} / {} | {} | {:.1} | {:.1} |",
            run.mode,
            run.offered
                .map_or("flood".into(), |r| format!("paced {r:.0}/s")),
            run.seconds,
            run.rate(),
            run.hits,
            run.calls,
            run.dropped,
            100.0 * run.cpu_cores,
            run.cpu_per_100k()
        );
    }
    md.push('\n');
}

fn render_attach(md: &mut String, a: &AttachResults) {
    let _ = writeln!(md, "### 3. Attach latency\n");
    let _ = writeln!(
        md,
        "A private mariadbd ({:.0} MiB, symbols: {}). Live: seconds from starting the tool \
         until its last probe's perf event exists (watched in /proc/PID/fd every 5 ms); \
         checked by driving `SELECT 1` three times and finding the hits counted. Median \
         (IQR) over repetitions, the tools alternating.\n",
        a.binary_mib, a.symbols
    );
    let _ = writeln!(
        md,
        "| probes | count (probetop / bpftrace) | probetop live, s | bpftrace live, s | bpftrace / probetop | probetop detach, s | bpftrace detach, s | hits (probetop / bpftrace) |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for set in &a.sets {
        let of = |tool: &str, f: fn(&AttachRun) -> f64| -> Vec<f64> {
            set.runs.iter().filter(|r| r.tool == tool).map(f).collect()
        };
        let count = |tool: &str| {
            set.runs
                .iter()
                .find(|r| r.tool == tool)
                .map_or(0, |r| r.probes)
        };
        let hits = |tool: &str| {
            set.runs
                .iter()
                .filter(|r| r.tool == tool)
                .map(|r| r.hits.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let pt = spread(&of("probetop", |r| r.live_s));
        let bt = spread(&of("bpftrace", |r| r.live_s));
        let _ = writeln!(
            md,
            "| {} | {} / {} | {} | {} | {:.1}x | {} | {} | {} / {} |",
            set.name,
            count("probetop"),
            count("bpftrace"),
            pt.show(2),
            bt.show(2),
            bt.median / pt.median,
            spread(&of("probetop", |r| r.exit_s)).show(1),
            spread(&of("bpftrace", |r| r.exit_s)).show(1),
            hits("probetop"),
            hits("bpftrace"),
        );
    }
    let _ = writeln!(
        md,
        "\nprobetop prints `attached` {} s after its last perf event exists (median over every \
         set); bpftrace prints `Attaching N probes...` before it attaches.\n",
        spread(
            &a.sets
                .iter()
                .flat_map(|s| s.runs.iter())
                .filter(|r| r.tool == "probetop")
                .map(|r| r.said_s - r.live_s)
                .collect::<Vec<_>>()
        )
        .show(3)
    );
    let compared = a
        .sets
        .iter()
        .any(|s| s.runs.iter().any(|r| r.tool == "compared"));
    if compared {
        let _ = writeln!(
            md,
            "Against the `--compare` build, seconds until live, median (IQR):\n\n\
             | probes | this build | compared build | compared / this |\n|---|---|---|---|"
        );
        for set in &a.sets {
            let live = |tool: &str| {
                spread(
                    &set.runs
                        .iter()
                        .filter(|r| r.tool == tool)
                        .map(|r| r.live_s)
                        .collect::<Vec<_>>(),
                )
            };
            let (this, other) = (live("probetop"), live("compared"));
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} |",
                set.name,
                this.show(2),
                other.show(2),
                other.median / this.median
            );
        }
        md.push('\n');
    }
}

fn render_memory(md: &mut String, mem: &[MemoryRun]) {
    let _ = writeln!(md, "### 4. Memory\n");
    let _ = writeln!(
        md,
        "probetop's peak RSS (VmHWM) attached to the workload with N entry probes on distinct \
         libc functions (`-f` spec file), ring mode, 2 s.\n"
    );
    let compared = mem.iter().any(|r| !r.compared_peak_kib.is_empty());
    if compared {
        let _ = writeln!(
            md,
            "| probes | VmHWM, MiB | `--compare` build, MiB | this / compared |\n|---|---|---|---|"
        );
    } else {
        let _ = writeln!(md, "| probes | VmHWM, MiB |\n|---|---|");
    }
    let mib = |kib: &[u64]| spread(&kib.iter().map(|k| *k as f64 / 1024.0).collect::<Vec<_>>());
    for run in mem {
        let this = mib(&run.peak_kib);
        if compared {
            let other = mib(&run.compared_peak_kib);
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} |",
                run.probes,
                this.show(1),
                other.show(1),
                this.median / other.median
            );
        } else {
            let _ = writeln!(md, "| {} | {} |", run.probes, this.show(1));
        }
    }
    md.push('\n');
}

fn render_calibration(md: &mut String, c: &Calibration) {
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

fn warnings(md: &mut String, warnings: &[String]) {
    if warnings.is_empty() {
        return;
    }
    let _ = writeln!(md, "Warnings:\n");
    for w in warnings {
        let _ = writeln!(md, "- {w}");
    }
    md.push('\n');
}

fn to_json(run: &RunInfo, results: &Results) -> Value {
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
                    "mechanism": name, "case": case, "ns_per_hit": spread(v).json(),
                })).collect::<Vec<_>>(),
                "warnings": c.cross_check.warnings,
            },
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_interpolate() {
        let s = spread(&[4.0, 1.0, 3.0, 2.0, 5.0]);
        assert_eq!((s.median, s.q1, s.q3, s.n), (3.0, 2.0, 4.0, 5));
        let s = spread(&[1.0, 2.0]);
        assert_eq!((s.median, s.q1, s.q3), (1.5, 1.25, 1.75));
        assert_eq!(spread(&[]).n, 0);
        assert_eq!(spread(&[f64::NAN, 7.0]).median, 7.0);
    }

    #[test]
    fn parses_fixture_fields() {
        let line = "batch calls=200000 ns_per_call=812.50 total=400000";
        assert_eq!(field(line, "ns_per_call"), Some(812.5));
        assert_eq!(field(line, "calls"), Some(200000.0));
        assert_eq!(field(line, "missing"), None);
    }

    #[test]
    fn ratios_are_paired_by_round() {
        let site = Site::Uprobe;
        let sample = |probed: f64| {
            Some(Sample {
                base: 4.0,
                probed,
                // The programs' own run time: a tenth of the thread's cost, say.
                program: Some((probed - 4.0) / 10.0),
            })
        };
        let results = CostResults {
            cases: vec![
                Case {
                    site,
                    tool: Tool::Empty,
                },
                Case {
                    site,
                    tool: Tool::Count,
                },
                Case {
                    site,
                    tool: Tool::ProbetopRing,
                },
            ],
            samples: vec![
                vec![sample(804.0), sample(904.0)],
                vec![sample(854.0), None],
                vec![sample(829.0), sample(929.0)],
            ],
            warnings: Vec::new(),
        };
        assert_eq!(results.per_hit(site, Tool::Empty), [800.0, 900.0]);
        assert_eq!(results.added(site, Tool::ProbetopRing), [25.0, 25.0]);
        // Round 2 has no count() sample, so only round 1 pairs.
        assert_eq!(
            results.added_ratio(site, Tool::ProbetopRing, Tool::Count),
            [0.5]
        );
        assert_eq!(
            results.added_by(Metric::Program, site, Tool::ProbetopRing),
            [2.5, 2.5]
        );
        assert_eq!(
            results.added_ratio_by(Metric::Program, site, Tool::ProbetopRing, Tool::Count),
            [0.5]
        );
    }

    #[test]
    fn generated_block_is_replaced_in_place() {
        let dir = std::env::temp_dir().join(format!("bench-doc-test-{}", std::process::id()));
        let md = dir.join("performance.md");
        fs::create_dir_all(&dir).expect("temp dir");
        fs::write(
            &md,
            format!("# P\n\nintro\n\n{DOC_BEGIN}\nold\n{DOC_END}\n\n## Log\nkept\n"),
        )
        .expect("write");
        write_outputs(&dir, "new", &json!({})).expect("outputs");
        let doc = fs::read_to_string(&md).expect("read");
        assert_eq!(
            doc,
            format!("# P\n\nintro\n\n{DOC_BEGIN}\nnew\n{DOC_END}\n\n## Log\nkept\n")
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
