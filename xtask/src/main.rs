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
mod dist;
mod fuzz;
mod insitu_check;
mod kernels;
mod mysql;
mod mysql_report;
mod peers;

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
        /// Directory of mysqld.md [default: docs].
        #[arg(long)]
        out: Option<PathBuf>,
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
    "systemtap-sdt-dev", // sys/sdt.h for USDT fixtures
    "bpftrace",          // the peer tool probetop is measured against
    "bpftool",           // loaded programs and their run_time_ns/run_cnt
    "tmux",              // a terminal for the TUI without one (CI)
    "binutils",          // objdump/readelf on fixtures
    "xz-utils",
    "g++",
    "make",
    "python3",
    "python3-dev",             // Python.h for the CPython extension module fixture
    "prometheus",              // promtool validates the metrics export; a real server scrapes it
    "maven",                   // fetches HdrHistogram's Java reader for the .hlog cross-check
    "openjdk-17-jdk-headless", // runs it
    "mariadb-server",          // a live mysqld to probe (tests/mysql.rs, cargo xtask mysql-*)
    "sysbench",                // its load
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
            out,
        } => {
            let out = match out {
                Some(dir) => dir,
                None if quick => ctx.target_dir().join("insitu-check-quick"),
                None => ctx.root.join("docs"),
            };
            fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            let mut options = insitu_check::CheckOptions::new(quick, rates, modes, pairs, out)?;
            if let Some(seconds) = in_situ_seconds {
                ensure!(
                    seconds.is_finite() && seconds >= 5.0,
                    "--in-situ-seconds: give at least 5"
                );
                options.in_situ_seconds = seconds;
            }
            insitu_check::insitu_check(&ctx, options)
        }
        Task::Bench(args) => bench::run(&ctx, &args),
        Task::Peers(args) => peers::run_peers(&ctx, &args),
        Task::Fuzz { seconds, targets } => fuzz::fuzz(&ctx, seconds, &targets),
        Task::Kernels(args) => kernels::run_kernels(&ctx, &args),
    }
}

// ---------------------------------------------------------------------------------------
// Tasks

fn setup(ctx: &Ctx) -> Result<()> {
    setup_apt(ctx)?;
    setup_go(ctx)?;
    setup_nightly(ctx)?;
    setup_stable_components(ctx)?;
    setup_nightly_components(ctx)?;
    setup_bpf_linker(ctx)?;
    Ok(())
}

fn fixtures(ctx: &Ctx) -> Result<()> {
    run(Command::new("make")
        .arg("-C")
        .arg(ctx.root.join("fixtures")))
}

fn build(ctx: &Ctx) -> Result<()> {
    run(ctx.cargo().args(["build", "--release"]))
}

/// The eBPF crate, which only builds for bpfel-unknown-none with nightly: next to the
/// host crates, feature unification hands its probe-common dependency aya (and so std),
/// and clippy fails with a duplicate `panic_impl`. It is linted on its own target.
const EBPF_PACKAGE: &str = "probe-ebpf";

fn lint(ctx: &Ctx) -> Result<()> {
    // Run every check so one CI round reports every problem, then fail if any did.
    let results = [
        run(ctx.cargo().args(["fmt", "--all", "--check"])),
        run(ctx.cargo().args([
            "clippy",
            "--workspace",
            "--exclude",
            EBPF_PACKAGE,
            "--all-targets",
            "--release",
            "--",
            "-D",
            "warnings",
        ])),
        run(ctx.cargo().args([
            "+nightly",
            "clippy",
            "--package",
            EBPF_PACKAGE,
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--release",
            "--",
            "-D",
            "warnings",
        ])),
    ];
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.err().map(|e| format!("{e:#}")))
        .collect();
    ensure!(failed.is_empty(), "lint failed:\n  {}", failed.join("\n  "));
    Ok(())
}

