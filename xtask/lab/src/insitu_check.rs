//! `cargo xtask insitu-check`: probetop's in-situ measurement and its calibrated estimate
//! against the truth measured from outside, on a private mariadbd under an open-loop
//! sysbench load (a fixed rate of point selects, so the server's CPU per second is the
//! measure). The truth: mariadbd's CPU with probetop attached and with nothing attached,
//! in alternating blocks (ABBA order) under the same load. Written into docs/mysqld.md
//! between its own markers.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use probe_user::inner::present::export::json::{JsonBracket, JsonInSitu};

use crate::mysql::{Mariadb, ServerOptions, Sysbench};
use crate::tool::{KillOnDrop, Stream, Tool};
use crate::util::doc::splice_between;
use crate::util::export::{self, Export};
use crate::util::proc::cpu_clock_ns;
use crate::util::stats::{median, quantile};
use crate::{Ctx, show};

const BEGIN_MARK: &str = "<!-- BEGIN cargo xtask insitu-check -->";
const END_MARK: &str = "<!-- END cargo xtask insitu-check -->";

/// The request path probes of the issue that found the gap: all emulated on Debian's
/// build, hit a few times per statement.
const PROBES: [&str; 4] = [
    "uprobe:do_command",
    "uprobe:dispatch_command",
    "uretprobe:dispatch_command",
    "uprobe:mysql_execute_command",
];
/// Called only by SHUTDOWN: probetop attached to it costs the server its presence alone
/// (its threads, its reads of /proc, the breakpoint's page), no hit.
const NEVER_HIT: &str = "uprobe:kill_mysql";
const TEST: &str = "oltp_point_select";
/// Statements per second of the cells: the range is 2k-10k.
pub(crate) const DEFAULT_RATES: [u32; 2] = [2000, 6000];
pub(crate) const DEFAULT_MODES: [&str; 2] = ["ring", "kernel"];
const CLIENT_THREADS: u32 = 4;

#[derive(Debug, Clone)]
pub(crate) struct CheckOptions {
    /// Statements per second sysbench sends, one cell each.
    pub rates: Vec<u32>,
    /// probetop's delivery modes, one cell each per rate.
    pub modes: Vec<String>,
    /// Attached/detached block pairs of the outside measurement.
    pub pairs: u32,
    /// Also a block with probetop attached to a probe that never fires after each pair:
    /// the part of the truth that is probetop's presence, not its hits.
    pub presence: bool,
    pub block_seconds: f64,
    /// Length of each probetop --in-situ run.
    pub in_situ_seconds: f64,
    /// Where mysqld.md is.
    pub out: PathBuf,
    /// probetop's `--assume` for the estimate: `auto` (what a user gets), `hot`, `cold`
    /// or `clock`.
    pub assume: String,
}

impl CheckOptions {
    /// The full check, or with `quick` a short try: one rate and mode, 2 pairs of 4 s
    /// blocks, 12 s in-situ runs (else 60 s: at 2,000 statements/s 30 s often gave no
    /// verdict).
    pub(crate) fn new(
        quick: bool,
        rates: Vec<u32>,
        modes: Vec<String>,
        pairs: Option<u32>,
        out: PathBuf,
    ) -> Result<Self> {
        ensure!(
            !rates.is_empty() && !modes.is_empty(),
            "--rates and --modes need at least one value each"
        );
        let (rates, modes) = if quick {
            (rates[..1].to_vec(), modes[..1].to_vec())
        } else {
            (rates, modes)
        };
        Ok(Self {
            rates,
            modes,
            pairs: pairs.unwrap_or(if quick { 2 } else { 6 }).max(1),
            presence: true,
            block_seconds: if quick { 4.0 } else { 8.0 },
            in_situ_seconds: if quick { 12.0 } else { 60.0 },
            out,
            assume: "auto".into(),
        })
    }
}

/// One rate and mode.
struct Cell {
    rate: u32,
    mode: String,
    /// Hits per second of the attached blocks.
    hits_per_second: f64,
    /// Added mariadbd CPU per hit of each attached block, ns.
    truth_ns: Vec<f64>,
    /// Added mariadbd CPU (in CPUs) of each present block: probetop with no hits.
    presence_share: Vec<f64>,
    /// mariadbd's own CPU share in the detached blocks.
    base_share: f64,
    in_situ: Vec<(String, Option<JsonInSitu>)>,
    estimate_ns: Option<f64>,
    /// What priced it, `hot`, `cold` or `clock` (--assume auto's choice).
    estimate_assumes: Option<String>,
    /// The same run's estimate under each loop: `cost.estimates_per_hit_ns`.
    bracket: Option<JsonBracket>,
}

