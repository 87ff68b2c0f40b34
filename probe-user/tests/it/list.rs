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

/// The build id of `path`, as readelf prints it.
fn build_id(path: &std::path::Path) -> String {
    let out = output_ok(
        std::process::Command::new("readelf").arg("-n").arg(path),
        "readelf -n",
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("the fixture has a build id")
}

/// A stripped copy of a fixture (no `.symtab`, no debug file; its .dynsym exports
/// `probe_add`, its notes 11 USDT probes): `list` explains it in one line (what it
/// lacks, where a debug file was looked for, what to do); names are suggested only when
/// the pattern matched nothing, closest first, and none when none is close; the JSON
/// says the same.
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
    let id = build_id(&copy);
    let list = |pattern: &str| {
        let out = output_ok(
            probetop()
                .env("DEBUGINFOD_URLS", "")
                .arg("list")
                .arg(&copy)
                .arg(pattern),
            "probetop list",
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let head = format!("{}  (symbols: .dynsym only (stripped))", copy.display());
    let explained = format!(
        "  stripped: no symbol table (.symtab) and no debug file: by build id (none at /usr/lib/debug/.build-id/{}/{}.debug), no .gnu_debuglink, no MiniDebugInfo, no debuginfod server asked (DEBUGINFOD_URLS is empty); install its debug symbols (the -dbgsym or -debuginfo package) or set DEBUGINFOD_URLS to a server that has them; until then it offers only the 1 function its .dynsym exports and its 11 USDT probes",
        &id[..2],
        &id[2..]
    );
    // Nothing matched: the closest names, closest first.
    let text = list("tik");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            head.as_str(),
            explained.as_str(),
            "  \"tik\" matches none of them; closest: usdt:fixture:tick, usdt:fixture_sema:tick",
            "",
            "0 points: stripped, see above",
        ],
        "{text}"
    );
    let text = list("prob_add");
    assert_eq!(
        text.lines().nth(2),
        Some("  \"prob_add\" matches none of them; closest: uprobe:probe_add"),
        "{text}"
    );
    // Nothing close: said, no name offered.
    let text = list("zzzz");
    assert_eq!(
        text.lines().nth(2),
        Some("  \"zzzz\" matches none of them, and none is close to it"),
        "{text}"
    );
    // Matched: the points and the one line, no suggestion.
    let text = list("probe_add");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..2], [head.as_str(), explained.as_str()], "{text}");
    assert!(lines[2].starts_with("  KIND "), "{text}");
    assert!(lines[3].ends_with("  probe_add"), "{text}");
    assert_eq!(lines[4..], ["", "1 point in 1 object"], "{text}");

    let listing = list_json([copy.as_os_str(), std::ffi::OsStr::new("tik")]);
    let stripped = &listing["objects"][0]["stripped"];
    assert_eq!(stripped["usdt"], 11, "{listing}");
    assert_eq!(stripped["functions"], 1, "{listing}");
    assert_eq!(stripped["unmatched"], "tik", "{listing}");
    assert_eq!(
        stripped["suggested"],
        serde_json::json!(["usdt:fixture:tick", "usdt:fixture_sema:tick"]),
        "{listing}"
    );
    assert!(
        stripped["debug_looked_in"][0]
            .as_str()
            .is_some_and(|p| p.starts_with("/usr/lib/debug/.build-id/")),
        "{listing}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
