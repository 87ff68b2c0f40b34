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
/// The first periods survey the set before the duty is planned, a group of probes at a
/// time ([`survey_groups`]), never the whole set at once: on mariadbd with ~830 glob
/// probes the whole set cost 1.5 CPUs while attached (2026-11-28, a loaded host), so its
/// first part of 19 ms and the 153 ms detach call after it spent 2.6 times a 60 s
/// window's 1%. A group's part is this short at its period's start...
const SURVEY_ON_S: f64 = 0.01;
/// ...and a group of single-stepped sites' shorter: each of their hits costs ~10 times
/// an emulated one's (a second trap), so a part as long would cost as much as ten.
const SURVEY_DEAR_ON_S: f64 = 0.005;
/// Probes a group holds at most: the attach and detach calls arm and disarm a group's
/// probes one by one, so what its hits cost in the calls grows with the group and the
/// group's share of the hits together; a call for 830 probes took 9-153 ms there.
const SURVEY_GROUP: usize = 128;
const SURVEY_DEAR_GROUP: usize = 64;
/// ...in periods this long at most (the hits of a part are read at the next part's
/// start, and the collector's counts lag by up to 500 ms).
const SURVEY_PERIOD_S: f64 = 1.0;
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
    /// Its attached part held the whole set in the cycle (not one survey group): only
    /// such parts say what the set costs while attached.
    pub whole: bool,
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
    /// Seconds the attach calls took: their hits are counted and paid for, the points
    /// armed somewhere within each call (half of it attached, on average). A detach
    /// call disarms the points first, then waits for the kernel's grace period (40 ms
    /// for one probe, 100 ms for 143 on a shared host, 2026-11-28): a survey group's
    /// hits matched its attached part alone, so counting half of the detach as attached
    /// read the flood's probe at a seventh of its rate, and the duty opened to match.
    pub calls_s: f64,
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
    /// target CPU ns, whether the whole set was attached).
    recent: VecDeque<(f64, f64, f64, f64, bool)>,
    /// What the whole set costs while attached, CPUs with the margin, as the survey's
    /// groups priced it: until a part of the whole set is read.
    survey_rate: Option<f64>,
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
    /// Seconds attached over the run.
    total_on_s: f64,
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
    /// The duty the allowance pays for at steady state, as last computed: under 1 the
    /// budget binds and shedding may act.
    steady: Option<f64>,
    /// Surveying the set (a group at a time, short attached parts at the start of short
    /// periods).
    surveying: bool,
    /// The attach and detach calls' seconds a period (a moving mean).
    calls_s: f64,
    /// The first whole window's share or rate.
    first_window: Option<f64>,
    /// The floor last said (`floor_news`), and whether one was said.
    floor_said: Option<f64>,
    floor_lines: usize,
    /// The chance a period is attached at all: under 1 when even an attached part of the
    /// least length every period would spend more than the window has left, so that the
    /// window holds (at random offsets in jittered periods: the count stays unbiased).
    attach_chance: f64,
    /// The chances accrued: a period is attached when they reach 1, so the window's
    /// parts are spread over it rather than drawn in a run.
    attach_credit: f64,
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
            survey_rate: None,
            in_situ_rate: None,
            window_elapsed_s: 0.0,
            window_spent: Bounds::default(),
            window_target_ns: 0.0,
            total_spent: Bounds::default(),
            total_target_ns: 0.0,
            total_s: 0.0,
            total_on_s: 0.0,
            worst_window: None,
            last_window: None,
            feedback: Feedback::None,
            floor: None,
            rng: XorShift::new(seed | 1),
            overrun_s: 0.0,
            set_size: 0.0,
            steady: None,
            surveying: true,
            calls_s: 0.0,
            first_window: None,
            floor_said: None,
            floor_lines: 0,
            attach_chance: 1.0,
            attach_credit: 0.0,
        }
    }

    /// Whether the set is still surveyed: a group at a time, in short attached parts.
    #[cfg(test)]
    fn surveying(&self) -> bool {
        self.surveying
    }

    /// The survey is over: the whole set costs `rate` CPUs while attached (the estimate,
    /// without margin), as priced from each probe's hits over its group's parts; the
    /// duty is planned from it until a part of the whole set is read.
    pub(crate) fn end_survey(&mut self, rate: Option<f64>) {
        self.surveying = false;
        self.survey_rate = rate.map(|r| r * (1.0 + ESTIMATE_MARGIN));
        self.duty = self.next_duty();
        self.feedback_now();
    }

    /// Whether the budget binds: with every probe attached all the time, the probes
    /// would cost more than the allowance.
    pub(crate) fn binds(&self) -> bool {
        self.steady.is_some_and(|d| d < 1.0)
    }

    /// After shedding: the periods read so far cost `keep` of what they did with the set
    /// as it is now; in situ's rate measured the old set and is dropped until it has a
    /// signal again.
    pub(crate) fn set_changed(&mut self, keep: f64) {
        let keep = keep.clamp(0.0, 1.0);
        for period in &mut self.recent {
            period.1 *= keep;
        }
        if let Some(rate) = &mut self.survey_rate {
            *rate *= keep;
        }
        self.in_situ_rate = None;
        // The next period is planned for the set as it is now.
        if !self.surveying {
            self.duty = self.next_duty();
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
        if self.surveying {
            // At the period's start: the first one's part is the session's own attach,
            // and the next read comes most of a period after the part ends.
            let period_s = base.clamp(PERIOD_MIN_S, SURVEY_PERIOD_S);
            return Plan {
                period_s,
                on_offset_s: 0.0,
                on_s: SURVEY_ON_S.min(period_s),
            };
        }
        let jitter = 0.7 + 0.6 * self.uniform();
        let period_s = base * jitter;
        if self.duty >= 1.0 {
            return Plan {
                period_s,
                on_offset_s: 0.0,
                on_s: period_s,
            };
        }
        if self.attach_chance < 1.0 {
            // A chance that comes due while the window cannot pay for a part yet (its
            // allowance accrues) waits for the first period that can, rather than being
            // spent on a period left detached anyway.
            self.attach_credit = (self.attach_credit + self.attach_chance).min(1.0);
            if self.attach_credit < 1.0 || !self.part_affordable() {
                // Detached the whole period: the window cannot pay for a part.
                return Plan {
                    period_s,
                    on_offset_s: 0.0,
                    on_s: 0.0,
                };
            }
            self.attach_credit -= 1.0;
        } else {
            self.attach_credit = 0.0;
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
        let whole = || self.recent.iter().filter(|r| r.4);
        let on: f64 = whole().map(|r| r.0).sum();
        let cost: f64 = whole().map(|r| r.1).sum();
        if on > 0.0 && cost > 0.0 {
            return Some(cost / (on * 1e9));
        }
        // A part of the whole set read without a hit says nothing yet: the survey's
        // price stands until one has some.
        self.survey_rate.filter(|r| *r > 0.0)
    }

    /// What toggling costs per second at the planned periods (their mean length).
    fn toggle_rate(&self) -> f64 {
        self.toggle_ns() / (self.period_max() * 1e9)
    }

    /// What each period costs whatever its duty, per second at the planned periods: the
    /// toggle, and the hits while the attach and detach calls arm and disarm the points.
    fn fixed_rate(&self, rate_on: f64) -> f64 {
        self.toggle_rate() + rate_on * self.calls_s / 2.0 / self.period_max()
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
        // The hits counted in the calls were made while the points were armed, half of
        // each call on average: without that time a short part's rate reads too high.
        // A period left detached says nothing of the rate while attached.
        if o.on_s + o.calls_s > 0.0 {
            self.recent.push_back((
                o.on_s + o.calls_s / 2.0,
                with_margin,
                o.period_s,
                o.target_cpu_ns,
                o.whole,
            ));
        }
        if o.toggles > 0.0 {
            let calls = o.calls_s / o.toggles;
            self.calls_s = if self.calls_s > 0.0 {
                0.7 * self.calls_s + 0.3 * calls
            } else {
                calls
            };
        }
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
        self.total_on_s += o.on_s;
        self.window_elapsed_s += o.period_s;
        if self.window_elapsed_s >= self.window_s {
            let used = self.used_of(
                self.window_spent.mean,
                self.window_target_ns,
                self.window_elapsed_s,
            );
            self.last_window = used;
            if self.first_window.is_none() {
                self.first_window = used;
            }
            if let Some(u) = used {
                self.worst_window = Some(self.worst_window.map_or(u, |w: f64| w.max(u)));
            }
            self.window_elapsed_s = 0.0;
            self.window_spent = Bounds::default();
            self.window_target_ns = 0.0;
        }
        self.feedback_now();
        self.duty = self.next_duty();
    }

    fn feedback_now(&mut self) {
        self.feedback = if self.in_situ_rate.is_some() {
            Feedback::InSitu
        } else if self.rate_on().is_some() || self.total_spent.low > 0.0 {
            Feedback::Estimate
        } else {
            Feedback::None
        };
    }

    fn next_duty(&mut self) -> f64 {
        let (Some(rate_on), Some(allowed)) = (self.rate_on(), self.allowed_rate()) else {
            // Nothing costs yet: the least duty, until a hit prices the set. Opened
            // blind, a load that starts after the survey (the flood's units begin once
            // probetop says `attached`) met an attached part of 16% and spent most of a
            // window's allowance in it.
            return self.min_duty;
        };
        // What is left once the toggles of the planned periods are paid for.
        let steady = (allowed - self.fixed_rate(rate_on)).max(0.0) / rate_on;
        self.steady = Some(steady);
        // The floor: what the minimum duty costs, over the allowance.
        self.floor = (steady < self.min_duty).then(|| self.cost_at(self.min_duty, rate_on));
        // What the current window may still spend over its remaining time.
        let remaining_s = self.window_s - self.window_elapsed_s;
        // What the rest of the window may spend per second; each attached part also
        // pays the period's fixed costs.
        let left_rate = if self.window_elapsed_s > 0.0 && remaining_s > 0.0 {
            let left = allowed * self.window_s * 1e9 - self.window_spent.high;
            (left / (remaining_s * 1e9)).min(allowed)
        } else {
            allowed
        };
        let fixed = self.fixed_rate(rate_on);
        let wanted = ((left_rate - fixed) / rate_on).min(steady);
        // Under the least duty, periods are attached at random in the proportion the
        // window can pay for, each a part of the least length with its fixed costs.
        self.attach_chance = if wanted < self.min_duty {
            (left_rate / (self.min_duty * rate_on + fixed)).clamp(0.0, 1.0)
        } else {
            1.0
        };
        wanted.min(self.duty * 2.0).clamp(self.min_duty, 1.0)
    }

    /// What duty `duty` costs in the budget's unit at `rate_on`, toggles included.
    fn cost_at(&self, duty: f64, rate_on: f64) -> f64 {
        let cost = duty * rate_on + self.fixed_rate(rate_on);
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

    /// Whether the current window can still pay for an attached part of the least
    /// length with its fixed costs: else the part is skipped.
    pub(crate) fn part_affordable(&self) -> bool {
        let (Some(rate_on), Some(allowed)) = (self.rate_on(), self.allowed_rate()) else {
            return true;
        };
        let part_ns =
            (self.min_duty * rate_on + self.fixed_rate(rate_on)) * self.period_max() * 1e9;
        self.window_spent.high + part_ns <= self.accrued_ns(allowed)
    }

    /// The attached part of a period planned `planned_s` of `period_s`, as the last read
    /// leaves it: no longer than the duty now, none when the window cannot pay a part.
    /// While surveying, as planned.
    pub(crate) fn part_now(&self, planned_s: f64, period_s: f64) -> f64 {
        if self.surveying || planned_s >= period_s {
            return planned_s;
        }
        if !self.part_affordable() {
            return 0.0;
        }
        planned_s.min((self.duty * period_s).max(ON_MIN_S / 4.0))
    }

    /// What the current window may have spent by the end of the period under way, ns:
    /// its allowance accrues with its time, one period ahead so that a part can be paid.
    /// Spent ahead, a window's allowance would go over the budget in a run (or a load)
    /// that ends within the window: the flood's 5 s run read 2.66% of its CPU for 2%
    /// by the ledger's top (2026-11-28).
    fn accrued_ns(&self, allowed: f64) -> f64 {
        let by_s = (self.window_elapsed_s + self.period_max()).min(self.window_s);
        allowed * by_s * 1e9
    }

    /// Whether the current window has spent its whole allowance (its top bound): the
    /// attached part then ends early.
    pub(crate) fn window_spent_out(&self, running_ns: f64) -> bool {
        let Some(allowed) = self.allowed_rate() else {
            return false;
        };
        self.window_spent.high + running_ns * (1.0 + ESTIMATE_MARGIN) > self.accrued_ns(allowed)
    }

    /// A line to say when the floor changed: once when the budget is first found out of
    /// reach, then when shedding (or the load) brought it within reach, or moved the
    /// floor by half again: a line said before shedding acted is not left standing as if
    /// still true. Nothing while surveying (shedding acts at each read then). A few
    /// lines at most over a run.
    pub(crate) fn floor_news(&mut self) -> Option<String> {
        const LINES_MAX: usize = 4;
        if self.surveying || self.floor_lines >= LINES_MAX {
            return None;
        }
        let line = match (self.floor_said, self.floor) {
            (None, Some(floor)) => {
                self.floor_said = Some(floor);
                self.summary(&[]).floor_line_now(self.floor_lines > 0)
            }
            (Some(said), None) => {
                self.floor_said = None;
                let cost = self.rate_on().map(|r| self.cost_at(self.min_duty, r))?;
                Some(format!(
                    "budget {} can be met now with the probes attached every period (it could not: the probes or the load changed): attached {} of the time (the least) they cost {}, {} before",
                    self.budget,
                    duty_percent(self.min_duty),
                    self.budget.format(cost),
                    self.budget.format(said)
                ))
            }
            (Some(said), Some(floor)) if floor < said / 1.5 || floor > said * 1.5 => {
                self.floor_said = Some(floor);
                self.summary(&[]).floor_line_now(true).map(|line| {
                    format!("{line} (the floor was {} before)", self.budget.format(said))
                })
            }
            _ => None,
        };
        if line.is_some() {
            self.floor_lines += 1;
        }
        line
    }

    /// The ledger as it stands, one line (`PROBETOP_BUDGET_TRACE`).
    pub(crate) fn trace(&self) -> String {
        format!(
            "window {:.2}s spent {:.2}ms (high) of {:.2}ms; target {:.1}ms; duty {:.4} chance {:.3} rate_on {:?} steady {:?} surveying {} set {}",
            self.window_elapsed_s,
            self.window_spent.high / 1e6,
            self.allowed_rate().map_or(0.0, |a| a * self.window_s * 1e3),
            self.window_target_ns / 1e6,
            self.duty,
            self.attach_chance,
            self.rate_on(),
            self.steady,
            self.surveying,
            self.set_size
        )
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
            first_window: self.first_window,
            worst_window: self.worst_window,
            // The share of the run's time attached (before any period is read, the
            // duty planned): the planned duty of the moment reads 0 whenever a window
            // has spent its allowance, as at the end of a run that spent it.
            duty: if self.total_s > 0.0 {
                self.total_on_s / self.total_s
            } else {
                self.duty * self.attach_chance
            },
            min_duty: self.min_duty,
            floor: self.floor,
            feedback: self.feedback,
            actions: actions.to_vec(),
            scaled: Vec::new(),
        }
    }
}

/// One part of the survey: the probes attached together, and for how long.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SurveyGroup {
    pub ids: Vec<u32>,
    pub on_s: f64,
}

