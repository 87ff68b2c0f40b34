//! Bad input: one clear message and a non-zero exit, never a panic.

mod common;

use std::process::Output;

use common::*;

fn run(args: &[&str]) -> Output {
    probetop().args(args).output().expect("run probetop")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_clean_failure(out: &Output, code: i32, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn no_such_pid() {
    let out = run(&["--pid", "4999999", "-e", "uprobe:work_unit", "--no-tui"]);
    assert_clean_failure(&out, 1, "no process with pid 4999999");
}

#[test]
fn symbol_not_in_target() {
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let out = run(&[
        "--pid",
        &target.pid().to_string(),
        "-e",
        "uprobe:no_such_function_here",
        "--no-tui",
    ]);
    assert_clean_failure(&out, 1, "no_such_function_here");
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
}

#[test]
fn malformed_specs_show_a_caret() {
    for (spec, needle) in [
        ("kprobe:work_unit", "unknown probe kind"),
        ("work_unit", "KIND:TARGET"),
        ("uprobe:", "needs a target"),
    ] {
        let out = run(&["--pid", "1", "-e", spec, "--no-tui"]);
        assert_clean_failure(&out, 2, needle);
        assert!(stderr(&out).contains('^'), "{spec}: {}", stderr(&out));
    }
}

#[test]
fn missing_pid_and_probes() {
    assert_clean_failure(&run(&["-e", "uprobe:x", "--no-tui"]), 2, "--pid");
    assert_clean_failure(&run(&["--pid", "1", "--no-tui"]), 2, "no probes");
}

#[test]
fn unknown_export_format() {
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let out = run(&[
        "--pid",
        &target.pid().to_string(),
        "-e",
        "uprobe:work_unit",
        "--export",
        "/tmp/x.docx",
        "--no-tui",
    ]);
    assert_clean_failure(&out, 2, "unknown export format");
}

#[test]
fn without_privileges() {
    // setpriv (util-linux) drops to nobody with no capabilities at all.
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_probetop"))
        .args([
            "--pid",
            &target.pid().to_string(),
            "-e",
            "uprobe:work_unit",
            "--no-tui",
        ])
        .output()
        .expect("run setpriv");
    assert_clean_failure(&out, 1, "needs root");
}
