//! `--budget`: the session's side of the duty cycle (`insitu::budget`). It owns the
//! periods' clock, detaches every probe outside a period's attached part and attaches
//! them again at its start, reads the target's CPU (one process, or the set's) at each
//! period's end, and the hits and their estimated cost at each attached part's start
//! (the attached part before it has been read whole by then: the collector's counts lag
//! by at most 500 ms, and the probes were off meanwhile).

use std::time::Duration;

use tokio::time::Instant;

use super::Snapshot;
use crate::attach::Attachment;
use crate::delivery::DeliveryMode;
use crate::insitu::budget::{
    Budget, BudgetSummary, Controller, Load, Observed, Part, Plan, Scaler, Shed, SurveyGroup, shed,
    survey_groups, survey_rates,
};
use crate::insitu::{InSitu, Members, MeterError, Reading, SetMeter, Verdict, Window, WorkMeter};

/// While attached, how often the window's spending is looked at.
const GUARD_EVERY: Duration = Duration::from_millis(100);
/// How long after a detach the snapshot holds every hit of the part before it: the
/// collector reads the kernel's counts every 500 ms and publishes every 100 ms. Read
/// sooner (a part late in one period, the next early in the next), a part's in-kernel
/// hits fell into the next period and the flood's scaled count came out 22% short,
/// outside its interval (2026-11-28); such a period is read with the next.
const READ_LAG: Duration = Duration::from_millis(650);
/// In situ feeds the duty once its attached windows hold this many seconds: over a few
/// parts of 40 ms its interval's top read 1.7-2.2 CPUs on mariadbd (the target's CPU in
/// 40 ms swings by more than the probes add); the estimate is used until then.
const IN_SITU_MIN_ON_S: f64 = 1.0;

/// Whether each step of the duty cycle is written to stderr (`PROBETOP_BUDGET_TRACE`, for
/// finding where a window's cost goes).
pub(super) fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("PROBETOP_BUDGET_TRACE").is_some())
}

/// Seconds since the first trace line.
pub(super) fn trace_at() -> f64 {
    static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    T0.get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

/// A trace line, when `PROBETOP_BUDGET_TRACE` is set.
macro_rules! trace {
    ($($arg:tt)*) => {
        if crate::session::budget::tracing() {
            let line = format!($($arg)*);
            eprintln!("budget-trace {:9.4} {line}", crate::session::budget::trace_at());
        }
    };
}
pub(super) use trace;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Detached, until the attached part of the period starts.
    BeforeOn,
    On,
    /// Detached, until the period ends.
    AfterOn,
}

/// A period that ended and whose hits are not read yet.
#[derive(Debug, Clone, Copy)]
struct Ended {
    period_s: f64,
    on_s: f64,
    attach_s: f64,
    /// The attach and detach calls' seconds.
    calls_s: f64,
    target_cpu_ns: f64,
    /// Attaches of the set in it (each to be detached: a toggle), and the probes.
    toggles: f64,
    toggled: f64,
}

/// The survey under way: a group of probes at a time, each in a period of its own.
struct Survey {
    groups: Vec<SurveyGroup>,
    /// The next group to attach.
    next: usize,
    /// The group attached in the period not read yet.
    attached: Option<usize>,
    /// Each probe's seconds armed (its group's part and half of the calls around it),
    /// the other half of those calls, and its hits.
    armed_s: Vec<f64>,
    calls_s: Vec<f64>,
    hits: Vec<f64>,
    /// The survey's periods, s.
    period_s: f64,
}

impl Survey {
    /// A survey period read: its group's part and its `hits`.
    fn add(&mut self, ended: &Ended, hits: &[f64]) {
        self.period_s += ended.period_s;
        if self.hits.len() < hits.len() {
            self.hits.resize(hits.len(), 0.0);
            self.armed_s.resize(hits.len(), 0.0);
            self.calls_s.resize(hits.len(), 0.0);
        }
        for (sum, h) in self.hits.iter_mut().zip(hits) {
            *sum += h;
        }
        if let Some(group) = self.attached.take().map(|g| &self.groups[g]) {
            for &id in &group.ids {
                if let Some(armed) = self.armed_s.get_mut(id as usize) {
                    *armed += ended.on_s;
                }
            }
        }
    }

    /// The survey's hits into the scaling, as one period; each probe's seconds armed
    /// (its parts and half of the calls around them).
    fn close(&self, scaler: &mut Scaler, cumulative: &[u64]) -> Vec<f64> {
        let armed: Vec<f64> = self
            .armed_s
            .iter()
            .zip(&self.calls_s)
            .map(|(on, calls)| on + calls)
            .collect();
        scaler.close_survey(self.period_s, (&armed, &self.calls_s), cumulative);
        armed
    }
}

