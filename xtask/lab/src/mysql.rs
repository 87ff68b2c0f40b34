//! A private MariaDB server and sysbench against it, for `cargo xtask mysql-*`.
//!
//! [`Mariadb`] is Debian's `mariadbd` started as our child on a datadir of its own in a
//! temporary directory, reachable only through a unix socket (`--skip-networking`), and
//! shut down when the guard drops. No system service is involved: the package's own
//! server (`/var/lib/mysql`, `/run/mysqld`) is never started, and xtask's
//! `apt::install_missing` keeps `apt-get install` from starting it.
use std::io::Read;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};
use std::{fs, thread};

use anyhow::{Context as _, Result, bail, ensure};

use crate::{echo, output_ok, run, show};

/// The server (mariadbd, mariadb-install-db, the mariadb client) and the load generator.
pub(crate) const PACKAGES: &[&str] = &["mariadb-server", "sysbench"];

pub(crate) const MARIADBD: &str = "/usr/sbin/mariadbd";

/// How long past its `--time` a sysbench run may take before it counts as stalled.
const SYSBENCH_GRACE: Duration = Duration::from_secs(120);

/// A process that did not finish in time: sysbench past its `--time`, or a tool that
/// ignored SIGINT. A report loses that run, not the whole report.
#[derive(Debug)]
pub(crate) struct Stalled(pub String);

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Stalled {}

/// The database sysbench works in.
pub(crate) const DATABASE: &str = "sbtest";

// ---------------------------------------------------------------------------------------
// The private server

/// How the private server is configured.
#[derive(Debug, Clone)]
pub(crate) struct ServerOptions {
    /// InnoDB buffer pool: small, but it holds sysbench's tables, so the load is CPU-bound.
    pub buffer_pool_mib: u32,
    pub max_connections: u32,
    /// Run a copy of mariadbd made in the server's directory: uprobes are set per
    /// inode, so probes on the copy never trap in another mariadbd on the machine (nor
    /// theirs in ours), even from a tool that does not scope probes to a pid.
    pub private_binary: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            buffer_pool_mib: 256,
            max_connections: 64,
            private_binary: false,
        }
    }
}

/// A private mariadbd, shut down (and its directory removed) on drop.
pub(crate) struct Mariadb {
    child: Child,
    pid: u32,
    dir: PathBuf,
    socket: PathBuf,
    exe: PathBuf,
    /// The server's command line, for reports.
    pub command_line: String,
}

impl Mariadb {
    /// Creates a datadir in a new temporary directory and starts mariadbd on it; returns
    /// once the server answers on its socket.
    pub(crate) fn start(options: &ServerOptions) -> Result<Self> {
        let dir = temp_dir("probetop-mariadb")?;
        let datadir = dir.join("data");
        let socket = dir.join("mysqld.sock");
        let exe = if options.private_binary {
            let copy = dir.join("mariadbd");
            if let Err(e) = fs::copy(MARIADBD, &copy) {
                let _ = fs::remove_dir_all(&dir);
                return Err(e).with_context(|| format!("copying {MARIADBD}"));
            }
            copy
        } else {
            PathBuf::from(MARIADBD)
        };

        let mut install = Command::new("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", datadir.display()))
            // mariadbd refuses to run as root unless told to; we are root (BPF needs it).
            .arg("--user=root")
            // root@localhost without a password: the socket is private to us.
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db");
        let log = dir.join("install.log");
        echo(&install);
        let status = install
            .stdin(Stdio::null())
            .stdout(file(&log)?)
            .stderr(file(&log)?)
            .status()
            .with_context(|| format!("running {}", show(&install)));
        let ok = status.as_ref().is_ok_and(|s| s.success());
        if !ok {
            let tail = tail(&log, 20);
            let _ = fs::remove_dir_all(&dir);
            bail!(
                "`{}` failed ({}); its log ends:\n{tail}",
                show(&install),
                match status {
                    Ok(s) => s.to_string(),
                    Err(e) => format!("{e:#}"),
                }
            );
        }

