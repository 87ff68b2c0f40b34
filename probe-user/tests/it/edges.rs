//! The edges a second hostile round found (issue 30): files probetop reads that are not
//! what they should be, names and numbers from outside, a target gone while probetop
//! starts, and signals, keys and scrapes at the wrong moment.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use crate::common::*;

/// A directory of this test's own, emptied.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("probetop-edges-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Caps a child's address space: a probetop that reads without bound then fails at
/// once rather than take the machine's memory.
fn cap_memory(cmd: &mut Command, bytes: u64) {
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Waits for `running` at most `limit`; kills it and fails past that.
fn wait_within(running: &mut Running, limit: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = running.child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = running.child.kill();
            let _ = running.child.wait();
            panic!("{what}: probetop still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The calibration cache made a FIFO (no writer: an open that blocks forever), a link to
/// /dev/zero (endless bytes) and a sparse file of 4 GiB: each is one line of warning and
/// a run that measures without calibration.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_calibration_cache_that_is_not_a_file_is_one_line_and_the_run_goes_on() {
    let _turn = turn(module_path!());
    let name = probe_user::inner::calibrate::table::Machine::current().cache_file_name();
    type Make = fn(&Path);
    let cases: [(&str, &str, Make); 3] = [
        ("fifo", "a FIFO, not a regular file", |path| {
            probe_user::inner::sys::files::mkfifo(path, 0o600).expect("mkfifo");
        }),
        ("zero", "a symbolic link, not a regular file", |path| {
            std::os::unix::fs::symlink("/dev/zero", path).expect("symlink");
        }),
        ("sparse", "more than", |path| {
            std::fs::File::create(path)
                .and_then(|f| f.set_len(4 << 30))
                .expect("sparse file");
        }),
    ];
    for (case, needle, make) in cases {
        let cache = scratch(&format!("cache-{case}"));
        std::fs::create_dir_all(cache.join("probetop")).expect("cache dir");
        make(&cache.join("probetop").join(&name));
        let target = workload(&["--calls", "1", "--wait-signal"]);
        let mut cmd = probetop();
        cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
            .args(["-e", "uprobe:work_unit", "--duration", "0.5"])
            .env("XDG_CACHE_HOME", &cache);
        cap_memory(&mut cmd, 4 << 30);
        let mut probetop = Running::spawn(cmd);
        let status = wait_within(&mut probetop, Duration::from_secs(30), case);
        let stderr = probetop.err().rest();
        assert!(status.success(), "{case}: {status}: {stderr:#?}");
        let warnings: Vec<&String> = stderr
            .iter()
            .filter(|l| l.contains("calibration cache"))
            .collect();
        assert_eq!(warnings.len(), 1, "{case}: {stderr:#?}");
        assert!(warnings[0].contains(needle), "{case}: {stderr:#?}");
        assert!(
            stderr.iter().any(|l| l.starts_with("probetop: attached")),
            "{case}: {stderr:#?}"
        );
        let _ = std::fs::remove_dir_all(&cache);
    }
}

/// Bytes of `out` a terminal would act on: C0 controls but the newline, DEL, and C1
/// controls (UTF-8 `c2 80`..`c2 9f`).
fn control_bytes(out: &[u8]) -> Vec<u8> {
    let mut found: Vec<u8> = out
        .iter()
        .copied()
        .filter(|&b| (b < 0x20 && b != b'\n') || b == 0x7f)
        .collect();
    found.extend(
        out.windows(2)
            .filter(|w| w[0] == 0xc2 && (0x80..=0x9f).contains(&w[1]))
            .map(|w| w[1]),
    );
    found
}

/// A child whose stdout and stderr are kept as raw bytes, readable while it runs.
struct Raw {
    child: std::process::Child,
    stdout: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Raw {
    fn spawn(mut cmd: Command) -> Self {
        use std::io::Read as _;
        use std::process::Stdio;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn probetop");
        let keep = |mut from: Box<dyn std::io::Read + Send>| {
            let buffer = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let to = buffer.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(n) = from.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    to.lock().unwrap().extend_from_slice(&chunk[..n]);
                }
            });
            buffer
        };
        let stdout = keep(Box::new(child.stdout.take().expect("stdout")));
        let stderr = keep(Box::new(child.stderr.take().expect("stderr")));
        Self {
            child,
            stdout,
            stderr,
        }
    }

    fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Waits until stderr holds `needle`, at most `PATIENCE`.
    fn wait_for_stderr(&self, needle: &str) {
        let deadline = Instant::now() + PATIENCE;
        while !self.stderr_text().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in {:?}",
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its exit status and all it wrote, once it ended (killed after `PATIENCE`).
    fn finish(mut self) -> (std::process::ExitStatus, Vec<u8>, Vec<u8>) {
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("probetop still running: {}", self.stderr_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The readers end at end of output, just after the exit.
        let drained = Instant::now() + Duration::from_secs(5);
        while std::sync::Arc::strong_count(&self.stdout)
            + std::sync::Arc::strong_count(&self.stderr)
            > 2
            && Instant::now() < drained
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = self.stdout.lock().unwrap().clone();
        let err = self.stderr.lock().unwrap().clone();
        (status, out, err)
    }
}

/// Names a crafted binary and comm hold (an OSC sequence with BEL, a newline, a CR, a
/// CSI) reach no terminal: `list`, the summary table, the end-of-run cost lines, the
/// "attached" line and "did you mean" print them on one line without control bytes.
#[test]
#[ignore = "needs root and the fixtures"]
fn names_from_a_binary_and_a_comm_reach_the_terminal_without_control_bytes() {
    let _turn = turn(module_path!());
    let evil = fixture("c/evilnames");
    let listed = output_ok(probetop().arg("list").arg(&evil), "probetop list");
    let text = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(control_bytes(&listed.stdout), b"", "list: {text:?}");
    assert!(text.contains("evil ]0;pwned esc"), "list: {text}");
    assert!(text.contains("evil line name"), "list: {text}");

    let mut target = started(&evil, &["--calls", "1000"]);
    let pid = target.pid().to_string();
    // "Did you mean" names the functions that hold the word.
    let out = probetop()
        .args(["--pid", &pid, "--no-tui", "-e", "uprobe:pwned"])
        .output()
        .expect("run probetop");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("pwned esc"), "{err:?}");
    assert_eq!(control_bytes(&out.stderr), b"", "{err:?}");

    let mut cmd = probetop();
    cmd.args(["--pid", &pid, "--no-tui", "-e", "uprobe:evil*"]);
    let run = Raw::spawn(cmd);
    run.wait_for_stderr("probetop: attached");
    target.signal(libc::SIGUSR1);
    target.out().wait_for("done calls=1000");
    assert!(target.wait().success());
    let (status, stdout, stderr) = run.finish();
    let (out, err) = (
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr),
    );
    assert!(status.success(), "{status}: {err}");
    assert_eq!(control_bytes(&stdout), b"", "summary: {out:?}");
    assert_eq!(control_bytes(&stderr), b"", "stderr: {err:?}");
    assert!(err.contains("(evil comm [2J)"), "{err}");
    // The summary's rows, each on its line with its count.
    for name in ["evil ]0;pwned esc", "evil line name"] {
        let row = out
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no row for {name:?}: {out}"));
        assert!(row.contains(" 1000 "), "{row}");
    }
}

