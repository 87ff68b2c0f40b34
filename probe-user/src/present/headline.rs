//! The run's headline: what all probes on the target cost it, as a share of one CPU and
//! against the target's own CPU, per hit, and how that was obtained (the calibration's
//! estimate, or measured in situ with its interval). Every surface leads with it: the
//! TUI's status line, the stdout summary, every export and `--listen`.
//!
//! Per-probe costs do not add up to a set's: a probe's hit warms the caches the next
//! probe's hit runs in, and detaching one probe moves its neighbours' costs. The
//! headline is the set's number (the sum of the per-probe estimates, or the in-situ
//! measurement of the whole set), never a sum the reader has to make.

use crate::insitu;
use crate::present::Snapshot;
use crate::present::{Assumption, Method as PriceMethod};

use super::export::Report;
use super::format;
use crate::present::ProbeCostReport;

/// The probes' cost over the target's CPU above which probetop warns while it runs,
/// whichever is crossed first: of one CPU, or of the target's own CPU.
pub(crate) const WARN_SHARE: f64 = 0.05;

/// The status line before the first second's numbers: nothing is priced yet, which
/// is not a missing calibration (the demo's first frame said `run probetop calibrate`
/// on a calibrated host).
const BEFORE_THE_FIRST_SECOND: &str = "cost … (measuring)";

/// Whether to name `--budget` (duty-cycles the probes under a cost) in the warning.
pub(crate) const BUDGET_FLAG: bool = true;

/// How the headline's number was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) enum Method {
    /// No calibration on this machine, or nothing hit yet: no number.
    #[default]
    Unpriced,
    /// The calibration's price per hit times the hits, with the caches it assumed.
    Estimate(Option<Assumption>),
    /// Measured on the target with the probes attached and detached in turn: the 95%
    /// interval of the added CPU share.
    InSitu { low: f64, high: f64 },
}

impl Method {
    /// The word exports use (a Prometheus label, a CSV and JSON field).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Method::Unpriced => "none",
            Method::Estimate(_) => "estimate",
            Method::InSitu { .. } => "in-situ",
        }
    }
}

/// Why the headline has no price per hit: said where the number would be, never a blank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unpriced {
    /// No calibration for this machine: nothing is priced.
    NoCalibration,
    /// Calibrated, but no probe's site is in it (its cost class is unknown or refused).
    UncalibratedSites,
    /// Priced, but no probe was hit (over the last second, live; in the run, at its end).
    NoHits,
}

/// The run's headline numbers.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Headline {
    /// Share of one CPU all probes cost the target (0.032: 3.2% of one CPU).
    pub cpu_share: Option<f64>,
    /// The target's own CPU, probes' cost taken out, share of one CPU, when it is
    /// known well enough to set the cost against ([`against_target`]).
    pub target_own: Option<f64>,
    /// Otherwise: the probes' share of the target's whole CPU (0.9: the probes are 90%
    /// of what it ran), when that is known.
    pub of_target: Option<f64>,
    /// The target's whole CPU as measured (the process set's with several), probes
    /// included, share of one CPU.
    pub target_cpu: Option<f64>,
    /// What a hit costs the target, ns, over every probe weighted by its hits.
    pub per_hit_ns: Option<f64>,
    pub method: Method,
    /// Why `per_hit_ns` is `None`, when it is.
    pub unpriced: Option<Unpriced>,
    /// How the probes' rows were priced, each way said.
    pub pricing: Pricing,
}

/// Why a headline of `cpu_share` and `per_hit_ns` has no price per hit.
fn unpriced(cpu_share: Option<f64>, per_hit_ns: Option<f64>, calibrated: bool) -> Option<Unpriced> {
    match (cpu_share, per_hit_ns) {
        (_, Some(_)) => None,
        (None, None) if calibrated => Some(Unpriced::UncalibratedSites),
        (None, None) => Some(Unpriced::NoCalibration),
        (Some(_), None) => Some(Unpriced::NoHits),
    }
}

/// How far the calibration's estimate may be off the truth, relative: on mariadbd it lay
/// within 25% of the truth measured from outside in 15 of 16 cells (docs/cost.md, "In
/// situ", runs of 2026-11-25 and 26), other tools' probes 0.78-1.08 of it
/// (docs/others.md).
const ESTIMATE_ERROR: f64 = 0.25;

/// A CPU share is divided by only when it is at least this many times its uncertainty:
/// the ratio is then known to within a quarter.
const SIGNAL: f64 = 4.0;

/// Once divided by, a share stays so until it falls below this many times its
/// uncertainty: a target whose ratio sits near [`SIGNAL`] keeps one form instead of
/// flipping between the ratio and the words every second.
const SIGNAL_HELD: f64 = 3.0;

/// What the headline sets the probes' cost against.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Against {
    /// The target's own CPU (the probes' cost taken out), share of one CPU.
    Own(f64),
    /// The probes' share of the target's whole CPU (theirs included), 0..=1: its own
    /// is too small, or too uncertain, to divide by.
    Whole(f64),
}

/// The one rule every surface follows to set `probes` (share of one CPU) against the
/// target: its `own` CPU when that is at least [`SIGNAL`] times its uncertainty
/// `own_error` (a ratio over a process that is mostly the probes, or mostly noise,
/// moves by itself from second to second: "+930% on 0.49%" one second, nothing the
/// next); else the probes' share of its whole CPU (`own` + `probes`, uncertainty
/// `whole_error`), which stays put; else nothing. `held`: the last reading was set
/// against its own CPU, which then holds down to [`SIGNAL_HELD`] times.
fn against_target(
    probes: f64,
    own: f64,
    own_error: f64,
    whole_error: f64,
    held: bool,
) -> Option<Against> {
    let signal = if held { SIGNAL_HELD } else { SIGNAL };
    if own > 0.0 && own >= signal * own_error {
        return Some(Against::Own(own));
    }
    let whole = own + probes;
    (whole > 0.0 && whole >= SIGNAL * whole_error)
        .then(|| Against::Whole((probes / whole).clamp(0.0, 1.0)))
}

/// An estimate against `measured`, the target's whole CPU (probes included) with its
/// standard error: its own is what is left once the estimate is taken out, as
/// uncertain as the measurement plus the estimate's own error.
fn estimate_against(
    probes: Option<f64>,
    measured: Option<f64>,
    error: Option<f64>,
    held: bool,
) -> Option<Against> {
    let measured = measured?;
    let probes = probes.unwrap_or(0.0);
    let error = error.unwrap_or(0.0);
    against_target(
        probes,
        measured - probes,
        error + ESTIMATE_ERROR * probes,
        error,
        held,
    )
}

