//! `--budget`: keeping what the probes cost the target under a ceiling, by duty cycling.
//!
//! Every probe is attached for a fraction (the duty) of short periods and detached for the
//! rest. The duty comes from the cost measured while attached: in situ where that has a
//! signal, else the estimate per hit times the hits, raised by the estimate's known error
//! (docs/cost.md: within 25% of the truth). The ledger holds every `--budget-window` to its
//! allowance: what a window has spent lowers the duty for the rest of it. A period's
//! attached part starts at a random offset within it, and periods vary in length, so a
//! load that comes and goes at some period is seen at every phase of it (no aliasing), and
//! each instant of a period is attached with the same probability: a period's hits over
//! its attached fraction is an unbiased count of its calls ([`Scaler`]).
//!
//! Each attached part costs the target a toggle besides its hits: attaching and detaching
//! rewrite the probed pages in every process mapping them (page copies, TLB shootdowns,
//! the mmap lock). That is priced ([`toggle_cost_ns`]) into the ledger and the duty, and
//! the periods are made as long as the window allows, so a duty is reached with the
//! fewest toggles (docs/user-guide.md, "What a toggle costs").
//!
//! This module is pure arithmetic; `session::budget` attaches and detaches.

use std::collections::VecDeque;
use std::fmt;

use crate::stats::XorShift;

/// What the estimate of a hit's cost may be short of the truth by (docs/cost.md: within
/// 25% in every cell measured), added to it before it is held against the budget.
pub(crate) const ESTIMATE_MARGIN: f64 = 0.25;
/// What one toggle (attach and detach) of a set costs the target, ns, and what each probe
/// in it adds: bounds from in situ's `churn_cpu_ms` on the flood fixture (the target's CPU
/// across each change beyond its detached rate: -41..+47 us for one probe, hit or not,
/// and -41 us for 43 probes on libc's pages, 2026-11-27), rounded up (docs/user-guide.md,
/// "What a toggle costs").
const TOGGLE_NS: f64 = 50_000.0;
const TOGGLE_PROBE_NS: f64 = 2_000.0;

/// What `toggles` toggles of `probes` probes in all cost the target, ns.
fn toggle_cost_ns(toggles: f64, probes: f64) -> f64 {
    toggles * TOGGLE_NS + probes * TOGGLE_PROBE_NS
}
/// The shortest attached part of a period: an attach takes 1-10 ms (longer on a busy
/// machine), which must stay small beside it.
const ON_MIN_S: f64 = 0.04;
/// The shortest period: each change blocks the session loop for a grace period.
const PERIOD_MIN_S: f64 = 0.25;
/// Periods per budget window at least, so a window's spending can be corrected within it.
const PERIODS_PER_WINDOW: f64 = 4.0;
/// Periods whose cost makes the rate while attached.
const RECENT: usize = 4;
/// 95% two-sided normal quantile.
const Z95: f64 = 1.96;

/// The ceiling asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// A share of the target's CPU time (0.01 is 1%).
    Share(f64),
    /// CPU seconds per second of the run.
    Rate(f64),
}

impl Budget {
    /// `2%`, `2` (percent), `20ms/s`, `500us/s`. Refuses 0, negatives, over 100% and
    /// what does not parse, with what to give.
    pub fn parse(text: &str) -> Result<Self, String> {
        const WHAT: &str = "give a share of the target's CPU above 0% and at most 100% (2%), or CPU time per second (20ms/s)";
        let t = text.trim();
        let number = |s: &str| s.trim().parse::<f64>().ok().filter(|x| x.is_finite());
        if let Some((amount, per)) = t.split_once('/') {
            if per.trim() != "s" {
                return Err(WHAT.into());
            }
            let amount = amount.trim();
            let (value, unit) = if let Some(v) = amount.strip_suffix("ms") {
                (number(v), 1e-3)
            } else if let Some(v) = amount.strip_suffix("us") {
                (number(v), 1e-6)
            } else if let Some(v) = amount.strip_suffix('s') {
                (number(v), 1.0)
            } else {
                (None, 0.0)
            };
            return match value {
                Some(v) if v > 0.0 => Ok(Self::Rate(v * unit)),
                _ => Err(WHAT.into()),
            };
        }
        match number(t.strip_suffix('%').unwrap_or(t)) {
            Some(p) if p > 0.0 && p <= 100.0 => Ok(Self::Share(p / 100.0)),
            _ => Err(WHAT.into()),
        }
    }

