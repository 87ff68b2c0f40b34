//! `cargo xtask`: probetop's developer and CI tasks.
//!
//! Everything shells out with plain [`Command`]s and echoes each one (`+ cmd`) before
//! running it, so a CI log shows exactly what happened and any step can be rerun by hand.
//! Read-only probes (`dpkg-query`, `rustup ... list`) are echoed only with `--verbose`,
//! so a `setup` with nothing to do stays one line per item.
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, IsTerminal as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use std::{env, fs, thread};

use anyhow::{Context as _, Result, bail, ensure};
use clap::{Parser, Subcommand};

mod bench;
mod direction;
mod dist;
mod fuzz;
mod insitu_check;
mod kernels;
mod mysql;
mod mysql_report;
mod others_report;
mod peers;
mod postgres;
mod postgres_report;
mod util;

mod cmd;
mod setup;
mod tasks;
use cmd::*;
use setup::*;
use tasks::*;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "probetop's setup, build, test and demo tasks"
)]
struct Cli {
    /// Also echo the read-only commands that check what is installed.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what a fresh machine lacks (apt packages, rustup components, bpf-linker).
    Setup,
    /// Build every fixture into fixtures/build/<lang>/.
    Fixtures,
    /// cargo build --release (also builds the eBPF object through probe-user's build.rs).
    Build,
    /// rustfmt check and clippy with warnings denied.
    Lint,
    /// One file for production hosts: a static (musl) probetop with its eBPF programs
    /// inside, packed with man pages, shell completions and a README into
    /// <target>/dist/probetop-VERSION-x86_64-linux-musl.tar.gz.
    Dist {
        /// Then unpack the tarball and probe a fixture with its probetop: exact counts
        /// (as root).
        #[arg(long)]
        check: bool,
    },
    /// setup, lint, fixtures, build, the whole test suite (as root), then `dist --check`,
    /// a short fuzzing round per fuzz target, and with CI=true or PROBETOP_KERNELS=1
    /// `kernels`.
    Test {
        /// Passed to the test harness: `cargo xtask test -- --test-threads 1`.
        #[arg(last = true)]
        harness_args: Vec<String>,
    },
    /// Run probetop against the C workload fixture.
    Demo,
    /// Build probe-user's fuzz targets (cargo fuzz, nightly) and run each from its
    /// committed corpus; fails on any crash.
    Fuzz {
        /// Seconds of fuzzing per target.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Only these targets (default: all).
        targets: Vec<String>,
    },
    /// The overload tests for longer: every CPU hits a probe as fast as it can, in each
    /// mode; every hit must be accounted for and probetop's memory stay flat.
    Soak {
        /// Seconds per mode.
        #[arg(long, default_value_t = 60)]
        seconds: u32,
    },
    /// Boot Debian's stock kernels (5.10, 6.1, 6.12 from bookworm-backports and from
    /// trixie) under qemu and run probetop's attach scenario in each: exact hit counts in
    /// ring and kernel mode, USDT with and without a semaphore, `list`; 5.10 must refuse
    /// in one line. Installs qemu and fetches the kernels into target/kernels/.
    Kernels(kernels::KernelsArgs),
    /// The seed's comparison on the Go fixture: main.traceMe's loop bare, under Delve's
    /// ptrace tracepoint, bpftrace, and probetop in each mode; writes its section of
    /// docs/peers.md. Installs the pinned Delve. As root; a report, not a test.
    Peers(peers::PeersArgs),
    /// Measure probetop against bpftrace (per-hit cost, throughput, attach latency,
    /// memory, calibration); writes docs/performance.{md,json}. As root.
    Bench(bench::BenchArgs),
    /// Start a private mariadbd (temporary datadir, unix socket only), prepare sysbench's
    /// tables, run one sysbench test (optionally with probetop attached), stop it.
    MysqlSysbench {
        #[command(flatten)]
        load: SysbenchArgs,
        /// Seconds of the run.
        #[arg(long, default_value_t = 10.0)]
        time: f64,
        /// Attach `probetop --preset mysql --no-tui` during the run and print its summary.
        #[arg(long)]
        probe: bool,
    },
    /// Start a private mariadbd under a sysbench load and keep it up until Enter (or
    /// stdin closes): for trying `probetop --pid PID --preset mysql` by hand.
    MysqlServe {
        #[command(flatten)]
        load: SysbenchArgs,
    },
    /// Measure what probing a live mariadbd costs it (probetop against bpftrace, under
    /// sysbench); writes docs/mysqld.md and docs/mysqld/.
    MysqlReport {
        /// A short try: 3 s runs, one repeat, written under the target directory unless
        /// --out is given.
        #[arg(long)]
        quick: bool,
        /// Seconds of each sysbench run [default: 10, --quick: 3].
        #[arg(long)]
        duration: Option<f64>,
        /// Runs of every cell and variant [default: 3, --quick: 1].
        #[arg(long)]
        repeats: Option<u32>,
        /// sysbench tests.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "oltp_read_only,oltp_point_select,oltp_read_write"
        )]
        tests: Vec<String>,
        /// Client thread counts.
        #[arg(long, value_delimiter = ',', default_value = "2,8")]
        threads: Vec<u32>,
        /// Skip pricing each probe on its own.
        #[arg(long)]
        no_per_probe: bool,
        /// Directory for mysqld.md and mysqld/ [default: docs, --quick:
        /// <target>/mysql-report-quick].
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value_t = 4)]
        tables: u32,
        #[arg(long, default_value_t = 10_000)]
        table_size: u32,
        /// Skip the in-situ check (as `cargo xtask insitu-check`, on the report's server,
        /// its default rates and modes).
        #[arg(long)]
        no_in_situ: bool,
    },
    /// Measure what probing a PostgreSQL cluster through its postmaster costs it
    /// (`--follow-forks --preset postgres` against bpftrace, under pgbench at a fixed
    /// rate, every query counted); writes docs/postgres.md and docs/postgres/.
    PostgresReport {
        /// A short try: 4 s runs, one round, a 10 s in-situ run, written under the
        /// target directory unless --out is given.
        #[arg(long)]
        quick: bool,
        /// Seconds of each pgbench run [default: 15, --quick: 4].
        #[arg(long)]
        seconds: Option<u32>,
        /// Rounds of every variant [default: 3, --quick: 1].
        #[arg(long)]
        rounds: Option<u32>,
        /// pgbench clients (connections, so backends).
        #[arg(long, default_value_t = 4)]
        clients: u32,
        /// Transactions per second pgbench sends over all clients (-R).
        #[arg(long, default_value_t = 2000)]
        rate: u32,
        /// pgbench's scale (100,000 accounts per unit; 5 fits in shared_buffers).
        #[arg(long, default_value_t = 5)]
        scale: u32,
        /// Seconds of the --in-situ run through the postmaster (-F), 0 for none [default: 40,
        /// --quick: 10].
        #[arg(long)]
        in_situ_seconds: Option<u32>,
        /// Directory for postgres.md and postgres/ [default: docs, --quick:
        /// <target>/postgres-report-quick].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// What other tools' probes cost a private mariadbd under open-loop sysbench, per
    /// tool (bpftrace count() and hist(), BCC funclatency and trace, a tracefs event):
    /// the truth measured outside, probetop's whole cost per hit, and the program time
    /// alone (bpftop's number); writes docs/others.md's table. A few minutes.
    OthersReport {
        /// Statements per second sysbench sends (open loop), one table each.
        #[arg(long, value_delimiter = ',', default_values_t = [2000u32])]
        rates: Vec<u32>,
        /// Attached blocks per tool, each between two detached ones.
        #[arg(long, default_value_t = 3)]
        pairs: u32,
        /// Seconds of each block.
        #[arg(long, default_value_t = 4.0)]
        block_seconds: f64,
        /// The function of mariadbd every tool probes.
        #[arg(long, default_value = others_report::DEFAULT_FUNCTION)]
        function: String,
        /// Directory of others.md [default: docs].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// probetop's --in-situ measurement and its estimate against the truth measured
    /// from outside, on a private mariadbd under an open-loop sysbench load; writes its
    /// section of docs/mysqld.md.
    InsituCheck {
        /// A short try: 2 pairs of 4 s blocks, 12 s in-situ runs, one rate and mode,
        /// written under the target directory unless --out is given.
        #[arg(long)]
        quick: bool,
        /// Point selects per second sysbench sends (open loop).
        #[arg(long, value_delimiter = ',', default_values_t = insitu_check::DEFAULT_RATES)]
        rates: Vec<u32>,
        #[arg(long, value_delimiter = ',', default_values_t = insitu_check::DEFAULT_MODES.map(String::from))]
        modes: Vec<String>,
        /// Attached/detached block pairs of the outside measurement [default: 6].
        #[arg(long)]
        pairs: Option<u32>,
        /// Length of each probetop --in-situ run [default: 60, --quick: 12].
        #[arg(long, value_name = "SECS")]
        in_situ_seconds: Option<f64>,
        /// Length of each block of the outside measurement [default: 8, --quick: 4].
        #[arg(long, value_name = "SECS")]
        block_seconds: Option<f64>,
        /// No blocks with probetop attached to a probe that never fires (its presence).
        #[arg(long)]
        no_presence: bool,
        /// Directory of mysqld.md [default: docs].
        #[arg(long)]
        out: Option<PathBuf>,
        /// probetop's --assume for the estimate column (auto, hot, cold, gap, clock).
        #[arg(long, default_value = "auto", value_parser = ["auto", "hot", "cold", "gap", "clock"])]
        assume: String,
    },
}

#[derive(clap::Args)]
struct SysbenchArgs {
    /// sysbench test: oltp_read_only, oltp_point_select, oltp_read_write, ...
    #[arg(long, default_value = "oltp_read_only")]
    test: String,
    /// Client connections.
    #[arg(long, default_value_t = 2)]
    threads: u32,
    #[arg(long, default_value_t = 4)]
    tables: u32,
    #[arg(long, default_value_t = 10_000)]
    table_size: u32,
}

/// apt packages the tests, fixtures and tooling use that a fresh Debian 12 machine of the
/// project's kind lacks.
const APT_PACKAGES: &[&str] = &[
    "systemtap-sdt-dev",   // sys/sdt.h for USDT fixtures
    "bpftrace",            // the peer tool probetop is measured against
    "bpftool",             // loaded programs and their run_time_ns/run_cnt
    "bpfcc-tools",         // BCC's tools: another owner of probes (tests/it/others.rs)
    "python3-bpfcc",       // their Python library
    "linux-headers-amd64", // headers BCC compiles its programs against (the kernel ships none)
    "linux-perf",          // `perf probe`: tracefs uprobe events, another owner of probes
    "tmux",                // a terminal for the TUI without one (CI)
    "binutils",            // objdump/readelf on fixtures
    "xz-utils",
    "g++",
    "make",
    "python3",
    "python3-dev",             // Python.h for the CPython extension module fixture
    "prometheus",              // promtool validates the metrics export; a real server scrapes it
    "maven",                   // fetches HdrHistogram's Java reader for the .hlog cross-check
    "openjdk-17-jdk-headless", // runs it
    "mariadb-server",          // a live mysqld to probe (tests/it/mysql.rs, cargo xtask mysql-*)
    "sysbench",                // its load
    "postgresql-15", // a live PostgreSQL and pgbench (tests/it/postgres.rs, cargo xtask postgres-report)
];

const ROOT_REQUIRED: &str = "integration tests attach real probes: run as root";

struct Ctx {
    root: PathBuf,
    verbose: bool,
}

fn main() -> ExitCode {
    forget_proxy_toolchain();
    // Print the error chain ourselves: with RUST_BACKTRACE=1 (set on this machine)
    // returning the error from main would add a backtrace to every failed command.
    match run_task(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// rustup's proxy runs us with RUSTUP_TOOLCHAIN set to the toolchain it picked for
/// `cargo xtask` (stable, or nightly after `cargo +nightly xtask`), and every cargo we
/// start would inherit it and ignore what the workspace would pick. Drop it unless the
/// user set it themselves (rustup then reports its source as `env`).
fn forget_proxy_toolchain() {
    let from_proxy = env::var_os("RUSTUP_TOOLCHAIN_SOURCE").is_some_and(|s| s != "env");
    if from_proxy {
        // SAFETY: first thing in main, before any thread exists that could read the
        // environment concurrently.
        unsafe {
            env::remove_var("RUSTUP_TOOLCHAIN");
            env::remove_var("RUSTUP_TOOLCHAIN_SOURCE");
        }
    }
}

fn run_task(cli: Cli) -> Result<()> {
    let ctx = Ctx {
        // Compile-time path of xtask/; the repository root is its parent.
        root: Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .context("xtask's manifest directory has no parent")?
            .to_path_buf(),
        verbose: cli.verbose,
    };
    match cli.task {
        Task::Setup => setup(&ctx),
        Task::Fixtures => fixtures(&ctx),
        Task::Build => build(&ctx),
        Task::Lint => lint(&ctx),
        Task::Dist { check } => {
            let built = dist::dist(&ctx)?;
            if check {
                fixtures(&ctx)?;
                dist::check(&ctx, &built)?;
            }
            Ok(())
        }
        Task::Test { harness_args } => test(&ctx, &harness_args),
        Task::Demo => demo(&ctx),
        Task::Soak { seconds } => soak(&ctx, seconds),
        Task::MysqlSysbench { load, time, probe } => mysql_sysbench(&ctx, &load, time, probe),
        Task::MysqlServe { load } => mysql_serve(&ctx, &load),
        Task::PostgresReport {
            quick,
            seconds,
            rounds,
            clients,
            rate,
            scale,
            in_situ_seconds,
            out,
        } => {
            let out = match out {
                Some(dir) => dir,
                None if quick => ctx.target_dir().join("postgres-report-quick"),
                None => ctx.root.join("docs"),
            };
            let seconds = seconds.unwrap_or(if quick { 4 } else { 15 });
            ensure!(seconds >= 1, "--seconds: give at least 1");
            ensure!(
                clients >= 1 && rate >= 1,
                "--clients and --rate: give at least 1"
            );
            postgres_report::postgres_report(
                &ctx,
                postgres_report::ReportOptions {
                    seconds,
                    rounds: rounds.unwrap_or(if quick { 1 } else { 3 }).max(1),
                    clients,
                    rate,
                    scale,
                    in_situ_seconds: in_situ_seconds.unwrap_or(if quick { 10 } else { 40 }),
                    out,
                },
            )
        }
        Task::MysqlReport {
            quick,
            duration,
            repeats,
            tests,
            threads,
            no_per_probe,
            out,
            tables,
            table_size,
            no_in_situ,
        } => {
            let out = match out {
                Some(dir) => dir,
                None if quick => ctx.target_dir().join("mysql-report-quick"),
                None => ctx.root.join("docs"),
            };
            let duration = duration.unwrap_or(if quick { 3.0 } else { 10.0 });
            ensure!(
                duration.is_finite() && duration >= 1.0,
                "--duration: give at least 1 second"
            );
            ensure!(
                !tests.is_empty() && !threads.is_empty(),
                "--tests and --threads need at least one value each"
            );
            mysql_report::mysql_report(
                &ctx,
                mysql_report::ReportOptions {
                    quick,
                    duration,
                    repeats: repeats.unwrap_or(if quick { 1 } else { 3 }).max(1),
                    tests,
                    threads,
                    per_probe: !no_per_probe,
                    tables,
                    table_size,
                    in_situ: (!no_in_situ)
                        .then(|| {
                            insitu_check::CheckOptions::new(
                                quick,
                                insitu_check::DEFAULT_RATES.to_vec(),
                                insitu_check::DEFAULT_MODES
                                    .iter()
                                    .map(|m| m.to_string())
                                    .collect(),
                                None,
                                out.clone(),
                            )
                        })
                        .transpose()?,
                    out,
                },
            )
        }
        Task::InsituCheck {
            quick,
            rates,
            modes,
            pairs,
            in_situ_seconds,
            block_seconds,
            no_presence,
            out,
            assume,
        } => {
            let out = match out {
                Some(dir) => dir,
                None if quick => ctx.target_dir().join("insitu-check-quick"),
                None => ctx.root.join("docs"),
            };
            fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            let mut options = insitu_check::CheckOptions::new(quick, rates, modes, pairs, out)?;
            options.assume = assume;
            options.presence = !no_presence;
            if let Some(seconds) = block_seconds {
                ensure!(
                    seconds.is_finite() && seconds >= 1.0,
                    "--block-seconds: give at least 1"
                );
                options.block_seconds = seconds;
            }
            if let Some(seconds) = in_situ_seconds {
                ensure!(
                    seconds.is_finite() && seconds >= 5.0,
                    "--in-situ-seconds: give at least 5"
                );
                options.in_situ_seconds = seconds;
            }
            insitu_check::insitu_check(&ctx, options)
        }
        Task::OthersReport {
            rates,
            pairs,
            block_seconds,
            function,
            out,
        } => {
            ensure!(
                !rates.is_empty() && pairs > 0 && block_seconds >= 1.0,
                "give --rates, --pairs of at least 1 and --block-seconds of at least 1"
            );
            let out = out.unwrap_or_else(|| ctx.root.join("docs"));
            others_report::others_report(
                &ctx,
                others_report::OthersOptions {
                    rates,
                    pairs,
                    block_seconds,
                    function,
                    out,
                },
            )
        }
        Task::Bench(args) => bench::run(&ctx, &args),
        Task::Peers(args) => peers::run_peers(&ctx, &args),
        Task::Fuzz { seconds, targets } => fuzz::fuzz(&ctx, seconds, &targets),
        Task::Kernels(args) => kernels::run_kernels(&ctx, &args),
    }
}

// ---------------------------------------------------------------------------------------
// The workspace: its root, its target directory and the cargo run there

impl Ctx {
    /// cargo from PATH (the rustup proxy, so `+nightly` works), run at the workspace root.
    fn cargo(&self) -> Command {
        let mut cmd = Command::new("cargo");
        cmd.current_dir(&self.root);
        cmd
    }

    /// Where cargo puts build outputs: CARGO_TARGET_DIR if set (relative to the root,
    /// where cargo runs), else <root>/target.
    fn target_dir(&self) -> PathBuf {
        match env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
            Some(dir) => self.root.join(dir),
            None => self.root.join("target"),
        }
    }

    fn echo_query(&self, cmd: &Command) {
        if self.verbose {
            echo(cmd);
        }
    }

    /// Runs a read-only check and captures its output, whatever its exit status.
    fn query(&self, cmd: &mut Command) -> Result<Output> {
        self.echo_query(cmd);
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", show(cmd)))?;
        Ok(Output {
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Like [`Ctx::query`], but the command must succeed; returns its stdout.
    fn query_ok(&self, cmd: &mut Command) -> Result<String> {
        let out = self.query(cmd)?;
        ensure!(
            out.status.success(),
            "{} failed ({}): {}",
            show(cmd),
            out.status,
            out.stderr.trim()
        );
        Ok(out.stdout)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_llvm_major() {
        let vv = "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nbinary: rustc\n\
                  LLVM version: 22.1.4\n";
        assert_eq!(llvm_major(vv).ok().as_deref(), Some("22"));
        assert!(llvm_major("rustc 1.0\n").is_err());
    }

    #[test]
    fn matches_components() {
        assert!(has_component("rust-src", "rust-src"));
        assert!(has_component("clippy-x86_64-unknown-linux-gnu", "clippy"));
        assert!(!has_component("rust-src-extra", "rust-src-e"));
        assert!(!has_component("rustfmt-preview-x", "rust"));
    }

    fn alive(pid: u32) -> bool {
        // A reaped child has no /proc entry; stop() always reaps.
        Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn fixture_is_stopped_on_drop() {
        // `exec` keeps the shell's pid, so `$$` is the pid of the process we spawned.
        let fixture = Fixture::start(
            Command::new("sh").args(["-c", "echo ready pid=$$; exec sleep 60"]),
            false,
        )
        .expect("the fake fixture starts");
        let pid = fixture.pid;
        assert!(alive(pid));
        drop(fixture);
        assert!(!alive(pid));
    }

    #[test]
    fn fixture_without_ready_line_is_stopped() {
        let err = Fixture::start(
            Command::new("sh").args(["-c", "echo hello; exec sleep 60"]),
            false,
        )
        .err()
        .expect("a fixture that never says ready is an error");
        // The error names the pid it expected, which is the spawned process: it must
        // not outlive the error.
        let msg = format!("{err:#}");
        let pid = msg
            .split_once("ready pid=")
            .and_then(|(_, rest)| rest.split('`').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .expect("the error names the pid");
        assert!(!alive(pid), "left running: {msg}");
    }

    #[test]
    fn shows_commands() {
        let mut cmd = Command::new("cargo");
        cmd.args(["install", "a b"]).env("LLVM_PREFIX", "/p");
        assert_eq!(show(&cmd), "LLVM_PREFIX=/p cargo install 'a b'");
        cmd.env_remove("CARGO_TARGET_DIR").current_dir("/r");
        assert_eq!(
            show(&cmd),
            "cd /r && env -u CARGO_TARGET_DIR LLVM_PREFIX=/p cargo install 'a b'"
        );
    }
}
