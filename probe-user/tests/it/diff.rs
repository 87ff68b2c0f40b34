//! `probetop diff` on real runs: the `c/latency` fixture measured three times as it is
//! and once with 20 us more in every call of `spin_20us` (its `--delay`). The slowed run
//! flags exactly the `spin_20us` latency pair and `--fail-above` exits 1; identical
//! runs, each against each, flag nothing and exit 0. Bad input is one line, exit 2.

use std::path::{Path, PathBuf};

use crate::common::*;

const CALLS: &str = "300";
/// Well above what two identical runs on a busy 2-CPU host move by at p50 (0-1% in
/// runs of this test), well below the +100% the delay makes.
const FAIL_ABOVE: &str = "25";

/// One measured run of the fixture (`extra`: its --delay), exported as JSON and .hlog.
fn run(name: &str, extra: &[&str]) -> (PathBuf, PathBuf) {
    let mut args = vec![
        "--calls",
        CALLS,
        "--threads",
        "1",
        "--rounds",
        "1",
        "--depth",
        "0",
    ];
    args.extend_from_slice(extra);
    let mut target = started(&fixture("c/latency"), &args);
    let json = export_path(&format!("diff-{name}.json"));
    let hlog = export_path(&format!("diff-{name}.hlog"));
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["-e", "latency:spin_*", "--export"])
        .arg(&json)
        .arg("--export")
        .arg(&hlog);
    signalled_under(&mut target, cmd);
    (json, hlog)
}

/// `probetop diff A B --json ARGS`: its exit code and report.
fn diff(a: &Path, b: &Path, args: &[&str]) -> (i32, serde_json::Value) {
    let out = probetop()
        .arg("diff")
        .arg(a)
        .arg(b)
        .arg("--json")
        .args(args)
        .output()
        .expect("probetop diff runs");
    let code = out.status.code().expect("exited");
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "diff JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, report)
}

fn flagged(report: &serde_json::Value) -> Vec<String> {
    report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| !r["flag"].is_null())
        .map(|r| format!("{} {}", r["key"], r["flag"]))
        .collect()
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_slowed_function_is_flagged_alone_and_identical_runs_flag_nothing() {
    let _turn = turn(module_path!());
    let same: Vec<(PathBuf, PathBuf)> = (0..3).map(|i| run(&format!("same{i}"), &[])).collect();
    let slow = run("slow", &["--delay", "spin_20us", "20000"]);

    let (code, report) = diff(&same[0].0, &slow.0, &["--fail-above", FAIL_ABOVE]);
    assert_eq!(
        flagged(&report),
        ["\"latency:spin_20us@latency\" \"regression\""],
        "{report:#}"
    );
    assert_eq!(code, 1, "{report:#}");
    let (code, _) = diff(&same[0].0, &slow.0, &[]);
    assert_eq!(code, 0, "no --fail-above: exit 0 whatever is flagged");
    let row = report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["key"] == "latency:spin_20us@latency")
        .expect("the slowed pair");
    // The test and its sizes are said: 300 calls a side.
    assert_eq!(
        row["distribution_test"]["test"],
        "kolmogorov-smirnov-two-sample"
    );
    assert_eq!(row["distribution_test"]["n_a"], 300);
    assert_eq!(row["distribution_test"]["n_eff"], 150.0);
    assert_eq!(row["rate_test"]["test"], "poisson-conditional-binomial");
    assert!(
        row["p50_ns"]["change_pct"].as_f64().expect("p50") > 50.0,
        "{row}"
    );
    // 3 latency pairs and their 6 probes, each in both runs.
    assert_eq!(report["rows"].as_array().expect("rows").len(), 9);
    assert_eq!(report["only_in_a"].as_array().map(Vec::len), Some(0));

    // Each identical run against each: nothing flagged, exit 0 under --fail-above.
    for i in 0..same.len() {
        for j in i + 1..same.len() {
            let (code, report) = diff(&same[i].0, &same[j].0, &["--fail-above", FAIL_ABOVE]);
            assert_eq!(
                flagged(&report),
                Vec::<String>::new(),
                "{i} {j}: {report:#}"
            );
            assert_eq!(code, 0, "{report:#}");
        }
    }

    // The interval logs: the six probes' handler histograms and the three pairs'
    // measured latencies, matched by the same keys; a log against itself has no
    // distance at all.
    let (code, report) = diff(&same[0].1, &same[0].1, &["--fail-above", "0"]);
    assert_eq!(code, 0, "{report:#}");
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 9, "{report:#}");
    assert!(
        rows.iter().any(|r| r["key"] == "latency:spin_20us@latency"),
        "{report:#}"
    );
    for row in rows {
        assert_eq!(row["distribution_test"]["d"], 0.0, "{row}");
        assert_eq!(row["distribution_test"]["n_a"], 300, "{row}");
    }
    // The text table and the HTML page: the slowed row marked, both curves plotted.
    // The threshold is the one above: the default 10% is within what a busy host moves
    // the 2 us spin's p50 by (+11.9% in one CI run, the delay slowing its neighbour).
    let html = export_path("diff.html");
    let out = probetop()
        .arg("diff")
        .arg(&same[0].0)
        .arg(&slow.0)
        .args(["--fail-above", FAIL_ABOVE, "--html"])
        .arg(&html)
        .output()
        .expect("diff runs");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a regression above --fail-above: exit 1"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let marked: Vec<&str> = text.lines().filter(|l| l.ends_with("REGRESSION")).collect();
    assert_eq!(marked.len(), 1, "{text}");
    assert!(
        marked[0].starts_with("latency:spin_20us@latency "),
        "{text}"
    );
    let page = std::fs::read_to_string(&html).expect("html written");
    assert!(page.contains("A: latency:spin_20us@latency"), "{page}");
    assert!(page.contains("B: latency:spin_20us@latency"));
    // Self-contained: nothing fetched (the SVG's xmlns is a name, not a fetch).
    for fetch in ["<script", " src=", "<link", "url("] {
        assert!(!page.contains(fetch), "{fetch}");
    }
}

