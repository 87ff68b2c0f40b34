//! Shared helpers for integration tests: real fixtures, the real probetop binary.

use std::{
    io::{BufRead as _, BufReader},
    path::PathBuf,
    process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio},
    sync::mpsc,
    thread,
    time::Duration,
};

mod server;
mod summary;
mod tls;
mod tmux;
pub(crate) mod tracefs;
pub(crate) use server::{server_dir, stop_server, stop_with_test, wait_until_answering};
pub(crate) use summary::{summary_headline, summary_rows, widest_line};
pub(crate) use tls::{HttpsFiles, TestCa};
pub(crate) use tmux::{Tmux, assert_headline, shell_quote};
pub(crate) use tracefs::TracefsProbe;

/// Generous bound for anything that should take a second: CI machines are slow and busy.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// The built fixtures (`cargo xtask fixtures`).
pub(crate) fn fixture(relative: &str) -> PathBuf {
    let root = std::env::var_os("PROBETOP_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/build"));
    let path = root.join(relative);
    assert!(
        path.exists(),
        "fixture {} is missing: run `cargo xtask fixtures` (or `cargo xtask test`)",
        path.display()
    );
    path
}

/// probetop with no calibration: its cache in a directory of this test run's own that
/// is never filled. The machine's calibration (a developer's, or one a report left)
/// would change what a run does: with one, `--mode kernel` streams its first seconds to
/// price them by the ring's clock. A test that wants a calibration sets
/// XDG_CACHE_HOME itself, which overrides this.
pub(crate) fn probetop() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_probetop"));
    cmd.env("XDG_CACHE_HOME", no_calibration());
    cmd
}

/// A cache directory holding no calibration (it is never created).
pub(crate) fn no_calibration() -> PathBuf {
    std::env::temp_dir().join(format!("probetop-it-no-calibration-{}", std::process::id()))
}

/// Lines of a child's output, readable with a timeout.
pub(crate) struct Lines {
    rx: mpsc::Receiver<String>,
}

impl Lines {
    fn new(read: impl std::io::Read + Send + 'static) -> Self {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(read).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { rx }
    }

    pub(crate) fn from_stdout(out: ChildStdout) -> Self {
        Self::new(out)
    }

    pub(crate) fn from_stderr(err: ChildStderr) -> Self {
        Self::new(err)
    }

    /// The next line, or None at end of output or after `PATIENCE`.
    pub(crate) fn next(&self) -> Option<String> {
        self.rx.recv_timeout(PATIENCE).ok()
    }

    /// Discards the lines already read from the child, so the next one is fresh.
    pub(crate) fn skip_buffered(&self) {
        while self.rx.try_recv().is_ok() {}
    }

    /// Reads lines until one contains `needle`; panics with what was seen otherwise.
    pub(crate) fn wait_for(&self, needle: &str) -> String {
        let mut seen = Vec::new();
        while let Some(line) = self.next() {
            if line.contains(needle) {
                return line;
            }
            seen.push(line);
        }
        panic!("no line containing {needle:?}; saw: {seen:#?}");
    }

    /// The lines up to and with the first that contains `needle`; panics with what was
    /// seen otherwise.
    pub(crate) fn until(&self, needle: &str) -> Vec<String> {
        let mut seen = Vec::new();
        while let Some(line) = self.next() {
            let found = line.contains(needle);
            seen.push(line);
            if found {
                return seen;
            }
        }
        panic!("no line containing {needle:?}; saw: {seen:#?}");
    }

    /// Everything left, until end of output.
    pub(crate) fn rest(&self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(line) = self.next() {
            out.push(line);
        }
        out
    }
}

/// A child process killed when the test ends, pass or fail.
pub(crate) struct Running {
    pub child: Child,
    pub stdout: Option<Lines>,
    pub stderr: Option<Lines>,
}

