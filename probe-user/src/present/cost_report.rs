//! The cost of the probes over a run, as reported: the end-of-run lines on stderr and
//! the per-probe and per-run numbers exports carry, in words. The prices are the price
//! stage's report; the wording and the joining to labels are presentation.

use std::fmt::Write as _;

use super::Assumption;
use crate::aggregate::{Aggregator, HandlerSummary};
use crate::present::{EstimateBracket, ProbeCostReport, Run};

use super::ProbeLabel;

/// What an `--in-situ` run's end changes in the report: its reconciled answer's lines
/// ([`super::answer::Answer::lines`]) lead instead of the estimate's total and the
/// bracket, and per-probe rates and shares are over the time the probes were attached.
pub(crate) struct InSituEnd<'a> {
    pub answer: &'a [String],
    pub attached_s: f64,
}

/// The end-of-run cost report, for stderr: the total CPU share, the run's estimate under
/// each loop (`bracket`, from the price stage's run report), then one line per probe with its class,
/// whole cost per hit, average rate and share over the run, and how the cost was
/// estimated. With `--in-situ` the answer leads instead (`in_situ`).
pub(crate) fn report(
    labels: &[ProbeLabel],
    aggregator: &Aggregator,
    priced: &Run,
    duration: std::time::Duration,
    bracket: &EstimateBracket,
    in_situ: Option<InSituEnd<'_>>,
) -> String {
    let mut out = String::new();
    let measured = &priced.measurements.probes;
    let reports: Vec<ProbeCostReport> = priced.probe_reports(duration);
    let total = reports
        .iter()
        .filter_map(|r| r.cpu_share)
        .fold(None, |t: Option<f64>, s| Some(t.unwrap_or(0.0) + s));
    let assumed = reports.iter().find_map(|r| r.assumes);
    let assumption = match (&priced.assumption, assumed) {
        (Some(decision), Some(used))
            if decision.assumes == Assumption::Clock && used != decision.assumes =>
        {
            format!(
                "; each hit priced by its handler's clock where enough hits were clocked ({}), else {}",
                decision.why,
                used.as_str()
            )
        }
        (Some(decision), Some(used)) if used != decision.assumes => format!(
            "; caches {} between hits ({}), but this calibration has no cold rows: priced hot, run `probetop calibrate` again",
            decision.assumes.as_str(),
            decision.why
        ),
        (Some(decision), _) if decision.assumes == Assumption::Clock => format!(
            "; how cold each hit ran read off probetop's handler clock: {}",
            decision.why
        ),
        (Some(decision), _) => format!(
            "; caches {} between hits: {}",
            decision.assumes.as_str(),
            decision.why
        ),
        (None, _) => String::new(),
    };
    match (total, &in_situ) {
        (_, Some(end)) => {
            for line in end.answer {
                let _ = writeln!(out, "probetop: {line}");
            }
        }
        (Some(share), None) => {
            let _ = writeln!(
                out,
                "probetop: these probes cost the target {} of a CPU over the run (hits/s x whole cost per hit, estimated{assumption})",
                percent(share)
            );
        }
        (None, None) => {
            let _ = writeln!(
                out,
                "probetop: no whole-cost estimate: run `probetop calibrate` on this machine to get one (a calibration holds for one kernel and CPU, and is made again when probetop measures more)"
            );
        }
    }
    if let Some(line) = bracket_line(bracket).filter(|_| in_situ.is_none()) {
        let _ = writeln!(out, "{line}");
    }
    let run_s = duration.as_secs_f64().max(f64::MIN_POSITIVE);
    // Hits come only while the probes are attached: rates and shares over that time.
    let seconds = in_situ.as_ref().map_or(run_s, |end| end.attached_s);
    // One line per probe, dearest first; past the cap, one line for the rest.
    let mut lines: Vec<(Option<f64>, String)> = Vec::new();
    // In the summary table's order (ties by name, no hits last); `dearest_lines` sorts
    // by share alone and keeps that order among equals.
    let keys: Vec<(Option<f64>, u64, String)> = labels
        .iter()
        .zip(measured)
        .zip(&reports)
        .map(|((label, probe), report)| {
            (
                report.cpu_share.filter(|_| probe.hits > 0),
                probe.hits,
                label.full_name(),
            )
        })
        .collect();
    let by_cost: Vec<usize> = super::summary::cost_order(&keys);
    for ((label, probe), report) in by_cost
        .iter()
        .filter_map(|&at| Some(((labels.get(at)?, measured.get(at)?), reports.get(at)?)))
    {
        let class = report.site.as_ref().map_or("unknown".to_string(), |s| {
            format!("{} ({})", s.class, s.instruction)
        });
        let mut line = format!("  {}  {class}", label.full_name());
        match (report.whole_cost_ns, report.cpu_share) {
            // No hit cost nothing: a price beside it would read as a cost.
            _ if probe.hits == 0 => line.push_str(": no hits"),
            (Some(whole), Some(share)) => {
                let _ = write!(
                    line,
                    ": {whole:.0} ns/hit x {:.0}/s = {} of a CPU{}",
                    probe.hits as f64 / seconds,
                    percent(share * run_s / seconds),
                    if in_situ.is_some() {
                        " while attached"
                    } else {
                        ""
                    }
                );
            }
            _ => line.push_str(": whole cost not estimated"),
        }
        let handler = HandlerSummary::of(&probe.handler_ns);
        if handler.count > 0 {
            let _ = write!(line, "; handler {:.0} ns", handler.mean);
        }
        if let Some(per_hit) = report.dispatch.as_ref().and_then(|d| d.per_hit_ns()) {
            let _ = write!(line, "; dispatch {per_hit:.0} ns measured");
        }
        if let (Some(gaps), Some(Assumption::Clock)) = (report.gaps, report.assumes) {
            let _ = write!(
                line,
                "; gap before a hit: median {}, {:.0}% 100 us or more",
                fmt_gap_us(gaps.median_us),
                gaps.share_after_100_us * 100.0
            );
            if let Some(reading) = report.reading {
                let _ = write!(line, ", {}", reading.describe());
            }
        }
        if let Some(method) = report.method {
            let _ = write!(line, " [{}]", method.as_str());
        }
        lines.push((
            report
                .cpu_share
                .filter(|_| probe.hits > 0)
                .map(|share| share * run_s / seconds),
            line,
        ));
    }
    out.push_str(&super::headline::dearest_lines(lines, END_LINES));
    if let Some(other) = aggregator.other_dispatch.filter(|o| o.count > 0) {
        let _ = writeln!(
            out,
            "  other uprobes in the target (not probetop's): {} hits, {:.0} ns kernel dispatch each",
            other.count,
            other.mean().unwrap_or(0.0)
        );
    }
    if let Some(unmeasured) = aggregator.dispatch_unmeasured.filter(|&n| n > 0) {
        let _ = writeln!(
            out,
            "  kernel dispatches not timed (begun before the dispatch clock attached): {unmeasured}"
        );
    }
    out
}

