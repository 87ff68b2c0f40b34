//! Process trees and sets (issue #15): `--follow-forks`, several `--pid`, `--cgroup`,
//! each counted exactly and split by process on the forker fixture, and the hint for a
//! probe silent in a parent whose children map its file.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use crate::common::*;

const CALLS: u64 = 1000;

/// The `pids` split of probe `name`: pid -> hits.
fn pids(report: &serde_json::Value, name: &str) -> BTreeMap<u32, u64> {
    probe(report, name)["pids"]
        .as_object()
        .unwrap_or_else(|| panic!("no pids for {name} in {report}"))
        .iter()
        .map(|(pid, n)| (pid.parse().expect("pid"), n.as_u64().expect("count")))
        .collect()
}

/// Every process of the fixture's tree (itself included) now.
pub(crate) fn tree_of(root: u32) -> Vec<u32> {
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
            if after.split_whitespace().nth(1) == Some(&parent.to_string()) {
                tree.push(pid);
            }
        }
        i += 1;
    }
    tree.sort_unstable();
    tree
}

/// A parent with 2 workers forked before probetop starts and 2 after, each forking 2
/// more: every one of the 13 processes counted, exactly, each under its own pid; no
/// program or link left once probetop is gone. On both attach paths.
fn follows_the_whole_tree(attach_path: &str) {
    let target = forker(2, 2, 2, &["--calls", &CALLS.to_string()]);
    let json = export_path(&format!("forks-{attach_path}.json"));
    let mut cmd = probetop();
    cmd.args([
        "--pid",
        &target.pid().to_string(),
        "-F",
        "--no-tui",
        "--export",
    ])
    .arg(&json)
    .args(["-e", "uprobe:work_unit", "-e", "uprobe:child_only"])
    .env("PROBETOP_ATTACH_PATH", attach_path);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    let (programs, links) = bpf_ids_of(probetop.pid());
    target.signal(libc::SIGUSR1);
    target.out().wait_for("done");
    let stderr = probetop.ended_ok().join("\n");
    let report = read_export(&json);
    // 1 parent + 4 workers + 8 of theirs.
    assert_eq!(probe(&report, "work_unit")["hits"], CALLS * 13, "{stderr}");
    assert_eq!(probe(&report, "child_only")["hits"], CALLS * 12, "{stderr}");
    let split = pids(&report, "work_unit");
    assert_eq!(split.len(), 13, "{split:?}");
    assert!(split.values().all(|&n| n == CALLS), "{split:?}");
    assert_eq!(split.get(&target.pid()), Some(&CALLS), "{split:?}");
    let children = pids(&report, "child_only");
    assert_eq!(children.len(), 12, "{children:?}");
    assert!(!children.contains_key(&target.pid()), "{children:?}");
    nothing_left_of(&programs, &links);
}

#[test]
#[ignore = "needs root and the fixtures"]
fn follows_forks_on_uprobe_multi_links() {
    let _turn = turn(module_path!());
    if !multi_links_expected() {
        eprintln!("skipped: this kernel has no uprobe_multi links with a reliable pid filter");
        return;
    }
    follows_the_whole_tree("uprobe_multi");
}

#[test]
#[ignore = "needs root and the fixtures"]
fn follows_forks_on_perf_events() {
    let _turn = turn(module_path!());
    follows_the_whole_tree("perf_event");
}

/// Without `-F`, only the parent counts (its children take the breakpoint in the same
/// file, and their hits are not its), and the probe only children call is named with
/// `--follow-forks` at the end, once.
#[test]
#[ignore = "needs root and the fixtures"]
fn without_follow_forks_the_parent_alone_counts_and_the_hint_says_so() {
    let _turn = turn(module_path!());
    let target = forker(1, 1, 1, &["--hold", "--calls", &CALLS.to_string()]);
    let json = export_path("forks-hint.json");
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "--export"])
        .arg(&json)
        .args(["-e", "uprobe:work_unit", "-e", "uprobe:child_only"]);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    target.signal(libc::SIGUSR1);
    target.out().wait_for("done");
    // The children call while held alive: wait until all 4 have (their hits are not
    // counted here; the hint needs them alive, which --hold keeps).
    wait_for_tree(target.pid(), 5);
    // Said while running (after 5 s of silence), and not again at the end.
    let hint = probetop.err().wait_for("--follow-forks");
    probetop.signal(libc::SIGINT);
    let stderr = probetop.ended_ok().join("\n");
    let report = read_export(&json);
    assert_eq!(probe(&report, "work_unit")["hits"], CALLS, "{stderr}");
    assert_eq!(probe(&report, "child_only")["hits"], 0, "{stderr}");
    // One process: no split.
    assert!(
        probe(&report, "work_unit").get("pids").is_none(),
        "{report}"
    );
    assert!(!stderr.contains("--follow-forks"), "said twice: {stderr}");
    assert!(
        hint.contains("uprobe:child_only")
            && !hint.contains("work_unit")
            && hint.contains("4 of its child processes"),
        "{hint}"
    );
}