/// (target_own, of_target) of a headline.
fn split(against: Option<Against>) -> (Option<f64>, Option<f64>) {
    match against {
        Some(Against::Own(own)) => (Some(own), None),
        Some(Against::Whole(share)) => (None, Some(share)),
        None => (None, None),
    }
}

/// How a headline's probes were priced: each way the rows were, so the headline's
/// method says all of them (another tool's probe is priced by the calibration's hot
/// trap plus its program, whatever the run assumed of probetop's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Pricing {
    hot: bool,
    cold: bool,
    clock: bool,
    dispatch: bool,
    others: bool,
}

impl Pricing {
    /// A row priced by `method` with the calibration rows `assumes`.
    fn add(&mut self, method: PriceMethod, assumes: Option<Assumption>) {
        match (method, assumes) {
            (PriceMethod::OtherTool, _) => self.others = true,
            (PriceMethod::DispatchAndCalibration, _) => self.dispatch = true,
            (PriceMethod::InSitu, _) | (_, None) => {}
            (_, Some(Assumption::Hot)) => self.hot = true,
            (_, Some(Assumption::Cold)) => self.cold = true,
            (_, Some(Assumption::Clock)) => self.clock = true,
        }
    }

    /// Every way, in words; `None` when no row was priced.
    fn words(self) -> Option<String> {
        let own: Vec<&str> = [
            (self.clock, "by how slow each hit ran"),
            (self.hot, "with caches warm between hits"),
            (self.cold, "with caches cold between hits"),
            (self.dispatch, "by the kernel's measured dispatch"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, words)| *words)
        .collect();
        let others = "other tools' probes by the calibration's hot loop plus their programs";
        match (own.as_slice(), self.others) {
            ([], false) => None,
            ([], true) => Some(others.into()),
            // One way: as the run's assumption says it.
            ([_], false) if self.clock => Some(assumption_words(Assumption::Clock).into()),
            ([_], false) if self.hot => Some(assumption_words(Assumption::Hot).into()),
            ([_], false) if self.cold => Some(assumption_words(Assumption::Cold).into()),
            (own, false) => Some(format!("priced {}", own.join(", some "))),
            (own, true) => Some(format!(
                "own probes priced {}; {others}",
                own.join(", some ")
            )),
        }
    }
}

impl Headline {
    /// Live: the probes' rates over the last second and their prices now.
    pub(crate) fn live(snapshot: &Snapshot) -> Self {
        Self::live_after(snapshot, None)
    }

    /// [`Headline::live`] after the `previous` reading: a target set against its own
    /// CPU last second stays so while its ratio is still nearly as well known
    /// ([`SIGNAL_HELD`]), so the status line keeps its form at the rule's edge.
    pub(crate) fn live_after(snapshot: &Snapshot, previous: Option<&Headline>) -> Self {
        let held = previous.is_some_and(|h| h.target_own.is_some());
        let cpu_share = snapshot.cpu_share();
        let (mut cost, mut rate) = (0.0, 0.0);
        for p in &snapshot.probes {
            if let (Some(whole), true) = (p.whole_cost_ns, p.per_second > 0.0) {
                cost += whole * p.per_second;
                rate += p.per_second;
            }
        }
        let per_hit_ns = (rate > 0.0).then(|| cost / rate);
        let mut pricing = Pricing::default();
        for p in snapshot.probes.iter().filter(|p| p.per_second > 0.0) {
            if let Some((method, assumes)) = p.priced {
                pricing.add(method, Some(assumes));
            }
        }
        let (target_own, of_target) = split(estimate_against(
            cpu_share,
            snapshot.target_cpu,
            snapshot.target_cpu_error,
            held,
        ));
        Self {
            cpu_share,
            target_own,
            of_target,
            target_cpu: snapshot.target_cpu,
            per_hit_ns,
            method: match cpu_share {
                Some(_) => Method::Estimate(snapshot.assumption.as_ref().map(|d| d.assumes)),
                None => Method::Unpriced,
            },
            unpriced: unpriced(cpu_share, per_hit_ns, snapshot.calibrated),
            pricing,
        }
    }

    /// In situ so far: `None` until the windows gave a share.
    pub(crate) fn of_in_situ(summary: &insitu::InSituSummary) -> Option<Self> {
        let share = summary.added_share?;
        // The detached windows' CPU is measured as the added share is: about as
        // uncertain (a 95% interval is four standard errors wide).
        let error = (share.high - share.low) / 4.0;
        let (target_own, of_target) = split(
            summary
                .base_share
                .and_then(|base| against_target(share.mean, base, error, error, false)),
        );
        Some(Self {
            cpu_share: Some(share.mean),
            target_own,
            of_target,
            target_cpu: summary.base_share.map(|base| base + share.mean),
            per_hit_ns: summary.per_hit_ns.map(|p| p.mean),
            method: Method::InSitu {
                low: share.low,
                high: share.high,
            },
            unpriced: None,
            pricing: Pricing::default(),
        })
    }

    /// Over a whole report (the run, or up to a scrape).
    pub(crate) fn of_report(report: &Report) -> Self {
        if let Some(in_situ) = report
            .cost
            .in_situ
            .as_ref()
            .filter(|s| s.verdict == insitu::Verdict::Measured)
            .and_then(Self::of_in_situ)
        {
            return in_situ;
        }
        let shares = report.probes.iter().filter_map(|p| p.cost.cpu_share);
        let summed = shares.fold(None, |t: Option<f64>, s| Some(t.unwrap_or(0.0) + s));
        let cpu_share = report.cost.cpu_share.or(summed);
        let (mut cost, mut hits) = (0.0, 0u64);
        for p in report.probes.iter().filter(|p| p.hits > 0) {
            if let Some(whole) = p.cost.whole_cost_ns {
                cost += whole * p.hits as f64;
                hits += p.hits;
            }
        }
        let per_hit_ns = (hits > 0).then(|| cost / hits as f64);
        // A site the calibration prices has a cost class it knows.
        let calibrated = report.probes.iter().any(|p| p.cost.whole_cost_ns.is_some());
        let mut pricing = Pricing::default();
        for p in report.probes.iter().filter(|p| p.hits > 0) {
            if let Some(method) = p.cost.method {
                pricing.add(method, p.cost.assumes);
            }
        }
        let (target_own, of_target) = split(estimate_against(
            cpu_share,
            report.target_cpu,
            report.target_cpu_error,
            false,
        ));
        Self {
            cpu_share,
            target_own,
            of_target,
            target_cpu: report.target_cpu,
            per_hit_ns,
            method: match cpu_share {
                Some(_) => Method::Estimate(report.cost.assumption.as_ref().map(|d| d.assumes)),
                None => Method::Unpriced,
            },
            unpriced: unpriced(cpu_share, per_hit_ns, calibrated),
            pricing,
        }
    }

