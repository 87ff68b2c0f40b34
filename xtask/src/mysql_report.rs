//! `cargo xtask mysql-report`: what probing a live mariadbd costs it, probetop against
//! bpftrace doing the nearest equivalent work, under sysbench; writes docs/mysqld.md.
//!
//! Every sysbench cell (test x client threads) is run with no probe, with probetop
//! (`--preset mysql`) and with bpftrace on the same functions; the variants are
//! interleaved and their order rotated from one repeat to the next, so drift in the
//! machine's background load spreads over every variant instead of biasing one, and
//! the report gives medians with their spread. A second phase attaches one probe at a
//! time to price each site.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};
use std::{fs, thread};

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::{Value, json};

use crate::mysql::{
    HostCpu, MARIADBD, Mariadb, ServerOptions, Stalled, Sysbench, SysbenchResult,
    extra_commands_per_connection, process_cpu,
};
use crate::{Ctx, echo, output_ok, show};

/// Markers around the generated part of docs/mysqld.md; the text outside is kept.
const BEGIN_MARK: &str = "<!-- BEGIN cargo xtask mysql-report: generated, edits are lost -->";
const END_MARK: &str = "<!-- END cargo xtask mysql-report -->";

/// How long a tool may take to attach (bpftrace reads mariadbd's 26 MB of symbols).
const ATTACH_PATIENCE: Duration = Duration::from_secs(180);

#[derive(Debug, Clone)]
pub struct ReportOptions {
    pub quick: bool,
    /// Seconds of each sysbench run.
    pub duration: f64,
    pub repeats: u32,
    pub tests: Vec<String>,
    pub threads: Vec<u32>,
    /// Also price each probe on its own.
    pub per_probe: bool,
    /// Where mysqld.md and mysqld/ go.
    pub out: PathBuf,
    pub tables: u32,
    pub table_size: u32,
    /// The in-situ check on the report's server once its runs are done.
    pub in_situ: Option<crate::insitu_check::CheckOptions>,
}

/// What runs beside sysbench.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Variant {
    None,
    /// probetop with the whole preset, every hit streamed (ring mode, the default).
    Probetop,
    /// probetop with the whole preset in `--mode kernel`: every hit counted in the
    /// kernel, one in 64 timed, no records.
    ProbetopKernel,
    /// bpftrace on the same functions, each probe a hist() of its own ktime delta.
    Bpftrace,
    /// probetop with one spec of the preset.
    Single(String),
}

impl Variant {
    fn label(&self) -> String {
        match self {
            Variant::None => "none".into(),
            Variant::Probetop => "probetop".into(),
            Variant::ProbetopKernel => "probetop --mode kernel".into(),
            Variant::Bpftrace => "bpftrace".into(),
            Variant::Single(spec) => spec.clone(),
        }
    }
}

/// What every cell of the main phase runs, in this order before rotation.
const MAIN_VARIANTS: [Variant; 4] = [
    Variant::None,
    Variant::Probetop,
    Variant::ProbetopKernel,
    Variant::Bpftrace,
];

/// One probe of the preset, resolved in mariadbd.
#[derive(Debug, Clone)]
struct PresetProbe {
    /// As the preset writes it: `uprobe:dispatch_command`.
    spec: String,
    kind: String,
    /// Demangled, with parameters.
    name: String,
    /// As stored in the symbol table (bpftrace needs it).
    symbol: String,
    address: u64,
    first_insn: String,
    emulated: bool,
}

/// Everything measured in one sysbench run.
#[derive(Debug, Clone)]
struct Run {
    test: String,
    threads: u32,
    variant: Variant,
    repeat: u32,
    /// From the one-probe-at-a-time phase (its `none` runs too).
    single_phase: bool,
    sysbench: SysbenchResult,
    wall_s: f64,
    mariadbd_user_s: f64,
    mariadbd_sys_s: f64,
    tool_s: f64,
    /// From SIGINT to the tool's exit: detaching every probe.
    stop_s: f64,
    sysbench_s: f64,
    host: HostCpu,
    /// Per probe (probetop): spec, hits, dropped, handler_ns summary.
    probes: Vec<Value>,
    /// Per map (bpftrace): samples in its histogram.
    bpftrace_counts: BTreeMap<String, u64>,
    /// probetop's export prefix in the work directory.
    export_prefix: Option<PathBuf>,
}

impl Run {
    fn mariadbd_us_per_query(&self) -> f64 {
        per_query_us(
            self.mariadbd_user_s + self.mariadbd_sys_s,
            self.sysbench.queries,
        )
    }
    fn mariadbd_sys_us_per_query(&self) -> f64 {
        per_query_us(self.mariadbd_sys_s, self.sysbench.queries)
    }
    fn total_us_per_query(&self) -> f64 {
        per_query_us(
            self.mariadbd_user_s + self.mariadbd_sys_s + self.tool_s,
            self.sysbench.queries,
        )
    }
    fn tool_cores(&self) -> f64 {
        self.tool_s / self.wall_s.max(1e-9)
    }
    /// CPU of everything else on the machine during the run, in cores.
    fn background_cores(&self) -> f64 {
        let ours = self.mariadbd_user_s + self.mariadbd_sys_s + self.tool_s + self.sysbench_s;
        ((self.host.busy - ours) / self.wall_s.max(1e-9)).max(0.0)
    }
    fn hits(&self) -> u64 {
        self.probes.iter().filter_map(|p| p["hits"].as_u64()).sum()
    }
    fn probe_hits(&self, spec: &str) -> Option<u64> {
        self.probes
            .iter()
            .find(|p| p["spec"] == spec)
            .and_then(|p| p["hits"].as_u64())
    }
    fn dropped(&self) -> u64 {
        self.probes
            .iter()
            .filter_map(|p| p["dropped"].as_u64())
            .sum()
    }
    fn to_json(&self) -> Value {
        json!({
            "test": self.test, "threads": self.threads, "variant": self.variant.label(),
            "repeat": self.repeat, "phase": if self.single_phase { "single" } else { "main" },
            "queries": self.sysbench.queries,
            "transactions": self.sysbench.transactions, "qps": self.sysbench.qps,
            "p95_ms": self.sysbench.p95_ms, "avg_ms": self.sysbench.avg_ms,
            "sysbench_s": self.sysbench.seconds, "errors": self.sysbench.errors,
            "wall_s": self.wall_s, "mariadbd_user_s": self.mariadbd_user_s,
            "mariadbd_sys_s": self.mariadbd_sys_s, "tool_cpu_s": self.tool_s, "tool_stop_s": self.stop_s,
            "sysbench_cpu_s": self.sysbench_s, "host_busy_s": self.host.busy,
            "host_steal_s": self.host.steal, "host_idle_s": self.host.idle,
            "probes": self.probes, "bpftrace_counts": self.bpftrace_counts,
        })
    }
}

fn per_query_us(seconds: f64, queries: u64) -> f64 {
    if queries == 0 {
        return f64::NAN;
    }
    seconds * 1e6 / queries as f64
}

struct Report {
    options: ReportOptions,
    probetop: PathBuf,
    server: Mariadb,
    sysbench: Sysbench,
    probes: Vec<PresetProbe>,
    bpftrace_script: String,
    bpftrace_file: PathBuf,
    work: PathBuf,
    runs: Vec<Run>,
    /// Runs lost to a stall, each with what stalled and where its snapshot is.
    lost: Vec<String>,
    /// The trap calibration: per case, (user, system) ns per call of every repeat.
    traps: Vec<(TrapCase, Vec<(f64, f64)>)>,
    commands: BTreeMap<&'static str, String>,
}

