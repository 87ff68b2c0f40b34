//! probetop on a live PostgreSQL cluster with `--preset postgres`, attached to the
//! postmaster with `--follow-forks`: the backends forked for new connections are counted,
//! every statement, transaction and lock wait exactly, each under its backend's pid.
//!
//! Also: no site of the preset is single-stepped (or refused) in Debian's postgres.
//!
//! Needs Debian's postgresql-15 (`cargo xtask setup` installs it). The cluster is private
//! to the test: `initdb` in a temporary directory as the `postgres` user (postgres
//! refuses to run as root), a unix socket in that directory, no TCP, autovacuum off (its
//! workers would add transactions), stopped when the test ends.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

const BIN: &str = "/usr/lib/postgresql/15/bin";
/// Statements the first connection sends, besides one that fails.
const STATEMENTS: u64 = 200;

/// The `postgres` user's (uid, gid), from /etc/passwd.
fn postgres_ids() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"postgres"))
                .then(|| (f[2].parse().expect("uid"), f[3].parse().expect("gid")))
        })
        .expect("no postgres user: `cargo xtask setup` installs postgresql-15")
}

/// A private cluster, its postmaster stopped and its directory removed on drop.
struct Cluster {
    postmaster: Child,
    dir: PathBuf,
}

impl Cluster {
    fn start() -> Self {
        let postgres = Path::new(BIN).join("postgres");
        assert!(
            postgres.exists() && Path::new("/usr/bin/psql").exists(),
            "{} is missing: `cargo xtask setup` installs postgresql-15",
            postgres.display()
        );
        let (uid, gid) = postgres_ids();
        let dir = server_dir("pg");
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown the cluster dir");
        let data = dir.join("data");
        output_ok(
            Command::new(Path::new(BIN).join("initdb"))
                .arg("-D")
                .arg(&data)
                .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
                .arg("--locale=C")
                .uid(uid)
                .gid(gid)
                .stdin(Stdio::null()),
            "initdb",
        );
        let mut cmd = Command::new(&postgres);
        cmd.arg("-D")
            .arg(&data)
            // The socket in our directory, nothing on TCP.
            .args(["-c", "listen_addresses="])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.display()))
            .args(["-c", "autovacuum=off", "-c", "fsync=off"])
            .uid(uid)
            .gid(gid)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("postgres.log")).expect("log file"));
        // SIGINT, a fast shutdown, if the test dies without the guard.
        stop_with_test(&mut cmd, libc::SIGINT);
        let postmaster = cmd.spawn().expect("start postgres");
        let mut cluster = Cluster { postmaster, dir };
        wait_until_answering(
            &mut cluster,
            "postgres",
            |c| &mut c.postmaster,
            |c| c.psql("SELECT 1").is_ok(),
            Cluster::log,
        );
        cluster
    }

    fn pid(&self) -> u32 {
        self.postmaster.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
    }

    /// psql on a new connection, reading its statements from stdin.
    fn client(&self) -> Command {
        let mut cmd = Command::new("psql");
        cmd.arg("-h")
            .arg(&self.dir)
            .args(["-U", "postgres", "-X", "-q", "-A", "-t", "postgres"]);
        cmd
    }

    /// `statements` on a new connection (`psql -f -`), after `SELECT pg_backend_pid()`:
    /// the backend's pid, and psql's output, whatever the statements did.
    fn backend_runs(&self, statements: &str) -> (u32, std::process::Output) {
        let mut client = self
            .client()
            .arg("-f")
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("psql");
        client
            .stdin
            .take()
            .expect("stdin")
            .write_all(format!("SELECT pg_backend_pid();\n{statements}").as_bytes())
            .expect("write to psql");
        let out = client.wait_with_output().expect("psql runs");
        let backend = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("no backend pid in {out:?}"));
        (backend, out)
    }

    /// One statement on a new connection: its output, or psql's error.
    fn psql(&self, sql: &str) -> Result<String, String> {
        let out = self
            .client()
            .args(["-c", sql])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SIGINT: a fast shutdown (clients disconnected, a checkpoint).
        stop_server(&mut self.postmaster, libc::SIGINT, &self.dir);
    }
}

/// The process whose command line (postgres sets its title) contains `needle`.
fn process_titled(needle: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        String::from_utf8_lossy(&cmdline)
            .contains(needle)
            .then_some(pid)
    })
}

