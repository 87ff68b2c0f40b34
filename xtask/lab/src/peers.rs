//! `cargo xtask peers`: the seed's comparison on the Go fixture. `main.traceMe` is
//! called in a loop, bare, under Delve's ptrace tracepoint (a condition that never
//! holds, so every hit stops the process and resumes it without printing), under
//! bpftrace's uprobe with the same never-true predicate, and under probetop in each
//! mode. The fixture times its own loop (`--time`), so start-up and attach are left
//! out. Rounds run every variant once in a rotated order; a round's per-hit cost is its
//! loop time minus that round's bare loop of the same length, over the calls.
//!
//! A report, not a test: nothing in `cargo xtask test` runs it.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use std::{fs, thread};

use anyhow::{Context as _, Result, bail, ensure};

use super::{Ctx, echo, is_root, output_ok, run, show};

/// Delve, pinned: installed through the Go module proxy into the target directory,
/// for this report only.
pub(crate) const DELVE_VERSION: &str = "v1.27.2";
const DELVE_PACKAGE: &str = "github.com/go-delve/delve/cmd/dlv";

/// Where the generated section of docs/peers.md starts and ends.
const BEGIN: &str = "<!-- peers:go:begin (cargo xtask peers writes this section) -->";
const END: &str = "<!-- peers:go:end -->";

/// Longest one measured run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(clap::Args)]
pub(crate) struct PeersArgs {
    /// Rounds; each runs every variant once, in an order rotated from round to round.
    #[arg(long, default_value_t = 5)]
    repeats: u32,
    /// Calls of main.traceMe under Delve (about 1.6 ms each here).
    #[arg(long, default_value_t = 1_000)]
    dlv_calls: u64,
    /// Calls under bpftrace and probetop.
    #[arg(long, default_value_t = 100_000)]
    calls: u64,
    /// The page whose generated section is replaced (created if missing)
    /// [default: docs/peers.md].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// No tracer, as many calls as under Delve.
    BareShort,
    Bare,
    Delve,
    Bpftrace,
    Probetop(&'static str),
}

const VARIANTS: [Variant; 7] = [
    Variant::BareShort,
    Variant::Bare,
    Variant::Delve,
    Variant::Bpftrace,
    Variant::Probetop("ring"),
    Variant::Probetop("sample"),
    Variant::Probetop("kernel"),
];

impl Variant {
    fn name(self) -> String {
        match self {
            Variant::BareShort | Variant::Bare => "bare".into(),
            Variant::Delve => format!("Delve {DELVE_VERSION} (ptrace, conditional tracepoint)"),
            Variant::Bpftrace => "bpftrace (uprobe, same predicate)".into(),
            Variant::Probetop(mode) => format!("probetop --mode {mode}"),
        }
    }

    fn short(self) -> bool {
        matches!(self, Variant::BareShort | Variant::Delve)
    }

    fn bare(self) -> Variant {
        if self.short() {
            Variant::BareShort
        } else {
            Variant::Bare
        }
    }
}

struct Tools {
    dlv: PathBuf,
    probetop: PathBuf,
    gofix: PathBuf,
    dlv_init: PathBuf,
}

pub(crate) fn run_peers(ctx: &Ctx, args: &PeersArgs) -> Result<()> {
    ensure!(
        is_root()?,
        "bpftrace and probetop attach uprobes: run as root"
    );
    ensure!(
        args.repeats >= 1 && args.calls >= 1 && args.dlv_calls >= 1,
        "--repeats, --calls and --dlv-calls: give at least 1"
    );
    super::setup(ctx)?;
    let dlv = setup_delve(ctx)?;
    super::fixtures(ctx)?;
    super::build(ctx)?;
    let dir = ctx.target_dir().join("peers");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // The seed's tracepoint, kept from printing by a condition that never holds: every
    // hit still stops the process, lets Delve evaluate it, and resumes. `trace` also
    // sets a return breakpoint (2), which the seed's entry tracepoint does not have.
    let dlv_init = dir.join("dlv-init.txt");
    fs::write(
        &dlv_init,
        "trace main.traceMe\ncondition 1 x == -1\nclear 2\ncontinue\nexit -c\n",
    )
    .with_context(|| format!("writing {}", dlv_init.display()))?;
    let tools = Tools {
        dlv,
        probetop: ctx.target_dir().join("release/probetop"),
        gofix: ctx.root.join("fixtures/build/go/gofix"),
        dlv_init,
    };
    let mut loops: Vec<Vec<(Variant, f64)>> = Vec::new();
    for round in 0..args.repeats as usize {
        let mut order = VARIANTS.to_vec();
        order.rotate_left(round % VARIANTS.len());
        let mut measured = Vec::new();
        for variant in order {
            let calls = if variant.short() {
                args.dlv_calls
            } else {
                args.calls
            };
            let ns = measure(&tools, variant, calls)
                .with_context(|| format!("round {}: {}", round + 1, variant.name()))?;
            eprintln!(
                "peers: round {}: {}: {calls} calls in {:.1} ms",
                round + 1,
                variant.name(),
                ns / 1e6
            );
            measured.push((variant, ns));
        }
        loops.push(measured);
    }
    // Paths relative to the repository root, so the page reads the same from any clone.
    // bpftrace wants the uprobe's file as an absolute path: `$PWD/` at the root.
    let section = render(args, &tools, &loops)
        .replace(&format!("{}/", ctx.root.display()), "")
        .replace("'uprobe:fixtures/", "'uprobe:$PWD/fixtures/");
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| ctx.root.join("docs/peers.md"));
    write_section(&out, &section)?;
    println!("{section}");
    println!("peers: wrote {}", out.display());
    Ok(())
}