/// A run that ends before the hint's moment says it at the end instead, once.
#[test]
#[ignore = "needs root and the fixtures"]
fn the_hint_is_said_at_the_end_of_a_short_run() {
    let _turn = turn(module_path!());
    let target = forker(1, 0, 0, &["--hold", "--calls", "1"]);
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["-e", "uprobe:child_only", "--duration", "0.5"]);
    let mut probetop = Running::spawn(cmd);
    let stderr = probetop.ended_ok().join("\n");
    let hints: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("--follow-forks"))
        .collect();
    assert_eq!(hints.len(), 1, "{stderr}");
    assert!(hints[0].contains("1 of its child processes"), "{stderr}");
}

/// Waits until `root`'s tree holds `count` processes.
fn wait_for_tree(root: u32, count: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while tree_of(root).len() < count {
        assert!(std::time::Instant::now() < deadline, "{:?}", tree_of(root));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Held forkers with no workers: each calls work_unit CALLS times, prints "done" and
/// waits for SIGTERM.
fn held_single() -> Running {
    forker(0, 0, 0, &["--hold", "--calls", &CALLS.to_string()])
}

/// Lets each held forker make its calls, then stops probetop with SIGINT: its stderr,
/// once it has exited successfully.
fn release_then_stop(processes: &[&Running], probetop: &mut Running) -> String {
    for process in processes {
        process.signal(libc::SIGUSR1);
        process.out().wait_for("done");
    }
    probetop.signal(libc::SIGINT);
    probetop.ended_ok().join("\n")
}

/// `--pid A --pid B`: both counted, each under its own pid; a third process of the same
/// program, not named, is not.
#[test]
#[ignore = "needs root and the fixtures"]
fn several_pids_are_counted_apart() {
    let _turn = turn(module_path!());
    let (a, b, other) = (held_single(), held_single(), held_single());
    let json = export_path("forks-pids.json");
    let mut cmd = probetop();
    cmd.args(["--pid", &a.pid().to_string(), "--pid", &b.pid().to_string()])
        .args(["--no-tui", "--export"])
        .arg(&json)
        .args(["-e", "uprobe:work_unit"]);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    let stderr = release_then_stop(&[&a, &b, &other], &mut probetop);
    let report = read_export(&json);
    assert_eq!(probe(&report, "work_unit")["hits"], CALLS * 2, "{stderr}");
    let split = pids(&report, "work_unit");
    let expected: BTreeMap<u32, u64> = [(a.pid(), CALLS), (b.pid(), CALLS)].into();
    assert_eq!(split, expected);
}

/// A process set needs two tracepoints from tracefs. Where it is not mounted (a VM or
/// container booted without systemd), probetop mounts it, says so and counts exactly:
/// run in a mount namespace of its own with tracefs unmounted, so the machine's mounts
/// are left as they were.
#[test]
#[ignore = "needs root and the fixtures"]
fn tracefs_is_mounted_when_absent() {
    let _turn = turn(module_path!());
    let (a, b) = (held_single(), held_single());
    let json = export_path("forks-tracefs.json");
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "umount /sys/kernel/tracing 2>/dev/null; umount /sys/kernel/debug/tracing 2>/dev/null; \
             if [ -d /sys/kernel/tracing/events ] || [ -d /sys/kernel/debug/tracing/events ]; then \
             echo 'tracefs still mounted' >&2; exit 97; fi; exec \"$0\" \"$@\"",
        )
        .env("XDG_CACHE_HOME", no_calibration())
        .arg(env!("CARGO_BIN_EXE_probetop"))
        .args(["--pid", &a.pid().to_string(), "--pid", &b.pid().to_string()])
        .args(["--no-tui", "--export"])
        .arg(&json)
        .args(["-e", "uprobe:work_unit"]);
    let mut probetop = Running::spawn(cmd);
    probetop
        .err()
        .wait_for("mounted tracefs at /sys/kernel/tracing");
    probetop.err().wait_for("attached");
    let stderr = release_then_stop(&[&a, &b], &mut probetop);
    assert_eq!(
        probe(&read_export(&json), "work_unit")["hits"],
        CALLS * 2,
        "{stderr}"
    );
}

/// A cgroup v2 directory of this test's own, removed when dropped.
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(name: &str) -> Option<Self> {
        let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
        let root = mounts.lines().find_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, at, kind) = (fields.next()?, fields.next()?, fields.next()?);
            (kind == "cgroup2").then(|| PathBuf::from(at))
        })?;
        let dir = root.join(format!("probetop-test-{}-{name}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some(Self(dir))
    }

    fn enter(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).expect("move into the cgroup");
    }

    /// A sub-cgroup, removed when dropped (drop it before its parent).
    fn child(&self, name: &str) -> Self {
        let dir = self.0.join(name);
        std::fs::create_dir(&dir).expect("make a sub-cgroup");
        Self(dir)
    }

    /// Moves `pid` out, to the hierarchy's root cgroup.
    fn leave(&self, pid: u32) {
        let mut root = self.0.as_path();
        while let Some(parent) = root.parent() {
            if !parent.join("cgroup.procs").exists() {
                break;
            }
            root = parent;
        }
        std::fs::write(root.join("cgroup.procs"), pid.to_string()).expect("move out of the cgroup");
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Empty once its processes are gone (killed by the test's Running guards); a
        // test may have removed it already.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.0.exists()
            && std::fs::remove_dir(&self.0).is_err()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `--cgroup DIR`: a process moved in before the run, the workers it forks inside
/// after (not named anywhere), and a process moved in while probetop runs are counted;
/// the same program outside is not, nor the worker forked before the move.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_cgroup_and_everything_entering_it() {
    let _turn = turn(module_path!());
    let Some(cgroup) = Cgroup::new("cgroup") else {
        eprintln!("skipped: no cgroup v2 hierarchy to make a directory in");
        return;
    };
    let inside = forker(1, 1, 1, &["--hold", "--calls", &CALLS.to_string()]);
    let (late, outside) = (held_single(), held_single());
    cgroup.enter(inside.pid());
    let json = export_path("forks-cgroup.json");
    let mut cmd = probetop();
    cmd.arg("--cgroup")
        .arg(&cgroup.0)
        .args(["--no-tui", "--export"])
        .arg(&json)
        .args(["-e", "uprobe:work_unit"]);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    cgroup.enter(late.pid());
    // Found by the next read of cgroup.procs (every 200 ms), and said.
    probetop
        .err()
        .wait_for(&format!("pid {} entered", late.pid()));
    for process in [&inside, &late, &outside] {
        process.signal(libc::SIGUSR1);
        process.out().wait_for("done");
    }
    wait_for_tree(inside.pid(), 5);
    probetop.signal(libc::SIGINT);
    let stderr = probetop.ended_ok().join("\n");
    let report = read_export(&json);
    let split = pids(&report, "work_unit");
    // Moving a process moves none of its children: the early worker and its child
    // stay outside. Inside: the parent, the late worker and its child, and `late`.
    let members = std::fs::read_to_string(cgroup.0.join("cgroup.procs")).expect("members");
    let expected: BTreeMap<u32, u64> = members
        .lines()
        .map(|l| (l.trim().parse().expect("pid"), CALLS))
        .collect();
    assert_eq!(expected.len(), 4, "{members}");
    assert!(expected.contains_key(&late.pid()) && !expected.contains_key(&outside.pid()));
    assert_eq!(split, expected, "{stderr}");
    assert_eq!(probe(&report, "work_unit")["hits"], CALLS * 4, "{stderr}");
    drop((inside, late, outside));
}

/// Issue 30 item 9: a process counts while it is in the cgroup. One moved out (from a
/// sub-cgroup) mid-run is said and its later calls are not counted; the primary (the
/// cgroup's first process, not named with --pid) moved out likewise; the cgroup then
/// removed (empty) is said once and ends the run, as nothing can count any more. The
/// reload fixture calls N times on each of two signals, on the library both map.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_process_leaving_the_cgroup_stops_counting_and_removing_it_ends_the_run() {
    let _turn = turn(module_path!());
    let Some(cgroup) = Cgroup::new("leave") else {
        eprintln!("skipped: no cgroup v2 hierarchy to make a directory in");
        return;
    };
    let sub = cgroup.child("sub");
    let lib = fixture("c/libreload.so");
    let calls = CALLS.to_string();
    let reload = || {
        started(
            &fixture("c/reload"),
            &[lib.to_str().unwrap(), "--calls", &calls],
        )
    };
    let (first, mover) = (reload(), reload());
    cgroup.enter(first.pid());
    sub.enter(mover.pid());
    let json = export_path("forks-cgroup-leave.json");
    let mut cmd = probetop();
    cmd.arg("--cgroup")
        .arg(&cgroup.0)
        .args(["--no-tui", "--export"])
        .arg(&json)
        .arg("-e")
        .arg(format!("uprobe:{}:reload_unit", lib.display()));
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    mover.signal(libc::SIGUSR1);
    mover.out().wait_for("first calls=");
    sub.leave(mover.pid());
    probetop
        .err()
        .wait_for(&format!("pid {} left", mover.pid()));
    // Not counted: out of the cgroup.
    mover.signal(libc::SIGUSR1);
    mover.out().wait_for("second calls=");
    first.signal(libc::SIGUSR1);
    first.out().wait_for("first calls=");
    cgroup.leave(first.pid());
    probetop
        .err()
        .wait_for(&format!("pid {} left", first.pid()));
    first.signal(libc::SIGUSR1);
    first.out().wait_for("second calls=");
    drop(sub);
    std::fs::remove_dir(&cgroup.0).expect("remove the empty cgroup");
    // Ends the run by itself.
    let stderr = probetop.ended_ok();
    let removed: Vec<&String> = stderr
        .iter()
        .filter(|l| l.contains("was removed"))
        .collect();
    assert_eq!(removed.len(), 1, "said once: {stderr:?}");
    assert!(
        removed[0].contains(&cgroup.0.display().to_string()),
        "{removed:?}"
    );
    let report = read_export(&json);
    let split = pids(&report, "reload_unit");
    let expected: BTreeMap<u32, u64> = [(first.pid(), CALLS), (mover.pid(), CALLS)].into();
    assert_eq!(split, expected, "{stderr:?}");
    assert_eq!(
        probe(&report, "reload_unit")["hits"],
        CALLS * 2,
        "{stderr:?}"
    );
}

