//! What `cargo xtask` (src/main.rs) and the benchmark and report lab (xtask/lab) share:
//! the workspace ([`Ctx`]), running commands (`cmd`), setting the machine up (`setup`,
//! `apt`). The lab links this library; xtask runs the lab as a program, never links it.
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::{env, fs};

use anyhow::{Context as _, Result, bail, ensure};

pub mod apt;
pub mod cmd;
pub mod setup;
pub use cmd::*;
pub use setup::*;

/// apt packages the tests, fixtures and tooling use that a fresh Debian 12 machine of the
/// project's kind lacks.
pub const APT_PACKAGES: &[&str] = &[
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
    "debuginfod", // elfutils' server: serves a stripped fixture's debug file (tests/it/debuginfod.rs)
    "musl-tools", // musl-gcc: ring's C for the static musl build (`cargo xtask dist`)
    "openssl",    // the https tests' CA and certificates (tests/it/common/tls.rs)
];

pub const ROOT_REQUIRED: &str = "integration tests attach real probes: run as root";

/// Where the tasks run: the workspace root, and whether read-only checks are echoed.
pub struct Ctx {
    pub root: PathBuf,
    pub verbose: bool,
}

// ---------------------------------------------------------------------------------------
// The workspace: its root, its target directory and the cargo run there

impl Ctx {
    /// The workspace this xtask was built in (xtask/ is its child).
    pub fn new(verbose: bool) -> Result<Self> {
        Ok(Self {
            root: Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .context("xtask's manifest directory has no parent")?
                .to_path_buf(),
            verbose,
        })
    }

    /// cargo from PATH (the rustup proxy, so `+nightly` works), run at the workspace root.
    pub fn cargo(&self) -> Command {
        let mut cmd = Command::new("cargo");
        cmd.current_dir(&self.root);
        cmd
    }

    /// Where cargo puts build outputs: CARGO_TARGET_DIR if set (relative to the root,
    /// where cargo runs), else <root>/target.
    pub fn target_dir(&self) -> PathBuf {
        match env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
            Some(dir) => self.root.join(dir),
            None => self.root.join("target"),
        }
    }

    pub fn echo_query(&self, cmd: &Command) {
        if self.verbose {
            echo(cmd);
        }
    }

    /// Runs a read-only check and captures its output, whatever its exit status.
    pub fn query(&self, cmd: &mut Command) -> Result<Output> {
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
    pub fn query_ok(&self, cmd: &mut Command) -> Result<String> {
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