pub(super) struct Driver {
    controller: Controller,
    /// Until the survey is over.
    survey: Option<Survey>,
    scaler: Scaler,
    meter: SetMeter,
    insitu: InSitu,
    phase: Phase,
    plan: Plan,
    period_start: Instant,
    period_reading: Reading,
    /// The start of the current in-situ window (attached or not).
    window_reading: Reading,
    /// Attached since.
    on_since: Option<Instant>,
    /// The last detach's end.
    detached_at: Option<Instant>,
    /// Seconds attached in the current period so far.
    on_s: f64,
    /// Seconds the attach calls of the current period took, and its attach and detach
    /// calls together.
    attach_s: f64,
    calls_s: f64,
    /// Seconds attached in the in-situ windows since in situ last started over.
    insitu_on_s: f64,
    /// The current period was left detached.
    skipped: bool,
    /// Attaches of the set in the current period, and the probes attached.
    toggles: f64,
    toggled: f64,
    next: Instant,
    /// The probes detached by the driver.
    suspended: Vec<u32>,
    ended: Option<Ended>,
    /// Each probe's hits as of the last read.
    read_at: Vec<u64>,
    /// Probes out of the duty cycle (shed): detached for the rest of the run.
    shed: Vec<u32>,
    /// Probes asked to go to in-kernel aggregation (once each).
    asked_kernel: Vec<u32>,
    /// Shedding's moves not yet said nor sent to the collector.
    moves: Vec<Move>,
    actions: Vec<String>,
    /// Actions not yet said.
    unsaid: usize,
}

/// A shedding move, said and carried out by [`on_due`] (which has the rows' names and
/// the collector).
#[derive(Debug, Clone)]
enum Move {
    /// To in-kernel aggregation: (probe id, its cost per hit, ns).
    ToKernel(Vec<(u32, f64)>),
    /// Detached: (probe id, its cost per hit (ns), its share of the set's cost).
    Detached(Vec<(u32, f64, f64)>),
}

/// Each probe's whole cost per hit, ns. A probe without an estimate is priced at the
/// dearest one's (none: at `FALLBACK_NS`).
fn per_hit(snapshot: &Snapshot) -> Vec<f64> {
    const FALLBACK_NS: f64 = 2_000.0;
    let dearest = snapshot
        .probes
        .iter()
        .filter_map(|p| p.whole_cost_ns)
        .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.max(c))))
        .unwrap_or(FALLBACK_NS);
    snapshot
        .probes
        .iter()
        .map(|p| p.whole_cost_ns.unwrap_or(dearest))
        .collect()
}

/// Each probe's hits since `read_at`, and their estimated CPU (ns): the hits since, each
/// at its probe's cost per hit now (a probe's price moves as it is measured, and with its
/// mode: the hits read before keep theirs).
fn since(snapshot: &Snapshot, read_at: &[u64]) -> (Vec<f64>, f64) {
    let prices = per_hit(snapshot);
    let hits: Vec<f64> = snapshot
        .probes
        .iter()
        .enumerate()
        .map(|(i, p)| p.hits.saturating_sub(read_at.get(i).copied().unwrap_or(0)) as f64)
        .collect();
    let cost = hits.iter().zip(&prices).map(|(h, c)| h * c).sum();
    (hits, cost)
}

fn part(ended: &Ended) -> Part {
    Part {
        period_s: ended.period_s,
        on_s: ended.on_s,
        attach_s: ended.attach_s,
    }
}

impl Driver {
    /// Starts with the probes of `set` detached (the session detached them as soon as
    /// they were attached), counted since `counting_since`: the survey attaches them a
    /// group at a time, the probes on single-stepped sites (`dear`, by probe id) in
    /// groups of their own with shorter parts.
    pub(super) fn start(
        members: Members,
        budget: Budget,
        window: Duration,
        counting_since: Instant,
        (set, dear): (Vec<u32>, Vec<bool>),
    ) -> Result<Self, MeterError> {
        let seed = u64::from(members.roots.first().copied().unwrap_or(0)) ^ 0x2545_f491_4f6c_dd1d;
        let mut meter = SetMeter::new(members, WorkMeter::None)?;
        let reading = meter.read()?;
        let mut controller = Controller::new(budget, window.as_secs_f64(), seed);
        let plan = controller.plan();
        let now = Instant::now();
        let since = counting_since.min(now);
        let groups = survey_groups(&set, |id| dear.get(id as usize).copied().unwrap_or(false));
        let probes = set.iter().map(|&id| id as usize + 1).max().unwrap_or(0);
        let driver = Self {
            controller,
            survey: Some(Survey {
                groups,
                next: 0,
                attached: None,
                armed_s: vec![0.0; probes],
                calls_s: vec![0.0; probes],
                hits: vec![0.0; probes],
                period_s: 0.0,
            }),
            scaler: Scaler::default(),
            meter,
            insitu: InSitu::new(WorkMeter::None),
            phase: Phase::BeforeOn,
            plan,
            period_start: since,
            period_reading: reading,
            window_reading: reading,
            on_since: None,
            detached_at: None,
            on_s: 0.0,
            attach_s: 0.0,
            calls_s: 0.0,
            insitu_on_s: 0.0,
            skipped: false,
            toggles: 0.0,
            toggled: 0.0,
            next: now,
            suspended: set,
            ended: None,
            read_at: Vec::new(),
            shed: Vec::new(),
            asked_kernel: Vec::new(),
            moves: Vec::new(),
            actions: vec![format!(
                "budget {budget}: every probe attached for a part of each period, hits scaled to the whole run"
            )],
            unsaid: 1,
        };
        Ok(driver)
    }

