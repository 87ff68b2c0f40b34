//! `--budget`: the flood fixture's own CPU per unit of work with probetop duty cycling
//! its probe and without it, and its scaled hits against the calls it made.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::*;

/// The tests of this module one at a time: the flood's CPU per unit is measured, and
/// another test's target or probetop beside it would move it.
static ALONE: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The flood's work: 2,000 units a second, each a loop, 20 calls of `flood_hit` and one
/// of `flood_tick` (open loop: the probes slow no call out of the run). Unprobed a unit
/// is tens of us; a hit costs ~0.6-1 us, so the probe alone would cost the flood a third
/// or more of its CPU, while the least duty `--budget` uses (an attached part of 40 ms a
/// period of a quarter window: 3.2% at a 5 s window) keeps it near 1.3%, under the 2%
/// asked.
const FLOOD: &[&str] = &["--units", "10000", "--rate", "2000", "--calls", "20"];
const UNITS: f64 = 10_000.0;
/// Unprobed and budgeted runs, each this many times.
const ROUNDS: usize = 5;

/// `done ...` of a flood run, once it exits.
fn done_line(target: &Running) -> String {
    target.out().wait_for("done")
}

fn flood(args: &[&str]) -> Running {
    started(&fixture("c/flood"), args)
}

/// The flood's CPU per unit inside its units (its pacing sleeps left out). The sleeps'
/// wakeups cost the flood 13-15 us of CPU a unit on a 2-vCPU guest (2026-11-27, load 10:
/// 32-37 us a unit in all against 19.0-19.8 us inside the units), and that part moves
/// with whatever else the guest runs: with an idle probetop beside it, one run took 3.7
/// us more a unit, another none; on an idle host the budgeted runs' whole CPU a unit came
/// out 7% *under* the unprobed runs'. Timer programming and wakeups are VM exits whose
/// cost depends on the other vCPU's state, not on the probes. Inside the units the same
/// runs spread 1.7-3%; that is where the probes' traps land.
fn per_unit(line: &str) -> f64 {
    field(line, "work_ns_per_unit")
}

/// An unprobed run: the flood's CPU per unit inside the units, and its whole CPU per
/// unit (the pacing's sleeps and wakeups too: what `--budget` takes its share of).
fn unprobed(args: &[&str]) -> (f64, f64) {
    let mut target = flood(args);
    target.signal(libc::SIGUSR1);
    let line = done_line(&target);
    assert!(target.wait().success());
    (per_unit(&line), field(&line, "ns_per_unit"))
}

/// One budgeted run of the flood with `args`, the probes `specs`, in 5 s budget windows:
/// the fixture's `done` line and probetop's export.
fn budgeted(
    cache: &std::path::Path,
    budget: &str,
    args: &[&str],
    specs: &[&str],
) -> (String, serde_json::Value) {
    budgeted_over(cache, budget, "5", args, specs)
}

/// `budgeted` with budget windows of `window` seconds.
fn budgeted_over(
    cache: &std::path::Path,
    budget: &str,
    window: &str,
    args: &[&str],
    specs: &[&str],
) -> (String, serde_json::Value) {
    let mut target = flood(args);
    let json = export_path(&format!("budget-{window}s.json"));
    let mut cmd = probetop();
    cmd.env("XDG_CACHE_HOME", cache)
        .args([
            "--pid",
            &target.pid().to_string(),
            "--no-tui",
            "--budget",
            budget,
            "--budget-window",
            window,
        ])
        .args(specs.iter().flat_map(|s| ["-e", s]))
        .arg("--export")
        .arg(&json);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    target.signal(libc::SIGUSR1);
    let line = done_line(&target);
    assert!(target.wait().success());
    // The target's exit ends the run.
    assert!(probetop.wait().success(), "{:?}", probetop.err().rest());
    let report = read_export(&json);
    let _ = std::fs::remove_file(&json);
    (line, report)
}