pub(crate) fn insitu_check(ctx: &Ctx, options: CheckOptions) -> Result<()> {
    ensure!(
        crate::is_root()?,
        "the check attaches real probes: run it as root"
    );
    crate::install_apt(ctx, &["mariadb-server", "sysbench"])?;
    crate::build(ctx)?;
    let probetop = ctx.target_dir().join("release/probetop");
    let server = Mariadb::start(&ServerOptions::default())?;
    let sysbench = Sysbench::new(&server, 4, 10_000);
    sysbench.prepare()?;
    check_on(ctx, &probetop, &server, &sysbench, &options)
}

/// The check on a server and tables that are already there (`mysql-report` runs it on
/// its own server after its runs); writes its section of mysqld.md.
pub(crate) fn check_on(
    ctx: &Ctx,
    probetop: &Path,
    server: &Mariadb,
    sysbench: &Sysbench,
    options: &CheckOptions,
) -> Result<()> {
    // The estimate needs this machine's calibration; made once, as a user would.
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|dir| dir.join("probetop"));
    let calibrated = cache
        .and_then(|dir| fs::read_dir(dir).ok())
        .is_some_and(|mut entries| {
            entries.any(|e| {
                e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("calibration-"))
            })
        });
    if !calibrated {
        crate::run(Command::new(probetop).arg("calibrate"))?;
    }
    let work = ctx.target_dir().join("insitu-check-work");
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let started = Instant::now();
    let mut cells = Vec::new();
    for &rate in &options.rates {
        for mode in &options.modes {
            cells.push(measure_cell(
                probetop, server, sysbench, &work, rate, mode, options,
            )?);
        }
    }
    ensure!(server.ping(), "mariadbd stopped answering during the check");
    let section = render(&cells, options, started.elapsed(), probetop, sysbench);
    print!("{section}");
    let doc = options.out.join("mysqld.md");
    let existing = fs::read_to_string(&doc).unwrap_or_default();
    fs::write(&doc, splice(&existing, &section))
        .with_context(|| format!("writing {}", doc.display()))?;
    println!("insitu-check: wrote {}", doc.display());
    Ok(())
}

fn probetop_command(probetop: &Path, pid: u32, mode: &str, probes: &[&str]) -> Command {
    let mut cmd = Command::new(probetop);
    // --force: the uretprobe on dispatch_command, which probetop refuses on a C++
    // server (an exception unwinding through it would kill the server), is kept so the
    // cells compare with the runs recorded before; the private server's point selects
    // throw none through it.
    cmd.arg("--pid")
        .arg(pid.to_string())
        .args(["--no-tui", "--force", "--mode", mode]);
    for spec in probes {
        cmd.args(["-e", spec]);
    }
    cmd
}

fn measure_cell(
    probetop: &Path,
    server: &Mariadb,
    sysbench: &Sysbench,
    work: &Path,
    rate: u32,
    mode: &str,
    options: &CheckOptions,
) -> Result<Cell> {
    let pid = server.pid();
    // One open-loop load for the whole cell, longer than everything measured in it.
    let blocks_per_pair = if options.presence { 4.0 } else { 2.0 };
    // Each half of the truth's blocks starts with a detached one.
    let seconds = (f64::from(options.pairs) * blocks_per_pair + 2.0)
        * (options.block_seconds + 3.0)
        + 2.0 * (options.in_situ_seconds + 5.0)
        + 20.0;
    let mut load = sysbench.command(TEST);
    load.arg(format!("--threads={CLIENT_THREADS}"))
        .arg(format!("--rate={rate}"))
        .arg(format!("--time={}", seconds.ceil() as u64))
        .arg("run")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    println!(
        "insitu-check: {rate} statements/s, --mode {mode}: {}",
        show(&load)
    );
    let mut load = load.spawn().context("starting sysbench")?;
    let load_guard = KillOnDrop(&mut load);
    thread::sleep(Duration::from_secs(5));

    // The truth's blocks in two halves with the in-situ runs between them: what a hit
    // costs drifts over tens of minutes on a shared host (one cell's truth moved 2x
    // between runs), and in situ and the estimate are judged against the truth of the
    // same minutes.
    let first_half = options.pairs.div_ceil(2);
    let cell = CellRun {
        probetop,
        pid,
        work,
        rate,
        mode,
        options,
    };
    let mut blocks = Vec::new();
    cell.truth_blocks(first_half, &mut blocks)?;
    let (in_situ, estimate_ns, estimate_assumes, bracket) = cell.in_situ_runs()?;
    cell.truth_blocks(options.pairs - first_half, &mut blocks)?;
    let truth_ns = truth_per_hit(&blocks);
    drop(load_guard);
    Ok(Cell {
        rate,
        mode: mode.to_string(),
        hits_per_second: median(
            &blocks
                .iter()
                .filter(|b| b.kind == BlockKind::Attached)
                .map(|b| b.hits_per_second)
                .collect::<Vec<_>>(),
        ),
        truth_ns,
        presence_share: added_share(&blocks, BlockKind::Present)
            .into_iter()
            .map(|(added, _)| added)
            .collect(),
        base_share: median(
            &blocks
                .iter()
                .filter(|b| b.kind == BlockKind::Detached)
                .map(|b| b.share)
                .collect::<Vec<_>>(),
        ),
        in_situ,
        estimate_ns,
        estimate_assumes,
        bracket,
    })
}

