//! `--in-situ` against the truth: the fixture's own CPU time per call with and without
//! the probe (its loop time). The in-situ measurement alternates attached and detached
//! windows on the running target and must find the added cost per hit within 25%.

use crate::common::*;

fn median(mut values: Vec<f64>) -> f64 {
    assert!(!values.is_empty());
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[test]
#[ignore = "needs root and the fixtures"]
fn in_situ_finds_the_fixtures_own_cost_per_hit() {
    let _turn = turn(module_path!());
    // Open loop: 50,000 calls a second whether probed or not, so the added CPU per
    // second over the hit rate is the added cost per hit (`--work none`). Batches of
    // 5,000 calls report their thread CPU per call: the truth, probed and unprobed.
    let target = workload(&["--forever", "--batch", "5000", "--rate", "50000"]);
    let json = export_path("in-situ.json");
    let mut cmd = probetop();
    cmd.args([
        "--pid",
        &target.pid().to_string(),
        "--no-tui",
        "--duration",
        "10",
        "--in-situ",
        "--in-situ-window",
        "0.5",
        "--work",
        "none",
        "-e",
        "uprobe:work_unit",
        "--export",
    ])
    .arg(&json);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    assert!(probetop.wait().success(), "{:?}", probetop.err().rest());
    let stderr = probetop.err().rest();
    assert!(
        stderr.iter().any(|l| l.contains("in situ (")),
        "no in-situ line: {stderr:?}"
    );

    // Everything the fixture printed, before, during and after the run.
    target.signal(libc::SIGTERM);
    let per_call: Vec<f64> = target
        .out()
        .rest()
        .iter()
        .filter(|line| line.starts_with("batch"))
        .map(|line| field(line, "ns_per_call"))
        .collect();
    let report = read_export(&json);
    let cost = &report["cost"];
    let in_situ = &cost["in_situ"];
    assert_eq!(in_situ["verdict"], "measured", "{in_situ}");
    assert_eq!(in_situ["work"], "none");
    assert_eq!(cost["whole_cost_method"], "in-situ", "{cost}");
    assert!(in_situ["pairs"].as_u64().unwrap_or(0) >= 4, "{in_situ}");
    let measured = in_situ["per_hit_ns"]["mean"].as_f64().expect("per_hit_ns");
    let (low, high) = (
        in_situ["per_hit_ns"]["low"].as_f64().expect("low"),
        in_situ["per_hit_ns"]["high"].as_f64().expect("high"),
    );
    assert!(low <= measured && measured <= high, "{in_situ}");
    // A single probe carries the whole measured cost.
    let probe = &report["probes"][0];
    assert_eq!(probe["whole_cost_method"], "in-situ", "{probe}");
    assert_eq!(probe["whole_cost_ns"].as_f64(), Some(measured));
    // The detach and attach of each window change are stated.
    assert!(in_situ["detach_ms"].as_f64().is_some_and(|ms| ms > 0.0));
    assert!(in_situ["attach_ms"].as_f64().is_some_and(|ms| ms > 0.0));

    // Every hit costs hundreds of times an unprobed call: the batches split cleanly
    // (at the geometric middle of the cheapest and the dearest batch, whatever a hit
    // costs on this machine) except those a window change cut, which the medians leave
    // aside.
    let cheapest = per_call.iter().copied().fold(f64::INFINITY, f64::min);
    let dearest = per_call.iter().copied().fold(0.0, f64::max);
    let split = (cheapest.max(1.0) * dearest).sqrt();
    let unprobed = median(per_call.iter().copied().filter(|&ns| ns < split).collect());
    let probed_batches: Vec<f64> = per_call.iter().copied().filter(|&ns| ns >= split).collect();
    assert!(probed_batches.len() >= 10, "{per_call:?}");
    let truth = median(probed_batches) - unprobed;
    let error = (measured - truth).abs() / truth;
    eprintln!("in situ {measured:.0} ns/hit ({low:.0}..{high:.0}), the fixture's own {truth:.0}");
    assert!(
        error <= 0.25,
        "in situ {measured:.0} ns/hit, the fixture's own {truth:.0} ns/hit ({:.0}% off): {in_situ}",
        error * 100.0
    );
    let _ = std::fs::remove_file(&json);
}

/// `--in-situ` through a process tree (`-F`): the forker fixture's 5 processes (a parent,
/// 2 workers, a child of each), each calling `work_unit` 800 times a second in 5 ms
/// bursts (a pre-fork server's open-loop load, 4,000 hits/s in all), their CPU summed
/// in each window. The cost per hit measured so must agree with the calibrated gap
/// estimate within the bounds cost_estimate's sparse case holds one process to (the
/// estimate within the 95% interval widened 2x either way), and every window must cover
/// the 5 processes, none dropped (none exits).
#[test]
#[ignore = "needs root and the fixtures"]
fn in_situ_sums_a_process_tree() {
    let _turn = turn(module_path!());
    let cache = std::env::temp_dir().join(format!("probetop-insitu-tree-{}", std::process::id()));
    calibrate_default(&cache);
    let target = started(
        &fixture("c/forker"),
        &[
            "--early", "1", "--late", "1", "--grand", "1", "--rate", "800",
        ],
    );
    target.signal(libc::SIGUSR1);
    // Patience, not a timed assertion: the workers fork their children at once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while crate::forks::tree_of(target.pid()).len() < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "the tree did not grow to 5"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let json = export_path("in-situ-tree.json");
    let mut cmd = probetop();
    cmd.args([
        "--pid",
        &target.pid().to_string(),
        "-F",
        "--no-tui",
        "--duration",
        "12",
        "--in-situ",
        "--in-situ-window",
        "0.5",
        "--work",
        "none",
        "--assume",
        "clock",
        "-e",
        "uprobe:work_unit",
        "--export",
    ])
    .arg(&json)
    .env("XDG_CACHE_HOME", &cache);
    let mut probetop = Running::spawn(cmd);
    assert!(probetop.wait().success(), "{:?}", probetop.err().rest());
    let stderr = probetop.err().rest();
    assert!(
        stderr
            .iter()
            .any(|l| l.contains("in situ (") && l.contains(", 5 processes")),
        "no in-situ line over 5 processes: {stderr:?}"
    );
    let report = read_export(&json);
    let in_situ = &report["cost"]["in_situ"];
    assert_eq!(in_situ["processes"], 5, "{in_situ}");
    assert_eq!(in_situ["processes_min"], 5, "{in_situ}");
    assert_eq!(in_situ["dropped_pairs"], 0, "{in_situ}");
    assert!(in_situ["pairs"].as_u64().unwrap_or(0) >= 4, "{in_situ}");
    // Every process's hits counted, each under its own pid.
    let pids = report["probes"][0]["pids"]
        .as_object()
        .unwrap_or_else(|| panic!("no pids split: {}", report["probes"][0]));
    assert_eq!(pids.len(), 5, "{pids:?}");
    let rate = in_situ["hits_per_second"]
        .as_f64()
        .expect("hits_per_second");
    assert!(
        (2000.0..=6000.0).contains(&rate),
        "{rate} hits/s: {in_situ}"
    );
    let estimate = report["cost"]["estimated_per_hit_ns"]
        .as_f64()
        .unwrap_or_else(|| panic!("no estimate: {}", report["cost"]));
    let per_hit = &in_situ["per_hit_ns"];
    let (Some(mean), Some(low), Some(high)) = (
        per_hit["mean"].as_f64(),
        per_hit["low"].as_f64(),
        per_hit["high"].as_f64(),
    ) else {
        panic!("no in-situ interval: {in_situ}");
    };
    eprintln!(
        "process tree: gap estimate {estimate:.0} ns/hit, in situ {mean:.0} ({low:.0}..{high:.0}), verdict {}, {} pairs",
        in_situ["verdict"], in_situ["pairs"]
    );
    assert!(
        estimate >= 0.5 * low && estimate <= 2.0 * high,
        "gap estimate {estimate:.0} ns/hit against {mean:.0} ({low:.0}..{high:.0}) in situ over the tree; by loop {}, the handler's clock {}",
        report["cost"]["estimates_per_hit_ns"],
        report["probes"][0]["handler_ns"]
    );
    target.signal(libc::SIGTERM);
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_dir_all(&cache);
}

/// The guard says once a run that the probes cost the target more than 5% (stderr),
/// however often the cost crosses the line. Under `--in-situ`, whose detached windows
/// take the last second's cost to nothing and back, it judges the measurement once it
/// has an answer, and says so (`measured in situ`). Under `--budget` it is not said at all: the
/// budget holds the cost under its own ceiling. On a copy of the fixture, whose own work
/// per call is less than the probes' hits on it on any machine (over 5% of its own CPU).
#[test]
#[ignore = "needs root and the fixtures"]
fn the_cost_warning_is_said_once_a_run_and_not_under_a_budget() {
    let _turn = turn(module_path!());
    let dir = std::env::temp_dir().join(format!("probetop-it-guard-{}", std::process::id()));
    let cache = calibrated_cache("guard");
    let run = |name: &str, extra: &[&str]| -> Vec<String> {
        let copy = workload_copy(&dir, name);
        let target = started(&copy, &["--forever", "--rate", "50000"]);
        let mut cmd = probetop();
        cmd.env("XDG_CACHE_HOME", &cache)
            .args(["--pid", &target.pid().to_string(), "--no-tui"])
            .args(["-e", "uprobe:work_unit", "-e", "uretprobe:work_unit"])
            .args(extra);
        let out = output_ok(&mut cmd, "probetop");
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.starts_with("probetop: warning: probes cost the target"))
            .map(str::to_string)
            .collect()
    };
    let warned = run(
        "guard-in-situ",
        &["--duration", "12", "--in-situ", "--in-situ-window", "1"],
    );
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].starts_with("probetop: warning: probes cost the target, measured in situ, ")
            && warned[0].contains("(over 5%)")
            && warned[0].contains("dearest: "),
        "{warned:?}"
    );
    let budgeted = run("guard-budget", &["--duration", "6", "--budget", "1%"]);
    assert!(budgeted.is_empty(), "{budgeted:?}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&cache);
}