fn test(ctx: &Ctx, harness_args: &[String]) -> Result<()> {
    ensure!(is_root()?, ROOT_REQUIRED);
    setup(ctx)?;
    // A lint failure fails the run, but only at the end: with builds this slow, one CI
    // round should also say whether the tests pass.
    let lint = lint(ctx);
    fixtures(ctx)?;
    build(ctx)?;
    // --release everywhere: the tests then reuse the release build (2 cores here).
    let mut cmd = ctx.cargo();
    cmd.args([
        "test",
        "--release",
        "--workspace",
        "--exclude",
        EBPF_PACKAGE,
    ])
    .env("PROBETOP_FIXTURES", ctx.root.join("fixtures/build"))
    // Both are installed by setup, so the cross-checks against the reference
    // implementations (Java's HdrHistogram reader, Prometheus's promtool) always run.
    .env("PROBETOP_JAVA_CHECK", "1")
    .env("PROBETOP_HAVE_PROMTOOL", "1");
    if !harness_args.is_empty() {
        cmd.arg("--").args(harness_args);
    }
    run(&mut cmd)?;
    // The release file for production hosts, unpacked and run against a fixture.
    let dist = dist::dist(ctx).and_then(|built| dist::check(ctx, &built));
    // A short round per fuzz target: replays the committed corpus (every past crasher
    // included) and explores a little further.
    let fuzzed = fuzz::fuzz(ctx, fuzz::SECONDS_IN_TEST, &[]);
    // probetop on older and newer kernels (qemu, ~2 min): in CI, or when asked for.
    let kernels = if env::var("CI").is_ok_and(|v| v == "true")
        || env::var("PROBETOP_KERNELS").is_ok_and(|v| v == "1")
    {
        kernels::run_kernels(ctx, &kernels::KernelsArgs::default())
    } else {
        Ok(())
    };
    let failed: Vec<String> = [lint, dist, fuzzed, kernels]
        .into_iter()
        .filter_map(|r| r.err().map(|e| format!("{e:#}")))
        .collect();
    ensure!(
        failed.is_empty(),
        "the tests passed, but:\n  {}",
        failed.join("\n  ")
    );
    Ok(())
}

fn soak(ctx: &Ctx, seconds: u32) -> Result<()> {
    ensure!(is_root()?, ROOT_REQUIRED);
    setup(ctx)?;
    fixtures(ctx)?;
    build(ctx)?;
    // One mode at a time: parallel floods would share the CPUs and halve each other.
    run(ctx
        .cargo()
        .args([
            "test",
            "--release",
            "-p",
            "probe-user",
            "--test",
            "overload",
        ])
        .args(["--", "--test-threads", "1", "--nocapture"])
        .env("PROBETOP_FIXTURES", ctx.root.join("fixtures/build"))
        .env("PROBETOP_SOAK_SECONDS", seconds.to_string()))
}

fn demo(ctx: &Ctx) -> Result<()> {
    ensure!(
        is_root()?,
        "probetop attaches real probes: run the demo as root"
    );
    setup(ctx)?;
    fixtures(ctx)?;
    build(ctx)?;

    let probetop = ctx.target_dir().join("release/probetop");
    ensure!(
        probetop.is_file(),
        "{} is missing after the build",
        probetop.display()
    );
    // No terminal (CI): a short, non-interactive run instead of the TUI.
    let interactive = std::io::stdin().is_terminal();

    let workload = ctx.root.join("fixtures/build/c/workload");
    let mut fixture = Fixture::start(
        Command::new(&workload).args(["--forever", "--rate", "20000"]),
        !interactive,
    )?;

    let mut cmd = Command::new(&probetop);
    cmd.arg("--pid").arg(fixture.pid.to_string());
    for probe in [
        "uprobe:work_unit",
        "uretprobe:work_unit",
        "uprobe:leaf_ret",
        "uretprobe:leaf_ret",
    ] {
        cmd.args(["-e", probe]);
    }
    if !interactive {
        cmd.args(["--no-tui", "--duration", "5"]);
    }
    // Foreground with the terminal inherited; the fixture is stopped whatever happens.
    let result = run(&mut cmd);
    fixture.stop();
    result
}

