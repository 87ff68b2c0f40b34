//! In-situ cost: what the probes cost the running target, measured on the target itself.
//!
//! probetop alternates windows with its probes attached and detached and compares the
//! target's CPU time per unit of work between them. Every ON window is paired with the
//! mean of the OFF windows on either side of it, which cancels a load that drifts
//! linearly; the pairs' differences give the added CPU (a share of one CPU while the
//! probes are attached) with a bootstrap confidence interval. Dividing by the hits per
//! second of the ON windows gives the added CPU per hit.
//!
//! The work meter needs no probe: the target's own syscalls (`/proc/PID/io` syscr +
//! syscw), which a server makes a few of per request whatever it is probed with; or its
//! threads' wakeups (each thread's voluntary context switches, `/proc/PID/task/*/status`:
//! a thread that blocked for its next request and was woken), for servers whose socket
//! calls (recv/send) those counters do not see, like mariadbd; or none, for
//! an open-loop load whose rate does not depend on the target's speed. `auto` looks at
//! the target for a moment and takes the first of syscalls and wakeups that moves.

use std::{collections::HashMap, fmt, io, time::Instant};

use crate::stats::{XorShift, quantile};
use crate::sys::procfs;

pub(crate) mod budget;
mod set;
pub(crate) use set::{Members, SetMeter};

/// Windows before a number is given: fewer pairs make an interval that means little.
pub(crate) const MIN_PAIRS: usize = 3;
/// Bootstrap resamples of the pairs' mean.
const RESAMPLES: usize = 2000;

/// What one unit of the target's work is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WorkMeter {
    /// The first of syscalls and wakeups that the target's work moves; none if neither.
    #[default]
    Auto,
    /// The target's syscalls (`/proc/PID/io` syscr + syscw): on a server, a request is a
    /// few reads and writes, probed or not.
    Syscalls,
    /// Its threads' wakeups (voluntary context switches, `/proc/PID/task/*/status`): a
    /// request wakes the thread that serves it, probed or not. Not the timeslices run
    /// (schedstat), which count preemptions too: those rise with the CPU the probes add
    /// (+1.4% on mariadbd at 2,000 statements/s in-kernel, docs/cost.md), and the meter
    /// then takes that share of the target's whole CPU off the probes' cost.
    Wakeups,
    /// None: CPU per second, for an open-loop load (a fixed request rate).
    None,
}

impl WorkMeter {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Syscalls => "syscalls",
            Self::Wakeups => "wakeups",
            Self::None => "none",
        }
    }
}

/// The target's CPU time and work done so far, read together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Reading {
    pub at: Instant,
    /// CPU time of every thread of the target, dead ones included (its process CPU
    /// clock), in ns.
    pub cpu_ns: u64,
    /// Work units done so far (0 with [`WorkMeter::None`]).
    pub work: u64,
    /// Processes read (a set's members, those gone since the last reading included).
    pub processes: u32,
    /// Members gone between two readings so far, their last moments unmeasured.
    pub lost: u64,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum MeterError {
    #[error("cannot read the CPU clock of pid {pid}: {source}")]
    Clock { pid: u32, source: io::Error },
    #[error("cannot read /proc/{pid}/io: {source}")]
    Io { pid: u32, source: io::Error },
    #[error("cannot read the threads of pid {pid}: {source}")]
    Threads { pid: u32, source: io::Error },
}

/// How long `auto` watches the target to choose a meter.
const AUTO_LOOK: std::time::Duration = std::time::Duration::from_millis(300);
/// Counts a meter must move by in [`AUTO_LOOK`] to be chosen.
const AUTO_MIN_COUNT: u64 = 20;

/// Reads a target's CPU time and work.
#[derive(Debug)]
pub(crate) struct TargetMeter {
    pid: u32,
    clock: crate::sys::clock::ProcessCpuClock,
    work: WorkMeter,
    /// Wakeups: each thread's count at the last reading, and the running total (a
    /// thread that exits takes its count along; only increments are summed).
    switches: HashMap<u32, u64>,
    wakeups: u64,
}

