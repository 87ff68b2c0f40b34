//! The end of a run, reconciled into one answer. An `--in-situ` run has two numbers for
//! what the probes cost the target: the calibration's estimate and the measurement on
//! the target. The reader gets one: the number to trust, its interval and why, then at
//! most one line for the other number and one for what a moved work rate means for the
//! answer. The words are made here once; stderr, the stdout summary and the JSON take
//! them from here.

use super::export::Report;
use super::format;
use super::headline::{self, Headline};
use crate::insitu::{InSituSummary, Interval, MIN_PAIRS, Verdict, WorkMeter};

/// Why the answer gives the number it gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// In situ measured a tight interval, and the estimate lies within it.
    Agree,
    /// In situ measured a tight interval, and the estimate lies outside it: in situ is
    /// the target's own CPU, the estimate the calibration's loops.
    Disagree,
    /// In situ measured a tight interval, with no estimate to set beside it.
    Alone,
    /// In situ has no number yet (too few windows, or an interval that holds zero or is
    /// wider than its number): the estimate.
    NoSignal,
    /// Neither has a number.
    Neither,
}

impl Why {
    /// Which number the headline uses: the word exports give `headline.method`.
    pub(crate) fn uses(self) -> &'static str {
        match self {
            Why::Agree | Why::Disagree | Why::Alone => "in-situ",
            Why::NoSignal => "estimate",
            Why::Neither => "none",
        }
    }

    /// The word exports give the reason.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Why::Agree => "in-situ-agrees-with-estimate",
            Why::Disagree => "in-situ-disagrees-with-estimate",
            Why::Alone => "in-situ-without-estimate",
            Why::NoSignal => "in-situ-without-signal",
            Why::Neither => "no-number",
        }
    }
}

/// The choice rule: in situ once its interval is tight (`Verdict::Measured`: above
/// zero and narrower than its mean), whether or not the estimate agrees, for it is the
/// target's own CPU; else the estimate.
pub(crate) fn choose(in_situ: &InSituSummary, estimate_ns: Option<f64>) -> Why {
    let measured = in_situ.verdict == Verdict::Measured && in_situ.added_share.is_some();
    match (measured, in_situ.per_hit_ns, estimate_ns) {
        (true, Some(m), Some(e)) if e >= m.low && e <= m.high => Why::Agree,
        (true, Some(_), Some(_)) => Why::Disagree,
        (true, _, _) => Why::Alone,
        (false, _, Some(_)) => Why::NoSignal,
        (false, _, None) => Why::Neither,
    }
}

/// The reconciled answer of an `--in-situ` run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub why: Why,
    /// The number and why, after "the probes cost the target" (or alone when there is
    /// no number).
    pub text: String,
    /// The other number, in a line.
    pub other: Option<String>,
    /// What the work rate did while probed and what that means for the answer.
    pub work: Option<String>,
    /// Whether `text` has a number (else it says why not).
    priced: bool,
}

impl Answer {
    /// The answer of a report with an in-situ measurement; `None` without one.
    pub(crate) fn of(report: &Report) -> Option<Self> {
        let in_situ = report.cost.in_situ.as_ref()?;
        let estimate = report.cost.estimated_per_hit_ns;
        let why = choose(in_situ, estimate);
        let headline = Headline::of_report(report);
        let assumption = report
            .cost
            .assumption
            .as_ref()
            .map(|d| headline::assumption_words(d.assumes));
        let measured = in_situ.per_hit_ns;
        let because = match (why, measured, estimate) {
            (Why::Agree, Some(m), Some(e)) => format!(
                "trust it: measured on the target itself, {} a hit within {}, and the estimate, {} a hit, lies inside it",
                format::ns_f(m.mean),
                ns_range(m),
                format::ns_f(e)
            ),
            (Why::Disagree, Some(m), Some(e)) => format!(
                "trust it over the estimate, {} a hit, {} the measured {}: in situ measured this target's own CPU, where the estimate prices a hit as the calibration's loops ran it",
                format::ns_f(e),
                if e < m.low { "under" } else { "over" },
                ns_range(m)
            ),
            (_, Some(m), _) if why == Why::Alone => format!(
                "trust it: measured on the target itself, {} a hit within {} (no estimate to set beside it: the calibration prices none of these hits)",
                format::ns_f(m.mean),
                ns_range(m)
            ),
            (Why::Alone, None, _) => {
                "trust it: measured on the target itself (no hits counted to price one)".into()
            }
            (Why::NoSignal, ..) => format!(
                "the estimate, as in situ has no signal yet: {}; run longer, or under more load",
                no_signal(in_situ)
            ),
            _ => format!("in situ has no signal either: {}", no_signal(in_situ)),
        };
        let text = format!("{}; {because}", headline.sentence());
        let other = match why {
            Why::Agree | Why::Disagree => estimate.map(|e| estimate_line(e, in_situ, assumption)),
            Why::NoSignal | Why::Neither => in_situ_line(in_situ),
            Why::Alone => None,
        };
        Some(Self {
            why,
            text,
            other,
            work: work_line(in_situ),
            priced: headline.cpu_share.is_some(),
        })
    }