/// A target that exits while probetop starts on it (killed at a random moment of the
/// start, 40 times): each run ends either measured (attached, then the target gone:
/// exit 0) or with exactly "pid N exited before its probes were attached" (exit 1), and
/// no probe of probetop's is left in the kernel.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_target_exiting_while_probetop_starts_is_said_in_one_line() {
    let _turn = turn(module_path!());
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut measured, mut refused) = (0, 0);
    let mut ids = (Vec::new(), Vec::new());
    for run in 0..40 {
        let target = workload(&["--wait-signal"]);
        let pid = target.pid();
        let mut cmd = probetop();
        cmd.args(["--pid", &pid.to_string(), "--no-tui"])
            .args(["-e", "uprobe:work_unit", "-e", "uretprobe:leaf_ret"])
            .args(["-e", "usdt:workload:unit"]);
        let mut probetop = Running::spawn(cmd);
        // The moment: anywhere from before probetop opens the target to after it
        // attached (a start takes a few hundred ms here).
        let delay = Duration::from_micros(next() % 600_000);
        let killed_at = Instant::now() + delay;
        while Instant::now() < killed_at {
            let (programs, links) = bpf_ids_of(probetop.pid());
            ids.0.extend(programs);
            ids.1.extend(links);
            std::thread::sleep(Duration::from_millis(2));
        }
        // Not reaped until probetop is done: a zombie, as a target killed under it.
        target.signal(libc::SIGKILL);
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            let (programs, links) = bpf_ids_of(probetop.pid());
            ids.0.extend(programs);
            ids.1.extend(links);
            if let Some(status) = probetop.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "run {run}: probetop did not end");
            std::thread::sleep(Duration::from_millis(5));
        };
        drop(target);
        let stderr = probetop.err().rest();
        let said = format!("probetop: pid {pid} exited before its probes were attached");
        match status.code() {
            Some(0) => {
                assert!(
                    stderr.iter().any(|l| l.starts_with("probetop: attached")),
                    "run {run}: {stderr:#?}"
                );
                measured += 1;
            }
            Some(1) => {
                let last = stderr.last().map_or("", String::as_str);
                assert!(
                    last == said || last.starts_with(&format!("{said} (a zombie")),
                    "run {run} ({delay:?}): {stderr:#?}"
                );
                assert_eq!(
                    stderr.iter().filter(|l| l.contains("exited")).count(),
                    1,
                    "run {run}: {stderr:#?}"
                );
                refused += 1;
            }
            _ => panic!("run {run} ({delay:?}): {status}: {stderr:#?}"),
        }
        for line in &stderr {
            // What the race gave: the bare errno, the attach path, the missing file.
            for word in [
                "No such process",
                "os error 3)",
                "/proc/self/fd",
                "No such file",
            ] {
                assert!(!line.contains(word), "run {run}: {line:?} in {stderr:#?}");
            }
        }
    }
    eprintln!("{measured} runs measured, {refused} ended before attaching");
    ids.0.sort_unstable();
    ids.0.dedup();
    ids.1.sort_unstable();
    ids.1.dedup();
    nothing_left_of(&ids.0, &ids.1);
}