/// Installs the pinned Delve into <target>/peers/bin unless it is there already.
fn setup_delve(ctx: &Ctx) -> Result<PathBuf> {
    let bin = ctx.target_dir().join("peers/bin");
    let dlv = bin.join("dlv");
    let want = DELVE_VERSION.trim_start_matches('v');
    if let Ok(out) = Command::new(&dlv).arg("version").output()
        && String::from_utf8_lossy(&out.stdout).contains(&format!("Version: {want}"))
    {
        println!("setup: delve {DELVE_VERSION}: ok");
        return Ok(dlv);
    }
    let go = if Path::new("/usr/local/go/bin/go").is_file() {
        PathBuf::from("/usr/local/go/bin/go")
    } else {
        PathBuf::from("go")
    };
    run(Command::new(go)
        .args(["install", &format!("{DELVE_PACKAGE}@{DELVE_VERSION}")])
        .env("GOBIN", &bin)
        .env("GOTOOLCHAIN", "local"))?;
    ensure!(dlv.is_file(), "go install left no {}", dlv.display());
    Ok(dlv)
}

/// One run of `variant`: the fixture's loop time, ns.
fn measure(tools: &Tools, variant: Variant, calls: u64) -> Result<f64> {
    let calls = calls.to_string();
    match variant {
        Variant::BareShort | Variant::Bare => {
            let mut cmd = Command::new(&tools.gofix);
            cmd.args(["--count", &calls, "--time"]);
            echo(&cmd);
            loop_ns(&String::from_utf8_lossy(&output_ok(&mut cmd)?.stdout))
        }
        Variant::Delve => {
            let mut cmd = Command::new(&tools.dlv);
            cmd.arg("exec")
                .arg(&tools.gofix)
                .args(["--allow-non-terminal-interactive=true", "--init"])
                .arg(&tools.dlv_init)
                .args(["--", "--count", &calls, "--time"])
                .stdin(Stdio::null());
            echo(&cmd);
            let out = output_ok(&mut cmd)?;
            loop_ns(&String::from_utf8_lossy(&out.stdout))
        }
        Variant::Bpftrace | Variant::Probetop(_) => {
            let fixture = Proc::spawn(Command::new(&tools.gofix).args([
                "--wait-signal",
                "--count",
                &calls,
                "--time",
            ]))?;
            fixture.wait_for("ready pid=", Duration::from_secs(10))?;
            let pid = fixture.pid().to_string();
            let mut tracer = Command::new(if variant == Variant::Bpftrace {
                Path::new("bpftrace")
            } else {
                &tools.probetop
            });
            let ready = if let Variant::Probetop(mode) = variant {
                // The mode's own price, without the streamed start that reads the clock.
                tracer
                    .args(["--pid", &pid, "--no-tui", "--mode", mode])
                    .args(["--clock-seconds", "0"])
                    .args(["-e", "uprobe:main.traceMe"]);
                "attached"
            } else {
                let program = format!(
                    "uprobe:{}:\"main.traceMe\" /(int64)reg(\"ax\") == -1/ {{ printf(\"%d\\n\", reg(\"ax\")); }}",
                    tools.gofix.display()
                );
                tracer.args(["-p", &pid, "-e", &program]);
                "Attaching 1 probe"
            };
            let mut tracer = Proc::spawn(&mut tracer)?;
            tracer.wait_for(ready, Duration::from_secs(60))?;
            if variant == Variant::Bpftrace {
                // bpftrace prints that line before attaching, and nothing after. It
                // holds one perf event per CPU for its output buffers, opened first,
                // then one per probe.
                let cpus = thread::available_parallelism().map_or(1, |n| n.get());
                let deadline = Instant::now() + Duration::from_secs(60);
                while perf_events(tracer.pid()) <= cpus {
                    ensure!(
                        Instant::now() < deadline,
                        "bpftrace attached no probe in 60 s"
                    );
                    thread::sleep(Duration::from_millis(5));
                }
            }
            fixture.signal("USR1")?;
            let done = fixture.wait_for("done calls=", RUN_TIMEOUT)?;
            // probetop ends with its target; bpftrace is told to.
            tracer.finish(Duration::from_secs(30))?;
            loop_ns(&done)
        }
    }
}

