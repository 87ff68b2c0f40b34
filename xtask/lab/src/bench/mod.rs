//! `cargo xtask bench`: what probetop costs, measured against bpftrace on this machine.
//!
//! Six measurements, each taken as a ratio within one run, because the machine is a
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
//! 6. **scale**: attach and detach of 10 to 5000 probes, probetop on uprobe_multi and on
//!    perf events against bpftrace (bench/scale.rs).
//! 7. **latency**: what a latency pair costs per call, probetop's `latency:FUNC` in ring
//!    and kernel modes against bpftrace's `@start[tid]` / `hist(nsecs - @start[tid])`
//!    on the same function (bench/latency.rs).
//!
//! A full run writes the generated block of docs/performance.md and docs/performance.json;
//! `--quick` (a smoke run), `--only` and `--out` write under the target directory instead,
//! so they never overwrite the committed results.
//!
//! Every target is a private copy of its binary: uprobes are set per inode, and bpftrace
//! 0.17 does not scope uprobes to a pid, so probing the shared fixture or /usr/sbin/mariadbd
//! would also trap in other people's processes (and their programs would trap in ours).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use std::{fs, thread};

use anyhow::{Context as _, Result, ensure};
use serde_json::Value;

use super::mysql::{MARIADBD, Mariadb, ServerOptions};
use super::{Ctx, build, fixtures, is_root, show};
use crate::util::listing::{CostClass, ListedKind, Listing, symbols_kind};
use crate::util::proc::*;
use crate::util::stats::*;

mod attach;
mod calibration;
mod cost;
mod latency;
mod memory;
mod process;
mod report;
mod scale;
mod throughput;

use attach::*;
use calibration::*;
use cost::*;
use latency::*;
use memory::*;
use process::*;
use report::*;
use scale::*;
use throughput::*;

#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
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
    /// Probe counts of the scale part (default 10,100,1000,5000; quick 10,100).
    #[arg(long, value_delimiter = ',', value_name = "N")]
    scale_probes: Vec<usize>,
    /// Seconds the scale part lets a tool attach, and then detach, before it counts as
    /// capped (default 60: resolving 1000 one-name specs takes probetop ~30 s on a busy VM).
    #[arg(long, value_name = "SECS")]
    scale_cap: Option<f64>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Part {
    Cost,
    Throughput,
    Attach,
    Memory,
    Calibration,
    /// Attach and detach of 10 / 100 / 1000 / 5000 probes.
    Scale,
    /// What `probetop --pid PID` (no spec) adds per hit counting another tool's probe:
    /// bpftrace `count()` alone against the same with probetop counting it.
    Counting,
    /// What a `latency:` pair costs per call against bpftrace's `@start[tid]` /
    /// `hist(nsecs - @start[tid])` on the same function.
    Latency,
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
    /// Probe counts of the scale part.
    scale_probes: Vec<usize>,
    scale_reps: usize,
    /// How long the scale part waits for an attach, and for a detach.
    scale_cap: Duration,
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
            scale_probes: if !args.scale_probes.is_empty() {
                args.scale_probes.clone()
            } else if quick {
                SCALE_PROBES[..2].to_vec()
            } else {
                SCALE_PROBES.to_vec()
            },
            scale_reps: if quick { 1 } else { 3 },
            scale_cap: Duration::from_secs_f64(args.scale_cap.unwrap_or(60.0).max(1.0)),
        }
    }
}

/// Generous bound for a tool to start or stop: bpftrace compiles with LLVM first, and
/// detaching hundreds of uprobes takes seconds (one RCU grace period each).
const PATIENCE: Duration = Duration::from_secs(180);

const DOC_BEGIN: &str =
    "<!-- bench:begin: generated by `cargo xtask bench`; edit outside the markers -->";
const DOC_END: &str = "<!-- bench:end -->";

pub(crate) fn run(ctx: &Ctx, args: &BenchArgs) -> Result<()> {
    ensure!(is_root()?, "the bench attaches real probes: run it as root");
    let settings = Settings::new(args);
    let parts: Vec<Part> = if args.only.is_empty() {
        vec![
            Part::Cost,
            Part::Throughput,
            Part::Attach,
            Part::Memory,
            Part::Calibration,
            Part::Scale,
            Part::Latency,
        ]
    } else {
        let mut parts = args.only.clone();
        parts.sort();
        parts.dedup();
        parts
    };
    // Only a complete run with the default settings replaces the committed results.
    // (`counting` is run on its own: its result is stated in performance.md's text.)
    let complete = parts.len() == 7
        && !settings.quick
        && args.rounds.is_none()
        && args.seconds.is_none()
        && args.sites.is_empty()
        && args.compare.is_none()
        && args.scale_probes.is_empty()
        && args.scale_cap.is_none();
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
            Part::Scale => results.scale = Some(bench.scale()?),
            Part::Counting => results.counting = Some(bench.counting()?),
            Part::Latency => results.latency = Some(bench.latency()?),
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
    let needs_bpftrace = parts.iter().any(|p| {
        matches!(
            p,
            Part::Cost
                | Part::Attach
                | Part::Calibration
                | Part::Scale
                | Part::Counting
                | Part::Latency
        )
    });
    if needs_bpftrace {
        ensure!(
            command_line(Command::new("bpftrace").arg("--version")).is_some(),
            "bpftrace is missing: `cargo xtask setup` installs it"
        );
    }
    let needs_mariadbd = parts.contains(&Part::Attach) || parts.contains(&Part::Scale);
    if needs_mariadbd && !Path::new(MARIADBD).is_file() {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