/// `cargo xtask mysql-sysbench`: one sysbench run against a private server.
fn mysql_sysbench(ctx: &Ctx, load: &SysbenchArgs, time: f64, probe: bool) -> Result<()> {
    ensure!(
        is_root()?,
        "mariadbd runs as root here and probetop needs it: run as root"
    );
    install_apt(ctx, mysql::PACKAGES)?;
    if probe {
        build(ctx)?;
    }
    let server = mysql::Mariadb::start(&mysql::ServerOptions::default())?;
    let sysbench = mysql::Sysbench::new(&server, load.tables, load.table_size);
    sysbench.prepare()?;
    let mut probetop = if probe {
        let mut cmd = Command::new(ctx.target_dir().join("release/probetop"));
        cmd.arg("--pid")
            .arg(server.pid().to_string())
            .args(["--preset", "mysql", "--no-tui"]);
        echo(&cmd);
        Some(mysql_report::Tool::start(
            cmd,
            "attached",
            mysql_report::Stream::Stderr,
        )?)
    } else {
        None
    };
    let result = sysbench.run(&load.test, load.threads, time)?;
    println!(
        "mysql-sysbench: {} threads={}: {} queries ({:.0}/s), {} transactions, p95 {:.2} ms",
        load.test, load.threads, result.queries, result.qps, result.transactions, result.p95_ms
    );
    if let Some(extra) = mysql::extra_commands_per_connection(&load.test, load.tables) {
        println!(
            "mysql-sysbench: dispatch_command should have run {} times ({} queries + {} \
             connections x {extra} prepare/close/quit commands)",
            result.queries + extra * u64::from(load.threads),
            result.queries,
            load.threads
        );
    }
    if let Some(tool) = probetop.as_mut() {
        print!("{}", tool.stop()?);
    }
    ensure!(server.ping(), "mariadbd stopped answering");
    Ok(())
}

/// `cargo xtask mysql-serve`: a private server under load until Enter.
fn mysql_serve(ctx: &Ctx, load: &SysbenchArgs) -> Result<()> {
    ensure!(
        is_root()?,
        "mariadbd runs as root here and probetop needs it: run as root"
    );
    install_apt(ctx, mysql::PACKAGES)?;
    let server = mysql::Mariadb::start(&mysql::ServerOptions::default())?;
    let sysbench = mysql::Sysbench::new(&server, load.tables, load.table_size);
    sysbench.prepare()?;
    // --time=0: no time limit; the child is killed below.
    let mut cmd = sysbench.command(&load.test);
    cmd.arg(format!("--threads={}", load.threads)).args([
        "--time=0",
        "--report-interval=10",
        "run",
    ]);
    echo(&cmd);
    let mut load_child = cmd
        .spawn()
        .with_context(|| format!("starting {}", show(&cmd)))?;
    println!(
        "\nmariadbd pid {} (socket {}, logs in {}) is under {} with {} threads. Try:\n\n  \
         {} --pid {} --preset mysql\n\nPress Enter to stop.\n",
        server.pid(),
        server.socket().display(),
        server.dir().display(),
        load.test,
        load.threads,
        ctx.target_dir().join("release/probetop").display(),
        server.pid()
    );
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    let _ = load_child.kill();
    let _ = load_child.wait();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// setup items

fn setup_apt(ctx: &Ctx) -> Result<()> {
    install_apt(ctx, APT_PACKAGES)?;
    println!("setup: apt packages: ok");
    Ok(())
}

/// Installs the `packages` that are missing, without starting any service they ship
/// (see [`mysql::install_missing`]).
fn install_apt(ctx: &Ctx, packages: &[&str]) -> Result<()> {
    mysql::install_missing(packages, |pkg| {
        let out = ctx.query(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))?;
        // Anything but this (not known, removed, config-files only, half-installed) needs
        // an install; dpkg-query fails outright for a package it has never seen.
        Ok(!(out.status.success() && out.stdout.trim() == "install ok installed"))
    })
}