impl Running {
    pub(crate) fn spawn(mut command: Command) -> Self {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A fixture copied a moment ago can be "busy": another test's child, forked
        // while the copy's descriptor was open for writing, holds it until its exec
        // closes it. That lasts microseconds; try again for a while.
        let mut tries = 0;
        let mut child = loop {
            match command.spawn() {
                Ok(child) => break child,
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("cannot start {command:?}: {e}"),
            }
        };
        let stdout = child.stdout.take().map(Lines::from_stdout);
        let stderr = child.stderr.take().map(Lines::from_stderr);
        Self {
            child,
            stdout,
            stderr,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes a line to the child's stdin (fixtures started with `--wait-stdin` go on).
    pub(crate) fn send_line(&mut self) {
        use std::io::Write as _;
        let stdin = self.child.stdin.as_mut().expect("stdin piped");
        stdin.write_all(b"go\n").expect("write to child");
        stdin.flush().expect("flush child stdin");
    }

    pub(crate) fn out(&self) -> &Lines {
        self.stdout.as_ref().expect("stdout captured")
    }

    pub(crate) fn err(&self) -> &Lines {
        self.stderr.as_ref().expect("stderr captured")
    }

    pub(crate) fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        let rc = unsafe { libc::kill(self.pid() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", self.pid());
    }

    /// Waits for exit, which must be a success; the rest of its stderr.
    pub(crate) fn ended_ok(&mut self) -> Vec<String> {
        let status = self.wait();
        let stderr = self.err().rest();
        assert!(
            status.success(),
            "pid {} ended with {status}: {stderr:#?}",
            self.pid()
        );
        stderr
    }

    /// Waits for exit, at most `PATIENCE`.
    pub(crate) fn wait(&mut self) -> ExitStatus {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "pid {} did not exit within {PATIENCE:?}",
                self.pid()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The foundation fixture, started and waiting for SIGUSR1 (`--wait-signal`).
pub(crate) fn workload(args: &[&str]) -> Running {
    started(&fixture("c/workload"), args)
}

/// The forker fixture, started: `early` workers forked before SIGUSR1, `late` after it,
/// `grand` children forked by each worker, then `args` (`--calls N`, `--hold`, ...).
pub(crate) fn forker(early: u32, late: u32, grand: u32, args: &[&str]) -> Running {
    let (early, late, grand) = (early.to_string(), late.to_string(), grand.to_string());
    let mut all: Vec<&str> = vec!["--early", &early, "--late", &late, "--grand", &grand];
    all.extend(args);
    started(&fixture("c/forker"), &all)
}

/// The execer fixture, started: `before` calls, then on SIGUSR1 an exec of `program`,
/// which waits for a SIGUSR1 of its own and makes `after` calls (the workload fixture
/// or execer again).
pub(crate) fn execer_into(program: &std::path::Path, before: u64, after: u64) -> Running {
    started(
        &fixture("c/execer"),
        &[
            "--calls",
            &before.to_string(),
            "--exec",
            &program.display().to_string(),
            "--wait-signal",
            "--calls",
            &after.to_string(),
        ],
    )
}

/// Has the execer fixture `target` make its calls and exec, and waits until the program
/// it exec'd is ready.
pub(crate) fn exec_now(target: &Running) {
    target.signal(libc::SIGUSR1);
    target.out().wait_for("exec");
    target.out().wait_for("ready pid=");
}

/// probetop `--pid PID --no-tui` with `args` (specs, `--mode`, `--follow-exec`, ...),
/// its JSON export written to `json` at its end: started.
pub(crate) fn exporting(pid: u32, args: &[&str], json: &std::path::Path) -> Running {
    let mut cmd = probetop();
    cmd.args(["--pid", &pid.to_string(), "--no-tui"])
        .args(args)
        .arg("--export")
        .arg(json);
    Running::spawn(cmd)
}

/// `program` (the workload fixture or a copy), started to make `calls` calls on SIGUSR1.
pub(crate) fn waiting(program: &std::path::Path, calls: u64) -> Running {
    started(program, &["--wait-signal", "--calls", &calls.to_string()])
}

/// `probetop --all --no-tui --duration 120 --export JSON`, from `cmd` (a [`probetop`]
/// command, with its environment), started.
pub(crate) fn all_exporting(mut cmd: Command, json: &std::path::Path) -> Running {
    cmd.args(["--all", "--no-tui", "--duration", "120", "--export"])
        .arg(json);
    Running::spawn(cmd)
}

/// Ends `probetop` with SIGINT, which it must exit 0 on: what it said on stderr, and its
/// JSON export at `json`.
pub(crate) fn interrupted(
    probetop: &mut Running,
    json: &std::path::Path,
) -> (String, serde_json::Value) {
    probetop.signal(libc::SIGINT);
    assert!(probetop.wait().success(), "{:?}", probetop.err().rest());
    (probetop.err().rest().join("\n"), read_export(json))
}

/// Starts `program` with `args` and waits for its `ready pid=` line.
pub(crate) fn started(program: &std::path::Path, args: &[&str]) -> Running {
    let mut command = Command::new(program);
    command.args(args);
    let running = Running::spawn(command);
    running.out().wait_for("ready pid=");
    running
}

/// Temporary path for an export, unique to this test process.
pub(crate) fn export_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("probetop-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// A JSON export probetop wrote.
pub(crate) fn read_export(path: &std::path::Path) -> serde_json::Value {
    let bytes = std::fs::read(path)
        .unwrap_or_else(|e| panic!("export {} not written: {e}", path.display()));
    serde_json::from_slice(&bytes).expect("the export is JSON")
}

/// Runs `cmd` to its end; it must succeed. `what` names it in a failure, which shows its
/// output.
pub(crate) fn output_ok(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `probetop list --json ARGS`, which must succeed: its listing.
pub(crate) fn list_json<I, S>(args: I) -> serde_json::Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = output_ok(
        probetop().args(["list", "--json"]).args(args),
        "probetop list",
    );
    serde_json::from_slice(&out.stdout).expect("the listing is JSON")
}

/// `function`'s file offset in `file`, as `probetop list` gives it.
pub(crate) fn file_offset(file: &std::path::Path, function: &str) -> u64 {
    let listing = list_json([file.as_os_str(), function.as_ref()]);
    listing["points"][0]["file_offset"]
        .as_u64()
        .unwrap_or_else(|| panic!("{function}'s file offset: {listing:#}"))
}

/// `probetop calibrate --json` (the default length, as users run it) with its cache
/// under `cache` (XDG_CACHE_HOME), which must succeed: the calibration.
pub(crate) fn calibrate_default(cache: &std::path::Path) -> serde_json::Value {
    let out = output_ok(
        probetop()
            .args(["calibrate", "--json"])
            .env("XDG_CACHE_HOME", cache),
        "probetop calibrate",
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// A cache directory (for XDG_CACHE_HOME) holding this machine's calibration: copied
/// from the user's cache when `probetop calibrate` ran here, else made by a default
/// calibration.
pub(crate) fn calibrated_cache(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "probetop-it-calibrated-{name}-{}",
        std::process::id()
    ));
    if copy_calibration(&dir) == 0 {
        calibrate_default(&dir);
    }
    dir
}

/// A copy of the C workload fixture at `dir/name`: its own inode, so a uprobe on it is
/// armed only in the processes running it, and no other test's probe (nor one the
/// kernel still keeps on the shared file) meets a third-party tool's there.
pub(crate) fn workload_copy(dir: &std::path::Path, name: &str) -> PathBuf {
    fixture_copy("c/workload", dir, name)
}

/// A copy of fixture `relative` at `dir/name` (`dir` made if missing): a file of the
/// test's own (see [`workload_copy`]).
pub(crate) fn fixture_copy(relative: &str, dir: &std::path::Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).expect("dir");
    let path = dir.join(name);
    std::fs::copy(fixture(relative), &path).expect("copy the fixture");
    path
}

/// Copies this machine's cached calibrations, if any, into the cache of a probetop run
/// with `XDG_CACHE_HOME=cache_home`; how many.
pub(crate) fn copy_calibration(cache_home: &std::path::Path) -> usize {
    let to = cache_home.join("probetop");
    std::fs::create_dir_all(&to).expect("cache dir");
    std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".cache/probetop"))
        .and_then(|from| std::fs::read_dir(from).ok())
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("calibration-"))
                .filter(|e| std::fs::copy(e.path(), to.join(e.file_name())).is_ok())
                .count()
        })
        .unwrap_or(0)
}