/// One in-situ result per meter, then from the first run that has them: the estimate,
/// what priced it, and its bracket by loop.
type InSituRuns = (
    Vec<(String, Option<JsonInSitu>)>,
    Option<f64>,
    Option<String>,
    Option<JsonBracket>,
);

/// One cell's settings, while its load runs.
struct CellRun<'a> {
    probetop: &'a Path,
    pid: u32,
    work: &'a Path,
    rate: u32,
    mode: &'a str,
    options: &'a CheckOptions,
}

impl CellRun<'_> {
    /// probetop on the server in this cell's mode with `probes`.
    fn command(&self, probes: &[&str]) -> Command {
        probetop_command(self.probetop, self.pid, self.mode, probes)
    }

    /// Where a run of this cell exports: `truth-2000-ring-3.json`.
    fn json(&self, kind: &str, which: impl std::fmt::Display) -> PathBuf {
        self.work
            .join(format!("{kind}-{}-{}-{which}.json", self.rate, self.mode))
    }

    /// `pairs` more of the truth's blocks, appended to `blocks`: detached blocks between
    /// every other kind, so each attached or present block has a detached neighbour on
    /// either side: D A D P D A D P D ...
    fn truth_blocks(&self, pairs: u32, blocks: &mut Vec<Block>) -> Result<()> {
        let (pid, options) = (self.pid, self.options);
        let measure_s = options.block_seconds;
        let mut sequence = vec![BlockKind::Detached];
        for _ in 0..pairs {
            sequence.push(BlockKind::Attached);
            sequence.push(BlockKind::Detached);
            if options.presence {
                sequence.push(BlockKind::Present);
                sequence.push(BlockKind::Detached);
            }
        }
        for kind in sequence {
            let index = blocks.len();
            let probes: &[&str] = match kind {
                BlockKind::Attached => &PROBES,
                BlockKind::Present => &[NEVER_HIT],
                BlockKind::Detached => &[],
            };
            if probes.is_empty() {
                // The same settling time as an attach takes, then the same window.
                thread::sleep(Duration::from_secs(1));
                let (c0, t0) = (cpu_clock_ns(pid)?, Instant::now());
                thread::sleep(Duration::from_secs_f64(measure_s));
                let (c1, t1) = (cpu_clock_ns(pid)?, Instant::now());
                blocks.push(Block {
                    share: (c1 - c0) as f64 / 1e9 / (t1 - t0).as_secs_f64(),
                    kind,
                    hits_per_second: 0.0,
                });
                continue;
            }
            let json = self.json("truth", index);
            let mut cmd = self.command(probes);
            // The truth is the mode's own price: no streamed start.
            cmd.args(["--clock-seconds", "0"]).arg("-o").arg(&json);
            let mut tool = Tool::start(cmd, "attached", Stream::Stderr)?;
            let (c0, t0) = (cpu_clock_ns(pid)?, Instant::now());
            thread::sleep(Duration::from_secs_f64(measure_s));
            let (c1, t1) = (cpu_clock_ns(pid)?, Instant::now());
            tool.stop()?;
            let share = (c1 - c0) as f64 / 1e9 / (t1 - t0).as_secs_f64();
            let report = export::read(&json)?;
            let hits = export::total_hits(&report);
            let duration = report.duration_s;
            ensure!(duration > 0.0, "no run time in {}", json.display());
            ensure!(
                (kind == BlockKind::Attached) == (hits > 0),
                "{} hits in {} ({kind:?} block)",
                hits,
                json.display()
            );
            blocks.push(Block {
                share,
                kind,
                hits_per_second: hits as f64 / duration,
            });
        }
        Ok(())
    }

    /// One `probetop --in-situ` run per meter: their in-situ results, and the estimate,
    /// what priced it and its bracket by loop, from the first run that has them.
    fn in_situ_runs(&self) -> Result<InSituRuns> {
        let options = self.options;
        let mut in_situ = Vec::new();
        let mut estimate_ns = None;
        let mut estimate_assumes = None;
        let mut bracket = None;
        for meter in ["auto", "none"] {
            let json = self.json("insitu", meter);
            let mut cmd = self.command(&PROBES);
            cmd.args(["--in-situ", "--work", meter])
                .args(["--assume", &options.assume])
                .arg("--duration")
                .arg(options.in_situ_seconds.to_string())
                .arg("-o")
                .arg(&json);
            let mut tool = Tool::start(cmd, "attached", Stream::Stderr)?;
            thread::sleep(Duration::from_secs_f64(options.in_situ_seconds + 1.0));
            tool.stop().or_else(|e| {
                // It ends by itself after --duration; a SIGINT that comes after is harmless.
                if json.exists() {
                    Ok(String::new())
                } else {
                    Err(e)
                }
            })?;
            let report = export::read(&json)?;
            estimate_ns = estimate_ns.or(report.cost.estimated_per_hit_ns);
            estimate_assumes = estimate_assumes.or_else(|| estimate_label(&report));
            if bracket.is_none() {
                bracket = report.cost.estimates_per_hit_ns;
            }
            in_situ.push((meter.to_string(), report.cost.in_situ));
        }
        Ok((in_situ, estimate_ns, estimate_assumes, bracket))
    }
}