/// The survey's parts, priced before anything is attached from what the sites are: the
/// probes on single-stepped sites (`dear`: ~10 times an emulated hit, docs/cost.md) in
/// groups of their own with shorter parts, first, so what the dearest cost is known
/// before the rest add to it; then the others. No group is the whole set unless the
/// set is small.
pub(crate) fn survey_groups(ids: &[u32], dear: impl Fn(u32) -> bool) -> Vec<SurveyGroup> {
    // A set no larger than a group of single-stepped sites is one group, with their
    // shorter part if it holds one: its survey is one period, not two.
    if ids.len() <= SURVEY_DEAR_GROUP {
        let on_s = if ids.iter().any(|&id| dear(id)) {
            SURVEY_DEAR_ON_S
        } else {
            SURVEY_ON_S
        };
        return (!ids.is_empty())
            .then(|| SurveyGroup {
                ids: ids.to_vec(),
                on_s,
            })
            .into_iter()
            .collect();
    }
    let (stepped, emulated): (Vec<u32>, Vec<u32>) = ids.iter().partition(|&&id| dear(id));
    let groups = |ids: &[u32], size: usize, on_s: f64| {
        ids.chunks(size)
            .map(|chunk| SurveyGroup {
                ids: chunk.to_vec(),
                on_s,
            })
            .collect::<Vec<_>>()
    };
    let mut all = groups(&stepped, SURVEY_DEAR_GROUP, SURVEY_DEAR_ON_S);
    all.extend(groups(&emulated, SURVEY_GROUP, SURVEY_ON_S));
    all
}