/// Runs probetop on `pid` with `args` until the target exits, after `release` lets the
/// target go once probes are live; returns the JSON export.
pub(crate) fn measure(pid: u32, args: &[&str], release: impl FnOnce()) -> serde_json::Value {
    let json = export_path(&format!("measure-{pid}.json"));
    let mut cmd = probetop();
    cmd.args(["--pid", &pid.to_string(), "--no-tui", "--export"])
        .arg(&json)
        .args(args);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    release();
    let status = probetop.wait();
    let stderr = probetop.err().rest();
    assert!(status.success(), "probetop {args:?} failed: {stderr:?}");
    read_export(&json)
}

/// Probe `name`'s entry in a JSON export.
pub(crate) fn probe<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no probe named {name:?} in {report}"))
}

/// The semaphore of USDT probe `probe_name` in process `pid`: its value, read (never
/// written) through /proc/PID/mem.
pub(crate) fn semaphore(pid: u32, probe_name: &str) -> u16 {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let listing = list_json(["--pid", &pid.to_string(), probe_name]);
    let point = &listing["points"][0];
    let object = point["object"].as_str().expect("object");
    let bias = listing["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .find(|o| o["path"] == object)
        .and_then(|o| o["load_bias"].as_u64())
        .expect("load bias");
    let address = bias
        + point["semaphore_address"]
            .as_u64()
            .expect("has a semaphore");
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("open mem");
    mem.seek(SeekFrom::Start(address)).expect("seek");
    let mut value = [0u8; 2];
    mem.read_exact(&mut value).expect("read semaphore");
    u16::from_ne_bytes(value)
}

/// The row of `pid` in an `--all` JSON export's `processes`.
pub(crate) fn row_of(report: &serde_json::Value, pid: u32) -> Option<&serde_json::Value> {
    report["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"] == pid)
}