    /// Resolves when the driver has something to do.
    pub(super) async fn due(&self) {
        tokio::time::sleep_until(self.next).await;
    }

    fn at(&self, seconds: f64) -> Instant {
        self.period_start + Duration::from_secs_f64(seconds.max(0.0))
    }

    /// Does what is due: attaches at an attached part's start, detaches at its end (or
    /// once the window's allowance is spent), ends a period at its end.
    pub(super) fn step(
        &mut self,
        attachment: &mut Attachment,
        snapshot: &Snapshot,
    ) -> Result<(), MeterError> {
        let now = Instant::now();
        match self.phase {
            Phase::BeforeOn => {
                // A period the window cannot pay a part for stays detached; its hits (the
                // parts before it) are read at its end.
                let skip = self.plan.on_s <= 0.0
                    || (self.on_since.is_none() && !self.controller.part_affordable());
                if skip {
                    if self.on_since.is_some() {
                        self.detach(attachment)?;
                    }
                    self.skipped = true;
                    self.phase = Phase::AfterOn;
                    self.next = self.at(self.plan.period_s);
                    return Ok(());
                }
                let on_at = self.at(self.plan.on_offset_s);
                if now < on_at {
                    if self.on_since.is_some() {
                        // Attached from the start, or after a full-duty period: off now.
                        self.detach(attachment)?;
                    }
                    self.next = on_at;
                    return Ok(());
                }
                // Still attached (from the start, or a full-duty period): nothing to do.
                if self.on_since.is_none() {
                    if self.readable() {
                        let surveying = self.survey.is_some();
                        self.read_hits(attachment, snapshot);
                        if surveying && self.survey.is_none() {
                            // The survey ended at this read: the period (planned as a
                            // survey group's, and at its start) is planned anew.
                            self.plan = self.controller.plan();
                            trace!(
                                "plan period {:.3}s, attached {:.4}s from {:.3}s (after the survey)",
                                self.plan.period_s, self.plan.on_s, self.plan.on_offset_s
                            );
                            return self.step(attachment, snapshot);
                        }
                    }
                    // The read may price the set anew (the survey's end, a load that
                    // grew): the part planned before it is cut to the duty now, or left
                    // out. Planned on the old price, a part of 140 ms spent one and a
                    // half windows' allowance on the flood (2026-11-28).
                    let on_s = self.controller.part_now(self.plan.on_s, self.plan.period_s);
                    if on_s <= 0.0 {
                        trace!("the read priced the set anew: no part this period");
                        self.skipped = true;
                        self.phase = Phase::AfterOn;
                        self.next = self.at(self.plan.period_s);
                        return Ok(());
                    }
                    self.plan.on_s = on_s;
                    self.attach(attachment)?;
                }
                self.phase = Phase::On;
                self.next = self.on_end().min(Instant::now() + GUARD_EVERY);
            }
            Phase::On => {
                let on_end = self.on_end();
                let full = self.plan.on_s >= self.plan.period_s;
                let running = since(snapshot, &self.read_at).1;
                let spent_out = !full && self.controller.window_spent_out(running);
                if now < on_end && !spent_out {
                    self.next = on_end.min(now + GUARD_EVERY);
                    return Ok(());
                }
                if spent_out {
                    trace!("the window's allowance is spent: the part ends early");
                }
                if full {
                    // Attached the whole period: it ends here, its hits read now.
                    self.on_s += self.on_since.map_or(0.0, |s| (now - s).as_secs_f64());
                    self.on_since = Some(now);
                    self.end_period()?;
                    self.read_hits(attachment, snapshot);
                    self.begin_period(attachment, snapshot)?;
                    return Ok(());
                }
                self.detach(attachment)?;
                self.phase = Phase::AfterOn;
                self.next = self.at(self.plan.period_s);
            }
            Phase::AfterOn => {
                if now < self.at(self.plan.period_s) {
                    self.next = self.at(self.plan.period_s);
                    return Ok(());
                }
                self.end_period()?;
                if std::mem::take(&mut self.skipped) && self.readable() {
                    self.read_hits(attachment, snapshot);
                }
                self.begin_period(attachment, snapshot)?;
            }
        }
        Ok(())
    }

