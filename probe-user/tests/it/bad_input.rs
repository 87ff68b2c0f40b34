//! Bad input: one clear message and a non-zero exit, never a panic.

use std::process::{Command, Output};

use crate::common::*;

fn run(args: &[&str]) -> Output {
    probetop().args(args).output().expect("run probetop")
}

/// probetop on `target` with the spec `spec`, `args` after it, no TUI.
fn run_on(target: &Running, spec: &str, args: &[&str]) -> Output {
    let pid = target.pid().to_string();
    run(&[
        &["--pid", pid.as_str(), "-e", spec][..],
        args,
        &["--no-tui"][..],
    ]
    .concat())
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
#[ignore = "needs root and the fixtures"]
fn no_such_pid() {
    let _turn = turn(module_path!());
    let out = run(&["--pid", "4999999", "-e", "uprobe:work_unit", "--no-tui"]);
    assert_clean_failure(&out, 1, "no process with pid 4999999");
}

#[test]
#[ignore = "needs root and the fixtures"]
fn symbol_not_in_target() {
    let _turn = turn(module_path!());
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let out = run_on(&target, "uprobe:no_such_function_here", &[]);
    assert_clean_failure(&out, 1, "no_such_function_here");
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
}

#[test]
fn malformed_specs_show_a_caret() {
    let _turn = turn(module_path!());
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
    let _turn = turn(module_path!());
    // What is missing in one line, then the usage.
    for (args, needle) in [
        (
            &["-e", "uprobe:x", "--no-tui"][..],
            "which process? give --pid PID",
        ),
        // One --pid without a spec watches other tools' probes (tests/it/others.rs);
        // with no process, or several, a spec is needed.
        (&["--no-tui"][..], "no probes"),
        (
            &["--pid", "1", "--follow-forks", "--no-tui"][..],
            "no probes",
        ),
    ] {
        let out = run(args);
        assert_clean_failure(&out, 2, needle);
        let err = stderr(&out);
        assert!(
            err.starts_with(&format!("probetop: {needle}")),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("\nusage: probetop --pid PID"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn no_arguments_print_the_usage() {
    let _turn = turn(module_path!());
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.starts_with("usage: probetop --pid PID"), "{err}");
    for needle in [
        "probetop list",
        "probetop calibrate",
        "--preset mysql",
        "probetop --help",
    ] {
        assert!(err.contains(needle), "{needle:?} missing: {err}");
    }
    assert!(out.stdout.is_empty());
    // --help lists every command a user may run, the manual and completions too.
    let help = output_ok(probetop().arg("--help"), "probetop --help");
    let help = String::from_utf8_lossy(&help.stdout);
    for command in ["list", "calibrate", "completions", "man"] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "{command} missing from --help: {help}"
        );
    }
    assert!(!help.contains("__calibrate-workload"), "{help}");
}

#[test]
fn time_every_outside_the_kernel_mode() {
    let _turn = turn(module_path!());
    // Checked before anything is looked up or attached.
    for (mode, every, needle) in [
        ("ring", "8", "applies to --mode kernel and auto only"),
        ("kernel", "0", "--time-every 0"),
    ] {
        let args = ["--pid", "1", "-e", "uprobe:x", "--mode", mode, "--no-tui"];
        let out = run(&[&args[..], &["--time-every", every]].concat());
        assert_clean_failure(&out, 2, needle);
    }
}

#[test]
fn more_arguments_than_a_hit_carries() {
    let _turn = turn(module_path!());
    // Checked before anything is looked up or attached; 12 is libbpf's USDT limit.
    let out = run(&["--pid", "1", "-e", "usdt:x", "--args", "13", "--no-tui"]);
    assert_clean_failure(
        &out,
        2,
        "--args 13: a hit carries at most 12 argument values",
    );
}

#[test]
#[ignore = "needs root and the fixtures"]
fn unknown_export_format() {
    let _turn = turn(module_path!());
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let out = run_on(&target, "uprobe:work_unit", &["--export", "/tmp/x.docx"]);
    assert_clean_failure(&out, 2, "unknown export format");
}

#[test]
#[ignore = "needs root and the fixtures"]
fn without_privileges() {
    let _turn = turn(module_path!());
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

#[test]
#[ignore = "needs root and the fixtures"]
fn kernel_threads_and_zombies_are_refused() {
    let _turn = turn(module_path!());
    // kthreadd is pid 2.
    assert_clean_failure(
        &run(&["--pid", "2", "-e", "uprobe:x", "--no-tui"]),
        1,
        "kernel thread",
    );
    // A child that exited and was not reaped yet is a zombie.
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    let pid = child.id();
    let deadline = std::time::Instant::now() + PATIENCE;
    while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'))
    }) {
        assert!(std::time::Instant::now() < deadline, "no zombie");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_clean_failure(
        &run(&["--pid", &pid.to_string(), "-e", "uprobe:x", "--no-tui"]),
        1,
        "zombie",
    );
    let _ = child.wait();
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_spec_matching_thousands_of_symbols_is_capped() {
    let _turn = turn(module_path!());
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let out = run_on(&target, "uprobe:libc:*", &[]);
    assert_clean_failure(&out, 1, "--max-probes");
    assert!(stderr(&out).contains("matches"), "{}", stderr(&out));
}

#[test]
#[ignore = "needs root and the fixtures"]
fn refuses_to_run_setuid() {
    let _turn = turn(module_path!());
    use std::os::unix::fs::PermissionsExt as _;
    // A setuid-root copy run by nobody: real uid 65534, effective uid 0.
    let dir = std::env::temp_dir().join(format!("probetop-setuid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let copy = dir.join("probetop");
    std::fs::copy(env!("CARGO_BIN_EXE_probetop"), &copy).expect("copy binary");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o4755)).expect("setuid");
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&copy)
        .args(["--pid", "1", "-e", "uprobe:x", "--no-tui"])
        .output()
        .expect("run setpriv");
    let _ = std::fs::remove_dir_all(&dir);
    assert_clean_failure(&out, 1, "refuses to run setuid");
}

#[test]
#[ignore = "needs root and the fixtures"]
fn an_offset_off_an_instruction_boundary_is_refused() {
    let _turn = turn(module_path!());
    // Inside work_unit's second instruction (objdump's reading), which is longer than
    // one byte in the fixture: the refusal names the boundaries around it.
    let offsets = instruction_offsets(&fixture("c/workload"), "work_unit");
    let (second, third) = (offsets[1], offsets[2]);
    assert!(third - second > 1, "{offsets:?}");
    let inside = second + 1;
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let out = run_on(&target, &format!("uprobe:work_unit+{inside}"), &[]);
    assert_clean_failure(
        &out,
        1,
        &format!(
            "work_unit+{inside:#x} is not on an instruction boundary: the nearest are +{second:#x} and +{third:#x}"
        ),
    );
    // One line, nothing attached.
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(!stderr(&out).contains("attached"), "{}", stderr(&out));
    // Past the end of the function.
    let out = run_on(&target, "uprobe:work_unit+0x10000", &[]);
    assert_clean_failure(&out, 1, "is outside work_unit");
}

#[test]
fn malformed_offsets_show_a_caret() {
    let _turn = turn(module_path!());
    for (spec, needle) in [
        ("uprobe:work_unit+0xzz", "an offset is 0x and hex digits"),
        ("uprobe:work_unit+", "an offset is 0x and hex digits"),
        ("uretprobe:work_unit+4", "a uretprobe takes no +OFFSET"),
        ("uprobe:work_*+4", "not a pattern"),
    ] {
        let out = run(&["--pid", "1", "-e", spec, "--no-tui"]);
        assert_clean_failure(&out, 2, needle);
        assert!(stderr(&out).contains('^'), "{spec}: {}", stderr(&out));
    }
}

#[test]
fn sample_every_zero_is_refused_like_time_every_zero() {
    let _turn = turn(module_path!());
    let out = run(&[
        "--pid",
        "1",
        "-e",
        "uprobe:x",
        "--mode",
        "sample",
        "--sample-every",
        "0",
        "--no-tui",
    ]);
    assert_clean_failure(&out, 2, "--sample-every 0: give 1 to stream every hit");
}

/// probetop under a 2 GiB address-space limit: input that makes it grow without bound
/// fails an allocation (an abort) instead of filling the machine's memory.
fn run_bounded(args: &[&str], stdin: std::process::Stdio) -> std::process::Child {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = probetop();
    cmd.args(args)
        .stdin(stdin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().expect("run probetop")
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn an_endless_spec_file_is_one_line() {
    let _turn = turn(module_path!());
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let pid = target.pid().to_string();
    let out = run_bounded(
        &["--pid", &pid, "-f", "/dev/zero", "--no-tui"],
        std::process::Stdio::null(),
    )
    .wait_with_output()
    .expect("wait");
    assert_clean_failure(
        &out,
        2,
        "-f /dev/zero: a device; give a file of probe specs, one a line (or a pipe)",
    );
    // A pipe that never ends: read up to the cap, then refused.
    let mut child = run_bounded(
        &["--pid", &pid, "-f", "/dev/stdin", "--no-tui"],
        std::process::Stdio::piped(),
    );
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        use std::io::Write as _;
        let line = "# a comment line, again and again\n".repeat(1000);
        while stdin.write_all(line.as_bytes()).is_ok() {}
    });
    let out = child.wait_with_output().expect("wait");
    let _ = writer.join();
    assert_clean_failure(&out, 2, "-f /dev/stdin: more than 1 MiB of probe specs");
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn a_huge_spec_is_not_echoed_whole() {
    let _turn = turn(module_path!());
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let long = format!("uprobe:{}", "a".repeat(100_000));
    let out = run_on(&target, &long, &[]);
    assert_clean_failure(&out, 2, "a probe spec of 100007 bytes (uprobe:aaaa");
    assert!(stderr(&out).len() < 300, "{} bytes", stderr(&out).len());
    // A bad character far into a long spec: shown around its caret.
    let bad = format!("uprobe:{} b", "a".repeat(5000));
    let out = run_on(&target, &bad, &[]);
    assert_clean_failure(&out, 2, "(5009 bytes)");
    assert!(stderr(&out).len() < 600, "{} bytes", stderr(&out).len());
    assert!(stderr(&out).contains('^'), "{}", stderr(&out));
}

#[test]
#[ignore = "needs root and the fixtures"]
fn root_without_ptrace_rights_is_not_told_to_run_as_root() {
    let _turn = turn(module_path!());
    // Another user's process, and probetop as root without CAP_SYS_PTRACE (which root
    // needs to read another user's /proc/PID/exe).
    let mut other = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sleep",
            "60",
        ])
        .spawn()
        .expect("setpriv (util-linux)");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let pid = other.id().to_string();
    let out = Command::new("setpriv")
        .args(["--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"])
        .arg(env!("CARGO_BIN_EXE_probetop"))
        .args(["--pid", &pid, "-e", "uprobe:x", "--no-tui"])
        .output()
        .expect("setpriv probetop");
    let _ = other.kill();
    let _ = other.wait();
    assert_clean_failure(&out, 1, &format!("cannot read /proc/{pid}/exe"));
    let err = stderr(&out);
    assert!(!err.contains("run probetop as root"), "{err}");
    assert!(err.contains("without CAP_SYS_PTRACE"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Every number flag at and past its edges (issue 30: `--interval 1e19` and others
/// panicked, `--clock-seconds -1` and `--auto-above nan` were taken): refused by the
/// parser in one line naming the flag and the value, exit 2, before anything is looked
/// up; the edges themselves are taken (the run then fails on the pid that is not there).
#[test]
fn every_number_flag_is_range_checked_in_one_line() {
    let _turn = turn(module_path!());
    const RUN: &[&str] = &["--pid", "4999999", "-e", "uprobe:x", "--no-tui"];
    let refused: &[(&[&str], &str, &str)] = &[
        (RUN, "--pid", "0"),
        (RUN, "--pid", "4294967295"),
        (RUN, "--duration", "0"),
        (RUN, "--duration", "1e300"),
        (RUN, "--duration", "inf"),
        (RUN, "--duration", "nan"),
        (RUN, "--interval", "1e19"),
        (RUN, "--interval", "0.001"),
        (RUN, "--interval", "nan"),
        (RUN, "--in-situ-window", "1e300"),
        (RUN, "--in-situ-window", "0.01"),
        (RUN, "--clock-seconds", "1e19"),
        (RUN, "--clock-seconds", "-1"),
        (RUN, "--clock-seconds", "inf"),
        (RUN, "--auto-above", "nan"),
        (RUN, "--auto-above", "0"),
        (RUN, "--auto-above", "-inf"),
        (RUN, "--args", "13"),
        (RUN, "--max-probes", "0"),
        (RUN, "--max-probes", "18446744073709551616"),
        (RUN, "--ring-mib", "0"),
        (RUN, "--ring-mib", "3"),
        (RUN, "--ring-mib", "4096"),
        (RUN, "--ring-kib", "2"),
        (RUN, "--sample-every", "0"),
        (RUN, "--time-every", "0"),
        (RUN, "--time-every", "1e3"),
        (&["calibrate"], "--reps", "2"),
        (&["calibrate"], "--reps", "1001"),
        (&["calibrate"], "--cold-data-mib", "nan"),
        (&["calibrate"], "--cold-code-mib", "-1"),
        (&["calibrate"], "--cold-iters", "0"),
        (&["list"], "--pid", "0"),
    ];
    for (base, flag, value) in refused {
        let arg = format!("{flag}={value}");
        let out = run(&[base, &[arg.as_str()][..]].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert_eq!(err.lines().count(), 1, "{flag} {value}: {err}");
        assert!(
            err.starts_with(&format!("probetop: {flag} {value}: ")),
            "{flag} {value}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    let taken: &[(&str, &str)] = &[
        ("--duration", "31536000"),
        ("--duration", "0.001"),
        ("--interval", "0.01"),
        ("--interval", "3600"),
        ("--in-situ-window", "3600"),
        ("--clock-seconds", "0"),
        ("--clock-seconds", "3600"),
        ("--auto-above", "1e9"),
        ("--args", "12"),
        ("--max-probes", "1000000"),
        ("--ring-mib", "2048"),
        ("--sample-every", "1000000000"),
        ("--time-every", "1"),
    ];
    for (flag, value) in taken {
        let arg = format!("{flag}={value}");
        let out = run(&[RUN, &[arg.as_str()][..]].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{flag} {value}: {err}");
        assert!(!err.contains(&format!("{flag} {value}")), "{err}");
    }
}

/// `--budget` of 0, a negative, over 100% or what does not parse: one line naming the
/// flag and the value, exit 2, before anything is looked up; a budget in range is taken
/// (the run then fails on the pid that is not there).
#[test]
fn a_budget_out_of_range_or_unparseable_is_one_line() {
    let _turn = turn(module_path!());
    const RUN: &[&str] = &["--pid", "4999999", "-e", "uprobe:x", "--no-tui"];
    for value in [
        "0", "0%", "-1", "-5%", "101%", "1e9", "abc", "2%%", "20ms", "-20ms/s", "nan",
    ] {
        let arg = format!("--budget={value}");
        let out = run(&[RUN, &[arg.as_str()][..]].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{value}: {err}");
        assert_eq!(err.lines().count(), 1, "{value}: {err}");
        assert!(
            err.starts_with(&format!("probetop: --budget {value}: give a share")),
            "{value}: {err}"
        );
    }
    for value in ["2%", "0.5", "100%", "20ms/s"] {
        let arg = format!("--budget={value}");
        let out = run(&[RUN, &[arg.as_str()][..]].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{value}: {err}");
    }
    // Two drivers of the attachment at once are refused in one line.
    let out = run(&[RUN, &["--budget", "2%", "--in-situ"][..]].concat());
    assert_clean_failure(&out, 2, "--budget");
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}
