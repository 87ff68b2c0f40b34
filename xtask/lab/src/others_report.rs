//! `cargo xtask others-report`: what other tools' probes cost a live mariadbd, three
//! ways, per tool: the truth measured from outside (the server's CPU with the tool
//! attached against detached, alternating, under the same open-loop sysbench load),
//! probetop's whole cost per hit for the tool's probe (`probetop --pid P` without a
//! spec), and what the program time alone (the kernel's `run_time_ns / run_cnt`,
//! bpftop's number) would have said. Writes its table into docs/others.md between its
//! own markers.
//!
//! Every tool probes `dispatch_command` of a private copy of mariadbd (uprobes are set
//! per inode: no other mariadbd on the machine traps in them).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use probe_user::inner::present::export::json::{JsonEntry, JsonProbe};
use probe_user::inner::spec::ProbeKind;

use crate::mysql::{Mariadb, ServerOptions, Sysbench};
use crate::mysql_report::utc_now;
use crate::tool::{KillOnDrop, Stream, Tool};
use crate::util::doc::splice_between;
use crate::util::proc::cpu_clock_ns;
use crate::util::stats::median;
use xtask::{Ctx, show};

const BEGIN_MARK: &str = "<!-- BEGIN cargo xtask others-report: generated, edits are lost -->";
const END_MARK: &str = "<!-- END cargo xtask others-report -->";

/// The function every tool probes by default: mysys's arena allocator, an emulated
/// `push %rbp`, hit several times per point select. (`dispatch_command`, hit once per
/// statement, moves the server's CPU by ~0.1% of a CPU at 2,000 statements/s: below what
/// a block of seconds on a shared 2-CPU machine can tell.)
pub(crate) const DEFAULT_FUNCTION: &str = "alloc_root";
const TEST: &str = "oltp_point_select";
const CLIENT_THREADS: u32 = 4;
/// The tracefs event the report defines (and removes).
const TRACEFS_EVENT: &str = "probetop_others_report/dispatch";

#[derive(Debug, Clone)]
pub(crate) struct OthersOptions {
    /// Statements per second sysbench sends (open loop), one table each.
    pub rates: Vec<u32>,
    /// Attached blocks per tool, each between two detached ones.
    pub pairs: u32,
    pub block_seconds: f64,
    /// The function of mariadbd every tool probes.
    pub function: String,
    /// Where others.md is.
    pub out: PathBuf,
}

/// A tool the report runs beside the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    BpftraceCount,
    BpftraceHist,
    Funclatency,
    BccTrace,
    Tracefs,
}

const KINDS: [Kind; 5] = [
    Kind::BpftraceCount,
    Kind::BpftraceHist,
    Kind::Funclatency,
    Kind::BccTrace,
    Kind::Tracefs,
];

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::BpftraceCount => "bpftrace `count()`",
            Kind::BpftraceHist => "bpftrace `hist()` of an argument",
            Kind::Funclatency => "BCC `funclatency-bpfcc` (entry + return)",
            Kind::BccTrace => "BCC `trace-bpfcc` (a uprobe: mariadbd has no USDT)",
            Kind::Tracefs => "tracefs `uprobe_events`, enabled (no BPF)",
        }
    }

    /// `owner.tool` of its rows in probetop's export.
    fn owner(self) -> &'static str {
        match self {
            Kind::BpftraceCount | Kind::BpftraceHist => "bpftrace",
            Kind::Funclatency | Kind::BccTrace => "bcc",
            Kind::Tracefs => "tracefs",
        }
    }
}

/// What the server is probed at.
struct Site {
    exe: PathBuf,
    /// As `probetop list` names it.
    function: String,
    symbol: String,
    file_offset: u64,
    /// BCC's kernel headers tree (`BCC_KERNEL_SOURCE`).
    bcc_headers: PathBuf,
}