    /// Whether the snapshot holds every hit of the periods ended: while surveying
    /// (each group's part at its period's start) always; else once [`READ_LAG`] has
    /// passed since the last detach.
    fn readable(&self) -> bool {
        self.survey.is_some() || self.detached_at.is_none_or(|at| at.elapsed() >= READ_LAG)
    }

    fn on_end(&self) -> Instant {
        self.at(self.plan.on_offset_s + self.plan.on_s)
    }

    fn begin_period(
        &mut self,
        attachment: &mut Attachment,
        snapshot: &Snapshot,
    ) -> Result<(), MeterError> {
        self.plan = self.controller.plan();
        trace!(
            "plan period {:.3}s, attached {:.4}s from {:.3}s",
            self.plan.period_s, self.plan.on_s, self.plan.on_offset_s
        );
        self.period_start = Instant::now();
        self.phase = Phase::BeforeOn;
        self.next = self.period_start;
        // A duty that went to every moment (or left it) changes nothing until the next
        // attached part: step again at once.
        self.step(attachment, snapshot)
    }

    fn detach(&mut self, attachment: &mut Attachment) -> Result<(), MeterError> {
        let end = self.meter.read()?;
        if let Some(since) = self.on_since.take() {
            let attached_s = (Instant::now() - since).as_secs_f64();
            self.controller.attached_for(self.plan.on_s, attached_s);
            self.on_s += attached_s;
            self.insitu_on_s += attached_s;
            self.insitu
                .push_window(Window::between(true, &self.window_reading, &end));
        }
        let attached = attachment.attached_ids();
        // A shed probe the user attached again is back in the cycle.
        self.shed.retain(|id| !attached.contains(id));
        let before = Instant::now();
        attachment.detach_set(&attached);
        let call_s = (Instant::now() - before).as_secs_f64();
        self.calls_s += call_s;
        trace!("detach {} probes in {:.2}ms", attached.len(), call_s * 1e3);
        self.detached_at = Some(Instant::now());
        // While surveying, the probes of the other groups were detached already.
        let mut seen: std::collections::HashSet<u32> = self.suspended.iter().copied().collect();
        self.suspended
            .extend(attached.into_iter().filter(|id| seen.insert(*id)));
        self.window_reading = self.meter.read()?;
        Ok(())
    }

    fn attach(&mut self, attachment: &mut Attachment) -> Result<(), MeterError> {
        let end = self.meter.read()?;
        self.insitu
            .push_window(Window::between(false, &self.window_reading, &end));
        let before = Instant::now();
        let ids = self.next_group();
        self.toggles += 1.0;
        self.toggled += ids.len() as f64;
        if let Err(e) = attachment.reattach_set(&ids) {
            // Said once; the probes that came back count on.
            self.act(format!("cannot attach the probes again: {e}"));
        }
        // Attached from the end of the call: the kernel arms the points last. The call's
        // length is the uncertainty of the attached part's start.
        let after = Instant::now();
        self.note_call((after - before).as_secs_f64());
        trace!(
            "attach {} probes in {:.2}ms",
            ids.len(),
            (after - before).as_secs_f64() * 1e3
        );
        self.attach_s += (after - before).as_secs_f64();
        self.calls_s += (after - before).as_secs_f64();
        self.on_since = Some(after);
        // A part is as long as planned from when its probes are armed: cut by a long
        // attach call, a survey group's part saw none of its hits on mariadbd, and on a
        // loaded host a 40 ms part of the flood was 0.4 ms after a 41 ms attach.
        self.plan.on_offset_s = (after - self.period_start).as_secs_f64();
        self.window_reading = self.meter.read()?;
        Ok(())
    }

    /// The probes to attach now: while surveying, the next group's (and its part's
    /// length into the plan); else every probe in the cycle.
    fn next_group(&mut self) -> Vec<u32> {
        let Some(survey) = self.survey.as_mut().filter(|s| s.next < s.groups.len()) else {
            return std::mem::take(&mut self.suspended);
        };
        let group = &survey.groups[survey.next];
        survey.attached = Some(survey.next);
        survey.next += 1;
        self.plan.on_s = group.on_s.min(self.plan.on_s);
        let ids: Vec<u32> = group
            .ids
            .iter()
            .copied()
            .filter(|id| self.suspended.contains(id))
            .collect();
        self.suspended.retain(|id| !ids.contains(id));
        ids
    }

