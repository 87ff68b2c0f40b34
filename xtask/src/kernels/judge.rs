//! Judging a boot: one row per check, and the table of them.

use super::*;

pub(super) struct Row {
    pub(super) kernel: String,
    pub(super) step: String,
    pub(super) expected: String,
    pub(super) got: String,
    pub(super) ok: bool,
}

/// One row per step of the scenario (or one for a boot that never ran it).
pub(super) fn judge(kernel: &Kernel, boot: &Boot, calls: u64, sema: u64) -> Vec<Row> {
    let name = match &boot.release {
        Some(release) => format!(
            "{} {}",
            release.trim_end_matches("-cloud-amd64"),
            kernel.suite
        ),
        None => format!("{} {}", kernel.label, kernel.suite),
    };
    let row = |step: &str, expected: String, got: String, ok: bool| Row {
        kernel: name.clone(),
        step: step.to_owned(),
        expected,
        got,
        ok,
    };
    let Some(release) = &boot.release else {
        let got = if boot.timed_out {
            "timed out before the scenario began".to_owned()
        } else {
            boot.crash
                .clone()
                .unwrap_or_else(|| "no scenario on the console".to_owned())
        };
        return vec![row("boot", "the scenario runs".to_owned(), got, false)];
    };
    let refuses = version(release).is_some_and(|v| v < NEEDED);
    let mut rows = Vec::new();
    for &(step, specs, mode, is_sema) in PROBE_RUNS {
        let count = if is_sema { sema } else { calls };
        let (expected, (got, ok)) = if refuses {
            ("refused clearly".to_owned(), judge_refusal(boot, step))
        } else {
            (
                format!("{} x {count} hits, 0 dropped", specs.len()),
                judge_counts(boot, step, specs, mode, count),
            )
        };
        let (expected, got, ok) = if step == DIST_STEP {
            judge_no_libc(boot, expected, got, ok)
        } else if step.starts_with(REDZONE_STEP) && !refuses {
            judge_red_zone(boot, step, expected, got, ok)
        } else {
            (expected, got, ok)
        };
        rows.push(row(step, expected, got, ok));
    }
    if !refuses {
        // Kernel dispatch time: every return of probetop's own uretprobe timed, none
        // of its hits counted as other uprobes, and the second probetop's all counted.
        for step in ["ring", "kernel"] {
            let (expected, got, ok) = dispatch::judge(boot, step, calls, 0);
            rows.push(row(&format!("{step} dispatch"), expected, got, ok));
        }
        let (expected, got, ok) = dispatch::judge(boot, "foreign", calls, calls);
        let other = dispatch::foreign_hits(boot);
        rows.push(row(
            "foreign dispatch",
            format!("{expected} (the other's {calls} hits)"),
            format!(
                "{got} (the other's {})",
                other.map_or("-".to_owned(), |n| n.to_string())
            ),
            ok && other == Some(calls),
        ));
    }
    let (got, ok) = judge_list(boot);
    rows.push(row("list", "work_unit, leaf_ret, USDT".to_owned(), got, ok));
    if !boot.ended {
        let got = if boot.timed_out {
            "timed out".to_owned()
        } else {
            boot.crash
                .clone()
                .unwrap_or_else(|| "the guest stopped early".to_owned())
        };
        rows.push(row("end", "the scenario ends".to_owned(), got, false));
    }
    rows
}

