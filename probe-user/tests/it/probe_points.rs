//! Probe points as users name them, attached by pid to fixtures in C, C++, Rust, Go and
//! Python: exact hit counts, USDT argument values, semaphores.

use crate::common::*;

const COUNT: u64 = 500;

fn count_arg() -> String {
    COUNT.to_string()
}

/// Starts a fixture that waits for SIGUSR1, attaches probetop with `args`, lets the
/// fixture make its COUNT passes, and returns probetop's JSON export.
fn measure_fixture(binary: &str, args: &[&str]) -> serde_json::Value {
    let target = started(
        &fixture(binary),
        &["--wait-signal", "--count", &count_arg()],
    );
    measure(target.pid(), args, || target.signal(libc::SIGUSR1))
}

/// The Python fixture `python/SCRIPT` under python3, started and waiting for SIGUSR1 to
/// make its COUNT passes.
fn python_fixture(script: &str) -> Running {
    let mut command = std::process::Command::new("python3");
    command.arg(fixture(&format!("python/{script}"))).args([
        "--wait-signal",
        "--count",
        &count_arg(),
    ]);
    let target = Running::spawn(command);
    target.out().wait_for("ready pid=");
    target
}

#[test]
#[ignore = "needs root and the fixtures"]
fn c_usdt_arguments_and_function_values_read_back() {
    let _turn = turn(module_path!());
    let report = measure_fixture(
        "c/probes",
        &[
            "--args",
            "4",
            "-e",
            "usdt:fixture:tick",
            "-e",
            "usdt:fixture:globals",
            "-e",
            "usdt:fixture:indexed",
            "-e",
            "usdt:fixture:constant",
            "-e",
            "uprobe:probe_add",
            "-e",
            "uretprobe:probe_leaf",
        ],
    );
    let last = COUNT - 1;
    for name in [
        "fixture:tick",
        "fixture:globals",
        "fixture:indexed",
        "fixture:constant",
        "probe_add",
        "probe_leaf",
    ] {
        assert_eq!(probe(&report, name)["hits"], COUNT, "{name}");
        assert_eq!(probe(&report, name)["dropped"], 0, "{name}");
    }
    let args = |name: &str| -> Vec<serde_json::Value> {
        probe(&report, name)["last_args"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no last_args"))
            .clone()
    };
    // DTRACE_PROBE4(fixture, tick, i, arr, c, s) with c = (unsigned char)i, s = (short)i.
    let tick = args("fixture:tick");
    assert_eq!(tick[0], last);
    assert!(
        tick[1].as_u64().is_some_and(|p| p > 0x1000),
        "arr pointer {}",
        tick[1]
    );
    assert_eq!(tick[2], last & 0xff);
    assert_eq!(tick[3], last);
    // fixture_counter (incremented once per call), fixture_table[2], local_static: gcc -O2
    // passes all three %rip-relative.
    assert_eq!(args("fixture:globals"), [COUNT, 3, last]);
    // arr[i & 3], arr[(i + 1) & 3] with arr = {10, 20, 30, 40}: indexed operands.
    let arr = [10u64, 20, 30, 40];
    assert_eq!(
        args("fixture:indexed"),
        [arr[(last & 3) as usize], arr[((last + 1) & 3) as usize]]
    );
    assert_eq!(args("fixture:constant"), [42]);
    // probe_add(n, 1): the first two System V argument registers.
    assert_eq!(args("probe_add")[..2], [last, 1]);
    // probe_leaf returns x * 3 + 1.
    assert_eq!(args("probe_leaf"), [last * 3 + 1]);
}

/// A USDT site with twelve arguments (sys/sdt.h's most, libbpf's limit): `--args 12`
/// reads all twelve, not the first six.
#[test]
#[ignore = "needs root and the fixtures"]
fn twelve_usdt_arguments_read_back() {
    let _turn = turn(module_path!());
    let report = measure_fixture("c/probes", &["--args", "12", "-e", "usdt:fixture:dozen"]);
    let dozen = probe(&report, "fixture:dozen");
    assert_eq!(dozen["hits"], COUNT);
    let last = COUNT - 1;
    // DTRACE_PROBE12(fixture, dozen, i, i + 1, ..., i + 11)
    let expected: Vec<u64> = (last..last + 12).collect();
    assert_eq!(dozen["last_args"], serde_json::json!(expected));
}

/// The kernel raises the semaphore while probetop is attached and drops it on every
/// exit, a SIGKILL included; the guarded probe fires while attached.
#[test]
#[ignore = "needs root and the fixtures"]
fn semaphores_are_raised_only_while_attached() {
    let _turn = turn(module_path!());
    for stop in [libc::SIGINT, libc::SIGKILL] {
        let target = started(
            &fixture("c/probes"),
            &["--wait-signal", "--count", &count_arg()],
        );
        let name = "fixture_sema:tick";
        assert_eq!(semaphore(target.pid(), name), 0, "before attach");
        let mut cmd = probetop();
        cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
            .args(["-e", "usdt:fixture_sema:tick"]);
        let mut probetop = Running::spawn(cmd);
        probetop.err().wait_for("attached");
        assert_eq!(semaphore(target.pid(), name), 1, "while attached");
        probetop.signal(stop);
        probetop.wait();
        assert_eq!(semaphore(target.pid(), name), 0, "after signal {stop}");
    }
    // And while attached, the guarded probe fires on every pass.
    let target = started(
        &fixture("c/probes"),
        &["--wait-signal", "--count", &count_arg()],
    );
    let report = measure(target.pid(), &["-e", "usdt:fixture_sema:*"], || {
        target.signal(libc::SIGUSR1)
    });
    assert_eq!(probe(&report, "fixture_sema:tick")["hits"], COUNT);
    assert_eq!(probe(&report, "fixture_sema:twice")["hits"], COUNT);
}

#[test]
#[ignore = "needs root and the fixtures"]
fn cpp_by_demangled_name_and_glob() {
    let _turn = turn(module_path!());
    let report = measure_fixture(
        "cpp/cppfix",
        &[
            "-e",
            "uprobe:dispatch_command",
            "-e",
            "uprobe:shop::Cart::add*",
            "-e",
            "uretprobe:shop::detail::helper",
        ],
    );
    let probes = report["probes"].as_array().expect("probes");
    assert_eq!(
        probes.len(),
        4,
        "dispatch_command, two add overloads, helper: {report}"
    );
    for p in probes {
        assert_eq!(p["hits"], COUNT, "{}", p["name"]);
    }
    assert!(probes.iter().any(|p| p["name"] == "shop::Cart::add(int)"));
    assert!(
        probes
            .iter()
            .any(|p| p["name"] == "shop::Cart::add(shop::Item const&)")
    );
}

#[test]
#[ignore = "needs root and the fixtures"]
fn rust_legacy_and_v0_symbols() {
    let _turn = turn(module_path!());
    for binary in ["rust/rustfix-legacy", "rust/rustfix-v0"] {
        let mut target = started(&fixture(binary), &["--wait-stdin", "--count", &count_arg()]);
        let report = measure(
            target.pid(),
            &[
                "-e",
                "uprobe:rustfix::trace_me",
                "-e",
                "uprobe:rustfix::Worker::step",
            ],
            || target.send_line(),
        );
        let probes = report["probes"].as_array().expect("probes");
        assert_eq!(probes.len(), 2, "{binary}: {report}");
        for p in probes {
            assert_eq!(p["hits"], COUNT, "{binary} {}", p["spec"]);
        }
    }
}

#[test]
#[ignore = "needs root and the fixtures"]
fn go_functions_and_refused_return_probes() {
    let _turn = turn(module_path!());
    let target = started(
        &fixture("go/gofix"),
        &["--wait-signal", "--count", &count_arg()],
    );
    let refused = probetop()
        .args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["-e", "uretprobe:main.traceMe"])
        .output()
        .expect("probetop");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("Go") && stderr.contains("--force"),
        "{stderr}"
    );

    let report = measure(
        target.pid(),
        &[
            "-e",
            "uprobe:main.traceMe",
            "-e",
            "uprobe:main.(*Worker).Step",
        ],
        || target.signal(libc::SIGUSR1),
    );
    assert_eq!(probe(&report, "main.traceMe")["hits"], COUNT);
    assert_eq!(probe(&report, "main.(*Worker).Step")["hits"], COUNT);
}