    /// An attach call of `call_s` while surveying: its group's probes were armed over
    /// about half of it (a detach call disarms them at its start: [`Observed::calls_s`]).
    fn note_call(&mut self, call_s: f64) {
        let Some(survey) = self.survey.as_mut() else {
            return;
        };
        let Some(group) = survey.attached.map(|g| &survey.groups[g]) else {
            return;
        };
        for &id in &group.ids {
            if let Some(calls) = survey.calls_s.get_mut(id as usize) {
                *calls += call_s / 2.0;
            }
        }
    }

    fn end_period(&mut self) -> Result<(), MeterError> {
        let reading = self.meter.read()?;
        let period_s = (reading.at - self.period_reading.at).as_secs_f64();
        let target_cpu_ns = reading.cpu_ns.saturating_sub(self.period_reading.cpu_ns) as f64;
        let on_s = std::mem::take(&mut self.on_s);
        let attach_s = std::mem::take(&mut self.attach_s);
        let calls_s = std::mem::take(&mut self.calls_s);
        let toggles = std::mem::take(&mut self.toggles);
        let toggled = std::mem::take(&mut self.toggled);
        // A period whose hits were not read yet joins this one.
        self.ended = Some(match self.ended.take() {
            Some(e) => Ended {
                period_s: e.period_s + period_s,
                on_s: e.on_s + on_s,
                attach_s: e.attach_s + attach_s,
                calls_s: e.calls_s + calls_s,
                target_cpu_ns: e.target_cpu_ns + target_cpu_ns,
                toggles: e.toggles + toggles,
                toggled: e.toggled + toggled,
            },
            None => Ended {
                period_s,
                on_s,
                attach_s,
                calls_s,
                target_cpu_ns,
                toggles,
                toggled,
            },
        });
        self.period_reading = reading;
        Ok(())
    }

    /// The hits of the period that ended, into the scaling and the ledger; then, while
    /// the budget binds, shedding's next move.
    fn read_hits(&mut self, attachment: &mut Attachment, snapshot: &Snapshot) {
        let Some(ended) = self.ended.take() else {
            return;
        };
        let (hits, estimated_ns) = since(snapshot, &self.read_at);
        let cumulative: Vec<u64> = snapshot.probes.iter().map(|p| p.hits).collect();
        // A survey period's part held one group: its hits are scaled with the whole
        // survey's, each probe over its own group's parts.
        let whole = self.survey.is_none();
        let surveyed = self.survey.as_mut().map(|survey| {
            survey.add(&ended, &hits);
            survey.next >= survey.groups.len()
        });
        if whole {
            self.scaler
                .close_period(part(&ended), &cumulative, &self.out(cumulative.len()));
        }
        self.read_at = cumulative.clone();
        // In situ where it has a signal: its interval above zero, over attached windows
        // long enough to tell.
        let summary = self.insitu.summary(0);
        let measured = (summary.verdict == Verdict::Measured
            && self.insitu_on_s >= IN_SITU_MIN_ON_S)
            .then_some(summary.added_share)
            .flatten()
            .filter(|share| share.low > 0.0)
            .map(|share| share.high);
        self.controller.measured_in_situ(measured);
        self.controller.observe(Observed {
            period_s: ended.period_s,
            whole,
            on_s: ended.on_s,
            estimated_ns,
            target_cpu_ns: ended.target_cpu_ns,
            toggles: ended.toggles,
            toggled: ended.toggled,
            calls_s: ended.attach_s,
        });
        trace!(
            "read period {:.3}s on {:.4}s calls {:.2}ms toggles {} of {} est {:.2}ms hits {} target {:.1}ms | {}",
            ended.period_s,
            ended.on_s,
            ended.calls_s * 1e3,
            ended.toggles,
            ended.toggled,
            estimated_ns / 1e6,
            hits.iter().sum::<f64>(),
            ended.target_cpu_ns / 1e6,
            self.controller.trace()
        );
        // Shedding settled: no move made at this read. Only then is the floor said,
        // so that a line said before a move is not followed by its opposite.
        let settled = match surveyed {
            Some(true) => {
                self.end_survey(attachment, snapshot, &cumulative);
                false
            }
            Some(false) => false,
            None => {
                !(self.controller.binds() && self.shed_next(attachment, snapshot, &hits, false))
            }
        };
        if settled && let Some(line) = self.controller.floor_news() {
            self.act(line);
        }
    }

    /// Every group's part was read: each probe's hits over its group's parts scale the
    /// survey's time, and price the whole set while attached; while that is over the
    /// budget, shedding moves by those rates before the whole set is first attached.
    fn end_survey(&mut self, attachment: &mut Attachment, snapshot: &Snapshot, cumulative: &[u64]) {
        let Some(survey) = self.survey.take() else {
            return;
        };
        let armed = survey.close(&mut self.scaler, cumulative);
        let rates = survey_rates(&survey.hits, &armed);
        let prices = per_hit(snapshot);
        let rate: f64 = rates.iter().zip(&prices).map(|(r, p)| r * p).sum::<f64>() / 1e9;
        self.controller.end_survey(Some(rate));
        trace!(
            "survey over: {} groups in {:.2}s, the set at {rate:.4} CPUs while attached | {}",
            survey.groups.len(),
            survey.period_s,
            self.controller.trace()
        );
        if self.controller.binds() {
            self.shed_next(attachment, snapshot, &rates, true);
            trace!("after shedding | {}", self.controller.trace());
        }
    }