/// `1234`, `50.0k`, `1.02M` as the summary table prints a rate.
fn count(cell: &str) -> f64 {
    let (number, scale) = match cell.chars().last() {
        Some('k') => (&cell[..cell.len() - 1], 1e3),
        Some('M') => (&cell[..cell.len() - 1], 1e6),
        _ => (cell, 1.0),
    };
    number
        .parse::<f64>()
        .unwrap_or_else(|e| panic!("{cell}: {e}"))
        * scale
}

/// The end of an `--in-situ` run leads with one answer: the number trusted, its
/// interval and why, the estimate named beside in situ; then one line for the other
/// number and one for the work, before the per-probe lines; no total over the run
/// competing with it, none after the table. The stdout summary and the JSON carry the
/// same answer, and the summary's HITS/S is over the time the probes were attached (in
/// situ's own hits a second, not the half of it a rate over the whole run reads).
#[test]
#[ignore = "needs root and the fixtures"]
fn the_end_of_an_in_situ_run_leads_with_one_answer() {
    let _turn = turn(module_path!());
    let dir = std::env::temp_dir().join(format!("probetop-it-answer-{}", std::process::id()));
    let cache = calibrated_cache("answer");
    let copy = workload_copy(&dir, "answer-in-situ");
    let target = started(&copy, &["--forever", "--rate", "50000"]);
    let json = export_path("in-situ-answer.json");
    let mut cmd = probetop();
    cmd.env("XDG_CACHE_HOME", &cache)
        .args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["--duration", "8", "--in-situ", "--in-situ-window", "0.5"])
        .args(["--work", "none", "-e", "uprobe:work_unit", "--export"])
        .arg(&json)
        // A probe that never fires (main was entered before the attach): it has no
        // price, and must not void the estimate of the probe that fired.
        .args(["-e", "uprobe:main"]);
    let out = output_ok(&mut cmd, "probetop --in-situ");
    let stderr: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_string)
        .collect();
    let stdout: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let report = read_export(&json);
    let answer = &report["headline"]["answer"];
    let text = answer["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{report}"));
    // The headline's number is the answer's.
    assert_eq!(answer["uses"], report["headline"]["method"], "{answer}");
    let verdict = report["cost"]["in_situ"]["verdict"].as_str().unwrap_or("");
    let why = answer["why"].as_str().unwrap_or("");
    assert!(
        report["cost"]["estimated_per_hit_ns"].as_f64().is_some(),
        "{report}"
    );
    let main = &report["probes"][1];
    assert_eq!(main["name"], "main", "{report}");
    assert_eq!(main["hits"], 0, "{main}");
    assert!(main["whole_cost_ns"].is_null(), "{main}");

    // One answer line, leading the end-of-run lines.
    let answers: Vec<usize> = (0..stderr.len())
        .filter(|&i| stderr[i].starts_with("probetop: the answer: "))
        .collect();
    assert_eq!(answers.len(), 1, "{stderr:#?}");
    let at = answers[0];
    assert_eq!(
        stderr[at],
        format!("probetop: the answer: the probes cost the target {text}")
    );
    if verdict == "measured" {
        // The probe that fired carries the whole measured cost (the silent one none).
        assert_eq!(
            report["probes"][0]["whole_cost_method"], "in-situ",
            "{report}"
        );
        // In situ trusted, with its interval, and the estimate beside it.
        assert!(
            why.starts_with("in-situ-") && why.ends_with("-with-estimate"),
            "{why}"
        );
        assert!(text.contains("measured in situ (95% CI "), "{text}");
        assert!(
            text.contains("a hit within ") || text.contains("the measured "),
            "{text}"
        );
        assert!(text.contains("the estimate, "), "{text}");
        assert!(
            stderr[at + 1].starts_with("probetop:   the estimate: "),
            "{stderr:#?}"
        );
    } else {
        assert_eq!(why, "in-situ-without-signal", "{answer}");
        assert!(text.contains("as in situ has no signal yet: "), "{text}");
        assert!(
            stderr[at + 1].starts_with("probetop:   in situ so far, not trusted: "),
            "{stderr:#?}"
        );
    }
    assert!(
        stderr[at + 2].starts_with("probetop:   work not metered (--work none): "),
        "{stderr:#?}"
    );
    assert!(
        stderr[at + 3].starts_with("  uprobe:work_unit "),
        "{stderr:#?}"
    );
    assert!(
        stderr[at + 3].ends_with(" of a CPU while attached [calibration]")
            || stderr[at + 3].contains(" of a CPU while attached;"),
        "{}",
        stderr[at + 3]
    );
    // Nothing before it competes: no estimate over the run, no bracket of loops; after
    // it the windows, without the numbers again.
    assert!(
        !stderr.iter().any(|l| l.contains("of a CPU over the run")
            || l.contains("per hit over every probe, by the calibration's loops")),
        "{stderr:#?}"
    );
    let details = stderr
        .iter()
        .find(|l| l.starts_with("probetop: in situ ("))
        .unwrap_or_else(|| panic!("{stderr:#?}"));
    assert!(!details.contains("95% CI"), "{details}");

    // The summary leads with the same answer; its rate is over the attached time.
    assert_eq!(
        stdout[0],
        format!("probes' cost to the target: {text}"),
        "{stdout:#?}"
    );
    let row: Vec<&str> = stdout
        .iter()
        .find(|l| l.starts_with("uprobe:work_unit "))
        .unwrap_or_else(|| panic!("{stdout:#?}"))
        .split_whitespace()
        .collect();
    let table_rate = count(row[4]);
    let in_situ_rate = report["cost"]["in_situ"]["hits_per_second"]
        .as_f64()
        .expect("hits_per_second");
    let hits = report["probes"][0]["hits"].as_f64().expect("hits");
    let over_run = hits / report["duration_s"].as_f64().expect("duration_s");
    assert!(
        (0.8..=1.25).contains(&(table_rate / in_situ_rate)),
        "HITS/S {table_rate} against in situ's {in_situ_rate} a second attached"
    );
    assert!(
        table_rate > 1.3 * over_run,
        "HITS/S {table_rate} reads as the rate over the whole run, {over_run}"
    );
    assert!(
        stdout
            .iter()
            .any(|l| l.starts_with("HITS/S and %CPU over the ")),
        "{stdout:#?}"
    );
    target.signal(libc::SIGTERM);
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&cache);
}