/// Per-probe lines at the end of a run, at most (the dearest; the rest summed).
const END_LINES: usize = 20;

/// The estimate per hit under each assumption, when there are two or more to compare:
/// how far the choice could move it.
fn bracket_line(bracket: &EstimateBracket) -> Option<String> {
    let ends: Vec<String> = [
        ("hot", bracket.hot),
        ("cold", bracket.cold),
        ("by the clock", bracket.clock),
    ]
    .into_iter()
    .filter_map(|(name, ns)| ns.map(|ns| format!("{name} {ns:.0} ns")))
    .collect();
    (ends.len() >= 2).then(|| {
        format!(
            "  per hit over every probe, by the calibration's loops: {} (`--assume` chooses; `--in-situ` measures)",
            ends.join(", ")
        )
    })
}

/// A gap bucket's middle, us, as the report prints it.
fn fmt_gap_us(us: f64) -> String {
    match us {
        u if u <= 0.0 => "under 1 us".to_string(),
        u if u < 1000.0 => format!("{u:.0} us"),
        u => format!("{:.1} ms", u / 1000.0),
    }
}

fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p < 0.1 {
        format!("{p:.3}%")
    } else {
        format!("{p:.1}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bracket_is_said_when_there_is_a_range() {
        let hot_only = EstimateBracket {
            hot: Some(900.0),
            ..Default::default()
        };
        assert_eq!(bracket_line(&hot_only), None);
        assert!(EstimateBracket::default().is_empty());
        let all = EstimateBracket {
            hot: Some(881.4),
            cold: Some(1842.0),
            clock: Some(1546.2),
        };
        let line = bracket_line(&all).expect("a line");
        assert!(
            line.contains("hot 881 ns, cold 1842 ns, by the clock 1546 ns"),
            "{line}"
        );
        // No priced probe: no range.
        assert_eq!(
            EstimateBracket::of(&Default::default()),
            EstimateBracket::default()
        );
    }
}