/// A session that takes a table lock and holds it until told to commit, while a second
/// session's SELECT on the table waits for it: exactly one lock wait.
fn one_lock_wait(cluster: &Cluster) {
    let mut holder = cluster
        .client()
        // Echo each command's tag, so we see the lock taken.
        .args(["-c", "\\set QUIET off"])
        .arg("-f")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("psql holding the lock");
    let mut stdin = holder.stdin.take().expect("stdin");
    stdin
        .write_all(b"BEGIN;\nLOCK TABLE t;\n")
        .expect("write to psql");
    stdin.flush().expect("flush psql");
    let lines = Lines::from_stdout(holder.stdout.take().expect("stdout"));
    lines.wait_for("LOCK TABLE");
    let waiter = cluster
        .client()
        .args(["-c", "SELECT count(*) FROM t"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("psql waiting for the lock");
    let mut waiter = KillOnDrop(waiter);
    // The backend's title ends in "waiting" while it waits on a heavyweight lock.
    let deadline = Instant::now() + PATIENCE;
    while process_titled("SELECT waiting").is_none() {
        assert!(Instant::now() < deadline, "the SELECT never waited");
        std::thread::sleep(Duration::from_millis(20));
    }
    stdin.write_all(b"COMMIT;\n").expect("write to psql");
    drop(stdin);
    assert!(holder.wait().expect("holder exits").success());
    assert!(waiter.0.wait().expect("waiter exits").success());
}

/// Kills a client left running by a failed assertion.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Spec `spec`'s hits, and their split by pid, summed over its sites (a USDT probe may
/// have several, each a probe of its own in the export).
fn hits(report: &serde_json::Value, spec: &str) -> (u64, BTreeMap<u32, u64>) {
    let probes: Vec<&serde_json::Value> = report["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .filter(|p| p["spec"] == spec)
        .collect();
    assert!(!probes.is_empty(), "no probe {spec} in {report}");
    let (mut total, mut pids) = (0, BTreeMap::new());
    for probe in probes {
        assert_eq!(probe["dropped"], 0, "{probe}");
        total += probe["hits"].as_u64().expect("hits");
        for (pid, n) in probe["pids"].as_object().into_iter().flatten() {
            *pids.entry(pid.parse().expect("pid")).or_insert(0) += n.as_u64().expect("count");
        }
    }
    (total, pids)
}

/// The preset's latency specs.
const QUERY: &str = "latency:postgresql:query__start,query__done";
const TRANSACTION: &str = "latency:postgresql:transaction__start,transaction__commit";

/// The hits of one half (USDT probe `name`) of the preset's latency spec `spec`.
fn half(report: &serde_json::Value, spec: &str, name: &str) -> (u64, BTreeMap<u32, u64>) {
    let mut only = report.clone();
    if let Some(probes) = only["probes"].as_array_mut() {
        probes.retain(|p| p["kind"] == "usdt" && p["name"] == format!("postgresql:{name}"));
    }
    hits(&only, spec)
}

/// The latency row (every call, no key) of the pair `name` (`START,END`).
fn latency<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .find(|p| p["kind"] == "latency" && p["name"] == name && p.get("key").is_none())
        .unwrap_or_else(|| panic!("no latency row {name} in {report}"))
}

#[test]
#[ignore = "needs root and PostgreSQL (cargo xtask setup)"]
fn counts_every_backend_through_the_postmaster() {
    let _turn = turn(module_path!());
    let cluster = Cluster::start();
    cluster.psql("CREATE TABLE t (x int)").expect("create t");

    let json = export_path("postgres.json");
    let html = export_path("postgres.html");
    let mut cmd = probetop();
    cmd.args(["--pid", &cluster.pid().to_string(), "--follow-forks"])
        .args(["--preset", "postgres", "--no-tui", "--export"])
        .arg(&json)
        .arg("--export")
        .arg(&html);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached 12 probes");

    // A new connection: its backend is forked after probetop attached. It says its pid,
    // runs STATEMENTS statements and one that fails (division by zero).
    let mut script = String::new();
    for i in 0..STATEMENTS {
        script.push_str(&format!("SELECT {i};\n"));
    }
    script.push_str("SELECT 1/0;\n");
    let (backend, out) = cluster.backend_runs(&script);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("division by zero"),
        "{out:?}"
    );

    // Two more connections: one holds a table lock, the other waits for it.
    one_lock_wait(&cluster);

    probetop.signal(libc::SIGINT);
    let status = probetop.wait();
    let stderr = probetop.err().rest();
    assert!(status.success(), "probetop failed: {stderr:?}");
    let report = read_export(&json);
    let n = STATEMENTS + 1; // with pg_backend_pid()

    // The first backend: every statement starts; the failing one never finishes, is a
    // transaction that aborts, and is refused in planning, before any portal runs. A backend
    // runs one transaction of its own as it starts (reading the catalogs).
    let q = half(&report, QUERY, "query__start");
    let done = half(&report, QUERY, "query__done");
    let run = hits(&report, "usdt:postgresql:query__execute__start");
    let ran = hits(&report, "usdt:postgresql:query__execute__done");
    let begun = half(&report, TRANSACTION, "transaction__start");
    let committed = half(&report, TRANSACTION, "transaction__commit");
    let aborted = hits(&report, "usdt:postgresql:transaction__abort");
    let waits = hits(&report, "usdt:postgresql:lock__wait__start");
    let waited = hits(&report, "usdt:postgresql:lock__wait__done");
    let executed = hits(&report, "uprobe:ExecutorStart");
    let summary = format!("backend {backend}; {report}");
    assert_eq!(q.1.get(&backend), Some(&(n + 1)), "{summary}");
    assert_eq!(done.1.get(&backend), Some(&n), "{summary}");
    assert_eq!(run.1.get(&backend), Some(&n), "{summary}");
    assert_eq!(ran.1.get(&backend), Some(&n), "{summary}");
    assert_eq!(begun.1.get(&backend), Some(&(1 + n + 1)), "{summary}");
    assert_eq!(committed.1.get(&backend), Some(&(1 + n)), "{summary}");
    assert_eq!(aborted.1.get(&backend), Some(&1), "{summary}");
    assert_eq!(executed.1.get(&backend), Some(&n), "{summary}");

    // The lock holder sends BEGIN, LOCK and COMMIT (one transaction, none of them
    // executor work); the waiter one SELECT, which waits once.
    assert_eq!(q.0, n + 1 + 3 + 1, "{summary}");
    assert_eq!(done.0, n + 3 + 1, "{summary}");
    // Utility statements run in a portal too.
    assert_eq!(run.0, n + 3 + 1, "{summary}");
    assert_eq!(ran.0, n + 3 + 1, "{summary}");
    assert_eq!(begun.0, (1 + n + 1) + (1 + 1) + (1 + 1), "{summary}");
    assert_eq!(committed.0, (1 + n) + 2 + 2, "{summary}");
    assert_eq!(aborted.0, 1, "{summary}");
    assert_eq!(waits.0, 1, "{summary}");
    assert_eq!(waited.0, 1, "{summary}");
    assert_eq!(waits.1, waited.1, "{summary}");
    assert_eq!(executed.0, n + 1, "{summary}");
    // Three backends, none of them the postmaster, all forked after probetop started.
    assert_eq!(q.1.len(), 3, "{summary}");
    assert!(!q.1.contains_key(&cluster.pid()), "{summary}");

    // The preset's latency pairs: every query that finished, paired on its backend;
    // the failed one (no query__done) open at the end. Every committed transaction
    // paired; the aborted one open.
    let queries = latency(&report, "query__start,query__done");
    assert_eq!(queries["calls"], done.0, "{summary}");
    assert_eq!(queries["calls"], n + 3 + 1, "{summary}");
    assert_eq!(queries["open"], 1, "{queries}");
    assert_eq!(queries["unmatched"], 0, "{queries}");
    assert!(queries["latency_ns"]["p50"].as_u64() > Some(0), "{queries}");
    let transactions = latency(&report, "transaction__start,transaction__commit");
    assert_eq!(transactions["calls"], committed.0, "{summary}");
    assert_eq!(transactions["open"], aborted.0, "{transactions}");
    assert_eq!(transactions["unmatched"], 0, "{transactions}");

    // The HTML report tells the two sites of one USDT probe apart by their file
    // offsets, as the summary table does; a probe at one site keeps its bare name.
    let page = std::fs::read_to_string(&html).expect("the HTML report");
    let probes = report["probes"].as_array().expect("probes");
    for name in ["query__execute__start", "query__execute__done"] {
        let sites: Vec<u64> = probes
            .iter()
            .filter(|p| p["name"] == format!("postgresql:{name}"))
            .map(|p| p["file_offset"].as_u64().expect("file_offset"))
            .collect();
        assert_eq!(sites.len(), 2, "{name}: {report}");
        for site in sites {
            let cell = format!("<code>postgresql:{name} @{site:#x}</code>");
            assert_eq!(page.matches(&cell).count(), 1, "{cell} in {page}");
        }
    }
    // Its row and its percentile section's caption.
    assert_eq!(
        page.matches("<code>ExecutorStart</code>").count(),
        2,
        "{page}"
    );
    let _ = std::fs::remove_file(&html);

    // The cluster is unharmed and answers.
    assert_eq!(cluster.psql("SELECT count(*) FROM t").as_deref(), Ok("0"));
}

#[test]
#[ignore = "needs Debian's postgresql-15 (cargo xtask setup)"]
fn the_preset_has_no_single_stepped_site_in_debians_postgres() {
    let _turn = turn(module_path!());
    let postgres = format!("{BIN}/postgres");
    assert!(
        Path::new(&postgres).exists(),
        "{postgres} is missing: `cargo xtask setup` installs postgresql-15"
    );
    let preset = probe_user::inner::preset::text("postgres").expect("postgres preset");
    let mut checked = 0;
    for line in preset.lines() {
        let text = line.split('#').next().unwrap_or("").trim();
        if text.is_empty() {
            continue;
        }
        // A latency spec is two USDT probes, each checked.
        let specs = if probe_user::inner::spec::is_latency(text) {
            probe_user::inner::spec::parse_latency(text)
                .expect("preset specs parse")
                .to_vec()
        } else {
            vec![probe_user::inner::spec::ProbeSpec::parse(text).expect("preset specs parse")]
        };
        for spec in specs {
            let listing = list_json([postgres.as_str(), spec.name.as_str()]);
            let points = listing["points"].as_array().expect("points");
            // query__execute__* are two sites each in this build, the others one.
            assert!(!points.is_empty(), "{text}: not in {postgres}");
            for p in points {
                let class = p["cost_class"].as_str().expect("cost_class");
                assert!(
                    class.starts_with("emulated") || class == "optimized",
                    "{text}: {} is `{}`, {class}",
                    p["name"],
                    p["instruction"]
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 10);
}

/// PostgreSQL is C and leaves functions by `longjmp` on every `elog(ERROR)`. A
/// uretprobe is not refused there (no exception unwinds), and a `longjmp` past its frame
/// harms nothing: the kernel drops that frame's pending return, the probe misses it, and
/// the backend goes on. Errors raised while `PortalRun` executes a plan leave it that
/// way: its entries minus its returns are the failed statements, exactly.
#[test]
#[ignore = "needs root and PostgreSQL (cargo xtask setup)"]
fn a_uretprobe_survives_errors_that_longjmp_past_it() {
    let _turn = turn(module_path!());
    const FAILING: u64 = 20;
    let cluster = Cluster::start();
    cluster
        .psql("CREATE TABLE z (x int); INSERT INTO z VALUES (0)")
        .expect("create z");

    let json = export_path("postgres-longjmp.json");
    let mut cmd = probetop();
    cmd.args(["--pid", &cluster.pid().to_string(), "--follow-forks"])
        .args(["-e", "uprobe:PortalRun", "-e", "uretprobe:PortalRun"])
        .args(["--no-tui", "--export"])
        .arg(&json);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached 2 probes");

    // Division by zero while the executor runs (not in planning: x is read from z).
    let mut script = String::new();
    for i in 0..STATEMENTS {
        script.push_str(&format!("SELECT x + {i} FROM z;\n"));
        if i % (STATEMENTS / FAILING) == 0 {
            script.push_str("SELECT 1 / x FROM z;\n");
        }
    }
    let (backend, out) = cluster.backend_runs(&script);
    let errors = String::from_utf8_lossy(&out.stderr)
        .matches("division by zero")
        .count() as u64;
    assert_eq!(errors, FAILING, "{out:?}");

    probetop.signal(libc::SIGINT);
    let status = probetop.wait();
    let stderr = probetop.err().rest();
    assert!(status.success(), "probetop failed: {stderr:?}");
    let report = read_export(&json);
    let entries = hits(&report, "uprobe:PortalRun").1[&backend];
    let returns = hits(&report, "uretprobe:PortalRun").1[&backend];
    assert_eq!(entries, 1 + STATEMENTS + FAILING, "{report}");
    assert_eq!(entries - returns, FAILING, "{report}");
    // The cluster is unharmed and answers.
    assert_eq!(cluster.psql("SELECT count(*) FROM z").as_deref(), Ok("1"));
}
