//! `cargo xtask`: probetop's developer and CI tasks.
//!
//! Everything shells out with plain [`Command`]s and echoes each one (`+ cmd`) before
//! running it, so a CI log shows exactly what happened and any step can be rerun by hand.
//! Read-only probes (`dpkg-query`, `rustup ... list`) are echoed only with `--verbose`,
//! so a `setup` with nothing to do stays one line per item.
use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, IsTerminal as _};
use std::process::{Child, Command, ExitCode, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use std::{env, thread};

use anyhow::{Context as _, Result, ensure};
use clap::{Parser, Subcommand};

mod direction;
mod dist;
mod fuzz;
mod kernels;

mod tasks;
use tasks::*;
use xtask::*;

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
    // The benchmark and report lab (xtask/lab, its own crate: it links probe-user's
    // export types), each run as `cargo run --release -p probetop-lab -- COMMAND ARGS`;
    // `cargo xtask COMMAND --help` shows its options.
    /// The seed's comparison on the Go fixture (Delve, bpftrace, probetop); writes its
    /// section of docs/peers.md. As root (xtask/lab).
    Peers(LabArgs),
    /// Measure probetop against bpftrace (per-hit cost, throughput, attach latency,
    /// memory, calibration); writes docs/performance.{md,json}. As root (xtask/lab).
    Bench(LabArgs),
    /// One sysbench run against a private mariadbd, optionally with probetop attached
    /// (xtask/lab).
    MysqlSysbench(LabArgs),
    /// A private mariadbd under a sysbench load until Enter, for trying probetop by hand
    /// (xtask/lab).
    MysqlServe(LabArgs),
    /// Measure what probing a live mariadbd costs it; writes docs/mysqld.md and
    /// docs/mysqld/ (xtask/lab).
    MysqlReport(LabArgs),
    /// Measure what probing a PostgreSQL cluster costs it; writes docs/postgres.md and
    /// docs/postgres/ (xtask/lab).
    PostgresReport(LabArgs),
    /// probetop's --in-situ measurement against the truth measured from outside, on a
    /// private mariadbd; writes its section of docs/mysqld.md (xtask/lab).
    InsituCheck(LabArgs),
}

/// A lab command's arguments, handed to the lab unparsed (its own clap parses them).
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
struct LabArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
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
    let ctx = Ctx::new(cli.verbose)?;
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
        Task::Peers(args) => lab(&ctx, "peers", &args.args),
        Task::Bench(args) => lab(&ctx, "bench", &args.args),
        Task::MysqlSysbench(args) => lab(&ctx, "mysql-sysbench", &args.args),
        Task::MysqlServe(args) => lab(&ctx, "mysql-serve", &args.args),
        Task::MysqlReport(args) => lab(&ctx, "mysql-report", &args.args),
        Task::PostgresReport(args) => lab(&ctx, "postgres-report", &args.args),
        Task::InsituCheck(args) => lab(&ctx, "insitu-check", &args.args),
        Task::Fuzz { seconds, targets } => fuzz::fuzz(&ctx, seconds, &targets),
        Task::Kernels(args) => kernels::run_kernels(&ctx, &args),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

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