    /// The number asked: a share, or seconds per second.
    pub fn asked(self) -> f64 {
        match self {
            Self::Share(s) | Self::Rate(s) => s,
        }
    }

    /// The unit `asked` and `used` are in, for exports.
    pub fn unit(self) -> &'static str {
        match self {
            Self::Share(_) => "share",
            Self::Rate(_) => "seconds_per_second",
        }
    }

    /// A value in this budget's unit, as the status line words it.
    pub fn format(self, value: f64) -> String {
        match self {
            Self::Share(_) => format!("{:.1}%", value * 100.0),
            Self::Rate(_) => format!("{:.1}ms/s", value * 1e3),
        }
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.format(self.asked()))
    }
}

/// One period as planned: its length, where its attached part starts, and how long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Plan {
    pub period_s: f64,
    pub on_offset_s: f64,
    pub on_s: f64,
}

/// What one period cost, as measured once its hits were read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Observed {
    pub period_s: f64,
    /// Seconds attached.
    pub on_s: f64,
    /// The estimated probe CPU of its hits, ns (without margin).
    pub estimated_ns: f64,
    /// The target's CPU over the period, ns (probes included).
    pub target_cpu_ns: f64,
    /// Toggles (attach, then detach) of the set in the period.
    pub toggles: f64,
    /// Probes attached and detached again in the period (one toggle of a set of 1,000
    /// probes is 1,000).
    pub toggled: f64,
}

/// Where the cost while attached came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Feedback {
    /// Nothing counted yet.
    None,
    /// The estimate per hit, raised by its known error.
    Estimate,
    /// Measured on the target (in situ), its interval's top.
    InSitu,
}

/// A mean with a low and a high bound.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Bounds {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
}

/// The duty controller and the windows' ledger.
#[derive(Debug)]
pub(crate) struct Controller {
    budget: Budget,
    window_s: f64,
    duty: f64,
    min_duty: f64,
    /// The last periods: (seconds attached, probe CPU ns with margin, period seconds,
    /// target CPU ns).
    recent: VecDeque<(f64, f64, f64, f64)>,
    /// Measured in situ: added CPU per second while attached (the interval's top).
    in_situ_rate: Option<f64>,
    /// The current window: seconds into it, probe CPU spent (estimate and its bounds),
    /// target CPU.
    window_elapsed_s: f64,
    window_spent: Bounds,
    window_target_ns: f64,
    /// The whole run.
    total_spent: Bounds,
    total_target_ns: f64,
    total_s: f64,
    /// The highest share or rate of a whole window so far.
    worst_window: Option<f64>,
    last_window: Option<f64>,
    feedback: Feedback,
    /// What the probes would cost at the minimum duty, when that is over the budget.
    floor: Option<f64>,
    rng: XorShift,
    /// How much later than planned attached parts ended lately, s (a moving mean).
    overrun_s: f64,
    /// Probes in the set toggled each period (the last toggle's).
    set_size: f64,
}

impl Controller {
    pub(crate) fn new(budget: Budget, window_s: f64, seed: u64) -> Self {
        let period_max = (window_s / PERIODS_PER_WINDOW).max(PERIOD_MIN_S);
        let min_duty = (ON_MIN_S / period_max).min(1.0);
        Self {
            budget,
            window_s,
            duty: min_duty,
            min_duty,
            recent: VecDeque::new(),
            in_situ_rate: None,
            window_elapsed_s: 0.0,
            window_spent: Bounds::default(),
            window_target_ns: 0.0,
            total_spent: Bounds::default(),
            total_target_ns: 0.0,
            total_s: 0.0,
            worst_window: None,
            last_window: None,
            feedback: Feedback::None,
            floor: None,
            rng: XorShift::new(seed | 1),
            overrun_s: 0.0,
            set_size: 0.0,
        }
    }

