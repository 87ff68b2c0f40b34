//! What each resolved probe point will cost, known before anything is attached: the
//! cost class of its site (the probed instruction under this kernel's rules), the
//! calibration's basis for its whole cost, and the warnings for single-stepped entries.
//! The classes and prices are `cost`'s; joining them to points is resolve's.

use crate::attach::dispatch_time::ProbeSite;
use crate::calibrate::table::{self as calibration, Calibration};
use crate::insn::classes::{self, CostClass, KernelRules};
use crate::insn::sites;
use crate::price::{ProbeCost, estimate};
use crate::spec::ProbeKind;

use crate::resolve::{FunctionSpan, ProbePoint};

/// What the cost module knows about a run's probes before they are attached.
pub(crate) struct Prepared {
    /// Per probe id.
    pub costs: Vec<ProbeCost>,
    /// Per probe id: where it sits in the target, for dispatch measurement.
    pub sites: Vec<ProbeSite>,
    /// This machine's calibration, if cached.
    pub calibration: Option<Calibration>,
    /// Why a calibration cache that is there was not used, as one line.
    pub calibration_warning: Option<String>,
}

/// Classifies every probe site and looks up this machine's calibration.
pub(crate) fn prepare(points: &[&ProbePoint]) -> Prepared {
    let rules = KernelRules::running();
    let (calibration, calibration_warning) = match calibration::load_cached() {
        Ok(calibration) => (calibration, None),
        Err(e) => (None, Some(format!("probetop: {e}"))),
    };
    let gap_curve = calibration
        .as_ref()
        .and_then(|c| c.gap.clone())
        .map(std::sync::Arc::new);
    let work_curve = calibration
        .as_ref()
        .and_then(|c| c.work.clone())
        .map(std::sync::Arc::new);
    let sites: Vec<ProbeSite> = points
        .iter()
        .map(|p| ProbeSite {
            kind: p.kind,
            vaddr: p.load_bias.map(|bias| p.address.wrapping_add(bias)),
        })
        .collect();
    let costs =
        points
            .iter()
            .enumerate()
            .map(|(id, p)| {
                let site = classes::classify_file(&p.attach_path, p.file_offset, rules)
                    .unwrap_or_else(|_| classes::SiteClass {
                        class: CostClass::Unknown,
                        instruction: String::new(),
                        reason: Some("cannot read the probed file"),
                    });
                // Past a function's entry an optimized nop5 is unsafe (attached only by
                // --force): said as such, priced as optimized.
                let past_entry = match (&p.function, &p.usdt) {
                    (Some(span), _) => span.offset > 0,
                    (None, Some(usdt)) => !usdt.at_function_entry,
                    (None, None) => false,
                };
                let site = if past_entry { site.past_entry() } else { site };
                // A uretprobe shares its entry breakpoint with an entry probe on the same
                // function, whose cost that breakpoint then is.
                let shares_entry = p.kind == ProbeKind::Uretprobe
                    && points.iter().enumerate().any(|(other, q)| {
                        other != id
                            && q.kind != ProbeKind::Uretprobe
                            && q.attach_path == p.attach_path
                            && q.file_offset == p.file_offset
                    });
                ProbeCost {
                    basis: calibration
                        .as_ref()
                        .map(|c| estimate::basis(c, site.class, p.kind, shares_entry)),
                    cold_basis: calibration
                        .as_ref()
                        .and_then(|c| estimate::cold_basis(c, site.class, p.kind, shares_entry)),
                    site: Some(site),
                    gap_curve: gap_curve.clone(),
                    work_curve: work_curve.clone(),
                    ..Default::default()
                }
            })
            .collect();
    Prepared {
        costs,
        sites,
        calibration,
        calibration_warning,
    }
}

/// Warnings printed for at most this many single-stepped entries; then a count.
const MAX_ENTRY_WARNINGS: usize = 5;