/// perf event file descriptors process `pid` holds.
fn perf_events(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| {
        dir.flatten()
            .filter(|fd| {
                fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:[perf_event]")
            })
            .count()
    })
}

fn loop_ns(output: &str) -> Result<f64> {
    output
        .split_whitespace()
        .find_map(|w| w.strip_prefix("loop_ns="))
        .and_then(|v| v.parse::<f64>().ok())
        .with_context(|| format!("no loop_ns= in the fixture's output: {output:?}"))
}

/// Median, min and max.
fn summary(values: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[0], v[n - 1])
}

fn show_summary((median, min, max): (f64, f64, f64), decimals: usize) -> String {
    format!("{median:.decimals$} ({min:.decimals$}-{max:.decimals$})")
}

fn render(args: &PeersArgs, tools: &Tools, loops: &[Vec<(Variant, f64)>]) -> String {
    let of = |round: &[(Variant, f64)], v: Variant| {
        round
            .iter()
            .find(|(x, _)| *x == v)
            .map_or(f64::NAN, |(_, ns)| *ns)
    };
    let calls = |v: Variant| {
        if v.short() {
            args.dlv_calls
        } else {
            args.calls
        }
    };
    let per_hit = |v: Variant| -> Vec<f64> {
        loops
            .iter()
            .map(|r| (of(r, v) - of(r, v.bare())) / calls(v) as f64)
            .collect()
    };
    let delve = per_hit(Variant::Delve);
    let kernel = String::from_utf8_lossy(
        &Command::new("uname")
            .arg("-r")
            .output()
            .map(|o| o.stdout)
            .unwrap_or_default(),
    )
    .trim()
    .to_string();
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    let mut s = String::new();
    s.push_str(BEGIN);
    s.push_str(&format!(
        "\n\nMeasured with `cargo xtask peers --repeats {} --dlv-calls {} --calls {}` on kernel \
         {kernel}, {cpus} CPUs (a shared VM: read the ratios, not the absolute times). \
         {} rounds, each running every variant once in a rotated order; a round's per-hit \
         cost is its loop time minus the same round's bare loop of the same length, over \
         the calls. Median (min-max) over the rounds.\n\n",
        args.repeats, args.dlv_calls, args.calls, args.repeats
    ));
    s.push_str("| variant | calls | loop ms | per hit, ns | Delve's per hit / this |\n");
    s.push_str("|---|---:|---:|---:|---:|\n");
    for v in VARIANTS {
        let ms: Vec<f64> = loops.iter().map(|r| of(r, v) / 1e6).collect();
        let (hit, ratio) = if matches!(v, Variant::BareShort | Variant::Bare) {
            ("-".to_string(), "-".to_string())
        } else {
            let hits = per_hit(v);
            let ratios: Vec<f64> = delve.iter().zip(&hits).map(|(d, h)| d / h).collect();
            (
                show_summary(summary(&hits), 0),
                show_summary(summary(&ratios), 1),
            )
        };
        s.push_str(&format!(
            "| {} | {} | {} | {hit} | {ratio} |\n",
            v.name(),
            calls(v),
            show_summary(summary(&ms), 2)
        ));
    }
    let mut dlv = Command::new(&tools.dlv);
    dlv.arg("exec")
        .arg(&tools.gofix)
        .args(["--allow-non-terminal-interactive=true", "--init"])
        .arg(&tools.dlv_init)
        .args(["--", "--count", &args.dlv_calls.to_string(), "--time"]);
    s.push_str(&format!(
        "\nThe commands (the fixture waits for SIGUSR1 under bpftrace and probetop, so \
         attaching is not timed):\n\n```sh\n{gofix} --count N --time\n{dlv}\n# {init}: \
         trace main.traceMe / condition 1 x == -1 / clear 2 / continue / exit -c\n\
         bpftrace -p PID -e 'uprobe:{gofix}:\"main.traceMe\" /(int64)reg(\"ax\") == -1/ \
         {{ printf(\"%d\\n\", reg(\"ax\")); }}'\n{probetop} --pid PID --no-tui --mode \
         ring|sample|kernel -e uprobe:main.traceMe\n```\n\n",
        gofix = tools.gofix.display(),
        dlv = show(&dlv),
        init = tools.dlv_init.display(),
        probetop = tools.probetop.display(),
    ));
    s.push_str(END);
    s
}