/// The many-CPU boot (init.sh's `pt_smp`): in each mode every call of every thread
/// counted (the fixture's own count of its calls, at least one per thread), none
/// dropped, and the threads seen on every CPU.
pub(super) fn judge_smp(kernel: &Kernel, boot: &Boot, cpus: u32, threads: u64) -> Vec<Row> {
    let name = format!(
        "{} {} -smp {cpus}",
        boot.release
            .as_deref()
            .map_or(kernel.label, |r| r.trim_end_matches("-cloud-amd64")),
        kernel.suite
    );
    let row = |step: &str, expected: String, (got, ok): (String, bool)| Row {
        kernel: name.clone(),
        step: step.to_owned(),
        expected,
        got,
        ok,
    };
    let mut rows = Vec::new();
    for mode in ["ring", "kernel"] {
        let step = format!("smp-{mode}");
        let fixture = boot.relayed("FX", &step);
        let done = fixture
            .iter()
            .find_map(|l| l.strip_prefix("done calls="))
            .and_then(|n| n.trim().parse::<u64>().ok());
        let callers = fixture
            .iter()
            .filter(|l| l.starts_with("tid=") && !l.ends_with(" calls=0"))
            .count() as u64;
        let (got, ok) = judge_counts(
            boot,
            &step,
            &["uprobe:work_unit"],
            mode,
            done.unwrap_or(u64::MAX),
        );
        let prefix = format!("CPUS {step} seen=");
        let seen: HashSet<u32> = boot
            .lines
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(|cpus| {
                cpus.split_whitespace()
                    .filter_map(|c| c.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let all = (0..cpus).all(|c| seen.contains(&c));
        rows.push(row(
            &step,
            format!("the fixture's calls by {threads} threads, 0 dropped, on all {cpus} CPUs"),
            (
                format!(
                    "{got}, the fixture's {} by {callers} threads, on {} CPUs",
                    done.map_or("-".to_owned(), |n| n.to_string()),
                    seen.len()
                ),
                ok && callers == threads && all,
            ),
        ));
    }
    if !boot.ended {
        let got = if boot.timed_out {
            "timed out".to_owned()
        } else {
            boot.crash
                .clone()
                .unwrap_or_else(|| "the guest stopped early".to_owned())
        };
        rows.push(row("smp end", "the scenario ends".to_owned(), (got, false)));
    }
    rows
}

/// "5.10.0-32-cloud-amd64" -> (5, 10).
pub(super) fn version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The step ran to the end with every probe counting every call.
pub(super) fn judge_counts(
    boot: &Boot,
    step: &str,
    specs: &[&str],
    mode: &str,
    count: u64,
) -> (String, bool) {
    let Some((rc, attached)) = boot.rc(step) else {
        return ("did not run".to_owned(), false);
    };
    if rc != 0 || !attached {
        let err = boot
            .relayed("ERR", step)
            .into_iter()
            .rfind(|l| l.starts_with("probetop: "))
            .unwrap_or("")
            .chars()
            .take(60)
            .collect::<String>();
        return (format!("rc={rc} attached={attached}: {err}"), false);
    }
    let Some(json) = boot.export(step) else {
        return ("no export".to_owned(), false);
    };
    let export: serde_json::Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => return (format!("unreadable export: {e}"), false),
    };
    let probes = export["probes"].as_array().cloned().unwrap_or_default();
    let mut hits = Vec::new();
    let mut dropped = 0;
    let mut ok = true;
    for spec in specs {
        let Some(probe) = probes.iter().find(|p| p["spec"] == *spec) else {
            hits.push("-".to_owned());
            ok = false;
            continue;
        };
        let h = probe["hits"].as_u64().unwrap_or(0);
        let d = probe["dropped"].as_u64().unwrap_or(u64::MAX);
        hits.push(h.to_string());
        dropped += d;
        ok &= h == count && d == 0 && probe["mode"] == mode;
    }
    (format!("{}, {dropped} dropped", hits.join("/")), ok)
}

/// The dist run counts only if no libc was there to use: init.sh's `NOLIBC` line must
/// say that the glibc probetop could not start (the loader it names was gone).
pub(super) fn judge_no_libc(
    boot: &Boot,
    expected: String,
    got: String,
    ok: bool,
) -> (String, String, bool) {
    let expected = format!("{expected}, no libc");
    let prefix = format!("NOLIBC {DIST_STEP} glibc_probetop_rc=");
    let rc = boot
        .lines
        .iter()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rc| rc.trim().parse::<i32>().ok());
    match rc {
        Some(rc) if rc != 0 => (expected, format!("{got}, no libc"), ok),
        Some(_) => (expected, format!("{got}, but libc was there"), false),
        None => (expected, format!("{got}, libc not hidden"), false),
    }
}

/// A red-zone run counts only if the fixture found every value it kept below %rsp as
/// it stored it, across the probed USDT site and the probed nop5 entry.
pub(super) fn judge_red_zone(
    boot: &Boot,
    step: &str,
    expected: String,
    got: String,
    ok: bool,
) -> (String, String, bool) {
    let expected = format!("{expected}, 0 values changed below %rsp");
    let done = boot
        .relayed("FX", step)
        .into_iter()
        .find(|l| l.starts_with("done "));
    let changed = done.and_then(|line| {
        let count = |key: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|n| n.parse::<u64>().ok())
        };
        Some(count("corrupted_usdt")? + count("corrupted_entry")?)
    });
    match changed {
        Some(n) => (
            expected,
            format!("{got}, {n} values changed below %rsp"),
            ok && n == 0,
        ),
        None => (expected, format!("{got}, no count from the fixture"), false),
    }
}