    #[cfg(test)]
    fn duty(&self) -> f64 {
        self.duty
    }

    #[cfg(test)]
    fn min_duty(&self) -> f64 {
        self.min_duty
    }

    pub(crate) fn floor(&self) -> Option<f64> {
        self.floor
    }

    /// The longest period the window allows (a quarter of it): the fewest toggles for a
    /// duty, while a window's spending can still be corrected within it.
    fn period_max(&self) -> f64 {
        (self.window_s / PERIODS_PER_WINDOW).max(PERIOD_MIN_S)
    }

    /// What one toggle of the set costs the target, ns.
    fn toggle_ns(&self) -> f64 {
        toggle_cost_ns(1.0, self.set_size)
    }

    /// The next period: its length drawn within 30% of the longest the window allows,
    /// its attached part at a random offset. Each period toggles the set once, so the
    /// longest periods reach a duty with the fewest toggles; the jitter and the random
    /// offset keep a periodic load from aliasing.
    pub(crate) fn plan(&mut self) -> Plan {
        let base = self.period_max();
        let jitter = 0.7 + 0.6 * self.uniform();
        let period_s = base * jitter;
        if self.duty >= 1.0 {
            return Plan {
                period_s,
                on_offset_s: 0.0,
                on_s: period_s,
            };
        }
        // The attached part ends when the session gets to it, later on a busy machine:
        // what it overran by lately is taken off what is planned.
        let on_s = (self.duty * period_s - self.overrun_s)
            .max(ON_MIN_S / 4.0)
            .min(period_s);
        Plan {
            period_s,
            on_offset_s: (period_s - on_s) * self.uniform(),
            on_s,
        }
    }

    fn uniform(&mut self) -> f64 {
        self.rng.below(1_000_001) as f64 / 1e6
    }

    /// An attached part planned for `planned_s` lasted `actual_s`.
    pub(crate) fn attached_for(&mut self, planned_s: f64, actual_s: f64) {
        let overrun = (actual_s - planned_s).max(0.0);
        self.overrun_s = 0.7 * self.overrun_s + 0.3 * overrun;
    }

    /// In situ's added CPU per second while attached, once it has a signal.
    pub(crate) fn measured_in_situ(&mut self, added_rate_high: Option<f64>) {
        self.in_situ_rate = added_rate_high;
    }

    /// The probes' CPU per second while attached, with the margin of where it came from.
    fn rate_on(&self) -> Option<f64> {
        if let Some(rate) = self.in_situ_rate {
            return Some(rate);
        }
        let on: f64 = self.recent.iter().map(|r| r.0).sum();
        let cost: f64 = self.recent.iter().map(|r| r.1).sum();
        (on > 0.0 && cost > 0.0).then(|| cost / (on * 1e9))
    }

    /// What toggling costs per second at the planned periods (their mean length).
    fn toggle_rate(&self) -> f64 {
        self.toggle_ns() / (self.period_max() * 1e9)
    }

    /// The allowed probe CPU per second: for a share, of the target's CPU without them.
    fn allowed_rate(&self) -> Option<f64> {
        match self.budget {
            Budget::Rate(r) => Some(r),
            Budget::Share(s) => {
                let seconds: f64 = self.recent.iter().map(|r| r.2).sum();
                let base: f64 = self
                    .recent
                    .iter()
                    .map(|r| (r.3 - r.1 / (1.0 + ESTIMATE_MARGIN)).max(0.0))
                    .sum();
                (seconds > 0.0).then(|| s / (1.0 - s).max(1e-9) * base / (seconds * 1e9))
            }
        }
    }