    /// The probes' cost as a share of the target's own CPU (0.18: +18% on it).
    pub(crate) fn on_target(&self) -> Option<f64> {
        Some(self.cpu_share? / self.target_own?)
    }

    /// Whether the probes cost more than [`WARN_SHARE`] of a CPU or of the target's.
    pub(crate) fn too_dear(&self) -> bool {
        self.cpu_share.is_some_and(|s| s > WARN_SHARE)
            || self.on_target().is_some_and(|r| r > WARN_SHARE)
            || self.of_target.is_some_and(|r| r > WARN_SHARE)
    }

    /// The sentence's part against the target: `, +18% on the target's own 17.9%`, or
    /// `, the probes are 90% of the target's CPU`; empty when neither is known.
    fn against_sentence(&self) -> String {
        if let (Some(ratio), Some(own)) = (self.on_target(), self.target_own) {
            return format!(
                ", +{} on the target's own {}",
                ratio_text(ratio),
                share_text(own)
            );
        }
        match self.of_target {
            Some(share) => format!(", the probes are {} of the target's CPU", whole_text(share)),
            None => String::new(),
        }
    }

    /// The headline as a sentence: `+3.2% of one CPU, +18% on the target's own 17.9%,
    /// 2.72us a hit, estimated (hot caches)`.
    pub(crate) fn sentence(&self) -> String {
        let Some(share) = self.cpu_share else {
            if self.unpriced == Some(Unpriced::UncalibratedSites) {
                return "probe cost unknown: the calibration prices none of the probed sites (their cost class is unknown or refused)".into();
            }
            return "probe cost unknown: no calibration for this machine yet (run `probetop calibrate` once)".into();
        };
        let mut text = format!("+{} of one CPU", share_text(share));
        text.push_str(&self.against_sentence());
        if let Some(per_hit) = self.per_hit_ns {
            text.push_str(&format!(", {} a hit", format::ns_f(per_hit)));
        } else if self.unpriced == Some(Unpriced::NoHits) {
            text.push_str(", no hits to price");
        }
        text.push_str(&format!(", {}", self.how()));
        text
    }

    /// How the number was obtained, in words.
    pub(crate) fn how(&self) -> String {
        match self.method {
            Method::Unpriced => "not priced".into(),
            // Each way the rows were priced; the run's assumption when none was.
            Method::Estimate(assumes) => {
                match (self.pricing.words(), assumes.map(assumption_words)) {
                    (Some(words), _) => format!("estimated ({words})"),
                    (None, Some(words)) => format!("estimated ({words})"),
                    (None, None) => "estimated".into(),
                }
            }
            Method::InSitu { low, high } => format!(
                "measured in situ (95% CI {}..{})",
                share_text(low),
                share_text(high)
            ),
        }
    }

    /// The status line's form: `cost +3.2% cpu (+18% on target's 17.9%) 2.72us/hit est`.
    /// Numbers are padded so the line keeps its length as they change: a part that
    /// grows by one character must not push the status line into another layout.
    pub(crate) fn status(&self) -> String {
        let Some(share) = self.cpu_share else {
            return match self.unpriced {
                Some(Unpriced::UncalibratedSites) => "cost ? (no probed site is calibrated)",
                Some(_) => "cost ? (run probetop calibrate)",
                None => BEFORE_THE_FIRST_SECOND,
            }
            .into();
        };
        // Each group padded to its widest form.
        let mut text = format!("{:<15}", format!("cost +{} cpu", share_text(share)));
        if let (Some(ratio), Some(own)) = (self.on_target(), self.target_own) {
            let against = format!(" (+{} on target's {})", ratio_text(ratio), share_text(own));
            text.push_str(&format!("{against:<26}"));
        } else if let Some(whole) = self.of_target {
            let against = format!(" ({} of target's cpu)", whole_text(whole));
            text.push_str(&format!("{against:<26}"));
        }
        text.push_str(&format!("{:<11}", self.per_hit_status()));
        text.push_str(match self.method {
            Method::Unpriced => "",
            Method::Estimate(_) => " est",
            Method::InSitu { .. } => " in situ",
        });
        text
    }

    /// The price per hit as the status line shows it (` 2.72us/hit`), or why there is
    /// none; empty where the headline has no number at all.
    fn per_hit_status(&self) -> String {
        match (self.per_hit_ns, self.unpriced) {
            (Some(per_hit), _) => format!(" {}/hit", format::ns_f(per_hit)),
            (None, Some(Unpriced::NoHits)) => " (no hits)".into(),
            _ => String::new(),
        }
    }

    /// The shortest form, for the narrowest status line: `cost +3.2% cpu 2.72us/hit est`.
    /// The price per hit stays (a status line crowded by drops once lost it, which
    /// read as no price).
    pub(crate) fn status_short(&self) -> String {
        let Some(share) = self.cpu_share else {
            return match self.unpriced {
                Some(Unpriced::UncalibratedSites) => "cost ? (uncalibrated sites)",
                Some(_) => "cost ? (calibrate)",
                None => BEFORE_THE_FIRST_SECOND,
            }
            .into();
        };
        // Whole words: "situ" alone read as a word cut short.
        let how = match self.method {
            Method::InSitu { .. } => "in situ",
            _ => "est",
        };
        let share = format!("{:<15}", format!("cost +{} cpu", share_text(share)));
        let per_hit = format!("{:<11}", self.per_hit_status());
        match (self.on_target(), self.of_target) {
            (Some(ratio), _) => format!(
                "{share}{:<12}{per_hit} {how}",
                format!(" +{} target", ratio_text(ratio))
            ),
            (None, Some(whole)) => format!(
                "{share}{:<15}{per_hit} {how}",
                format!(" {} of target", whole_text(whole))
            ),
            (None, None) => format!("{share}{per_hit} {how}"),
        }
    }

