//! What a hostile round found at attach time (issue 18): duplicate specs, refused points
//! in a glob, file descriptor limits, traced targets, and odd pids.

use std::collections::BTreeSet;

use crate::common::*;

const CALLS: u64 = 20_000;

/// Runs probetop with `args` on a fresh workload until it has made its calls; returns
/// probetop's stderr and its JSON export.
fn run_on_workload(name: &str, args: &[&str]) -> (Vec<String>, serde_json::Value) {
    let mut target = workload(&["--calls", &CALLS.to_string(), "--wait-signal"]);
    let json = export_path(&format!("{name}.json"));
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "--export"])
        .arg(&json)
        .args(args);
    let seen = run_to_done(&mut target, cmd);
    (seen, read_export(&json))
}

/// Runs probetop `cmd` on `target`, let go (SIGUSR1) once probes are attached, until the
/// target is done; both must exit successfully. probetop's stderr.
fn run_to_done(target: &mut Running, cmd: std::process::Command) -> Vec<String> {
    let what = format!("{cmd:?}");
    let mut probetop = Running::spawn(cmd);
    let mut seen = probetop.err().until("attached");
    target.signal(libc::SIGUSR1);
    target.out().wait_for("done");
    assert!(target.wait().success());
    let status = probetop.wait();
    seen.extend(probetop.err().rest());
    assert!(status.success(), "{what} failed: {seen:?}");
    seen
}

#[test]
#[ignore = "needs root and the fixtures"]
fn identical_probe_points_are_attached_once() {
    let _turn = turn(module_path!());
    let mut args = Vec::new();
    for _ in 0..300 {
        args.extend(["-e", "uprobe:work_unit"]);
    }
    // Another spelling of the same point, and a point of its own.
    let by_path = format!("uprobe:{}:work_unit", fixture("c/workload").display());
    args.extend(["-e", &by_path, "-e", "uretprobe:work_unit"]);
    let (stderr, report) = run_on_workload("merged", &args);
    let probes = report["probes"].as_array().expect("probes");
    let rows: Vec<(&str, u64)> = probes
        .iter()
        .map(|p| {
            (
                p["spec"].as_str().expect("spec"),
                p["hits"].as_u64().expect("hits"),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [("uprobe:work_unit", CALLS), ("uretprobe:work_unit", CALLS)],
        "{stderr:?}"
    );
    assert!(
        stderr
            .iter()
            .any(|l| l.contains("merged 300 duplicate probe points")),
        "{stderr:?}"
    );
}

#[test]
#[ignore = "needs root and the fixtures"]
fn max_probes_caps_the_total_of_all_specs() {
    let _turn = turn(module_path!());
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let out = probetop()
        .args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["--max-probes", "3", "--duration", "5"])
        .args(["-e", "uprobe:work_unit", "-e", "uretprobe:work_unit"])
        .args(["-e", "uprobe:leaf_ret", "-e", "uretprobe:leaf_ret"])
        .output()
        .expect("run probetop");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("4 probe points from 4 specs in all, more than --max-probes 3"),
        "{stderr}"
    );
    assert!(!stderr.contains("attached"), "{stderr}");
}

/// The libc process `pid` maps.
fn libc_of(pid: u32) -> String {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|path| path.contains("/libc.so") || path.contains("/libc-"))
        .expect("the target maps libc")
        .to_string()
}