/// Replaces the section between [`BEGIN`] and [`END`] in `path`, or appends it.
fn write_section(path: &Path, section: &str) -> Result<()> {
    let old = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e => {
            format!("{}{section}{}", &old[..b], &old[e + END.len()..])
        }
        (None, None) => format!("{old}{}{section}\n", if old.is_empty() { "" } else { "\n" }),
        _ => bail!(
            "{}: its generated section's markers are unpaired; fix them by hand",
            path.display()
        ),
    };
    fs::write(path, new).with_context(|| format!("writing {}", path.display()))
}

/// A child whose stdout and stderr lines arrive on a channel; killed on drop.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    name: String,
}

impl Proc {
    fn spawn(cmd: &mut Command) -> Result<Self> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        echo(cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", show(cmd)))?;
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().context("stdout not captured")?;
        let err = child.stderr.take().context("stderr not captured")?;
        for stream in [
            Box::new(out) as Box<dyn std::io::Read + Send>,
            Box::new(err),
        ] {
            let tx = tx.clone();
            thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Self {
            child,
            lines,
            name: show(cmd),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_for(&self, needle: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return Ok(line),
                Ok(_) => {}
                Err(_) => bail!("`{}` printed no {needle:?} in {timeout:?}", self.name),
            }
        }
    }

    fn signal(&self, signal: &str) -> Result<()> {
        let status = Command::new("kill")
            .args(["-s", signal, &self.pid().to_string()])
            .status()
            .context("running kill")?;
        ensure!(status.success(), "kill -s {signal} {} failed", self.pid());
        Ok(())
    }

    /// Waits for the exit, sending SIGINT if it has not come in a second.
    fn finish(&mut self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let mut interrupted = false;
        loop {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            if !interrupted && start.elapsed() > Duration::from_secs(1) {
                let _ = self.signal("INT");
                interrupted = true;
            }
            ensure!(
                start.elapsed() < timeout,
                "`{}` did not exit in {timeout:?}",
                self.name
            );
            thread::sleep(Duration::from_millis(10));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_loop_time() {
        assert_eq!(
            loop_ns("ready pid=1\ndone calls=5 sink=20 loop_ns=1234\n").ok(),
            Some(1234.0)
        );
        assert!(loop_ns("done calls=5 sink=20\n").is_err());
    }

    #[test]
    fn median_and_range() {
        assert_eq!(summary(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(summary(&[4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }

    #[test]
    fn section_is_replaced_or_appended() {
        let dir = std::env::temp_dir().join(format!("peers-test-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("dir");
        let page = dir.join("peers.md");
        fs::write(&page, "# Peers\n\nintro\n").expect("write");
        write_section(&page, &format!("{BEGIN}\none\n{END}")).expect("append");
        write_section(&page, &format!("{BEGIN}\ntwo\n{END}")).expect("replace");
        let text = fs::read_to_string(&page).expect("read");
        assert_eq!(text, format!("# Peers\n\nintro\n\n{BEGIN}\ntwo\n{END}\n"));
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