    /// What crossed the guard's line, in words: `3.0% of one CPU, +27% on its own CPU
    /// (over 5%)`; `None` under it. The line crossed is the one marked: a share of one
    /// CPU under 5% beside "over 5%" would read as a contradiction.
    fn over_the_line(&self) -> Option<String> {
        if !self.too_dear() {
            return None;
        }
        let share = self.cpu_share?;
        let line = format!(" (over {:.0}%)", WARN_SHARE * 100.0);
        let mut text = format!("{} of one CPU", share_text(share));
        if share > WARN_SHARE {
            text.push_str(&line);
        }
        if let Some(ratio) = self.on_target() {
            text.push_str(&format!(", +{} on its own CPU", ratio_text(ratio)));
            if ratio > WARN_SHARE {
                text.push_str(&line);
            }
        } else if let Some(whole) = self.of_target {
            text.push_str(&format!(", {} of its CPU", whole_text(whole)));
            if whole > WARN_SHARE {
                text.push_str(&line);
            }
        }
        Some(text)
    }

    /// The live warning once the probes cost more than [`WARN_SHARE`]; `dearest` are
    /// the probes costing most (name, share of one CPU), dearest first.
    pub(crate) fn warning(&self, dearest: &[(String, f64)], budget_flag: bool) -> Option<String> {
        let over = self.over_the_line()?;
        let names = dearest_names(dearest, 3);
        let dearest = if names.is_empty() {
            String::new()
        } else {
            format!("; dearest: {names}")
        };
        let remedy = if budget_flag {
            "detach them (space), pass --budget, or --mode kernel (cheaper per hit)"
        } else {
            "detach them (space) or use --mode kernel (cheaper per hit)"
        };
        Some(format!("probes cost the target {over}{dearest}: {remedy}"))
    }

    /// The warning in at most `width` characters, for the TUI's footer: the status line
    /// above already has the numbers, so what goes first when space runs out is the
    /// sentence, then the probes after the dearest, then the remedies; the dearest
    /// probe's name stays.
    pub(crate) fn warning_fit(
        &self,
        dearest: &[(String, f64)],
        budget_flag: bool,
        width: usize,
    ) -> Option<String> {
        let over = self.over_the_line()?;
        let (remedy, brief) = if budget_flag {
            (
                "space detaches, or --budget, --mode kernel",
                "--budget or --mode kernel",
            )
        } else {
            ("space detaches, or --mode kernel", "--mode kernel")
        };
        // The set is what crosses the line; each name carries its own share. "all
        // probes" and "alone" keep a probe's 1.9% from reading as over 5%.
        let what = if self.cpu_share.is_some_and(|s| s > WARN_SHARE) {
            "one CPU"
        } else {
            "target's CPU"
        };
        let set = format!("all probes over {:.0}% of {what}", WARN_SHARE * 100.0);
        // Fewer names before the brief form: the sentence says which line was crossed.
        let names = |k| {
            let names = dearest_names(dearest, k);
            if names.is_empty() {
                String::new()
            } else {
                format!("dearest alone: {names}; ")
            }
        };
        let counts: Vec<usize> = (1..=dearest.len().min(3)).rev().collect();
        let counts = if counts.is_empty() { vec![0] } else { counts };
        let mut candidates: Vec<String> = counts
            .iter()
            .map(|&k| format!("! probes cost {over}; {}{remedy}", names(k)))
            .collect();
        candidates.extend(
            counts
                .iter()
                .map(|&k| format!("! {set}; {}{brief}", names(k))),
        );
        match dearest.first() {
            Some((name, share)) => {
                let alone = format!("{name} alone {}", share_text(*share));
                candidates.push(format!("! {set}; {alone}; {brief}"));
                candidates.push(format!("! {set}; {alone}; --budget"));
                candidates.push(format!("! {set}; {alone}"));
                candidates.push(format!(
                    "! together over {:.0}%; {alone}",
                    WARN_SHARE * 100.0
                ));
            }
            None => candidates.push(format!("! {set}")),
        }
        let fits = |c: &String| c.chars().count() <= width;
        let shortest = candidates.last().cloned().unwrap_or_default();
        Some(
            candidates
                .into_iter()
                .find(fits)
                .unwrap_or_else(|| shortest.chars().take(width).collect()),
        )
    }
}