/// probetop under `prlimit --nofile=SOFT:HARD`, on the perf-event path (two descriptors
/// per probe), with every `str*` function of libc.
fn probetop_under_nofile(
    target: &Running,
    soft: u32,
    hard: u32,
    json: &std::path::Path,
) -> Running {
    let mut cmd = std::process::Command::new("prlimit");
    cmd.env("XDG_CACHE_HOME", no_calibration())
        .arg(format!("--nofile={soft}:{hard}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_probetop"))
        .args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["-e", "uprobe:libc:str*", "--export"])
        .arg(json)
        .env("PROBETOP_ATTACH_PATH", "perf_event");
    Running::spawn(cmd)
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_low_soft_file_limit_is_raised() {
    let _turn = turn(module_path!());
    let mut target = workload(&["--calls", "1000", "--wait-signal"]);
    // What `list` says a run attaches: which of libc's str* functions the kernel refuses
    // depends on the CPU (glibc's IFUNCs choose AVX2 or AVX-512 code).
    let (refused, points) = libc_offsets(target.pid(), "str*");
    // Two descriptors per probe: far more than 64.
    assert!(points > 40, "{points}");
    let json = export_path("nofile-soft.json");
    let mut probetop = probetop_under_nofile(&target, 64, 4096, &json);
    probetop.err().wait_for("attached");
    target.signal(libc::SIGUSR1);
    assert!(target.wait().success());
    probetop.ended_ok();
    let report = read_export(&json);
    assert_eq!(report["probes"].as_array().expect("probes").len(), points);
    assert_eq!(
        report["skipped"].as_array().map_or(0, Vec::len),
        refused,
        "{}",
        report["skipped"]
    );
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_hard_file_limit_too_low_is_refused_before_attaching() {
    let _turn = turn(module_path!());
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let json = export_path("nofile-hard.json");
    let mut probetop = probetop_under_nofile(&target, 64, 64, &json);
    let status = probetop.wait();
    let stderr = probetop.err().rest();
    assert_eq!(status.code(), Some(1), "{stderr:?}");
    assert!(stderr.iter().any(|l| l.contains("ulimit -n")), "{stderr:?}");
    assert!(!stderr.iter().any(|l| l.contains("attached")), "{stderr:?}");
}

/// Makes this thread the ptrace tracer of `pid` without stopping it (what gdb or
/// strace do first): the target's `TracerPid` is this process from then on.
fn seize(pid: u32) {
    // SAFETY: PTRACE_SEIZE takes a pid, no address and no data; the tracee is our own
    // child, which the test kills (SIGKILL needs no tracer's consent) at its end.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            pid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    assert_eq!(
        rc,
        0,
        "PTRACE_SEIZE {pid}: {}",
        std::io::Error::last_os_error()
    );
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_traced_target_is_refused_unless_forced() {
    let _turn = turn(module_path!());
    let target = workload(&["--calls", "1", "--wait-signal"]);
    seize(target.pid());
    let me = std::process::id();
    let run = |extra: &[&str]| {
        probetop()
            .args(["--pid", &target.pid().to_string(), "--no-tui"])
            .args(["-e", "uprobe:work_unit", "--duration", "1"])
            .args(extra)
            .output()
            .expect("run probetop")
    };
    let refused = run(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("is traced by pid {me} (")),
        "{stderr}"
    );
    assert!(
        stderr.contains("SIGTRAP") && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(!stderr.contains("attached"), "{stderr}");

    let forced = run(&["--force"]);
    let stderr = String::from_utf8_lossy(&forced.stderr);
    assert!(forced.status.success(), "{stderr}");
    assert!(stderr.contains("attaching anyway (--force)"), "{stderr}");
    assert!(stderr.contains("attached 1 probe"), "{stderr}");
    // Still traced on the way out: said again, with what removing a breakpoint does.
    assert!(
        stderr.contains(&format!("is traced by pid {me} (")),
        "{stderr}"
    );
    assert!(stderr.contains(") now:"), "{stderr}");
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_tracer_that_came_while_attached_is_named_on_the_way_out() {
    let _turn = turn(module_path!());
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["-e", "uprobe:work_unit"]);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    seize(target.pid());
    probetop.signal(libc::SIGINT);
    let stderr = probetop.ended_ok();
    let me = std::process::id();
    let warning = stderr
        .iter()
        .find(|l| l.contains(&format!("is traced by pid {me} (")))
        .unwrap_or_else(|| panic!("no tracer named: {stderr:?}"));
    assert!(warning.contains("SIGTRAP"), "{warning}");
    // Said before the probes are taken away.
    let at = |needle: &str| stderr.iter().position(|l| l.contains(needle));
    assert!(at("traced by") < at("detached"), "{stderr:?}");
}

/// Distinct file offsets of the points `probetop list --pid PID PATTERN` finds in the
/// target's libc, each where a run attaches it (an IFUNC at the implementation the
/// target calls): (those it marks refused, the others).
fn libc_offsets(pid: u32, pattern: &str) -> (usize, usize) {
    let libc = libc_of(pid);
    let listing = list_json(["--pid", &pid.to_string(), pattern]);
    let mut refused = std::collections::BTreeSet::new();
    let mut fine = std::collections::BTreeSet::new();
    for point in listing["points"].as_array().expect("points") {
        if point["object"] != libc.as_str() {
            continue;
        }
        let offset = point["file_offset"].as_u64().expect("offset");
        if point["cost_class"] == "refused" {
            refused.insert(offset);
        } else {
            fine.insert(offset);
        }
    }
    (refused.len(), fine.len())
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_glob_over_libc_skips_the_refused_points_and_attaches_the_rest() {
    let _turn = turn(module_path!());
    let probe = workload(&["--calls", "1", "--wait-signal"]);
    let (refused, fine) = libc_offsets(probe.pid(), "*");
    drop(probe);
    assert!(refused > 0 && fine > 1000, "{refused} {fine}");
    let (stderr, report) = run_on_workload(
        "libc-glob",
        &[
            "-e",
            "uprobe:libc:*",
            "-e",
            "uprobe:work_unit",
            "--max-probes",
            "8000",
        ],
    );
    let probes = report["probes"].as_array().expect("probes");
    // One probe per offset list gives that it does not mark refused (an IFUNC and the
    // implementation it chose, both matched, are one), and work_unit.
    assert_eq!(probes.len(), fine + 1, "{stderr:?}");
    assert_eq!(
        report["skipped"].as_array().expect("skipped").len(),
        refused
    );
    assert!(
        stderr.iter().any(|l| l.contains(&format!(
            "skipped {refused} probe points the kernel refuses"
        ))),
        "{stderr:?}"
    );
    let work_unit = crate::common::probe(&report, "work_unit");
    assert_eq!(work_unit["hits"], CALLS);
}

/// The names of the refused fixture's `site_*` points in `listing` whose class is
/// refused (`true`) or not.
fn sites_listed(listing: &serde_json::Value, refused: bool) -> BTreeSet<String> {
    listing["points"]
        .as_array()
        .expect("points")
        .iter()
        .filter(|p| (p["cost_class"] == "refused") == refused)
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect()
}

/// `list` and a run agree on what will be attached, on any CPU: the refused fixture's
/// `site_locked` starts with a lock prefix, and its IFUNC `site_ifunc` calls an
/// implementation that does (as glibc's AVX2 string functions start with instructions
/// the kernel refuses, on a CPU without AVX-512). `list --pid` marks both refused, the
/// IFUNC where its calls go (a file's listing, with no process, shows its resolver); a
/// run skips exactly those and counts the rest exactly; and with the run's filter off
/// (a test hook), the kernel itself refuses the same two at attach.
#[test]
#[ignore = "needs root and the fixtures"]
fn list_marks_refused_exactly_what_a_run_skips() {
    let _turn = turn(module_path!());
    let program = fixture("c/refused");
    let by_file = list_json([program.as_os_str(), std::ffi::OsStr::new("site_*")]);
    assert_eq!(
        sites_listed(&by_file, true),
        BTreeSet::from(["site_locked".to_string()]),
        "{by_file}"
    );
    let resolver = by_file["points"]
        .as_array()
        .expect("points")
        .iter()
        .find(|p| p["name"] == "site_ifunc")
        .unwrap_or_else(|| panic!("site_ifunc listed: {by_file}"));
    assert!(
        resolver["ifunc"]["at_resolver"]
            .as_str()
            .is_some_and(|why| why.contains("--pid")),
        "{resolver}"
    );
    for filter in [true, false] {
        let mut target = started(&program, &["--calls", &CALLS.to_string()]);
        let listing = list_json(["--pid", &target.pid().to_string(), "site_*"]);
        let refused = sites_listed(&listing, true);
        let fine = sites_listed(&listing, false);
        assert_eq!(
            refused,
            BTreeSet::from(["site_ifunc".to_string(), "site_locked".to_string()]),
            "{listing}"
        );
        assert_eq!(fine, BTreeSet::from(["site_fine".to_string()]), "{listing}");
        let ifunc = listing["points"]
            .as_array()
            .expect("points")
            .iter()
            .find(|p| p["name"] == "site_ifunc")
            .expect("site_ifunc listed");
        assert_eq!(ifunc["ifunc"]["implementation"], "locked_impl", "{ifunc}");

        let json = export_path(&format!("list-refused-{filter}.json"));
        let mut cmd = probetop();
        cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "--export"])
            .arg(&json)
            .args(["-e", "uprobe:site_*"]);
        if !filter {
            cmd.env("PROBETOP_TEST_NO_SITE_FILTER", "1");
        }
        let stderr = run_to_done(&mut target, cmd);
        let report = read_export(&json);
        let skipped: BTreeSet<String> = report["skipped"]
            .as_array()
            .expect("skipped")
            .iter()
            .map(|s| s["name"].as_str().expect("name").to_string())
            .collect();
        assert_eq!(skipped, refused, "filter {filter}: {stderr:?}");
        let why = if filter {
            "`probetop list` marks them refused"
        } else {
            "ENOTSUPP at attach"
        };
        assert!(
            stderr
                .iter()
                .any(|l| l.contains("skipped 2 probe points the kernel refuses") && l.contains(why)),
            "{stderr:?}"
        );
        let probes: BTreeSet<String> = report["probes"]
            .as_array()
            .expect("probes")
            .iter()
            .map(|p| p["name"].as_str().expect("name").to_string())
            .collect();
        assert_eq!(probes, fine, "{report}");
        assert_eq!(crate::common::probe(&report, "site_fine")["hits"], CALLS);
        let _ = std::fs::remove_file(&json);
    }
}

