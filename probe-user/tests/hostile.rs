//! What a hostile round found at attach time (issue 18): duplicate specs, refused points
//! in a glob, file descriptor limits, traced targets, and odd pids.

mod common;

use common::*;

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
    let mut probetop = Running::spawn(cmd);
    let mut seen = until(probetop.err(), "attached");
    target.signal(libc::SIGUSR1);
    target.out().wait_for("done");
    assert!(target.wait().success());
    let status = probetop.wait();
    seen.extend(probetop.err().rest());
    assert!(status.success(), "probetop {args:?} failed: {seen:?}");
    (seen, read_export(&json))
}

/// Lines up to and with the first that contains `needle`.
fn until(lines: &Lines, needle: &str) -> Vec<String> {
    let mut seen = Vec::new();
    while let Some(line) = lines.next() {
        let found = line.contains(needle);
        seen.push(line);
        if found {
            return seen;
        }
    }
    panic!("no line containing {needle:?}; saw: {seen:#?}");
}

#[test]
fn identical_probe_points_are_attached_once() {
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
fn max_probes_caps_the_total_of_all_specs() {
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