impl Site {
    /// The command that attaches `kind`'s probe, and the line it prints once attached.
    fn command(&self, kind: Kind, pid: u32) -> Option<(Command, &'static str, Stream)> {
        let exe = self.exe.display();
        let symbol = &self.symbol;
        let bpftrace = |program: String| {
            let mut cmd = Command::new("bpftrace");
            cmd.args(["-p", &pid.to_string(), "-e"])
                .arg(format!("BEGIN {{ printf(\"armed\\n\"); }} {program}"));
            (cmd, "armed", Stream::Stdout)
        };
        let bcc = |tool: &str, args: Vec<String>, ready: &'static str| {
            let mut cmd = Command::new(tool);
            cmd.env("BCC_KERNEL_SOURCE", &self.bcc_headers).args(args);
            (cmd, ready, Stream::Stdout)
        };
        Some(match kind {
            Kind::BpftraceCount => bpftrace(format!("uprobe:{exe}:{symbol} {{ @ = count(); }}")),
            // The packet's length: an argument read, a log2 histogram updated.
            Kind::BpftraceHist => bpftrace(format!("uprobe:{exe}:{symbol} {{ @ = hist(arg3); }}")),
            Kind::Funclatency => bcc(
                "funclatency-bpfcc",
                vec!["-p".into(), pid.to_string(), format!("{exe}:{symbol}")],
                "Tracing 1 functions",
            ),
            Kind::BccTrace => bcc(
                "trace-bpfcc",
                vec!["-p".into(), pid.to_string(), format!("p:{exe}:{symbol}")],
                "PID",
            ),
            Kind::Tracefs => return None,
        })
    }

    /// How the report attached `kind`, for the table.
    fn shown(&self, kind: Kind) -> String {
        match self.command(kind, 0) {
            Some((cmd, _, _)) => {
                // Paths under the checkout as the reader runs them, from its root.
                let here = std::env::current_dir()
                    .map(|d| format!("{}/", d.display()))
                    .unwrap_or_default();
                let shown = show(&cmd)
                    .replace(" -p 0 ", " -p PID ")
                    .replace(&self.exe.display().to_string(), "MARIADBD");
                if here.is_empty() {
                    shown
                } else {
                    shown.replace(&here, "")
                }
            }
            None => format!(
                "echo 'p:{TRACEFS_EVENT} MARIADBD:{:#x}' >> uprobe_events; echo 1 > events/{TRACEFS_EVENT}/enable",
                self.file_offset
            ),
        }
    }
}

/// A tool's probe, attached; detached on drop.
enum Holder {
    Process(Tool),
    Tracefs(PathBuf),
}

impl Holder {
    fn attach(site: &Site, kind: Kind, pid: u32) -> Result<Self> {
        match site.command(kind, pid) {
            Some((cmd, ready, stream)) => Ok(Holder::Process(Tool::start(cmd, ready, stream)?)),
            None => {
                let tracing = tracefs()?;
                append(
                    &tracing.join("uprobe_events"),
                    &format!(
                        "p:{TRACEFS_EVENT} {}:{:#x}",
                        site.exe.display(),
                        site.file_offset
                    ),
                )?;
                let holder = Holder::Tracefs(tracing.clone());
                fs::write(
                    tracing.join("events").join(TRACEFS_EVENT).join("enable"),
                    "1",
                )
                .context("enabling the tracefs event")?;
                Ok(holder)
            }
        }
    }

    /// Stops the tool; one that exits unhappily (BCC's trace may, on SIGINT) has still
    /// detached: said, not fatal.
    fn detach(mut self, kind: Kind) {
        // BCC's trace ignores SIGINT while it polls: closed by the drop's SIGKILL, which
        // detaches its probes with its descriptors.
        if kind != Kind::BccTrace
            && let Holder::Process(tool) = &mut self
            && let Err(e) = tool.stop()
        {
            eprintln!("others-report: {e:#}");
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Holder::Tracefs(tracing) = self {
            let event = tracing.join("events").join(TRACEFS_EVENT);
            let _ = fs::write(event.join("enable"), "0");
            let _ = append(
                &tracing.join("uprobe_events"),
                &format!("-:{TRACEFS_EVENT}"),
            );
        }
    }
}

fn tracefs() -> Result<PathBuf> {
    for dir in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(dir).join("uprobe_events").exists() {
            return Ok(PathBuf::from(dir));
        }
    }
    xtask::run(Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]))?;
    Ok(PathBuf::from("/sys/kernel/tracing"))
}