/// What the survey learned of each probe: its hits over the seconds its group was armed
/// (attached, and half of the attach and detach calls around it), as calls per second.
pub(crate) fn survey_rates(hits: &[f64], armed_s: &[f64]) -> Vec<f64> {
    hits.iter()
        .zip(armed_s)
        .map(|(&h, &s)| if s > 0.0 { h / s } else { 0.0 })
        .collect()
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

/// One period's attached part, as the scaling needs it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Part {
    pub period_s: f64,
    /// Seconds attached.
    pub on_s: f64,
    /// Seconds the attach calls took: hits in them were counted, but whether the probes
    /// were armed yet is not known.
    pub attach_s: f64,
}

impl Part {
    fn join(self, other: Self) -> Self {
        Self {
            period_s: self.period_s + other.period_s,
            on_s: self.on_s + other.on_s,
            attach_s: self.attach_s + other.attach_s,
        }
    }

    /// Whether the attached part is long enough for its hits over its fraction to say
    /// what the period's calls were: at least [`MIN_PART_S`], and several times the
    /// attach calls' length, whose hits it holds without their time.
    fn scales(&self) -> bool {
        self.on_s >= MIN_PART_S && self.on_s >= ATTACH_TIMES * self.attach_s
    }
}

/// The shortest attached part scaled alone; shorter ones (cut short when a window's
/// allowance ran out, or by the run's end) join the next period. Scaled alone, a part of
/// 2 ms holding the hits of a 5 ms attach call read 1.8M calls for 200k.
const MIN_PART_S: f64 = 0.02;
/// An attached part is scaled alone only when this many times longer than its attach
/// calls.
const ATTACH_TIMES: f64 = 4.0;