/// Points the kernel refuses that `list` did not flag (its filter turned off by a test
/// hook): found one by one at attach, and the rest measured exactly, whichever way
/// probes attach.
fn refused_at_attach_via(path: &str) {
    let probe = workload(&["--calls", "1", "--wait-signal"]);
    let (refused, fine) = libc_offsets(probe.pid(), "pthread_spin*");
    drop(probe);
    assert_eq!(refused, 1, "pthread_spin_lock starts with `lock decl`");
    let mut target = workload(&["--calls", &CALLS.to_string(), "--wait-signal"]);
    let json = export_path(&format!("refused-at-attach-{path}.json"));
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "--export"])
        .arg(&json)
        // work_unit comes last: its id moves into the refused point's.
        .args(["-e", "uprobe:libc:pthread_spin*", "-e", "uprobe:work_unit"])
        .env("PROBETOP_TEST_NO_SITE_FILTER", "1")
        .env("PROBETOP_ATTACH_PATH", path);
    let stderr = run_to_done(&mut target, cmd);
    assert!(
        stderr
            .iter()
            .any(|l| l.contains("skipped 1 probe point the kernel refuses")),
        "{stderr:?}"
    );
    let report = read_export(&json);
    let names: Vec<&str> = report["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names.len(), fine + 1, "{names:?}");
    assert!(!names.contains(&"pthread_spin_lock"), "{names:?}");
    assert_eq!(report["skipped"][0]["name"], "pthread_spin_lock");
    assert_eq!(crate::common::probe(&report, "work_unit")["hits"], CALLS);
}