    /// Takes a period's cost into the ledger and sets the duty for the next.
    pub(crate) fn observe(&mut self, o: Observed) {
        let with_margin = o.estimated_ns * (1.0 + ESTIMATE_MARGIN);
        self.recent
            .push_back((o.on_s, with_margin, o.period_s, o.target_cpu_ns));
        while self.recent.len() > RECENT {
            self.recent.pop_front();
        }
        if o.toggles > 0.0 {
            self.set_size = o.toggled / o.toggles;
        }
        // The toggles are priced at their measured bound: their low is none.
        let toggles_ns = toggle_cost_ns(o.toggles, o.toggled);
        let spent = Bounds {
            mean: o.estimated_ns + toggles_ns,
            low: o.estimated_ns * (1.0 - ESTIMATE_MARGIN),
            high: with_margin + toggles_ns,
        };
        for (total, part) in [
            (&mut self.window_spent, spent),
            (&mut self.total_spent, spent),
        ] {
            total.mean += part.mean;
            total.low += part.low;
            total.high += part.high;
        }
        self.window_target_ns += o.target_cpu_ns;
        self.total_target_ns += o.target_cpu_ns;
        self.total_s += o.period_s;
        self.window_elapsed_s += o.period_s;
        if self.window_elapsed_s >= self.window_s {
            let used = self.used_of(
                self.window_spent.mean,
                self.window_target_ns,
                self.window_elapsed_s,
            );
            self.last_window = used;
            if let Some(u) = used {
                self.worst_window = Some(self.worst_window.map_or(u, |w: f64| w.max(u)));
            }
            self.window_elapsed_s = 0.0;
            self.window_spent = Bounds::default();
            self.window_target_ns = 0.0;
        }
        self.feedback = if self.in_situ_rate.is_some() {
            Feedback::InSitu
        } else if self.rate_on().is_some() {
            Feedback::Estimate
        } else {
            Feedback::None
        };
        self.duty = self.next_duty();
    }

    fn next_duty(&mut self) -> f64 {
        let (Some(rate_on), Some(allowed)) = (self.rate_on(), self.allowed_rate()) else {
            // Nothing costs yet: open up, at most doubling per period.
            return (self.duty * 2.0).min(1.0);
        };
        // What is left once the toggles of the planned periods are paid for.
        let steady = (allowed - self.toggle_rate()).max(0.0) / rate_on;
        // The floor: what the minimum duty costs, over the allowance.
        self.floor = (steady < self.min_duty).then(|| self.cost_at(self.min_duty, rate_on));
        // What the current window may still spend over its remaining time.
        let remaining_s = self.window_s - self.window_elapsed_s;
        let wanted = if self.window_elapsed_s > 0.0 && remaining_s > 0.0 {
            let left = allowed * self.window_s * 1e9 - self.window_spent.high;
            (left / (rate_on * remaining_s * 1e9)).min(steady)
        } else {
            steady
        };
        wanted.min(self.duty * 2.0).clamp(self.min_duty, 1.0)
    }

    /// What duty `duty` costs in the budget's unit at `rate_on`, toggles included.
    fn cost_at(&self, duty: f64, rate_on: f64) -> f64 {
        let cost = duty * rate_on + self.toggle_rate();
        match self.budget {
            Budget::Rate(_) => cost,
            Budget::Share(_) => {
                let seconds: f64 = self.recent.iter().map(|r| r.2).sum();
                let base: f64 = self.recent.iter().map(|r| r.3).sum::<f64>() / (seconds * 1e9);
                if base + cost > 0.0 {
                    cost / (base + cost)
                } else {
                    0.0
                }
            }
        }
    }

    fn used_of(&self, spent_ns: f64, target_ns: f64, seconds: f64) -> Option<f64> {
        match self.budget {
            Budget::Share(_) => (target_ns > 0.0).then(|| spent_ns / target_ns),
            Budget::Rate(_) => (seconds > 0.0).then(|| spent_ns / (seconds * 1e9)),
        }
    }

    /// Whether the current window has spent its whole allowance (its top bound): the
    /// attached part then ends early.
    pub(crate) fn window_spent_out(&self, running_ns: f64) -> bool {
        let Some(allowed) = self.allowed_rate() else {
            return false;
        };
        self.window_spent.high + running_ns * (1.0 + ESTIMATE_MARGIN)
            > allowed * self.window_s * 1e9
    }

