//! Latency pairs (`latency:` specs) on real targets: the `c/latency` fixture, whose
//! functions take a known time per call that it measures itself, unprobed, before the
//! probes attach; its recursion on several threads and its USDT pair, counted exactly;
//! and `cpp/cxxthrow`, whose exceptions unwind through the probed function.

use crate::common::*;

/// Calls of each spin function, and USDT operations.
const CALLS: u64 = 300;
const THREADS: u64 = 4;
const DEPTH: u64 = 6;
const ROUNDS: u64 = 500;

/// A latency row of a JSON export, by function (or `START,END`) name.
fn latency_row<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .find(|p| p["kind"] == "latency" && p["name"] == name)
        .unwrap_or_else(|| panic!("no latency row {name:?} in {report}"))
}

fn u(value: &serde_json::Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("not a count: {value}"))
}

/// The corrected median of each spin function lies within 5% (or 200 ns) of the time the
/// fixture measured per call without probes; the recursion on four threads and the
/// USDT pair pair every call, none left open or unwound.
#[test]
#[ignore = "needs root and the fixtures"]
fn corrected_latency_is_the_unprobed_time_and_every_call_pairs() {
    let _turn = turn(module_path!());
    corrected_and_paired("ring");
}

/// The same, paired in the kernel (`--mode kernel`): per thread a stack of open calls,
/// the durations in an in-kernel histogram with HDR's buckets, no record per call.
#[test]
#[ignore = "needs root and the fixtures"]
fn paired_in_the_kernel_the_calls_and_their_latency_are_the_same() {
    let _turn = turn(module_path!());
    corrected_and_paired("kernel");
}

fn corrected_and_paired(mode: &str) {
    let mut command = std::process::Command::new(fixture("c/latency"));
    command.args([
        "--calls",
        &CALLS.to_string(),
        "--threads",
        &THREADS.to_string(),
        "--depth",
        &DEPTH.to_string(),
        "--rounds",
        &ROUNDS.to_string(),
    ]);
    let mut target = Running::spawn(command);
    let mut truth = Vec::new();
    for name in ["spin_2us", "spin_20us", "spin_200us"] {
        let line = target.out().wait_for(&format!("truth fn={name} "));
        truth.push((name, field(&line, "p50_ns")));
    }
    target.out().wait_for("ready pid=");
    let json = export_path(&format!("latency-fixture-{mode}.json"));
    // The correction prices the probes by this machine's calibration.
    let cache = std::env::temp_dir().join(format!("probetop-latency-{}", std::process::id()));
    calibrate_default(&cache);
    let mut cmd = probetop();
    // Hot: the spins run a tight loop on a few cache lines between the probes' hits, so
    // nothing evicts what a hit uses (auto would price them cold: a hit every 2-200 us).
    cmd.env("XDG_CACHE_HOME", &cache)
        .args(["--assume", "hot", "--mode", mode]);
    if mode == "kernel" {
        // Every handler timed: 300 calls a function, each priced from its own hits.
        cmd.args(["--time-every", "1"]);
    }
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "--export"])
        .arg(&json)
        .args(["-e", "latency:spin_*", "-e", "latency:recurse"])
        .args(["-e", "latency:latency:op__start,op__done"]);
    let mut probetop = Running::spawn(cmd);
    let said = probetop.err().wait_for("attached");
    assert!(said.contains("attached 10 probes"), "{said}");
    target.signal(libc::SIGUSR1);
    let done = target.out().wait_for("done ");
    assert!(target.wait().success());
    probetop.ended_ok();
    let report = read_export(&json);

    for (name, truth_ns) in truth {
        let row = latency_row(&report, name);
        assert_eq!(u(&row["calls"]), CALLS, "{row}");
        assert_eq!(row["end_path"], "uretprobe", "{row}");
        assert_eq!(row["corrected"], true, "priced: {row}");
        let measured = row["latency_ns"]["p50"].as_f64().expect("p50");
        let corrected = row["latency_corrected_ns"]["p50"].as_f64().expect("p50");
        let tolerance = (truth_ns * 0.05).max(200.0);
        assert!(
            (corrected - truth_ns).abs() <= tolerance,
            "{name}: corrected p50 {corrected} ns, the fixture's unprobed {truth_ns} ns (measured {measured}): {row}"
        );
        // The probes' cost is in the measured time: more than the truth.
        assert!(measured > truth_ns, "{name}: {row}");
        let whole = row["whole_cost_ns"].as_f64().expect("priced");
        let mean = row["latency_corrected_ns"]["mean"].as_f64().expect("mean");
        let share = row["overhead_share"].as_f64().expect("share");
        assert!(
            (share - whole / mean).abs() <= 1e-9 * share.max(1.0),
            "{row}"
        );
        for key in ["open", "unwound", "unmatched", "overflowed"] {
            assert_eq!(u(&row[key]), 0, "{name} {key}: {row}");
        }
    }

    let recursion = latency_row(&report, "recurse");
    let recurse_calls = field(&done, "recurse_calls") as u64;
    assert_eq!(recurse_calls, THREADS * ROUNDS * (DEPTH + 1));
    assert_eq!(u(&recursion["calls"]), recurse_calls, "{recursion}");
    for key in ["open", "unwound", "unmatched", "overflowed"] {
        assert_eq!(u(&recursion[key]), 0, "recurse {key}: {recursion}");
    }
    let entry = u(&recursion["start_probes"][0]) as usize;
    let exit = u(&recursion["end_probes"][0]) as usize;
    for id in [entry, exit] {
        assert_eq!(
            u(&report["probes"][id]["hits"]),
            recurse_calls,
            "{recursion}"
        );
        assert_eq!(
            report["probes"][id]["mode"], mode,
            "{}",
            report["probes"][id]
        );
    }
    if mode == "ring" {
        // Both halves saw every call, from every thread.
        let threads = report["probes"][entry]["threads"]
            .as_object()
            .expect("threads");
        assert_eq!(threads.len() as u64, THREADS, "{threads:?}");
    }

    let usdt = latency_row(&report, "op__start,op__done");
    assert_eq!(usdt["end_path"], "usdt");
    assert_eq!(u(&usdt["calls"]), field(&done, "usdt_ops") as u64, "{usdt}");
    for key in ["open", "unmatched"] {
        assert_eq!(u(&usdt[key]), 0, "usdt {key}: {usdt}");
    }
}