/// The Go fixture needs a Go toolchain: the machine's own (/usr/local/go) when there is
/// one, else Debian's.
fn setup_go(ctx: &Ctx) -> Result<()> {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("go").is_file()));
    if on_path || Path::new("/usr/local/go/bin/go").is_file() {
        println!("setup: go: ok");
        return Ok(());
    }
    println!("setup: go: installing golang-go");
    install_apt(ctx, &["golang-go"])
}

fn setup_nightly(ctx: &Ctx) -> Result<()> {
    let out = ctx.query_ok(Command::new("rustup").args(["toolchain", "list"]))?;
    if out.lines().any(|l| l.starts_with("nightly")) {
        println!("setup: nightly toolchain: ok");
        return Ok(());
    }
    // Not installed here on purpose: the machine pins which nightly it ships, and
    // RUSTUP_AUTO_INSTALL=0 means nothing should pull a toolchain behind our back.
    bail!(
        "the nightly toolchain is missing (`rustup toolchain list` has no nightly); the eBPF \
         programs need it. Install it with `rustup toolchain install nightly --profile minimal \
         --component rust-src`, then rerun `cargo xtask setup`"
    )
}

/// `cargo xtask lint` runs rustfmt and clippy of the workspace's toolchain (stable here)
/// on the host crates; a minimal-profile toolchain lacks both.
fn setup_stable_components(ctx: &Ctx) -> Result<()> {
    setup_components(ctx, None, &["rustfmt", "clippy"])
}

/// Nightly builds the eBPF crate with -Z build-std=core (compiled from rust-src) and
/// lints it with its clippy.
fn setup_nightly_components(ctx: &Ctx) -> Result<()> {
    setup_components(ctx, Some("nightly"), &["rust-src", "clippy"])
}

/// Adds the `components` a toolchain (None: the one active at the root) lacks.
fn setup_components(ctx: &Ctx, toolchain: Option<&str>, components: &[&str]) -> Result<()> {
    let toolchain_args = |cmd: &mut Command| {
        if let Some(t) = toolchain {
            cmd.args(["--toolchain", t]);
        }
        cmd.current_dir(&ctx.root);
    };
    let mut list = Command::new("rustup");
    list.args(["component", "list", "--installed"]);
    toolchain_args(&mut list);
    let installed = ctx.query_ok(&mut list)?;
    let missing: Vec<&str> = components
        .iter()
        .copied()
        .filter(|c| !installed.lines().any(|l| has_component(l, c)))
        .collect();
    let item = format!(
        "{} {}",
        toolchain.unwrap_or("default toolchain"),
        components.join(", ")
    );
    if missing.is_empty() {
        println!("setup: {item}: ok");
        return Ok(());
    }
    println!("setup: {item}: installing {}", missing.join(" "));
    let mut add = Command::new("rustup");
    add.args(["component", "add"]).args(&missing);
    toolchain_args(&mut add);
    run(&mut add)
}

/// `rustup component list` prints `rust-src` but `clippy-x86_64-unknown-linux-gnu`.
fn has_component(line: &str, component: &str) -> bool {
    let line = line.trim();
    line == component
        || line
            .strip_prefix(component)
            .is_some_and(|rest| rest.starts_with('-'))
}

