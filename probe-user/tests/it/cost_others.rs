//! Another tracer's program on the target (bpftrace) is found, with its run count and
//! run time when `--bpf-stats` is given; the statistics go off again when probetop
//! exits.

use crate::common::*;

/// The kernel's run count of program `id` (0 if gone).
fn run_count(id: u32) -> u64 {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .find(|p| p.id() == id)
        .map_or(0, |p| p.run_count())
}

#[test]
#[ignore = "needs root and the fixtures"]
fn finds_bpftrace_on_the_target_and_prices_it() {
    let _turn = turn(module_path!());
    let stats_were_on = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")
        .is_ok_and(|v| v.trim() != "0");
    let target = workload(&["--forever", "--batch", "10000", "--rate", "20000"]);
    let exe = fixture("c/workload");
    // -p does not scope uprobes: filter on the pid too (other tests share the file).
    let bpftrace = bpftrace_armed(
        target.pid(),
        &format!(
            "uprobe:{}:leaf_ret /pid == {}/ {{ @hits = count(); }}",
            exe.display(),
            target.pid()
        ),
    );

    let json = export_path("others.json");
    let mut probetop = Running::spawn({
        let mut cmd = probetop();
        cmd.args([
            "--pid",
            &target.pid().to_string(),
            "--no-tui",
            "--duration",
            "2",
        ])
        .args(["--bpf-stats", "-e", "uprobe:work_unit", "--export"])
        .arg(&json);
        cmd
    });
    assert!(probetop.wait().success(), "{:?}", probetop.err().rest());
    let stderr = probetop.err().rest().join("\n");
    let report: serde_json::Value = read_export(&json);
    let others = report["cost"]["other_bpf_programs"]
        .as_array()
        .expect("other_bpf_programs");
    let found = others
        .iter()
        .find(|p| {
            p["holder_pid"] == bpftrace.pid()
                && p["file"]
                    .as_str()
                    .is_some_and(|f| f.ends_with("c/workload"))
        })
        .unwrap_or_else(|| panic!("bpftrace's probe not listed: {others:#?}\n{stderr}"));
    assert_eq!(found["kind"], "uprobe");
    assert_eq!(
        found["offsets"].as_array().map(Vec::len),
        Some(1),
        "{found}"
    );
    let runs = found["run_count"]
        .as_u64()
        .expect("run_count with --bpf-stats");
    assert!(runs > 1000, "{found}");
    assert!(
        found["avg_run_ns"].as_f64().expect("avg_run_ns") > 0.0,
        "{found}"
    );
    assert!(stderr.contains("bpftrace"), "{stderr}");
    // probetop's own programs are not "other".
    assert!(
        others.iter().all(|p| p["holder_pid"] != probetop.pid()),
        "{others:#?}"
    );

    // Statistics are off again (unless something else keeps them on).
    if !stats_were_on {
        let id = found["prog_id"].as_u64().expect("prog_id") as u32;
        let before = run_count(id);
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert_eq!(run_count(id), before, "BPF statistics still counting");
    }
    let _ = std::fs::remove_file(&json);
}

/// probetop on `pid` with the perf-event attach path, whose probes the kernel names by
/// `/proc/self/fd/N` (its held executable), attached and running until dropped.
fn probetop_on_perf_path(pid: u32) -> Running {
    let mut cmd = probetop();
    cmd.env("PROBETOP_ATTACH_PATH", "perf_event")
        .args(["--pid", &pid.to_string(), "--no-tui"])
        .args(["-e", "uprobe:work_unit"]);
    let running = Running::spawn(cmd);
    running.err().wait_for("attached");
    running
}

/// Issue 18 item 9: another probetop's probes are named `/proc/self/fd/N` by the kernel;
/// resolved in the wrong process that names whatever this probetop holds at fd N (its
/// own target), so probes on an unrelated binary were listed as on the target.
#[test]
#[ignore = "needs root and the fixtures"]
fn other_probetops_on_unrelated_binaries_are_not_listed() {
    let _turn = turn(module_path!());
    let target = workload(&["--forever", "--batch", "1000", "--rate", "20000"]);
    let unrelated = started(
        &fixture("c/workload-nousdt"),
        &["--forever", "--batch", "1000", "--rate", "20000"],
    );
    let elsewhere = probetop_on_perf_path(unrelated.pid());
    let on_target = probetop_on_perf_path(target.pid());

    let json = export_path("others-elsewhere.json");
    let mut probetop = Running::spawn({
        let mut cmd = probetop();
        cmd.env("PROBETOP_ATTACH_PATH", "perf_event")
            .args(["--pid", &target.pid().to_string(), "--no-tui"])
            .args(["--duration", "1", "-e", "uprobe:work_unit", "--export"])
            .arg(&json);
        cmd
    });
    assert!(probetop.wait().success(), "{:?}", probetop.err().rest());
    let report: serde_json::Value = read_export(&json);
    let others = report["cost"]["other_bpf_programs"]
        .as_array()
        .expect("other_bpf_programs");
    let holders: Vec<u64> = others
        .iter()
        .filter_map(|p| p["holder_pid"].as_u64())
        .collect();
    assert!(
        holders.contains(&u64::from(on_target.pid())),
        "the probetop on the target is not listed: {others:#?}"
    );
    assert!(
        !holders.contains(&u64::from(elsewhere.pid())),
        "the probetop on another binary is listed: {others:#?}"
    );
    drop(on_target);
    drop(elsewhere);
    let _ = std::fs::remove_file(&json);
}