pub fn mysql_report(ctx: &Ctx, options: ReportOptions) -> Result<()> {
    ensure!(
        crate::is_root()?,
        "the report attaches real probes: run it as root"
    );
    crate::install_apt(ctx, &["mariadb-server", "sysbench", "bpftrace", "binutils"])?;
    crate::build(ctx)?;
    let probetop = ctx.target_dir().join("release/probetop");
    ensure!(
        probetop.is_file(),
        "{} is missing after the build",
        probetop.display()
    );
    let preset = fs::read_to_string(ctx.root.join("presets/mysql.txt"))
        .context("reading presets/mysql.txt")?;
    let probes = resolve_preset(&probetop, &preset)?;

    let work = ctx.target_dir().join("mysql-report-work");
    if work.exists() {
        fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let started = Instant::now();
    let uptime_before = uptime();
    let runs_per_phase = options.tests.len() * options.threads.len() * MAIN_VARIANTS.len();
    let single = if options.per_probe {
        probes.len() + 1
    } else {
        0
    };
    let total_runs = (runs_per_phase + single) as u32 * options.repeats;
    println!(
        "mysql-report: {total_runs} sysbench runs of {} s and a trap calibration, about {:.0} min",
        options.duration,
        // Measured: a run takes its duration plus ~4.5 s (attach, detach, the pause
        // between runs); setup, warm-up and the calibration about a minute.
        f64::from(total_runs) * (options.duration + 4.5) / 60.0 + 1.0
    );

    let server = Mariadb::start(&ServerOptions::default())?;
    let sysbench = Sysbench::new(&server, options.tables, options.table_size);
    sysbench.prepare()?;
    let bpftrace_script = bpftrace_script(&probes);
    let bpftrace_file = work.join("mysql.bt");
    fs::write(&bpftrace_file, &bpftrace_script)
        .with_context(|| format!("writing {}", bpftrace_file.display()))?;

    let mut report = Report {
        probetop,
        sysbench,
        probes,
        bpftrace_script,
        bpftrace_file,
        work,
        runs: Vec::new(),
        lost: Vec::new(),
        traps: Vec::new(),
        commands: BTreeMap::new(),
        server,
        options,
    };
    report
        .commands
        .insert("mariadbd", report.server.command_line.clone());
    report.commands.insert(
        "prepare",
        show(report.sysbench.command("oltp_read_only").arg("prepare")),
    );
    report.trap_calibration()?;
    report.warm_up()?;
    report.main_phase()?;
    if report.options.per_probe {
        report.per_probe_phase()?;
    }
    ensure!(
        report.server.ping(),
        "mariadbd stopped answering during the report"
    );
    let uptime_after = uptime();
    let elapsed = started.elapsed();
    report.write(&uptime_before, &uptime_after, elapsed)?;
    if let Some(check) = &report.options.in_situ {
        // Its own tables: point selects on the same 4 x 10,000 rows as insitu-check.
        let sysbench = Sysbench::new(&report.server, 4, 10_000);
        if (report.options.tables, report.options.table_size) != (4, 10_000) {
            sysbench.prepare()?;
        }
        crate::insitu_check::check_on(ctx, &report.probetop, &report.server, &sysbench, check)?;
    }
    Ok(())
}

/// Each spec of the preset as `probetop list` resolves it in mariadbd, with the first
/// instruction at its address.
fn resolve_preset(probetop: &Path, preset: &str) -> Result<Vec<PresetProbe>> {
    let mut probes = Vec::new();
    for line in preset.lines() {
        let spec = line.split('#').next().unwrap_or("").trim();
        if spec.is_empty() {
            continue;
        }
        let (kind, name) = spec
            .split_once(':')
            .with_context(|| format!("preset line {spec:?} is not KIND:NAME"))?;
        let mut cmd = Command::new(probetop);
        cmd.args(["list", "--json", MARIADBD, name]);
        echo(&cmd);
        let out = output_ok(&mut cmd)?;
        let listing: Value =
            serde_json::from_slice(&out.stdout).context("reading probetop list --json")?;
        let points = listing["points"]
            .as_array()
            .context("no points in listing")?;
        let [point] = points.as_slice() else {
            bail!(
                "{spec}: {} points in {MARIADBD}, the report expects one",
                points.len()
            );
        };
        let address = point["address"].as_u64().context("point without address")?;
        let first_insn = first_instruction(address)?;
        probes.push(PresetProbe {
            spec: spec.to_string(),
            kind: kind.to_string(),
            name: point["name"].as_str().unwrap_or(name).to_string(),
            symbol: point["symbol"].as_str().unwrap_or(name).to_string(),
            address,
            emulated: kind == "uretprobe" || emulated(&first_insn),
            first_insn,
        });
    }
    Ok(probes)
}

/// The first instruction of mariadbd at `address`, as objdump prints it.
fn first_instruction(address: u64) -> Result<String> {
    let mut cmd = Command::new("objdump");
    cmd.args(["-d", "--no-show-raw-insn"])
        .arg(format!("--start-address={address:#x}"))
        .arg(format!("--stop-address={:#x}", address + 16))
        .arg(MARIADBD);
    let out = cmd
        .output()
        .with_context(|| format!("running {}", show(&cmd)))?;
    ensure!(out.status.success(), "`{}` failed", show(&cmd));
    let text = String::from_utf8_lossy(&out.stdout);
    // "  83a5d0:\tpush   %rbp"
    text.lines()
        .find_map(|l| {
            let (addr, insn) = l.trim().split_once(":\t")?;
            (u64::from_str_radix(addr, 16).ok()? == address)
                .then(|| insn.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .with_context(|| format!("objdump shows no instruction at {address:#x}"))
}

/// Whether x86-64 uprobes emulate an instruction (arch/x86/kernel/uprobes.c:
/// branch_setup_xol_ops and push_setup_xol_ops: relative jmp/call, jcc, nop, push of a
/// register) instead of single-stepping a copy of it out of line.
fn emulated(insn: &str) -> bool {
    let mnemonic = insn.split_whitespace().next().unwrap_or("");
    let operand = insn.split_whitespace().nth(1).unwrap_or("");
    match mnemonic {
        "push" => operand.starts_with('%'),
        "nop" => operand.is_empty(),
        "jmp" | "call" => !operand.starts_with('*'),
        m => m.starts_with('j'),
    }
}

/// bpftrace doing what probetop's handler does, as near as bpftrace can: read the clock
/// at the start and the end of the handler, and keep a histogram of the difference per
/// probe (an in-kernel log2 hist; probetop sends each hit through a ring buffer).
fn bpftrace_script(probes: &[PresetProbe]) -> String {
    let mut script = String::from(
        "// Written by cargo xtask mysql-report; BEGIN runs once every probe is attached.\n\
         BEGIN { printf(\"ready\\n\"); }\n",
    );
    for p in probes {
        // The map is named after the spec (C++ `::` and all): `@uprobe_A__f` for
        // `uprobe:A::f`, as its .hgrm file is.
        let _ = writeln!(
            script,
            "{}:{MARIADBD}:{} {{ $t = nsecs; @{} = hist(nsecs - $t); }}",
            p.kind,
            p.symbol,
            safe_tag(&p.spec)
        );
    }
    script
}

/// The trap calibration program (see trapcost.c).
const TRAPCOST_C: &str = include_str!("trapcost.c");

/// One case of the trap calibration: which function runs, and which specs probe it.
#[derive(Debug, Clone, PartialEq)]
struct TrapCase {
    label: &'static str,
    function: &'static str,
    specs: &'static [&'static str],
}

const TRAP_CASES: &[TrapCase] = &[
    TrapCase {
        label: "no probe",
        function: "f_push",
        specs: &[],
    },
    TrapCase {
        label: "uprobe, first instruction `push %rbp` (emulated)",
        function: "f_push",
        specs: &["uprobe:f_push"],
    },
    TrapCase {
        label: "uretprobe (entry trap, emulated, + return trap)",
        function: "f_push",
        specs: &["uretprobe:f_push"],
    },
    TrapCase {
        label: "uprobe + uretprobe on the same function",
        function: "f_push",
        specs: &["uprobe:f_push", "uretprobe:f_push"],
    },
    TrapCase {
        label: "uprobe, first instruction `cmp $8,%edi` (single-stepped)",
        function: "f_cmp",
        specs: &["uprobe:f_cmp"],
    },
];

/// `uptime`'s line, or why not.
fn uptime() -> String {
    Command::new("uptime")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("(uptime failed: {e})"))
}

impl Report {
    /// What a hit costs a thread that does nothing else: probetop on a small program's
    /// function whose first instruction is emulated or single-stepped, as entry and
    /// return probe. Explains the per-hit costs measured in mariadbd.
    fn trap_calibration(&mut self) -> Result<()> {
        let source = self.work.join("trapcost.c");
        let binary = self.work.join("trapcost");
        fs::write(&source, TRAPCOST_C).with_context(|| format!("writing {}", source.display()))?;
        crate::run(
            Command::new("cc")
                .args(["-O2", "-o"])
                .arg(&binary)
                .arg(&source),
        )?;
        let calls: u64 = if self.options.quick { 20_000 } else { 100_000 };
        let mut results: Vec<(TrapCase, Vec<(f64, f64)>)> =
            TRAP_CASES.iter().map(|c| (c.clone(), Vec::new())).collect();
        for repeat in 0..self.options.repeats {
            for case in shuffled(TRAP_CASES, u64::from(repeat)) {
                let measured = self.trap_run(&binary, &case, calls)?;
                println!(
                    "mysql-report: trap calibration: {}: user {:.0} ns, system {:.0} ns per call",
                    case.label, measured.0, measured.1
                );
                if let Some((_, values)) = results.iter_mut().find(|(c, _)| *c == case) {
                    values.push(measured);
                }
            }
        }
        self.commands.insert(
            "trapcost",
            format!(
                "cc -O2 -o trapcost xtask/src/trapcost.c && ./trapcost {calls} f_push  # then \
                 probetop --pid PID --no-tui -e uprobe:f_push, and a line on its stdin"
            ),
        );
        self.traps = results;
        Ok(())
    }

    /// One calibration run: (user, system) ns per call.
    fn trap_run(&self, binary: &Path, case: &TrapCase, calls: u64) -> Result<(f64, f64)> {
        let mut cmd = Command::new(binary);
        cmd.arg(calls.to_string())
            .arg(case.function)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", show(&cmd)))?;
        let guard = KillOnDrop(&mut child);
        let stdout = guard.0.stdout.take().context("trapcost's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines.next().transpose()?.unwrap_or_default();
        ensure!(
            ready.starts_with("ready pid="),
            "trapcost printed {ready:?}"
        );
        let mut tool = None;
        if !case.specs.is_empty() {
            let mut p = Command::new(&self.probetop);
            p.arg("--pid").arg(guard.0.id().to_string()).arg("--no-tui");
            for spec in case.specs {
                p.args(["-e", spec]);
            }
            tool = Some(Tool::start(p, "attached", Stream::Stderr)?);
        }
        {
            use std::io::Write as _;
            let stdin = guard.0.stdin.as_mut().context("trapcost's stdin")?;
            stdin.write_all(b"go\n")?;
            stdin.flush()?;
        }
        let result = lines.next().transpose()?.unwrap_or_default();
        let status = guard.0.wait()?;
        ensure!(status.success(), "trapcost failed ({status}): {result}");
        if let Some(mut tool) = tool {
            // It stops by itself when the target exits.
            tool.stop()?;
        }
        let field = |key: &str| -> Result<f64> {
            result
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("no {key}= in trapcost's {result:?}"))
        };
        Ok((field("user_ns")?, field("sys_ns")?))
    }

    /// A short run of every test first: the buffer pool, the table cache and the
    /// prepared-statement paths are warm before anything is measured.
    fn warm_up(&mut self) -> Result<()> {
        let seconds = if self.options.quick { 2.0 } else { 5.0 };
        let threads = self.options.threads.iter().copied().max().unwrap_or(2);
        for test in self.options.tests.clone() {
            self.sysbench.run(&test, threads, seconds)?;
        }
        Ok(())
    }

    fn main_phase(&mut self) -> Result<()> {
        let variants = MAIN_VARIANTS;
        let cells: Vec<(String, u32)> = self
            .options
            .tests
            .iter()
            .flat_map(|t| self.options.threads.iter().map(move |&n| (t.clone(), n)))
            .collect();
        for repeat in 0..self.options.repeats {
            for (i, (test, threads)) in cells.iter().enumerate() {
                for variant in rotated(&variants, repeat as usize + i) {
                    if let Some(run) = self.measure(test, *threads, &variant, repeat, false)? {
                        self.runs.push(run);
                    }
                }
            }
        }
        Ok(())
    }

    /// One probe at a time on the cheapest cell to drive (the first test, fewest
    /// threads), for the probes that fired there in the main phase.
    fn per_probe_phase(&mut self) -> Result<()> {
        let test = self.per_probe_test();
        let threads = self.options.threads.iter().copied().min().unwrap_or(2);
        let fired: Vec<String> = self
            .probes
            .iter()
            .filter(|p| {
                self.runs
                    .iter()
                    .filter(|r| r.test == test && r.variant == Variant::Probetop && !r.single_phase)
                    .any(|r| r.probe_hits(&p.spec).unwrap_or(0) > 0)
            })
            .map(|p| p.spec.clone())
            .collect();
        let mut variants = vec![Variant::None];
        variants.extend(fired.into_iter().map(Variant::Single));
        for repeat in 0..self.options.repeats {
            // Shuffled, not rotated: with six variants a rotation keeps the same
            // neighbours in every repeat, and a periodic background job then lands on
            // the same variant each time.
            for variant in shuffled(&variants, u64::from(repeat)) {
                if let Some(run) = self.measure(&test, threads, &variant, repeat, true)? {
                    self.runs.push(run);
                }
            }
        }
        Ok(())
    }

    fn per_probe_test(&self) -> String {
        if self.options.tests.iter().any(|t| t == "oltp_point_select") {
            "oltp_point_select".into()
        } else {
            self.options.tests.first().cloned().unwrap_or_default()
        }
    }

    /// One run; `None` when it stalled (recorded in `lost`, with a snapshot of where
    /// the threads waited) and the server still answers after the tool is killed.
    fn measure(
        &mut self,
        test: &str,
        threads: u32,
        variant: &Variant,
        repeat: u32,
        single_phase: bool,
    ) -> Result<Option<Run>> {
        let phase = if single_phase { "single" } else { "main" };
        // Names this run's files: its exports, and its snapshot if it stalls.
        let label = format!(
            "{phase}-{test}-t{threads}-r{repeat}-{}",
            safe(&variant.label())
        );
        let export_prefix = match variant {
            Variant::Probetop | Variant::ProbetopKernel | Variant::Single(_) => {
                Some(self.work.join(&label))
            }
            _ => None,
        };
        let mut tool = match variant {
            Variant::None => None,
            Variant::Probetop | Variant::ProbetopKernel | Variant::Single(_) => {
                let prefix = export_prefix.as_ref().context("probetop runs export")?;
                let mut cmd = Command::new(&self.probetop);
                cmd.arg("--pid")
                    .arg(self.server.pid().to_string())
                    .arg("--no-tui");
                match variant {
                    Variant::Single(spec) => cmd.args(["-e", spec]),
                    Variant::ProbetopKernel => cmd.args(["--preset", "mysql", "--mode", "kernel"]),
                    _ => cmd.args(["--preset", "mysql"]),
                };
                for ext in ["json", "hgrm", "svg"] {
                    cmd.arg("-o").arg(prefix.with_extension(ext));
                }
                self.commands
                    .entry(match variant {
                        Variant::Single(_) => "probetop-single",
                        Variant::ProbetopKernel => "probetop-kernel",
                        _ => "probetop",
                    })
                    .or_insert_with(|| show(&cmd));
                Some(Tool::start(cmd, "attached", Stream::Stderr)?)
            }
            Variant::Bpftrace => {
                let mut cmd = Command::new("bpftrace");
                cmd.arg("-p")
                    .arg(self.server.pid().to_string())
                    .arg(&self.bpftrace_file);
                self.commands
                    .entry("bpftrace")
                    .or_insert_with(|| show(&cmd));
                Some(Tool::start(cmd, "ready", Stream::Stdout)?)
            }
        };
        // Let attach-time work (and bpftrace's symbol loading) finish before the window.
        if tool.is_some() {
            thread::sleep(Duration::from_millis(500));
        }
        println!(
            "mysql-report: {test} threads={threads} {} repeat {}",
            variant.label(),
            repeat + 1
        );
        self.commands.entry("sysbench").or_insert_with(|| {
            show(
                &self
                    .sysbench
                    .run_command(test, threads, self.options.duration),
            )
        });

        let host0 = HostCpu::now()?;
        let (mu0, ms0) = process_cpu(self.server.pid(), false)?;
        let tool0 = match &tool {
            Some(t) => cpu_sum(process_cpu(t.pid, false)?),
            None => 0.0,
        };
        let kids0 = cpu_sum(process_cpu(std::process::id(), true)?);
        let t0 = Instant::now();
        let result = self.sysbench.run(test, threads, self.options.duration);
        let wall_s = t0.elapsed().as_secs_f64();
        let kids1 = cpu_sum(process_cpu(std::process::id(), true)?);
        let tool1 = match &tool {
            Some(t) => cpu_sum(process_cpu(t.pid, false)?),
            None => 0.0,
        };
        let (mu1, ms1) = process_cpu(self.server.pid(), false)?;
        let host = HostCpu::now()?.since(host0);

        let stopping = Instant::now();
        let output = tool.as_mut().map(Tool::stop);
        let stop_s = stopping.elapsed().as_secs_f64();
        let stalled = [
            result.as_ref().err(),
            output.as_ref().and_then(|o| o.as_ref().err()),
        ]
        .into_iter()
        .flatten()
        .find_map(|e| e.downcast_ref::<Stalled>())
        .map(ToString::to_string);
        if let Some(stalled) = stalled {
            let name = format!("{label}-stalled.txt");
            let path = self.work.join(&name);
            let mut watched = vec![("mariadbd", self.server.pid())];
            if let Some(t) = &tool {
                watched.push(("tool", t.pid));
            }
            fs::write(&path, format!("{stalled}\n\n{}", thread_snapshot(&watched)))
                .with_context(|| format!("writing {}", path.display()))?;
            drop(tool);
            ensure!(
                self.server.ping(),
                "{stalled}; mariadbd no longer answers even with the tool killed (where its threads waited: {})",
                path.display()
            );
            let lost = format!(
                "{test} threads={threads} {} repeat {}: {stalled}; killed, the server answered again; where the threads waited: [mysqld/{name}](mysqld/{name})",
                variant.label(),
                repeat + 1,
            );
            println!("mysql-report: LOST {lost}");
            self.lost.push(lost);
            return Ok(None);
        }
        let output = output.transpose()?;
        let sysbench = result?;
        let mut run = Run {
            test: test.to_string(),
            threads,
            variant: variant.clone(),
            repeat,
            single_phase,
            sysbench,
            wall_s,
            mariadbd_user_s: mu1 - mu0,
            mariadbd_sys_s: ms1 - ms0,
            tool_s: tool1 - tool0,
            stop_s,
            sysbench_s: kids1 - kids0,
            host,
            probes: Vec::new(),
            bpftrace_counts: BTreeMap::new(),
            export_prefix: export_prefix.clone(),
        };
        match variant {
            Variant::Probetop | Variant::ProbetopKernel | Variant::Single(_) => {
                let path = export_prefix
                    .context("probetop runs export")?
                    .with_extension("json");
                let text =
                    fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                let json: Value = serde_json::from_slice(&text)
                    .with_context(|| format!("reading {}", path.display()))?;
                run.probes = json["probes"].as_array().cloned().unwrap_or_default();
            }
            Variant::Bpftrace => {
                let text = output.unwrap_or_default();
                run.bpftrace_counts = bpftrace_counts(&text);
                // `{label}.txt`: the variant's label is "bpftrace".
                fs::write(self.work.join(format!("{label}.txt")), &text)
                    .context("saving bpftrace's output")?;
            }
            Variant::None => {}
        }
        println!(
            "mysql-report:   {:.0} QPS, p95 {:.2} ms, mariadbd {:.1} us/query, tool {:.1}% of a core, {} hits, {} dropped",
            run.sysbench.qps,
            run.sysbench.p95_ms,
            run.mariadbd_us_per_query(),
            run.tool_cores() * 100.0,
            run.hits() + run.bpftrace_counts.values().sum::<u64>(),
            run.dropped()
        );
        ensure!(
            self.server.ping(),
            "mariadbd stopped answering after {test} threads={threads} {}",
            variant.label()
        );
        thread::sleep(Duration::from_secs(1));
        Ok(Some(run))
    }
}

/// `items` starting at `by` (mod len): the order variants run in, per repeat and cell.
fn rotated<T: Clone>(items: &[T], by: usize) -> Vec<T> {
    let n = items.len().max(1);
    (0..items.len())
        .map(|i| items[(i + by) % n].clone())
        .collect()
}

/// `items` in an order fixed by `seed` (Fisher-Yates with xorshift64*): reproducible
/// from one report to the next, different from one repeat to the next.
fn shuffled<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
    let mut state = seed.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut out = items.to_vec();
    for i in (1..out.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        out.swap(i, j);
    }
    out
}

fn cpu_sum((user, system): (f64, f64)) -> f64 {
    user + system
}

/// A label as a file-name part.
fn safe(label: &str) -> String {
    label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Samples per histogram in bpftrace's printout (`@name:` then `[lo, hi) count |@@@|`).
fn bpftrace_counts(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('@') {
            current = Some(name.trim_end_matches(':').trim().to_string());
            continue;
        }
        if let (Some(name), Some(rest)) = (&current, line.strip_prefix('[')) {
            let count = rest
                .split_once(')')
                .or_else(|| rest.split_once(']'))
                .and_then(|(_, after)| after.split_whitespace().next())
                .and_then(|c| c.parse::<u64>().ok())
                .unwrap_or(0);
            *counts.entry(name.clone()).or_insert(0) += count;
        }
    }
    counts
}

// ---------------------------------------------------------------------------------------
// Tools beside the load

#[derive(Clone, Copy)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// How long a tool may take to exit after SIGINT before its run counts as stalled.
const TOOL_STOP_PATIENCE: Duration = Duration::from_secs(120);

/// probetop or bpftrace, attached and running; stopped with SIGINT like a user would.
pub struct Tool {
    child: Child,
    pid: u32,
    lines: mpsc::Receiver<String>,
    command: String,
}

impl Tool {
    /// Starts `cmd` and waits for a line containing `ready` on `stream`.
    pub fn start(mut cmd: Command, ready: &str, stream: Stream) -> Result<Self> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let command = show(&cmd);
        let mut child = cmd.spawn().with_context(|| format!("starting {command}"))?;
        let (tx, lines) = mpsc::channel();
        for (out, name) in [
            (
                child
                    .stdout
                    .take()
                    .map(|o| Box::new(o) as Box<dyn Read + Send>),
                Stream::Stdout,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|e| Box::new(e) as Box<dyn Read + Send>),
                Stream::Stderr,
            ),
        ] {
            let Some(out) = out else { continue };
            let tx = tx.clone();
            let tag = matches!(
                (name, stream),
                (Stream::Stdout, Stream::Stdout) | (Stream::Stderr, Stream::Stderr)
            );
            thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    // The readiness stream is marked so a match on the other is ignored.
                    let line = if tag {
                        format!("+{line}")
                    } else {
                        format!("-{line}")
                    };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let mut tool = Tool {
            pid: child.id(),
            child,
            lines,
            command,
        };
        let deadline = Instant::now() + ATTACH_PATIENCE;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tool.lines.recv_timeout(left) {
                Ok(line) if line.starts_with('+') && line.contains(ready) => break,
                Ok(line) => seen.push(line[1..].to_string()),
                Err(_) => {
                    let _ = tool.child.kill();
                    let _ = tool.child.wait();
                    bail!(
                        "{} did not print {ready:?} within {ATTACH_PATIENCE:?}; it printed:\n{}",
                        tool.command,
                        seen.join("\n")
                    );
                }
            }
        }
        Ok(tool)
    }

    /// SIGINT, then everything it printed; an error if it fails or lingers.
    pub fn stop(&mut self) -> Result<String> {
        // SAFETY: kill(2) on our own unreaped child's pid: it cannot name another process.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGINT) };
        // bpftrace takes seconds to exit: it detaches probe by probe, and the kernel waits
        // for an RCU grace period each time, which the machine's load stretches. Two
        // minutes is far beyond that; bpftrace 0.17 sometimes never exits (a lost run).
        let deadline = Instant::now() + TOOL_STOP_PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().context("waiting for a tool")? {
                break status;
            }
            if Instant::now() > deadline {
                // Left running for the caller to look at; killed when dropped.
                return Err(Stalled(format!(
                    "{} did not stop within {} s of SIGINT",
                    self.command,
                    TOOL_STOP_PATIENCE.as_secs()
                ))
                .into());
            }
            thread::sleep(Duration::from_millis(20));
        };
        let mut text = String::new();
        // The readers end at EOF, which follows the exit.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            text.push_str(&line[1..]);
            text.push('\n');
        }
        ensure!(
            status.success(),
            "{} failed ({status}):\n{text}",
            self.command
        );
        Ok(text)
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Where every thread of each process waits: its state, wchan and kernel stack (root
/// reads /proc/PID/task/TID/stack), for a run that stalled.
fn thread_snapshot(processes: &[(&str, u32)]) -> String {
    let mut out = String::new();
    for (name, pid) in processes {
        let _ = writeln!(out, "== {name} (pid {pid})");
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            let _ = writeln!(out, "(gone)");
            continue;
        };
        for task in tasks.flatten() {
            let dir = task.path();
            let read = |file: &str| fs::read_to_string(dir.join(file)).unwrap_or_default();
            let state = read("status")
                .lines()
                .find(|l| l.starts_with("State:"))
                .unwrap_or("")
                .to_string();
            let _ = writeln!(
                out,
                "-- tid {} {} {state} wchan={}\n{}",
                task.file_name().to_string_lossy(),
                read("comm").trim(),
                read("wchan").trim(),
                read("stack")
            );
        }
    }
    out
}

