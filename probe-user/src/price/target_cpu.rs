//! The target's CPU, which the headline sets the probes' cost against: one process's,
//! or summed over the process set (`-F`, several `--pid`, `--cgroup`), read from the
//! processes' CPU clocks (ns, threads that exited included) once a second.
//!
//! A one-second reading of an idle process is mostly scheduler noise, so the live value
//! is the mean over the last few seconds, with its standard error (how far the mean
//! moves from second to second): the headline's rule (`present::headline`) sets a
//! ratio over it only when it is well above that error.

use std::collections::VecDeque;

use crate::insitu::{Members, Reading, SetMeter, WorkMeter};

/// Readings (one a second) the live value is the mean over: four one-second intervals.
const LIVE_READINGS: usize = 5;

/// Intervals shorter than this are not read as a rate (a reading right after another).
const MIN_INTERVAL_S: f64 = 0.2;

/// The target's CPU as a share of one CPU (0.18: 18% of one CPU), probes included, and
/// the standard error of that mean over the one-second rates it is made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CpuShare {
    pub mean: f64,
    pub error: f64,
}

/// Count, sum and sum of squares of per-interval rates, for a standard error.
#[derive(Debug, Clone, Copy, Default)]
struct Moments {
    n: u32,
    sum: f64,
    squares: f64,
}

impl Moments {
    fn push(&mut self, rate: f64) {
        self.n += 1;
        self.sum += rate;
        self.squares += rate * rate;
    }

    /// The standard error of the mean rate; `None` under two rates.
    fn error(&self) -> Option<f64> {
        (self.n >= 2).then(|| {
            let n = f64::from(self.n);
            let mean = self.sum / n;
            let variance = ((self.squares - n * mean * mean) / (n - 1.0)).max(0.0);
            (variance / n).sqrt()
        })
    }
}

/// Reads the target's (or the set's) CPU time once a second.
#[derive(Debug, Default)]
pub(crate) struct TargetCpu {
    meter: Option<SetMeter>,
    /// When the window opened, and the last reading since.
    first: Option<Reading>,
    last: Option<Reading>,
    /// The last [`LIVE_READINGS`] readings, oldest first: the live value does not start
    /// over when the window is reset.
    recent: VecDeque<Reading>,
    /// Every interval's rate since the window opened.
    run: Moments,
}

impl TargetCpu {
    /// Over `members`; reads nothing when none of them can be read.
    pub(crate) fn new(members: Members) -> Self {
        Self {
            meter: SetMeter::new(members, WorkMeter::None).ok(),
            ..Self::default()
        }
    }

    /// The measuring window opens (or is reset): the run's share counts from here.
    /// Returns the reading taken, for auto's busy cores (`Assumer`), which would
    /// otherwise read the target again.
    pub(crate) fn open(&mut self) -> Option<Reading> {
        self.run = Moments::default();
        let reading = self.read();
        self.first = reading;
        self.last = reading;
        if let Some(reading) = reading {
            self.keep(reading);
        }
        reading
    }

    /// Reads the CPU time (once a second or so, by the collector); returns the reading
    /// as [`open`](Self::open) does.
    pub(crate) fn observe(&mut self) -> Option<Reading> {
        let reading = self.read()?;
        if let Some(rate) = self.last.and_then(|last| rate(&last, &reading)) {
            self.run.push(rate);
            self.last = Some(reading);
        }
        self.keep(reading);
        Some(reading)
    }

    fn read(&mut self) -> Option<Reading> {
        self.meter.as_mut().and_then(|m| m.read().ok())
    }

    /// Keeps `reading` for the live value, unless it came too soon after the last.
    fn keep(&mut self, reading: Reading) {
        if self
            .recent
            .back()
            .is_some_and(|last| rate(last, &reading).is_none())
        {
            return;
        }
        self.recent.push_back(reading);
        while self.recent.len() > LIVE_READINGS {
            self.recent.pop_front();
        }
    }

    /// The mean over the last few seconds; `None` before two intervals.
    pub(crate) fn live(&self) -> Option<CpuShare> {
        let mut moments = Moments::default();
        for (a, b) in self.recent.iter().zip(self.recent.iter().skip(1)) {
            moments.push(rate(a, b)?);
        }
        let error = moments.error()?;
        let mean = rate(self.recent.front()?, self.recent.back()?)?;
        Some(CpuShare { mean, error })
    }

    /// The mean since the window opened; `None` before two intervals.
    pub(crate) fn run(&self) -> Option<CpuShare> {
        let error = self.run.error()?;
        let mean = rate(self.first.as_ref()?, self.last.as_ref()?)?;
        Some(CpuShare { mean, error })
    }
}

/// CPU per second between two readings, share of one CPU.
fn rate(from: &Reading, to: &Reading) -> Option<f64> {
    let seconds = to.at.saturating_duration_since(from.at).as_secs_f64();
    (seconds >= MIN_INTERVAL_S)
        .then(|| to.cpu_ns.saturating_sub(from.cpu_ns) as f64 / 1e9 / seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_is_of_the_mean_of_the_rates() {
        let mut m = Moments::default();
        m.push(0.01);
        assert_eq!(m.error(), None);
        for r in [0.0, 0.01, 0.0] {
            m.push(r);
        }
        // Rates 0.01, 0, 0.01, 0: sd 0.00577, over 2.
        let e = m.error().expect("four rates");
        assert!((e - 0.005_773_5 / 2.0).abs() < 1e-6, "{e}");
        let mut steady = Moments::default();
        for _ in 0..4 {
            steady.push(0.5);
        }
        assert!(steady.error().expect("four") < 1e-9);
    }

    /// This process's own CPU, burnt in a loop, reads over the last seconds and the
    /// run alike (no bound on how much: a loaded host gives the loop what it can).
    #[test]
    fn a_busy_process_reads_about_one_cpu() {
        let members = Members {
            roots: vec![std::process::id()],
            follow_forks: false,
            cgroup: None,
        };
        let mut cpu = TargetCpu::new(members);
        cpu.open();
        assert_eq!(cpu.live(), None);
        for _ in 0..3 {
            let start = std::time::Instant::now();
            let mut x = 0u64;
            while start.elapsed().as_millis() < 300 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            cpu.observe();
        }
        let live = cpu.live().expect("three intervals");
        assert!(live.mean > 0.0 && live.error.is_finite(), "{live:?}");
        let run = cpu.run().expect("three intervals");
        assert!((run.mean - live.mean).abs() < 1e-9, "{run:?} {live:?}");
    }
}