/// BPF program and link ids held open by process `pid` (from /proc/PID/fdinfo).
pub(crate) fn bpf_ids_of(pid: u32) -> (Vec<u32>, Vec<u32>) {
    let mut programs = Vec::new();
    let mut links = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return (programs, links);
    };
    for entry in dir.flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        for line in info.lines() {
            if let Some(id) = line.strip_prefix("prog_id:") {
                programs.extend(id.trim().parse::<u32>().ok());
            } else if let Some(id) = line.strip_prefix("link_id:") {
                links.extend(id.trim().parse::<u32>().ok());
            }
        }
    }
    programs.sort_unstable();
    programs.dedup();
    links.sort_unstable();
    links.dedup();
    (programs, links)
}

/// Max entries of the BPF map named `name` (as the kernel keeps it: 15 characters at
/// most) that process `pid` holds open, from its map ids in /proc/PID/fdinfo.
pub(crate) fn map_entries_of(pid: u32, name: &str) -> Option<u32> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()?;
    dir.flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("map_id:")?.trim().parse::<u32>().ok())
        })
        .filter_map(|id| aya::maps::MapInfo::from_id(id).ok())
        .find(|map| {
            map.name_as_str()
                .is_some_and(|n| name.starts_with(n) && !n.is_empty())
        })
        .map(|map| map.max_entries())
}

/// The cookie of probetop's own flush probe (probe_common::FLUSH_PROBE_ID), on a
/// function in its own executable: not a probe of the target, so left out below.
const FLUSH_COOKIE: &str = "4294967295";

/// The fdinfo texts of process `pid`'s open files.
fn fdinfos_of(pid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .collect()
}