/// Unprobed and budgeted runs of the flood, alternating in the order off-on, on-off, ...
/// so that a load on the machine that comes and goes, or drifts, falls on both sides
/// alike. Returns the flood's CPU per unit unprobed and budgeted (medians), the spread of
/// the unprobed runs, and each budgeted run's `done` line and export.
struct Compared {
    off: f64,
    on: f64,
    /// How far the middle unprobed runs spread (max over min, less 1): the host's own
    /// noise on this measure. The lowest and the highest are left out: one run that a
    /// burst of load hit, or that ran while the host's CPU was faster, says nothing of
    /// the probes.
    spread: f64,
    /// The unprobed flood's whole CPU per unit (median): the budget is a share of the
    /// target's CPU time, sleeps and wakeups of its pacing included, while the probes'
    /// cost is read inside the units, where the measure is steadiest.
    whole: f64,
    runs: Vec<(String, serde_json::Value)>,
}

fn compare(
    name: &str,
    args: &[&str],
    mut on_run: impl FnMut() -> (String, serde_json::Value),
) -> Compared {
    let (mut off, mut on, mut runs, mut whole) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let budgeted_first = round % 2 == 1;
        if budgeted_first {
            let run = on_run();
            on.push(per_unit(&run.0));
            runs.push(run);
        }
        let (inside, all) = unprobed(args);
        off.push(inside);
        whole.push(all);
        if !budgeted_first {
            let run = on_run();
            on.push(per_unit(&run.0));
            runs.push(run);
        }
    }
    eprintln!(
        "{name}: flood CPU ns a unit (inside the units) unprobed {off:.0?}, budgeted {on:.0?}"
    );
    let mut sorted = off.clone();
    sorted.sort_by(f64::total_cmp);
    let middle = &sorted[1..sorted.len() - 1];
    let spread = middle[middle.len() - 1] / middle[0] - 1.0;
    let (off, on, whole) = (median(off), median(on), median(whole));
    eprintln!(
        "{name}: {off:.0} ns/unit unprobed, {on:.0} budgeted ({:+.2}% of the target's CPU, {whole:.0} ns a unit in all); the middle unprobed runs spread {:.1}%",
        (on - off) / whole * 100.0,
        spread * 100.0
    );
    Compared {
        off,
        on,
        spread,
        whole,
        runs,
    }
}