impl TargetMeter {
    pub(crate) fn new(pid: u32, work: WorkMeter) -> Result<Self, MeterError> {
        let clock = crate::sys::clock::ProcessCpuClock::of(pid)
            .map_err(|source| MeterError::Clock { pid, source })?;
        let mut meter = Self {
            pid,
            clock,
            work,
            switches: HashMap::new(),
            wakeups: 0,
        };
        if work == WorkMeter::Auto {
            meter.work = meter.choose()?;
        }
        meter.read()?;
        Ok(meter)
    }

    /// `auto`: the first meter that moves while the target works for a moment.
    fn choose(&mut self) -> Result<WorkMeter, MeterError> {
        let syscalls0 = self.syscalls()?;
        self.count_wakeups()?;
        let wakeups0 = self.wakeups;
        std::thread::sleep(AUTO_LOOK);
        let syscalls = self.syscalls()?.saturating_sub(syscalls0);
        self.count_wakeups()?;
        let wakeups = self.wakeups - wakeups0;
        Ok(if syscalls >= AUTO_MIN_COUNT {
            WorkMeter::Syscalls
        } else if wakeups >= AUTO_MIN_COUNT {
            WorkMeter::Wakeups
        } else {
            WorkMeter::None
        })
    }

    fn syscalls(&self) -> Result<u64, MeterError> {
        let text = procfs::io_counters(self.pid).map_err(|source| MeterError::Io {
            pid: self.pid,
            source,
        })?;
        Ok(syscalls(&text))
    }

    /// Adds every thread's wakeups since the last reading to the running total.
    fn count_wakeups(&mut self) -> Result<(), MeterError> {
        let pid = self.pid;
        let threads = procfs::threads(pid).map_err(|source| MeterError::Threads { pid, source })?;
        let mut now = HashMap::with_capacity(self.switches.len());
        for tid in threads {
            // A thread that exits between the listing and the read is simply gone.
            let Ok(text) = procfs::thread_file(pid, tid, "status") else {
                continue;
            };
            if let Some(count) = voluntary_switches(&text) {
                let before = self.switches.get(&tid).copied().unwrap_or(0);
                self.wakeups += count.saturating_sub(before);
                now.insert(tid, count);
            }
        }
        self.switches = now;
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn work(&self) -> WorkMeter {
        self.work
    }

    pub(crate) fn read(&mut self) -> Result<Reading, MeterError> {
        let cpu_ns = self.clock.read_ns().map_err(|source| MeterError::Clock {
            pid: self.pid,
            source,
        })?;
        let at = Instant::now();
        let work = match self.work {
            WorkMeter::None | WorkMeter::Auto => 0,
            WorkMeter::Syscalls => self.syscalls()?,
            WorkMeter::Wakeups => {
                self.count_wakeups()?;
                self.wakeups
            }
        };
        Ok(Reading {
            at,
            cpu_ns,
            work,
            processes: 1,
            lost: 0,
        })
    }
}

/// syscr + syscw of a `/proc/PID/io` text.
fn syscalls(io_text: &str) -> u64 {
    io_text
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(':')?;
            matches!(key.trim(), "syscr" | "syscw").then(|| value.trim().parse::<u64>().ok())?
        })
        .sum()
}

/// `voluntary_ctxt_switches` of a thread's status: the times it blocked.
fn voluntary_switches(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
}

/// One window: the probes attached or detached all through it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Window {
    pub probes_on: bool,
    pub seconds: f64,
    pub cpu_ns: u64,
    pub work: u64,
    /// Processes the window covered.
    pub processes: u32,
    /// Whether a process exited in it with CPU unmeasured: its pairs are dropped.
    pub lost: bool,
}

impl Window {
    pub(crate) fn between(probes_on: bool, start: &Reading, end: &Reading) -> Self {
        Self {
            probes_on,
            seconds: end.at.saturating_duration_since(start.at).as_secs_f64(),
            cpu_ns: end.cpu_ns.saturating_sub(start.cpu_ns),
            work: end.work.saturating_sub(start.work),
            processes: end.processes,
            lost: end.lost > start.lost,
        }
    }

