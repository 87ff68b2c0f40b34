//! What `probetop calibrate` prints by default: three lines a user can act on, read
//! off the same rows the estimates price hits with (the price stage's `basis` and
//! `cold_basis`), so the lines say what a run will say. The full table and curves
//! (`Calibration::render_text`) come with `--verbose` or `--thorough`.

use crate::calibrate::table::Calibration;
use crate::insn::classes::CostClass;
use crate::present::{CostBasis, basis, cold_basis};
use crate::spec::ProbeKind;

/// A whole hit with probetop's ring handler (the default mode's price), ns.
fn whole(basis: &CostBasis) -> Option<f64> {
    Some(basis.base_ns? + basis.on_top_ring_ns?)
}

fn us(ns: f64) -> String {
    let us = ns / 1000.0;
    if us < 10.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

/// `0.6 us`, or `0.6-0.7 us` when the two differ as printed.
fn range(values: &[f64]) -> Option<String> {
    let low = values.iter().copied().reduce(f64::min)?;
    let high = values.iter().copied().reduce(f64::max)?;
    let (low, high) = (us(low), us(high));
    Some(if low == high {
        format!("{low} us")
    } else {
        format!("{low}-{high} us")
    })
}

/// The three lines of the result: a hit of the common kinds warm and in a server, the
/// dear and cheap classes, and what the estimates will do with them. Lines whose rows
/// are missing (`--no-cold`, `--no-gap`) say less.
pub(crate) fn result_lines(cal: &Calibration) -> Vec<String> {
    let hot = |class, kind| whole(&basis(cal, class, kind, false));
    let cold = |class, kind| cold_basis(cal, class, kind, false).and_then(|b| whole(&b));
    let common = [CostClass::EmulatedNop, CostClass::EmulatedPush];
    let warm: Vec<f64> = common
        .iter()
        .filter_map(|c| hot(*c, ProbeKind::Uprobe))
        .collect();
    let server: Vec<f64> = common
        .iter()
        .filter_map(|c| cold(*c, ProbeKind::Uprobe))
        .collect();
    // The dearest hit the work curve measured: its walks past the last-level cache.
    let coldest = cal.work.as_ref().and_then(|w| {
        w.beyond
            .iter()
            .chain(&w.points)
            .map(|p| p.ring_ns.median)
            .reduce(f64::max)
    });
    let mut first = match range(&warm) {
        Some(warm) => format!("a hit costs {warm} here with caches warm (USDT or uprobe)"),
        None => "a hit with caches warm was not measured".to_string(),
    };
    if let Some(server) = range(&server) {
        first.push_str(&format!(
            ", {server} in a server whose code evicts the caches between hits"
        ));
    }
    if let Some(coldest) = coldest.filter(|c| warm.iter().all(|w| c > w)) {
        first.push_str(&format!(
            ", up to {} us past the last-level cache",
            us(coldest)
        ));
    }
    let mut second = Vec::new();
    let uret_hot = hot(CostClass::EmulatedPush, ProbeKind::Uretprobe);
    let uret_cold = cold(CostClass::EmulatedPush, ProbeKind::Uretprobe);
    match (uret_hot, uret_cold) {
        (Some(h), Some(c)) => second.push(format!(
            "a uretprobe {} us warm, {} us in a server",
            us(h),
            us(c)
        )),
        (Some(h), None) => second.push(format!("a uretprobe {} us", us(h))),
        _ => {}
    }
    if let Some(step) = hot(CostClass::SingleStepped, ProbeKind::Uprobe) {
        second.push(format!(
            "a single-stepped entry ([sstep]) {} us: probe a later instruction (`probetop list` offers one) or drop it",
            us(step)
        ));
    }
    if cal.optimizes_nop5
        && let Some(nop5) = hot(CostClass::Optimized, ProbeKind::Uprobe)
    {
        second.push(format!("an optimized 5-byte nop {} us", us(nop5)));
    }
    if let Some(event) = &cal.tracefs_event_ns {
        // Per argument and instance in ns: a tenth of a microsecond or less each.
        let more = basis(cal, CostClass::EmulatedPush, ProbeKind::Uprobe, false).tracefs_more;
        let parts: Vec<String> = [
            (more.register_ns, "a register argument"),
            (more.string_ns, "a string argument"),
            (more.instance_ns, "an instance more"),
        ]
        .iter()
        .filter_map(|(ns, what)| Some(format!("+{:.0} ns {what}", (*ns)?)))
        .collect();
        second.push(format!(
            "a tracefs uprobe event (`perf probe`, no BPF) {} us{}",
            us(event.median),
            if parts.is_empty() {
                String::new()
            } else {
                format!(" ({})", parts.join(", "))
            }
        ));
    }
    let mut third = "probetop prices every probe's hits with these on this kernel and CPU (the COST and %CPU columns)".to_string();
    let refused = cal
        .dispatch_error
        .as_deref()
        .is_some_and(|e| e.contains("refused"));
    if cal.dispatch.is_empty() && refused {
        third.push_str(
            "; the kernel's own time per hit is not measured live here (it refuses BPF trampolines)",
        );
    }
    let mut lines = vec![first];
    if !second.is_empty() {
        lines.push(second.join("; "));
    }
    lines.push(third);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_as_printed() {
        assert_eq!(range(&[612.0, 598.0]).as_deref(), Some("0.6 us"));
        assert_eq!(range(&[612.0, 1490.0]).as_deref(), Some("0.6-1.5 us"));
        assert_eq!(range(&[9620.0]).as_deref(), Some("9.6 us"));
        assert_eq!(range(&[12_400.0]).as_deref(), Some("12 us"));
        assert_eq!(range(&[]), None);
    }
}
