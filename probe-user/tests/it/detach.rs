//! Leaving: exports are written before the probes are detached, so a detach the kernel
//! makes slow (a grace period per perf event) cannot lose them, and a SIGKILL in the
//! middle of it leaves the export whole and nothing attached.

use std::os::unix::process::ExitStatusExt as _;

use crate::common::*;

/// `attached N probes` -> N.
fn attached_count(line: &str) -> usize {
    line.split_whitespace()
        .skip_while(|w| *w != "attached")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line:?}"))
}

#[test]
#[ignore = "needs root and the fixtures"]
fn sigkill_during_a_long_detach_keeps_the_export_and_leaves_nothing_attached() {
    let _turn = turn(module_path!());
    let target = workload(&["--forever", "--rate", "2000"]);
    let json = export_path("sigkill-detach.json");
    let mut cmd = probetop();
    // Dozens of perf-event probes: closing each waits for a grace period (~0.1 s here).
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args([
            "-e",
            "uprobe:libc:str*",
            "-e",
            "uprobe:work_unit",
            "--export",
        ])
        .arg(&json)
        .env("PROBETOP_ATTACH_PATH", "perf_event");
    let mut probetop = Running::spawn(cmd);
    let count = attached_count(&probetop.err().wait_for("attached"));
    assert!(count > 20, "only {count} probes: the detach would be quick");
    let (programs, links) = bpf_ids_of(probetop.pid());
    assert!(!programs.is_empty() && !links.is_empty(), "no BPF fds held");
    std::thread::sleep(std::time::Duration::from_millis(500));

    probetop.signal(libc::SIGINT);
    probetop.err().wait_for("wrote");
    // Written, and the probes are still being detached: kill it now.
    probetop.signal(libc::SIGKILL);
    let status = probetop.wait();
    eprintln!("probetop ended with {status} after a SIGKILL in the detach");
    assert!(
        status.signal() == Some(libc::SIGKILL) || status.success(),
        "{status}"
    );

    let report = read_export(&json);
    let probes = report["probes"].as_array().expect("probes");
    assert_eq!(probes.len(), count, "every probe in the export");
    assert!(
        probe(&report, "work_unit")["hits"].as_u64() > Some(0),
        "{report}"
    );
    let (loaded_programs, loaded_links) = loaded_bpf_ids();
    for id in &programs {
        assert!(!loaded_programs.contains(id), "program {id} left loaded");
    }
    for id in &links {
        assert!(!loaded_links.contains(id), "link {id} left attached");
    }
    let _ = std::fs::remove_file(&json);
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_second_sigint_exits_at_once_with_the_export_written() {
    let _turn = turn(module_path!());
    let target = workload(&["--forever", "--rate", "2000"]);
    let json = export_path("second-sigint.json");
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["-e", "uprobe:libc:str*", "--export"])
        .arg(&json)
        .env("PROBETOP_ATTACH_PATH", "perf_event");
    let mut probetop = Running::spawn(cmd);
    let count = attached_count(&probetop.err().wait_for("attached"));
    probetop.signal(libc::SIGINT);
    probetop.err().wait_for("wrote");
    probetop.signal(libc::SIGINT);
    let status = probetop.wait();
    assert!(status.success(), "{status}");
    let rest = probetop.err().rest().join("\n");
    // Either the detach was over before the second signal, or it says it left.
    assert!(
        rest.contains("SIGINT again: exiting now") || rest.contains("detached"),
        "{rest}"
    );
    let report = read_export(&json);
    assert_eq!(report["probes"].as_array().map(Vec::len), Some(count));
    let _ = std::fs::remove_file(&json);
}