#[test]
#[ignore = "needs root and the fixtures"]
fn python_ctypes_library_usdt_with_semaphore() {
    let _turn = turn(module_path!());
    let target = python_fixture("pyprobes.py");
    let report = measure(
        target.pid(),
        &[
            "--args",
            "2",
            "-e",
            "usdt:pyprobes:call",
            "-e",
            "usdt:libpyprobes:pyprobes:done",
        ],
        || target.signal(libc::SIGUSR1),
    );
    let call = probe(&report, "pyprobes:call");
    assert_eq!(call["hits"], COUNT);
    assert_eq!(call["last_args"][0], COUNT - 1);
    assert_eq!(probe(&report, "pyprobes:done")["hits"], 1);
}

/// pyusdt's second method: a CPython extension module whose USDT site is the `nop; nop5`
/// form libbpf/usdt's usdt.h emitted from Dec 2025 to May 2026. Every call from Python
/// is counted, with its argument, beside a uprobe on the C function that holds the site.
/// The USDT probe is on the nop its note names, emulated, on every kernel: on the nop5 a
/// kernel that optimizes it would write a call's return address below %rsp.
#[test]
#[ignore = "needs root and the fixtures"]
fn python_extension_module_nop_nop5_usdt() {
    let _turn = turn(module_path!());
    let target = python_fixture("pyusdtext.py");
    // Not a `libNAME`: the module is named by its path.
    let module = fixture("python/pyusdtext.abi3.so");
    let function = format!("uprobe:{}:pyusdtext_fire", module.display());
    let report = measure(
        target.pid(),
        &["--args", "1", "-e", "usdt:pyusdtext:fire", "-e", &function],
        || target.signal(libc::SIGUSR1),
    );
    let fire = probe(&report, "pyusdtext:fire");
    assert_eq!(fire["hits"], COUNT, "{fire}");
    assert_eq!(fire["dropped"], 0, "{fire}");
    assert_eq!(fire["last_args"][0], COUNT - 1, "{fire}");
    assert_eq!(probe(&report, "pyusdtext_fire")["hits"], COUNT);
    assert_eq!(fire["cost_class"], "emulated-nop", "{fire}");
}

