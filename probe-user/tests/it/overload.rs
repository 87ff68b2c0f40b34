//! A probe hit from every CPU as fast as the kernel allows: probetop keeps up or counts
//! every lost hit, and its memory stays flat. Runs PROBETOP_SOAK_SECONDS per mode (8 by
//! default; `cargo xtask soak` runs it longer).

use std::time::{Duration, Instant};

use crate::common::*;

fn soak_seconds() -> f64 {
    std::env::var("PROBETOP_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8.0)
}

/// Resident memory of `pid`, KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn flood(mode: &str, extra: &[&str]) {
    let seconds = soak_seconds();
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let target = started(
        &fixture("c/threads"),
        &[
            "--threads",
            &cpus.to_string(),
            "--seconds",
            &seconds.to_string(),
        ],
    );
    let json = export_path(&format!("flood-{mode}.json"));
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "--export"])
        .arg(&json)
        .args(["--mode", mode, "-e", "uprobe:work_unit"])
        .args(extra);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    target.signal(libc::SIGUSR1);
    let started_at = Instant::now();
    // Memory once the flood is on, and again near its end.
    std::thread::sleep(Duration::from_secs_f64(seconds.min(2.0) / 2.0));
    let early = rss_kib(probetop.pid());
    let mut late = early;
    while started_at.elapsed() < Duration::from_secs_f64(seconds - 0.5) {
        std::thread::sleep(Duration::from_millis(250));
        late = late.max(rss_kib(probetop.pid()));
    }
    let done = target.out().wait_for("done calls=");
    let calls = field(&done, "calls") as u64;
    let status = probetop.wait();
    assert!(status.success(), "{mode}: {:?}", probetop.err().rest());
    let report: serde_json::Value = read_export(&json);
    let probe = probe(&report, "work_unit");
    let hits = probe["hits"].as_u64().expect("hits");
    let dropped = probe["dropped"].as_u64().expect("dropped");
    eprintln!(
        "{mode}: {calls} calls in {seconds} s on {cpus} CPUs, {dropped} dropped, RSS {early} -> {late} KiB"
    );
    // Every hit is accounted for: recorded, or counted as dropped.
    assert_eq!(hits, calls, "{mode}: hits vs the fixture's own count");
    assert!(
        late <= early + 16 * 1024,
        "{mode}: memory grew from {early} KiB to {late} KiB"
    );
    if mode == "kernel" {
        assert_eq!(dropped, 0, "in-kernel aggregation has nothing to drop");
    }
    if extra.contains(&"--ring-kib") {
        assert!(
            dropped > 0,
            "a 4 KiB ring buffer must overflow under a flood"
        );
        let recorded = probe["handler_ns"]["count"].as_u64().expect("count");
        assert_eq!(recorded + dropped, hits, "recorded + dropped = hits");
    }
}

#[test]
#[ignore = "needs root and the fixtures"]
fn ring_buffer_mode_counts_every_hit_even_when_full() {
    let _turn = turn(module_path!());
    // A deliberately small ring buffer, so it can overflow.
    flood("ring", &["--ring-mib", "1"]);
}

#[test]
#[ignore = "needs root and the fixtures"]
fn drops_from_an_overflowing_ring_buffer_are_counted_exactly() {
    let _turn = turn(module_path!());
    flood("ring", &["--ring-kib", "4"]);
}

#[test]
#[ignore = "needs root and the fixtures"]
fn in_kernel_aggregation_keeps_up() {
    let _turn = turn(module_path!());
    flood("kernel", &[]);
}

/// A run without `--mode` is in auto mode, which weighs the run whole: three probes on
/// every call of the workload, each under `--auto-above` (10^9 hits/s, more than any
/// probe can fire), overrun a 4 KiB ring buffer together. Auto mode moves them into the
/// kernel, busiest first, as drops show, says each move once, and the calls made after
/// the moves drop nothing. Every call is counted, exactly, by every probe.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_default_run_moves_probes_that_overrun_the_ring_together() {
    let _turn = turn(module_path!());
    const SPECS: [&str; 3] = ["uprobe:work_unit", "uprobe:leaf_ret", "usdt:workload:unit"];
    // A private copy: no other test's probe on this file counts its calls.
    let dir = std::env::temp_dir().join(format!("probetop-auto-{}", std::process::id()));
    let copy = workload_copy(&dir, "workload");
    let target = started(&copy, &["--wait-signal", "--forever", "--batch", "100000"]);
    let json = export_path("auto-overrun.json");
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "--export"])
        .arg(&json)
        .args(["--auto-above", "1e9", "--ring-kib", "4"]);
    for spec in SPECS {
        cmd.args(["-e", spec]);
    }
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached 3 probes");
    target.signal(libc::SIGUSR1);
    // Each move is said as it happens: wait until every probe is in the kernel.
    let mut moved: Vec<String> = Vec::new();
    while moved.len() < SPECS.len() {
        let line = probetop.err().wait_for("aggregating it in the kernel");
        let spec = SPECS
            .iter()
            .find(|s| line.contains(&format!("{s} fires")))
            .unwrap_or_else(|| panic!("a move naming no probe: {line}"));
        assert!(line.contains("dropped"), "moved for its drops: {line}");
        assert!(!moved.contains(&spec.to_string()), "said twice: {line}");
        moved.push(spec.to_string());
    }
    // Calls after every move: two more batches of the workload.
    target.out().skip_buffered();
    for _ in 0..2 {
        target.out().wait_for("batch calls=");
    }
    target.signal(libc::SIGTERM);
    let done = target.out().wait_for("done total=");
    let calls = field(&done, "total") as u64;
    let status = probetop.wait();
    let stderr = probetop.err().rest();
    assert!(status.success(), "{stderr:?}");
    assert!(
        !stderr
            .iter()
            .any(|l| l.contains("aggregating it in the kernel")),
        "a move said again at the end: {stderr:#?}"
    );
    let report = read_export(&json);
    let rows: Vec<&serde_json::Value> = SPECS
        .iter()
        .map(|spec| {
            report["probes"]
                .as_array()
                .expect("probes")
                .iter()
                .find(|p| p["spec"] == *spec)
                .unwrap_or_else(|| panic!("no {spec} in {report}"))
        })
        .collect();
    let dropped: u64 = rows
        .iter()
        .map(|p| p["dropped"].as_u64().expect("dropped"))
        .sum();
    assert!(dropped > 0, "a 4 KiB ring buffer must overflow: {report}");
    let mut last_move_dropped = 0;
    for (spec, p) in SPECS.iter().zip(&rows) {
        // Exact: streamed, dropped, then counted in the kernel.
        assert_eq!(p["hits"], calls, "{spec}: {p}");
        assert_eq!(p["mode"], "kernel", "{spec}: {p}");
        let moved = &p["moved_in_kernel"];
        assert_eq!(moved["reason"], "records-dropped", "{spec}: {p}");
        // Each under the limit: the run's sum made the move.
        let rate = moved["hits_per_second"].as_f64().expect("rate");
        assert!(rate > 0.0 && rate < 1e9, "{spec}: {p}");
        last_move_dropped =
            last_move_dropped.max(moved["run_dropped"].as_u64().expect("run_dropped"));
        // The histogram goes on: the streamed hits and the kernel's timed ones.
        let timed = p["handler_ns"]["count"].as_u64().expect("count");
        assert!(timed > 0 && timed <= calls, "{spec}: {p}");
    }
    // The drops stopped with the moves: none after the last.
    assert_eq!(dropped, last_move_dropped, "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