    /// CPU seconds per second.
    fn cpu_share(&self) -> f64 {
        self.cpu_ns as f64 / 1e9 / self.seconds
    }

    /// CPU seconds per unit of work; `None` for a window without work.
    fn cpu_per_work(&self) -> Option<f64> {
        (self.work > 0).then(|| self.cpu_ns as f64 / 1e9 / self.work as f64)
    }
}

/// A mean with its 95% bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
}

impl Interval {
    fn scaled(self, by: f64) -> Self {
        Self {
            mean: self.mean * by,
            low: self.low * by,
            high: self.high * by,
        }
    }
}

/// What can be said so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Fewer than [`MIN_PAIRS`] pairs of windows.
    Measuring,
    /// The interval is wider than the number: it says nothing yet.
    NotEnoughSignal,
    Measured,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Measuring => "measuring",
            Self::NotEnoughSignal => "not enough signal: run longer",
            Self::Measured => "measured",
        }
    }
}

/// What the in-situ measurement says so far.
#[derive(Debug, Clone, PartialEq)]
pub struct InSituSummary {
    pub work: WorkMeter,
    pub windows_on: usize,
    pub windows_off: usize,
    /// ON windows with an OFF window on both sides.
    pub pairs: usize,
    /// Such windows left out because a process exited in one of the three with CPU
    /// unmeasured.
    pub dropped_pairs: usize,
    /// The fewest and most processes a window covered.
    pub processes: (u32, u32),
    pub seconds_on: f64,
    pub seconds_off: f64,
    /// Added CPU while the probes are attached, as a share of one CPU.
    pub added_share: Option<Interval>,
    /// Added CPU per hit, in ns.
    pub per_hit_ns: Option<Interval>,
    /// With a work meter: how the work rate of each ON window moved against its
    /// neighbours', relative (-0.02: 2% less work done while attached). Work that moves
    /// with the probes is a load that waits on the target (closed loop, saturation), or
    /// a meter the probes move.
    pub work_moved: Option<Interval>,
    /// With a work meter: the added CPU per hit by CPU per second alone, as `none`
    /// measures it, from the same windows.
    pub per_hit_cpu_alone_ns: Option<Interval>,
    /// Hits per second while attached.
    pub hits_per_second: f64,
    /// The target's CPU share with the probes detached (its own load).
    pub base_share: Option<f64>,
    pub verdict: Verdict,
    /// Mean time to detach and to attach every probe, in ms.
    pub detach_ms: Option<f64>,
    pub attach_ms: Option<f64>,
    /// The target's CPU during the detaches and attaches beyond its detached rate, per
    /// on/off cycle, in ms: what measuring in situ costs it.
    pub churn_cpu_ms: Option<f64>,
}

impl InSituSummary {
    /// `in situ (6 windows on, 6 off, work = wakeups): `: what was measured over.
    fn prefix(&self) -> String {
        let (fewest, most) = self.processes;
        let over = match (fewest, most) {
            (_, 0 | 1) => String::new(),
            (f, m) if f == m => format!(", {m} processes"),
            (f, m) => format!(", {f}-{m} processes"),
        };
        let dropped = match self.dropped_pairs {
            0 => String::new(),
            n => format!(", {n} pairs dropped: a process exited"),
        };
        format!(
            "in situ ({} windows on, {} off{over}{dropped}, work = {}): ",
            self.windows_on,
            self.windows_off,
            self.work.as_str()
        )
    }