/// A missing file, a file of another format, and two runs with nothing in common:
/// one line each, exit 2.
#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = export_path("diff-bad");
    std::fs::create_dir_all(&dir).expect("dir");
    let csv = dir.join("run.csv");
    std::fs::write(&csv, "probe,hits\nx,1\n").expect("write");
    let one = dir.join("one.json");
    let other = dir.join("other.json");
    let report = |name: &str| {
        format!(
            r#"{{"tool":"probetop","duration_s":1.0,"probes":[{{"kind":"uprobe","name":"{name}","object":"/bin/x","hits":5,"handler_ns":{{"count":5,"min":1,"mean":1.0,"p50":1,"p90":1,"p99":1,"p999":1,"max":1}},"cost_class":null,"whole_cost_ns":null,"cpu_share":null}}]}}"#
        )
    };
    std::fs::write(&one, report("f")).expect("write");
    std::fs::write(&other, report("g")).expect("write");
    let missing = dir.join("missing.json");
    for (a, b, says) in [
        (&missing, &one, "cannot read"),
        (&csv, &one, "is not a probetop export"),
        (&one, &other, "no probe in common"),
    ] {
        let out = probetop()
            .arg("diff")
            .arg(a)
            .arg(b)
            .output()
            .expect("diff runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
        assert!(out.stdout.is_empty());
    }
    // The same export against itself: its one row, from the summary (no histogram).
    let out = probetop()
        .arg("diff")
        .arg(&one)
        .arg(&one)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no histogram"));
}

/// How long each workload run makes its calls, s: enough 2 s budget windows for the
/// scaled count's interval to be narrower than a doubling (in 4 s runs at 5 ms/s the
/// interval reached 11 times the hits counted).
const SECONDS: u32 = 6;

/// The workload fixture at `rate` calls/s for [`SECONDS`] with `work_unit` probed
/// (`extra`: probetop's own flags, `--budget`), exported as JSON.
fn workload_run(name: &str, rate: u32, extra: &[&str]) -> PathBuf {
    let calls = (SECONDS * rate).to_string();
    let rate = rate.to_string();
    let mut target = workload(&["--calls", &calls, "--rate", &rate, "--wait-signal"]);
    let json = export_path(&format!("diff-{name}.json"));
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["-e", "uprobe:work_unit"])
        .args(extra)
        .arg("--export")
        .arg(&json);
    signalled_under(&mut target, cmd);
    json
}