    /// The run so far.
    pub(crate) fn summary(&self, actions: &[String]) -> BudgetSummary {
        let used = |spent: f64| self.used_of(spent, self.total_target_ns, self.total_s);
        BudgetSummary {
            budget: self.budget,
            window_s: self.window_s,
            used: match (
                used(self.total_spent.mean),
                used(self.total_spent.low),
                used(self.total_spent.high),
            ) {
                (Some(mean), Some(low), Some(high)) => Some(Bounds { mean, low, high }),
                _ => None,
            },
            last_window: self.last_window,
            worst_window: self.worst_window,
            duty: self.duty,
            min_duty: self.min_duty,
            floor: self.floor,
            feedback: self.feedback,
            actions: actions.to_vec(),
            scaled: Vec::new(),
        }
    }
}

/// One probe's hits scaled to the whole run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ScaledHits {
    /// Hits counted while attached.
    pub counted: u64,
    /// The estimate of every call over the run.
    pub scaled: f64,
    pub low: f64,
    pub high: f64,
}

/// Per-probe running sums: a period's hits over its attached fraction estimates its
/// calls; the sum over periods estimates the run's, its variance from the differences of
/// successive periods (each period's error independent, the load allowed to drift) or,
/// where larger, the counting noise of the hits themselves.
#[derive(Debug, Default, Clone)]
pub(crate) struct Scaler {
    read: Vec<u64>,
    sum: Vec<f64>,
    poisson: Vec<f64>,
    diffs: Vec<f64>,
    /// What the attached parts' uncertain ends may move the sum by.
    bias: Vec<f64>,
    last: Vec<Option<f64>>,
    pub periods: usize,
}

impl Scaler {
    fn grow(&mut self, n: usize) {
        if self.read.len() < n {
            self.read.resize(n, 0);
            self.sum.resize(n, 0.0);
            self.poisson.resize(n, 0.0);
            self.diffs.resize(n, 0.0);
            self.bias.resize(n, 0.0);
            self.last.resize(n, None);
        }
    }

    /// A period whose attached fraction was `fraction` ended, and `hits` (cumulative per
    /// probe) hold every hit of it. `uncertain` is the part of its attached time that may
    /// have been attached or not (the attach calls' length, over the time attached).
    pub(crate) fn close_period(&mut self, fraction: f64, uncertain: f64, hits: &[u64]) {
        self.grow(hits.len());
        let inverse = 1.0 / fraction.clamp(1e-6, 1.0);
        for (i, &cumulative) in hits.iter().enumerate() {
            let h = cumulative.saturating_sub(self.read[i]) as f64;
            self.read[i] = cumulative.max(self.read[i]);
            let y = h * inverse;
            self.sum[i] += y;
            self.bias[i] += y * uncertain.max(0.0);
            self.poisson[i] += h * inverse * inverse;
            if let Some(previous) = self.last[i] {
                self.diffs[i] += (y - previous).powi(2) / 2.0;
            }
            self.last[i] = Some(y);
        }
        self.periods += 1;
    }

    /// Every probe's estimate; `counted` is the run's exact count (the last period's
    /// hits are what it adds to those read).
    pub(crate) fn scaled(&self, counted: &[u64]) -> Vec<ScaledHits> {
        counted
            .iter()
            .enumerate()
            .map(|(i, &counted)| {
                let sum = self.sum.get(i).copied().unwrap_or(0.0);
                let spread = self
                    .diffs
                    .get(i)
                    .copied()
                    .unwrap_or(0.0)
                    .max(self.poisson.get(i).copied().unwrap_or(0.0));
                // With one period there is no difference to learn from: the interval is
                // the counting noise, which says little; two or more are needed.
                let half = Z95 * spread.sqrt() + self.bias.get(i).copied().unwrap_or(0.0);
                let scaled = sum.max(counted as f64);
                ScaledHits {
                    counted,
                    scaled,
                    low: (scaled - half).max(counted as f64),
                    high: scaled + half,
                }
            })
            .collect()
    }
}

