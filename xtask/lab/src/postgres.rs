//! A private PostgreSQL cluster and pgbench against it, for `cargo xtask postgres-report`.
//!
//! [`Cluster`] is Debian's postgres 15 started as our child on a data directory that
//! `initdb` makes in a new temporary directory, as the `postgres` user (postgres refuses
//! to run as root), reachable only through a unix socket in that directory
//! (`listen_addresses=''`), and stopped when the guard drops or xtask dies. The package's
//! own cluster (`/var/lib/postgresql/15/main`, its systemd unit) is never started; the
//! install goes through [`xtask::apt::install_missing`], which forbids service starts.
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use std::{fs, thread};

use anyhow::{Context as _, Result, bail, ensure};

use crate::mysql::{Stalled, file, stop_child, tail, temp_dir};
use crate::util::proc::process_cpu;
use crate::{echo, output_ok, show};

/// The server, initdb and pgbench (Debian ships pgbench in the server package).
pub(crate) const PACKAGES: &[&str] = &["postgresql-15"];

pub(crate) const BIN: &str = "/usr/lib/postgresql/15/bin";
pub(crate) const POSTGRES: &str = "/usr/lib/postgresql/15/bin/postgres";

/// How long past its `-T` a pgbench run may take before it counts as stalled.
const PGBENCH_GRACE: Duration = Duration::from_secs(60);

/// The database pgbench works in (initdb's own).
pub(crate) const DATABASE: &str = "postgres";

/// The `postgres` user's (uid, gid), from /etc/passwd.
fn postgres_ids() -> Result<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd").context("reading /etc/passwd")?;
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.first() != Some(&"postgres") {
                return None;
            }
            Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?))
        })
        .context("no postgres user: `cargo xtask setup` installs postgresql-15")
}

/// A private postmaster, stopped (and its directory removed) on drop.
pub(crate) struct Cluster {
    postmaster: Child,
    pid: u32,
    dir: PathBuf,
    /// The postmaster's command line, for reports.
    pub command_line: String,
}

impl Cluster {
    /// initdb in a new temporary directory and a postmaster on it; returns once it
    /// answers on its socket.
    pub(crate) fn start() -> Result<Self> {
        ensure!(
            Path::new(POSTGRES).exists(),
            "{POSTGRES} is missing: `cargo xtask setup` installs postgresql-15"
        );
        let (uid, gid) = postgres_ids()?;
        let dir = temp_dir("probetop-postgres")?;
        // From here every failure removes the directory: the guard owns it once made.
        let started = Self::start_in(&dir, uid, gid);
        if started.is_err() {
            let _ = fs::remove_dir_all(&dir);
        }
        started
    }