    /// One line with every number, as the TUI's detail pane shows it.
    pub fn line(&self) -> String {
        let mut line = self.prefix();
        match (self.verdict, self.added_share, self.per_hit_ns) {
            (Verdict::Measured, Some(share), Some(per_hit)) => {
                line.push_str(&format!(
                    "the probes cost the target {} of a CPU while attached (95% CI {}..{}), {:.0} ns per hit ({:.0}..{:.0}) at {:.0} hits/s",
                    percent(share.mean),
                    percent(share.low),
                    percent(share.high),
                    per_hit.mean,
                    per_hit.low,
                    per_hit.high,
                    self.hits_per_second
                ));
            }
            (verdict, Some(share), _) => {
                line.push_str(&format!(
                    "{} (so far {} of a CPU, 95% CI {}..{})",
                    verdict.as_str(),
                    percent(share.mean),
                    percent(share.low),
                    percent(share.high)
                ));
            }
            (verdict, None, _) => line.push_str(verdict.as_str()),
        }
        // Only once it is more than noise: a load that waits on the target (or a meter
        // the probes move), which the per-hit number above already divides out.
        if let Some(moved) = self.work_moved.filter(|m| m.high < 0.0 || m.low > 0.0) {
            line.push_str(&format!(
                "; the target's {} a second moved {:+.1}% while attached (95% CI {:+.1}..{:+.1}%)",
                self.work.as_str(),
                moved.mean * 100.0,
                moved.low * 100.0,
                moved.high * 100.0
            ));
        }
        if let Some(changes) = self.changes() {
            line.push_str("; ");
            line.push_str(&changes);
        }
        line
    }

    /// The end of a run's line: what the windows were and what changing them cost,
    /// without the numbers the reconciled answer above it already gives.
    pub(crate) fn details_line(&self) -> String {
        let mut line = self.prefix();
        line.push_str(&self.changes().unwrap_or_else(|| "no window changed".into()));
        line
    }

    /// What each change of window took and cost the target.
    fn changes(&self) -> Option<String> {
        let (detach, attach) = (self.detach_ms?, self.attach_ms?);
        let mut text =
            format!("each window change took {detach:.0} ms to detach, {attach:.0} ms to attach");
        if let Some(churn) = self.churn_cpu_ms {
            text.push_str(&format!(
                ", costing the target {churn:.1} ms of CPU per cycle"
            ));
        }
        Some(text)
    }
}

/// The windows measured so far, and the changes between them.
#[derive(Debug, Clone, Default)]
pub(crate) struct InSitu {
    work: WorkMeter,
    windows: Vec<Window>,
    /// Detach and attach durations, in seconds, and the target's CPU in them.
    detaches: Vec<Window>,
    attaches: Vec<Window>,
}

impl InSitu {
    pub(crate) fn new(work: WorkMeter) -> Self {
        Self {
            work,
            ..Default::default()
        }
    }

    pub(crate) fn push_window(&mut self, window: Window) {
        self.windows.push(window);
    }

    /// A change of state: `to_on` for an attach.
    pub(crate) fn push_change(&mut self, to_on: bool, change: Window) {
        if to_on {
            self.attaches.push(change);
        } else {
            self.detaches.push(change);
        }
    }

    /// Each ON window with an OFF window on either side and no process lost in the
    /// three; and how many such triples were dropped for a process that exited in them.
    fn triples(&self) -> (Vec<&[Window]>, usize) {
        let triples = self
            .windows
            .windows(3)
            .filter(|w| w[1].probes_on && !w[0].probes_on && !w[2].probes_on);
        let dropped = triples.clone().filter(|w| w.iter().any(|w| w.lost)).count();
        (
            triples.filter(|w| !w.iter().any(|w| w.lost)).collect(),
            dropped,
        )
    }

    /// The added CPU of each ON window against the mean of its neighbours, as a share
    /// of one CPU at the ON window's work rate (per second alone with no meter).
    fn differences(&self, triples: &[&[Window]], meter: WorkMeter) -> Vec<f64> {
        triples
            .iter()
            .filter_map(|w| match meter {
                WorkMeter::None | WorkMeter::Auto => {
                    Some(w[1].cpu_share() - (w[0].cpu_share() + w[2].cpu_share()) / 2.0)
                }
                WorkMeter::Syscalls | WorkMeter::Wakeups => {
                    let off = (w[0].cpu_per_work()? + w[2].cpu_per_work()?) / 2.0;
                    let on = w[1].cpu_per_work()?;
                    Some((on - off) * w[1].work as f64 / w[1].seconds)
                }
            })
            .filter(|d| d.is_finite())
            .collect()
    }