/// Kills and reaps a child on drop unless it was already reaped.
pub struct KillOnDrop<'a>(pub &'a mut Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Statistics

/// Median and range of some numbers (NaN-free).
#[derive(Debug, Clone, Copy)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

fn spread(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Spread {
        median,
        min: v[0],
        max: v[n - 1],
    })
}

fn pct(new: f64, base: f64) -> String {
    if !(new.is_finite() && base.is_finite()) || base == 0.0 {
        return "-".into();
    }
    format!("{:+.1}%", (new / base - 1.0) * 100.0)
}

/// `median (min-max)` with `digits` decimals; one number when there is one run.
fn show_spread(s: Option<Spread>, digits: usize) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.min == s.max => format!("{:.*}", digits, s.median),
        Some(s) => format!(
            "{:.*} ({:.*}-{:.*})",
            digits, s.median, digits, s.min, digits, s.max
        ),
    }
}

// ---------------------------------------------------------------------------------------
// Writing the report

impl Report {
    /// Runs of one cell and variant in one phase.
    fn runs_of(
        &self,
        test: &str,
        threads: u32,
        variant: &Variant,
        single_phase: bool,
    ) -> Vec<&Run> {
        self.runs
            .iter()
            .filter(|r| {
                r.test == test
                    && r.threads == threads
                    && &r.variant == variant
                    && r.single_phase == single_phase
            })
            .collect()
    }