/// Issue 30 item 9: a cgroup v1 directory (a named hierarchy mounted in a mount
/// namespace of its own) has a cgroup.procs too; --cgroup refuses it in one line, exit 2.
#[test]
#[ignore = "needs root"]
fn a_cgroup_v1_directory_is_refused() {
    let _turn = turn(module_path!());
    let target = held_single();
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "d=$(mktemp -d) && mount -t cgroup -o none,name=probetoptest cgroup \"$d\" || exit 97; \
             mkdir \"$d/sub\" && echo \"$1\" > \"$d/sub/cgroup.procs\" || exit 97; \
             shift; exec \"$0\" --cgroup \"$d/sub\" \"$@\"",
        )
        .env("XDG_CACHE_HOME", no_calibration())
        .arg(env!("CARGO_BIN_EXE_probetop"))
        .arg(target.pid().to_string())
        .args(["--no-tui", "-e", "uprobe:work_unit", "--duration", "1"]);
    let output = cmd.output().expect("unshare");
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(97) {
        eprintln!("skipped: cannot mount a cgroup v1 hierarchy here: {stderr}");
        return;
    }
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cgroup v1") && stderr.contains("--cgroup needs a cgroup v2 directory"),
        "{stderr}"
    );
}

/// Issue 30 item 9: with several processes the probes are attached file-wide, so the
/// kernel raises a USDT probe's semaphore in every process mapping the file, also one
/// not counted, whose guarded code then runs: said once at attach, and only then.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_semaphore_raised_file_wide_is_said() {
    let _turn = turn(module_path!());
    for (spec, said) in [
        ("usdt:fixture_sema:tick", true),
        ("usdt:fixture:tick", false),
    ] {
        let probes = || started(&fixture("c/probes"), &["--wait-signal", "--count", "10"]);
        let (target, other) = (probes(), probes());
        let mut cmd = probetop();
        cmd.args([
            "--pid",
            &target.pid().to_string(),
            "-F",
            "--no-tui",
            "-e",
            spec,
        ]);
        let mut probetop = Running::spawn(cmd);
        let mut stderr = probetop.err().until("attached");
        if said {
            // What the line says: the other process's semaphore is up too.
            assert_eq!(semaphore(other.pid(), "fixture_sema:tick"), 1);
        }
        probetop.signal(libc::SIGINT);
        let status = probetop.wait();
        stderr.extend(probetop.err().rest());
        assert!(status.success(), "{stderr:?}");
        let lines: Vec<&String> = stderr.iter().filter(|l| l.contains("semaphore")).collect();
        if said {
            assert_eq!(lines.len(), 1, "{stderr:?}");
            assert!(
                lines[0].contains("every process mapping")
                    && lines[0].contains("fixture_sema:tick"),
                "{lines:?}"
            );
        } else {
            assert!(lines.is_empty(), "{stderr:?}");
        }
    }
}

