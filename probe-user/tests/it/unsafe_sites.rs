//! Sites where a probe would hurt the target, refused or kept where they do no harm: a
//! USDT site in the `nop; nop5` form stays on its nop (on the nop5, a kernel that
//! optimizes probed nop5s writes a call's return address into the leaf function's red
//! zone), a `FUNC+OFFSET` on a 5-byte nop past the entry is refused unless `--force`,
//! and notes off an instruction boundary, on another instruction than a nop, or with a
//! semaphore outside `.probes` are refused while the others attach. The fixtures count
//! what a probe changed in them (fixtures/c/redzone.c, fixtures/c/badnotes.c).

use std::process::Output;

use crate::common::*;

const CALLS: u64 = 200_000;

/// What one run on a fixture gave.
struct Run {
    report: serde_json::Value,
    /// probetop's stderr, every line.
    stderr: Vec<String>,
    /// The fixture's `done ...` line.
    done: String,
}

/// Starts `fixture` with `--calls CALLS`, attaches probetop with `args`, lets the
/// fixture make its calls and waits for both; both must succeed.
fn run_on(fixture_name: &str, args: &[&str]) -> Run {
    let mut target = started(&fixture(fixture_name), &["--calls", &CALLS.to_string()]);
    let json = export_path(&format!("unsafe-sites-{}.json", target.pid()));
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "--export"])
        .arg(&json)
        .args(args);
    let mut probetop = Running::spawn(cmd);
    let mut stderr = Vec::new();
    // Refusal lines say "attached" too: wait for probetop's own line.
    loop {
        let line = probetop
            .err()
            .next()
            .unwrap_or_else(|| panic!("probetop {args:?} never attached: {stderr:?}"));
        let attached = line.starts_with("probetop: attached");
        stderr.push(line);
        if attached {
            break;
        }
    }
    target.signal(libc::SIGUSR1);
    let done = target.out().wait_for("done ");
    assert!(target.wait().success(), "{fixture_name} died: {done}");
    let status = probetop.wait();
    stderr.extend(probetop.err().rest());
    assert!(status.success(), "probetop {args:?} failed: {stderr:?}");
    Run {
        report: read_export(&json),
        stderr,
        done,
    }
}