/// Perf events process `pid` holds open: one per attached uprobe or uretprobe, besides
/// probetop's own flush probe.
pub(crate) fn perf_events_of(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    let events = dir
        .flatten()
        .filter(|entry| {
            std::fs::read_link(entry.path())
                .is_ok_and(|target| target.as_os_str() == "anon_inode:[perf_event]")
        })
        .count();
    let own_flush = fdinfos_of(pid)
        .iter()
        .filter(|info| {
            info.lines().any(|l| l == "link_type:\tperf")
                && info
                    .lines()
                    .any(|l| l.strip_prefix("cookie:").map(str::trim) == Some(FLUSH_COOKIE))
        })
        .count();
    events.saturating_sub(own_flush)
}

/// The uprobe_multi links process `pid` holds, from /proc/PID/fdinfo: per link, its
/// type (`uprobe_multi` or `uretprobe_multi`) and how many probe points it holds;
/// probetop's own flush probe left out.
pub(crate) fn multi_links_of(pid: u32) -> Vec<(String, usize)> {
    let mut links: Vec<(String, usize)> = fdinfos_of(pid)
        .iter()
        .filter_map(|info| {
            let field = |key: &str| {
                info.lines()
                    .find_map(|l| Some(l.strip_prefix(key)?.trim().to_string()))
            };
            let kind = field("link_type:")?;
            if !kind.ends_with("probe_multi") {
                return None;
            }
            // Its point table: "cookie offset ref_ctr_offset" rows.
            let own_flush = info
                .lines()
                .any(|l| l.split_whitespace().next() == Some(FLUSH_COOKIE));
            if own_flush {
                return None;
            }
            Some((kind, field("uprobe_cnt:")?.parse().ok()?))
        })
        .collect();
    links.sort();
    links
}

/// Probe points process `pid` holds attached, whichever way: one per perf event, and
/// every point of its uprobe_multi links.
pub(crate) fn probe_points_of(pid: u32) -> usize {
    perf_events_of(pid) + multi_links_of(pid).iter().map(|(_, n)| n).sum::<usize>()
}

/// Whether probetop attaches through uprobe_multi links on this kernel unless told
/// otherwise: Linux 6.10 and later.
pub(crate) fn multi_links_expected() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= (6, 10)
}

/// Ids of every BPF program and link loaded in the kernel now.
pub(crate) fn loaded_bpf_ids() -> (Vec<u32>, Vec<u32>) {
    let programs = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|p| p.id())
        .collect();
    let links = aya::programs::loaded_links()
        .filter_map(Result::ok)
        .map(|l| l.id())
        .collect();
    (programs, links)
}

/// Asserts that none of `programs` and `links` is left in the kernel once probetop is
/// gone (programs go a moment after their links).
pub(crate) fn nothing_left_of(programs: &[u32], links: &[u32]) {
    let (loaded_programs, loaded_links) = bpf_ids_once_gone(programs, links);
    for id in programs {
        assert!(!loaded_programs.contains(id), "program {id} left loaded");
    }
    for id in links {
        assert!(!loaded_links.contains(id), "link {id} left attached");
    }
}