    fn start_in(dir: &Path, uid: u32, gid: u32) -> Result<Self> {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .with_context(|| format!("chown postgres {}", dir.display()))?;
        let data = dir.join("data");
        let log = dir.join("initdb.log");
        let mut initdb = Command::new(Path::new(BIN).join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            // Nobody but us reaches the socket directory; no password.
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .args(["-E", "UTF8", "--locale=C"])
            .uid(uid)
            .gid(gid)
            .stdin(Stdio::null())
            .stdout(file(&log)?)
            .stderr(file(&log)?);
        echo(&initdb);
        let status = initdb
            .status()
            .with_context(|| format!("running {}", show(&initdb)))?;
        if !status.success() {
            bail!(
                "`{}` failed ({status}); its log ends:\n{}",
                show(&initdb),
                tail(&log, 20)
            );
        }

        let mut cmd = Command::new(POSTGRES);
        cmd.arg("-D")
            .arg(&data)
            // The unix socket in our directory only: nothing listens on the network.
            .args(["-c", "listen_addresses="])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.display()))
            // Its workers would add transactions nobody asked for to the counts.
            .args(["-c", "autovacuum=off"])
            // A throwaway benchmark cluster: commits need not reach the disk.
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "shared_buffers=128MB", "-c", "max_connections=40"])
            .uid(uid)
            .gid(gid)
            .stdin(Stdio::null())
            .stdout(file(&dir.join("postgres.log"))?)
            .stderr(file(&dir.join("postgres.log"))?)
            // Its own process group: a Ctrl-C at the terminal goes to xtask, whose
            // guard (or the parent-death signal below) then stops the cluster.
            .process_group(0);
        let parent = std::process::id();
        // SAFETY: the closure runs in the forked child before exec (after its uid
        // changed, which would clear the setting) and calls only prctl and getppid,
        // which are async-signal-safe; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                // SIGINT (a fast shutdown) when xtask dies however it dies, so no
                // cluster outlives a killed report.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() as u32 != parent {
                    return Err(std::io::Error::other(
                        "xtask exited while starting postgres",
                    ));
                }
                Ok(())
            });
        }
        echo(&cmd);
        let command_line = show(&cmd);
        let postmaster = cmd
            .spawn()
            .with_context(|| format!("starting {command_line}"))?;
        let mut cluster = Cluster {
            pid: postmaster.id(),
            postmaster,
            dir: dir.to_path_buf(),
            command_line,
        };
        cluster.wait_ready(Duration::from_secs(60))?;
        Ok(cluster)
    }

    /// The postmaster's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    fn wait_ready(&mut self, patience: Duration) -> Result<()> {
        let deadline = Instant::now() + patience;
        let log = self.dir.join("postgres.log");
        loop {
            if let Some(status) = self.postmaster.try_wait().context("waiting for postgres")? {
                bail!(
                    "postgres exited while starting ({status}); its log ends:\n{}",
                    tail(&log, 20)
                );
            }
            if self.query("SELECT 1").is_ok() {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "postgres did not answer in {} within {patience:?}; its log ends:\n{}",
                self.dir.display(),
                tail(&log, 20)
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// psql (or pgbench, ...) from Debian's version-15 binaries, on our socket.
    pub(crate) fn client(&self, program: &str) -> Command {
        let mut cmd = Command::new(Path::new(BIN).join(program));
        cmd.arg("-h")
            .arg(&self.dir)
            .args(["-U", "postgres"])
            .stdin(Stdio::null());
        cmd
    }

    /// One statement on a new connection; its unaligned output without headers.
    pub(crate) fn query(&self, sql: &str) -> Result<String> {
        let mut cmd = self.client("psql");
        cmd.args(["-X", "-q", "-A", "-t", "-c", sql, DATABASE]);
        let out = output_ok(&mut cmd)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The postmaster's children now: backends and background processes.
    pub(crate) fn children(&self) -> Vec<u32> {
        children_of(self.pid)
    }

    /// CPU seconds of the whole cluster so far: the postmaster, its live children, and
    /// the children it has reaped (a backend's CPU moves there when it exits). Read it
    /// while no backend is exiting ([`Self::settle`]) for an exact difference.
    pub(crate) fn cpu_seconds(&self) -> Result<f64> {
        let (user, system) = process_cpu(self.pid, false)?;
        let (reaped_user, reaped_system) = process_cpu(self.pid, true)?;
        let mut total = user + system + reaped_user + reaped_system;
        for child in self.children() {
            // A child that exits meanwhile is counted in neither place: the caller
            // settles first, so none should.
            if let Ok((u, s)) = process_cpu(child, false) {
                total += u + s;
            }
        }
        Ok(total)
    }

    /// Waits until the postmaster has `count` children (the backends of a finished
    /// load gone and reaped), at most `patience`.
    pub(crate) fn settle(&self, count: usize, patience: Duration) -> Result<()> {
        let deadline = Instant::now() + patience;
        while self.children().len() > count {
            ensure!(
                Instant::now() < deadline,
                "postgres still has {} children after {patience:?} (expected {count})",
                self.children().len()
            );
            thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.postmaster.try_wait(), Ok(None))
    }

    /// SIGINT (a fast shutdown: clients disconnected, a checkpoint), SIGKILL after 60 s.
    pub(crate) fn stop(&mut self) -> Result<()> {
        if !self.is_running() {
            return Ok(());
        }
        stop_child(&mut self.postmaster, libc::SIGINT, "postgres")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("xtask: {e:#}");
        }
        if std::env::var_os("PROBETOP_KEEP_POSTGRES").is_some() {
            eprintln!(
                "xtask: kept {} (PROBETOP_KEEP_POSTGRES)",
                self.dir.display()
            );
        } else if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("xtask: cannot remove {}: {e}", self.dir.display());
        }
    }
}

/// Processes whose parent is `pid`, from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| {
            crate::util::proc::stat_fields(child)
                .and_then(|f| f.get(1)?.parse::<u32>().ok())
                .is_some_and(|ppid| ppid == pid)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// pgbench

/// What one `pgbench` run reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PgbenchResult {
    /// "number of transactions actually processed".
    pub transactions: u64,
    pub failed: u64,
    pub tps: f64,
    pub latency_ms: f64,
    /// The schedule lag of a rate-limited run: how late transactions started.
    pub lag_ms: f64,
}

/// pgbench's select-only script at a fixed rate (an open loop: the clients send on a
/// schedule, so a slower server shows as latency and lag, not as fewer requests).
#[derive(Debug, Clone)]
pub(crate) struct Pgbench {
    pub clients: u32,
    /// Transactions per second over all clients.
    pub rate: u32,
}