/// Per-probe running sums: a period's hits over its attached fraction estimates its
/// calls; the sum over periods estimates the run's, its variance from the differences of
/// successive periods (each period's error independent, the load allowed to drift) or,
/// where larger, the counting noise of the hits themselves. An attached part too short
/// to scale is held and joins the next period's; one left at the run's end is counted
/// at the rate of the run before it, its whole estimate added to the interval.
#[derive(Debug, Default, Clone)]
pub(crate) struct Scaler {
    read: Vec<u64>,
    sum: Vec<f64>,
    poisson: Vec<f64>,
    diffs: Vec<f64>,
    /// What the attached parts' uncertain ends may move the sum by.
    bias: Vec<f64>,
    /// The last period's calls per second.
    last: Vec<Option<f64>>,
    /// Seconds of the periods each probe was scaled over (a shed probe's stop growing).
    seconds: Vec<f64>,
    /// A part too short to scale alone, and each probe's hits in it.
    held: Option<Part>,
    held_hits: Vec<f64>,
    /// The probes out of the cycle at the last period's close.
    out: Vec<bool>,
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
            self.seconds.resize(n, 0.0);
            self.held_hits.resize(n, 0.0);
        }
    }

    /// A period ended, and `hits` (cumulative per probe) hold every hit of it. The
    /// probes `out` were out of the duty cycle (shed) over it: their hits, if any,
    /// are not scaled.
    pub(crate) fn close_period(&mut self, part: Part, hits: &[u64], out: &[bool]) {
        self.grow(hits.len());
        self.out = out.to_vec();
        for (i, &cumulative) in hits.iter().enumerate() {
            let h = cumulative.saturating_sub(self.read[i]) as f64;
            self.read[i] = cumulative.max(self.read[i]);
            self.held_hits[i] += h;
        }
        // A part joined once is scaled once it is long enough: where every attach call
        // is long beside its part (a large set), joining more would not help.
        let joined = self.held.is_some();
        let part = self.held.take().map_or(part, |held| held.join(part));
        if !(part.scales() || joined && part.on_s >= MIN_PART_S) {
            self.held = Some(part);
            return;
        }
        let fraction = if part.period_s > 0.0 {
            part.on_s / part.period_s
        } else {
            1.0
        };
        let uncertain = if part.on_s > 0.0 {
            part.attach_s / part.on_s
        } else {
            0.0
        };
        let inverse = 1.0 / fraction.clamp(1e-6, 1.0);
        for i in 0..self.read.len() {
            let h = std::mem::take(&mut self.held_hits[i]);
            if out.get(i).copied().unwrap_or(false) {
                continue;
            }
            let y = h * inverse;
            self.sum[i] += y;
            self.bias[i] += y * uncertain;
            self.poisson[i] += h * inverse * inverse;
            // Differences of rates, so a joined period (twice as long) is no outlier;
            // its variance is its length's square times the rate's.
            let rate = if part.period_s > 0.0 {
                y / part.period_s
            } else {
                0.0
            };
            if let Some(previous) = self.last[i] {
                self.diffs[i] += (rate - previous).powi(2) / 2.0 * part.period_s.powi(2);
            }
            self.last[i] = Some(rate);
            self.seconds[i] += part.period_s;
        }
        self.periods += 1;
    }

    /// The survey's periods as one, `period_s` long, each probe attached `armed_s[i]` of
    /// it (its group's part, and half of the calls around it, whose hits it holds: the
    /// other half, `calls_s[i]`, is how far off that may be); `hits` cumulative. Called
    /// first, before any period.
    pub(crate) fn close_survey(
        &mut self,
        period_s: f64,
        (armed_s, calls_s): (&[f64], &[f64]),
        hits: &[u64],
    ) {
        self.grow(hits.len());
        for (i, &cumulative) in hits.iter().enumerate() {
            let h = cumulative.saturating_sub(self.read[i]) as f64;
            self.read[i] = cumulative.max(self.read[i]);
            let on = armed_s.get(i).copied().unwrap_or(0.0).min(period_s);
            if on <= 0.0 || period_s <= 0.0 {
                continue;
            }
            let inverse = period_s / on;
            let y = h * inverse;
            self.sum[i] += y;
            self.bias[i] += y * calls_s.get(i).copied().unwrap_or(0.0) / on;
            self.poisson[i] += h * inverse * inverse;
            self.last[i] = Some(y / period_s);
            self.seconds[i] += period_s;
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
                let at = |v: &Vec<f64>| v.get(i).copied().unwrap_or(0.0);
                let mut sum = at(&self.sum);
                let spread = at(&self.diffs).max(at(&self.poisson));
                // With one period there is no difference to learn from: the interval is
                // the counting noise, which says little; two or more are needed.
                let mut half = Z95 * spread.sqrt() + at(&self.bias);
                // A part too short to scale, left at the end: its calls at the run's rate
                // before it (or, with nothing before, its hits over an attached part of
                // the least length scaled alone), the whole of that in the interval.
                if let Some(held) = self.held
                    && held.period_s > 0.0
                    && !self.out.get(i).copied().unwrap_or(false)
                {
                    let seconds = at(&self.seconds);
                    let y = if seconds > 0.0 {
                        sum / seconds * held.period_s
                    } else {
                        let on = held.on_s.max(MIN_PART_S).min(held.period_s);
                        at(&self.held_hits) * held.period_s / on
                    };
                    sum += y;
                    half += y;
                }
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

/// One probe as shedding sees it, over the last period read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Load {
    /// The whole cost of one of its hits, ns (the estimate).
    pub per_hit_ns: f64,
    /// Its hits in the period.
    pub hits: f64,
    /// It streams its hits, and may count them in the kernel instead.
    pub movable: bool,
    /// It is in the duty cycle (not shed, not detached by the user).
    pub cycled: bool,
}

/// What shedding does next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Shed {
    /// These probes (ids, dearest per hit first) go to in-kernel aggregation: the same
    /// counts and histograms for less per hit.
    ToKernel(Vec<usize>),
    /// These probes (dearest per hit first) leave the duty cycle: detached for the rest
    /// of the run.
    Detach(Vec<usize>),
}