/// An exception unwinding through the probed function: probetop measures its returns
/// at its `ret` instructions (a uretprobe would kill the target), the target lives,
/// every normal return pairs, and every thrown call ends as unwound, none left open.
#[test]
#[ignore = "needs root and the fixtures"]
fn an_exception_through_a_probed_function_ends_as_unwound() {
    let _turn = turn(module_path!());
    unwound("ring");
}

/// The same, paired in the kernel.
#[test]
#[ignore = "needs root and the fixtures"]
fn paired_in_the_kernel_an_unwound_call_ends_as_unwound() {
    let _turn = turn(module_path!());
    unwound("kernel");
}

fn unwound(mode: &str) {
    // 1001 calls, every 10th throwing: the last call returns, so each thrown call's
    // start is met by a later call's entry.
    let mut target = started(
        &fixture("cpp/cxxthrow"),
        &["--wait-signal", "--count", "1001", "--every", "10"],
    );
    let json = export_path(&format!("latency-unwound-{mode}.json"));
    let mut probetop = exporting(
        target.pid(),
        &["--mode", mode, "-e", "latency:middle"],
        &json,
    );
    let path = probetop.err().wait_for("returns measured");
    assert!(path.contains("ret instructions"), "{path}");
    probetop.err().wait_for("attached 2 probes");
    target.signal(libc::SIGUSR1);
    let status = target.wait();
    let lines = target.out().rest();
    assert!(status.success(), "cxxthrow: {status:?} {lines:?}");
    let done = lines
        .iter()
        .find(|l| l.starts_with("done "))
        .expect("done line");
    probetop.ended_ok();
    let report = read_export(&json);
    let row = latency_row(&report, "middle(long, long)");
    assert_eq!(row["end_path"], "ret-uprobes", "{row}");
    let (returned, thrown) = (field(done, "returned") as u64, field(done, "thrown") as u64);
    assert_eq!(thrown, 100);
    assert_eq!(u(&row["calls"]), returned, "{row}");
    assert_eq!(u(&row["unwound"]), thrown, "{row}");
    for key in ["open", "unmatched", "overflowed"] {
        assert_eq!(u(&row[key]), 0, "{key}: {row}");
    }
}