        let mut cmd = Command::new(&exe);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", datadir.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
            .arg(format!("--log-error={}", dir.join("error.log").display()))
            .arg(format!("--tmpdir={}", dir.display()))
            .arg("--user=root")
            // The unix socket only: nothing listens on the network, not even loopback.
            .arg("--skip-networking")
            .arg("--skip-name-resolve")
            .arg(format!(
                "--innodb-buffer-pool-size={}M",
                options.buffer_pool_mib
            ))
            .arg("--innodb-log-file-size=64M")
            // A throwaway benchmark server: commits need not reach the disk, so the
            // read-write load measures CPU, as the read-only ones do, not fsync.
            .arg("--innodb-flush-log-at-trx-commit=2")
            .arg(format!("--max-connections={}", options.max_connections))
            .stdin(Stdio::null())
            .stdout(file(&dir.join("mariadbd.out"))?)
            .stderr(file(&dir.join("mariadbd.out"))?)
            // Its own process group: a Ctrl-C at the terminal goes to xtask, whose guard
            // (or the parent-death signal below) then shuts the server down cleanly.
            .process_group(0);
        let parent = std::process::id();
        // SAFETY: the closure runs in the forked child before exec and calls only prctl
        // and getppid, which are async-signal-safe; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                // SIGTERM (mariadbd's shutdown signal) when xtask dies however it dies,
                // so no server outlives a killed report.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before prctl: then nobody would stop us.
                if libc::getppid() as u32 != parent {
                    return Err(std::io::Error::other(
                        "xtask exited while starting mariadbd",
                    ));
                }
                Ok(())
            });
        }
        echo(&cmd);
        let command_line = show(&cmd);
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(e).with_context(|| format!("starting {command_line}"));
            }
        };
        // The guard owns the process and the directory from here on.
        let mut server = Mariadb {
            pid: child.id(),
            child,
            dir,
            socket,
            exe,
            command_line,
        };
        server.wait_ready(Duration::from_secs(120))?;
        server.query(&format!("CREATE DATABASE IF NOT EXISTS {DATABASE}"))?;
        Ok(server)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    /// The mariadbd binary the server runs (a private copy with `private_binary`).
    pub(crate) fn exe(&self) -> &Path {
        &self.exe
    }

    /// The temporary directory holding the datadir, socket and logs.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn wait_ready(&mut self, patience: Duration) -> Result<()> {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(status) = self.child.try_wait().context("waiting for mariadbd")? {
                bail!(
                    "mariadbd exited while starting ({status}); {} ends:\n{}",
                    self.dir.join("error.log").display(),
                    tail(&self.dir.join("error.log"), 20)
                );
            }
            if self.socket.exists() && self.ping() {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "mariadbd did not answer on {} within {patience:?}; {} ends:\n{}",
                self.socket.display(),
                self.dir.join("error.log").display(),
                tail(&self.dir.join("error.log"), 20)
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the server answers `mariadb-admin ping`.
    pub(crate) fn ping(&self) -> bool {
        Command::new("mariadb-admin")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket.display()))
            .args(["--user=root", "--connect-timeout=5", "ping"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Runs SQL with the mariadb client; returns its tab-separated output without headers.
    pub(crate) fn query(&self, sql: &str) -> Result<String> {
        let mut cmd = Command::new("mariadb");
        cmd.arg("--no-defaults")
            .arg(format!("--socket={}", self.socket.display()))
            .args(["--user=root", "--batch", "--skip-column-names", "-e", sql]);
        let out = output_ok(cmd.stdin(Stdio::null()))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether the server process still runs.
    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM (a clean InnoDB shutdown), SIGKILL if it takes over a minute.
    pub(crate) fn stop(&mut self) -> Result<()> {
        if !self.is_running() {
            return Ok(());
        }
        stop_child(&mut self.child, libc::SIGTERM, "mariadbd")
    }
}

/// Sends `signal` to our child (a server's clean shutdown) and waits for it to exit;
/// SIGKILL if it takes over a minute.
pub(crate) fn stop_child(child: &mut Child, signal: libc::c_int, name: &str) -> Result<()> {
    let pid = child.id();
    println!("+ kill -{signal} {pid}  # {name}");
    // SAFETY: kill(2) on our own unreaped child's pid: it cannot name another process.
    unsafe { libc::kill(pid as libc::pid_t, signal) };
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    bail!("{name} (pid {pid}) ignored signal {signal} for 60 s: killed")
}

impl Drop for Mariadb {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("xtask: {e:#}");
        }
        if std::env::var_os("PROBETOP_KEEP_MARIADB").is_some() {
            eprintln!("xtask: kept {} (PROBETOP_KEEP_MARIADB)", self.dir.display());
        } else if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("xtask: cannot remove {}: {e}", self.dir.display());
        }
    }
}