impl Pgbench {
    /// Creates pgbench's tables at `scale` (100,000 accounts per unit).
    pub(crate) fn init(cluster: &Cluster, scale: u32) -> Result<()> {
        let mut cmd = cluster.client("pgbench");
        cmd.args(["-i", "-q", "-s", &scale.to_string(), DATABASE])
            .stdout(Stdio::null());
        crate::run(&mut cmd)
    }

    /// The command of a run of `seconds`.
    pub(crate) fn command(&self, cluster: &Cluster, seconds: u32) -> Command {
        let mut cmd = cluster.client("pgbench");
        // -S select only, -n no vacuum first (autovacuum is off and the tables are
        // read-only), one thread: pgbench's CPU stays small beside the server's.
        cmd.args(["-S", "-n", "-j", "1"])
            .arg(format!("-c{}", self.clients))
            .arg(format!("-R{}", self.rate))
            .arg(format!("-T{seconds}"))
            .arg(DATABASE);
        cmd
    }

    /// Runs the load; a run still going [`PGBENCH_GRACE`] past its end is killed and
    /// comes back as [`Stalled`].
    pub(crate) fn run(&self, cluster: &Cluster, seconds: u32) -> Result<PgbenchResult> {
        let mut cmd = self.command(cluster, seconds);
        echo(&cmd);
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", show(&cmd)))?;
        let pid = child.id();
        let waiter = thread::spawn(move || child.wait_with_output());
        let deadline = Instant::now() + Duration::from_secs(u64::from(seconds)) + PGBENCH_GRACE;
        while !waiter.is_finished() {
            if Instant::now() > deadline {
                // SAFETY: kill(2) on our child's pid, not yet reaped (its waiter runs).
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                let _ = waiter.join();
                return Err(Stalled(format!(
                    "pgbench ran {} s past its -T{seconds} and was killed",
                    PGBENCH_GRACE.as_secs()
                ))
                .into());
            }
            thread::sleep(Duration::from_millis(50));
        }
        let out = waiter
            .join()
            .map_err(|_| anyhow::anyhow!("pgbench's waiter panicked"))?
            .with_context(|| format!("running {}", show(&cmd)))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "`{}` failed ({}): {}{}",
            show(&cmd),
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        parse_pgbench(&stdout)
    }
}

/// Queries pgbench's own connection sends before the clients start, when it runs a
/// built-in script with `-n`: it reads the scale (`select count(*) from
/// pgbench_branches`) and how pgbench_accounts is partitioned. Measured with
/// `--preset postgres`: that backend's query__start count.
pub(crate) const PGBENCH_SETUP_QUERIES: u64 = 2;

/// Reads pgbench 15's report.
pub(crate) fn parse_pgbench(text: &str) -> Result<PgbenchResult> {
    let after = |key: &str| -> Result<&str> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .map(str::trim)
            .with_context(|| format!("no `{key}` line in pgbench's output:\n{text}"))
    };
    let number = |key: &str| -> Result<f64> {
        let rest = after(key)?;
        rest.split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("cannot read `{key} {rest}`"))
    };
    Ok(PgbenchResult {
        transactions: number("number of transactions actually processed:")? as u64,
        failed: number("number of failed transactions:").unwrap_or(0.0) as u64,
        tps: number("tps =")?,
        latency_ms: number("latency average =")?,
        lag_ms: number("rate limit schedule lag: avg").unwrap_or(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "\
pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: select only>
scaling factor: 2
query mode: simple
number of clients: 3
number of threads: 1
maximum number of tries: 1
duration: 4 s
number of transactions actually processed: 2344
number of failed transactions: 0 (0.000%)
latency average = 0.810 ms
latency stddev = 1.638 ms
rate limit schedule lag: avg 0.338 (max 12.633) ms
initial connection time = 23.351 ms
tps = 589.211645 (without initial connection time)
";

    #[test]
    fn reads_pgbench_reports() {
        assert_eq!(
            parse_pgbench(REPORT).expect("parses"),
            PgbenchResult {
                transactions: 2344,
                failed: 0,
                tps: 589.211645,
                latency_ms: 0.810,
                lag_ms: 0.338,
            }
        );
        assert!(parse_pgbench("pgbench: error: connection failed").is_err());
    }

    #[test]
    fn finds_own_children() {
        let mut child = Command::new("sleep").arg("5").spawn().expect("sleep");
        let kids = children_of(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(kids.contains(&child.id()), "{kids:?}");
    }
}
