//! `probetop list` agrees with bpftrace's own listing of the same files.

use std::collections::BTreeSet;

use crate::common::*;

/// bpftrace's names for `kind` probes in `path` (the part after `kind:path:`).
fn bpftrace_list(kind: &str, path: &std::path::Path) -> BTreeSet<String> {
    let prefix = format!("{kind}:{}:", path.display());
    let out = output_ok(
        std::process::Command::new("bpftrace").args(["-l", &format!("{prefix}*")]),
        "bpftrace -l (installed by `cargo xtask setup`)",
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .collect()
}

/// probetop's listing of `path`: (function symbols as stored, USDT provider:name).
fn probetop_list(path: &std::path::Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let listing = list_json([path]);
    let mut functions = BTreeSet::new();
    let mut usdt = BTreeSet::new();
    for point in listing["points"].as_array().expect("points") {
        match point["kind"].as_str() {
            Some("uprobe") => {
                functions.insert(point["symbol"].as_str().expect("symbol").to_string());
                for alias in point["aliases"].as_array().into_iter().flatten() {
                    functions.insert(alias.as_str().expect("alias").to_string());
                }
            }
            Some("usdt") => {
                usdt.insert(point["name"].as_str().expect("name").to_string());
            }
            other => panic!("unexpected kind {other:?}"),
        }
    }
    (functions, usdt)
}

#[test]
#[ignore = "needs root and the fixtures"]
fn agrees_with_bpftrace() {
    let _turn = turn(module_path!());
    for relative in [
        "c/probes",
        "c/probes-nopie",
        "cpp/cppfix",
        "go/gofix",
        "python/libpyprobes.so",
    ] {
        let path = fixture(relative);
        let (functions, usdt) = probetop_list(&path);
        assert!(!functions.is_empty(), "{relative}: no functions");
        assert_eq!(
            functions,
            bpftrace_list("uprobe", &path),
            "{relative}: functions"
        );
        assert_eq!(usdt, bpftrace_list("usdt", &path), "{relative}: usdt");
    }
}

/// A pipe whose reader has already gone: every write to it fails with EPIPE, as when
/// `| head` has read its lines and exited.
fn closed_pipe() -> std::fs::File {
    use std::os::fd::FromRawFd as _;
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: fds[0] is the read end just created, closed once here.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is the write end just created and owned by nothing else.
    unsafe { std::fs::File::from_raw_fd(fds[1]) }
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_closed_pipe_ends_every_printing_command_quietly() {
    let _turn = turn(module_path!());
    let probes = fixture("c/probes");
    let probes = probes.to_str().expect("utf-8 path");
    for args in [
        &["list", probes][..],
        &["list", "--json", probes],
        &["completions", "bash"],
        &["man"],
    ] {
        let out = probetop()
            .args(args)
            .stdout(closed_pipe())
            .output()
            .expect("probetop runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty(),
            "probetop {args:?} on a closed pipe: {} {stderr}",
            out.status
        );
    }
}

/// A stripped copy of a fixture (no `.symtab`, no debug file): `list` says it is
/// stripped, where a debug file was looked for and what it still offers (its USDT
/// probes), instead of "0 points in 0 objects"; the JSON says the same.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_stripped_object_is_explained() {
    let _turn = turn(module_path!());
    let dir = std::env::temp_dir().join(format!("probetop-list-stripped-{}", std::process::id()));
    let copy = fixture_copy("c/probes", &dir, "probes-stripped");
    output_ok(
        std::process::Command::new("strip")
            .arg("--strip-all")
            .arg(&copy),
        "strip",
    );
    // A function it no longer names (probe_add, exported, stays): no point, and why.
    let out = output_ok(
        probetop().arg("list").arg(&copy).arg("probe_leaf"),
        "probetop list",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "stripped: no function symbols",
        "no debug file at /usr/lib/debug/.build-id/",
        "or probe what it has: usdt:fixture:",
        "0 points: stripped",
    ] {
        assert!(text.contains(needle), "{needle:?} missing: {text}");
    }
    assert!(!text.contains("0 points in 0 objects"), "{text}");
    let listing = list_json([copy.as_os_str()]);
    let stripped = &listing["objects"][0]["stripped"];
    let usdt = listing["points"]
        .as_array()
        .expect("points")
        .iter()
        .filter(|p| p["kind"] == "usdt")
        .count();
    assert!(usdt > 0, "{listing}");
    assert_eq!(stripped["usdt"], usdt, "{listing}");
    assert!(
        stripped["debug_looked_in"][0]
            .as_str()
            .is_some_and(|p| p.starts_with("/usr/lib/debug/.build-id/")),
        "{listing}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