/// Probes are detached when each of their hits costs this many times the others' mean
/// hit (a single-stepped site costs ~12 emulated ones, docs/cost.md)...
const SHED_RATIO: f64 = 3.0;
/// ...and together they hold at least this share of what the set cost: without them the
/// others get a third more duty at least.
const SHED_SHARE: f64 = 0.25;

/// While the budget binds, what costs the most per useful hit goes first: every
/// streaming probe to in-kernel aggregation (nothing counted is lost), then the probes
/// whose hits are far dearer than the others' and together hold much of the cost are
/// detached (a glob's single-stepped sites among its emulated ones), so the rest are
/// attached longer. Every hit is worth as much as any other (each is a count), so a
/// hit's use is the same everywhere and its price decides. Probes with hits are never
/// all detached: duty cycling does the rest.
pub(crate) fn shed(probes: &[Load]) -> Option<Shed> {
    let mut active: Vec<usize> = (0..probes.len())
        .filter(|&i| probes[i].cycled && probes[i].hits > 0.0 && probes[i].per_hit_ns > 0.0)
        .collect();
    active.sort_by(|&a, &b| probes[b].per_hit_ns.total_cmp(&probes[a].per_hit_ns));
    let movable: Vec<usize> = active
        .iter()
        .copied()
        .filter(|&i| probes[i].movable)
        .collect();
    if !movable.is_empty() {
        return Some(Shed::ToKernel(movable));
    }
    // The dearest k per hit against the rest: the largest k whose cheapest hit costs
    // SHED_RATIO times the rest's mean hit (suffix sums of cost and hits).
    let cost = |i: usize| probes[i].per_hit_ns * probes[i].hits;
    let n = active.len();
    let mut rest_cost = vec![0.0; n + 1];
    let mut rest_hits = vec![0.0; n + 1];
    for k in (0..n).rev() {
        rest_cost[k] = rest_cost[k + 1] + cost(active[k]);
        rest_hits[k] = rest_hits[k + 1] + probes[active[k]].hits;
    }
    let dear = (1..n)
        .filter(|&k| probes[active[k - 1]].per_hit_ns >= SHED_RATIO * rest_cost[k] / rest_hits[k])
        .max()?;
    let total = rest_cost[0];
    (total - rest_cost[dear] >= SHED_SHARE * total).then(|| Shed::Detach(active[..dear].to_vec()))
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
    /// The first whole window: shedding acts within it, so it is the dearest unless the
    /// load grows.
    pub first_window: Option<f64>,
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
            "budget {}: using {used} (duty {})",
            self.budget,
            duty_percent(self.duty)
        )
    }

    /// The status line's narrowest form: `budget 1.0%: 0.8% d35%`.
    pub fn status_short(&self) -> String {
        let used = self
            .last_window
            .or(self.used.map(|u| u.mean))
            .map_or_else(|| "-".into(), |u| self.budget.format(u));
        format!(
            "budget {}: {used} d{}",
            self.budget,
            duty_percent(self.duty)
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
            "budget {}: {used}{worst} ({from}); attached {} of the time; hits and rates are scaled from the attached parts to the whole run (95% intervals in the JSON export)",
            self.budget,
            duty_percent(self.duty)
        )
    }

    /// The line said when the budget cannot be met.
    pub fn floor_line(&self) -> Option<String> {
        self.floor_line_now(false)
    }

    /// The same, `now` after an earlier one.
    fn floor_line_now(&self, now: bool) -> Option<String> {
        self.floor.map(|floor| {
            format!(
                "budget {} {}cannot be met with the probes attached every period: attached {} of the time (the least) they cost {}; so they are attached in some periods only (fewer probes, or a larger budget, give more samples)",
                self.budget,
                if now { "still " } else { "" },
                duty_percent(self.min_duty),
                self.budget.format(floor)
            )
        })
    }
}