/// [`loaded_bpf_ids`] once none of `programs` and `links` is among them, or after
/// `PATIENCE`. The kernel puts a closed link's program after an RCU grace period (a
/// uprobe_multi link's after a tasks-trace one too), so a program can outlive its
/// holder's exit by a moment.
pub(crate) fn bpf_ids_once_gone(programs: &[u32], links: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let (loaded_programs, loaded_links) = loaded_bpf_ids();
        let gone = programs.iter().all(|id| !loaded_programs.contains(id))
            && links.iter().all(|id| !loaded_links.contains(id));
        if gone || std::time::Instant::now() > deadline {
            return (loaded_programs, loaded_links);
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Parses `key=value` out of a fixture's report line.
pub(crate) fn field(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// Waits for a fixture's `done calls=N` line and its exit: N must be `calls`, the exit a
/// success.
pub(crate) fn calls_done(target: &mut Running, calls: u64) {
    let done = target.out().wait_for("done calls=");
    assert_eq!(field(&done, "calls") as u64, calls, "{done}");
    assert!(target.wait().success());
}

/// Offsets from `function`'s entry of each of its instructions, as objdump decodes
/// `path` (binutils: an independent reading of the same bytes).
pub(crate) fn instruction_offsets(path: &std::path::Path, function: &str) -> Vec<u64> {
    let out = output_ok(
        Command::new("objdump")
            .arg(format!("--disassemble={function}"))
            .arg(path),
        "objdump (binutils)",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut entry = None;
    let mut offsets = Vec::new();
    for line in text.lines() {
        if line.ends_with(&format!("<{function}>:")) {
            entry = u64::from_str_radix(line.split_whitespace().next().unwrap_or(""), 16).ok();
            continue;
        }
        let (Some(entry), Some((address, rest))) = (entry, line.trim_start().split_once(':'))
        else {
            continue;
        };
        // Instruction lines are `  1a30:\t55  \tpush %rbp`; a long instruction's
        // continuation line has bytes but no mnemonic.
        let Ok(address) = u64::from_str_radix(address, 16) else {
            continue;
        };
        if rest.starts_with('\t') && rest.trim_start().contains('\t') {
            offsets.push(address - entry);
        }
    }
    assert!(
        !offsets.is_empty(),
        "objdump shows no {function} in {}",
        path.display()
    );
    offsets
}

/// Who runs beside whom: the one policy, and the only locks the integration tests take.
///
/// - One module's tests at a time, as when each module was a test binary of its own: the
///   measuring tests (in-situ, estimates, calibration, floods) count CPU time and must not
///   share the machine with another module's probes. Tests of the same module still run
///   side by side. Every test takes its turn first: `let _turn = turn(module_path!());`.
/// - A test whose probes would land in its neighbours' processes too (another tool's
///   uprobes and tracefs events are armed in every process mapping the file) also takes
///   [`alone`], after its turn: then no other test of its module runs beside it.
///
/// Anything else a test needs (root, fixtures, tools) is not waited for but said:
/// `#[ignore = "needs ..."]` (docs/architecture.md, "Tests").
pub(crate) fn turn(module: &'static str) -> Turn {
    let mut current = TURN.0.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        match *current {
            (_, 0) => {
                *current = (module, 1);
                break;
            }
            (holder, ref mut count) if holder == module => {
                *count += 1;
                break;
            }
            _ => current = TURN.1.wait(current).unwrap_or_else(|e| e.into_inner()),
        }
    }
    Turn
}

static TURN: (std::sync::Mutex<(&'static str, usize)>, std::sync::Condvar) =
    (std::sync::Mutex::new(("", 0)), std::sync::Condvar::new());

/// A test's turn, given back when the test ends (passed or panicked).
pub(crate) struct Turn;

impl Drop for Turn {
    fn drop(&mut self) {
        let mut current = TURN.0.lock().unwrap_or_else(|e| e.into_inner());
        current.1 -= 1;
        if current.1 == 0 {
            TURN.1.notify_all();
        }
    }
}

/// One test at a time within its module's turn (see [`turn`]), until the guard drops.
pub(crate) fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// bpftrace counting the hits of `probe` (`uprobe:PATH:FUNC`) in `pid`, attached.
pub(crate) fn bpftrace_counting(pid: u32, probe: &str) -> Running {
    bpftrace_armed(pid, &format!("{probe} {{ @ = count(); }}"))
}

/// bpftrace running `program` against `pid` (`-p`), returned once every probe of it is
/// attached: its BEGIN probe fires after the others attach, while "Attaching N
/// probes..." is printed before, which left probetop's first look racing bpftrace's.
pub(crate) fn bpftrace_armed(pid: u32, program: &str) -> Running {
    let bpftrace = Running::spawn({
        let mut cmd = Command::new("bpftrace");
        cmd.args(["-p", &pid.to_string(), "-e"])
            .arg(format!("BEGIN {{ printf(\"armed\\n\"); }} {program}"));
        cmd
    });
    bpftrace.out().wait_for("armed");
    bpftrace
}