/// What priced a run's estimate: the loop it assumed and, priced by the clock, what
/// placed the probes' hits on the curves (`clock: handler-clock`).
fn estimate_label(report: &Export) -> Option<String> {
    let assumes = report.cost.assumption.as_ref()?.assumes.as_ref();
    let mut readings: Vec<&str> = Vec::new();
    for probe in report.probe_rows() {
        if let Some(reading) = probe.whole_cost_reading.as_deref()
            && !readings.contains(&reading)
        {
            readings.push(reading);
        }
    }
    Some(if readings.is_empty() {
        assumes.to_string()
    } else {
        format!("{assumes}: {}", readings.join(", "))
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    /// probetop with the request-path probes.
    Attached,
    /// probetop with one probe that never fires: what its presence alone costs.
    Present,
    /// Nothing attached.
    Detached,
}

/// One block of the outside measurement, in time order.
struct Block {
    /// mariadbd's CPU over the block, in CPUs.
    share: f64,
    kind: BlockKind,
    /// The probes' hits per second (0 unless attached).
    hits_per_second: f64,
}

/// Added CPU (in CPUs) of each block of `kind` against the mean of the detached blocks
/// next to it on either side, with the block: a load that drifts linearly cancels, as in
/// the in-situ measurement itself.
fn added_share(blocks: &[Block], kind: BlockKind) -> Vec<(f64, &Block)> {
    fn detached<'a>(mut side: impl Iterator<Item = &'a Block>) -> Option<f64> {
        side.find(|b| b.kind == BlockKind::Detached)
            .map(|b| b.share)
    }
    blocks
        .iter()
        .enumerate()
        .filter(|(_, block)| block.kind == kind)
        .filter_map(|(i, block)| {
            let before = detached(blocks[..i].iter().rev());
            let after = detached(blocks[i + 1..].iter());
            let base = match (before, after) {
                (Some(a), Some(b)) => (a + b) / 2.0,
                (Some(x), None) | (None, Some(x)) => x,
                (None, None) => return None,
            };
            Some((block.share - base, block))
        })
        .collect()
}

/// Added CPU per hit (ns) of each attached block.
fn truth_per_hit(blocks: &[Block]) -> Vec<f64> {
    added_share(blocks, BlockKind::Attached)
        .into_iter()
        .map(|(added, block)| added * 1e9 / block.hits_per_second)
        .collect()
}

/// 95% bootstrap interval of median(a) - median(b), each resampled on its own (a fixed
/// seed: the report is reproducible from the same blocks).
fn median_difference_interval(a: &[f64], b: &[f64]) -> (f64, f64) {
    const RESAMPLES: usize = 2000;
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n.max(1) as u64) as usize
    };
    let mut resample = |values: &[f64]| -> f64 {
        let drawn: Vec<f64> = (0..values.len())
            .map(|_| values[next(values.len())])
            .collect();
        median(&drawn)
    };
    let mut differences: Vec<f64> = (0..RESAMPLES)
        .map(|_| resample(a) - resample(b))
        .filter(|d| d.is_finite())
        .collect();
    differences.sort_by(f64::total_cmp);
    (quantile(&differences, 0.025), quantile(&differences, 0.975))
}