    fn cells(&self) -> Vec<(String, u32)> {
        self.options
            .tests
            .iter()
            .flat_map(|t| self.options.threads.iter().map(move |&n| (t.clone(), n)))
            .collect()
    }

    fn write(&self, uptime_before: &str, uptime_after: &str, elapsed: Duration) -> Result<()> {
        let out = &self.options.out;
        let files = out.join("mysqld");
        fs::create_dir_all(&files).with_context(|| format!("creating {}", files.display()))?;
        // Only this report's files: stale exports of an earlier report would mislead.
        for entry in fs::read_dir(&files).with_context(|| format!("listing {}", files.display()))? {
            let path = entry?.path();
            if path
                .extension()
                .is_some_and(|e| ["hgrm", "svg", "json", "txt"].iter().any(|x| e == *x))
            {
                fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            }
        }
        // The snapshots of stalled runs go with the report.
        for entry in
            fs::read_dir(&self.work).with_context(|| format!("listing {}", self.work.display()))?
        {
            let path = entry?.path();
            if let Some(name) = path
                .file_name()
                .filter(|n| n.to_string_lossy().ends_with("-stalled.txt"))
            {
                fs::copy(&path, files.join(name))
                    .with_context(|| format!("copying {}", path.display()))?;
            }
        }
        let section = self.section(uptime_before, uptime_after, elapsed, &files)?;
        let doc_path = out.join("mysqld.md");
        let existing = fs::read_to_string(&doc_path).unwrap_or_default();
        fs::write(&doc_path, splice(&existing, &section))
            .with_context(|| format!("writing {}", doc_path.display()))?;
        let raw = json!({
            "uptime_before": uptime_before, "uptime_after": uptime_after,
            "elapsed_s": elapsed.as_secs_f64(),
            "options": {
                "quick": self.options.quick,
                "duration_s": self.options.duration, "repeats": self.options.repeats,
                "tests": self.options.tests, "threads": self.options.threads,
                "tables": self.options.tables, "table_size": self.options.table_size,
            },
            "probes": self.probes.iter().map(|p| json!({
                "spec": p.spec, "name": p.name, "symbol": p.symbol, "address": p.address,
                "first_instruction": p.first_insn, "emulated": p.emulated,
            })).collect::<Vec<_>>(),
            "runs": self.runs.iter().map(Run::to_json).collect::<Vec<_>>(),
            "lost": self.lost,
            "trap_calibration": self.traps.iter().map(|(c, v)| json!({
                "case": c.label, "specs": c.specs,
                "user_ns_per_call": v.iter().map(|(u, _)| *u).collect::<Vec<_>>(),
                "sys_ns_per_call": v.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        let raw_path = files.join("runs.json");
        fs::write(&raw_path, serde_json::to_string_pretty(&raw)?)
            .with_context(|| format!("writing {}", raw_path.display()))?;
        println!(
            "mysql-report: wrote {} and {}/",
            doc_path.display(),
            files.display()
        );
        Ok(())
    }

    /// The generated part of docs/mysqld.md.
    fn section(
        &self,
        uptime_before: &str,
        uptime_after: &str,
        elapsed: Duration,
        files: &Path,
    ) -> Result<String> {
        let o = &self.options;
        let mut md = String::new();
        let w = &mut md;
        let _ = writeln!(w, "## Measured\n");
        let mut args = Vec::new();
        if o.quick {
            args.push("--quick".to_string());
        }
        let _ = writeln!(
            w,
            "`cargo xtask mysql-report {}--duration {} --repeats {} --tests {} --threads {}` \
             ran {} sysbench runs in {:.1} min, finishing {} (UTC).\n",
            args.iter().map(|a| format!("{a} ")).collect::<String>(),
            o.duration,
            o.repeats,
            o.tests.join(","),
            o.threads
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            self.runs.len(),
            elapsed.as_secs_f64() / 60.0,
            utc_now()
        );
        let _ = writeln!(w, "| | |\n|---|---|");
        for (what, value) in self.machine() {
            let _ = writeln!(w, "| {what} | {value} |");
        }
        let _ = writeln!(w, "| `uptime` before | {uptime_before} |");
        let _ = writeln!(w, "| `uptime` after | {uptime_after} |");
        let background = spread(self.runs.iter().map(Run::background_cores));
        let steal = spread(self.runs.iter().map(|r| r.host.steal / r.wall_s.max(1e-9)));
        let _ = writeln!(
            w,
            "| CPU of other processes during a run (cores) | {} |",
            show_spread(background, 2)
        );
        let _ = writeln!(
            w,
            "| steal during a run (cores) | {} |\n",
            show_spread(steal, 2)
        );
        if !self.lost.is_empty() {
            let _ = writeln!(
                w,
                "**{} run{} lost** to a stall (the tables have fewer repeats there):\n",
                self.lost.len(),
                if self.lost.len() == 1 { "" } else { "s" }
            );
            for lost in &self.lost {
                let _ = writeln!(w, "- {lost}");
            }
            let _ = writeln!(w);
        }

        self.overhead_table(w);
        self.per_hit_table(w);
        self.trap_table(w);
        if o.per_probe {
            self.single_table(w);
        }
        self.handler_tables(w, files)?;
        self.dispatch_check(w);
        self.commands_section(w);
        Ok(md)
    }

    fn machine(&self) -> Vec<(&'static str, String)> {
        let first = |cmd: &mut Command| -> String {
            cmd.output()
                .ok()
                .map(|o| {
                    let text = String::from_utf8_lossy(&o.stdout).into_owned()
                        + &String::from_utf8_lossy(&o.stderr);
                    text.lines().next().unwrap_or("").trim().to_string()
                })
                .unwrap_or_default()
        };
        let cpu = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_default();
        let cpus = thread::available_parallelism().map_or(0, |n| n.get());
        vec![
            ("CPUs", format!("{cpus} x {cpu}")),
            ("kernel", first(Command::new("uname").arg("-r"))),
            ("server", first(Command::new(MARIADBD).arg("--version"))),
            ("sysbench", first(Command::new("sysbench").arg("--version"))),
            ("bpftrace", first(Command::new("bpftrace").arg("--version"))),
            (
                "data",
                format!(
                    "{} tables of {} rows, InnoDB buffer pool {} MiB (the data fits: CPU-bound)",
                    self.options.tables,
                    self.options.table_size,
                    ServerOptions::default().buffer_pool_mib
                ),
            ),
        ]
    }

    /// The agent study's shape: QPS drop, latency increase, CPU per 10k QPS.
    fn overhead_table(&self, w: &mut String) {
        let _ = writeln!(
            w,
            "### Overhead on the server\n\n\
             Medians over the repeats, (min-max) where there are several. QPS and p95 are \
             sysbench's (p95 of a whole transaction: 14 statements in read_only, 18 in \
             read_write, 1 in point_select). mariadbd CPU is utime+stime from /proc over \
             the sysbench run, per statement; a probe's trap and handler run in the \
             probed thread, so they land in it. Tool CPU is probetop's (or bpftrace's) own \
             process. Added CPU per 10k QPS is (mariadbd + tool CPU per statement) minus \
             mariadbd's without probes, as percent of one core at 10,000 statements/s. \
             Other load is the CPU of every other process on the machine during the run \
             (from /proc/stat), in cores of the 2: the noise the interleaving spreads. \
             Detach is the time from SIGINT to the tool's exit.\n"
        );
        let _ = writeln!(
            w,
            "| test | threads | probes | QPS | QPS drop | p95 ms | p95 increase | mariadbd us/query | tool CPU % of a core | added CPU per 10k QPS | probe hits/query | other load (cores) | detach s |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (test, threads) in self.cells() {
            let base = self.runs_of(&test, threads, &Variant::None, false);
            let base_qps = spread(base.iter().map(|r| r.sysbench.qps));
            let base_p95 = spread(base.iter().map(|r| r.sysbench.p95_ms));
            let base_cpu = spread(base.iter().map(|r| r.mariadbd_us_per_query()));
            for variant in MAIN_VARIANTS {
                let runs = self.runs_of(&test, threads, &variant, false);
                let qps = spread(runs.iter().map(|r| r.sysbench.qps));
                let p95 = spread(runs.iter().map(|r| r.sysbench.p95_ms));
                let cpu = spread(runs.iter().map(|r| r.mariadbd_us_per_query()));
                let tool = spread(runs.iter().map(|r| r.tool_cores() * 100.0));
                let total = spread(runs.iter().map(|r| r.total_us_per_query()));
                let hits = spread(runs.iter().map(|r| self.hits_per_query(r)));
                let background = spread(runs.iter().map(|r| r.background_cores()));
                let detach = spread(runs.iter().map(|r| r.stop_s));
                let (drop, increase, added) = if variant == Variant::None {
                    ("-".to_string(), "-".to_string(), "-".to_string())
                } else {
                    (
                        pct(med(qps), med(base_qps)),
                        pct(med(p95), med(base_p95)),
                        // us per statement = % of a core at 10k statements/s.
                        format!("{:.1}%", med(total) - med(base_cpu)),
                    )
                };
                let _ = writeln!(
                    w,
                    "| {test} | {threads} | {} | {} | {drop} | {} | {increase} | {} | {} | {added} | {} | {:.2} | {} |",
                    variant.label(),
                    show_spread(qps, 0),
                    show_spread(p95, 2),
                    show_spread(cpu, 1),
                    if variant == Variant::None {
                        "-".into()
                    } else {
                        show_spread(tool, 1)
                    },
                    if variant == Variant::None {
                        "-".into()
                    } else {
                        format!("{:.2}", med(hits))
                    },
                    med(background),
                    if variant == Variant::None {
                        "-".into()
                    } else {
                        format!("{:.1}", med(detach))
                    },
                );
            }
        }
        let _ = writeln!(w);
    }

    /// Probe hits per sysbench statement: probetop's counts, or bpftrace's histograms.
    fn hits_per_query(&self, run: &Run) -> f64 {
        let hits = match run.variant {
            Variant::Bpftrace => run.bpftrace_counts.values().sum(),
            _ => run.hits(),
        };
        if run.sysbench.queries == 0 {
            return f64::NAN;
        }
        hits as f64 / run.sysbench.queries as f64
    }

    fn per_hit_table(&self, w: &mut String) {
        let _ = writeln!(
            w,
            "### What one hit costs the server\n\n\
             The added mariadbd CPU per statement (medians) divided by the probe hits per \
             statement. The system part is the trap, the kernel's uprobe dispatch, the BPF \
             program and the return to user space, as the probed thread pays them; the \
             total also holds what the server does differently when it runs slower \
             (InnoDB spin loops, fewer statements per wakeup) and, for a single-stepped \
             site, the user-mode step itself. Small differences are within the noise of \
             the runs (see the spreads above).\n"
        );
        let _ = writeln!(
            w,
            "| test | threads | probes | hits/query | added mariadbd us/query | of which system | us per hit | system us per hit |\n\
             |---|---:|---|---:|---:|---:|---:|---:|"
        );
        for (test, threads) in self.cells() {
            let base = self.runs_of(&test, threads, &Variant::None, false);
            let base_cpu = med(spread(base.iter().map(|r| r.mariadbd_us_per_query())));
            let base_sys = med(spread(base.iter().map(|r| r.mariadbd_sys_us_per_query())));
            for variant in [
                Variant::Probetop,
                Variant::ProbetopKernel,
                Variant::Bpftrace,
            ] {
                let runs = self.runs_of(&test, threads, &variant, false);
                let cpu = med(spread(runs.iter().map(|r| r.mariadbd_us_per_query())));
                let sys = med(spread(runs.iter().map(|r| r.mariadbd_sys_us_per_query())));
                let hits = med(spread(runs.iter().map(|r| self.hits_per_query(r))));
                let _ = writeln!(
                    w,
                    "| {test} | {threads} | {} | {hits:.2} | {:.2} | {:.2} | {} | {} |",
                    variant.label(),
                    cpu - base_cpu,
                    sys - base_sys,
                    per(cpu - base_cpu, hits),
                    per(sys - base_sys, hits),
                );
            }
        }
        let _ = writeln!(w);
    }

    fn trap_table(&self, w: &mut String) {
        if self.traps.is_empty() {
            return;
        }
        let _ = writeln!(
            w,
            "### The trap alone\n\n\
             probetop (`--no-tui`, ring mode, as above) on a small program that only calls \
             one function in a loop (`xtask/src/trapcost.c`), CPU time per call from \
             getrusage; medians of {} runs. This is the price of a hit with nothing of \
             mariadbd around it: the breakpoint trap, the kernel's uprobe lookup, the BPF \
             program, the return to user space, and for the single-stepped site a second \
             trap after executing the copied instruction out of line.\n",
            self.options.repeats
        );
        let _ = writeln!(
            w,
            "| case | user ns/call | system ns/call | added ns per call |\n|---|---:|---:|---:|"
        );
        let total = |v: &[(f64, f64)]| {
            med(spread(v.iter().map(|(u, _)| *u))) + med(spread(v.iter().map(|(_, s)| *s)))
        };
        let base = self
            .traps
            .iter()
            .find(|(c, _)| c.specs.is_empty())
            .map_or(f64::NAN, |(_, v)| total(v));
        for (case, values) in &self.traps {
            let user = med(spread(values.iter().map(|(u, _)| *u)));
            let sys = med(spread(values.iter().map(|(_, s)| *s)));
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} |",
                case.label,
                fmt0(user),
                fmt0(sys),
                if case.specs.is_empty() {
                    "-".into()
                } else {
                    fmt0(total(values) - base)
                }
            );
        }
        let _ = writeln!(w);
    }

    fn single_table(&self, w: &mut String) {
        let test = self.per_probe_test();
        let threads = self.options.threads.iter().copied().min().unwrap_or(2);
        let base = self.runs_of(&test, threads, &Variant::None, true);
        let base_cpu = med(spread(base.iter().map(|r| r.mariadbd_us_per_query())));
        let base_sys = med(spread(base.iter().map(|r| r.mariadbd_sys_us_per_query())));
        let base_qps = med(spread(base.iter().map(|r| r.sysbench.qps)));
        let _ = writeln!(
            w,
            "### One probe at a time\n\n\
             {test} with {threads} threads, probetop attached with one spec of the preset \
             (in a shuffled order with runs without probes: {} QPS, {:.1} us of mariadbd \
             CPU per query, medians). The first instruction decides how the kernel resumes the \
             probed thread: it emulates a relative jmp/call, jcc, nop and push of a \
             register; any other instruction is copied out of line and single-stepped, \
             a second trap. A uretprobe traps at the return address the uprobe planted at \
             entry, so it costs an entry trap and a return trap. Probes that never fired \
             in {test} are left out.\n",
            fmt0(base_qps),
            base_cpu
        );
        let _ = writeln!(
            w,
            "| probe | first instruction | kernel | hits/query | QPS drop | added mariadbd us/query | of which system | us per hit | system us per hit | handler p50 ns | other load (cores) |\n\
             |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for p in &self.probes {
            let variant = Variant::Single(p.spec.clone());
            let runs = self.runs_of(&test, threads, &variant, true);
            if runs.is_empty() {
                continue;
            }
            let cpu = med(spread(runs.iter().map(|r| r.mariadbd_us_per_query())));
            let sys = med(spread(runs.iter().map(|r| r.mariadbd_sys_us_per_query())));
            let qps = med(spread(runs.iter().map(|r| r.sysbench.qps)));
            let hits = med(spread(runs.iter().map(|r| self.hits_per_query(r))));
            let background = spread(runs.iter().map(|r| r.background_cores()));
            let p50 = med(spread(runs.iter().filter_map(|r| {
                r.probes
                    .first()
                    .and_then(|p| p["handler_ns"]["p50"].as_f64())
            })));
            let kernel = if p.kind == "uretprobe" {
                "entry + return trap"
            } else if p.emulated {
                "emulated"
            } else {
                "single-stepped"
            };
            let _ = writeln!(
                w,
                "| `{}` | `{}` | {kernel} | {hits:.2} | {} | {:.2} | {:.2} | {} | {} | {} | {} |",
                p.spec,
                p.first_insn,
                pct(qps, base_qps),
                cpu - base_cpu,
                sys - base_sys,
                per(cpu - base_cpu, hits),
                per(sys - base_sys, hits),
                fmt0(p50),
                show_spread(background, 2)
            );
        }
        let _ = writeln!(w);
    }

    /// probetop's own histograms of its handler time, per probe, from the median-QPS
    /// probetop run of each cell; their .hgrm and .svg exports are copied next to the doc.
    fn handler_tables(&self, w: &mut String, files: &Path) -> Result<()> {
        let _ = writeln!(
            w,
            "### probetop's handler time per hit\n\n\
             What probetop measures and shows: from the first to the last instruction of \
             its BPF program, per hit (the trap around it is not included: compare with \
             the cost per hit above). From the probetop run with the median QPS of each \
             cell; the full distributions are in `mysqld/*.hgrm` (HdrHistogram's \
             percentile format: plot them with HdrHistogram's plotter), the plots in \
             `mysqld/*.svg`.\n"
        );
        let mut first_svg = None;
        for (test, threads) in self.cells() {
            let runs = self.runs_of(&test, threads, &Variant::Probetop, false);
            let Some(run) = self.representative(&runs) else {
                continue;
            };
            let stem = format!("{test}-t{threads}");
            let copied = self.copy_exports(run, files, &stem)?;
            let _ = writeln!(
                w,
                "**{test}, {threads} threads** ({:.0} QPS, repeat {}; [{stem}.svg](mysqld/{stem}.svg))\n",
                run.sysbench.qps,
                run.repeat + 1
            );
            let _ = writeln!(
                w,
                "| probe | hits | dropped | p50 ns | p90 ns | p99 ns | p99.9 ns | max ns | histogram |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|---|"
            );
            for p in &run.probes {
                let h = &p["handler_ns"];
                let spec = p["spec"].as_str().unwrap_or("?");
                let file = copied
                    .iter()
                    .find(|f| f.contains(&format!(".{}.", safe_tag(spec))))
                    .map(|f| format!("[{f}](mysqld/{f})"))
                    .unwrap_or_default();
                let _ = writeln!(
                    w,
                    "| `{spec}` | {} | {} | {} | {} | {} | {} | {} | {file} |",
                    p["hits"], p["dropped"], h["p50"], h["p90"], h["p99"], h["p999"], h["max"]
                );
            }
            let _ = writeln!(w);
            if first_svg.is_none() {
                first_svg = Some(stem);
            }
        }
        if let Some(stem) = first_svg {
            let _ = writeln!(
                w,
                "![probetop's handler time percentiles, {stem}](mysqld/{stem}.svg)\n"
            );
        }
        // bpftrace's log2 histograms of the same cell, for comparison.
        let (test, threads) = self.cells().into_iter().next().unwrap_or_default();
        let bt = self.runs_of(&test, threads, &Variant::Bpftrace, false);
        if let Some(run) = self.representative(&bt) {
            let path = self.work.join(format!(
                "main-{test}-t{threads}-r{}-bpftrace.txt",
                run.repeat
            ));
            if let Ok(text) = fs::read_to_string(&path) {
                let name = format!("{test}-t{threads}-bpftrace.txt");
                fs::write(files.join(&name), &text).with_context(|| format!("writing {name}"))?;
                let _ = writeln!(
                    w,
                    "bpftrace's own histograms of its handler time in the same cell (ns, \
                     log2 buckets): [mysqld/{name}](mysqld/{name}).\n"
                );
            }
        }
        Ok(())
    }

    /// The run with the median QPS.
    fn representative<'r>(&self, runs: &[&'r Run]) -> Option<&'r Run> {
        let mut sorted: Vec<&Run> = runs.to_vec();
        sorted.sort_by(|a, b| a.sysbench.qps.total_cmp(&b.sysbench.qps));
        sorted.get(sorted.len() / 2).copied()
    }

