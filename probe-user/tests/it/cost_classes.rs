//! Cost classes of real probe sites, checked against objdump's reading of the same
//! bytes: USDT sites are nops (emulated), frame-pointer prologues are `push %rbp`
//! (emulated), and the calibration workload in probetop's own binary has one function
//! per class.

use std::path::Path;

use crate::common::*;

/// `probetop list --json PATH`: the points.
fn listed(path: &Path) -> Vec<serde_json::Value> {
    let listing = list_json([path]);
    listing["points"].as_array().expect("points").clone()
}

/// objdump's first instruction at `address` of `path`: (mnemonic, operands).
fn objdump_first(path: &Path, address: u64) -> Option<(String, String)> {
    let out = std::process::Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "-M", "att"])
        .arg(format!("--start-address={address:#x}"))
        .arg(format!("--stop-address={:#x}", address + 16))
        .arg(path)
        .output()
        .expect("objdump (binutils) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("{address:x}:");
    let line = text.lines().find(|l| l.trim_start().starts_with(&prefix))?;
    let insn = line.split_once(':')?.1.trim();
    let (mnemonic, operands) = insn.split_once(char::is_whitespace).unwrap_or((insn, ""));
    Some((mnemonic.to_string(), operands.trim().to_string()))
}

/// The class the kernel's rules give the common prologue instructions, by objdump's
/// reading; None for instructions this cross-check does not cover.
fn expected_class(mnemonic: &str, operands: &str) -> Option<&'static str> {
    match mnemonic {
        "push" if operands.starts_with('%') && !operands.starts_with("%r") => Some("emulated-push"),
        "push" if operands.starts_with("%r") => Some("emulated-push"),
        "nop" if operands.is_empty() => Some("emulated-nop"),
        "endbr64" | "mov" | "movl" | "movq" | "lea" | "sub" | "xor" | "ret" | "test" | "cmp"
        | "imul" => Some("single-stepped"),
        "jmp" if !operands.starts_with('*') => Some("emulated-branch"),
        _ => None,
    }
}