fn append(path: &Path, line: &str) -> Result<()> {
    use std::io::Write as _;
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(file, "{line}").with_context(|| format!("writing {line:?} to {}", path.display()))
}

/// One tool at one rate.
#[derive(Debug, Clone)]
struct Row {
    kind: Kind,
    /// Per call of the function, ns (funclatency: its entry and return together).
    truth_ns: Vec<f64>,
    probetop_ns: Vec<f64>,
    program_ns: Vec<f64>,
    /// How probetop priced the owner's program, and counted its hits.
    program_method: String,
    hits_method: String,
    calls_per_second: f64,
    error: Option<String>,
}

pub(crate) fn others_report(ctx: &Ctx, options: OthersOptions) -> Result<()> {
    ensure!(
        xtask::is_root()?,
        "the report attaches real probes: run it as root"
    );
    xtask::install_apt(
        ctx,
        &[
            "mariadb-server",
            "sysbench",
            "bpftrace",
            "bpfcc-tools",
            "python3-bpfcc",
            "linux-headers-amd64",
        ],
    )?;
    xtask::build(ctx)?;
    let probetop = ctx.target_dir().join("release/probetop");
    ensure_calibrated(&probetop)?;
    let work = ctx.target_dir().join("others-report");
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let started = Instant::now();
    let server = Mariadb::start(&ServerOptions {
        private_binary: true,
        ..ServerOptions::default()
    })?;
    let sysbench = Sysbench::new(&server, 4, 10_000);
    sysbench.prepare()?;
    let site = site_of(&probetop, &server, &work, &options.function)?;
    let mut tables = Vec::new();
    for &rate in &options.rates {
        let rows = measure_rate(&probetop, &server, &sysbench, &site, &work, rate, &options)?;
        tables.push((rate, rows));
    }
    ensure!(
        server.ping(),
        "mariadbd stopped answering during the report"
    );
    let section = render(&tables, &site, &options, started.elapsed(), &sysbench);
    print!("{section}");
    let doc = options.out.join("others.md");
    let existing = fs::read_to_string(&doc).unwrap_or_default();
    let text = splice_between(&existing, &section, (BEGIN_MARK, END_MARK)).unwrap_or_else(|| {
        format!(
            "{}\n\n{BEGIN_MARK}\n{section}{END_MARK}\n",
            existing.trim_end()
        )
    });
    fs::write(&doc, text).with_context(|| format!("writing {}", doc.display()))?;
    println!("others-report: wrote {}", doc.display());
    Ok(())
}

fn ensure_calibrated(probetop: &Path) -> Result<()> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|dir| dir.join("probetop"));
    // A calibration without the tracefs event's row (older than it) leaves the tracefs
    // row unpriced: calibrate again.
    let calibrated = cache
        .and_then(|dir| fs::read_dir(dir).ok())
        .is_some_and(|mut entries| {
            entries.any(|e| {
                e.is_ok_and(|e| {
                    e.file_name().to_string_lossy().starts_with("calibration-")
                        && fs::read_to_string(e.path())
                            .is_ok_and(|text| text.contains("\"tracefs_event_ns\""))
                })
            })
        });
    if !calibrated {
        xtask::run(Command::new(probetop).arg("calibrate"))?;
    }
    Ok(())
}