#[test]
#[ignore = "needs root and the fixtures"]
fn refused_points_found_at_attach_are_skipped_on_perf_events() {
    let _turn = turn(module_path!());
    refused_at_attach_via("perf_event");
}

#[test]
#[ignore = "needs root and the fixtures"]
fn refused_points_found_at_attach_are_skipped_on_uprobe_multi_links() {
    let _turn = turn(module_path!());
    if !multi_links_expected() {
        eprintln!("skipped: this kernel has no uprobe_multi links probetop uses");
        return;
    }
    refused_at_attach_via("uprobe_multi");
}

/// The threads fixture with its main thread gone (`pthread_exit`): its pid is a zombie
/// while the thread that carries on (its tid in the ready line) waits for SIGUSR1.
fn main_thread_gone(threads: u32, calls: u64) -> (Running, u32, u32) {
    let mut command = std::process::Command::new(fixture("c/threads"));
    command
        .args(["--main-exits", "--threads", &threads.to_string()])
        .args(["--calls", &calls.to_string()]);
    let running = Running::spawn(command);
    let ready = running.out().wait_for("ready pid=");
    let (pid, tid) = (field(&ready, "pid") as u32, field(&ready, "tid") as u32);
    let deadline = std::time::Instant::now() + PATIENCE;
    while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the main thread did not exit"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    (running, pid, tid)
}

