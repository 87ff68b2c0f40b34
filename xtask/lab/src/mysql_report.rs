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
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};
use std::{fs, thread};

use anyhow::{Context as _, Result, bail, ensure};
use probe_user::inner::present::export::json::JsonProbe;
use serde_json::{Value, json};

use crate::mysql::{
    MARIADBD, Mariadb, ServerOptions, Stalled, Sysbench, SysbenchResult,
    extra_commands_per_connection,
};
use crate::util::proc::{HostCpu, process_cpu};
use crate::util::stats::{self, Spread};
use crate::{Ctx, echo, output_ok, show};

mod render;
mod runs;
use crate::tool::*;
pub(crate) use render::*;

/// Markers around the generated part of docs/mysqld.md; the text outside is kept.
const BEGIN_MARK: &str = "<!-- BEGIN cargo xtask mysql-report: generated, edits are lost -->";
const END_MARK: &str = "<!-- END cargo xtask mysql-report -->";

#[derive(Debug, Clone)]
pub(crate) struct ReportOptions {
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
    /// probetop with the whole preset in `--mode kernel --clock-seconds 0`: every hit
    /// counted in the kernel, one in 64 timed, no records, from the first.
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
    probes: Vec<JsonProbe<'static>>,
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
        self.probes.iter().map(|p| p.hits).sum()
    }
    fn probe_hits(&self, spec: &str) -> Option<u64> {
        self.probes.iter().find(|p| p.spec == spec).map(|p| p.hits)
    }
    fn dropped(&self) -> u64 {
        self.probes.iter().map(|p| p.dropped).sum()
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

pub(crate) fn per_query_us(seconds: f64, queries: u64) -> f64 {
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

pub(crate) fn mysql_report(ctx: &Ctx, options: ReportOptions) -> Result<()> {
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
/// The specs of a preset file that probe one point each, as written: every line but
/// comments, blank lines and `latency:` pairs. A pair (`latency:FUNC`, `latency:START,END`,
/// maybe keyed) is two probes whose hits are counted under their halves' own rows, and
/// neither bpftrace's `KIND:PATH:NAME` nor `probetop list` takes its text; the reports
/// leave it out.
pub(crate) fn point_specs(preset: &str) -> Vec<String> {
    preset
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty() && !l.starts_with("latency:"))
        .map(str::to_string)
        .collect()
}

fn resolve_preset(probetop: &Path, preset: &str) -> Result<Vec<PresetProbe>> {
    let mut probes = Vec::new();
    for spec in point_specs(preset) {
        let spec = spec.as_str();
        let (kind, name) = spec
            .split_once(':')
            .with_context(|| format!("preset line {spec:?} is not KIND:NAME"))?;
        // `FUNC+ret` is FUNC's ret instructions, which the kernel single-steps.
        let at_returns = name.ends_with("+ret");
        let name = name.strip_suffix("+ret").unwrap_or(name);
        let mut cmd = Command::new(probetop);
        cmd.args(["list", "--json", MARIADBD, name]);
        echo(&cmd);
        let out = output_ok(&mut cmd)?;
        let listing = crate::util::listing::listing(&out.stdout)?;
        let [point] = listing.points.as_slice() else {
            bail!(
                "{spec}: {} points in {MARIADBD}, the report expects one",
                listing.points.len()
            );
        };
        let address = point.address;
        let first_insn = if at_returns {
            "ret".to_string()
        } else {
            first_instruction(address)?
        };
        probes.push(PresetProbe {
            spec: spec.to_string(),
            kind: kind.to_string(),
            name: point.name.clone(),
            symbol: point.symbol.as_deref().unwrap_or(name).to_string(),
            address,
            emulated: kind == "uretprobe" || (!at_returns && emulated(&first_insn)),
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
        // `uprobe:A::f`, as its .hgrm file is. Debian's bpftrace 0.17 cannot probe an
        // offset ("compiled without (k|u)probe offset support"), so `FUNC+ret` is its
        // uretprobe there, bpftrace's only way to count returns.
        let kind = if p.spec.ends_with("+ret") {
            "uretprobe"
        } else {
            p.kind.as_str()
        };
        let _ = writeln!(
            script,
            "{kind}:{MARIADBD}:{} {{ $t = nsecs; @{} = hist(nsecs - $t); }}",
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
pub(crate) fn uptime() -> String {
    Command::new("uptime")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("(uptime failed: {e})"))
}

/// `items` starting at `by` (mod len): the order variants run in, per repeat and cell.
pub(crate) fn rotated<T: Clone>(items: &[T], by: usize) -> Vec<T> {
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

pub(crate) fn cpu_sum((user, system): (f64, f64)) -> f64 {
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
pub(crate) fn bpftrace_counts(text: &str) -> BTreeMap<String, u64> {
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
// Statistics

/// Median and range of the finite values, None when there are none.
pub(crate) fn spread(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
    let values: Vec<f64> = values.into_iter().collect();
    let s = stats::spread(&values);
    (s.n > 0).then_some(s)
}

pub(crate) fn pct(new: f64, base: f64) -> String {
    if !(new.is_finite() && base.is_finite()) || base == 0.0 {
        return "-".into();
    }
    format!("{:+.1}%", (new / base - 1.0) * 100.0)
}

/// `median (min-max)` with `digits` decimals; one number when there is one run.
pub(crate) fn show_spread(s: Option<Spread>, digits: usize) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.min == s.max => format!("{:.*}", digits, s.median),
        Some(s) => format!(
            "{:.*} ({:.*}-{:.*})",
            digits, s.median, digits, s.min, digits, s.max
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn point_specs_leave_out_comments_and_latency_pairs() {
        let preset = "# a comment\n\nuprobe:do_command\n\
                      latency:dispatch_command key=arg0:mysql-command\n\
                      usdt:postgresql:query__done  # trailing\n\
                      latency:postgresql:query__start,query__done\n";
        assert_eq!(
            point_specs(preset),
            ["uprobe:do_command", "usdt:postgresql:query__done"]
        );
    }

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
        // bpftrace counts `FUNC+ret`'s returns with its uretprobe.
        let rets = PresetProbe {
            spec: "uprobe:dispatch_command+ret".into(),
            kind: "uprobe".into(),
            name: "dispatch_command(...)".into(),
            symbol: "_Z16dispatch_command19enum_server_commandP3THDPcjb".into(),
            address: 0,
            first_insn: "ret".into(),
            emulated: false,
        };
        assert!(bpftrace_script(&[rets]).contains(
            "uretprobe:/usr/sbin/mariadbd:_Z16dispatch_command19enum_server_commandP3THDPcjb \
             { $t = nsecs; @uprobe_dispatch_command_ret = hist(nsecs - $t); }"
        ));
    }

    #[test]
    fn formats_dates() {
        let d = utc_now();
        assert_eq!(d.len(), 16, "{d}");
        assert!(d.starts_with("20"), "{d}");
    }
}