    /// The answer's own line: `the answer: the probes cost the target ...`.
    pub(crate) fn lead(&self) -> String {
        if self.priced {
            format!("the answer: the probes cost the target {}", self.text)
        } else {
            format!("the answer: {}", self.text)
        }
    }

    /// Every line, for stderr: the answer first, then the other number and the work.
    pub(crate) fn lines(&self) -> Vec<String> {
        std::iter::once(self.lead())
            .chain(self.other.iter().map(|l| format!("  {l}")))
            .chain(self.work.iter().map(|l| format!("  {l}")))
            .collect()
    }
}

/// The headline in words for a surface that leads with it (the stdout summary, the HTML
/// report): with `--in-situ` the reconciled answer, which says which number and why.
pub(crate) fn headline_text(report: &Report) -> String {
    Answer::of(report).map_or_else(|| Headline::of_report(report).sentence(), |a| a.text)
}

/// The end-of-run line of a run without `--in-situ`: the headline as the answer.
/// `None` with in situ, whose [`Answer`] leads the end-of-run lines instead.
pub(crate) fn closing(report: &Report) -> Option<String> {
    if report.cost.in_situ.is_some() {
        return None;
    }
    let headline = Headline::of_report(report);
    Some(match headline.cpu_share {
        Some(_) => format!(
            "the answer: the probes cost the target {}",
            headline.sentence()
        ),
        None => format!("the answer: {}", headline.sentence()),
    })
}

/// The seconds of a run of `run_s` the probes were attached: the run less the detached
/// windows. Rates of hits under `--in-situ` are over these.
pub(crate) fn attached_seconds(in_situ: &InSituSummary, run_s: f64) -> f64 {
    (run_s - in_situ.seconds_off).max(f64::MIN_POSITIVE)
}

/// The line under a table whose rates are over the attached time.
pub(crate) fn rates_note(in_situ: &InSituSummary, run_s: f64) -> String {
    format!(
        "HITS/S and %CPU over the {:.1} s of {run_s:.1} s the probes were attached (--in-situ detached them the rest)",
        attached_seconds(in_situ, run_s)
    )
}

/// `2.10us..3.30us`.
fn ns_range(i: Interval) -> String {
    format!("{}..{}", format::ns_f(i.low), format::ns_f(i.high))
}

/// Why in situ has no number.
fn no_signal(s: &InSituSummary) -> String {
    match (s.verdict, s.added_share) {
        (Verdict::Measured, _) => "no hits counted to price one".into(),
        (Verdict::Measuring, _) | (_, None) => {
            format!("{} of the {MIN_PAIRS} pairs of windows it needs", s.pairs)
        }
        (Verdict::NotEnoughSignal, Some(share)) => format!(
            "its interval, {}..{} of one CPU, {}",
            headline::share_text(share.low),
            headline::share_text(share.high),
            if share.low <= 0.0 {
                "holds zero"
            } else {
                "is wider than its number"
            }
        ),
    }
}

/// The estimate beside a trusted in-situ number: per hit, and at the hits a second
/// counted while attached, the share of one CPU in situ's own terms.
fn estimate_line(estimate: f64, s: &InSituSummary, assumption: Option<&str>) -> String {
    let how = assumption.map_or_else(String::new, |a| format!(", {a}"));
    let mut line = format!(
        "the estimate: {} a hit (the calibration's loops{how})",
        format::ns_f(estimate)
    );
    if s.hits_per_second > 0.0 {
        line.push_str(&format!(
            ", x {} hits/s while attached = {} of one CPU while attached",
            format::count(s.hits_per_second),
            headline::share_text(estimate * s.hits_per_second / 1e9)
        ));
    }
    line
}

/// In situ's number so far, beside the estimate it did not displace.
fn in_situ_line(s: &InSituSummary) -> Option<String> {
    let share = s.added_share?;
    let per_hit = s.per_hit_ns.map_or_else(String::new, |p| {
        format!(", {} a hit ({})", format::ns_f(p.mean), ns_range(p))
    });
    Some(format!(
        "in situ so far, not trusted: {} of one CPU while attached (95% CI {}..{}){per_hit}, over {} windows on and {} off",
        headline::share_text(share.mean),
        headline::share_text(share.low),
        headline::share_text(share.high),
        s.windows_on,
        s.windows_off
    ))
}