/// `dispatch_command` in the server's private binary, as `probetop list` finds it, and
/// BCC's headers tree.
fn site_of(probetop: &Path, server: &Mariadb, work: &Path, function: &str) -> Result<Site> {
    let out = xtask::output_ok(
        Command::new(probetop)
            .args(["list", "--json"])
            .arg(server.exe())
            .arg(function),
    )?;
    let listing = crate::util::listing::listing(&out.stdout)?;
    let Some((symbol, file_offset)) = listing
        .points
        .first()
        .and_then(|p| Some((p.symbol.as_deref()?, p.file_offset)))
    else {
        bail!("{function} not found in {}", server.exe().display());
    };
    // BCC compiles against kernel headers; this kernel ships none: Debian's 6.1 ones,
    // the arch tree merged over the common one as symlinks (docs/others.md).
    let headers = work.join("bcc-headers");
    let _ = fs::remove_dir_all(&headers);
    fs::create_dir_all(&headers)?;
    xtask::run(Command::new("sh").arg("-c").arg(format!(
        "cp -rs /usr/src/linux-headers-*-common/. {dir}/ && cp -rsf --remove-destination /usr/src/linux-headers-*-amd64/. {dir}/",
        dir = headers.display()
    )))?;
    Ok(Site {
        exe: server.exe().to_path_buf(),
        function: function.to_string(),
        symbol: symbol.to_string(),
        file_offset,
        bcc_headers: headers,
    })
}

/// Every tool at one rate, under one open-loop load.
fn measure_rate(
    probetop: &Path,
    server: &Mariadb,
    sysbench: &Sysbench,
    site: &Site,
    work: &Path,
    rate: u32,
    options: &OthersOptions,
) -> Result<Vec<Row>> {
    // Long enough for every block, every attach (bpftrace reads mariadbd's symbols) and
    // every probetop run.
    let per_tool = f64::from(options.pairs) * (2.0 * options.block_seconds + 30.0)
        + options.block_seconds
        + 30.0;
    let seconds = per_tool * KINDS.len() as f64 + 30.0;
    let mut load = sysbench.command(TEST);
    load.arg(format!("--threads={CLIENT_THREADS}"))
        .arg(format!("--rate={rate}"))
        .arg(format!("--time={}", seconds.ceil() as u64))
        .arg("run")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    println!("others-report: {rate} statements/s: {}", show(&load));
    let mut load = load.spawn().context("starting sysbench")?;
    let load_guard = KillOnDrop(&mut load);
    thread::sleep(Duration::from_secs(5));
    let mut rows: Vec<Row> = Vec::new();
    for kind in KINDS {
        println!("others-report: {rate}/s: {}", kind.label());
        // Where probetop cannot count (BCC 0.26 here): the calls a tool it counted saw.
        let counted = rows
            .iter()
            .find(|r| r.hits_method == "counting-probe-on-the-same-site")
            .map(|r| r.calls_per_second);
        let row = measure_tool(
            (probetop, work),
            server.pid(),
            site,
            kind,
            (rate, counted),
            options,
        )
        .unwrap_or_else(|e| Row {
            kind,
            truth_ns: Vec::new(),
            probetop_ns: Vec::new(),
            program_ns: Vec::new(),
            program_method: String::new(),
            hits_method: String::new(),
            calls_per_second: 0.0,
            error: Some(format!("{e:#}").lines().next().unwrap_or("").to_string()),
        });
        rows.push(row);
    }
    drop(load_guard);
    Ok(rows)
}

/// The server's CPU over `seconds`, as a share of one CPU.
fn cpu_share(pid: u32, seconds: f64) -> Result<f64> {
    let (c0, t0) = (cpu_clock_ns(pid)?, Instant::now());
    thread::sleep(Duration::from_secs_f64(seconds));
    let (c1, t1) = (cpu_clock_ns(pid)?, Instant::now());
    Ok((c1 - c0) as f64 / 1e9 / (t1 - t0).as_secs_f64())
}