    /// The work rate of each ON window against its neighbours', relative.
    fn work_moved(triples: &[&[Window]]) -> Vec<f64> {
        let rate = |w: &Window| w.work as f64 / w.seconds;
        triples
            .iter()
            .map(|w| rate(&w[1]) / ((rate(&w[0]) + rate(&w[2])) / 2.0) - 1.0)
            .filter(|d| d.is_finite())
            .collect()
    }

    /// What can be said with `hits_on` hits counted over the ON windows.
    pub(crate) fn summary(&self, hits_on: u64) -> InSituSummary {
        let on: Vec<&Window> = self.windows.iter().filter(|w| w.probes_on).collect();
        let off: Vec<&Window> = self.windows.iter().filter(|w| !w.probes_on).collect();
        let seconds_on: f64 = on.iter().map(|w| w.seconds).sum();
        let seconds_off: f64 = off.iter().map(|w| w.seconds).sum();
        let (triples, dropped_pairs) = self.triples();
        let differences = self.differences(&triples, self.work);
        let metered = matches!(self.work, WorkMeter::Syscalls | WorkMeter::Wakeups);
        let work_moved = if metered {
            bootstrap_mean(&Self::work_moved(&triples))
        } else {
            None
        };
        let processes = (
            self.windows.iter().map(|w| w.processes).min().unwrap_or(0),
            self.windows.iter().map(|w| w.processes).max().unwrap_or(0),
        );
        let added_share = bootstrap_mean(&differences);
        let hits_per_second = if seconds_on > 0.0 {
            hits_on as f64 / seconds_on
        } else {
            0.0
        };
        let per_hit = |share: Option<Interval>| {
            share
                .filter(|_| hits_per_second > 0.0)
                .map(|share| share.scaled(1e9 / hits_per_second))
        };
        let per_hit_ns = per_hit(added_share);
        let per_hit_cpu_alone_ns = if metered {
            per_hit(bootstrap_mean(&self.differences(&triples, WorkMeter::None)))
        } else {
            None
        };
        let verdict = match added_share {
            Some(_) if differences.len() < MIN_PAIRS => Verdict::Measuring,
            None => Verdict::Measuring,
            // An interval wider than the number, or one that holds zero, cannot tell the
            // probes' cost from the load's own swings.
            Some(share) if share.low <= 0.0 || share.high - share.low > share.mean => {
                Verdict::NotEnoughSignal
            }
            Some(_) => Verdict::Measured,
        };
        let base_cpu: u64 = off.iter().map(|w| w.cpu_ns).sum();
        let base_share = (seconds_off > 0.0).then(|| base_cpu as f64 / 1e9 / seconds_off);
        let mean_ms = |changes: &[Window]| {
            (!changes.is_empty()).then(|| {
                changes.iter().map(|c| c.seconds).sum::<f64>() * 1e3 / changes.len() as f64
            })
        };
        // The CPU the target spent during the changes beyond what it spends detached.
        let churn_cpu_ms = base_share
            .filter(|_| !self.attaches.is_empty())
            .map(|base| {
                let changes = self.attaches.iter().chain(&self.detaches);
                let extra: f64 = changes
                    .map(|c| c.cpu_ns as f64 / 1e9 - base * c.seconds)
                    .sum();
                extra * 1e3 / self.attaches.len() as f64
            });
        InSituSummary {
            work: self.work,
            windows_on: on.len(),
            windows_off: off.len(),
            pairs: differences.len(),
            dropped_pairs,
            processes,
            seconds_on,
            seconds_off,
            added_share,
            per_hit_ns,
            work_moved,
            per_hit_cpu_alone_ns,
            hits_per_second,
            base_share,
            verdict,
            detach_ms: mean_ms(&self.detaches),
            attach_ms: mean_ms(&self.attaches),
            churn_cpu_ms,
        }
    }
}

