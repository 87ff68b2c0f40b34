//! `probetop --all`: every process with another tool's probe armed in it, one row each,
//! with exact hits and owners. Private copies of the C fixture: bpftrace probes one in
//! process A, a tracefs `uprobe_events` probe the other in process B, and process C
//! runs a third copy nobody probes.

use crate::common::*;

#[test]
#[ignore = "needs root, the fixtures, bpftrace and tracefs"]
fn all_lists_each_probed_process_with_exact_hits_and_its_owners() {
    let _turn = turn(module_path!());
    let _alone = alone();
    let dir = export_path("host-copies");
    let (file_a, file_b, file_c) = (
        workload_copy(&dir, "host-a"),
        workload_copy(&dir, "host-b"),
        workload_copy(&dir, "host-c"),
    );
    let (calls_a, calls_b, calls_c) = (3000u64, 4000u64, 500u64);
    let (mut a, mut b, mut c) = (
        waiting(&file_a, calls_a),
        waiting(&file_b, calls_b),
        waiting(&file_c, calls_c),
    );
    let bpftrace = bpftrace_counting(a.pid(), &format!("uprobe:{}:work_unit", file_a.display()));
    // B's event fetches two arguments and is enabled in two trace instances: its site's
    // owner says so, as a `--pid` run's row does.
    let event = TracefsProbe::shaped(
        &file_b,
        file_offset(&file_b, "leaf_ret"),
        format!("leaf_ret_{}", b.pid()),
        "i=%di:s64 ra=+0(%sp):x64",
        2,
    );
    // A probetop of the user's on D: D is listed, owned by it; that probetop's own
    // process (its uprobe flushing staged records) is not a probed process.
    let file_d = workload_copy(&dir, "host-d");
    let mut d = waiting(&file_d, 1);
    let mut theirs = Running::spawn({
        let mut cmd = probetop();
        cmd.args([
            "--pid",
            &d.pid().to_string(),
            "--no-tui",
            "--duration",
            "120",
        ])
        .arg("-e")
        .arg(format!("uprobe:{}:work_unit", file_d.display()));
        cmd
    });
    theirs.err().wait_for("attached 1 probe");
    let json = dir.join("all.json");
    let mut probetop = all_exporting(probetop(), &json);
    // Both counted before any call is made.
    for pid in [a.pid(), b.pid(), d.pid()] {
        probetop.err().wait_for(&format!("counting pid {pid} "));
    }
    for target in [&a, &b, &c] {
        target.signal(libc::SIGUSR1);
    }
    for (target, calls) in [(&mut a, calls_a), (&mut b, calls_b), (&mut c, calls_c)] {
        calls_done(target, calls);
    }
    let (stderr, report) = interrupted(&mut probetop, &json);
    drop(event);
    let table = probetop.out().rest().join("\n");

    let row_a = row_of(&report, a.pid()).unwrap_or_else(|| panic!("A listed: {report:#}"));
    assert_eq!(row_a["comm"], "host-a", "{row_a}");
    assert_eq!(row_a["probes"], 1, "{row_a}");
    assert_eq!(row_a["hits"], calls_a, "{row_a}\n{stderr}");
    assert_eq!(row_a["owners"].as_array().map(Vec::len), Some(1), "{row_a}");
    assert_eq!(row_a["owners"][0]["tool"], "bpftrace", "{row_a}");
    assert_eq!(row_a["owners"][0]["pid"], bpftrace.pid(), "{row_a}");
    assert_eq!(row_a["sites"][0]["name"], "work_unit", "{row_a}");
    let bpf_owner = &row_a["sites"][0]["owners"][0];
    assert_eq!(bpf_owner["pid"], bpftrace.pid(), "{row_a}");
    assert_eq!(bpf_owner["fetch_args"], serde_json::Value::Null, "{row_a}");
    assert_eq!(row_a["exited"], true, "{row_a}");

    let row_b = row_of(&report, b.pid()).unwrap_or_else(|| panic!("B listed: {report:#}"));
    assert_eq!(row_b["hits"], calls_b, "{row_b}\n{stderr}");
    assert_eq!(row_b["owners"][0]["tool"], "tracefs", "{row_b}");
    assert_eq!(
        row_b["owners"][0]["pid"],
        serde_json::Value::Null,
        "{row_b}"
    );
    assert_eq!(row_b["sites"][0]["name"], "leaf_ret", "{row_b}");
    let event_owner = &row_b["sites"][0]["owners"][0];
    assert_eq!(event_owner["tool"], "tracefs", "{row_b}");
    assert_eq!(event_owner["fetch_args"], 2, "{row_b}");
    assert_eq!(event_owner["instances"], 2, "{row_b}");

    assert!(
        row_of(&report, c.pid()).is_none(),
        "C has no probe: {report:#}"
    );
    let row_d = row_of(&report, d.pid()).unwrap_or_else(|| panic!("D listed: {report:#}"));
    assert_eq!(row_d["owners"][0]["tool"], "probetop", "{row_d}");
    assert_eq!(row_d["owners"][0]["pid"], theirs.pid(), "{row_d}");
    assert!(
        row_of(&report, theirs.pid()).is_none(),
        "a probetop's own flush probe is no probed process: {report:#}"
    );
    assert!(
        !stderr.contains(&format!("counting pid {} ", theirs.pid())),
        "{stderr}"
    );
    theirs.signal(libc::SIGINT);
    assert!(theirs.wait().success(), "{:?}", theirs.err().rest());
    d.signal(libc::SIGUSR1);
    assert!(d.wait().success());
    // No calibration here: hits are counted, not priced (`whole_cost_ns` null), and a
    // price would make the CPU share hits/s x cost.
    for row in [row_a, row_b] {
        match (row["whole_cost_ns"].as_f64(), row["cpu_share"].as_f64()) {
            (None, None) => {}
            (Some(cost), Some(share)) => {
                let expected = row["hits_per_s"].as_f64().expect("rate") * cost / 1e9;
                assert!((share - expected).abs() <= expected * 1e-6, "{row}");
            }
            _ => panic!("priced without a CPU share, or the reverse: {row}"),
        }
    }
    // The table: a header, then a line per process, A's and B's with their owners.
    assert!(table.trim_start().starts_with("PID"), "{table}");
    let line_a = table
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{} ", a.pid())))
        .unwrap_or_else(|| panic!("A's line: {table}"));
    assert!(
        line_a.contains(&format!("bpftrace {}", bpftrace.pid())),
        "{table}"
    );
    assert!(line_a.contains(&calls_a.to_string()), "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--all` names another tool's probe on a stripped object through debuginfod, as a run
/// with `--pid` does (elfutils' server, as in debuginfod.rs), and counts every hit; with
/// `--offline` no server is asked: the site is named by its file offset, and counted all
/// the same.
#[test]
#[ignore = "needs root, the fixtures, tracefs and debuginfod"]
fn all_names_a_stripped_site_through_debuginfod_unless_offline() {
    let _turn = turn(module_path!());
    let _alone = alone();
    let dir = server_dir("host-debuginfod");
    let served = dir.join("served");
    std::fs::create_dir_all(&served).expect("served dir");
    let stripped = dir.join("host-stripped");
    let id = crate::debuginfod::stripped_copy(&stripped, &served.join("workload.debug"));
    let server = crate::debuginfod::serve(&dir, &served, id);
    // strip keeps the loaded segments where they were.
    let offset = file_offset(&fixture("c/workload"), "work_unit");
    let calls = 2000u64;
    for offline in [false, true] {
        let mut target = waiting(&stripped, calls);
        let event = TracefsProbe::add(&stripped, offset, format!("stripped_{}", target.pid()));
        let json = dir.join(format!("all-offline-{offline}.json"));
        let mut cmd = crate::debuginfod::asking(&server, &dir.join(format!("cache-{offline}")));
        if offline {
            cmd.arg("--offline");
        }
        let mut probetop = all_exporting(cmd, &json);
        if !offline {
            let said = probetop.err().wait_for(&format!(
                "symbols of {} from debuginfod {}",
                stripped.display(),
                server.url
            ));
            assert!(said.contains("/probetop/debuginfod/"), "{said}");
        }
        probetop
            .err()
            .wait_for(&format!("counting pid {} ", target.pid()));
        target.signal(libc::SIGUSR1);
        calls_done(&mut target, calls);
        let (stderr, report) = interrupted(&mut probetop, &json);
        drop(event);
        let row = row_of(&report, target.pid()).unwrap_or_else(|| panic!("listed: {report:#}"));
        assert_eq!(row["hits"], calls, "offline {offline}: {row}\n{stderr}");
        let name = if offline {
            format!("{offset:#x}")
        } else {
            "work_unit".to_string()
        };
        assert_eq!(
            row["sites"][0]["name"],
            name.as_str(),
            "offline {offline}: {row}"
        );
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs root"]
fn all_with_a_pid_or_a_spec_is_one_line_and_exit_2() {
    let _turn = turn(module_path!());
    for args in [
        &["--all", "--pid", "1"][..],
        &["--all", "-e", "uprobe:main"][..],
        &["--all", "--export", "x.csv"][..],
    ] {
        let out = probetop().args(args).output().expect("run probetop");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("probetop: --all with "), "{stderr}");
    }
}

#[test]
#[ignore = "needs root, the fixtures, bpftrace and tmux"]
fn enter_opens_a_process_as_pid_would_and_esc_comes_back() {
    let _turn = turn(module_path!());
    let _alone = alone();
    let dir = export_path("host-tui");
    let file = workload_copy(&dir, "host-tui");
    let target = started(&file, &["--wait-signal"]);
    let pid = target.pid();
    let bpftrace = bpftrace_counting(pid, &format!("uprobe:{}:work_unit", file.display()));
    let tmux = Tmux::start(
        "host",
        160,
        30,
        &dir,
        &format!("{} --all", env!("CARGO_BIN_EXE_probetop")),
    );
    let row = |screen: &str| {
        screen
            .lines()
            .skip_while(|l| !l.contains("OWNERS"))
            .skip(1)
            .position(|l| l.trim_start().starts_with(&format!("{pid} ")))
    };
    let screen = tmux.wait_for("the target's row", |s| row(s).is_some());
    assert!(
        screen.contains(&format!("bpftrace {}", bpftrace.pid())),
        "{screen}"
    );
    // Selected from the top, as a person would; other processes with probes (none in
    // CI) may sort above it.
    let down = row(&screen).unwrap_or(0);
    tmux.keys(&["Home"]);
    for _ in 0..down {
        tmux.keys(&["Down"]);
    }
    tmux.keys(&["Enter"]);
    // The process's own view: its probe a row with its owner.
    tmux.wait_for("the process view", |s| {
        s.contains(&format!("work_unit <bpftrace {}>", bpftrace.pid()))
    });
    tmux.keys(&["Escape"]);
    tmux.wait_for("the list again", |s| {
        s.contains("probetop --all:") && row(s).is_some()
    });
    tmux.keys(&["q"]);
    tmux.wait_for("probetop's exit", |s| s.contains("probetop-exit=0"));
    let _ = std::fs::remove_dir_all(&dir);
}