/// Detached, attached, detached, ... blocks; after each attached block, probetop on the
/// server (no spec, `--bpf-stats`) while the tool stays attached.
/// `(probetop, work)`: the binary and where its exports go; `(rate, counted)`: the
/// load's statements per second and the calls per second a tool before counted.
fn measure_tool(
    (probetop, work): (&Path, &Path),
    pid: u32,
    site: &Site,
    kind: Kind,
    (rate, counted): (u32, Option<f64>),
    options: &OthersOptions,
) -> Result<Row> {
    let block = options.block_seconds;
    let mut row = Row {
        kind,
        truth_ns: Vec::new(),
        probetop_ns: Vec::new(),
        program_ns: Vec::new(),
        program_method: String::new(),
        hits_method: String::new(),
        calls_per_second: 0.0,
        error: None,
    };
    let mut before = cpu_share(pid, block)?;
    let mut rates = Vec::new();
    for pair in 0..options.pairs {
        let holder = Holder::attach(site, kind, pid)?;
        thread::sleep(Duration::from_secs(1));
        let attached = cpu_share(pid, block)?;
        let json = work.join(format!("{rate}-{kind:?}-{pair}.json"));
        let mut cmd = Command::new(probetop);
        cmd.args(["--pid", &pid.to_string(), "--no-tui", "--duration", "3"])
            .args(["--bpf-stats", "--export"])
            .arg(&json)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        xtask::run(&mut cmd)?;
        holder.detach(kind);
        thread::sleep(Duration::from_secs(1));
        let after = cpu_share(pid, block)?;
        let report = crate::util::export::read(&json)?;
        let rows: Vec<&JsonProbe> = report
            .probes
            .iter()
            .filter_map(JsonEntry::probe)
            .filter(|p| !p.own && p.owner.as_ref().is_some_and(|o| o.tool == kind.owner()))
            .collect();
        ensure!(
            !rows.is_empty(),
            "probetop found no {} probe on mariadbd ({})",
            kind.owner(),
            json.display()
        );
        // One call is one entry hit (funclatency's return rides on the same call).
        let seconds = report.duration_s;
        let entry_hits = rows
            .iter()
            .filter(|r| r.kind == ProbeKind::Uprobe)
            .map(|r| r.hits)
            .max()
            .unwrap_or(0);
        if seconds > 0.0 && entry_hits > 0 {
            rates.push(entry_hits as f64 / seconds);
        }
        let sum = |field: &dyn Fn(&JsonProbe) -> Option<f64>| -> Option<f64> {
            rows.iter().map(|r| field(r)).sum::<Option<f64>>()
        };
        fn program_method<'a>(r: &'a JsonProbe) -> Option<&'a str> {
            r.owner.as_ref()?.program_method.as_deref()
        }
        if let Some(ns) = sum(&|r| r.whole_cost_ns) {
            row.probetop_ns.push(ns);
        }
        if let Some(ns) = sum(&|r| r.owner.as_ref().and_then(|o| o.program_ns))
            && rows.iter().all(|r| program_method(r) == Some("bpf-stats"))
        {
            row.program_ns.push(ns);
        }
        row.program_method = program_method(rows[0]).unwrap_or("").to_string();
        row.hits_method = rows[0]
            .owner
            .as_ref()
            .map_or("", |o| &o.hits_method)
            .to_string();
        // Against the detached blocks on either side.
        row.truth_ns.push(attached - (before + after) / 2.0);
        before = after;
    }
    // Calls per second: probetop's count where it counted, else another tool's row's
    // (the load is open loop: the same calls whoever probes).
    row.calls_per_second = if rates.is_empty() {
        counted.context("no tool's calls counted before this one")?
    } else {
        median(&rates)
    };
    let per_call = 1e9 / row.calls_per_second;
    for share in &mut row.truth_ns {
        *share *= per_call;
    }
    Ok(row)
}

fn cell(values: &[f64]) -> String {
    if values.is_empty() {
        return "-".into();
    }
    let (low, high) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
            (l.min(v), h.max(v))
        });
    format!("{:.0} ({low:.0}..{high:.0})", median(values))
}

