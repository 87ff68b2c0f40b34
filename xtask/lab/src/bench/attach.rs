//! Part 3 of the bench: time until a few named and globbed mariadbd probes are live.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use std::{fs, thread};

use anyhow::{Context as _, Result, ensure};

use super::*;

// ---------------------------------------------------------------------------------------
// 3. Attach latency

#[derive(Debug, Clone)]
pub(super) struct AttachRun {
    pub(super) tool: &'static str,
    pub(super) probes: usize,
    /// Seconds from spawning the tool until its last probe was attached.
    pub(super) live_s: f64,
    /// probetop: its `attached` line; bpftrace: its `Attaching N probes...` line, printed
    /// before it attaches anything.
    pub(super) said_s: f64,
    /// Seconds from SIGINT to exit (detaching every probe).
    pub(super) exit_s: f64,
    /// Hits counted of the driven query.
    pub(super) hits: u64,
}

#[derive(Debug, Clone)]
pub(super) struct AttachSet {
    pub(super) name: &'static str,
    pub(super) probetop_specs: Vec<String>,
    pub(super) runs: Vec<AttachRun>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct AttachResults {
    pub(super) sets: Vec<AttachSet>,
    pub(super) binary_mib: f64,
    pub(super) symbols: String,
}

/// Functions of mariadbd that every query goes through.
pub(super) const NAMED: &[&str] = &[
    "dispatch_command",
    "do_command",
    "mysql_parse",
    "mysql_execute_command",
    "close_thread_tables",
];

impl Bench {
    pub(super) fn attach(&self) -> Result<AttachResults> {
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
            command_listing(
                self.probetop()
                    .args(["list", "--pid", &pid.to_string(), "--json"]),
            )?;
        let mut mangled = Vec::new();
        for name in NAMED {
            let symbol = listing
                .points
                .iter()
                .find(|p| p.object == db.exe() && p.name.split('(').next() == Some(name))
                .and_then(|p| p.symbol.as_deref())
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
            symbols: listing
                .objects
                .first()
                .map_or("?", |o| symbols_kind(&o.symbols))
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

    pub(super) fn attach_probetop(
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
        let hits = crate::util::export::total_hits(&crate::util::export::read(&export)?);
        Ok(AttachRun {
            tool: tool_name,
            probes,
            live_s: watch.live_s,
            said_s: watch.said_s,
            exit_s,
            hits,
        })
    }

    pub(super) fn attach_bpftrace(&self, db: &Mariadb, probes: &[String]) -> Result<AttachRun> {
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
pub(super) enum AttachTool {
    Probetop,
    Bpftrace,
    /// The `--compare` binary.
    Compared,
}

pub(super) struct AttachWatch {
    pub(super) live_s: f64,
    pub(super) said_s: f64,
}

/// Starts a tool and watches its perf events and BPF links (one perf event per attached
/// probe, or one link per object and program on uprobe_multi, plus one perf event per CPU
/// for bpftrace's output buffers, opened before its probes) until it has said `ready` and
/// their count has not changed for a second. Live is when the count first reached its
/// final value.
pub(super) fn watch_attach(
    name: &str,
    cmd: &mut Command,
    ready: &str,
) -> Result<(Proc, AttachWatch)> {
    let tool = Proc::spawn(name, cmd)?;
    let started = tool.started;
    let mut said = None;
    let mut count = 0;
    let mut changed = Instant::now();
    loop {
        let now = Instant::now();
        let n = attachment_fds(tool.pid());
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
pub(super) fn drive_and_stop(db: &Mariadb, mut tool: Proc) -> Result<(f64, Vec<String>)> {
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

pub(super) fn render_attach(md: &mut String, a: &AttachResults) {
    let _ = writeln!(md, "### 3. Attach latency\n");
    let _ = writeln!(
        md,
        "A private mariadbd ({:.0} MiB, symbols: {}). Live: seconds from starting the tool \
         until its last probe's perf event or BPF link exists (watched in /proc/PID/fd every 5 ms); \
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
        "\nprobetop prints `attached` {} s after its last perf event or BPF link exists (median over every \
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