/// What `--budget` did over the run, for the status line, stderr and exports.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BudgetSummary {
    #[serde(skip)]
    pub budget: Budget,
    pub window_s: f64,
    /// The probes' cost over the run in the budget's unit: the estimate and its bounds.
    pub used: Option<Bounds>,
    pub last_window: Option<f64>,
    pub worst_window: Option<f64>,
    pub duty: f64,
    pub min_duty: f64,
    /// The cost at the minimum duty, when that is over the budget.
    pub floor: Option<f64>,
    pub feedback: Feedback,
    /// What was done, each said once.
    pub actions: Vec<String>,
    /// Per row, hits scaled to the whole run (empty until the run ends).
    #[serde(skip)]
    pub scaled: Vec<ScaledHits>,
}

impl BudgetSummary {
    /// `budget 1.0%: using 0.8% (duty 35%)`.
    pub fn status(&self) -> String {
        let used = self
            .last_window
            .or(self.used.map(|u| u.mean))
            .map_or_else(|| "-".into(), |u| self.budget.format(u));
        format!(
            "budget {}: using {used} (duty {:.0}%)",
            self.budget,
            self.duty * 100.0
        )
    }

    /// The end-of-run line.
    pub fn line(&self) -> String {
        let of = match self.budget {
            Budget::Share(_) => " of the target's CPU",
            Budget::Rate(_) => "",
        };
        let used = self.used.map_or_else(
            || "nothing measured".into(),
            |u| {
                format!(
                    "used {} ({}-{}){of} over the run",
                    self.budget.format(u.mean),
                    self.budget.format(u.low),
                    self.budget.format(u.high)
                )
            },
        );
        let worst = self
            .worst_window
            .map(|w| {
                format!(
                    ", {} in the dearest {:.0} s window",
                    self.budget.format(w),
                    self.window_s
                )
            })
            .unwrap_or_default();
        let from = match self.feedback {
            Feedback::InSitu => "measured in situ",
            Feedback::Estimate => "estimated, +25% for the estimate's error",
            Feedback::None => "no hit counted",
        };
        format!(
            "budget {}: {used}{worst} ({from}); duty {:.0}% at the end; hits and rates are scaled from the attached parts to the whole run (95% intervals in the JSON export)",
            self.budget,
            self.duty * 100.0
        )
    }