/// What the target's work did while probed, in plain words, and what it means for the
/// answer.
fn work_line(s: &InSituSummary) -> Option<String> {
    let unit = match s.work {
        WorkMeter::Syscalls => "syscall",
        WorkMeter::Wakeups => "wakeup",
        WorkMeter::None | WorkMeter::Auto => {
            return Some(
                "work not metered (--work none): the cost is CPU a second, right for a load that comes at a fixed rate; a load that waits on the target reads low so (--work syscalls or wakeups counts per request)".into(),
            );
        }
    };
    let Some(moved) = s.work_moved else {
        return Some(format!(
            "work moved: not measured yet (too few windows); the cost is counted per {unit}"
        ));
    };
    let range = format!(
        "{:+.1}% (95% CI {:+.1}..{:+.1}%)",
        moved.mean * 100.0,
        moved.low * 100.0,
        moved.high * 100.0
    );
    if moved.high < 0.0 || moved.low > 0.0 {
        let alone = s.per_hit_cpu_alone_ns.map_or_else(String::new, |a| {
            format!(
                " (by CPU a second alone it would read {} a hit)",
                format::ns_f(a.mean)
            )
        });
        let (direction, cause) = if moved.mean < 0.0 {
            (
                "fewer",
                ", as a load that waits on the target does when it slows",
            )
        } else {
            (
                "more",
                ", which the probes themselves may cause: another --work can tell",
            )
        };
        Some(format!(
            "work moved {range}: the target did {:.1}% {direction} {unit}s a second while probed{cause}; the price is counted per {unit}, so the answer is corrected for it{alone}",
            moved.mean.abs() * 100.0
        ))
    } else {
        Some(format!(
            "work moved {range}, within noise: the target did as many {unit}s a second probed as not, so the answer needs no correction for it"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(mean: f64, low: f64, high: f64) -> Option<Interval> {
        Some(Interval { mean, low, high })
    }

    /// In situ over 6 windows on and off, measured: 2.7% of one CPU while attached
    /// (2.1..3.5%), 2.70 us a hit (2.10..3.30) at 10,000 hits a second.
    fn measured() -> InSituSummary {
        InSituSummary {
            work: WorkMeter::Wakeups,
            windows_on: 6,
            windows_off: 7,
            pairs: 6,
            dropped_pairs: 0,
            processes: (1, 1),
            seconds_on: 6.0,
            seconds_off: 7.0,
            added_share: interval(0.027, 0.021, 0.035),
            per_hit_ns: interval(2700.0, 2100.0, 3300.0),
            work_moved: interval(-0.025, -0.04, -0.01),
            per_hit_cpu_alone_ns: interval(2100.0, 1500.0, 2600.0),
            hits_per_second: 10_000.0,
            base_share: Some(0.179),
            verdict: Verdict::Measured,
            detach_ms: Some(3.0),
            attach_ms: Some(5.0),
            churn_cpu_ms: Some(0.4),
        }
    }

    fn report(in_situ: InSituSummary, estimate: Option<f64>) -> Report {
        let mut report = super::super::export::testing::sample_report();
        report.probes.clear();
        report.cost.estimated_per_hit_ns = estimate;
        report.cost.cpu_share = estimate.map(|e| e * 10_000.0 / 1e9 * 6.0 / 13.0);
        report.cost.in_situ = Some(in_situ);
        report
    }

    #[test]
    fn in_situ_is_trusted_once_tight_and_the_estimate_is_named_beside_it() {
        let s = measured();
        assert_eq!(choose(&s, Some(2900.0)), Why::Agree);
        assert_eq!(choose(&s, Some(1200.0)), Why::Disagree);
        assert_eq!(choose(&s, Some(4000.0)), Why::Disagree);
        assert_eq!(choose(&s, None), Why::Alone);
        // An interval that holds zero, or too few windows: the estimate.
        let loose = InSituSummary {
            verdict: Verdict::NotEnoughSignal,
            added_share: interval(0.01, -0.01, 0.03),
            ..measured()
        };
        assert_eq!(choose(&loose, Some(2900.0)), Why::NoSignal);
        assert_eq!(choose(&loose, None), Why::Neither);
        let early = InSituSummary {
            verdict: Verdict::Measuring,
            pairs: 1,
            ..measured()
        };
        assert_eq!(choose(&early, Some(2900.0)), Why::NoSignal);
        for why in [Why::Agree, Why::Disagree, Why::Alone] {
            assert_eq!(why.uses(), "in-situ");
        }
        assert_eq!(Why::NoSignal.uses(), "estimate");
        assert_eq!(Why::Neither.uses(), "none");
    }

    #[test]
    fn the_answer_leads_with_one_number_and_the_estimate_beside_it() {
        let answer = Answer::of(&report(measured(), Some(2900.0))).expect("in situ");
        assert_eq!(answer.why, Why::Agree);
        let lines = answer.lines();
        assert_eq!(lines.len(), 3, "{lines:#?}");
        let lead = &lines[0];
        assert!(
            lead.starts_with("the answer: the probes cost the target +2.7% of one CPU"),
            "{lead}"
        );
        assert!(
            lead.contains("measured in situ (95% CI 2.1%..3.5%)"),
            "{lead}"
        );
        assert!(
            lead.ends_with(
                "; trust it: measured on the target itself, 2.70us a hit within 2.10us..3.30us, and the estimate, 2.90us a hit, lies inside it"
            ),
            "{lead}"
        );
        // The estimate in in situ's terms: at the hits counted while attached.
        assert_eq!(
            lines[1],
            "  the estimate: 2.90us a hit (the calibration's loops), x 10.0k hits/s while attached = 2.9% of one CPU while attached"
        );
        assert!(
            lines[2].starts_with(
                "  work moved -2.5% (95% CI -4.0..-1.0%): the target did 2.5% fewer wakeups a second while probed"
            ) && lines[2].contains("so the answer is corrected for it (by CPU a second alone it would read 2.10us a hit)"),
            "{}",
            lines[2]
        );
        // They disagree: both named, in situ trusted, and why.
        let answer = Answer::of(&report(measured(), Some(1200.0))).expect("in situ");
        assert!(
            answer.lead().contains(
                "trust it over the estimate, 1.20us a hit, under the measured 2.10us..3.30us: in situ measured this target's own CPU"
            ),
            "{}",
            answer.lead()
        );
    }

    #[test]
    fn without_signal_the_estimate_answers_and_in_situ_is_the_other_line() {
        let loose = InSituSummary {
            verdict: Verdict::NotEnoughSignal,
            added_share: interval(0.01, 0.002, 0.03),
            per_hit_ns: interval(1000.0, 200.0, 3000.0),
            work: WorkMeter::None,
            work_moved: None,
            per_hit_cpu_alone_ns: None,
            ..measured()
        };
        let answer = Answer::of(&report(loose.clone(), Some(2900.0))).expect("in situ");
        assert_eq!(answer.why, Why::NoSignal);
        let lead = answer.lead();
        assert!(lead.contains("estimated"), "{lead}");
        assert!(
            lead.ends_with(
                "; the estimate, as in situ has no signal yet: its interval, 0.20%..3.0% of one CPU, is wider than its number; run longer, or under more load"
            ),
            "{lead}"
        );
        assert_eq!(
            answer.other.as_deref(),
            Some(
                "in situ so far, not trusted: 1.0% of one CPU while attached (95% CI 0.20%..3.0%), 1.00us a hit (200ns..3.00us), over 6 windows on and 7 off"
            )
        );
        assert!(
            answer
                .work
                .as_deref()
                .is_some_and(|w| w.starts_with("work not metered (--work none)")),
            "{:?}",
            answer.work
        );
        // Nothing to price with: said without "the probes cost the target".
        let answer = Answer::of(&report(loose.clone(), None)).expect("in situ");
        assert_eq!(answer.why, Why::Neither);
        assert!(
            answer.lead().starts_with("the answer: probe cost unknown"),
            "{}",
            answer.lead()
        );
        // An interval that holds zero says so; too few windows, how many.
        let zero = InSituSummary {
            added_share: interval(0.01, -0.01, 0.03),
            ..loose.clone()
        };
        assert_eq!(
            no_signal(&zero),
            "its interval, -1.0%..3.0% of one CPU, holds zero"
        );
        let early = InSituSummary {
            verdict: Verdict::Measuring,
            pairs: 1,
            ..loose.clone()
        };
        assert_eq!(no_signal(&early), "1 of the 3 pairs of windows it needs");
        // No in situ: the closing line is the headline; with it, the answer leads instead.
        let plain = super::super::export::testing::sample_report();
        assert_eq!(Answer::of(&plain), None);
        assert!(closing(&plain).is_some());
        assert_eq!(closing(&report(measured(), None)), None);
    }

    #[test]
    fn work_within_noise_needs_no_correction_and_rates_are_over_attached_time() {
        let still = InSituSummary {
            work_moved: interval(0.004, -0.01, 0.02),
            ..measured()
        };
        assert_eq!(
            work_line(&still).as_deref(),
            Some(
                "work moved +0.4% (95% CI -1.0..+2.0%), within noise: the target did as many wakeups a second probed as not, so the answer needs no correction for it"
            )
        );
        let s = measured();
        assert!((attached_seconds(&s, 13.5) - 6.5).abs() < 1e-9);
        assert_eq!(
            rates_note(&s, 13.5),
            "HITS/S and %CPU over the 6.5 s of 13.5 s the probes were attached (--in-situ detached them the rest)"
        );
    }
}