/// The bar: a budget of 2% adds at most 2.5% to the flood's CPU per unit of work,
/// measured by the flood itself. It is judged where the middle unprobed runs agree within
/// 3% (at load 13 on 2 CPUs they did, within 0.8-2.4%); where a burst of load spreads
/// them more, duty cycling must still take most of the cost away: at most `loaded` (a
/// quarter of the unbudgeted cost).
fn assert_held(name: &str, c: &Compared, loaded: f64) {
    // What the probes added, as a share of the target's CPU (the budget's measure).
    let extra = (c.on - c.off) / c.whole;
    let bound = if c.spread <= 0.03 {
        0.025
    } else {
        eprintln!(
            "{name}: the middle unprobed runs spread {:.1}%: the 2.5% bar is not judged on this host",
            c.spread * 100.0
        );
        loaded
    };
    assert!(
        extra <= bound,
        "{name}: --budget 2% added {:.2}% to the flood's CPU ({:.0} -> {:.0} ns a unit inside the units, {:.0} in all), over {:.2}%",
        extra * 100.0,
        c.off,
        c.on,
        c.whole,
        bound * 100.0,
    );
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_budget_holds_a_flood_under_it_and_its_scaled_hits_hold_the_calls() {
    let _turn = turn(module_path!());
    let _alone = alone();
    let cache = std::env::temp_dir().join(format!("probetop-budget-{}", std::process::id()));
    calibrate_default(&cache);
    let c = compare("flood", FLOOD, || {
        budgeted(&cache, "2%", FLOOD, &["uprobe:flood_hit"])
    });
    let mut unbudgeted_shares = Vec::new();
    for (line, report) in &c.runs {
        let calls = field(line, "calls");
        let probe = probe(report, "flood_hit");
        let budget = &report["budget"];
        eprintln!("{budget}\n{probe}");
        // Unbudgeted, the probe would cost the flood well over 10% of its CPU (a fifth
        // at least): the estimate per hit times every call, over the unprobed CPU of the
        // units.
        let per_hit = probe["cost"]["whole_cost_ns"]
            .as_f64()
            .or_else(|| probe["whole_cost_ns"].as_f64())
            .expect("an estimate per hit");
        let unbudgeted = per_hit * calls / (c.whole * UNITS);
        assert!(unbudgeted > 0.2, "{probe}");
        unbudgeted_shares.push(unbudgeted);
        assert_eq!(budget["asked"], 0.02, "{budget}");
        assert!(
            budget["duty"].as_f64().is_some_and(|d| d > 0.0 && d < 0.2),
            "{budget}"
        );
        assert!(budget["used"]["mean"].as_f64().is_some(), "{budget}");
        // Counted while attached, scaled to the whole run, the truth within its interval.
        let counted = probe["hits_counted"].as_u64().expect("hits_counted");
        assert!(counted > 0 && (counted as f64) < calls * 0.5, "{probe}");
        let (low, high) = (
            probe["hits_interval"]["low"].as_f64().expect("low"),
            probe["hits_interval"]["high"].as_f64().expect("high"),
        );
        let hits = probe["hits"].as_f64().expect("hits");
        assert!(low <= hits && hits <= high, "{probe}");
        assert!(
            low <= calls && calls <= high,
            "{calls} calls outside {low}..{high}: {probe}"
        );
    }
    // With the probe costing the flood a fifth or more of its CPU unbudgeted.
    assert_held("flood", &c, median(unbudgeted_shares) / 4.0);
    let _ = std::fs::remove_dir_all(&cache);
}

/// Shedding: a single-stepped probe (`flood_tick+1`, once a unit) beside an emulated one
/// (`flood_hit`, five times a unit). Unbudgeted both would cost the flood a third of its
/// CPU, the single-stepped one most of that. Under `--budget 2%` both go to in-kernel
/// aggregation, then the dear one is detached, said once each (stderr and
/// `budget.actions`), and the cheap one is duty cycled longer than the two together
/// could be; the budget holds, and each probe's scaled hits hold its calls over the
/// time it was cycled.
#[test]
#[ignore = "needs root and the fixtures"]
fn shedding_detaches_the_dearest_probe_per_hit_and_the_budget_holds() {
    const ARGS: &[&str] = &["--units", "10000", "--rate", "2000", "--calls", "5"];
    let _turn = turn(module_path!());
    let _alone = alone();
    let cache = calibrated_cache("budget-shed");
    let c = compare("shedding", ARGS, || {
        budgeted(
            &cache,
            "2%",
            ARGS,
            &["uprobe:flood_tick+1", "uprobe:flood_hit"],
        )
    });
    let mut unbudgeted_shares = Vec::new();
    for (line, report) in &c.runs {
        let calls = field(line, "calls");
        let ticks = field(line, "ticks");
        let dear = report["probes"]
            .as_array()
            .and_then(|p| {
                p.iter().find(|p| {
                    p["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("flood_tick"))
                })
            })
            .expect("the flood_tick probe");
        let cheap = probe(report, "flood_hit");
        let budget = &report["budget"];
        eprintln!("{budget}\n{dear}\n{cheap}");
        assert_eq!(dear["cost_class"], "single-stepped", "{dear}");
        let name = dear["name"].as_str().expect("name");
        let per_hit = |p: &serde_json::Value| {
            p["cost"]["whole_cost_ns"]
                .as_f64()
                .or_else(|| p["whole_cost_ns"].as_f64())
                .expect("an estimate per hit")
        };
        unbudgeted_shares
            .push((per_hit(dear) * ticks + per_hit(cheap) * calls) / (c.whole * UNITS));
        // The moves, each said once: both to the kernel, then the dear one detached.
        let actions: Vec<&str> = budget["actions"]
            .as_array()
            .expect("actions")
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        let detached: Vec<&&str> = actions
            .iter()
            .filter(|a| a.contains("detached for the rest of the run"))
            .collect();
        assert_eq!(detached.len(), 1, "{actions:#?}");
        assert!(detached[0].contains(name), "{actions:#?}");
        for probe in [name, "flood_hit"] {
            assert_eq!(
                actions
                    .iter()
                    .filter(|a| a.contains("counted in the kernel")
                        && a.contains(&format!("{probe} (")))
                    .count(),
                1,
                "{probe}: {actions:#?}"
            );
        }
        // The dear probe counted until it was shed: some of its calls, scaled over that
        // time alone, so fewer than its calls over the run.
        let dear_counted = dear["hits_counted"].as_f64().expect("hits_counted");
        assert!(dear_counted > 0.0 && dear_counted < ticks * 0.5, "{dear}");
        assert!(
            dear["hits_interval"]["low"].as_f64().expect("low") <= ticks,
            "{dear}"
        );
        // The cheap one was cycled the whole run: its scaled hits hold its calls.
        let counted = cheap["hits_counted"].as_f64().expect("hits_counted");
        assert!(counted > 0.0 && counted < calls * 0.5, "{cheap}");
        let (low, high) = (
            cheap["hits_interval"]["low"].as_f64().expect("low"),
            cheap["hits_interval"]["high"].as_f64().expect("high"),
        );
        assert!(
            low <= calls && calls <= high,
            "{calls} calls outside {low}..{high}: {cheap}"
        );
    }
    let unbudgeted = median(unbudgeted_shares);
    assert!(
        unbudgeted > 0.2,
        "unbudgeted the probes cost {unbudgeted:.2} of the flood"
    );
    assert_held("shedding", &c, unbudgeted / 4.0);
    let _ = std::fs::remove_dir_all(&cache);
}

/// However a duty-cycled run ends (its end, SIGINT, SIGKILL), attached or between two
/// attached parts, it leaves no program and no link behind, and no probe point on the
/// target. The budget is CPU time per second, which the workload's probes (~30 ms/s
/// attached, against the workload's own 2-3 ms/s) can pay a part of every 0.25 s period
/// for: as a share of the workload's CPU (1%), no part after the survey's could be paid
/// for, and the only link to see was the survey's 10 ms.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_duty_cycled_run_leaves_nothing_behind_on_any_exit() {
    let _turn = turn(module_path!());
    let _alone = alone();
    for (signal, after_ms) in [
        (libc::SIGINT, 1300),
        (libc::SIGKILL, 1700),
        (libc::SIGTERM, 2100),
    ] {
        let target = workload(&["--forever", "--rate", "20000"]);
        let mut cmd = probetop();
        cmd.args([
            "--pid",
            &target.pid().to_string(),
            "--no-tui",
            "--budget",
            "20ms/s",
        ])
        .args([
            "--budget-window",
            "1",
            "-e",
            "uprobe:work_unit",
            "-e",
            "uprobe:leaf_ret",
        ]);
        let mut probetop = Running::spawn(cmd);
        probetop.err().wait_for("attached");
        // Links come and go with the duty: every one seen is checked.
        let (mut programs, mut links) = (Vec::new(), Vec::new());
        let until = Instant::now() + Duration::from_millis(after_ms);
        while Instant::now() < until {
            let (p, l) = bpf_ids_of(probetop.pid());
            programs.extend(p);
            links.extend(l);
            std::thread::sleep(Duration::from_millis(20));
        }
        programs.sort_unstable();
        programs.dedup();
        links.sort_unstable();
        links.dedup();
        assert!(
            !programs.is_empty() && links.len() >= 2,
            "{links:?}: no duty cycle seen"
        );
        probetop.signal(signal);
        let _ = probetop.wait();
        nothing_left_of(&programs, &links);
        assert_eq!(
            probe_points_of(target.pid()),
            0,
            "a probe left on the target"
        );
    }
}

/// With several `--pid`s the budget is a share of the set's CPU: both floods' probes are
/// duty cycled together, and the scaled hits of the one row hold both floods' calls.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_budget_over_several_pids_holds_the_set_and_scales_their_calls() {
    let _turn = turn(module_path!());
    let _alone = alone();
    // Priced from this machine's calibration, as users run it.
    let cache = calibrated_cache("budget-set");
    let floods: Vec<Running> = (0..2)
        .map(|_| started(&fixture("c/flood"), FLOOD))
        .collect();
    let json = export_path("budget-set.json");
    let mut cmd = probetop();
    cmd.env("XDG_CACHE_HOME", &cache);
    for flood in &floods {
        cmd.args(["--pid", &flood.pid().to_string()]);
    }
    cmd.args(["--no-tui", "--budget", "2%", "--budget-window", "5"])
        .args(["-e", "uprobe:flood_hit", "--export"])
        .arg(&json);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    for flood in &floods {
        flood.signal(libc::SIGUSR1);
    }
    let mut calls = 0.0;
    for mut flood in floods {
        calls += field(&done_line(&flood), "calls");
        assert!(flood.wait().success());
    }
    // The last target's exit ends the run.
    assert!(probetop.wait().success(), "{:?}", probetop.err().rest());
    let report = read_export(&json);
    let _ = std::fs::remove_file(&json);
    let budget = &report["budget"];
    let probe = probe(&report, "flood_hit");
    assert_eq!(budget["asked"], 0.02, "{budget}");
    assert!(
        budget["duty"].as_f64().is_some_and(|d| d > 0.0 && d < 0.5),
        "{budget}"
    );
    let used = budget["used"]["high"].as_f64().expect("used");
    assert!(used > 0.0 && used <= 0.02 * 1.5, "{budget}");
    let counted = probe["hits_counted"].as_f64().expect("hits_counted");
    let (low, high) = (
        probe["hits_interval"]["low"].as_f64().expect("low"),
        probe["hits_interval"]["high"].as_f64().expect("high"),
    );
    assert!(counted > 0.0 && counted < calls * 0.5, "{probe}");
    assert!(
        low <= calls && calls <= high,
        "{calls} calls of both floods outside {low}..{high}: {probe}"
    );
    let _ = std::fs::remove_dir_all(&cache);
}