/// Every probe run of a kernel without what probetop needs must end before attaching,
/// on probetop's one line, with no verifier log.
pub(super) fn judge_refusal(boot: &Boot, step: &str) -> (String, bool) {
    let Some((rc, attached)) = boot.rc(step) else {
        return ("did not run".to_owned(), false);
    };
    let err = boot.relayed("ERR", step);
    let refusals = err.iter().filter(|l| l.starts_with(REFUSAL)).count();
    let verifier = err.iter().any(|l| l.to_lowercase().contains("verifier"));
    if rc == 1 && !attached && refusals == 1 && !verifier {
        return ("refused clearly".to_owned(), true);
    }
    let last = err.last().copied().unwrap_or("").chars().take(50);
    (
        format!(
            "rc={rc} attached={attached}{}: {}",
            if verifier { ", verifier log" } else { "" },
            last.collect::<String>()
        ),
        false,
    )
}

pub(super) fn judge_list(boot: &Boot) -> (String, bool) {
    let Some((rc, _)) = boot.rc("list") else {
        return ("did not run".to_owned(), false);
    };
    let out = boot.relayed("OUT", "list");
    let missing: Vec<&str> = LISTED
        .iter()
        .copied()
        .filter(|name| !out.iter().any(|l| l.split_whitespace().any(|w| w == *name)))
        .collect();
    if rc == 0 && missing.is_empty() {
        ("all listed".to_owned(), true)
    } else {
        (format!("rc={rc}, missing {}", missing.join(", ")), false)
    }
}

/// The summary: one line per row, the kernel named on its first row only.
pub(super) fn table(rows: &[Row]) -> String {
    let width = |f: fn(&Row) -> &str, title: &str| {
        rows.iter()
            .map(|r| f(r).len())
            .max()
            .unwrap_or(0)
            .max(title.len())
    };
    let (wk, ws, we, wg) = (
        width(|r| &r.kernel, "kernel"),
        width(|r| &r.step, "step"),
        width(|r| &r.expected, "expected"),
        width(|r| &r.got, "got"),
    );
    let mut out = format!(
        "{:wk$}  {:ws$}  {:we$}  {:wg$}  ok\n",
        "kernel", "step", "expected", "got"
    );
    let mut last = "";
    for r in rows {
        let kernel = if r.kernel == last { "" } else { &r.kernel };
        last = &r.kernel;
        out.push_str(&format!(
            "{kernel:wk$}  {:ws$}  {:we$}  {:wg$}  {}\n",
            r.step,
            r.expected,
            r.got,
            if r.ok { "ok" } else { "FAIL" }
        ));
    }
    out
}