fn check_against_objdump(relative: &str) -> usize {
    let path = fixture(relative);
    let mut checked = 0;
    for point in listed(&path) {
        let address = point["address"].as_u64().expect("address");
        let class = point["cost_class"].as_str().expect("cost_class");
        let Some((mnemonic, operands)) = objdump_first(&path, address) else {
            continue;
        };
        if let Some(expected) = expected_class(&mnemonic, &operands) {
            assert_eq!(
                class, expected,
                "{relative}: {} at {address:#x} is `{mnemonic} {operands}`",
                point["name"]
            );
            checked += 1;
        }
    }
    checked
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn usdt_sites_are_emulated_nops() {
    let _turn = turn(module_path!());
    let path = fixture("c/probes");
    let usdt: Vec<_> = listed(&path)
        .into_iter()
        .filter(|p| p["kind"] == "usdt")
        .collect();
    assert!(usdt.len() >= 5, "{usdt:?}");
    for p in &usdt {
        assert_eq!(p["cost_class"], "emulated-nop", "{p}");
        assert_eq!(p["instruction"], "nop", "{p}");
    }
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures) and objdump"]
fn fixture_functions_agree_with_objdump() {
    let _turn = turn(module_path!());
    for relative in ["c/probes", "c/probes-nopie", "c/workload", "cpp/cppfix"] {
        let checked = check_against_objdump(relative);
        assert!(
            checked >= 3,
            "{relative}: only {checked} points cross-checked"
        );
    }
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn workload_functions_start_with_push() {
    let _turn = turn(module_path!());
    let path = fixture("c/workload");
    let points = listed(&path);
    for name in ["work_unit", "leaf_ret"] {
        let p = points
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed"));
        assert_eq!(p["cost_class"], "emulated-push", "{p}");
        assert_eq!(p["instruction"], "push %rbp", "{p}");
    }
}

#[test]
fn calibration_workload_has_one_function_per_class() {
    let _turn = turn(module_path!());
    let path = Path::new(env!("CARGO_BIN_EXE_probetop"));
    let points = listed(path);
    let class_of = |name: &str| {
        let p = points
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed"));
        (
            p["cost_class"].as_str().unwrap_or_default().to_string(),
            p["instruction"].as_str().unwrap_or_default().to_string(),
        )
    };
    assert_eq!(class_of("probetop_cal_emulated").0, "emulated-push");
    let (class, insn) = class_of("probetop_cal_sstep");
    assert_eq!(class, "single-stepped");
    assert!(insn.contains("(%rip)"), "{insn}");
    let nop5 = class_of("probetop_cal_nop5").0;
    let optimizing = std::fs::read_to_string("/proc/kallsyms")
        .is_ok_and(|k| k.lines().any(|l| l.ends_with(" arch_uprobe_optimize")));
    assert_eq!(
        nop5,
        if optimizing {
            "optimized"
        } else {
            "emulated-nop"
        }
    );
    // The USDT note emitted with global_asm! resolves, at the nop.
    assert_eq!(
        class_of("probetop:calibrate"),
        ("emulated-nop".into(), "nop".into())
    );
}

#[test]
#[ignore = "needs root and the fixtures"]
fn list_offers_a_later_site_for_single_stepped_entries_and_a_run_warns() {
    let _turn = turn(module_path!());
    let path = fixture("c/workload");
    let points = listed(&path);
    // Every offer: a single-stepped entry, a later instruction objdump also sees.
    let offers: Vec<&serde_json::Value> = points
        .iter()
        .filter(|p| p.get("later_site").is_some())
        .collect();
    assert!(!offers.is_empty(), "no offer in the workload fixture");
    for p in &offers {
        assert_eq!(p["cost_class"], "single-stepped", "{p}");
        let later = &p["later_site"];
        let offset = later["offset"].as_u64().expect("offset");
        let name = p["name"].as_str().expect("name");
        assert!(
            instruction_offsets(&path, name).contains(&offset),
            "{name}+{offset:#x}"
        );
        assert_ne!(later["class"], "single-stepped", "{p}");
        assert_eq!(later["spec"], format!("uprobe:{name}"), "{p}");
    }
    // Emulated entries get none.
    let work_unit = points.iter().find(|p| p["name"] == "work_unit").unwrap();
    assert!(work_unit.get("later_site").is_none(), "{work_unit}");

    // A run on an offered function says so on stderr, once, and still probes the
    // entry it was asked for.
    let offered = offers[0];
    let name = offered["name"].as_str().unwrap();
    let offset = offered["later_site"]["offset"].as_u64().unwrap();
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let json = export_path("later-site-warning.json");
    let out = output_ok(
        probetop()
            .args([
                "--pid",
                &target.pid().to_string(),
                "--no-tui",
                "--duration",
                "0.5",
            ])
            .args(["-e", &format!("uprobe:{name}"), "-e", "uprobe:work_unit"])
            .arg("--export")
            .arg(&json),
        "probetop",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].starts_with(&format!(
            "probetop: warning: uprobe:{name}: the entry of {name} ("
        )),
        "{stderr}"
    );
    assert!(
        warnings[0].ends_with(&format!(
            "is emulated and reached on every call: use uprobe:{name}+{offset:#x}"
        )) || warnings[0].ends_with(&format!(
            "is optimized and reached on every call: use uprobe:{name}+{offset:#x}"
        )),
        "{stderr}"
    );
    let report = read_export(&json);
    let probe = probe(&report, name);
    assert_eq!(probe["file_offset"], offered["file_offset"], "not moved");
}

/// Warnings at attach on single-stepped entries come dearest first, with what a hit is
/// expected to cost (this machine's calibration): a return probe's (a trap at the entry
/// and the return's) before a plain entry probe's, whatever the specs' order.
#[test]
#[ignore = "needs root and the fixtures"]
fn entry_warnings_come_dearest_first() {
    let _turn = turn(module_path!());
    let cache = calibrated_cache("entry-warnings");
    let target = workload(&["--calls", "1", "--wait-signal"]);
    let specs = ["uprobe:workload_xol", "uretprobe:frame_dummy"];
    let out = output_ok(
        probetop()
            .env("XDG_CACHE_HOME", &cache)
            .args(["--pid", &target.pid().to_string(), "--no-tui"])
            .args(["--duration", "0.3"])
            .args(["-e", specs[0], "-e", specs[1]]),
        "probetop",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("is single-stepped, a second trap on every hit"))
        .collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    let price = |line: &str| -> f64 {
        let (_, after) = line
            .split_once(", ~")
            .unwrap_or_else(|| panic!("no price: {line}"));
        after
            .split_once(" us a hit here")
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or_else(|| panic!("no price: {line}"))
    };
    assert!(
        warnings[0].starts_with(&format!("probetop: warning: {}:", specs[1])),
        "the return probe, dearer, first:\n{stderr}"
    );
    assert!(price(warnings[0]) > price(warnings[1]), "{stderr}");
    let _ = std::fs::remove_dir_all(&cache);
}