/// utime + stime of `pid` in clock ticks (0 once gone).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state is the first field, utime the 12th, stime the 13th.
    fields
        .get(11..13)
        .map_or(0, |t| t.iter().filter_map(|v| v.parse::<u64>().ok()).sum())
}

/// `-F`: the headline sets the probes' cost against the CPU of the whole tree (it had no
/// part against the target at all): a parent and two workers, each calling work_unit
/// 20,000 times a second, read by /proc over the same run, where the parent alone is a
/// third.
#[test]
#[ignore = "needs root and the fixtures"]
fn the_headline_sets_the_cost_against_the_whole_tree() {
    let _turn = turn(module_path!());
    let target = started(
        &fixture("c/forker"),
        &["--early", "2", "--grand", "0", "--rate", "20000"],
    );
    target.signal(libc::SIGUSR1);
    wait_for_tree(target.pid(), 3);
    let tree = tree_of(target.pid());
    let cache = export_path("forks-headline-cache");
    copy_calibration(&cache);
    let json = export_path("forks-headline.json");
    let mut cmd = probetop();
    cmd.env("XDG_CACHE_HOME", &cache)
        .args(["--pid", &target.pid().to_string(), "-F", "--no-tui"])
        .args(["--duration", "6", "-e", "uprobe:work_unit", "--export"])
        .arg(&json);
    let ticks = || tree.iter().map(|&pid| cpu_ticks(pid)).sum::<u64>();
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    let (start, before) = (std::time::Instant::now(), ticks());
    let status = probetop.wait();
    let (seconds, after) = (start.elapsed().as_secs_f64(), ticks());
    let stderr = probetop.err().rest().join("\n");
    assert!(status.success(), "{stderr}");
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let tree_cpu = (after - before) as f64 / hz / seconds;
    let report = read_export(&json);
    let headline = &report["headline"];
    let measured = headline["target_cpu_share"]
        .as_f64()
        .unwrap_or_else(|| panic!("the tree's CPU is read: {headline:#}\n{stderr}"));
    let ratio = measured / tree_cpu;
    assert!(
        (0.7..=1.4).contains(&ratio),
        "the headline's {measured:.4} of one CPU against the tree's {tree_cpu:.4} \
         (/proc, {seconds:.1} s): {headline:#}"
    );
    // And the cost is set against it: against its own CPU or its whole (with this
    // machine's calibration; without one there is no cost to set).
    assert!(
        headline["target_own_cpu_share"].is_f64() || headline["of_target_cpu"].is_f64(),
        "{headline:#}"
    );
    if headline["cpu_share"].is_f64() {
        assert!(
            stderr.contains("the target's own") || stderr.contains("of the target's CPU"),
            "the end line says it: {stderr}"
        );
    }
    let _ = std::fs::remove_file(&json);
}