/// A set of many probes, one of them flooded (its cost while attached well over the
/// budget even at the least duty): the first window holds by probetop's own account, as
/// every window does. The set is surveyed with short attached parts and shed before
/// the duty is planned, and periods the window cannot pay a part for stay detached.
#[test]
#[ignore = "needs root and the fixtures"]
fn many_probes_hold_the_budget_from_the_first_window() {
    const ARGS: &[&str] = &["--units", "24000", "--rate", "2000", "--calls", "40"];
    let _turn = turn(module_path!());
    let _alone = alone();
    let cache = calibrated_cache("budget-many");
    let specs: Vec<&str> = std::iter::once("uprobe:flood_hit")
        .chain(MANY.iter().copied())
        .collect();
    let (line, report) = budgeted_over(&cache, "2%", "4", ARGS, &specs);
    let budget = &report["budget"];
    let probes = report["probes"].as_array().expect("probes").len();
    eprintln!("{probes} probes; {budget}");
    assert!(probes >= 100, "{probes} probes: {budget}");
    // Unbudgeted, the flooded probe alone would cost the flood more than the budget
    // even attached at the least duty (40 ms a 1 s period).
    let calls = field(&line, "calls");
    let flooded = probe(&report, "flood_hit");
    let per_hit = flooded["cost"]["whole_cost_ns"]
        .as_f64()
        .or_else(|| flooded["whole_cost_ns"].as_f64())
        .expect("an estimate per hit");
    let whole = field(&line, "ns_per_unit") * 24_000.0;
    let unbudgeted = per_hit * calls / whole;
    assert!(
        unbudgeted * 0.04 > 0.02,
        "unbudgeted {unbudgeted:.3}: not dear enough to test"
    );
    let asked = budget["asked"].as_f64().expect("asked");
    let first = budget["first_window"].as_f64().expect("a first window");
    let worst = budget["worst_window"].as_f64().expect("a worst window");
    assert!(first > 0.0 && first <= asked, "{budget}");
    assert!(worst <= asked, "{budget}");
    let _ = std::fs::remove_dir_all(&cache);
}

/// Never hit by the flood: globs of libc's functions the flood does not call, for a set
/// of over a hundred probes.
const MANY: &[&str] = &["uprobe:libc:xdr*", "uprobe:libc:wcs*"];
