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