/// A new directory under the system's temporary directory.
pub(crate) fn temp_dir(prefix: &str) -> Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()));
    fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

pub(crate) fn file(path: &Path) -> Result<fs::File> {
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// The last `lines` lines of a log, for error messages.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------------------------------
// sysbench

/// sysbench's OLTP tests against a server's socket.
#[derive(Debug, Clone)]
pub(crate) struct Sysbench {
    pub socket: PathBuf,
    pub tables: u32,
    pub table_size: u32,
}

/// What one `sysbench ... run` reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SysbenchResult {
    /// Every statement executed ("queries: total"), BEGIN/COMMIT included.
    pub queries: u64,
    pub transactions: u64,
    pub qps: f64,
    pub tps: f64,
    /// Latency of one event (a transaction), milliseconds.
    pub avg_ms: f64,
    pub p95_ms: f64,
    pub seconds: f64,
    pub errors: u64,
    pub reconnects: u64,
}

impl Sysbench {
    pub(crate) fn new(server: &Mariadb, tables: u32, table_size: u32) -> Self {
        Self {
            socket: server.socket().to_path_buf(),
            tables,
            table_size,
        }
    }

    /// `sysbench TEST --db-driver=mysql ...` without the command (prepare/run).
    pub(crate) fn command(&self, test: &str) -> Command {
        let mut cmd = Command::new("sysbench");
        cmd.arg(test)
            .arg("--db-driver=mysql")
            .arg(format!("--mysql-socket={}", self.socket.display()))
            .arg("--mysql-user=root")
            .arg(format!("--mysql-db={DATABASE}"))
            .arg(format!("--tables={}", self.tables))
            .arg(format!("--table-size={}", self.table_size))
            .stdin(Stdio::null());
        cmd
    }

    /// Creates and fills the tables (every OLTP test shares them).
    pub(crate) fn prepare(&self) -> Result<()> {
        let mut cmd = self.command("oltp_read_only");
        cmd.arg("prepare").stdout(Stdio::null());
        run(&mut cmd)
    }

    /// The command that runs `test` for `seconds` with `threads` client connections.
    pub(crate) fn run_command(&self, test: &str, threads: u32, seconds: f64) -> Command {
        let mut cmd = self.command(test);
        cmd.arg(format!("--threads={threads}"))
            // sysbench takes whole seconds; 0 would mean "no limit".
            .arg(format!("--time={}", seconds.round().max(1.0) as u64))
            .arg("--percentile=95")
            .arg("run");
        cmd
    }

    /// Runs `test` and parses what sysbench reports.
    /// Runs a test; a run still going [`SYSBENCH_GRACE`] past `seconds` (a client
    /// thread waiting on a server that stopped answering) is killed and comes back as
    /// [`Stalled`].
    pub(crate) fn run(&self, test: &str, threads: u32, seconds: f64) -> Result<SysbenchResult> {
        let mut cmd = self.run_command(test, threads, seconds);
        echo(&cmd);
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", show(&cmd)))?;
        // Read beside the wait, so a full pipe cannot stall the run.
        let readers: Vec<_> = [
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .map(|pipe| {
            thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_string(&mut text);
                }
                text
            })
        })
        .collect();
        let deadline = Instant::now() + Duration::from_secs_f64(seconds) + SYSBENCH_GRACE;
        let status = loop {
            if let Some(status) = child.try_wait().context("waiting for sysbench")? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Stalled(format!(
                    "sysbench ran {:.0} s past its --time={seconds} and was killed",
                    SYSBENCH_GRACE.as_secs_f64()
                ))
                .into());
            }
            thread::sleep(Duration::from_millis(50));
        };
        let mut texts = readers.into_iter().map(|r| r.join().unwrap_or_default());
        let (stdout, stderr) = (
            texts.next().unwrap_or_default(),
            texts.next().unwrap_or_default(),
        );
        ensure!(
            status.success(),
            "`{}` failed ({status}): {}{}",
            show(&cmd),
            stdout.trim(),
            stderr.trim()
        );
        parse_sysbench(&stdout)
    }
}