    /// Whether each probe is out of the cycle.
    fn out(&self, probes: usize) -> Vec<bool> {
        (0..probes as u32)
            .map(|id| self.shed.contains(&id))
            .collect()
    }

    /// Shedding's next move (`insitu::budget::shed`), from the period's `hits` (or the
    /// survey's rates); at the survey's end, the move after it too (the dearest per hit
    /// are as dear streaming or counted in the kernel), so the whole set is never
    /// attached as it was. Returns whether anything moved.
    fn shed_next(
        &mut self,
        attachment: &mut Attachment,
        snapshot: &Snapshot,
        hits: &[f64],
        surveying: bool,
    ) -> bool {
        let mut moved = false;
        for _ in 0..if surveying { 2 } else { 1 } {
            if !self.shed_one(attachment, snapshot, hits) {
                break;
            }
            moved = true;
        }
        moved
    }

    /// One shedding move; whether there was one.
    fn shed_one(&mut self, attachment: &mut Attachment, snapshot: &Snapshot, hits: &[f64]) -> bool {
        let prices = per_hit(snapshot);
        let loads: Vec<Load> = snapshot
            .probes
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let id = i as u32;
                Load {
                    per_hit_ns: prices[i],
                    hits: hits.get(i).copied().unwrap_or(0.0),
                    movable: p.mode == DeliveryMode::Ring && !self.asked_kernel.contains(&id),
                    cycled: !self.shed.contains(&id)
                        && (self.suspended.contains(&id) || attachment.is_attached(id)),
                }
            })
            .collect();
        match shed(&loads) {
            Some(Shed::ToKernel(ids)) => {
                let ids: Vec<(u32, f64)> = ids.into_iter().map(|i| (i as u32, prices[i])).collect();
                self.asked_kernel.extend(ids.iter().map(|&(id, _)| id));
                self.moves.push(Move::ToKernel(ids));
                true
            }
            Some(Shed::Detach(dear)) => {
                let total: f64 = loads
                    .iter()
                    .filter(|l| l.cycled)
                    .map(|l| l.per_hit_ns * l.hits)
                    .sum();
                let mut shed_share = 0.0;
                let mut moved = Vec::new();
                for i in dear {
                    let id = i as u32;
                    let share = if total > 0.0 {
                        loads[i].per_hit_ns * loads[i].hits / total
                    } else {
                        0.0
                    };
                    shed_share += share;
                    self.shed.push(id);
                    self.suspended.retain(|&s| s != id);
                    if attachment.is_attached(id) {
                        attachment.detach(id);
                    }
                    moved.push((id, prices[i], share));
                }
                // What the periods read cost without them; in situ measured the old set.
                self.controller.set_changed(1.0 - shed_share);
                self.insitu = InSitu::new(WorkMeter::None);
                self.insitu_on_s = 0.0;
                self.moves.push(Move::Detached(moved));
                true
            }
            None => false,
        }
    }

    /// Shedding's moves not said yet, as lines to say (probes named by `name`); returns
    /// the probes to move to in-kernel aggregation, and those detached.
    fn take_moves(&mut self, name: impl Fn(u32) -> String) -> (Vec<u32>, Vec<u32>) {
        let (mut to_kernel, mut detached) = (Vec::new(), Vec::new());
        for m in std::mem::take(&mut self.moves) {
            match m {
                Move::ToKernel(ids) => {
                    // Each said once; a glob of many in one line past the first few.
                    const NAMED: usize = 5;
                    for &(id, ns) in ids.iter().take(NAMED) {
                        self.act(format!(
                            "budget: {} ({:.0} ns a hit) counted in the kernel from now on: the same counts and histograms for less a hit",
                            name(id),
                            ns
                        ));
                    }
                    if ids.len() > NAMED {
                        self.act(format!(
                            "budget: {} more probes counted in the kernel from now on",
                            ids.len() - NAMED
                        ));
                    }
                    to_kernel.extend(ids.iter().map(|&(id, _)| id));
                }
                Move::Detached(probes) => {
                    const NAMED: usize = 5;
                    for &(id, ns, share) in probes.iter().take(NAMED) {
                        self.act(format!(
                            "budget: {} detached for the rest of the run: {:.0} ns a hit, {:.0}% of what the probes cost; its hits are scaled over the time it was attached",
                            name(id),
                            ns,
                            share * 100.0
                        ));
                    }
                    if probes.len() > NAMED {
                        let rest = &probes[NAMED..];
                        self.act(format!(
                            "budget: {} more probes detached for the rest of the run, {:.0}% of what the probes cost",
                            rest.len(),
                            rest.iter().map(|p| p.2).sum::<f64>() * 100.0
                        ));
                    }
                    detached.extend(probes.iter().map(|p| p.0));
                }
            }
        }
        (to_kernel, detached)
    }

    fn act(&mut self, line: String) {
        if !self.actions.contains(&line) {
            self.actions.push(line);
            self.unsaid += 1;
        }
    }

    /// Actions not said yet, each once.
    pub(super) fn unsaid(&mut self) -> Vec<String> {
        let from = self.actions.len() - self.unsaid;
        self.unsaid = 0;
        self.actions[from..].to_vec()
    }

    /// During a detached part, a probe's detach or attach asked by the user applies to
    /// the set that comes back. Returns whether it is to be attached then, or `None`
    /// while attached (the caller acts itself).
    pub(super) fn redirect(&mut self, probe_id: u32, attach: bool) -> Option<bool> {
        // While a survey group is attached, the others are detached as in a detached part.
        if self.on_since.is_some() && !self.suspended.contains(&probe_id) {
            return None;
        }
        self.suspended.retain(|&id| id != probe_id);
        if attach {
            self.suspended.push(probe_id);
            self.shed.retain(|&id| id != probe_id);
        }
        Some(attach)
    }

    /// The probes shedding detached for the rest of the run.
    pub(super) fn shed_ids(&self) -> &[u32] {
        &self.shed
    }

    /// Whether a probe detached by the driver counts as attached.
    pub(super) fn is_suspended(&self, probe_id: u32) -> bool {
        self.suspended.contains(&probe_id)
    }

    /// The run so far.
    pub(super) fn summary(&self) -> BudgetSummary {
        self.controller.summary(&self.actions)
    }

    /// Ends the last period where the run ends: just before the cut.
    pub(super) fn finish(&mut self) {
        if let Some(since) = self.on_since.take() {
            self.on_s += (Instant::now() - since).as_secs_f64();
        }
        let _ = self.end_period();
    }

    /// After [`Self::finish`]: every probe's `counted` hits (the run's exact counts)
    /// scaled to the whole run.
    pub(super) fn scaled(&mut self, counted: &[u64]) -> BudgetSummary {
        if let Some(mut survey) = self.survey.take() {
            // The run ended while surveying.
            if let Some(ended) = self.ended.take() {
                survey.add(&ended, &[]);
            }
            survey.close(&mut self.scaler, counted);
        } else if let Some(ended) = self.ended.take() {
            let out = self.out(counted.len());
            self.scaler.close_period(part(&ended), counted, &out);
        }
        let mut summary = self.summary();
        summary.scaled = self.scaler.scaled(counted);
        summary
    }
}