/// What process `pid` waits in, per thread (/proc's wchan).
fn waits_in(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("wchan")).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// SIGTERM while probetop is still starting (here held reading a spec FIFO no one
/// writes yet): a line saying it stopped before attaching, and the exit of a stop.
#[test]
#[ignore = "needs root and the fixtures"]
fn sigterm_before_attaching_is_said() {
    let _turn = turn(module_path!());
    let dir = scratch("sigterm-early");
    let fifo = dir.join("specs");
    probe_user::inner::sys::files::mkfifo(&fifo, 0o600).expect("mkfifo");
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "-f"])
        .arg(&fifo);
    let mut probetop = Running::spawn(cmd);
    let pid = probetop.pid();
    // Held opening the FIFO (no writer yet): before anything is attached.
    let deadline = Instant::now() + PATIENCE;
    while !waits_in(pid)
        .iter()
        .any(|w| w.contains("fifo") || w.contains("partner"))
    {
        assert!(
            Instant::now() < deadline,
            "probetop never waited on the FIFO"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    probetop.signal(libc::SIGTERM);
    let status = probetop.wait();
    let stderr = probetop.err().rest();
    assert_eq!(status.code(), Some(0), "{status}: {stderr:#?}");
    assert_eq!(
        stderr,
        ["probetop: stopped by SIGTERM before attaching: nothing measured"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A second SIGTERM while probetop exits (cutting the window, printing, exporting:
/// before the detach began) exits at once with a line saying so, and leaves nothing in
/// the kernel (it was ignored until the detach, seconds with many probes).
#[test]
#[ignore = "needs root and the fixtures"]
fn a_second_sigterm_during_the_exit_exits_at_once() {
    let _turn = turn(module_path!());
    let mut target = workload(&["--forever", "--rate", "2000"]);
    let dir = scratch("second-sigterm");
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["-e", "uprobe:work_unit", "-e", "uretprobe:leaf_ret"]);
    for export in ["run.json", "run.html", "run.hlog", "run.csv"] {
        cmd.arg("-o").arg(dir.join(export));
    }
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("probetop: attached");
    let (programs, links) = bpf_ids_of(probetop.pid());
    assert!(!links.is_empty() || !programs.is_empty());
    probetop.signal(libc::SIGTERM);
    // The stop is said once the window is cut: the exit has begun, the detach not yet.
    probetop.err().wait_for("probetop: SIGTERM");
    probetop.signal(libc::SIGTERM);
    let status = probetop.wait();
    let stderr = probetop.err().rest();
    assert_eq!(status.code(), Some(0), "{status}: {stderr:#?}");
    assert!(
        stderr
            .iter()
            .any(|l| l.starts_with("probetop: SIGTERM again: exiting now")),
        "{stderr:#?}"
    );
    assert!(
        !stderr.iter().any(|l| l.contains("detached")),
        "the detach was waited for: {stderr:#?}"
    );
    nothing_left_of(&programs, &links);
    target.signal(libc::SIGTERM);
    let _ = target.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `probetop calibrate` as short as it goes (no dispatch, cold or gap phase, 3 reps),
/// with its cache under `cache`.
fn calibrate_briefly(cache: &Path) -> std::process::Output {
    probetop()
        .args(["calibrate", "--no-dispatch", "--no-cold", "--no-gap"])
        .args(["--reps", "3"])
        .env("XDG_CACHE_HOME", cache)
        .output()
        .expect("run probetop calibrate")
}

/// A tmpfs mounted at a directory, unmounted when dropped.
struct Mounted(PathBuf);

impl Mounted {
    fn tmpfs(at: &Path, options: &str) -> Self {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(at)
            .output()
            .expect("run mount");
        assert!(out.status.success(), "mount: {out:?}");
        Self(at.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A calibration that cannot be saved (its cache directory's file system full) says so
/// and leaves no file behind (it left an empty `.partial`).
#[test]
#[ignore = "needs root and the fixtures"]
fn a_calibration_that_cannot_be_saved_leaves_nothing_behind() {
    let _turn = turn(module_path!());
    let cache = scratch("full-cache");
    let _mounted = Mounted::tmpfs(&cache, "size=64k");
    let dir = cache.join("probetop");
    std::fs::create_dir_all(&dir).expect("cache dir");
    // Filled to the last block.
    {
        use std::io::Write as _;
        let mut filler = std::fs::File::create(dir.join("filler")).expect("filler");
        while filler.write_all(&[0u8; 4096]).is_ok() {}
    }
    let out = calibrate_briefly(&cache);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    let left: Vec<String> = std::fs::read_dir(&dir)
        .expect("cache dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["filler"], "{err}");
}

/// With /proc mounted `subset=pid` (no /proc/cpuinfo, no /proc/sys) the machine's
/// calibration is still found: its key (kernel release, CPU model) is read from
/// uname(2) and CPUID there (it was reported missing).
#[test]
#[ignore = "needs root and the fixtures"]
fn the_calibration_is_found_under_a_proc_of_pids_only() {
    let _turn = turn(module_path!());
    let cache = scratch("subset-pid");
    let out = calibrate_briefly(&cache);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let target = workload(&["--forever", "--rate", "1000"]);
    let run = |subset: bool| {
        let script = if subset {
            "mount -t proc -o subset=pid proc /proc && test ! -e /proc/cpuinfo && exec \"$@\""
        } else {
            "exec \"$@\""
        };
        let out = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(env!("CARGO_BIN_EXE_probetop"))
            .args(["--pid", &target.pid().to_string(), "--no-tui"])
            .args([
                "-e",
                "uprobe:work_unit",
                "--duration",
                "0.5",
                "--assume",
                "hot",
            ])
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .expect("run unshare");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "subset={subset}: {err}");
        err
    };
    // The same words with /proc whole and with its pids only.
    for subset in [false, true] {
        let err = run(subset);
        assert!(
            !err.contains("no whole-cost estimate"),
            "subset={subset}: {err}"
        );
        assert!(
            !err.contains("whole cost not estimated"),
            "subset={subset}: {err}"
        );
        assert!(err.contains(" ns/hit x "), "subset={subset}: {err}");
    }
    let _ = std::fs::remove_dir_all(&cache);
}