    /// The line said when the budget cannot be met.
    pub fn floor_line(&self) -> Option<String> {
        self.floor.map(|floor| {
            format!(
                "budget {} cannot be met: with every probe attached {:.0}% of the time (the least) they cost {}; fewer probes, or a larger budget",
                self.budget,
                self.min_duty * 100.0,
                self.budget.format(floor)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse_and_bad_ones_are_refused() {
        assert_eq!(Budget::parse("2%"), Ok(Budget::Share(0.02)));
        assert_eq!(Budget::parse("1.5"), Ok(Budget::Share(0.015)));
        assert_eq!(Budget::parse("100%"), Ok(Budget::Share(1.0)));
        assert_eq!(Budget::parse("20ms/s"), Ok(Budget::Rate(0.02)));
        assert_eq!(Budget::parse("500us/s"), Ok(Budget::Rate(0.0005)));
        for bad in [
            "0", "0%", "-1%", "101%", "abc", "", "nan", "inf%", "20ms", "20ms/m", "0ms/s", "-5ms/s",
        ] {
            assert!(Budget::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Budget::Share(0.01).to_string(), "1.0%");
        assert_eq!(Budget::Rate(0.02).to_string(), "20.0ms/s");
    }

    #[test]
    fn the_duty_settles_where_the_cost_meets_the_budget() {
        // A target busy on one CPU whose probes cost half of it while attached.
        let mut c = Controller::new(Budget::Share(0.02), 10.0, 7);
        for _ in 0..40 {
            let plan = c.plan();
            let on_ns = plan.on_s * 1e9;
            c.observe(Observed {
                period_s: plan.period_s,
                on_s: plan.on_s,
                estimated_ns: on_ns * 0.5,
                target_cpu_ns: plan.period_s * 1e9,
                toggles: 1.0,
                toggled: 1.0,
            });
        }
        let s = c.summary(&[]);
        let used = s.used.expect("used");
        // Held under the budget with the estimate's margin, and not far under it.
        assert!(used.high <= 0.02 * 1.001, "{s:?}");
        assert!(used.mean >= 0.02 / 1.25 * 0.8, "{s:?}");
        assert!(s.floor.is_none());
        assert!(
            s.status().starts_with("budget 2.0%: using "),
            "{}",
            s.status()
        );
    }

    #[test]
    fn a_budget_under_the_floor_says_so() {
        let mut c = Controller::new(Budget::Rate(1e-5), 10.0, 7);
        for _ in 0..10 {
            let plan = c.plan();
            c.observe(Observed {
                period_s: plan.period_s,
                on_s: plan.on_s,
                estimated_ns: plan.on_s * 1e9,
                target_cpu_ns: plan.period_s * 1e9,
                toggles: 1.0,
                toggled: 1.0,
            });
        }
        assert_eq!(c.duty(), c.min_duty());
        let line = c.summary(&[]).floor_line().expect("a floor");
        assert!(line.contains("cannot be met"), "{line}");
    }

    #[test]
    fn toggles_are_priced_and_periods_are_as_long_as_the_window_allows() {
        // A target busy on one CPU, probes that cost 1% of it while attached, a set of
        // 20,000 probes: toggled every 2.5 s they cost 1.6% of the CPU on their own,
        // over a 1% budget.
        let mut c = Controller::new(Budget::Share(0.01), 10.0, 5);
        for _ in 0..20 {
            let plan = c.plan();
            assert!(
                (0.7 * 2.5..=1.3 * 2.5 + 1e-9).contains(&plan.period_s),
                "{plan:?}"
            );
            c.observe(Observed {
                period_s: plan.period_s,
                on_s: plan.on_s,
                estimated_ns: plan.on_s * 1e9 * 0.01,
                target_cpu_ns: plan.period_s * 1e9,
                toggles: 1.0,
                toggled: 20_000.0,
            });
        }
        assert_eq!(c.duty(), c.min_duty());
        let s = c.summary(&[]);
        // The ledger holds the toggles: one of 20,000 probes a period of ~2.5 s.
        let used = s.used.expect("used");
        assert!(used.mean > toggle_cost_ns(1.0, 20_000.0) / 3.25e9, "{s:?}");
        assert!(s.floor_line().is_some(), "{s:?}");
        // One probe toggled costs nothing the budget notices: the duty opens up.
        let mut c = Controller::new(Budget::Share(0.01), 10.0, 5);
        for _ in 0..20 {
            let plan = c.plan();
            c.observe(Observed {
                period_s: plan.period_s,
                on_s: plan.on_s,
                estimated_ns: plan.on_s * 1e9 * 0.01,
                target_cpu_ns: plan.period_s * 1e9,
                toggles: 1.0,
                toggled: 1.0,
            });
        }
        assert!(c.duty() > 0.5, "{}", c.duty());
    }

    #[test]
    fn plans_keep_the_attached_part_inside_the_period() {
        let mut c = Controller::new(Budget::Share(0.01), 10.0, 3);
        for _ in 0..1000 {
            let p = c.plan();
            assert!(
                p.on_offset_s >= 0.0 && p.on_offset_s + p.on_s <= p.period_s + 1e-9,
                "{p:?}"
            );
        }
    }

    #[test]
    fn scaled_hits_hold_the_truth_in_their_interval() {
        // A steady 1000 calls/s, attached a random 10% of each 1 s period.
        let mut rng = XorShift::new(11);
        let mut s = Scaler::default();
        let mut cumulative = 0u64;
        let periods = 30;
        for _ in 0..periods {
            let jitter = rng.below(21) as u64; // +-10 hits of noise
            cumulative += 90 + jitter;
            s.close_period(0.1, 0.0, &[cumulative]);
        }
        let scaled = s.scaled(&[cumulative])[0];
        let truth = 1000.0 * periods as f64;
        assert!(scaled.low <= truth && truth <= scaled.high, "{scaled:?}");
        assert!(scaled.high - scaled.low < truth * 0.2, "{scaled:?}");
    }
}