/// A warning for each probe on a single-stepped function entry, the dearest first:
/// before anything is attached there are no rates, so "dearest" is what a hit is
/// expected to cost here (the calibration's price for its class and kind; unpriced
/// ones last, in spec order), said in the line when known. The live guard ranks by
/// what the probes cost once hits arrive.
pub(crate) fn entry_warnings(probes: &[(&str, &ProbePoint)], costs: &[ProbeCost]) -> Vec<String> {
    let rules = KernelRules::running();
    let mut stepped: Vec<(usize, Option<f64>)> = probes
        .iter()
        .zip(costs)
        .enumerate()
        .filter(|(_, ((_, point), cost))| {
            cost.site
                .as_ref()
                .is_some_and(|site| site.class == CostClass::SingleStepped)
                && point.function.is_some_and(|span| span.offset == 0)
        })
        .map(|(i, (_, cost))| (i, cost.basis.as_ref().and_then(|b| b.base_ns)))
        .collect();
    // Stable: equal prices keep the specs' order.
    stepped.sort_by(|a, b| match (a.1, b.1) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    let more = stepped.len().saturating_sub(MAX_ENTRY_WARNINGS);
    let mut lines: Vec<String> = stepped
        .iter()
        .take(MAX_ENTRY_WARNINGS)
        .filter_map(|&(i, price)| {
            let (spec_text, point) = probes[i];
            let site = costs[i].site.as_ref()?;
            let span = point.function?;
            let price = price
                .map(|ns| format!(", ~{} a hit here", us(ns)))
                .unwrap_or_default();
            let head = format!(
                "probetop: warning: {spec_text}: the entry of {} ({}) is single-stepped, a second trap on every hit{price}",
                point.name, site.instruction
            );
            if point.kind == ProbeKind::Uretprobe {
                return Some(format!("{head}; a return probe can only start there"));
            }
            let tail = match later_site_of(point, span, rules) {
                Ok(later) => later.advice(&entry_spec(spec_text, point, probes)),
                Err(why) => format!("no later site is offered: {}", why.reason()),
            };
            Some(format!("{head}; {tail}"))
        })
        .collect();
    if more > 0 {
        let priced = stepped.iter().all(|(_, price)| price.is_some());
        lines.push(more_line(more, priced));
    }
    lines
}

/// The line after the first [`MAX_ENTRY_WARNINGS`]: how many more, and that the list is
/// ranked by a hit's price, as how often each site is hit is not known before attach
/// (the live warning names the dearest by what they cost once hits arrive).
fn more_line(more: usize, priced: bool) -> String {
    format!(
        "probetop: warning: and {more} more probe{} on single-stepped entries{}; ranked by a hit's price, as rates are not known before attach (`probetop list` shows each site's cost class and hint)",
        if more == 1 { "" } else { "s" },
        if priced { ", none dearer a hit" } else { "" }
    )
}

/// `ns` in microseconds, to two significant figures' worth.
fn us(ns: f64) -> String {
    let us = ns / 1000.0;
    if us < 10.0 {
        format!("{us:.1} us")
    } else {
        format!("{us:.0} us")
    }
}

/// The later site of the function whose entry `point` is.
fn later_site_of(
    point: &ProbePoint,
    span: FunctionSpan,
    rules: KernelRules,
) -> Result<sites::LaterSite, sites::NoLaterSite> {
    if span.size == 0 || span.size > sites::MAX_FUNCTION_BYTES {
        return Err(sites::NoLaterSite::Unsized);
    }
    let code = std::fs::File::open(&point.attach_path)
        .and_then(|file| sites::read_code(&file, point.file_offset, span.size))
        .map_err(|_| sites::NoLaterSite::Undecodable)?;
    if code.len() as u64 != span.size {
        return Err(sites::NoLaterSite::Undecodable);
    }
    sites::later_site(
        &code,
        point.address,
        point.file_offset,
        span.inner_symbol.as_slice(),
        rules,
    )
}

/// A uprobe spec naming `point`'s function alone, to which `+OFFSET` is added: the
/// spec as written when it names one function by a plain name, else the object as
/// written and the symbol as stored.
fn entry_spec(spec_text: &str, point: &ProbePoint, probes: &[(&str, &ProbePoint)]) -> String {
    let spec = crate::spec::ProbeSpec::parse(spec_text).ok();
    let alone = probes.iter().filter(|(s, _)| *s == spec_text).count() == 1;
    match spec {
        Some(spec) if alone && !spec.is_glob() && spec.offset.is_none() => spec.text,
        spec => {
            let object = spec
                .and_then(|s| s.object)
                .map(|o| format!("{o}:"))
                .unwrap_or_default();
            format!("uprobe:{object}{}", point.symbol)
        }
    }
}

#[cfg(test)]
mod more_line_tests {
    use super::*;

    #[test]
    fn the_rest_of_the_stepped_entries_say_how_they_are_ranked() {
        let line = more_line(53, true);
        assert!(
            line.starts_with(
                "probetop: warning: and 53 more probes on single-stepped entries, none dearer a hit; "
            ),
            "{line}"
        );
        assert!(
            line.contains("ranked by a hit's price, as rates are not known before attach"),
            "{line}"
        );
        let line = more_line(1, false);
        assert!(
            line.starts_with("probetop: warning: and 1 more probe on single-stepped entries; "),
            "{line}"
        );
    }
}