/// A `--budget` run's hits are scaled from the parts of each period its probe was
/// attached: diffed against a plain run of the same load it is judged by the scaled
/// count's 95% interval (not as a Poisson count, which flagged "+9.6%, p 7e-40" inside
/// that interval), nothing is flagged on the rate or p50, and the header says the run
/// was budgeted; twice the load, counted plainly, lies beyond the interval and is
/// flagged. The budget, 6 ms/s, is under what 10,000 hits/s cost at ~0.6-2 us a hit
/// (in the kernel or streamed), so the run duty-cycles (asserted: fewer hits counted
/// than scaled).
#[test]
#[ignore = "needs root and the fixtures"]
fn a_budgeted_run_of_the_same_load_flags_nothing_and_twice_the_rate_is_flagged() {
    let _turn = turn(module_path!());
    let plain = workload_run("plain", 10_000, &[]);
    let budgeted = workload_run(
        "budgeted",
        10_000,
        &["--budget", "6ms/s", "--budget-window", "2"],
    );
    let twice = workload_run("twice", 20_000, &[]);

    let export = read_export(&budgeted);
    let probe = &export["probes"][0];
    let (hits, counted) = (
        probe["hits"].as_u64().expect("hits"),
        probe["hits_counted"]
            .as_u64()
            .expect("a budgeted run's hits_counted"),
    );
    assert!(counted * 10 < hits * 9, "it duty-cycled: {probe:#}");
    let duty = export["budget"]["duty"].as_f64().expect("duty");

    for metric in ["p50", "rate"] {
        let (code, report) = diff(
            &plain,
            &budgeted,
            &["--metric", metric, "--fail-above", FAIL_ABOVE],
        );
        assert_eq!(flagged(&report), Vec::<String>::new(), "{report:#}");
        assert_eq!(code, 0, "{report:#}");
        assert_eq!(report["b"]["budget"]["duty"].as_f64(), Some(duty));
        assert_eq!(report["b"]["budget"]["asked"].as_f64(), Some(0.006));
        assert_eq!(report["b"]["budget"]["unit"], "seconds_per_second");
        assert!(report["a"]["budget"].is_null(), "{report:#}");
        let row = &report["rows"][0];
        assert_eq!(row["key"], "uprobe:work_unit@workload");
        assert_eq!(row["rate_test"]["test"], "scaled-hits-95%-intervals");
        assert_eq!(row["rate_test"]["significant"], false, "{row:#}");
        assert!(row["rate_test"]["p"].is_null());
        // The events counted: every call of the plain run and the budgeted run's counted.
        let every = u64::from(SECONDS * 10_000);
        assert_eq!(row["rate_test"]["n"].as_u64(), Some(every + counted));
        // The histograms' test counts what was timed, never the scaled hits.
        assert!(
            row["distribution_test"]["n_b"].as_u64().expect("n_b") <= counted,
            "{row:#}"
        );
    }
    // Each run against itself: nothing flagged.
    for run in [&plain, &budgeted] {
        let (code, report) = diff(run, run, &["--metric", "rate", "--fail-above", "0"]);
        assert_eq!(flagged(&report), Vec::<String>::new(), "{report:#}");
        assert_eq!(code, 0);
    }
    // Twice the rate: beyond the budgeted run's interval, flagged, exit 1.
    let (code, report) = diff(
        &budgeted,
        &twice,
        &["--metric", "rate", "--fail-above", FAIL_ABOVE],
    );
    assert_eq!(
        flagged(&report),
        ["\"uprobe:work_unit@workload\" \"regression\""],
        "{report:#}"
    );
    assert_eq!(code, 1, "{report:#}");
    let row = &report["rows"][0];
    assert_eq!(row["rate_test"]["significant"], true, "{row:#}");
    assert!(
        row["rate"]["change_pct"].as_f64().expect("change") > 50.0,
        "{row:#}"
    );
    // The text says it too.
    let out = probetop()
        .arg("diff")
        .arg(&plain)
        .arg(&budgeted)
        .output()
        .expect("diff runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().expect("a header");
    assert!(header.contains(", budget 6.0ms/s, duty "), "{text}");
}

/// Runs `cmd` (probetop on `target`) until it has attached, lets the target (started
/// with `--wait-signal`) make its calls, and waits for both to end well.
fn signalled_under(target: &mut Running, cmd: std::process::Command) {
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    target.signal(libc::SIGUSR1);
    target.out().wait_for("done ");
    assert!(target.wait().success());
    assert!(probetop.wait().success(), "{:?}", probetop.err().rest());
}
