//! The kernels scenario's dispatch checks: where fentry works (6.1, 6.12), probetop times
//! the kernel's handling of its uretprobe's every return and counts none of its own hits
//! as another tool's uprobes, while a second probetop's hits on the same process (the
//! `foreign` step's `other` run) are counted as such, every one: as other tools'
//! dispatches, or, where probetop counts the other's site with a probe of its own (it
//! watches every probe on its target), as hits of that site's row (`"own": false`).

use serde_json::Value;

use super::Boot;

/// The uretprobe of the probe runs, whose returns must all be timed.
const RETPROBE: &str = "uretprobe:leaf_ret";

/// A row's expected, got and verdict.
pub(super) type Verdict = (String, String, bool);

/// The dispatch counts of a step's export: exact. Until 88908e6 they let one dispatch pass
/// either way for a "rare race under TCG"; it was the dispatch state kept per CPU, which
/// a thread moving between CPUs (inside the uprobe path, or between the halves of a
/// single-stepped hit) left stale. The scenario now moves the fixture between CPUs every
/// 10 ms, which made the old programs miss by 8-34 every run; the state is per thread.
/// No dispatch goes untimed either: the fixture makes its calls only once probetop has
/// attached, so every dispatch's start is seen.
pub(super) fn judge(boot: &Boot, step: &str, calls: u64, foreign: u64) -> Verdict {
    let expected = format!("{calls} returns timed, {foreign} other, 0 untimed");
    // `foreign` other: dispatches, or hits of others' rows.
    let Some(export) = boot.export(step).and_then(|j| serde_json::from_str(j).ok()) else {
        return (expected, "no export".to_owned(), false);
    };
    let (got, exact) = read(&export, calls, foreign);
    (expected, got, exact)
}

/// Returns timed, other tools' dispatches, dispatches untimed, and the hits of other
/// tools' probes counted as rows of their own.
fn counts(export: &Value) -> [Option<u64>; 4] {
    let probes = export["probes"].as_array();
    let returns = probes
        .and_then(|probes| probes.iter().find(|p| p["spec"] == RETPROBE))
        .and_then(|p| p["dispatch_ns"]["return"]["count"].as_u64());
    let rows = probes.map(|probes| {
        probes
            .iter()
            .filter(|p| p["own"] == false)
            .filter_map(|p| p["hits"].as_u64())
            .sum()
    });
    [
        returns,
        export["cost"]["other_uprobe_dispatch"]["count"].as_u64(),
        export["cost"]["dispatch_unmeasured"].as_u64(),
        rows,
    ]
}

fn read(export: &Value, calls: u64, foreign: u64) -> (String, bool) {
    let [returns, other, untimed, rows] = counts(export);
    let hooks = &export["cost"]["dispatch_hooks"];
    // "uprobe_notify_resume at the int3 trampoline" -> "uprobe_notify_resume".
    let by = hooks["returns"]
        .as_str()
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or("-");
    let show = |n: Option<u64>| n.map_or("-".to_owned(), |n| n.to_string());
    let rows_said = match rows {
        Some(n) if n > 0 => format!(" ({n} as others' rows)"),
        _ => String::new(),
    };
    let others = other.map(|o| o + rows.unwrap_or(0));
    (
        format!(
            "{} returns by {by}, {} other{rows_said}, {} untimed",
            show(returns),
            show(others),
            show(untimed)
        ),
        returns == Some(calls) && others == Some(foreign) && untimed == Some(0),
    )
}

/// The second probetop's own count: the foreign hits the first must have seen.
pub(super) fn foreign_hits(boot: &Boot) -> Option<u64> {
    let export: Value = serde_json::from_str(boot.export("other")?).ok()?;
    export["probes"].as_array()?.first()?["hits"].as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export(returns: u64, other: u64) -> Value {
        export_untimed(returns, other, 0)
    }

    fn export_untimed(returns: u64, other: u64, untimed: u64) -> Value {
        serde_json::from_str(&format!(
            r#"{{"probes": [{{"spec": "{RETPROBE}", "dispatch_ns": {{"return": {{"count": {returns}}}}}}}],
               "cost": {{"other_uprobe_dispatch": {{"count": {other}}}, "dispatch_unmeasured": {untimed},
                         "dispatch_hooks": {{"entries": "uprobe_notify_resume",
                                             "returns": "uprobe_handle_trampoline (int3 trampoline: uprobe_notify_resume)"}}}}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn every_return_timed_and_no_own_hit_as_other() {
        assert_eq!(
            read(&export(20, 0), 20, 0),
            (
                "20 returns by uprobe_handle_trampoline, 0 other, 0 untimed".to_owned(),
                true
            )
        );
        // probetop's own returns counted as other uprobes: what 6.1 did.
        assert!(!read(&export(0, 20), 20, 0).1);
        assert!(read(&export(20, 20), 20, 20).1);
        assert!(!read(&export(20, 19), 20, 20).1);
        // A dispatch whose start went unseen: the count is not the whole story.
        assert!(!read(&export_untimed(20, 0, 1), 20, 0).1);
        // Beside another tool, exact: one off either way fails.
        let boot = |returns: u64, other: u64| {
            let json = export(returns, other).to_string();
            Boot::parse(
                &format!("PT JSON foreign {json}\nPT END uptime=1.0\n"),
                false,
            )
        };
        assert!(judge(&boot(20_000, 20_000), "foreign", 20_000, 20_000).2);
        assert!(!judge(&boot(19_999, 20_000), "foreign", 20_000, 20_000).2);
        assert!(!judge(&boot(20_000, 20_001), "foreign", 20_000, 20_000).2);
        // The other probetop's site counted by a probe of the first's own: its hits are
        // that row's, and no dispatch is another tool's.
        let mut counted = export(20, 0);
        counted["probes"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"own": false, "hits": 20}));
        assert_eq!(
            read(&counted, 20, 20),
            (
                "20 returns by uprobe_handle_trampoline, 20 other (20 as others' rows), 0 untimed"
                    .to_owned(),
                true
            )
        );
        assert!(!read(&counted, 20, 0).1);
        counted["probes"][1]["hits"] = 19.into();
        assert!(!read(&counted, 20, 20).1);
        // Dispatch not measured at all.
        let none: Value = serde_json::from_str(r#"{"probes": [], "cost": {}}"#).unwrap();
        assert_eq!(
            read(&none, 20, 0),
            ("- returns by -, - other, - untimed".to_owned(), false)
        );
    }
}