/// Client commands a sysbench OLTP connection sends besides the statements it counts
/// (as measured on dispatch_command: see docs/mysqld.md): one COM_STMT_PREPARE when it
/// starts and one COM_STMT_CLOSE when it ends for every statement it prepares, and
/// COM_QUIT. The handshake and the database named in it are no commands.
pub(crate) fn extra_commands_per_connection(test: &str, tables: u32) -> Option<u64> {
    // oltp_common.lua: BEGIN and COMMIT are prepared once; each kind of statement once
    // per table.
    let per_table = match test {
        // point_selects only, and no BEGIN/COMMIT.
        "oltp_point_select" => return Some(2 * u64::from(tables) + 1),
        // point, simple range, sum, order, distinct.
        "oltp_read_only" => 5,
        // the above, index and non-index updates, delete and insert.
        "oltp_read_write" => 9,
        _ => return None,
    };
    let prepared = 2 + per_table * u64::from(tables);
    Some(2 * prepared + 1)
}

/// Reads sysbench 1.0's report.
pub(crate) fn parse_sysbench(text: &str) -> Result<SysbenchResult> {
    // "    queries:                             40160  (8028.19 per sec.)"
    fn counted(text: &str, key: &str) -> Result<(u64, f64)> {
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(key))
            .with_context(|| format!("no `{key}` line in sysbench's output:\n{text}"))?;
        let rest = line[key.len()..].trim();
        let count = rest
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("cannot read {line:?}"))?;
        let rate = rest
            .split_once('(')
            .and_then(|(_, r)| r.split_whitespace().next())
            .and_then(|r| r.parse().ok())
            .unwrap_or(0.0);
        Ok((count, rate))
    }
    // "         95th percentile:                       10.09"
    fn value(text: &str, key: &str) -> Result<f64> {
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(key))
            .with_context(|| format!("no `{key}` line in sysbench's output:\n{text}"))?;
        line[key.len()..]
            .trim()
            .trim_end_matches('s')
            .parse()
            .with_context(|| format!("cannot read {line:?}"))
    }
    let (transactions, tps) = counted(text, "transactions:")?;
    let (queries, qps) = counted(text, "queries:")?;
    let (errors, _) = counted(text, "ignored errors:")?;
    let (reconnects, _) = counted(text, "reconnects:")?;
    Ok(SysbenchResult {
        queries,
        transactions,
        qps,
        tps,
        avg_ms: value(text, "avg:")?,
        p95_ms: value(text, "95th percentile:")?,
        seconds: value(text, "total time:")?,
        errors,
        reconnects,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "\
SQL statistics:
    queries performed:
        read:                            35140
        write:                           0
        other:                           5020
        total:                           40160
    transactions:                        2510   (501.76 per sec.)
    queries:                             40160  (8028.19 per sec.)
    ignored errors:                      0      (0.00 per sec.)
    reconnects:                          0      (0.00 per sec.)

General statistics:
    total time:                          5.0019s
    total number of events:              2510

Latency (ms):
         min:                                    0.89
         avg:                                    3.98
         max:                                   18.16
         95th percentile:                       10.09
         sum:                                 9984.76
";

    #[test]
    fn reads_sysbench_reports() {
        let r = parse_sysbench(REPORT).expect("parses");
        assert_eq!(
            r,
            SysbenchResult {
                queries: 40160,
                transactions: 2510,
                qps: 8028.19,
                tps: 501.76,
                avg_ms: 3.98,
                p95_ms: 10.09,
                seconds: 5.0019,
                errors: 0,
                reconnects: 0,
            }
        );
        assert!(parse_sysbench("FATAL: error").is_err());
    }

    #[test]
    fn counts_connection_overhead() {
        // Measured: 2 threads of oltp_point_select on 4 tables added 18 commands.
        assert_eq!(
            extra_commands_per_connection("oltp_point_select", 4),
            Some(9)
        );
        // 2 + 5*2 statements prepared and closed, and COM_QUIT.
        assert_eq!(extra_commands_per_connection("oltp_read_only", 2), Some(25));
        assert_eq!(
            extra_commands_per_connection("oltp_read_write", 4),
            Some(77)
        );
        assert_eq!(extra_commands_per_connection("bulk_insert", 4), None);
    }
}