/// A duty in percent with two significant digits under 10%: 0.27% as such, not 0%.
fn duty_percent(duty: f64) -> String {
    let percent = duty * 100.0;
    if percent >= 10.0 {
        format!("{percent:.0}%")
    } else if percent >= 1.0 {
        format!("{percent:.1}%")
    } else if percent > 0.0 {
        // Two significant digits: 0.27%, 0.0031%.
        let decimals = (1.0 - percent.log10().floor()).clamp(2.0, 6.0) as usize;
        format!("{percent:.decimals$}%")
    } else {
        "0%".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A period's toggles: one if it was attached at all.
    fn toggle(plan: &Plan) -> f64 {
        if plan.on_s > 0.0 { 1.0 } else { 0.0 }
    }

    /// One period of `plan` run and read back: attached when it has a part the window
    /// can pay for, the probes costing `rate` CPUs while attached (and over half of
    /// `calls_s`, the attach calls) beside a target on `base` of one CPU, `toggled`
    /// probes moved each way. Whether it was attached.
    fn run_period(
        c: &mut Controller,
        plan: &Plan,
        (rate, base): (f64, f64),
        toggled: f64,
        calls_s: f64,
    ) -> bool {
        let on = plan.on_s > 0.0 && c.part_affordable();
        let (on_s, calls_s) = if on { (plan.on_s, calls_s) } else { (0.0, 0.0) };
        let estimated_ns = rate * (on_s + calls_s / 2.0) * 1e9;
        c.observe(Observed {
            period_s: plan.period_s,
            whole: !c.surveying(),
            on_s,
            estimated_ns,
            target_cpu_ns: base * plan.period_s * 1e9 + estimated_ns,
            toggles: f64::from(u8::from(on)),
            toggled: if on { toggled } else { 0.0 },
            calls_s,
        });
        on
    }

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
                whole: !c.surveying(),
                on_s: plan.on_s,
                estimated_ns: on_ns * 0.5,
                target_cpu_ns: plan.period_s * 1e9,
                toggles: toggle(&plan),
                toggled: toggle(&plan) * 1.0,
                calls_s: 0.0,
            });
            if c.surveying() {
                c.end_survey(None);
            }
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
                whole: !c.surveying(),
                on_s: plan.on_s,
                estimated_ns: plan.on_s * 1e9,
                target_cpu_ns: plan.period_s * 1e9,
                toggles: toggle(&plan),
                toggled: toggle(&plan) * 1.0,
                calls_s: 0.0,
            });
            if c.surveying() {
                c.end_survey(None);
            }
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
        c.end_survey(None);
        let (mut attached, mut target_ns) = (0.0, 0.0);
        for _ in 0..20 {
            let mut plan = c.plan();
            assert!(
                (0.7 * 2.5..=1.3 * 2.5 + 1e-9).contains(&plan.period_s),
                "{plan:?}"
            );
            // As the session runs it: no part once the window cannot pay for one.
            if !c.part_affordable() {
                plan.on_s = 0.0;
            }
            attached += toggle(&plan);
            target_ns += plan.period_s * 1e9;
            c.observe(Observed {
                period_s: plan.period_s,
                whole: !c.surveying(),
                on_s: plan.on_s,
                estimated_ns: plan.on_s * 1e9 * 0.01,
                target_cpu_ns: plan.period_s * 1e9,
                toggles: toggle(&plan),
                toggled: toggle(&plan) * 20_000.0,
                calls_s: 0.0,
            });
        }
        assert_eq!(c.duty(), c.min_duty());
        let s = c.summary(&[]);
        // The ledger holds the toggles: one of 20,000 probes each attached period; and
        // so some periods are left detached to hold the budget.
        let used = s.used.expect("used");
        assert!(
            used.mean * target_ns >= attached * toggle_cost_ns(1.0, 20_000.0),
            "{s:?}"
        );
        assert!(attached < 20.0, "{attached}");
        assert!(s.worst_window.is_some_and(|w| w <= 0.01), "{s:?}");
        assert!(s.floor_line().is_some(), "{s:?}");
        // One probe toggled costs nothing the budget notices: the duty opens up.
        let mut c = Controller::new(Budget::Share(0.01), 10.0, 5);
        for _ in 0..20 {
            let plan = c.plan();
            c.observe(Observed {
                period_s: plan.period_s,
                whole: !c.surveying(),
                on_s: plan.on_s,
                estimated_ns: plan.on_s * 1e9 * 0.01,
                target_cpu_ns: plan.period_s * 1e9,
                toggles: toggle(&plan),
                toggled: toggle(&plan) * 1.0,
                calls_s: 0.0,
            });
            if c.surveying() {
                c.end_survey(None);
            }
        }
        assert!(c.duty() > 0.5, "{}", c.duty());
    }

    /// A set dear while attached, as on mariadbd with ~830 glob probes: 1.5 CPUs while
    /// attached before shedding (1.4 of them on single-stepped sites), 0.1 after; the
    /// target uses 6.5% of a CPU; `--budget 1%` over 60 s windows. Run as the session
    /// runs it: the survey a group at a time, shedding at its end, a period left
    /// detached when the window cannot pay a part.
    #[test]
    fn a_dear_set_is_surveyed_in_groups_and_every_window_holds_from_the_first() {
        const BASE: f64 = 0.065;
        const CALLS_S: f64 = 0.01;
        let ids: Vec<u32> = (0..830).collect();
        let groups = survey_groups(&ids, |id| id < 300);
        let dear = |g: &SurveyGroup| g.ids[0] < 300;
        let mut c = Controller::new(Budget::Share(0.01), 60.0, 9);
        for group in &groups {
            let mut plan = c.plan();
            assert!(plan.period_s <= SURVEY_PERIOD_S, "{plan:?}");
            plan.on_s = group.on_s;
            // Each group's share of the set's cost while attached.
            let rate = if dear(group) { 1.4 / 5.0 } else { 0.1 / 5.0 };
            assert!(run_period(
                &mut c,
                &plan,
                (rate, BASE),
                group.ids.len() as f64,
                CALLS_S
            ));
        }
        // The survey leaves most of the first window's allowance (1% of the target's
        // 60 s of CPU): its 5 dear groups at 0.28 CPUs, each 5 ms and half of a 10 ms
        // attach call, with the margin, are 17.5 ms of it, the toggles 2 ms.
        let allowance_ns = 0.01 / 0.99 * BASE * 60.0 * 1e9;
        let spent = c.window_spent.high;
        assert!(
            spent < allowance_ns * 0.6,
            "{:.1} ms of {:.1} ms",
            spent / 1e6,
            allowance_ns / 1e6
        );
        c.end_survey(Some(1.5));
        assert!(c.binds());
        // Shedding by the survey's rates: the single-stepped sites out.
        c.set_changed(0.1 / 1.5);
        let mut lines = Vec::new();
        let mut attached_periods = 0;
        for _ in 0..40 {
            let plan = c.plan();
            attached_periods += usize::from(run_period(&mut c, &plan, (0.1, BASE), 530.0, CALLS_S));
            lines.extend(c.floor_news());
        }
        let s = c.summary(&[]);
        assert!(attached_periods > 10, "{attached_periods}: {s:?}");
        let first = s.first_window.expect("a first window");
        let worst = s.worst_window.expect("a worst window");
        assert!(first <= 0.01 && worst <= 0.01, "{s:?}");
        // Not far under it after the first: the duty is what the budget pays for.
        assert!(s.last_window.is_some_and(|w| w > 0.005), "{s:?}");
        // No floor said: the set as surveyed was never attached whole.
        assert!(lines.is_empty(), "{lines:#?}");
        assert!(s.floor.is_none(), "{s:?}");
    }

    #[test]
    fn the_survey_groups_single_stepped_sites_apart_with_shorter_parts() {
        let ids: Vec<u32> = (0..300).collect();
        let groups = survey_groups(&ids, |id| id % 3 == 0);
        // 100 single-stepped sites in groups of their own first, then 200 others.
        let sizes: Vec<usize> = groups.iter().map(|g| g.ids.len()).collect();
        assert_eq!(
            sizes,
            [
                SURVEY_DEAR_GROUP,
                100 - SURVEY_DEAR_GROUP,
                SURVEY_GROUP,
                200 - SURVEY_GROUP
            ]
        );
        assert!(
            groups[..2]
                .iter()
                .all(|g| g.ids.iter().all(|id| id % 3 == 0))
        );
        assert!(
            groups[2..]
                .iter()
                .all(|g| g.ids.iter().all(|id| id % 3 != 0))
        );
        assert!(groups[0].on_s < groups[2].on_s);
        // Every probe once.
        let mut all: Vec<u32> = groups.iter().flat_map(|g| g.ids.clone()).collect();
        all.sort_unstable();
        assert_eq!(all, ids);
        assert!(survey_groups(&[], |_| true).is_empty());
        // A small set is one group, with the shorter part when it holds a dear site.
        assert_eq!(
            survey_groups(&[0, 1], |id| id == 0),
            [SurveyGroup {
                ids: vec![0, 1],
                on_s: SURVEY_DEAR_ON_S
            }]
        );
        assert_eq!(
            survey_rates(&[10.0, 5.0, 0.0], &[0.01, 0.0, 0.02]),
            [1000.0, 0.0, 0.0]
        );
    }

    #[test]
    fn the_survey_scales_each_probe_over_its_own_groups_parts() {
        // Two probes at 1,000 calls/s over a 10 s survey: one armed 5 ms of it, the
        // other 20 ms (half of each a call's, whose share is uncertain); then periods.
        let mut rng = XorShift::new(5);
        let mut s = Scaler::default();
        let hits = [5 + rng.below(3) as u64, 20 + rng.below(5) as u64];
        s.close_survey(10.0, (&[0.005, 0.02], &[0.001, 0.004]), &hits);
        let mut cumulative = hits;
        for _ in 0..10 {
            cumulative[0] += 100;
            cumulative[1] += 100;
            s.close_period(
                Part {
                    period_s: 1.0,
                    on_s: 0.1,
                    attach_s: 0.0,
                },
                &cumulative,
                &[],
            );
        }
        for scaled in s.scaled(&cumulative) {
            let truth = 20_000.0;
            assert!(scaled.low <= truth && truth <= scaled.high, "{scaled:?}");
        }
    }

    /// A floor said, then shedding after the survey brings the budget within reach: the
    /// line is not left standing.
    #[test]
    fn a_floor_said_before_shedding_is_said_again_after_it() {
        let mut c = Controller::new(Budget::Share(0.01), 60.0, 2);
        c.end_survey(None);
        let mut lines = Vec::new();
        let mut rate = 1.5;
        for period in 0..8 {
            if period == 4 {
                c.set_changed(0.05);
                rate *= 0.05;
            }
            let plan = c.plan();
            run_period(&mut c, &plan, (rate, 0.065), 830.0, 0.0);
            lines.extend(c.floor_news());
        }
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(lines[0].contains("cannot be met"), "{lines:#?}");
        assert!(lines[1].contains("can be met now"), "{lines:#?}");
        assert!(c.summary(&[]).floor.is_none());
    }

    /// Under the least duty, some periods are left detached, spread over the window,
    /// and the window holds.
    #[test]
    fn under_the_least_duty_periods_are_skipped_and_the_window_holds() {
        // 0.75 CPUs while attached against a target on 10% of one, 1% over 60 s: a part
        // of the least length (40 ms) costs half the window's allowance.
        let mut c = Controller::new(Budget::Share(0.01), 60.0, 4);
        let (mut attached, mut total) = (0, 0);
        for _ in 0..40 {
            let plan = c.plan();
            attached += usize::from(run_period(&mut c, &plan, (0.75, 0.1), 1.0, 0.0));
            total += 1;
            if c.surveying() {
                c.end_survey(None);
            }
        }
        let s = c.summary(&[]);
        assert!(
            attached > 5 && attached < total * 3 / 4,
            "{attached}/{total}"
        );
        assert!(s.worst_window.is_some_and(|w| w <= 0.01), "{s:?}");
        assert!(s.duty < s.min_duty, "{s:?}");
        assert!(
            s.floor_line()
                .is_some_and(|l| l.contains("some periods only")),
            "{s:?}"
        );
    }

    /// The window's allowance accrues with its time: a dear set (a part of the least
    /// length costs a third of a window's allowance) never spends ahead of it, so a run
    /// or a load that ends within a window holds the budget over its own length.
    #[test]
    fn the_allowance_accrues_so_a_run_that_ends_within_a_window_holds() {
        const BASE: f64 = 0.1;
        const RATE: f64 = 0.5;
        let mut c = Controller::new(Budget::Share(0.01), 60.0, 3);
        c.end_survey(Some(RATE));
        // The probes' CPU the budget allows per second, over the target's own.
        let allowed = 0.01 / 0.99 * BASE;
        let (mut elapsed, mut attached) = (0.0, 0);
        for _ in 0..16 {
            let plan = c.plan();
            attached += usize::from(run_period(&mut c, &plan, (RATE, BASE), 10.0, 0.0));
            elapsed += plan.period_s;
            // Every prefix of the run: its time's allowance and one period's at most.
            let bound = allowed * (elapsed + 1.3 * c.period_max()) * 1e9;
            assert!(
                c.total_spent.high <= bound,
                "{:.1} ms spent in {elapsed:.0} s, over {:.1} ms",
                c.total_spent.high / 1e6,
                bound / 1e6
            );
        }
        // Duty cycled still: about as many parts as the windows pay for.
        assert!(attached >= 4, "{attached}");
    }

    /// A part planned at one price and read, just before it, at a dearer one is cut to
    /// the duty now (or left out when the window cannot pay it): planned before the read
    /// that priced the flood right, a part of 140 ms spent one and a half windows'
    /// allowance.
    #[test]
    fn a_read_that_prices_the_set_dearer_cuts_the_part_planned_before_it() {
        const BASE: f64 = 0.07;
        let mut c = Controller::new(Budget::Share(0.02), 4.0, 3);
        c.end_survey(Some(0.001));
        for _ in 0..6 {
            let plan = c.plan();
            run_period(&mut c, &plan, (0.001, BASE), 143.0, 0.0);
        }
        let plan = c.plan();
        assert!(plan.on_s > 0.2 * plan.period_s, "{plan:?}");
        let read = Plan {
            period_s: 1.0,
            on_offset_s: 0.0,
            on_s: 0.1,
        };
        run_period(&mut c, &read, (0.06, BASE), 143.0, 0.0);
        let on = c.part_now(plan.on_s, plan.period_s);
        assert!(on < plan.on_s / 4.0, "{on} of {plan:?}");
        // While surveying, a group's part is as planned.
        let mut c = Controller::new(Budget::Share(0.02), 4.0, 3);
        assert_eq!(c.part_now(0.01, 1.0), 0.01);
        c.end_survey(None);
        // Nothing priced: the least duty, never opened blind.
        let plan = c.plan();
        run_period(&mut c, &plan, (0.0, BASE), 1.0, 0.0);
        assert_eq!(c.duty(), c.min_duty());
    }

    /// The duty in the status line and the end's line keeps two significant digits.
    #[test]
    fn a_small_duty_reads_in_significant_digits() {
        assert_eq!(duty_percent(0.0027), "0.27%");
        assert_eq!(duty_percent(0.000031), "0.0031%");
        assert_eq!(duty_percent(0.035), "3.5%");
        assert_eq!(duty_percent(0.35), "35%");
        assert_eq!(duty_percent(0.0), "0%");
        let mut c = Controller::new(Budget::Share(0.01), 60.0, 1);
        c.end_survey(Some(1.5));
        let plan = Plan {
            period_s: 10.0,
            on_offset_s: 0.0,
            on_s: 0.027,
        };
        run_period(&mut c, &plan, (1.5, 0.065), 830.0, 0.0);
        let s = c.summary(&[]);
        assert!(s.status().ends_with("(duty 0.27%)"), "{}", s.status());
        assert!(
            s.line().contains("attached 0.27% of the time"),
            "{}",
            s.line()
        );
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
            s.close_period(
                Part {
                    period_s: 1.0,
                    on_s: 0.1,
                    attach_s: 0.0,
                },
                &[cumulative],
                &[],
            );
        }
        let scaled = s.scaled(&[cumulative])[0];
        let truth = 1000.0 * periods as f64;
        assert!(scaled.low <= truth && truth <= scaled.high, "{scaled:?}");
        assert!(scaled.high - scaled.low < truth * 0.2, "{scaled:?}");
    }

    #[test]
    fn a_part_cut_very_short_joins_the_next_and_the_count_stays_honest() {
        // 40,000 calls/s, attached 10% of 1 s periods; one part cut to 2 ms after an
        // attach call of 5 ms whose hits (200 of them) were counted without its time.
        let part = |on_s: f64, attach_s: f64| Part {
            period_s: 1.0,
            on_s,
            attach_s,
        };
        let mut s = Scaler::default();
        let mut cumulative = 0u64;
        for period in 0..20 {
            if period == 7 {
                cumulative += 80 + 200;
                s.close_period(part(0.002, 0.005), &[cumulative], &[]);
            } else {
                cumulative += 4_000;
                s.close_period(part(0.1, 0.001), &[cumulative], &[]);
            }
        }
        let scaled = s.scaled(&[cumulative])[0];
        let truth = 40_000.0 * 20.0;
        // Alone it would have read 280 / 0.002 = 140,000 calls for that second.
        assert!(scaled.scaled < truth * 1.05, "{scaled:?}");
        assert!(scaled.low <= truth && truth <= scaled.high, "{scaled:?}");
        assert!(scaled.high - scaled.low < truth * 0.2, "{scaled:?}");
        // A short part at the very end is counted at the run's rate, its whole estimate
        // in the interval.
        s.close_period(part(0.001, 0.004), &[cumulative + 300], &[]);
        let end = s.scaled(&[cumulative + 300])[0];
        let truth = 40_000.0 * 21.0;
        assert!(end.low <= truth && truth <= end.high, "{end:?}");
        assert!(end.scaled < truth * 1.1, "{end:?}");
    }

    #[test]
    fn a_shed_probe_is_scaled_over_the_periods_it_was_cycled() {
        let part = Part {
            period_s: 1.0,
            on_s: 0.1,
            attach_s: 0.0,
        };
        let mut s = Scaler::default();
        let (mut a, mut b) = (0u64, 0u64);
        for period in 0..10 {
            a += 100;
            // b is shed from period 4 on: detached, no hit.
            if period < 4 {
                b += 50;
            }
            s.close_period(part, &[a, b], &[false, period >= 4]);
        }
        let scaled = s.scaled(&[a, b]);
        assert!((scaled[0].scaled - 10_000.0).abs() < 1.0, "{scaled:?}");
        assert!((scaled[1].scaled - 2_000.0).abs() < 1.0, "{scaled:?}");
    }

    #[test]
    fn shedding_moves_streaming_probes_first_then_detaches_the_dearest_per_hit() {
        let load = |per_hit_ns, hits, movable| Load {
            per_hit_ns,
            hits,
            movable,
            cycled: true,
        };
        // A single-stepped site (9 us a hit, once a unit) beside an emulated one (0.8 us,
        // five times a unit), both streaming: both go to the kernel, dearest first.
        let mut probes = vec![load(800.0, 5_000.0, true), load(9_000.0, 1_000.0, true)];
        assert_eq!(shed(&probes), Some(Shed::ToKernel(vec![1, 0])));
        probes.iter_mut().for_each(|p| p.movable = false);
        assert_eq!(shed(&probes), Some(Shed::Detach(vec![1])));
        // Once it is out, the last probe stays.
        probes[1].cycled = false;
        assert_eq!(shed(&probes), None);
        // Dear per hit but a small share of the cost: detaching it gains little.
        let probes = [load(800.0, 100_000.0, false), load(9_000.0, 100.0, false)];
        assert_eq!(shed(&probes), None);
        // A glob: 40 emulated sites and 10 single-stepped ones holding half the cost go
        // together, dearest first.
        let mut probes: Vec<Load> = (0..40)
            .map(|i| load(900.0 + i as f64, 100.0, false))
            .collect();
        probes.extend((0..10).map(|i| load(9_000.0 + i as f64, 40.0, false)));
        let expected: Vec<usize> = (40..50).rev().collect();
        assert_eq!(shed(&probes), Some(Shed::Detach(expected)));
        // Every probe as dear per hit as the others (a glob of like functions): none.
        let probes: Vec<Load> = (0..50)
            .map(|i| load(1_000.0 + i as f64, 10.0, false))
            .collect();
        assert_eq!(shed(&probes), None);
        // A probe without hits is neither moved nor detached.
        let probes = [load(800.0, 0.0, true), load(9_000.0, 0.0, false)];
        assert_eq!(shed(&probes), None);
    }
}