/// The mean of `samples` with a 95% percentile-bootstrap interval; `None` when empty.
fn bootstrap_mean(samples: &[f64]) -> Option<Interval> {
    if samples.is_empty() {
        return None;
    }
    let n = samples.len();
    let mean = samples.iter().sum::<f64>() / n as f64;
    // A fixed seed: the same windows give the same interval.
    let mut rng = XorShift::new(0x1_5175_u64.wrapping_add(n as u64));
    let mut means: Vec<f64> = (0..RESAMPLES)
        .map(|_| (0..n).map(|_| samples[rng.below(n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    Some(Interval {
        mean,
        low: quantile(&means, 0.025),
        high: quantile(&means, 0.975),
    })
}

fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p.abs() < 0.1 {
        format!("{p:.3}%")
    } else {
        format!("{p:.1}%")
    }
}

impl fmt::Display for WorkMeter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(on: bool, cpu_ms: u64, work: u64) -> Window {
        Window {
            probes_on: on,
            seconds: 1.0,
            cpu_ns: cpu_ms * 1_000_000,
            work,
            processes: 1,
            lost: false,
        }
    }

    #[test]
    fn wakeups_count_every_threads_voluntary_switches() {
        let mut meter = TargetMeter::new(std::process::id(), WorkMeter::Wakeups).expect("meter");
        let before = meter.read().expect("read").work;
        // A thread that wakes up a few times and exits: its slices stay counted.
        std::thread::spawn(|| {
            for _ in 0..5 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
        .join()
        .expect("thread");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let after = meter.read().expect("read").work;
        assert!(after > before, "{before} -> {after}");
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(voluntary_switches(status), Some(12));
        assert_eq!(voluntary_switches("Name:\tx\n"), None);
    }

    #[test]
    fn auto_picks_a_meter_that_moves() {
        let meter = TargetMeter::new(std::process::id(), WorkMeter::Auto).expect("meter");
        assert_ne!(meter.work(), WorkMeter::Auto);
    }

    #[test]
    fn syscalls_are_read_from_proc_io() {
        let text = "rchar: 10\nwchar: 20\nsyscr: 7\nsyscw: 5\nread_bytes: 0\n";
        assert_eq!(syscalls(text), 12);
    }

    #[test]
    fn a_steady_added_cost_is_measured_per_hit() {
        // 100 ms/s of own load, 20 ms/s more while attached at 10,000 hits/s: 2 us a hit.
        let mut insitu = InSitu::new(WorkMeter::None);
        for k in 0..9 {
            let on = k % 2 == 1;
            insitu.push_window(window(on, if on { 120 } else { 100 }, 0));
        }
        let summary = insitu.summary(40_000);
        assert_eq!(
            (summary.windows_on, summary.windows_off, summary.pairs),
            (4, 5, 4)
        );
        assert_eq!(summary.verdict, Verdict::Measured);
        let share = summary.added_share.expect("share");
        assert!((share.mean - 0.02).abs() < 1e-9, "{share:?}");
        let per_hit = summary.per_hit_ns.expect("per hit");
        assert!((per_hit.mean - 2000.0).abs() < 1e-6, "{per_hit:?}");
    }

    #[test]
    fn work_normalises_a_load_that_changes() {
        // The load doubles in the ON windows; per unit of work the probes add 10%.
        let mut insitu = InSitu::new(WorkMeter::Syscalls);
        for k in 0..7 {
            let on = k % 2 == 1;
            insitu.push_window(if on {
                window(on, 220, 2000)
            } else {
                window(on, 100, 1000)
            });
        }
        let summary = insitu.summary(3 * 1000);
        let share = summary.added_share.expect("share");
        // 0.11 s/kwork vs 0.10 at 2000 work/s: 20 ms/s.
        assert!((share.mean - 0.02).abs() < 1e-9, "{share:?}");
        // Without the meter the same windows would say 120 ms/s.
        let mut raw = InSitu::new(WorkMeter::None);
        insitu.windows.iter().for_each(|w| raw.push_window(*w));
        let raw_share = raw.summary(3000).added_share.expect("share");
        assert!((raw_share.mean - 0.12).abs() < 1e-9, "{raw_share:?}");
        // The same windows say how the work moved, and what CPU alone says per hit
        // (120 ms/s over 1,000 hits/s).
        let moved = summary.work_moved.expect("work moved");
        assert!((moved.mean - 1.0).abs() < 1e-9, "{moved:?}");
        let alone = summary.per_hit_cpu_alone_ns.expect("CPU alone");
        assert!((alone.mean - 120_000.0).abs() < 1e-3, "{alone:?}");
        assert_eq!(raw.summary(3000).work_moved, None);
        let line = summary.line();
        assert!(
            line.contains("the target's syscalls a second moved +100.0% while attached"),
            "{line}"
        );
    }

    #[test]
    fn a_linear_drift_cancels() {
        // The load climbs 10 ms/s every window; the probes add nothing.
        let mut insitu = InSitu::new(WorkMeter::None);
        for k in 0..11u64 {
            insitu.push_window(window(k % 2 == 1, 100 + 10 * k, 0));
        }
        let share = insitu.summary(1).added_share.expect("share");
        assert!(share.mean.abs() < 1e-9, "{share:?}");
    }

    #[test]
    fn noise_larger_than_the_cost_says_so() {
        let mut insitu = InSitu::new(WorkMeter::None);
        let cpu = [100, 90, 140, 95, 60, 120, 150, 85, 100];
        for (k, ms) in cpu.iter().enumerate() {
            insitu.push_window(window(k % 2 == 1, *ms, 0));
        }
        let summary = insitu.summary(1000);
        assert_eq!(summary.verdict, Verdict::NotEnoughSignal, "{summary:?}");
        assert!(summary.line().contains("not enough signal: run longer"));
    }

    #[test]
    fn a_window_with_an_exit_drops_its_pairs() {
        // 9 windows, 4 pairs; a process exits unmeasured in window 4 (OFF), which the
        // pairs around ON windows 3 and 5 share.
        let mut insitu = InSitu::new(WorkMeter::None);
        for k in 0..9 {
            let on = k % 2 == 1;
            let mut w = window(on, if on { 120 } else { 100 }, 0);
            w.processes = 5;
            w.lost = k == 4;
            if k == 4 {
                // What the exited process took along: it would read as a cost.
                w.cpu_ns = 40_000_000;
            }
            insitu.push_window(w);
        }
        let summary = insitu.summary(40_000);
        assert_eq!(
            (summary.pairs, summary.dropped_pairs),
            (2, 2),
            "{summary:?}"
        );
        assert_eq!(summary.processes, (5, 5));
        let share = summary.added_share.expect("share");
        assert!((share.mean - 0.02).abs() < 1e-9, "{share:?}");
        let line = summary.line();
        assert!(line.contains("5 processes, 2 pairs dropped"), "{line}");
    }

    #[test]
    fn too_few_windows_are_still_measuring() {
        let mut insitu = InSitu::new(WorkMeter::None);
        for k in 0..3 {
            insitu.push_window(window(k % 2 == 1, 100, 0));
        }
        assert_eq!(insitu.summary(10).verdict, Verdict::Measuring);
        assert_eq!(
            InSitu::new(WorkMeter::None).summary(0).verdict,
            Verdict::Measuring
        );
    }

    #[test]
    fn the_churn_is_what_changes_cost_beyond_the_base_load() {
        let mut insitu = InSitu::new(WorkMeter::None);
        for k in 0..5 {
            insitu.push_window(window(k % 2 == 1, 100, 0));
        }
        // 50 ms changes in which the target spent 15 ms: 10 ms more than its 5 ms base.
        let change = Window {
            probes_on: true,
            seconds: 0.05,
            cpu_ns: 15_000_000,
            work: 0,
            processes: 1,
            lost: false,
        };
        insitu.push_change(true, change);
        insitu.push_change(false, change);
        let summary = insitu.summary(10);
        assert!(
            (summary.churn_cpu_ms.expect("churn") - 20.0).abs() < 1e-6,
            "{summary:?}"
        );
        assert!((summary.detach_ms.expect("detach") - 50.0).abs() < 1e-9);
    }

    #[test]
    fn the_meter_reads_this_process() {
        let mut meter = TargetMeter::new(std::process::id(), WorkMeter::Syscalls).expect("meter");
        let before = meter.read().expect("read");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = meter.read().expect("read");
        assert!(after.cpu_ns > before.cpu_ns);
        // Reading /proc/self/io is itself a syscall.
        assert!(after.work > before.work);
    }
}