/// probetop on `given` (the process's pid or a thread id) counts every call of the
/// fixture's threads; returns its stderr.
fn counts_every_call_of(target: &mut Running, pid: u32, given: u32, calls: u64) -> Vec<String> {
    let json = export_path(&format!("given-{given}.json"));
    let mut cmd = probetop();
    cmd.args([
        "--pid",
        &given.to_string(),
        "--no-tui",
        "-e",
        "uprobe:work_unit",
    ])
    .arg("--export")
    .arg(&json);
    let mut probetop = Running::spawn(cmd);
    let mut stderr = probetop.err().until("attached");
    target.signal(libc::SIGUSR1);
    let done = target.out().wait_for("done");
    assert_eq!(field(&done, "calls") as u64, calls);
    assert!(target.wait().success());
    let status = probetop.wait();
    stderr.extend(probetop.err().rest());
    assert!(status.success(), "{stderr:?}");
    let report = read_export(&json);
    assert_eq!(report["target"]["pid"], pid);
    assert_eq!(
        crate::common::probe(&report, "work_unit")["hits"],
        calls,
        "{stderr:?}"
    );
    stderr
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_process_whose_main_thread_exited_is_probed_through_its_threads() {
    let _turn = turn(module_path!());
    let (mut target, pid, tid) = main_thread_gone(2, CALLS);
    // The signal goes to the process; Running signals the pid it started.
    assert_eq!(target.pid(), pid);
    let stderr = counts_every_call_of(&mut target, pid, pid, 2 * CALLS);
    assert!(
        stderr
            .iter()
            .any(|l| l.contains(&format!("the main thread of pid {pid} has exited"))),
        "{stderr:?}"
    );
    let _ = tid;
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_thread_id_probes_its_process() {
    let _turn = turn(module_path!());
    let (mut target, pid, tid) = main_thread_gone(2, CALLS);
    let stderr = counts_every_call_of(&mut target, pid, tid, 2 * CALLS);
    assert!(
        stderr
            .iter()
            .any(|l| l.contains(&format!("{tid} is a thread of process {pid} (threads)"))),
        "{stderr:?}"
    );
}

/// Issue 18 item 12: the per-thread counts of the JSON say what they cover, and how
/// many hits that is, in each mode (they used to be silently partial).
#[test]
#[ignore = "needs root and the fixtures"]
fn per_thread_counts_say_what_they_cover() {
    let _turn = turn(module_path!());
    for (mode, extra, cover) in [
        ("ring", &[][..], "every-hit"),
        ("sample", &["--sample-every", "100"][..], "sampled"),
        ("kernel", &[][..], "none-in-kernel-mode"),
    ] {
        let mut args = vec!["--mode", mode, "-e", "uprobe:work_unit"];
        args.extend(extra);
        let (stderr, report) = run_on_workload(&format!("threads-{mode}"), &args);
        let probe = probe(&report, "work_unit");
        assert_eq!(probe["hits"], CALLS, "{mode}: {stderr:?}");
        assert_eq!(probe["threads_cover"], cover, "{mode}: {probe}");
        let per_thread: u64 = probe["threads"]
            .as_object()
            .expect("threads")
            .values()
            .map(|n| n.as_u64().expect("count"))
            .sum();
        assert_eq!(probe["threads_hits"], per_thread, "{mode}: {probe}");
        match mode {
            "ring" => assert_eq!(per_thread, CALLS, "{probe}"),
            // Every 100th hit of each CPU's own count: a thread that moves between
            // CPUs leaves each CPU's remainder unsampled, one fewer per CPU but the last.
            "sample" => {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
                let sampled = (CALLS / 100).saturating_sub(cpus - 1)..=CALLS / 100;
                assert!(sampled.contains(&per_thread), "{probe}");
            }
            _ => assert_eq!(per_thread, 0, "{probe}"),
        }
    }
}

/// Issue 18 item 10: a spec on an object the target does not map (another executable's
/// path) is said, in one line naming it, instead of accepted silently.
#[test]
#[ignore = "needs root and the fixtures"]
fn objects_the_target_does_not_map_are_said() {
    let _turn = turn(module_path!());
    let other = fixture("c/workload-nousdt");
    let elsewhere = format!("uprobe:{}:work_unit", other.display());
    let (stderr, report) =
        run_on_workload("unmapped", &["-e", "uprobe:work_unit", "-e", &elsewhere]);
    let said: Vec<&String> = stderr
        .iter()
        .filter(|l| l.contains("does not map"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr:?}");
    assert!(
        said[0].contains(&other.display().to_string()) && said[0].contains("1 probe point"),
        "{said:?}"
    );
    // The target's own probe is not named, and counts as ever.
    assert!(!said[0].contains("workload "), "{said:?}");
    assert_eq!(probe(&report, "work_unit")["hits"], CALLS);
}

/// The reload fixture on a copy of its library in `dir` (made afresh), with `args`,
/// and probetop counting the copy's `reload_unit` in it into `json`: the copy, the
/// fixture, probetop.
fn reload_probed(
    dir: &std::path::Path,
    args: &[&str],
    json: &std::path::Path,
) -> (std::path::PathBuf, Running, Running) {
    let _ = std::fs::remove_dir_all(dir);
    let lib = fixture_copy("c/libreload.so", dir, "libreload.so");
    let calls = CALLS.to_string();
    let mut fixture_args: Vec<&str> = vec![lib.to_str().unwrap(), "--calls", &calls];
    fixture_args.extend(args);
    let target = started(&fixture("c/reload"), &fixture_args);
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "-e"])
        .arg(format!("uprobe:{}:reload_unit", lib.display()))
        .arg("--export")
        .arg(json);
    let probetop = Running::spawn(cmd);
    (lib, target, probetop)
}

/// Replaces `lib` on disk as a package upgrade does: a new file, renamed over the old
/// one's path.
fn replace_on_disk(lib: &std::path::Path) {
    let dir = lib.parent().expect("the copy's dir");
    let new = fixture_copy("c/libreload.so", dir, "libreload.so.new");
    std::fs::rename(&new, lib).unwrap();
}

/// The one line of `stderr` saying `lib` was replaced on disk.
fn said_replaced<'a>(stderr: &'a [String], lib: &std::path::Path) -> &'a str {
    let said: Vec<&String> = stderr
        .iter()
        .filter(|l| l.contains("replaced on disk"))
        .collect();
    assert_eq!(said.len(), 1, "said once: {stderr:?}");
    assert!(said[0].contains(&lib.display().to_string()), "{said:?}");
    said[0]
}