/// Non-PIE, and stripped copies whose symbols come from a debuglink file or from
/// MiniDebugInfo: every kind attaches by pid with exact counts.
#[test]
#[ignore = "needs root and the fixtures"]
fn non_pie_and_stripped_binaries() {
    let _turn = turn(module_path!());
    for binary in ["c/probes-nopie", "c/probes-debuglink", "c/probes-minidebug"] {
        let report = measure_fixture(
            binary,
            &[
                "-e",
                "uprobe:probe_add",
                "-e",
                "uretprobe:probe_leaf",
                "-e",
                "usdt:fixture:tick",
            ],
        );
        for name in ["probe_add", "probe_leaf", "fixture:tick"] {
            assert_eq!(probe(&report, name)["hits"], COUNT, "{binary} {name}");
        }
    }
}

/// A function of a shared library named by library name, entry and return, and specs
/// read from a file.
#[test]
#[ignore = "needs root and the fixtures"]
fn library_functions_by_library_name_from_a_spec_file() {
    let _turn = turn(module_path!());
    let target = python_fixture("pyprobes.py");
    let specs = export_path("specs.txt");
    std::fs::write(
        &specs,
        "# the library's entry points\nuprobe:libpyprobes:pyprobes_call\n\nuretprobe:libpyprobes:pyprobes_call  # and returns\n",
    )
    .expect("spec file");
    let report = measure(
        target.pid(),
        &["-f", specs.to_str().expect("utf-8 path")],
        || target.signal(libc::SIGUSR1),
    );
    let probes = report["probes"].as_array().expect("probes");
    assert_eq!(probes.len(), 2, "{report}");
    for p in probes {
        assert_eq!(p["hits"], COUNT, "{}", p["spec"]);
        assert!(
            p["object"]
                .as_str()
                .is_some_and(|o| o.ends_with("libpyprobes.so")),
            "{}",
            p["object"]
        );
    }
}

#[test]
#[ignore = "needs root and the fixtures"]
fn rust_return_probes() {
    let _turn = turn(module_path!());
    let mut target = started(
        &fixture("rust/rustfix-legacy"),
        &["--wait-stdin", "--count", &count_arg()],
    );
    let report = measure(
        target.pid(),
        &["--args", "1", "-e", "uretprobe:rustfix::trace_me"],
        || target.send_line(),
    );
    let p = probe(&report, "rustfix::trace_me");
    assert_eq!(p["hits"], COUNT);
    assert!(p["last_args"][0].is_u64(), "return value captured: {p}");
}