/// Keyed rows (` key=argN`, `--key`): the fixture calls keyed(K, "request-kind-K") K x
/// KEYED times for K = 1..5, in runs of one kind, between the USDT pair req__start (K,
/// the name) and req__done. With `--max-keys 3` the first three kinds seen get rows of
/// their own and kinds 4 and 5 are counted in `other`, exactly: a function's latency
/// keyed by an integer argument, a USDT pair's by a string argument (14 bytes, two
/// slots), and a function's hits keyed by `--key`.
#[test]
#[ignore = "needs root and the fixtures"]
fn keyed_rows_count_each_key_and_the_rest_as_other() {
    let _turn = turn(module_path!());
    const KEYED: u64 = 7;
    let mut target = started(
        &fixture("c/latency"),
        &[
            "--calls",
            "5",
            "--threads",
            "1",
            "--rounds",
            "1",
            "--keyed",
            &KEYED.to_string(),
        ],
    );
    let json = export_path("latency-keyed.json");
    let keyed = [
        "--max-keys",
        "3",
        "--key",
        "arg0",
        "-e",
        "latency:keyed key=arg0:i32",
        "-e",
        "latency:latency:req__start,req__done key=arg1:str",
        "-e",
        "uprobe:keyed_leaf",
    ];
    let mut probetop = exporting(target.pid(), &keyed, &json);
    probetop.err().wait_for("attached 5 probes");
    target.signal(libc::SIGUSR1);
    let done = target.out().wait_for("done ");
    assert_eq!(field(&done, "keyed_per") as u64, KEYED);
    assert!(target.wait().success());
    probetop.ended_ok();
    let summary = probetop.out().rest().join("\n");
    let report = read_export(&json);
    let entries = report["probes"].as_array().expect("probes");

    // (key, count) of the rows of `kind` named `name`, in the export's order: the
    // whole first (no key), then most first, `other` last.
    let rows = |kind: &str, name: &str, count: &str| -> Vec<(String, u64)> {
        entries
            .iter()
            .filter(|p| p["kind"] == kind && p["name"] == name)
            .map(|p| (p["key"].as_str().unwrap_or("").to_string(), u(&p[count])))
            .collect()
    };
    let want = |names: [&str; 3]| -> Vec<(String, u64)> {
        vec![
            (String::new(), 15 * KEYED),
            (names[2].to_string(), 3 * KEYED),
            (names[1].to_string(), 2 * KEYED),
            (names[0].to_string(), KEYED),
            ("other".to_string(), (4 + 5) * KEYED),
        ]
    };
    assert_eq!(
        rows("latency", "keyed", "calls"),
        want(["1", "2", "3"]),
        "{report}"
    );
    let named = ["request-kind-1", "request-kind-2", "request-kind-3"];
    assert_eq!(
        rows("latency", "req__start,req__done", "calls"),
        want(named),
        "{report}"
    );
    assert_eq!(
        rows("uprobe", "keyed_leaf", "hits"),
        want(["1", "2", "3"]),
        "{report}"
    );
    for row in entries.iter().filter(|p| p["kind"] == "latency") {
        for key in ["open", "unwound", "unmatched", "overflowed"] {
            assert_eq!(u(&row[key]), 0, "{key}: {row}");
        }
    }
    // The summary names each keyed row after its function.
    for name in [
        "keyed[3]",
        "req__start,req__done[request-kind-2]",
        "keyed[other]",
    ] {
        assert!(summary.contains(name), "{name} not in {summary}");
    }
}

/// `--follow-exec`: the pair is resolved again in the program the target exec'd and
/// pairs its calls there, a row per program, every call of each (execer, then the
/// workload fixture in the same pid); streamed, and paired in the kernel.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_pair_follows_an_exec_into_another_program() {
    let _turn = turn(module_path!());
    for mode in ["ring", "kernel"] {
        pair_follows_an_exec(mode);
    }
}

fn pair_follows_an_exec(mode: &str) {
    const BEFORE: u64 = 2_000;
    const AFTER: u64 = 5_000;
    let target = execer_into(&fixture("c/workload"), BEFORE, AFTER);
    let json = export_path(&format!("latency-exec-{mode}.json"));
    let args = ["--follow-exec", "--mode", mode, "-e", "latency:work_unit"];
    let mut probetop = exporting(target.pid(), &args, &json);
    probetop.err().wait_for("attached 2 probes");
    exec_now(&target);
    probetop.err().wait_for("exec 1: attached");
    target.signal(libc::SIGUSR1);
    let done = target.out().wait_for("done calls=");
    assert_eq!(field(&done, "calls") as u64, AFTER);
    let stderr = probetop.ended_ok().join("\n");
    let report = read_export(&json);
    let mut rows: Vec<(u64, u64)> = report["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .filter(|p| p["kind"] == "latency" && p["name"] == "work_unit")
        .map(|row| {
            for key in ["open", "unwound", "unmatched", "overflowed"] {
                assert_eq!(u(&row[key]), 0, "{mode} {key}: {row}");
            }
            let start = u(&row["start_probes"][0]) as usize;
            let probe = &report["probes"][start];
            assert_eq!(probe["mode"], mode, "{probe}");
            (u(&probe["generation"]), u(&row["calls"]))
        })
        .collect();
    rows.sort_unstable();
    assert_eq!(rows, [(0, BEFORE), (1, AFTER)], "{mode}: {stderr}");
}

/// `--follow-forks`: the calls of every process of the forker fixture's tree (13
/// processes, threads of each paired apart) pair, each exactly once; streamed, and
/// paired in the kernel.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_pair_follows_forks() {
    let _turn = turn(module_path!());
    const FORK_CALLS: u64 = 1_000;
    for mode in ["ring", "kernel"] {
        let target = forker(2, 2, 2, &["--calls", &FORK_CALLS.to_string()]);
        let json = export_path(&format!("latency-forks-{mode}.json"));
        let args = ["-F", "--mode", mode, "-e", "latency:work_unit"];
        let mut probetop = exporting(target.pid(), &args, &json);
        probetop.err().wait_for("attached");
        target.signal(libc::SIGUSR1);
        target.out().wait_for("done");
        probetop.ended_ok();
        let report = read_export(&json);
        let row = latency_row(&report, "work_unit");
        // 1 parent + 4 workers + 8 of theirs.
        assert_eq!(u(&row["calls"]), FORK_CALLS * 13, "{mode}: {row}");
        for key in ["open", "unwound", "unmatched", "overflowed"] {
            assert_eq!(u(&row[key]), 0, "{mode} {key}: {row}");
        }
    }
}