/// The first `k` of `dearest` as `a 2.0%, b 0.3%`.
fn dearest_names(dearest: &[(String, f64)], k: usize) -> String {
    dearest
        .iter()
        .take(k)
        .map(|(name, share)| format!("{name} {}", share_text(*share)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The guard's line for `snapshot`, once the probes cost more than [`WARN_SHARE`]:
/// the TUI's footer and, once per crossing, stderr.
pub(crate) fn live_warning(labels: &[super::ProbeLabel], snapshot: &Snapshot) -> Option<String> {
    // A line of its own on stderr: room for the function names whole (their parameter
    // lists go first), where the footer's 28 columns cut them in the middle.
    let live = Headline::live(snapshot);
    let dear = over_the_guard(labels, snapshot, &live, STDERR_NAME)?;
    live.warning(&dear, BUDGET_FLAG)
}

/// [`live_warning`] under `--in-situ`, from `summary`, the measurement so far: a second
/// of the run is partly detached, so its rates (0.28% of one CPU where the set costs
/// 3.5%) would judge, and name, the windows rather than the probes. Nothing until the
/// measurement has an answer. Each probe's share is its hits over the attached seconds
/// at its estimated price, as the end lines give it.
pub(crate) fn in_situ_warning(
    labels: &[super::ProbeLabel],
    snapshot: &Snapshot,
    summary: &insitu::InSituSummary,
) -> Option<String> {
    if summary.verdict != insitu::Verdict::Measured {
        return None;
    }
    let measured = Headline::of_in_situ(summary)?;
    if !measured.too_dear() {
        return None;
    }
    let attached = super::answer::attached_seconds(summary, snapshot.elapsed.as_secs_f64());
    let names: Vec<String> = labels
        .iter()
        .map(|l| super::names::fit(&l.display, STDERR_NAME))
        .collect();
    let shares: Vec<Option<f64>> = (0..labels.len())
        .map(|id| {
            let p = snapshot.probes.get(id)?;
            Some(p.whole_cost_ns? * p.hits as f64 / attached / 1e9)
        })
        .collect();
    let line = measured.warning(&dearest(&names, &shares), BUDGET_FLAG)?;
    Some(line.replacen(
        "probes cost the target ",
        "probes cost the target, measured in situ, ",
        1,
    ))
}

/// The width of a probe's name in the stderr warning.
const STDERR_NAME: usize = 64;

/// The width of a probe's name in the TUI footer's warning.
const FOOTER_NAME: usize = 28;

/// [`live_warning`] in at most `width` characters (the TUI's footer), for `live`, the
/// headline its status line shows.
pub(crate) fn live_warning_fit(
    labels: &[super::ProbeLabel],
    snapshot: &Snapshot,
    live: &Headline,
    width: usize,
) -> Option<String> {
    let dear = over_the_guard(labels, snapshot, live, FOOTER_NAME)?;
    live.warning_fit(&dear, BUDGET_FLAG, width)
}

/// The probes dearest first, once `live` costs more than [`WARN_SHARE`]; `None`
/// under it.
fn over_the_guard(
    labels: &[super::ProbeLabel],
    snapshot: &Snapshot,
    live: &Headline,
    name_width: usize,
) -> Option<Vec<(String, f64)>> {
    if !live.too_dear() {
        return None;
    }
    let names: Vec<String> = labels
        .iter()
        .map(|l| super::names::fit(&l.display, name_width))
        .collect();
    let shares: Vec<Option<f64>> = (0..labels.len())
        .map(|id| snapshot.probes.get(id).and_then(|p| p.cpu_share))
        .collect();
    Some(dearest(&names, &shares))
}

/// Per-probe lines (share of one CPU, text) dearest first, ties and unpriced in their
/// given order; past `cap`, one line saying how many cheaper ones and what they cost
/// together.
pub(crate) fn dearest_lines(mut lines: Vec<(Option<f64>, String)>, cap: usize) -> String {
    lines.sort_by(|a, b| match (a.0, b.0) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    let mut out = String::new();
    // A single line left over reads better than a line saying one more.
    let shown = if lines.len() > cap + 1 {
        cap
    } else {
        lines.len()
    };
    for (_, line) in &lines[..shown] {
        out.push_str(line);
        out.push('\n');
    }
    let rest = &lines[shown..];
    if !rest.is_empty() {
        let share: f64 = rest.iter().filter_map(|(s, _)| *s).sum();
        out.push_str(&format!(
            "  and {} cheaper probes: {} of one CPU together\n",
            rest.len(),
            share_text(share)
        ));
    }
    out
}

/// The probes costing most in `snapshot` (display name, share of one CPU), dearest
/// first; ties in name order, so the list does not flicker.
pub(crate) fn dearest(names: &[String], shares: &[Option<f64>]) -> Vec<(String, f64)> {
    let mut priced: Vec<(String, f64)> = names
        .iter()
        .zip(shares)
        .filter_map(|(n, s)| s.filter(|&s| s > 0.0).map(|s| (n.clone(), s)))
        .collect();
    priced.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    priced
}

/// What the caches were assumed to be, in words a DBA reads.
pub(crate) fn assumption_words(assumes: Assumption) -> &'static str {
    match assumes {
        Assumption::Hot => "caches warm between hits",
        Assumption::Cold => "caches cold between hits",
        Assumption::Clock => "priced by how slow each hit ran",
    }
}

/// A share of one CPU: two decimals below 1%, one up to 100%.
pub(crate) fn share_text(share: f64) -> String {
    let p = share * 100.0;
    if p.abs() < 1.0 {
        format!("{p:.2}%")
    } else {
        format::percent(share)
    }
}

/// The probes' share of the target's whole CPU: `90%`, `nearly all` (an estimate a
/// little over what was measured reads as all of it, not as 104%).
fn whole_text(share: f64) -> String {
    if share >= 0.995 {
        "nearly all".into()
    } else {
        ratio_text(share)
    }
}

/// A ratio as a percentage: `18%`, `2.5%`.
fn ratio_text(ratio: f64) -> String {
    let p = ratio * 100.0;
    if p < 10.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

/// A probe without hits has no cost to show: its price per hit would read as what it
/// cost, and it cost nothing. Another tool's probe whose hits probetop could not count
/// (the kernel refused its counter) keeps its price: its hits are unknown, not none.
pub(crate) fn unpriced_without_hits(
    mut cost: ProbeCostReport,
    hits: u64,
    uncounted: bool,
) -> ProbeCostReport {
    if hits == 0 && !uncounted {
        cost.whole_cost_ns = None;
        cost.cpu_share = None;
        cost.method = None;
    }
    cost
}

/// The method of one probe's cost, for exports.
pub(crate) fn probe_method(cost: &ProbeCostReport) -> &'static str {
    match cost.method {
        Some(PriceMethod::InSitu) => "in-situ",
        Some(_) => "estimate",
        None => "none",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::present::ProbeSnapshot;

    fn snapshot(probes: &[(f64, Option<f64>)], target_cpu: Option<f64>) -> Snapshot {
        Snapshot {
            probes: probes
                .iter()
                .map(|&(per_second, whole)| ProbeSnapshot {
                    per_second,
                    whole_cost_ns: whole,
                    cpu_share: whole.map(|w| crate::present::cpu_share(w, per_second)),
                    hits: 1,
                    ..Default::default()
                })
                .collect(),
            target_cpu,
            ..Default::default()
        }
    }

    #[test]
    fn the_headline_sets_the_cost_against_the_target() {
        // 10k hits/s at 2 us and 5k/s at 2.4 us: 2% + 1.2% of one CPU.
        let s = snapshot(
            &[(10_000.0, Some(2000.0)), (5_000.0, Some(2400.0))],
            Some(0.211),
        );
        let h = Headline::live(&s);
        let share = h.cpu_share.expect("priced");
        assert!((share - 0.032).abs() < 1e-9, "{share}");
        let own = h.target_own.expect("own");
        assert!((own - 0.179).abs() < 1e-9, "{own}");
        let per_hit = h.per_hit_ns.expect("per hit");
        assert!((per_hit - 32_000.0 / 15.0).abs() < 1e-6, "{per_hit}");
        let text = h.sentence();
        assert!(
            text.starts_with(
                "+3.2% of one CPU, +18% on the target's own 17.9%, 2.13us a hit, estimated"
            ),
            "{text}"
        );
        assert!(
            h.status()
                .starts_with("cost +3.2% cpu  (+18% on target's 17.9%)"),
            "{}",
            h.status()
        );
        assert!(!Headline::live(&snapshot(&[(100.0, Some(1000.0))], Some(0.5))).too_dear());
        assert!(h.too_dear(), "18% on the target's own CPU is over 5%");
    }

    #[test]
    fn no_price_says_how_to_get_one_and_no_hits_cost_nothing() {
        let h = Headline::live(&snapshot(&[(1000.0, None)], Some(0.2)));
        assert_eq!(h.cpu_share, None);
        assert!(h.sentence().contains("probetop calibrate"));
        assert_eq!(h.warning(&[], false), None);
        let cost = ProbeCostReport {
            whole_cost_ns: Some(900.0),
            cpu_share: Some(0.0),
            method: Some(PriceMethod::Calibration),
            ..Default::default()
        };
        let none = unpriced_without_hits(cost.clone(), 0, false);
        assert_eq!((none.whole_cost_ns, none.cpu_share), (None, None));
        assert_eq!(probe_method(&none), "none");
        assert_eq!(
            unpriced_without_hits(cost.clone(), 3, false).whole_cost_ns,
            Some(900.0)
        );
        // Uncounted (a refused counter): the price stays.
        assert_eq!(
            unpriced_without_hits(cost, 0, true).whole_cost_ns,
            Some(900.0)
        );
    }

    #[test]
    fn a_headline_without_a_price_per_hit_says_why() {
        // Priced, and hit: the short form keeps the price per hit too (at 80 columns a
        // status line with drops on it took the short form, which had none).
        let h = Headline::live(&snapshot(&[(10_000.0, Some(2000.0))], Some(0.5)));
        assert!(
            h.status_short().contains("2.00us/hit"),
            "{}",
            h.status_short()
        );
        assert_eq!(h.unpriced, None);
        // Priced, not hit in the last second: said, not left blank.
        let mut idle = snapshot(&[(0.0, Some(2000.0))], Some(0.5));
        idle.calibrated = true;
        let h = Headline::live(&idle);
        assert_eq!(h.unpriced, Some(Unpriced::NoHits));
        for text in [h.status(), h.status_short(), h.sentence()] {
            assert!(text.contains("no hits"), "{text}");
        }
        // No calibration, or one that prices none of the sites.
        let mut bare = snapshot(&[(1000.0, None)], Some(0.5));
        let h = Headline::live(&bare);
        assert_eq!(h.unpriced, Some(Unpriced::NoCalibration));
        assert!(
            h.status().contains("run probetop calibrate"),
            "{}",
            h.status()
        );
        bare.calibrated = true;
        let h = Headline::live(&bare);
        assert_eq!(h.unpriced, Some(Unpriced::UncalibratedSites));
        assert!(h.status().contains("no probed site is calibrated"));
        assert!(h.sentence().contains("prices none of the probed sites"));
    }

    #[test]
    fn the_status_form_keeps_its_length_as_numbers_grow() {
        let at = |share_per_s: f64| {
            Headline::live(&snapshot(&[(share_per_s, Some(1000.0))], Some(2.0))).status()
        };
        // 9,000 and 11,000 hits/s at 1 us: 0.9% and 1.1% of a CPU.
        assert_eq!(at(9_000.0).chars().count(), at(11_000.0).chars().count());
        assert_eq!(at(9_000.0).chars().count(), at(150_000.0).chars().count());
    }

    #[test]
    fn the_warning_names_the_dearest_probes() {
        let h = Headline::live(&snapshot(&[(40_000.0, Some(2000.0))], None));
        let names = vec!["uprobe:a".to_string(), "uprobe:b".to_string()];
        let dear = dearest(&names, &[Some(0.02), Some(0.06)]);
        assert_eq!(dear[0].0, "uprobe:b");
        let line = h.warning(&dear, false).expect("8% is over 5%");
        assert!(line.contains("8.0% of one CPU"), "{line}");
        assert!(
            line.contains("dearest: uprobe:b 6.0%, uprobe:a 2.0%"),
            "{line}"
        );
        assert!(line.contains("--mode kernel"), "{line}");
        assert!(!line.contains("--budget"), "{line}");
        // --budget exists: the live warning offers it.
        let line = h.warning(&dear, BUDGET_FLAG).expect("8% is over 5%");
        assert!(line.contains("--budget"), "{line}");
    }

    /// On stderr the dearest probes keep their function names whole (parameter lists
    /// dropped), where the footer's narrow column cuts them in the middle.
    #[test]
    fn the_stderr_warning_keeps_function_names_whole() {
        let s = snapshot(&[(8_000.0, Some(10_000.0)), (2_000.0, Some(1_500.0))], None);
        let labels = [
            crate::present::ProbeLabel::new(
                crate::spec::ProbeKind::Uprobe,
                "THD::has_thd_temporary_tables() [sstep]",
                "/usr/sbin/mariadbd",
            ),
            crate::present::ProbeLabel::new(
                crate::spec::ProbeKind::Uprobe,
                "Prepared_statement::execute_loop(String*, bool, unsigned char*, unsigned char*)",
                "/usr/sbin/mariadbd",
            ),
        ];
        let line = live_warning(&labels, &s).expect("8.3% is over 5%");
        assert!(
            line.contains(
                "dearest: uprobe:THD::has_thd_temporary_tables() [sstep] 8.0%, \
                 uprobe:Prepared_statement::execute_loop(…) 0.30%: "
            ),
            "{line}"
        );
        // The footer keeps its narrow names.
        let footer = live_warning_fit(&labels, &s, &Headline::live(&s), 400).expect("over 5%");
        assert!(footer.contains("…"), "{footer}");
    }

    /// Under `--in-situ` the guard judges the measurement, not the last second: that
    /// second was partly detached (200 hits/s where the probes take 1,900 while
    /// attached), and its 0.2% would have named the windows. Each probe's share is
    /// over the attached seconds; no line while the measurement has no answer.
    #[test]
    fn under_in_situ_the_guard_judges_the_measurement() {
        let mut s = snapshot(&[(200.0, Some(10_000.0)), (200.0, Some(1_300.0))], None);
        // 15 s into the run, 8 s of them detached: 7 s attached at 1,900 hits/s.
        s.elapsed = std::time::Duration::from_secs(15);
        for p in &mut s.probes {
            p.hits = 13_300;
        }
        let labels = [
            crate::present::ProbeLabel::new(
                crate::spec::ProbeKind::Uprobe,
                "dispatch_command+ret [sstep]",
                "/usr/sbin/mariadbd",
            ),
            crate::present::ProbeLabel::new(
                crate::spec::ProbeKind::Uprobe,
                "do_command",
                "/usr/sbin/mariadbd",
            ),
        ];
        assert_eq!(live_warning(&labels, &s), None, "the partial second");
        let share = insitu::Interval {
            mean: 0.035,
            low: 0.028,
            high: 0.042,
        };
        let measured = crate::present::export::testing::in_situ(share, Some(0.078));
        assert_eq!(
            in_situ_warning(&labels, &s, &measured).expect("+45% on its own CPU"),
            "probes cost the target, measured in situ, 3.5% of one CPU, +45% on its own CPU \
             (over 5%); dearest: uprobe:dispatch_command+ret [sstep] 1.9%, uprobe:do_command \
             0.25%: detach them (space), pass --budget, or --mode kernel (cheaper per hit)"
        );
        let measuring = insitu::InSituSummary {
            verdict: insitu::Verdict::Measuring,
            ..measured
        };
        assert_eq!(in_situ_warning(&labels, &s, &measuring), None);
    }

    /// The line crossed is the one marked: 3% of one CPU is under 5%, +27% on the
    /// target's own 11% is over it.
    #[test]
    fn the_warning_marks_the_line_it_crossed() {
        // 2,000 hits/s at 15 us: 3% of one CPU, on a target whose own CPU is 11%.
        let h = Headline::live(&snapshot(&[(2_000.0, Some(15_000.0))], Some(0.14)));
        let dear = vec![("dispatch_command+ret [sstep]".to_string(), 0.03)];
        assert_eq!(
            h.warning(&dear, true).expect("over 5% of its own CPU"),
            "probes cost the target 3.0% of one CPU, +27% on its own CPU (over 5%); \
             dearest: dispatch_command+ret [sstep] 3.0%: detach them (space), pass \
             --budget, or --mode kernel (cheaper per hit)"
        );
        let both = Headline::live(&snapshot(&[(4_000.0, Some(20_000.0))], Some(0.4)));
        let line = both.warning(&[], false).expect("8% is over 5%");
        assert!(
            line.starts_with(
                "probes cost the target 8.0% of one CPU (over 5%), +25% on its own CPU (over 5%): "
            ),
            "{line}"
        );
    }

    /// The footer's form fits the terminal: at 80 columns it still names the dearest
    /// probe and the remedies; wider, the whole sentence and more probes.
    #[test]
    fn the_footer_warning_fits_and_keeps_the_dearest_name() {
        let h = Headline::live(&snapshot(&[(2_000.0, Some(15_000.0))], Some(0.14)));
        let dear = vec![
            ("dispatch_command+ret [sstep]".to_string(), 0.020),
            ("uprobe:dispatch_command(…)".to_string(), 0.003),
            ("uprobe:do_command(…)".to_string(), 0.002),
        ];
        let at = |width| h.warning_fit(&dear, true, width).expect("too dear");
        // What crossed 5% is the set; a probe's 2.0% is its own share.
        assert_eq!(
            at(79),
            "! all probes over 5% of target's CPU; dispatch_command+ret [sstep] alone 2.0%"
        );
        assert_eq!(
            h.warning_fit(&[("work_unit".into(), 0.019)], true, 79),
            Some("! all probes over 5% of target's CPU; work_unit alone 1.9%; --budget".into())
        );
        assert_eq!(
            at(159),
            "! probes cost 3.0% of one CPU, +27% on its own CPU (over 5%); dearest alone: \
             dispatch_command+ret [sstep] 2.0%; space detaches, or --budget, --mode kernel"
        );
        assert_eq!(
            at(240),
            "! probes cost 3.0% of one CPU, +27% on its own CPU (over 5%); dearest alone: \
             dispatch_command+ret [sstep] 2.0%, uprobe:dispatch_command(…) 0.30%, \
             uprobe:do_command(…) 0.20%; space detaches, or --budget, --mode kernel"
        );
        // Over 5% of one CPU: that is the line named.
        let dear_cpu = Headline::live(&snapshot(&[(40_000.0, Some(2000.0))], None));
        assert_eq!(
            dear_cpu.warning_fit(&[("work_unit".into(), 0.05)], true, 79),
            Some("! all probes over 5% of one CPU; work_unit alone 5.0%; --budget".into())
        );
        for width in [40, 60, 79, 100, 120, 159, 200] {
            let text = at(width);
            assert!(text.chars().count() <= width, "{width}: {text}");
            assert!(text.contains("dispatch_command+ret"), "{width}: {text}");
        }
        assert_eq!(Headline::default().warning_fit(&dear, true, 80), None);
    }

    /// The narrowest status form keeps its words apart: `+21% target est`.
    #[test]
    fn the_short_status_keeps_its_words_apart() {
        let h = Headline::live(&snapshot(&[(2_000.0, Some(11_000.0))], Some(0.127)));
        assert_eq!(
            h.status_short(),
            "cost +2.2% cpu  +21% target 11.0us/hit est"
        );
        let wide = Headline::live(&snapshot(&[(90_000.0, Some(11_000.0))], Some(1.0)));
        assert!(
            wide.status_short().contains(" target ") && wide.status_short().ends_with("/hit est"),
            "{}",
            wide.status_short()
        );
    }

    /// A snapshot of the demo's shape: `probes` of one CPU at 2.3 us a hit, on a
    /// target measured at `measured` of one CPU with standard error `error`.
    fn measured(probes: f64, measured: f64, error: f64) -> Headline {
        let mut s = snapshot(&[(probes / 2.3e-6, Some(2300.0))], Some(measured));
        s.target_cpu_error = Some(error);
        Headline::live(&s)
    }

    /// The demo: the probes cost 4.6% of one CPU on a fixture whose own work is
    /// ~0.5%. Its own CPU, what is left of 5.1% once an estimate good to a quarter is
    /// taken out, says nothing ("+930% on target's 0.49%" one second, gone the next):
    /// the headline says the probes' share of its whole CPU instead, in the same form
    /// every second as the measurement moves.
    #[test]
    fn a_target_that_is_mostly_the_probes_is_said_in_words_every_second() {
        for (total, error) in [(0.049, 0.001), (0.051, 0.002), (0.053, 0.001), (0.050, 0.0)] {
            let h = measured(0.046, total, error);
            assert_eq!(h.target_own, None, "{total}: {h:?}");
            let share = h.of_target.expect("its whole CPU is well measured");
            assert!((share - 0.046 / total).abs() < 1e-9, "{share}");
            assert!(h.status().contains("% of target's cpu)"), "{}", h.status());
            assert!(
                h.status_short().contains("% of target "),
                "{}",
                h.status_short()
            );
            assert!(
                h.sentence().contains("% of the target's CPU, 2.30us a hit"),
                "{}",
                h.sentence()
            );
            assert!(
                !h.sentence().contains("on the target's own"),
                "{}",
                h.sentence()
            );
            // Over 5% of its CPU: the guard's line says so in the same words.
            assert!(h.too_dear());
        }
        assert_eq!(
            measured(0.046, 0.051, 0.0005).status(),
            "cost +4.6% cpu  (90% of target's cpu)     2.30us/hit est"
        );
        // An estimate a little over what was measured: all of it, not 104%.
        let over = measured(0.053, 0.051, 0.001);
        assert_eq!(over.of_target, Some(1.0));
        assert!(
            over.sentence()
                .contains("the probes are nearly all of the target's CPU"),
            "{}",
            over.sentence()
        );
    }

    /// The rule: the target's own CPU is divided by only when it is four times its
    /// uncertainty (the measurement's standard error plus a quarter of the estimate);
    /// its whole CPU only when that is four times the measurement's error; else
    /// nothing is said of the target.
    #[test]
    fn the_target_part_follows_one_rule() {
        // mariadbd: 3.2% on 21.1%, measured to 0.5%: +18% on its own 17.9%.
        let h = measured(0.032, 0.211, 0.005);
        assert_eq!(h.of_target, None);
        assert!((h.target_own.expect("own") - 0.179).abs() < 1e-9);
        // The same, its mean moving by 4% of a CPU: the own 17.9% is within four times
        // its uncertainty (4% + a quarter of 3.2%), the whole 21.1% is not.
        let noisy = measured(0.032, 0.211, 0.04);
        assert_eq!(noisy.target_own, None);
        assert!(noisy.of_target.is_some());
        // An idle target, 0.3% measured to 0.1%: nothing to set the cost against.
        let idle = measured(0.001, 0.003, 0.001);
        assert_eq!((idle.target_own, idle.of_target), (None, None));
        assert!(!idle.status().contains("target"), "{}", idle.status());
        // From an estimate, a ratio over the own CPU is never over 100%: past it the
        // own CPU is within the estimate's own error.
        for probes in [0.001, 0.01, 0.05, 0.2] {
            for total in [0.002, 0.01, 0.05, 0.1, 0.3, 1.0] {
                if let Some(ratio) = measured(probes, total, 0.0).on_target() {
                    assert!(ratio <= 1.0 + 1e-9, "{probes} on {total}: {ratio}");
                }
            }
        }
        assert_eq!(
            against_target(0.046, 0.005, 0.0115, 0.0, false),
            Some(Against::Whole(0.046 / (0.005 + 0.046)))
        );
        assert_eq!(
            against_target(0.032, 0.179, 0.008, 0.0, false),
            Some(Against::Own(0.179))
        );
        assert_eq!(against_target(0.0, 0.003, 0.001, 0.001, false), None);
    }

    /// Hysteresis at the rule's edge: a target whose own CPU sits at 3.8x and 4.2x its
    /// uncertainty in turn keeps the form it took (each reading alone would flip the
    /// status line every second); it goes back to words only below 3x.
    #[test]
    fn a_ratio_near_the_rule_s_edge_keeps_its_form() {
        // 3.2% of one CPU on a measured 21.1%: own 17.9%, uncertain by the
        // measurement's error plus a quarter of 3.2%.
        let at = |times: f64| {
            let mut s = snapshot(&[(0.032 / 2.3e-6, Some(2300.0))], Some(0.211));
            s.target_cpu_error = Some(0.179 / times - 0.25 * 0.032);
            s
        };
        let readings: Vec<Snapshot> = [4.2, 3.8, 4.1, 3.9, 4.3, 3.7, 4.0, 3.6]
            .into_iter()
            .map(at)
            .collect();
        // Each alone, the form flips with every reading.
        let alone: Vec<bool> = readings
            .iter()
            .map(|s| Headline::live(s).target_own.is_some())
            .collect();
        assert_eq!(alone, [true, false, true, false, true, false, true, false]);
        // In turn, one form throughout.
        let mut previous: Option<Headline> = None;
        for (i, s) in readings.iter().enumerate() {
            let h = Headline::live_after(s, previous.as_ref());
            assert!(h.target_own.is_some(), "reading {i}: {h:?}");
            assert!(h.status().contains(" on target's "), "{}", h.status());
            previous = Some(h);
        }
        // Starting under 4x: words until it reaches 4x, then the ratio held.
        let mut previous: Option<Headline> = None;
        let mut forms = Vec::new();
        for s in readings[1..].iter() {
            let h = Headline::live_after(s, previous.as_ref());
            forms.push(h.target_own.is_some());
            previous = Some(h);
        }
        assert_eq!(forms, [false, true, true, true, true, true, true]);
        // Below 3x, back to words.
        let h = Headline::live_after(&at(2.9), previous.as_ref());
        assert_eq!(h.target_own, None, "{h:?}");
    }

    /// In situ, the detached windows' CPU is measured as the added share is: divided by
    /// when it is four times the added share's standard error.
    #[test]
    fn in_situ_follows_the_same_rule() {
        let added = insitu::Interval {
            mean: 0.046,
            low: 0.040,
            high: 0.052,
        };
        let summary = |base: f64| crate::present::export::testing::in_situ(added, Some(base));
        let demo = Headline::of_in_situ(&summary(0.005)).expect("a share");
        assert_eq!(demo.target_own, None);
        assert!((demo.of_target.expect("whole") - 0.046 / 0.051).abs() < 1e-9);
        let server = Headline::of_in_situ(&summary(0.179)).expect("a share");
        assert_eq!(server.target_own, Some(0.179));
        // The narrowest form says how in whole words ("situ" alone read as a cut word).
        for h in [demo, server] {
            assert!(
                h.status_short().ends_with(" in situ"),
                "{}",
                h.status_short()
            );
        }
    }

    /// The method says how each part was priced: probetop's own probes as the run
    /// assumed (by the clock here), other tools' by the calibration's hot loop.
    #[test]
    fn the_method_says_how_each_part_was_priced() {
        let priced = |rows: &[(PriceMethod, Assumption)]| {
            let mut s = snapshot(&vec![(1000.0, Some(2000.0)); rows.len().max(1)], None);
            for (p, &row) in s.probes.iter_mut().zip(rows) {
                p.priced = Some(row);
            }
            s.assumption = Some(crate::price::Decision {
                assumes: Assumption::Clock,
                why: String::new(),
            });
            Headline::live(&s).how()
        };
        let clock = (PriceMethod::Calibration, Assumption::Clock);
        let other = (PriceMethod::OtherTool, Assumption::Hot);
        assert_eq!(
            priced(&[clock]),
            "estimated (priced by how slow each hit ran)"
        );
        assert_eq!(
            priced(&[clock, other]),
            "estimated (own probes priced by how slow each hit ran; other tools' probes by \
             the calibration's hot loop plus their programs)"
        );
        assert_eq!(
            priced(&[other]),
            "estimated (other tools' probes by the calibration's hot loop plus their programs)"
        );
        assert_eq!(
            priced(&[clock, (PriceMethod::Calibration, Assumption::Cold)]),
            "estimated (priced by how slow each hit ran, some with caches cold between hits)"
        );
        // No row says how it was priced: the run's assumption.
        assert_eq!(priced(&[]), "estimated (priced by how slow each hit ran)");
    }
}
