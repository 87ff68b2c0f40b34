//! Return probes never kill the target: a C++ fixture (`cpp/cxxthrow`) whose `middle()`
//! has exceptions unwinding through it survives every return probe probetop offers.
//! `uretprobe:middle` is refused in one line (the kernel's trampoline address where
//! the return address was makes the unwinder terminate the process); `uprobe:middle+ret`
//! counts each normal return at its `ret` instructions, exactly, and every exception is
//! still caught.

use std::process::ExitStatus;

use crate::common::*;

const CALLS: u64 = 20_000;
/// Every EVERY-th call of middle() throws through it.
const EVERY: u64 = 10;

/// What the fixture did, from its last line:
/// `done calls=N returned=R thrown=T caught=C`.
struct Done {
    calls: u64,
    returned: u64,
    thrown: u64,
    caught: u64,
}

fn cxxthrow() -> Running {
    started(
        &fixture("cpp/cxxthrow"),
        &[
            "--wait-signal",
            "--count",
            &CALLS.to_string(),
            "--every",
            &EVERY.to_string(),
        ],
    )
}

/// Waits for the fixture's exit; its counts if it printed them.
fn finish(target: &mut Running) -> (ExitStatus, Option<Done>) {
    let status = target.wait();
    let done = target
        .out()
        .rest()
        .into_iter()
        .find(|l| l.starts_with("done "))
        .map(|line| {
            let count = |key: &str| field(&line, key) as u64;
            Done {
                calls: count("calls"),
                returned: count("returned"),
                thrown: count("thrown"),
                caught: count("caught"),
            }
        });
    (status, done)
}

/// The fixture ran to its end with every exception caught.
fn unharmed(target: &mut Running) -> Done {
    let (status, done) = finish(target);
    let stderr = target.err().rest();
    assert!(status.success(), "cxxthrow: {status:?} {stderr:?}");
    let done = done.expect("done line");
    assert_eq!(done.calls, CALLS);
    assert_eq!(done.thrown, CALLS / EVERY);
    assert_eq!(done.caught, done.thrown, "every exception caught");
    assert_eq!(done.returned + done.thrown, done.calls);
    done
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_uretprobe_an_exception_can_unwind_through_is_refused_in_one_line() {
    let _turn = turn(module_path!());
    let mut target = cxxthrow();
    // A duration, so that a probetop that attaches (as it did before the refusal)
    // ends and fails the test rather than waiting for a target that waits for it.
    let out = probetop()
        .args([
            "--pid",
            &target.pid().to_string(),
            "--no-tui",
            "--duration",
            "3",
        ])
        .args(["-e", "uretprobe:middle"])
        .output()
        .expect("run probetop");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    for words in [
        "uretprobe:middle",
        "exception",
        "`uprobe:middle+ret`",
        "--force",
    ] {
        assert!(lines[0].contains(words), "{words:?} in {stderr}");
    }
    target.signal(libc::SIGUSR1);
    unharmed(&mut target);
}

/// The refusal guards a real hazard: forced, the uretprobe kills the target at its
/// first exception, as bpftrace's does. (If a kernel ever keeps the unwinder working
/// through its trampoline, this fails, and the refusal can go.)
#[test]
#[ignore = "needs root and the fixtures"]
fn forced_the_uretprobe_kills_the_target_at_its_first_exception() {
    let _turn = turn(module_path!());
    let mut target = cxxthrow();
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "--force"])
        .args(["-e", "uretprobe:middle"]);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    target.signal(libc::SIGUSR1);
    let (status, done) = finish(&mut target);
    let stderr = target.err().rest().join("\n");
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?} {stderr}");
    assert!(done.is_none());
    assert!(stderr.contains("terminate called"), "{stderr}");
    let status = probetop.wait();
    assert!(status.success(), "{:?}", probetop.err().rest());
}

/// `uprobe:middle+ret`, on both attach paths: one hit per normal return, none for a
/// call an exception left, and the exceptions still reach main's handler. The entry
/// probe beside it counts every call.
#[test]
#[ignore = "needs root and the fixtures"]
fn ret_sites_count_every_normal_return_and_exceptions_are_still_caught() {
    let _turn = turn(module_path!());
    for path in ["uprobe_multi", "perf_event"] {
        if path == "uprobe_multi" && !multi_links_expected() {
            continue;
        }
        let mut target = cxxthrow();
        let json = export_path(&format!("returns-{path}.json"));
        let mut cmd = probetop();
        cmd.env("PROBETOP_ATTACH_PATH", path)
            .args(["--pid", &target.pid().to_string(), "--no-tui", "--export"])
            .arg(&json)
            .args(["-e", "uprobe:middle+ret", "-e", "uprobe:middle"]);
        let mut probetop = Running::spawn(cmd);
        probetop.err().wait_for("attached 2 probes");
        target.signal(libc::SIGUSR1);
        let done = unharmed(&mut target);
        let status = probetop.wait();
        assert!(status.success(), "{path}: {:?}", probetop.err().rest());
        let report = read_export(&json);
        let returns = probe(&report, "middle(long, long)+ret");
        assert_eq!(returns["spec"], "uprobe:middle+ret", "{returns}");
        assert_eq!(returns["hits"], done.returned, "{path}: {returns}");
        assert_eq!(returns["dropped"], 0);
        let entries = probe(&report, "middle(long, long)");
        assert_eq!(entries["hits"], done.calls, "{path}: {entries}");
    }
}

/// A leaf of the same C++ program runs no code an exception could come from: its
/// uretprobe is not refused, and counts every call.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_leafs_uretprobe_in_a_cpp_program_is_attached() {
    let _turn = turn(module_path!());
    let mut target = cxxthrow();
    let report = measure(target.pid(), &["-e", "uretprobe:leaf"], || {
        target.signal(libc::SIGUSR1)
    });
    let done = unharmed(&mut target);
    assert_eq!(probe(&report, "leaf(long)")["hits"], done.calls);
}

/// probetop's reading of `.eh_frame_hdr` and `.eh_frame` (which functions have an unwind
/// entry: one without is never refused) agrees with readelf's, function by function,
/// those with entries (the fixture's own) and those without (some of crt's).
#[test]
#[ignore = "needs the fixtures and binutils"]
fn unwind_entries_are_read_as_readelf_reads_them() {
    let _turn = turn(module_path!());
    let path = fixture("cpp/cxxthrow");
    let run = |tool: &str, args: &[&str]| -> String {
        let out = output_ok(std::process::Command::new(tool).args(args).arg(&path), tool);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let hex = |s: &str| u64::from_str_radix(s, 16).expect("hex");
    let ranges: Vec<(u64, u64)> = run("readelf", &["--debug-dump=frames"])
        .lines()
        .filter_map(|l| l.split_once(" pc=")?.1.split_once(".."))
        .map(|(a, b)| (hex(a), hex(b.trim())))
        .collect();
    assert!(!ranges.is_empty());
    let data = std::fs::read(&path).expect("read fixture");
    let table = probe_user::inner::resolve::unwind::FdeTable::read(&data).expect("table");
    let (mut with, mut without) = (0, 0);
    for line in run("nm", &[]).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [address, "t" | "T", name] = fields.as_slice() else {
            continue;
        };
        let address = hex(address);
        let readelf = ranges.iter().any(|&(a, b)| a <= address && address < b);
        assert_eq!(
            table.covers(address),
            Some(readelf),
            "{name} at {address:#x}"
        );
        if readelf {
            with += 1;
        } else {
            without += 1;
        }
    }
    assert!(with >= 4 && without >= 1, "{with} with, {without} without");
}