    /// Copies a probetop run's .hgrm and .svg exports to `files` as `stem.*`; returns the
    /// file names.
    fn copy_exports(&self, run: &Run, files: &Path, stem: &str) -> Result<Vec<String>> {
        let prefix = run
            .export_prefix
            .as_ref()
            .context("a probetop run without exports")?;
        let base = prefix
            .file_name()
            .context("export prefix without a name")?
            .to_string_lossy()
            .into_owned();
        let mut copied = Vec::new();
        for entry in fs::read_dir(&self.work).context("listing the work directory")? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let Some(rest) = name.strip_prefix(&base) else {
                continue;
            };
            if !(rest.ends_with(".hgrm") || rest == ".svg") {
                continue;
            }
            let to = format!("{stem}{rest}");
            fs::copy(&path, files.join(&to))
                .with_context(|| format!("copying {} to {}", path.display(), to))?;
            copied.push(to);
        }
        copied.sort();
        Ok(copied)
    }

    fn dispatch_check(&self, w: &mut String) {
        let Some(dispatch) = self
            .probes
            .iter()
            .find(|p| p.kind == "uprobe" && p.spec.ends_with(":dispatch_command"))
        else {
            return;
        };
        let ret = self
            .probes
            .iter()
            .find(|p| p.kind == "uretprobe" && p.spec.ends_with(":dispatch_command"));
        let _ = writeln!(
            w,
            "### Every command counted\n\n\
             probetop attaches before sysbench connects and detaches after it has \
             disconnected, so dispatch_command must fire once for each statement sysbench \
             counts plus, per connection, one COM_STMT_PREPARE and one COM_STMT_CLOSE for \
             each statement it prepares and one COM_QUIT (`extra`). Every probetop run, \
             streamed (ring) or counted in the kernel:\n"
        );
        let _ = writeln!(
            w,
            "| test | threads | mode | repeat | sysbench queries | extra | expected | uprobe hits | uretprobe hits | dropped (all probes) |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        let mut all_match = true;
        for run in self
            .runs
            .iter()
            .filter(|r| matches!(r.variant, Variant::Probetop | Variant::ProbetopKernel))
        {
            let extra = extra_commands_per_connection(&run.test, self.options.tables)
                .map(|e| e * u64::from(run.threads));
            let entry = run.probe_hits(&dispatch.spec);
            let exit = ret.and_then(|r| run.probe_hits(&r.spec));
            let expected = extra.map(|e| e + run.sysbench.queries);
            all_match &= expected.is_some() && expected == entry && entry == exit;
            let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                run.test,
                run.threads,
                if run.variant == Variant::ProbetopKernel {
                    "kernel"
                } else {
                    "ring"
                },
                run.repeat + 1,
                run.sysbench.queries,
                opt(extra),
                opt(expected),
                opt(entry),
                opt(exit),
                run.dropped()
            );
        }
        let _ = writeln!(
            w,
            "\n{}\n",
            if all_match {
                "Every run: hits = expected, entry = return."
            } else {
                "**Some runs differ from the expected count: see the rows above.**"
            }
        );
    }

    fn commands_section(&self, w: &mut String) {
        let _ = writeln!(
            w,
            "### Exact commands\n\nAs the report ran them (the pid, socket and paths are \
             this run's):\n"
        );
        let _ = writeln!(w, "```sh");
        for key in [
            "mariadbd",
            "prepare",
            "sysbench",
            "probetop",
            "probetop-kernel",
            "bpftrace",
            "probetop-single",
            "trapcost",
        ] {
            if let Some(cmd) = self.commands.get(key) {
                let _ = writeln!(w, "# {key}\n{cmd}");
            }
        }
        let _ = writeln!(
            w,
            "```\n\nThe bpftrace script (`mysql.bt`):\n\n```\n{}```\n",
            self.bpftrace_script
        );
    }
}