/// Resolves when `driver` has something to do; never without a driver.
pub(super) async fn due(driver: &Option<Driver>) {
    match driver {
        Some(driver) => driver.due().await,
        None => std::future::pending().await,
    }
}

/// What a step of the duty cycle has to tell: the status line's part (long and short),
/// and actions not said yet.
pub(super) struct Told {
    pub status: String,
    pub status_short: String,
    /// Probes shedding detached for the rest of the run.
    pub detached: Vec<u32>,
    pub actions: Vec<String>,
}

/// Does what the duty cycle has due. On an error it stops (said once), with every probe
/// it had detached attached again.
pub(super) fn on_due(
    driver: &mut Option<Driver>,
    attachment: &mut Attachment,
    snapshots: &tokio::sync::watch::Receiver<Snapshot>,
    source: &super::report::ReportSource,
) -> Option<Told> {
    let active = driver.as_mut()?;
    // A copy: the collector must not wait on a detach to publish.
    let snapshot = snapshots.borrow().clone();
    let stepped = active.step(attachment, &snapshot);
    let mut detached = Vec::new();
    if !active.moves.is_empty() {
        let rows = source.rows();
        let (to_kernel, shed) = active.take_moves(|id| {
            rows.probes.get(id as usize).map_or_else(
                || format!("probe {id}"),
                |p| crate::present::ProbeLabel::new(p.point.kind, &p.point.name, "").display,
            )
        });
        // The collector takes it at its next turn; if its queue is full the probes
        // stream on, and the next period's prices say so.
        if !to_kernel.is_empty() {
            let _ = source
                .commands
                .try_send(crate::stream::CollectorCommand::ToKernel { probes: to_kernel });
        }
        detached = shed;
    }
    *source
        .budget
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(active.summary());
    if let Err(e) = stepped {
        let mut ids = std::mem::take(&mut active.suspended);
        ids.append(&mut active.shed);
        let back = attachment.reattach_set(&ids);
        *driver = None;
        let mut line = format!(
            "budget stopped: {}; every probe attached again",
            crate::error_line(&anyhow::Error::new(e))
        );
        if let Err(e) = back {
            line = format!("{line} but: {e}");
        }
        return Some(Told {
            status: String::new(),
            status_short: String::new(),
            actions: vec![line],
            detached: Vec::new(),
        });
    }
    let summary = active.summary();
    Some(Told {
        status: summary.status(),
        status_short: summary.status_short(),
        actions: active.unsaid(),
        detached,
    })
}