/// The export's one replaced object, which must be `lib` with probe 0 on it.
fn replaced_object<'a>(
    report: &'a serde_json::Value,
    lib: &std::path::Path,
) -> &'a serde_json::Value {
    let replaced = report["replaced_objects"]
        .as_array()
        .expect("replaced_objects");
    assert_eq!(replaced.len(), 1, "{report}");
    assert_eq!(replaced[0]["object"], lib.display().to_string());
    assert_eq!(replaced[0]["probes"], serde_json::json!([0]));
    &replaced[0]
}

/// Issue 18 item 10, second half: a probed library replaced on disk (a new file renamed
/// over its path) and opened again by the target is another inode, which the probes
/// are not on. The calls before the replacement are counted exactly, and the
/// replacement is said once, on stderr and in the JSON, instead of the counts going
/// quiet with no word.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_library_replaced_on_disk_and_loaded_again_is_said() {
    let _turn = turn(module_path!());
    let dir = std::env::temp_dir().join(format!("probetop-reload-{}", std::process::id()));
    let json = export_path("reload.json");
    let (lib, mut target, mut probetop) = reload_probed(&dir, &[], &json);
    let mut stderr = probetop.err().until("attached");
    target.signal(libc::SIGUSR1);
    target.out().wait_for("first calls=");
    replace_on_disk(&lib);
    target.signal(libc::SIGUSR1);
    target.out().wait_for("second calls=");
    stderr.extend(probetop.err().until("loaded"));
    target.signal(libc::SIGUSR1);
    assert!(target.wait().success());
    let status = probetop.wait();
    stderr.extend(probetop.err().rest());
    assert!(status.success(), "{stderr:?}");
    let said = said_replaced(&stderr, &lib);
    assert!(said.contains("1 probe stays on the old file"), "{said}");
    let report = read_export(&json);
    // The first library's calls, every one; none of the new file's.
    assert_eq!(probe(&report, "reload_unit")["hits"], CALLS, "{stderr:?}");
    replaced_object(&report, &lib);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 30 item 7: a library probed by path before the target loads it (`does not map
/// (yet)`), then replaced on disk (a new file renamed over its path, as a package upgrade
/// does) before the target's dlopen. The probes were on the old file, which the target
/// never maps: probetop finds the path naming another file, resolves the specs in it,
/// moves the probes there and says so in one line; every call of the new file counts.
/// The replacement and the dlopen come at once, so either look finds it: the path
/// naming another file, or the target mapping another file than the one probed.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_library_replaced_before_it_is_loaded_is_probed_where_it_is_loaded() {
    let _turn = turn(module_path!());
    let dir = std::env::temp_dir().join(format!("probetop-reload-late-{}", std::process::id()));
    let json = export_path("reload-late.json");
    let (lib, mut target, mut probetop) = reload_probed(&dir, &["--late"], &json);
    let mut stderr = probetop.err().until("attached");
    assert!(
        stderr.iter().any(|l| l.contains("does not map")),
        "{stderr:?}"
    );
    replace_on_disk(&lib);
    // The target opens the new file now.
    target.signal(libc::SIGUSR1);
    target.out().wait_for("opened");
    stderr.extend(probetop.err().until("replaced on disk"));
    // Its calls, then those after closing and opening the same file again.
    target.signal(libc::SIGUSR1);
    target.out().wait_for("first calls=");
    target.signal(libc::SIGUSR1);
    target.out().wait_for("second calls=");
    target.signal(libc::SIGUSR1);
    assert!(target.wait().success());
    let status = probetop.wait();
    stderr.extend(probetop.err().rest());
    assert!(status.success(), "{stderr:?}");
    let said = said_replaced(&stderr, &lib);
    assert!(said.contains("moved"), "{said}");
    let report = read_export(&json);
    assert_eq!(
        probe(&report, "reload_unit")["hits"],
        CALLS * 2,
        "{stderr:?}"
    );
    let replaced = replaced_object(&report, &lib);
    assert_eq!(replaced["probes_moved"], true, "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 18 item 12 (#15 item 4): hits the ring buffer drops never reach probetop, so
/// its per-thread counts of records could not hold them; the kernel counts them per
/// thread. With a ring far too small for the flood (`--mode ring`, which never moves a
/// probe into the kernel), every thread's records plus its drops are exactly its calls,
/// and the drops are said once, naming the mode that keeps them.
#[test]
#[ignore = "needs root and the fixtures"]
fn drops_are_counted_per_thread() {
    let _turn = turn(module_path!());
    const THREADS: usize = 4;
    let calls = 200_000u64;
    let mut command = std::process::Command::new(fixture("c/threads"));
    command.args([
        "--threads",
        &THREADS.to_string(),
        "--calls",
        &calls.to_string(),
    ]);
    let mut target = Running::spawn(command);
    target.out().wait_for("ready pid=");
    let json = export_path("thread-drops.json");
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args([
            "-e",
            "uprobe:work_unit",
            "--mode",
            "ring",
            "--ring-kib",
            "4",
        ])
        .arg("--export")
        .arg(&json);
    let mut probetop = Running::spawn(cmd);
    let mut stderr = probetop.err().until("attached");
    target.signal(libc::SIGUSR1);
    let mut per_thread = std::collections::BTreeMap::new();
    loop {
        let line = target.out().wait_for("calls=");
        if line.starts_with("done") {
            assert_eq!(field(&line, "calls") as u64, THREADS as u64 * calls);
            break;
        }
        per_thread.insert(field(&line, "tid") as u64, field(&line, "calls") as u64);
    }
    assert!(target.wait().success());
    let status = probetop.wait();
    stderr.extend(probetop.err().rest());
    assert!(status.success(), "{stderr:?}");
    let report = read_export(&json);
    let probe = probe(&report, "work_unit");
    assert_eq!(probe["hits"], THREADS as u64 * calls, "{stderr:?}");
    assert!(
        probe["dropped"].as_u64().unwrap_or(0) > 0,
        "a 4 KiB ring must drop some of {} hits: {probe}",
        THREADS as u64 * calls
    );
    assert_eq!(probe["threads_cover"], "every-hit", "{probe}");
    let said: Vec<&String> = stderr
        .iter()
        .filter(|l| l.contains("the ring buffer dropped"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr:#?}");
    assert!(said[0].contains("--mode auto"), "{said:?}");
    let count = |key: &str, tid: u64| {
        probe[key]
            .get(tid.to_string())
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    assert_eq!(per_thread.len(), THREADS);
    for (&tid, &made) in &per_thread {
        assert_eq!(
            count("threads", tid) + count("threads_dropped", tid),
            made,
            "thread {tid}: {probe}"
        );
    }
}