/// The bound: in situ and the estimate within 25% of the truth.
const BOUND: f64 = 0.25;

/// How many cells each column puts within [`BOUND`] of the truth: of its median, and of
/// some value in its 95% interval (the most a truth that wide can judge).
#[derive(Debug, Default)]
struct Tally {
    /// Column name, cells within the bound of the median, of the interval.
    columns: Vec<(String, usize, usize)>,
}

impl Tally {
    fn judge(&mut self, column: &str, value: Option<f64>, truth: f64, interval: (f64, f64)) {
        let index = match self.columns.iter().position(|(name, ..)| name == column) {
            Some(i) => i,
            None => {
                self.columns.push((column.to_string(), 0, 0));
                self.columns.len() - 1
            }
        };
        let Some(x) = value.filter(|x| x.is_finite()) else {
            return;
        };
        let entry = &mut self.columns[index];
        if truth > 0.0 && ((x - truth) / truth).abs() <= BOUND {
            entry.1 += 1;
        }
        // Within the bound of some t in [low, high]: x/(1+B) <= t <= x/(1-B) meets it.
        let (low, high) = interval;
        if x >= (1.0 - BOUND) * low && x <= (1.0 + BOUND) * high {
            entry.2 += 1;
        }
    }

    fn render(&self, cells: usize) -> String {
        let each = |pick: fn(&(String, usize, usize)) -> usize| {
            self.columns
                .iter()
                .map(|c| format!("{} {} of {cells}", c.0, pick(c)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "Within {:.0}% of the truth's median: {}. Within {:.0}% of some value in its 95% interval: {}.",
            BOUND * 100.0,
            each(|c| c.1),
            BOUND * 100.0,
            each(|c| c.2)
        )
    }
}

/// 95% bootstrap interval of the median of `values`.
fn median_interval(values: &[f64]) -> (f64, f64) {
    median_difference_interval(values, &[0.0])
}

/// Each loop's estimate in `bracket` against `truth`: `850 (-50%) / 2010 (+5%) / -`.
fn by_loop(bracket: Option<&JsonBracket>, truth: f64) -> String {
    let by = |b: &JsonBracket| [b.hot, b.cold, b.clock];
    bracket
        .map_or([None; 3], by)
        .into_iter()
        .map(|ns| match ns {
            Some(ns) => format!("{ns:.0} ({})", off_by(ns, truth)),
            None => "-".into(),
        })
        .collect::<Vec<_>>()
        .join(" / ")
}

/// `x` against `truth`, as a signed percentage.
fn off_by(x: f64, truth: f64) -> String {
    if !(x.is_finite() && truth.is_finite() && truth != 0.0) {
        return "-".into();
    }
    format!("{:+.0}%", (x - truth) / truth * 100.0)
}

fn render(
    cells: &[Cell],
    options: &CheckOptions,
    elapsed: Duration,
    probetop: &Path,
    sysbench: &Sysbench,
) -> String {
    let mut w = String::new();
    let line = |w: &mut String, s: String| {
        w.push_str(&s);
        w.push('\n');
    };
    line(
        &mut w,
        "## The cost measured in situ, against the truth from outside\n".into(),
    );
    line(
        &mut w,
        format!(
            "Generated by `cargo xtask insitu-check` in {:.1} min. A private mariadbd under an open-loop `{TEST}` load ({CLIENT_THREADS} client threads, `--rate` fixed), probes `{}`.",
            elapsed.as_secs_f64() / 60.0,
            PROBES.join("`, `")
        ),
    );
    line(
        &mut w,
        format!(
            "- **truth**: mariadbd's CPU (its process CPU clock) over {:.0} s blocks with probetop attached and with nothing attached, {} attached blocks, each between two detached ones; per hit = an attached block's CPU minus the mean of the detached blocks on either side of it, over its hits per second. Median over the attached blocks, its 95% bootstrap interval in brackets (how precisely the blocks pin it), then their IQR (how much one block says). The blocks come in two halves with the in-situ runs between them, so all three columns cover the same minutes.",
            options.block_seconds, options.pairs
        ),
    );
    if options.presence {
        line(
            &mut w,
            format!(
                "- **presence**: as many blocks, between detached ones too, with probetop attached in the same mode to `{NEVER_HIT}`, which never fires: what probetop's being there costs the server without a hit (its threads on the server's CPUs, its reads of /proc, the breakpoint's page). Median added share of a CPU; in brackets over the attached blocks' hits, the part of the truth per hit that is presence. **per hit** = truth minus that part, with its 95% bootstrap interval (the blocks of each kind resampled)."
            ),
        );
    }
    line(
        &mut w,
        format!(
            "- **in situ**: one `probetop --in-situ --work METER --duration {:.0}` run per meter (1 s windows, probes detached in every other one; `auto` names the meter it chose); mean and 95% bootstrap interval.",
            options.in_situ_seconds
        ),
    );
    line(
        &mut w,
        format!(
            "- **estimate**: probetop's calibrated whole cost per hit (`probetop calibrate`), weighted by hits over the probes, with `--assume {}`; in brackets the loop that priced it: hot (a tight loop), cold (caches evicted between hits) or clock (each hit by its handler's clock, streamed; in-kernel, the clock of its first seconds streamed), then what placed its hits: gap (the calibration's gap curve, where dearer), handler-clock or streamed-clock (docs/cost.md). **by loop**: the same run's estimate priced hot, cold and by the clock, each against the truth (`cost.estimates_per_hit_ns`).\n",
            options.assume
        ),
    );
    line(
        &mut w,
        "| statements/s | mode | hits/s | mariadbd base CPU | truth ns/hit [95% CI] (IQR) | presence, % of a CPU [ns/hit] | per hit | in situ, --work auto (95% CI) | vs truth | in situ, --work none (95% CI) | vs truth | estimate | vs truth | vs per hit | by loop: hot / cold / clock |".into(),
    );
    line(
        &mut w,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|".into(),
    );
    let mut tally = Tally::default();
    for cell in cells {
        let truth = median(&cell.truth_ns);
        let truth_interval = median_interval(&cell.truth_ns);
        let presence = (!cell.presence_share.is_empty()).then(|| median(&cell.presence_share));
        let presence_ns: Vec<f64> = cell
            .presence_share
            .iter()
            .map(|p| p * 1e9 / cell.hits_per_second)
            .collect();
        let presence_per_hit = presence.map(|_| median(&presence_ns));
        let per_hit = presence_per_hit.map(|p| truth - p);
        let per_hit_interval =
            per_hit.map(|_| median_difference_interval(&cell.truth_ns, &presence_ns));
        let mut row = format!(
            "| {} | {} | {:.0} | {:.1}% | {:.0} [{:.0}-{:.0}] ({:.0}-{:.0}) | {} | {} |",
            cell.rate,
            cell.mode,
            cell.hits_per_second,
            cell.base_share * 100.0,
            truth,
            truth_interval.0,
            truth_interval.1,
            quantile(&cell.truth_ns, 0.25),
            quantile(&cell.truth_ns, 0.75),
            match (presence, presence_per_hit) {
                (Some(p), Some(h)) => format!(
                    "{:.2}% ({:.2}-{:.2}) [{h:.0}]",
                    p * 100.0,
                    quantile(&cell.presence_share, 0.25) * 100.0,
                    quantile(&cell.presence_share, 0.75) * 100.0
                ),
                _ => "-".into(),
            },
            match (per_hit, per_hit_interval) {
                (Some(p), Some((low, high))) => format!("{p:.0} ({low:.0}-{high:.0})"),
                _ => "-".into(),
            }
        );
        for (meter, s) in &cell.in_situ {
            let per_hit = s.as_ref().and_then(|s| s.per_hit_ns.as_ref());
            tally.judge(
                &format!("in situ `--work {meter}`"),
                per_hit.map(|p| p.mean),
                truth,
                truth_interval,
            );
            // An absent field reads as empty: said as no verdict, no meter.
            let verdict = s
                .as_ref()
                .map(|s| s.verdict.as_ref())
                .filter(|v| !v.is_empty());
            let work = s
                .as_ref()
                .map(|s| s.work.as_ref())
                .filter(|w| !w.is_empty());
            match per_hit {
                Some(per_hit) => row.push_str(&format!(
                    " {:.0} ({:.0}-{:.0}){} | {} |",
                    per_hit.mean,
                    per_hit.low,
                    per_hit.high,
                    match (verdict, work) {
                        (Some("measured") | None, Some("none") | None) => String::new(),
                        (Some("measured") | None, Some(work)) => format!(" [{work}]"),
                        (Some(verdict), _) => format!(" [{verdict}]"),
                    },
                    off_by(per_hit.mean, truth)
                )),
                None => row.push_str(" - | - |"),
            }
        }
        tally.judge("the estimate", cell.estimate_ns, truth, truth_interval);
        match cell.estimate_ns {
            Some(e) => row.push_str(&format!(
                " {e:.0}{} | {} |",
                cell.estimate_assumes
                    .as_deref()
                    .map_or(String::new(), |a| format!(" [{a}]")),
                off_by(e, truth)
            )),
            None => row.push_str(" no calibration | - |"),
        }
        match (cell.estimate_ns, per_hit) {
            (Some(e), Some(p)) => row.push_str(&format!(" {} |", off_by(e, p))),
            _ => row.push_str(" - |"),
        }
        row.push_str(&format!(" {} |", by_loop(cell.bracket.as_ref(), truth)));
        line(&mut w, row);
    }
    line(&mut w, String::new());
    line(&mut w, tally.render(cells.len()));
    line(&mut w, String::new());
    line(&mut w, "Commands:\n".into());
    line(
        &mut w,
        format!(
            "    {} --pid $(pidof mariadbd) --no-tui --force --mode MODE -e {} --in-situ --work METER --assume {} --duration {:.0}",
            probetop.display(),
            PROBES.join(" -e "),
            options.assume,
            options.in_situ_seconds
        ),
    );
    line(
        &mut w,
        format!(
            "    {} --threads={CLIENT_THREADS} --rate=RATE --time=N run",
            show(&sysbench.command(TEST))
        ),
    );
    w
}

/// `existing` with the text between the markers replaced by `section`, or the section
/// appended when there are none.
fn splice(existing: &str, section: &str) -> String {
    splice_between(existing, section, (BEGIN_MARK, END_MARK)).unwrap_or_else(|| {
        format!(
            "{}\n\n{BEGIN_MARK}\n{section}{END_MARK}\n",
            existing.trim_end()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splices_its_own_section() {
        let doc = "# mysqld\n\nreport\n";
        let once = splice(doc, "A\n");
        assert!(once.starts_with("# mysqld\n\nreport\n\n<!-- BEGIN"));
        let twice = splice(&once, "B\n");
        assert!(twice.contains("B\n") && !twice.contains("A\n"), "{twice}");
        assert_eq!(twice.matches(BEGIN_MARK).count(), 1);
    }

    #[test]
    fn the_estimate_says_what_placed_its_hits() {
        let read =
            |v: serde_json::Value| -> Export { serde_json::from_value(v).expect("an export") };
        let report = read(serde_json::json!({
            "cost": {"assumption": {"assumes": "clock"}},
            "probes": [
                {"kind": "uprobe", "whole_cost_reading": "handler-clock"},
                {"kind": "uprobe", "whole_cost_reading": "gap"},
                {"kind": "uretprobe", "whole_cost_reading": "handler-clock"},
                {"kind": "uprobe"},
            ],
        }));
        assert_eq!(
            estimate_label(&report).as_deref(),
            Some("clock: handler-clock, gap")
        );
        let hot =
            read(serde_json::json!({"cost": {"assumption": {"assumes": "hot"}}, "probes": []}));
        assert_eq!(estimate_label(&hot).as_deref(), Some("hot"));
        assert_eq!(estimate_label(&read(serde_json::json!({}))), None);
    }

    #[test]
    fn each_attached_block_against_its_detached_neighbours() {
        let on = |share, hits| Block {
            share,
            kind: BlockKind::Attached,
            hits_per_second: hits,
        };
        let off = |share| Block {
            share,
            kind: BlockKind::Detached,
            hits_per_second: 0.0,
        };
        // ABBA: on off off on on off, a load drifting by 0.01 a block.
        let blocks = [
            on(0.11, 1e6),
            off(0.11),
            off(0.12),
            on(0.14, 1e6),
            on(0.15, 1e6),
            off(0.15),
        ];
        let truth = truth_per_hit(&blocks);
        assert_eq!(truth.len(), 3);
        // 0.11 against the next off (0.11); 0.14 against 0.12 and 0.15; 0.15 against 0.12 and 0.15.
        assert!(truth[0].abs() < 1e-6, "{truth:?}");
        assert!((truth[1] - 5.0).abs() < 1e-6, "{truth:?}");
        assert!((truth[2] - 15.0).abs() < 1e-6, "{truth:?}");
    }

    #[test]
    fn present_blocks_against_detached_ones_only() {
        let block = |share, kind| Block {
            share,
            kind,
            hits_per_second: if kind == BlockKind::Attached {
                1e6
            } else {
                0.0
            },
        };
        // D A D P D: the present block between 0.12 and 0.13, the attached one's
        // neighbours skip nothing but must not count the present block as detached.
        let blocks = [
            block(0.10, BlockKind::Detached),
            block(0.20, BlockKind::Attached),
            block(0.12, BlockKind::Detached),
            block(0.135, BlockKind::Present),
            block(0.13, BlockKind::Detached),
            block(0.30, BlockKind::Attached),
            block(0.20, BlockKind::Present),
        ];
        let present: Vec<f64> = added_share(&blocks, BlockKind::Present)
            .into_iter()
            .map(|(added, _)| added)
            .collect();
        assert_eq!(present.len(), 2);
        assert!((present[0] - 0.01).abs() < 1e-9, "{present:?}");
        // The last present block has only the detached 0.13 before it, not the attached 0.30.
        assert!((present[1] - 0.07).abs() < 1e-9, "{present:?}");
        let truth = truth_per_hit(&blocks);
        assert!((truth[0] - 90.0).abs() < 1e-6, "{truth:?}");
        assert!((truth[1] - 170.0).abs() < 1e-6, "{truth:?}");
    }

    #[test]
    fn the_interval_of_a_difference_of_medians_holds_it() {
        let a = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0];
        let b = [1.0, 2.0, 3.0];
        let (low, high) = median_difference_interval(&a, &b);
        assert!(low <= 10.5 && 10.5 <= high, "{low}..{high}");
        assert!(low >= 10.0 - 3.0 && high <= 15.0 - 1.0, "{low}..{high}");
        assert!(median_difference_interval(&[], &b).0.is_nan());
    }

    #[test]
    fn cells_are_judged_against_the_median_and_its_interval() {
        let mut tally = Tally::default();
        // The truth 1,000 (800-1,400): 1,240 is within 25% of the median, 1,700 only of
        // 1,400 in the interval, 1,800 of neither, 590 below 0.75 x 800.
        tally.judge("estimate", Some(1240.0), 1000.0, (800.0, 1400.0));
        tally.judge("estimate", Some(1700.0), 1000.0, (800.0, 1400.0));
        tally.judge("estimate", Some(1800.0), 1000.0, (800.0, 1400.0));
        tally.judge("estimate", Some(590.0), 1000.0, (800.0, 1400.0));
        tally.judge("in situ", None, 1000.0, (800.0, 1400.0));
        assert_eq!(
            tally.render(4),
            "Within 25% of the truth's median: estimate 1 of 4, in situ 0 of 4. Within 25% of some value in its 95% interval: estimate 2 of 4, in situ 0 of 4."
        );
        let (low, high) = median_interval(&[9.0, 10.0, 11.0, 10.0, 10.5, 9.5]);
        assert!(
            low <= 10.0 && 10.0 <= high && low >= 9.0 && high <= 11.0,
            "{low}..{high}"
        );
    }

    #[test]
    fn quantiles_and_errors() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.25), 2.0);
        assert_eq!(off_by(125.0, 100.0), "+25%");
        assert_eq!(off_by(1.0, 0.0), "-");
        let bracket = JsonBracket {
            hot: Some(850.0),
            cold: Some(2010.0),
            clock: None,
        };
        assert_eq!(
            by_loop(Some(&bracket), 2000.0),
            "850 (-57%) / 2010 (+0%) / -"
        );
        assert_eq!(by_loop(None, 2000.0), "- / - / -");
    }
}
