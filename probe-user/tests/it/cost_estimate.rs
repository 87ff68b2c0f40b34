//! The whole-cost estimate per hit against the truth: the fixture's own CPU time per
//! call with and without the probe. The estimate must lie within 25% of it.

use std::time::{Duration, Instant};

use crate::common::*;

/// CPU ns per call of every full batch the fixture reports until `until` says stop.
fn batches(target: &Running, mut until: impl FnMut() -> bool) -> Vec<f64> {
    let mut out = Vec::new();
    while !until() {
        let Some(line) = target.out().next() else {
            break;
        };
        if line.starts_with("batch") {
            out.push(field(&line, "ns_per_call"));
        }
    }
    out
}

fn median(mut values: Vec<f64>) -> f64 {
    assert!(!values.is_empty());
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[test]
#[ignore = "needs root and the fixtures"]
fn whole_cost_estimate_matches_the_fixtures_own_cost() {
    let _turn = turn(module_path!());
    let cache = std::env::temp_dir().join(format!("probetop-estimate-{}", std::process::id()));
    calibrate_default(&cache);

    // The in-kernel mode times one hit in 64 by default and prices the rest as counted
    // only: the estimate must hold for that mix too.
    let mut hot_ring = 0.0;
    for mode in ["ring", "kernel"] {
        let estimate = estimate_within_a_quarter(&cache, mode);
        if mode == "ring" {
            hot_ring = estimate;
        }
    }
    cold_when_asked(&cache, hot_ring);
    sparse_hits_priced_by_their_gap(&cache, hot_ring);
    in_kernel_hits_priced_by_the_clock_streamed_first(&cache);
    a_run_within_the_clock_phase_says_so(&cache);
    let _ = std::fs::remove_dir_all(&cache);
}

/// Runs probetop to its end, which must be a success; its stderr.
fn run_to_end(cmd: std::process::Command) -> String {
    let mut probetop = Running::spawn(cmd);
    assert!(probetop.wait().success(), "{:?}", probetop.err().rest());
    probetop.err().rest().join("\n")
}

/// probetop on the fixture's `work_unit` with `args`, this test's calibration and an
/// export to `json`.
fn on_work_unit(
    target: &Running,
    cache: &std::path::Path,
    json: &std::path::Path,
    args: &[&str],
) -> std::process::Command {
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(args)
        .args(["-e", "uprobe:work_unit", "--export"])
        .arg(json)
        .env("XDG_CACHE_HOME", cache);
    cmd
}

/// A hit every 250 us, the CPU idle between (a server at a low rate): with `--assume
/// gap` (retired, taken as `clock`, which says so) each hit is priced on the work curve
/// at its handler's clock or the gap curve where dearer, and the estimate must agree with what in
/// situ measures on the fixture in the same run (its whole CPU, probes attached and detached), within its 95%
/// interval widened 2x either way: both move with the machine's load, and at ~1% of a CPU
/// a few seconds of in situ are noisy. The fixture's own per-call bracket is no truth
/// here: a cold hit also slows what runs after it (the sleep, the wakeup), which the
/// bracket leaves out and the calibration's gap loop and in situ count.
fn sparse_hits_priced_by_their_gap(cache: &std::path::Path, hot_ring: f64) {
    let target = workload(&["--forever", "--rate", "4000", "--batch", "1"]);
    let json = export_path("estimate-gap.json");
    let cmd = on_work_unit(
        &target,
        cache,
        &json,
        &[
            "--duration",
            "12",
            "--in-situ",
            "--in-situ-window",
            "0.5",
            "--work",
            "none",
            "--assume",
            "gap",
        ],
    );
    let err = run_to_end(cmd);
    assert!(
        err.contains("--assume gap is retired: pricing as --assume clock"),
        "{err}"
    );
    let report: serde_json::Value = read_export(&json);
    let probe = &report["probes"][0];
    assert_eq!(probe["whole_cost_assumes"], "clock", "{probe}");
    // In ring mode, with a calibration that keeps the handler's clock on its work curve,
    // the work curve is read at that clock, never at the busy gaps.
    let reading = probe["whole_cost_reading"]
        .as_str()
        .expect("whole_cost_reading");
    assert!(matches!(reading, "gap" | "handler-clock"), "{probe}");
    // Ring mode counts the gap before every hit but each CPU's first.
    let hits = probe["hits"].as_u64().expect("hits");
    let samples = probe["gaps"]["samples"].as_u64().expect("gap samples");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert!(
        samples <= hits && samples + cpus >= hits,
        "{samples} gaps for {hits} hits"
    );
    let median_us = probe["gaps"]["median_us"].as_f64().expect("median");
    assert!((100.0..=3000.0).contains(&median_us), "{}", probe["gaps"]);
    // No program times the machine's idle CPUs any more: no gap has a busy part.
    assert!(probe.get("busy_gaps").is_none(), "{probe}");
    // The estimate itself: once in situ gives a number, a probe's `whole_cost_ns` is
    // the in-situ one, which would compare in situ with itself.
    let estimate = report["cost"]["estimated_per_hit_ns"]
        .as_f64()
        .unwrap_or_else(|| panic!("no estimate: {}", report["cost"]));
    let per_hit = &report["cost"]["in_situ"]["per_hit_ns"];
    let (mean, low, high) = (
        per_hit["mean"].as_f64(),
        per_hit["low"].as_f64(),
        per_hit["high"].as_f64(),
    );
    let (Some(mean), Some(low), Some(high)) = (mean, low, high) else {
        panic!("no in-situ interval: {}", report["cost"]);
    };
    eprintln!(
        "sparse hits: gap estimate {estimate:.0} ns/hit, in situ {mean:.0} ({low:.0}..{high:.0}), hot {hot_ring:.0}; gaps {}",
        probe["gaps"]
    );
    assert!(
        estimate >= 0.5 * low && estimate <= 2.0 * high,
        "gap estimate {estimate:.0} ns/hit against {mean:.0} ({low:.0}..{high:.0}) in situ"
    );
    let _ = std::fs::remove_file(&json);
}

/// `--mode kernel` ending before its probe left the clock phase: the export says ring,
/// as the probe streamed throughout, and stderr says why and what to do.
fn a_run_within_the_clock_phase_says_so(cache: &std::path::Path) {
    let target = workload(&["--forever", "--rate", "4000"]);
    let json = export_path("estimate-within-clock-phase.json");
    let cmd = on_work_unit(
        &target,
        cache,
        &json,
        &["--mode=kernel", "--clock-seconds=30", "--duration=1"],
    );
    let stderr = run_to_end(cmd);
    assert!(
        stderr.contains("the run ended within --mode kernel's clock phase (--clock-seconds 30): 1 of 1 probes streamed every hit"),
        "{stderr}"
    );
    let report: serde_json::Value = read_export(&json);
    assert_eq!(report["probes"][0]["mode"], "ring", "{report}");
    let _ = std::fs::remove_file(&json);
}

/// `--mode kernel --assume clock` streams every hit for `--clock-seconds` first, then
/// counts in the kernel: no hit lost or counted twice across the switch, the streamed
/// hits' handler clock kept apart from the in-kernel handler's times, and the
/// in-kernel hits priced by it.
fn in_kernel_hits_priced_by_the_clock_streamed_first(cache: &std::path::Path) {
    const CALLS: u64 = 12_000;
    // 3 s at 4000 calls/s: one streamed, two in the kernel.
    let target = workload(&[
        "--calls",
        &CALLS.to_string(),
        "--rate",
        "4000",
        "--wait-signal",
    ]);
    let json = export_path("estimate-clock-phase.json");
    let cmd = on_work_unit(
        &target,
        cache,
        &json,
        &[
            "--mode",
            "kernel",
            "--assume",
            "clock",
            "--clock-seconds",
            "1",
        ],
    );
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    probetop
        .err()
        .wait_for("streaming every hit for the first 1.0 s");
    target.signal(libc::SIGUSR1);
    assert!(probetop.wait().success(), "{:?}", probetop.err().rest());
    let report: serde_json::Value = read_export(&json);
    let probe = &report["probes"][0];
    assert_eq!(probe["hits"], CALLS, "{probe}");
    assert_eq!(probe["mode"], "kernel", "{probe}");
    let streamed = probe["streamed_clock_ns"]["count"]
        .as_u64()
        .unwrap_or_else(|| panic!("no streamed clock: {probe}"));
    let timed = probe["handler_ns"]["count"].as_u64().expect("handler_ns");
    // About a third of the hits streamed, and one in 64 of the rest timed in the kernel.
    assert!(
        (CALLS / 10..CALLS * 2 / 3).contains(&streamed),
        "{streamed} of {CALLS} hits streamed"
    );
    assert!(
        timed > 0 && timed < (CALLS - streamed) / 8,
        "{timed} in-kernel hits timed of {}",
        CALLS - streamed
    );
    assert_eq!(probe["whole_cost_assumes"], "clock", "{probe}");
    let reading = probe["whole_cost_reading"]
        .as_str()
        .expect("whole_cost_reading");
    assert!(matches!(reading, "gap" | "streamed-clock"), "{probe}");
    let _ = std::fs::remove_file(&json);

    // A hot probe (unpaced, the reason for `--mode kernel`) leaves the phase once it
    // has 5,000 clocked hits, long before its 3 s: run for 2 s, most hits are counted
    // in the kernel, one in 64 of them timed.
    let target = workload(&["--forever", "--batch", "100000"]);
    let json = export_path("estimate-clock-phase-hot.json");
    let cmd = on_work_unit(
        &target,
        cache,
        &json,
        &["--mode", "kernel", "--assume", "clock", "--duration", "2"],
    );
    run_to_end(cmd);
    let report: serde_json::Value = read_export(&json);
    let probe = &report["probes"][0];
    let hits = probe["hits"].as_u64().expect("hits");
    let streamed = probe["streamed_clock_ns"]["count"]
        .as_u64()
        .unwrap_or_else(|| panic!("no streamed clock: {probe}"));
    let timed = probe["handler_ns"]["count"].as_u64().expect("handler_ns");
    assert!(
        streamed >= 5_000 && streamed < hits / 4,
        "{streamed} of {hits} hits streamed"
    );
    assert!(
        timed > 0 && timed < (hits - streamed) / 8,
        "{timed} in-kernel hits timed of {}",
        hits - streamed
    );
    // A tight loop: the clock reads it hot, as the gap does.
    assert_eq!(report["cost"]["assumption"]["assumes"], "clock", "{report}");
    let _ = std::fs::remove_file(&json);

    // In situ leaves the phase out, its hits with its time: the ON windows' hit rate is
    // the fixture's open-loop rate, not inflated by the phase's hits. The probe leaves
    // the phase after 5,000 hits (a quarter of a second here), and the windows start
    // then, not when the 3 s phase would end.
    const RATE: f64 = 20_000.0;
    let target = workload(&["--forever", "--batch", "5000", "--rate", "20000"]);
    let json = export_path("estimate-clock-phase-insitu.json");
    let cmd = on_work_unit(
        &target,
        cache,
        &json,
        &[
            "--mode",
            "kernel",
            "--assume",
            "clock",
            "--clock-seconds",
            "3",
            "--in-situ",
            "--in-situ-window",
            "0.5",
            "--work",
            "none",
            "--duration",
            "6",
        ],
    );
    let stderr = run_to_end(cmd);
    assert!(stderr.contains("for the first 3.0 s"), "{stderr}");
    let report: serde_json::Value = read_export(&json);
    let in_situ = &report["cost"]["in_situ"];
    let rate = in_situ["hits_per_second"]
        .as_f64()
        .expect("hits_per_second");
    assert!(
        (RATE * 0.8..RATE * 1.2).contains(&rate),
        "in situ counted {rate:.0} hits/s in its ON windows at a rate of {RATE}: {in_situ}"
    );
    // Measured from about half a second in, not from 3.3 s: most of the 6 s counted.
    let counted = in_situ["seconds_on"].as_f64().unwrap_or(0.0)
        + in_situ["seconds_off"].as_f64().unwrap_or(0.0);
    assert!(
        counted > 4.0,
        "in situ counted {counted:.1} s of a 6 s run with a probe out of the phase at once: {in_situ}"
    );
    let _ = std::fs::remove_file(&json);
}

/// `--assume cold` prices the same tight loop with the cold loop's rows: dearer than
/// the hot estimate (the fixture's own cost is the hot one; this is not checked
/// against it).
fn cold_when_asked(cache: &std::path::Path, hot_ring: f64) {
    let target = workload(&["--forever", "--batch", "100000"]);
    let json = export_path("estimate-cold.json");
    let cmd = on_work_unit(
        &target,
        cache,
        &json,
        &["--duration", "2", "--assume", "cold"],
    );
    let stderr = run_to_end(cmd);
    assert!(
        stderr.contains("caches cold between hits: --assume cold"),
        "{stderr}"
    );
    let report: serde_json::Value = read_export(&json);
    let probe = &report["probes"][0];
    assert_eq!(probe["whole_cost_assumes"], "cold", "{probe}");
    assert_eq!(report["cost"]["assumption"]["assumes"], "cold", "{report}");
    let cold = probe["whole_cost_ns"].as_f64().expect("whole_cost_ns");
    assert!(
        cold >= 0.9 * hot_ring,
        "cold estimate {cold:.0} ns, hot {hot_ring:.0} ns"
    );
    eprintln!("ring: whole cost per hit assumed cold {cold:.0} ns, hot {hot_ring:.0} ns");
    // The same run priced under every loop: its cold end is the estimate it chose, its
    // hot end the tight loop's, on stderr as in the export.
    let bracket = &report["cost"]["estimates_per_hit_ns"];
    let cold_end = bracket["cold"].as_f64().expect("a cold end");
    assert!(
        (cold_end - cold).abs() <= 1e-6 * cold,
        "{bracket} vs {cold}"
    );
    let hot_end = bracket["hot"].as_f64().expect("a hot end");
    assert!(cold_end >= 0.9 * hot_end, "{bracket}");
    assert!(
        stderr.contains(&format!(
            "by the calibration's loops: hot {hot_end:.0} ns, cold {cold_end:.0} ns"
        )),
        "{stderr}"
    );
    let _ = std::fs::remove_file(&json);
}

/// Returns the estimate, ns per hit.
fn estimate_within_a_quarter(cache: &std::path::Path, mode: &str) -> f64 {
    // Unpaced, as the calibration's loops: ~0.4 ms per batch unprobed, ~0.1 s probed.
    let target = workload(&["--forever", "--batch", "100000"]);
    let start = Instant::now();
    target.out().skip_buffered();
    let unprobed = median(batches(&target, || {
        start.elapsed() > Duration::from_secs(1)
    }));

    let json = export_path(&format!("estimate-{mode}.json"));
    let cmd = on_work_unit(&target, cache, &json, &["--duration", "4", "--mode", mode]);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    // Lines written before the probe went live may still be in the pipe: wait for the
    // first batch that was probed (a probe hit costs hundreds of times a call), and
    // skip it too, as it was probed only in part.
    while let Some(line) = target.out().next() {
        if line.starts_with("batch") && field(&line, "ns_per_call") > 50.0 * unprobed.max(1.0) {
            break;
        }
    }
    let attached_for = Instant::now();
    let probed = batches(&target, || attached_for.elapsed() > Duration::from_secs(3));
    assert!(probetop.wait().success(), "{:?}", probetop.err().rest());
    assert!(
        probed.len() >= 5,
        "only {} probed batches: {probed:?}",
        probed.len()
    );
    let probed_per_call = median(probed.clone());
    let measured = probed_per_call - unprobed;

    let report: serde_json::Value = read_export(&json);
    let probe = &report["probes"][0];
    assert_eq!(probe["cost_class"], "emulated-push", "{probe}");
    // A small program hitting its probe back to back: auto prices it hot, and the gap
    // before a hit (from one handler's clock to the next on its CPU) is one probed call
    // of the loop, the hit included, as the fixture measured it in this run: ~1 us where
    // a hit costs ~1 us, ~2 us where it costs ~1.8 us. The median is reported as its
    // power-of-two bucket's middle, so the bucket must hold a value within half of the
    // probed call either way (the in-kernel mode's drawn hit does a little more than the
    // rest; the gap is wall time, the call the thread's CPU time).
    assert_eq!(probe["whole_cost_assumes"], "hot", "{probe}");
    let gap_median_ns = probe["gaps"]["median_us"].as_f64().expect("gap median") * 1e3;
    let (bucket_low, bucket_high) = if gap_median_ns == 0.0 {
        (0.0, 1024.0)
    } else {
        (
            gap_median_ns / std::f64::consts::SQRT_2,
            gap_median_ns * std::f64::consts::SQRT_2,
        )
    };
    assert!(
        bucket_low <= probed_per_call * 1.5 && bucket_high >= probed_per_call / 1.5,
        "{mode}: gap median {gap_median_ns:.0} ns (bucket {bucket_low:.0}..{bucket_high:.0}) for a probed call of {probed_per_call:.0} ns: {}",
        probe["gaps"]
    );
    let assumption = &report["cost"]["assumption"];
    assert_eq!(assumption["assumes"], "hot", "{assumption}");
    assert!(
        assumption["why"]
            .as_str()
            .is_some_and(|w| w.starts_with("auto: a hit every")),
        "{assumption}"
    );
    eprintln!(
        "{mode}: gap median {gap_median_ns:.0} ns (its bucket's middle) for a probed call of {probed_per_call:.0} ns"
    );
    let estimate = probe["whole_cost_ns"]
        .as_f64()
        .unwrap_or_else(|| panic!("no whole_cost_ns: {probe}"));
    let share = probe["cpu_share"].as_f64().expect("cpu_share");
    // One probed thread that does little but hit the probe: its share is just under one
    // CPU, and the estimate may be off by the tolerance below (1.07 was seen).
    assert!(share > 0.0 && share <= 1.25, "{share}");
    let error = (estimate - measured).abs() / measured;
    eprintln!(
        "{mode}: whole cost per hit: estimated {estimate:.0} ns ({}), measured {measured:.0} ns",
        probe["whole_cost_method"]
    );
    assert!(
        error <= 0.25,
        "{mode}: estimate {estimate:.0} ns/hit, measured {measured:.0} ns/hit ({:.0}% off); probed batches {probed:?}, unprobed {unprobed:.1}, method {}",
        error * 100.0,
        probe["whole_cost_method"]
    );
    let _ = std::fs::remove_file(&json);
    estimate
}