/// Without `--budget`: the target's CPU from the start, for the hint at the end when the
/// probes cost more than [`HINT_ABOVE`] of it.
pub(super) struct Hint {
    meter: SetMeter,
    start: Reading,
}

/// A share of the target's CPU above which the end of a run names `--budget`.
const HINT_ABOVE: f64 = 0.05;

impl Hint {
    pub(super) fn start(members: Members) -> Option<Self> {
        let mut meter = SetMeter::new(members, WorkMeter::None).ok()?;
        let start = meter.read().ok()?;
        Some(Self { meter, start })
    }

    /// The hint line when the probes' estimated CPU over the run, `probes_ns`, is over
    /// [`HINT_ABOVE`] of the target's CPU meanwhile; `attached` is the share of the run
    /// the probes were attached (below 1 under `--in-situ`, whose detached windows would
    /// otherwise dilute the share that the answer beside it does not).
    pub(super) fn line(&mut self, probes_ns: f64, attached: f64) -> Option<String> {
        let end = self.meter.read().ok()?;
        let target_ns = end.cpu_ns.saturating_sub(self.start.cpu_ns) as f64;
        hint_line(probes_ns, target_ns, attached)
    }
}

/// The hint for probes that cost `probes_ns` of a target that used `target_ns` over a run
/// they were attached for the share `attached` of: their share of its CPU while attached,
/// said only over [`HINT_ABOVE`].
fn hint_line(probes_ns: f64, target_ns: f64, attached: f64) -> Option<String> {
    if target_ns <= 0.0 || attached.is_nan() || attached <= 0.0 {
        return None;
    }
    let attached = attached.min(1.0);
    // The probes' CPU falls in the attached time only; the target's own is spread over
    // the whole run, so the attached part holds that share of it.
    let own_ns = (target_ns - probes_ns).max(0.0);
    let share = probes_ns / (probes_ns + own_ns * attached);
    let when = if attached < 1.0 {
        " while they were attached"
    } else {
        ""
    };
    (share > HINT_ABOVE).then(|| {
        format!(
            "the probes took about {:.0}% of all the CPU time the target used{when}, theirs included (what --budget counts; the answer sets them against the target's own CPU, without them); --budget 2% (or any share, or 20ms/s) keeps them under a ceiling by attaching them part of the time",
            share.min(1.0) * 100.0
        )
    })
}

/// The summary table's rows scaled as the exports are: hits to the whole run, rates with
/// them.
pub(super) fn scale_rows(snapshot: &mut Snapshot, summary: BudgetSummary) -> BudgetSummary {
    for (probe, scaled) in snapshot.probes.iter_mut().zip(&summary.scaled) {
        if scaled.counted > 0 {
            probe.per_second *= scaled.scaled / scaled.counted as f64;
        }
        probe.hits = scaled.scaled.round() as u64;
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::hint_line;

    /// Under --in-situ the probes were attached part of the run: their share is of the
    /// target's CPU in that part, as the answer beside the hint is, and it says so.
    #[test]
    fn the_hint_sets_the_probes_against_the_time_they_were_attached() {
        // 60 ms of probes over 1 s of the target's CPU, attached all along: 6%.
        let whole = hint_line(60e6, 1e9, 1.0).expect("over 5%");
        assert!(
            whole.contains("about 6% of all the CPU time the target used,"),
            "{whole}"
        );
        // The same hits in a quarter of the run: 60 ms beside a quarter of the target's
        // own 940 ms, 20% while attached.
        let quarter = hint_line(60e6, 1e9, 0.25).expect("over 5%");
        assert!(
            quarter.contains(
                "about 20% of all the CPU time the target used while they were attached,"
            ),
            "{quarter}"
        );
        // 40 ms over the whole second is under the hint's 5%; over half of it, not
        // (40 / (40 + 480) = 7.7%).
        assert_eq!(hint_line(40e6, 1e9, 1.0), None);
        assert!(hint_line(40e6, 1e9, 0.5).is_some_and(|l| l.contains("about 8%")));
        assert_eq!(hint_line(40e6, 0.0, 1.0), None);
        assert_eq!(hint_line(40e6, 1e9, 0.0), None);
    }
}