/// bpf-linker links the eBPF object with LLVM, and must use the same LLVM major as the
/// nightly rustc that emits the bitcode. It is built against nightly's own libLLVM
/// (no system LLVM needed), and a marker records which major it was built for, so a
/// nightly with a new LLVM triggers a rebuild.
fn setup_bpf_linker(ctx: &Ctx) -> Result<()> {
    let verbose =
        ctx.query_ok(Command::new("rustc").args(["+nightly", "--version", "--verbose"]))?;
    let major = llvm_major(&verbose)?;
    let cargo_home = cargo_home()?;
    let marker = cargo_home.join("probetop/bpf-linker.llvm");

    let marked = fs::read_to_string(&marker).is_ok_and(|m| m.trim() == major);
    if marked && bpf_linker_runs(ctx)? {
        println!("setup: bpf-linker (LLVM {major}): ok");
        return Ok(());
    }
    println!("setup: bpf-linker (LLVM {major}): building against nightly's libLLVM (~3 min)");

    // LLVM_PREFIX/lib must hold libLLVM.so for bpf-linker's build (llvm-sys links
    // -lLLVM) and the soname file itself: the binary's rpath points there, and without it
    // bpf-linker only runs where rustup puts nightly's lib/ on LD_LIBRARY_PATH.
    let prefix = cargo_home.join(format!("probetop/llvm-{major}"));
    let lib = prefix.join("lib");
    fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    let sysroot = ctx.query_ok(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?;
    let so = nightly_libllvm(&Path::new(sysroot.trim()).join("lib"))?;
    let so_name = so
        .file_name()
        .context("libLLVM path has no file name")?
        .to_owned();
    for link in [lib.join("libLLVM.so"), lib.join(&so_name)] {
        replace_symlink(&so, &link)?;
    }

    let mut install = Command::new("cargo");
    install
        .args([
            "+nightly",
            "install",
            "bpf-linker",
            "--locked",
            "--no-default-features",
            "--features",
        ])
        .arg(format!("llvm-{major}"))
        .arg("--force")
        .env("LLVM_PREFIX", &prefix)
        // cargo install would build in (and leave its objects behind in) a target dir
        // set for the workspace; without one it uses a temporary directory.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .stdin(Stdio::null());
    run(&mut install)?;

    ensure!(
        bpf_linker_runs(ctx)?,
        "bpf-linker was installed into {} but `bpf-linker --version` does not run: is {} on \
         PATH?",
        cargo_home.join("bin").display(),
        cargo_home.join("bin").display()
    );
    fs::write(&marker, format!("{major}\n"))
        .with_context(|| format!("writing {}", marker.display()))?;
    println!("setup: bpf-linker (LLVM {major}): installed");
    Ok(())
}

/// "LLVM version: 22.1.4" in `rustc -vV` -> "22".
fn llvm_major(rustc_verbose: &str) -> Result<String> {
    let version = rustc_verbose
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))
        .context("`rustc +nightly --version --verbose` prints no LLVM version")?
        .trim();
    let major = version.split('.').next().unwrap_or_default();
    ensure!(
        !major.is_empty() && major.bytes().all(|b| b.is_ascii_digit()),
        "cannot read the LLVM major from {version:?}"
    );
    Ok(major.to_owned())
}

/// The real libLLVM of a toolchain: `libLLVM.so.<ver>-rust-...` (its
/// `libLLVM-<major>-rust-...so` sibling is not the soname bpf-linker ends up needing).
fn nightly_libllvm(lib: &Path) -> Result<PathBuf> {
    let mut found = Vec::new();
    for entry in fs::read_dir(lib).with_context(|| format!("listing {}", lib.display()))? {
        let entry = entry.with_context(|| format!("listing {}", lib.display()))?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("libLLVM.so.")
        {
            found.push(entry.path());
        }
    }
    match found.as_slice() {
        [so] => Ok(so.clone()),
        [] => bail!("no libLLVM.so.* in {}", lib.display()),
        _ => bail!("several libLLVM.so.* in {}: {found:?}", lib.display()),
    }
}

fn replace_symlink(target: &Path, link: &Path) -> Result<()> {
    if link.symlink_metadata().is_ok() {
        fs::remove_file(link).with_context(|| format!("removing {}", link.display()))?;
    }
    println!("+ ln -s {} {}", target.display(), link.display());
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("linking {} -> {}", link.display(), target.display()))
}

/// Whether `bpf-linker --version` runs from PATH the way rustc will run it. Without
/// LD_LIBRARY_PATH: under `cargo +nightly` rustup puts nightly's lib/ there, which would
/// hide a missing or stale libLLVM link in the prefix.
fn bpf_linker_runs(ctx: &Ctx) -> Result<bool> {
    let mut cmd = Command::new("bpf-linker");
    cmd.arg("--version").env_remove("LD_LIBRARY_PATH");
    ctx.echo_query(&cmd);
    Ok(cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success()))
}

