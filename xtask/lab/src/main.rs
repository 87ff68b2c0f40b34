//! probetop's benchmark and report lab: measurements of what probing costs a program
//! (bench, peers, mysql-report, postgres-report, insitu-check, others-report) and the private servers
//! and loads they run (mysql-sysbench, mysql-serve). Run through `cargo xtask COMMAND`,
//! which forwards here (`cargo run --release -p probetop-lab -- COMMAND`); shares xtask's library
//! (the workspace, commands, apt installs).
use std::fs;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context as _, Result, ensure};
use clap::{Parser, Subcommand};
use xtask::{Ctx, build, echo, fixtures, install_apt, is_root, output_ok, run, setup, show};

mod bench;
mod insitu_check;
mod mysql;
mod mysql_report;
mod others_report;
mod peers;
mod postgres;
mod postgres_report;
mod tool;
mod util;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "probetop's benchmark and report lab (xtask/lab)"
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
        /// TARGET_DIR/mysql-report-quick].
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
        /// TARGET_DIR/postgres-report-quick].
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
        /// probetop's --assume for the estimate column (auto, hot, cold, clock).
        #[arg(long, default_value = "auto", value_parser = ["auto", "hot", "cold", "clock"])]
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

fn main() -> ExitCode {
    match run_task(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lab: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_task(cli: Cli) -> Result<()> {
    let ctx = Ctx::new(cli.verbose)?;
    match cli.task {
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
        Task::Bench(args) => bench::run(&ctx, &args),
        Task::Peers(args) => peers::run_peers(&ctx, &args),
    }
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
        Some(tool::Tool::start(cmd, "attached", tool::Stream::Stderr)?)
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