fn count(done: &str, key: &str) -> u64 {
    field(done, key) as u64
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether this kernel optimizes probed 5-byte nops, as `probetop list` classes
/// `redzone_entry`, whose first instruction is one.
fn kernel_optimizes_nop5() -> bool {
    let listing = list_json([fixture("c/redzone").as_os_str(), "redzone_entry".as_ref()]);
    listing["points"][0]["cost_class"] == "optimized"
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_nop_nop5_usdt_site_keeps_the_red_zone_in_ring_and_kernel_modes() {
    let _turn = turn(module_path!());
    for mode in ["ring", "kernel"] {
        let run = run_on(
            "c/redzone",
            &[
                "-e",
                "usdt:redzone:site",
                "-e",
                "uprobe:redzone_entry",
                "--mode",
                mode,
            ],
        );
        // Every value the functions kept below %rsp came back as stored.
        assert_eq!(count(&run.done, "calls"), CALLS, "{}", run.done);
        assert_eq!(
            count(&run.done, "corrupted_usdt"),
            0,
            "{mode}: {}",
            run.done
        );
        assert_eq!(
            count(&run.done, "corrupted_entry"),
            0,
            "{mode}: {}",
            run.done
        );
        for name in ["redzone:site", "redzone_entry"] {
            let p = probe(&run.report, name);
            assert_eq!(p["hits"], CALLS, "{mode}: {p}");
            assert_eq!(p["dropped"], 0, "{mode}: {p}");
        }
    }
    // `list` names the site the note gives and what is done there.
    let listing = list_json([fixture("c/redzone").as_os_str(), "redzone:*".as_ref()]);
    let points = listing["points"].as_array().expect("points");
    let site = points.iter().find(|p| p["name"] == "redzone:site");
    let site = site.expect("redzone:site listed");
    assert_eq!(site["cost_class"], "emulated-nop", "{site}");
    assert!(site.get("refused").is_none(), "{site}");
    let nop5 = points.iter().find(|p| p["name"] == "redzone:nop5");
    let nop5 = nop5.expect("redzone:nop5 listed");
    if kernel_optimizes_nop5() {
        assert_eq!(nop5["cost_class"], "unsafe", "{nop5}");
        let why = nop5["refused"].as_str().expect("refused, with why");
        assert!(
            why.contains("below %rsp") && why.contains("--force"),
            "{why}"
        );
    } else {
        assert_eq!(nop5["cost_class"], "emulated-nop", "{nop5}");
    }
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_mid_function_nop5_is_refused_unless_forced() {
    let _turn = turn(module_path!());
    if !kernel_optimizes_nop5() {
        // Emulated, as any nop: nothing writes below %rsp.
        let run = run_on("c/redzone", &["-e", "uprobe:redzone_mid+0x5"]);
        assert_eq!(probe(&run.report, "redzone_mid+0x5")["hits"], CALLS);
        assert_eq!(count(&run.done, "corrupted_mid"), 0, "{}", run.done);
        return;
    }
    let target = started(&fixture("c/redzone"), &["--calls", "1"]);
    let pid = target.pid().to_string();
    let refusal = "redzone_mid+0x5 is a 5-byte nop past the function's entry, which this kernel rewrites into a call that writes its return address below %rsp, over the function's red zone; probe another instruction, or give --force to attach anyway";
    // The same site by its address (`uprobe:0xADDR`), refused as its offset is.
    let listing = list_json([fixture("c/redzone").as_os_str(), "redzone_mid".as_ref()]);
    let mid = listing["points"][0]["address"].as_u64().expect("address") + 5;
    let by_address = format!("uprobe:{mid:#x}");
    let by_address_refusal = format!("probetop: {by_address} ({mid:#x}): {refusal}");
    for (spec, needle) in [
        ("uprobe:redzone_mid+0x5", format!("probetop: {refusal}")),
        (by_address.as_str(), by_address_refusal),
        (
            "usdt:redzone:nop5",
            "probetop: USDT probe redzone:nop5 in ".to_string(),
        ),
    ] {
        let out = probetop()
            // A bound, should it attach: the fixture waits for a signal.
            .args(["--pid", &pid, "-e", spec, "--no-tui", "--duration", "3"])
            .output()
            .expect("run probetop");
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{spec}: {err}");
        assert_eq!(err.lines().count(), 1, "{spec}: one line: {err}");
        assert!(err.starts_with(&needle), "{spec}: {err}");
        assert!(err.contains("--force"), "{spec}: {err}");
    }
    drop(target);
    // With --force it is attached, said so, and counted; the fixture shows why it was
    // refused.
    let run = run_on("c/redzone", &["-e", "uprobe:redzone_mid+0x5", "--force"]);
    let warning = run.stderr.iter().find(|l| {
        l.starts_with("probetop: warning: uprobe:redzone_mid+0x5: attached because of --force")
    });
    assert!(warning.is_some(), "{:?}", run.stderr);
    assert_eq!(probe(&run.report, "redzone_mid+0x5")["hits"], CALLS);
    assert!(count(&run.done, "corrupted_mid") > 0, "{}", run.done);
    assert_eq!(count(&run.done, "corrupted_usdt"), 0, "{}", run.done);
}

#[test]
#[ignore = "needs root and the fixtures"]
fn wrong_notes_are_refused_and_the_others_attach() {
    let _turn = turn(module_path!());
    let run = run_on("c/badnotes", &["-e", "usdt:badnotes:*"]);
    let refused = |name: &str| -> String {
        let head = format!("probetop: usdt:badnotes:*: refused badnotes:{name} in ");
        let lines: Vec<&String> = run.stderr.iter().filter(|l| l.starts_with(&head)).collect();
        assert_eq!(lines.len(), 1, "{name}: {:?}", run.stderr);
        lines[0].clone()
    };
    assert!(
        refused("mid_insn").ends_with(
            "its site badnotes_fn+0x6 is not on an instruction boundary: the nearest are +0x5 and +0xa"
        ),
        "{:?}",
        run.stderr
    );
    assert!(
        refused("not_nop").ends_with(
            "its site badnotes_fn+0xa is `mov %ecx,%eax`, not the nop sys/sdt.h and usdt.h emit there"
        ),
        "{:?}",
        run.stderr
    );
    assert!(
        refused("data_sema").contains("is outside the .probes section"),
        "{:?}",
        run.stderr
    );
    // The good ones, one with a semaphore in .probes, count every call; the target's
    // code and its variable are as they were.
    for name in ["badnotes:good", "badnotes:sema"] {
        assert_eq!(probe(&run.report, name)["hits"], CALLS, "{name}");
    }
    assert_eq!(run.report["probes"].as_array().map(Vec::len), Some(2));
    assert_eq!(count(&run.done, "corrupted"), 0, "{}", run.done);
    assert_eq!(count(&run.done, "live_changed"), 0, "{}", run.done);
    // `list` says why.
    let listing = list_json([fixture("c/badnotes").as_os_str(), "badnotes:*".as_ref()]);
    let why = |name: &str| {
        listing["points"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .and_then(|p| p.get("refused"))
            .and_then(|r| r.as_str())
            .map(str::to_owned)
    };
    assert!(why("badnotes:mid_insn").is_some_and(|w| w.contains("instruction boundary")));
    assert!(why("badnotes:not_nop").is_some_and(|w| w.contains("mov %ecx,%eax")));
    assert_eq!(why("badnotes:good"), None);
    let warnings = listing["warnings"].to_string();
    assert!(warnings.contains("badnotes:data_sema"), "{warnings}");
    // Alone, a wrong note is one line and exit 1.
    let target = started(&fixture("c/badnotes"), &["--calls", "1"]);
    let out = probetop()
        .args([
            "--pid",
            &target.pid().to_string(),
            "-e",
            "usdt:badnotes:mid_insn",
            "--no-tui",
            "--duration",
            "3",
        ])
        .output()
        .expect("run probetop");
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not on an instruction boundary"), "{err}");
}