fn cargo_home() -> Result<PathBuf> {
    if let Some(home) = env::var_os("CARGO_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    let home = env::var_os("HOME").context("neither CARGO_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cargo"))
}

// ---------------------------------------------------------------------------------------
// Demo fixture

/// A background fixture process, stopped on [`Fixture::stop`] or on drop (error paths).
struct Fixture {
    child: Child,
    pid: u32,
    relay: Option<JoinHandle<()>>,
}

impl Fixture {
    /// Starts the fixture and waits for its `ready pid=<pid>` line, so probes attach to a
    /// process that has finished exec. Its later output is relayed to stderr when `relay`
    /// (no TUI to disturb) and dropped otherwise; it is always drained, so a full pipe
    /// never stalls the fixture.
    fn start(cmd: &mut Command, relay: bool) -> Result<Self> {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        echo(cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", show(cmd)))?;
        let stdout = child.stdout.take();
        // Owned by the guard from here on: every early return below stops the process.
        let mut fixture = Fixture {
            pid: child.id(),
            child,
            relay: None,
        };
        let mut reader = BufReader::new(stdout.context("the fixture's stdout was not captured")?);
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .context("reading the fixture's ready line")?;
        let expected = format!("ready pid={}", fixture.pid);
        ensure!(
            line.trim() == expected,
            "the fixture printed {line:?} instead of `{expected}`"
        );
        fixture.relay = Some(thread::spawn(move || {
            for line in reader.lines() {
                match line {
                    Ok(line) if relay => eprintln!("workload: {line}"),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }));
        Ok(fixture)
    }

    /// SIGTERM first so the workload prints its `done` line, SIGKILL if it lingers.
    fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let mut term = Command::new("kill");
        term.args(["-TERM", &self.pid.to_string()]);
        echo(&term);
        let termed = term.status().is_ok_and(|s| s.success());
        let deadline = Instant::now() + Duration::from_secs(3);
        while termed && Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(relay) = self.relay.take() {
            let _ = relay.join();
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------------------
// Running commands

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

struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Echoes and runs a command with inherited stdio; a non-zero exit is an error.
fn run(cmd: &mut Command) -> Result<()> {
    echo(cmd);
    let status = cmd
        .status()
        .with_context(|| format!("running {}", show(cmd)))?;
    ensure!(status.success(), "`{}` failed: {status}", show(cmd));
    Ok(())
}

/// Runs a command for its output; a non-zero exit is an error that carries its stderr.
/// Not echoed: callers that show what they run echo it first.
fn output_ok(cmd: &mut Command) -> Result<std::process::Output> {
    let out = cmd
        .output()
        .with_context(|| format!("running {}", show(cmd)))?;
    ensure!(
        out.status.success(),
        "`{}` failed ({}): {}",
        show(cmd),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(out)
}

fn echo(cmd: &Command) {
    eprintln!("+ {}", show(cmd));
}

/// A command as a shell line: `(cd DIR &&) VAR=value prog args`, quoted where needed.
fn show(cmd: &Command) -> String {
    let mut line = String::new();
    if let Some(dir) = cmd.get_current_dir() {
        let _ = write!(line, "cd {} && ", quote(dir.as_os_str()));
    }
    let removed: Vec<_> = cmd.get_envs().filter(|(_, v)| v.is_none()).collect();
    if !removed.is_empty() {
        line.push_str("env");
        for (key, _) in removed {
            let _ = write!(line, " -u {}", key.to_string_lossy());
        }
        line.push(' ');
    }
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            let _ = write!(line, "{}={} ", key.to_string_lossy(), quote(value));
        }
    }
    line.push_str(&quote(cmd.get_program()));
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    line
}

fn quote(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:+,@%".contains(&b));
    if plain {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Effective uid 0, read from /proc so xtask needs no libc bindings.
fn is_root() -> Result<bool> {
    let status = fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .context("no effective uid in /proc/self/status")?;
    Ok(euid == "0")
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