fn git_commit() -> String {
    let out = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let commit = out(&["rev-parse", "--short", "HEAD"]);
    let dirty = !out(&["status", "--porcelain", "--untracked-files=no"]).is_empty();
    if dirty {
        format!("{commit} (with uncommitted changes)")
    } else {
        commit
    }
}

fn render(
    tables: &[(u32, Vec<Row>)],
    site: &Site,
    options: &OthersOptions,
    took: Duration,
    sysbench: &Sysbench,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let _ = writeln!(
        out,
        "Generated by `cargo xtask others-report` on {} UTC, commit {}, in {:.1} min; kernel {}, {} CPUs, load average at the end {}.\n",
        utc_now(),
        git_commit(),
        took.as_secs_f64() / 60.0,
        kernel.trim(),
        thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    );
    let _ = writeln!(
        out,
        "A private mariadbd (a copy of `/usr/sbin/mariadbd`, `MARIADBD` below) under an open-loop load, `{} --threads={CLIENT_THREADS} --rate=RATE run` ({} tables of {} rows); every tool probes `{}` (`{}`, file offset {:#x}). Per tool, {} attached blocks of {:.0} s, each between two detached ones:\n",
        TEST,
        sysbench.tables,
        sysbench.table_size,
        site.function,
        site.symbol,
        site.file_offset,
        options.pairs,
        options.block_seconds,
    );
    let _ = writeln!(
        out,
        "- **truth**: the server's CPU (its process CPU clock) in the attached block less the mean of its two detached neighbours, per call of `{}` (calls per second from probetop's count of the tool's probe, or where it could not count, of the tool before);",
        site.function
    );
    let _ = writeln!(
        out,
        "- **probetop**: `whole_cost_ns` of the tool's row(s) from `probetop --pid PID --no-tui --duration 3 --bpf-stats --export R.json` run while the tool stays attached, after each attached block (funclatency: entry plus return);"
    );
    let _ = writeln!(
        out,
        "- **program alone**: the tool's program per run from the kernel's statistics (`owner.program_ns` with `--bpf-stats`: `run_time_ns / run_cnt`, bpftop's number).\n"
    );
    let _ = writeln!(
        out,
        "Each cell: median (lowest..highest) of the blocks, ns per call.\n"
    );
    for (rate, rows) in tables {
        let _ = writeln!(out, "#### {rate} statements/s\n");
        let _ = writeln!(
            out,
            "| tool | truth | probetop | probetop / truth | program alone | alone / truth | calls/s | hits counted by |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
        for row in rows {
            if let Some(error) = &row.error {
                let _ = writeln!(
                    out,
                    "| {} | not measured: {} | | | | | | |",
                    row.kind.label(),
                    error.replace('|', "/")
                );
                continue;
            }
            let ratio = |values: &[f64]| {
                if values.is_empty() || row.truth_ns.is_empty() {
                    return "-".to_string();
                }
                let truth = median(&row.truth_ns);
                if truth <= 0.0 {
                    return "-".to_string();
                }
                format!("{:.2}", median(values) / truth)
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {:.0} | {} |",
                row.kind.label(),
                cell(&row.truth_ns),
                cell(&row.probetop_ns),
                ratio(&row.probetop_ns),
                cell(&row.program_ns),
                ratio(&row.program_ns),
                row.calls_per_second,
                if row.hits_method.is_empty() {
                    "-"
                } else {
                    &row.hits_method
                },
            );
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "Commands (PID: the server's, MARIADBD: its binary):\n");
    for kind in KINDS {
        let _ = writeln!(out, "- {}: `{}`", kind.label(), site.shown(kind));
    }
    let _ = writeln!(out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_the_median_and_its_range() {
        assert_eq!(cell(&[3.0, 1.0, 2.0]), "2 (1..3)");
        assert_eq!(cell(&[]), "-");
    }
}