/// `total / hits` with two decimals, `-` without hits.
fn per(total: f64, hits: f64) -> String {
    if hits > 0.0 && total.is_finite() {
        format!("{:.2}", total / hits)
    } else {
        "-".into()
    }
}

fn med(s: Option<Spread>) -> f64 {
    s.map_or(f64::NAN, |s| s.median)
}

fn fmt0(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.0}")
    } else {
        "-".into()
    }
}

/// The tag probetop's .hgrm export gives a spec's file (`uprobe:do_command` ->
/// `uprobe_do_command`).
fn safe_tag(spec: &str) -> String {
    spec.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `existing` with the text between the markers replaced by `section`; a new document
/// when there are no markers.
fn splice(existing: &str, section: &str) -> String {
    splice_between(existing, section, (BEGIN_MARK, END_MARK)).unwrap_or_else(|| {
        format!("# probetop on a live mysqld\n\n{BEGIN_MARK}\n{section}{END_MARK}\n")
    })
}

/// `existing` with the text between `marks` replaced by `section` (the marks kept);
/// `None` when it has no such block.
pub fn splice_between(existing: &str, section: &str, marks: (&str, &str)) -> Option<String> {
    let (begin, end) = marks;
    let block = format!("{begin}\n{section}{end}\n");
    match (existing.find(begin), existing.find(end)) {
        (Some(b), Some(e)) if b < e => {
            let after = &existing[e + end.len()..];
            Some(format!(
                "{}{block}{}",
                &existing[..b],
                after.strip_prefix('\n').unwrap_or(after)
            ))
        }
        _ => None,
    }
}

/// Now as `YYYY-MM-DD HH:MM`, from the system clock (xtask has no date crate).
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let (h, m) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{d:02} {h:02}:{m:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this_thread_id() -> String {
        fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default()
    }

    #[test]
    fn snapshot_names_every_thread_and_where_it_waits() {
        let pid = std::process::id();
        let text = thread_snapshot(&[("self", pid), ("gone", u32::MAX)]);
        assert!(text.starts_with(&format!("== self (pid {pid})")), "{text}");
        // This thread at least (other tests' threads come and go meanwhile).
        let me = format!("-- tid {} ", this_thread_id());
        assert!(text.contains(&me), "{me:?} in {text}");
        assert!(text.contains("State:") && text.contains("wchan="), "{text}");
        assert!(
            text.contains(&format!("== gone (pid {})\n(gone)", u32::MAX)),
            "{text}"
        );
    }

    #[test]
    fn classifies_first_instructions() {
        assert!(emulated("push %rbp"));
        assert!(emulated("push %r15"));
        assert!(emulated("jmp 83a5d0 <foo>"));
        assert!(emulated(
            "jbe 85bc30 <_Z19mysqld_stmt_executeP3THDPcj@@Base+0x30>"
        ));
        assert!(emulated("call 4000 <bar>"));
        assert!(emulated("nop"));
        assert!(!emulated("cmp $0x8,%edx"));
        assert!(!emulated("mov 0x10(%rip),%rax"));
        assert!(!emulated("jmp *%rax"));
        assert!(!emulated("endbr64"));
        assert!(!emulated("sub $0x8,%rsp"));
    }

    #[test]
    fn reads_bpftrace_histograms() {
        let text = "Attaching 3 probes...\nready\n\n\n@uprobe_do_command: \n\
                    [32, 64)           10661 |@@@@@|\n[64, 128)           2978 |@@ |\n\
                    [1K, 2K)              3 |  |\n\n@uretprobe_dispatch_command: \n\
                    [16, 32)              5 |@|\n";
        let counts = bpftrace_counts(text);
        assert_eq!(counts.get("uprobe_do_command"), Some(&13642));
        assert_eq!(counts.get("uretprobe_dispatch_command"), Some(&5));
    }

    #[test]
    fn medians_and_spreads() {
        let s = spread([3.0, 1.0, 2.0, f64::NAN]).expect("values");
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(med(spread([1.0, 2.0, 3.0, 4.0])), 2.5);
        assert!(spread([]).is_none());
        assert_eq!(show_spread(spread([5.0]), 1), "5.0");
        assert_eq!(show_spread(spread([5.0, 7.0]), 0), "6 (5-7)");
        assert_eq!(pct(90.0, 100.0), "-10.0%");
    }

    #[test]
    fn rotates_variants() {
        assert_eq!(rotated(&[1, 2, 3], 0), [1, 2, 3]);
        assert_eq!(rotated(&[1, 2, 3], 4), [2, 3, 1]);
        let items: Vec<u32> = (0..6).collect();
        let a = shuffled(&items, 0);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, items, "a permutation");
        assert_eq!(a, shuffled(&items, 0), "reproducible");
        assert!(
            (1..5).any(|seed| shuffled(&items, seed) != a),
            "varies with the seed"
        );
    }

    #[test]
    fn splices_the_generated_section() {
        let doc = format!("# T\n\nintro\n\n{BEGIN_MARK}\nold\n{END_MARK}\n\noutro\n");
        let new = splice(&doc, "new\n");
        assert_eq!(
            new,
            format!("# T\n\nintro\n\n{BEGIN_MARK}\nnew\n{END_MARK}\n\noutro\n")
        );
        assert!(splice("", "x\n").contains(BEGIN_MARK));
    }

    #[test]
    fn writes_a_bpftrace_probe_per_spec() {
        let probe = PresetProbe {
            spec: "uretprobe:dispatch_command".into(),
            kind: "uretprobe".into(),
            name: "dispatch_command(...)".into(),
            symbol: "_Z16dispatch_command19enum_server_commandP3THDPcjb".into(),
            address: 0,
            first_insn: "push %rbp".into(),
            emulated: true,
        };
        let script = bpftrace_script(&[probe]);
        assert!(script.contains(
            "uretprobe:/usr/sbin/mariadbd:_Z16dispatch_command19enum_server_commandP3THDPcjb \
             { $t = nsecs; @uretprobe_dispatch_command = hist(nsecs - $t); }"
        ));
        // A C++ method keeps its class in the map's name.
        let method = PresetProbe {
            spec: "uprobe:Prepared_statement::execute_loop".into(),
            kind: "uprobe".into(),
            name: "Prepared_statement::execute_loop(...)".into(),
            symbol: "_ZN18Prepared_statement12execute_loopEP6StringbPhS2_".into(),
            address: 0,
            first_insn: "push %rbp".into(),
            emulated: true,
        };
        assert!(
            bpftrace_script(&[method]).contains("@uprobe_Prepared_statement__execute_loop = hist(")
        );
    }

    #[test]
    fn formats_dates() {
        let d = utc_now();
        assert_eq!(d.len(), 16, "{d}");
        assert!(d.starts_with("20"), "{d}");
    }
}