/// libc's `strlen` is an IFUNC: its symbol is the resolver, which ran once at load. The
/// probe goes where the target's calls go (the implementation the resolver chose, read
/// from the target's GOT) and counts every call; the row keeps the name the user wrote,
/// with the implementation beside it. `calloc`, a weak alias of `__libc_calloc`, is
/// named as written too.
#[test]
#[ignore = "needs root and the fixtures"]
fn ifunc_and_alias_probes_count_every_call_under_the_name_written() {
    let _turn = turn(module_path!());
    const CALLS: u64 = 100_000;
    let target = started(&fixture("c/libcalls"), &["--count", &CALLS.to_string()]);
    let report = measure(
        target.pid(),
        &["-e", "uprobe:libc:strlen", "-e", "uprobe:libc:calloc"],
        || target.signal(libc::SIGUSR1),
    );
    let strlen = probe(&report, "strlen");
    assert_eq!(strlen["hits"], CALLS, "{strlen}");
    let chosen = strlen["resolved"]
        .as_str()
        .expect("strlen's implementation named");
    // `__strlen_avx2` or another; a libc without symbols for it gives the address.
    assert!(
        chosen != "strlen"
            && (chosen.contains("strlen") || chosen.starts_with("implementation at")),
        "{chosen}"
    );
    let calloc = probe(&report, "calloc");
    assert_eq!(calloc["hits"], CALLS, "{calloc}");
    assert_eq!(calloc["resolved"], "__libc_calloc");
}

/// A pattern that matches an IFUNC probes the implementation too (it kept the resolver,
/// which counted nothing, with a warning): `strl?n` matches `strlen` alone.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_pattern_matching_an_ifunc_probes_the_implementation() {
    let _turn = turn(module_path!());
    const CALLS: u64 = 100_000;
    let target = started(&fixture("c/libcalls"), &["--count", &CALLS.to_string()]);
    let report = measure(target.pid(), &["-e", "uprobe:libc:strl?n"], || {
        target.signal(libc::SIGUSR1)
    });
    let strlen = probe(&report, "strlen");
    assert_eq!(strlen["hits"], CALLS, "{strlen}");
    let chosen = strlen["resolved"].as_str().unwrap_or_default();
    assert!(
        chosen.contains("strlen") || chosen.starts_with("implementation at"),
        "{strlen}"
    );
}

/// `uprobe:[OBJECT:]0xADDR`: the address `probetop list` shows, at a function's entry
/// and at a later instruction, counts every call under the function's name; an address
/// off an instruction boundary is refused in one line, as `FUNC+OFFSET` is.
#[test]
#[ignore = "needs root and the fixtures"]
fn functions_by_address() {
    let _turn = turn(module_path!());
    let binary = fixture("c/probes");
    let listing = list_json([binary.as_os_str(), "probe_add".as_ref()]);
    let address = listing["points"][0]["address"]
        .as_u64()
        .expect("probe_add's address");
    let offsets = instruction_offsets(&binary, "probe_add");
    let later = offsets[1];
    let entry_spec = format!("uprobe:{}:{address:#x}", binary.display());
    let later_spec = format!("uprobe:{:#x}", address + later);
    let report = measure_fixture("c/probes", &["-e", &entry_spec, "-e", &later_spec]);
    assert_eq!(probe(&report, "probe_add")["hits"], COUNT);
    assert_eq!(
        probe(&report, &format!("probe_add+{later:#x}"))["hits"],
        COUNT
    );
    // Inside an instruction of more than one byte.
    let inside = offsets
        .windows(2)
        .find(|w| w[1] - w[0] > 1)
        .map(|w| w[0] + 1)
        .expect("probe_add has an instruction longer than a byte");
    let target = started(&fixture("c/probes"), &["--wait-signal", "--count", "1"]);
    let spec = format!("uprobe:{:#x}", address + inside);
    let out = probetop()
        .args(["--pid", &target.pid().to_string(), "-e", &spec])
        .args(["--no-tui", "--duration", "3"])
        .output()
        .expect("run probetop");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("{spec} ({:#x})", address + inside))
            && err.contains(&format!(
                "probe_add+{inside:#x} is not on an instruction boundary"
            )),
        "{err}"
    );
}
