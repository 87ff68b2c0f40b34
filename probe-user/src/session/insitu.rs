//! `--in-situ`: the session's side of the in-situ measurement (`insitu`). It owns
//! the window clock and detaches and attaches the probes at each change, reading the
//! target's CPU and work on either side of every change: one process's, or summed over
//! the process set (`--follow-forks`, several `--pid`, `--cgroup`).

use std::time::Duration;

use tokio::time::Instant;

use crate::attach::Attachment;
use crate::insitu::{
    InSitu, InSituSummary, Members, MeterError, Reading, SetMeter, Window, WorkMeter,
};
use crate::stats::XorShift;

/// A window is at least this many times as long as a change takes, so that the windows,
/// not the changes, make up the run.
const WINDOW_OVER_CHANGE: f64 = 4.0;

pub(super) struct Driver {
    meter: SetMeter,
    insitu: InSitu,
    window: Duration,
    /// Whether the probes are attached now.
    on: bool,
    window_start: Reading,
    next_change: Instant,
    /// The probes the driver detached for the current OFF window.
    suspended: Vec<u32>,
    rng: XorShift,
    /// The first window is the clock phase's (`--clock-seconds`): streamed, not the
    /// mode measured, so not counted. It ends once no probe streams, or at this
    /// deadline.
    uncounted_first: Option<Instant>,
    /// Hits counted before the first counted window: the clock phase's, left out of
    /// the hits per second of the ON windows as its time is.
    uncounted_hits: u64,
}

/// The collector ends the clock phase at its next snapshot tick (every 100 ms): the
/// uncounted first window lasts at most this much longer than the phase.
const AFTER_CLOCK_PHASE: Duration = Duration::from_millis(300);

/// How often the uncounted first window looks whether every probe left the phase (a
/// hot probe leaves long before it ends).
const CLOCK_PHASE_POLL: Duration = Duration::from_millis(100);

impl Driver {
    /// Starts with the probes attached, as they are when this is called; with a clock
    /// phase, the windows start when it ends.
    pub(super) fn start(
        members: Members,
        work: WorkMeter,
        window: Duration,
        clock_phase: Option<Duration>,
    ) -> Result<Self, MeterError> {
        let pid = members.roots.first().copied().unwrap_or(0);
        // `auto` is resolved here, to the meter the summaries then name.
        let mut meter = SetMeter::new(members, work)?;
        let window_start = meter.read()?;
        let work = meter.work();
        let mut driver = Self {
            meter,
            insitu: InSitu::new(work),
            window,
            on: true,
            window_start,
            next_change: Instant::now(),
            suspended: Vec::new(),
            rng: XorShift::new(u64::from(pid) ^ 0x9e37_79b9_7f4a_7c15),
            uncounted_first: clock_phase.map(|phase| Instant::now() + phase + AFTER_CLOCK_PHASE),
            uncounted_hits: 0,
        };
        match clock_phase {
            Some(_) => driver.next_change = Instant::now() + CLOCK_PHASE_POLL,
            None => driver.schedule(),
        }
        Ok(driver)
    }

    /// The next window, within 20% of the asked length.
    fn schedule(&mut self) {
        let jitter = 0.8 + 0.4 * (self.rng.below(1001) as f64 / 1000.0);
        let mut seconds = self.window.as_secs_f64() * jitter;
        let summary = self.insitu.summary(0);
        let change_s = summary
            .detach_ms
            .unwrap_or(0.0)
            .max(summary.attach_ms.unwrap_or(0.0))
            / 1e3;
        seconds = seconds.max(change_s * WINDOW_OVER_CHANGE);
        self.next_change = Instant::now() + Duration::from_secs_f64(seconds);
    }

    /// Resolves when the current window ends.
    pub(super) async fn due(&self) {
        tokio::time::sleep_until(self.next_change).await;
    }

    /// Ends the current window and starts the next: detaches every attached probe, or
    /// attaches again those it detached. `hits` is every hit counted since the start;
    /// `streaming`, whether a probe still streams in the clock phase. Returns whether a
    /// window ended (not while the uncounted first one waits for the phase).
    pub(super) fn change(
        &mut self,
        attachment: &mut Attachment,
        hits: u64,
        streaming: bool,
    ) -> anyhow::Result<bool> {
        if let Some(deadline) = self.uncounted_first {
            let now = Instant::now();
            if streaming && now < deadline {
                self.next_change = now + CLOCK_PHASE_POLL;
                return Ok(false);
            }
            self.uncounted_first = None;
            self.uncounted_hits = hits;
            self.window_start = self.meter.read()?;
            self.schedule();
            return Ok(true);
        }
        let end = self.meter.read()?;
        self.insitu
            .push_window(Window::between(self.on, &self.window_start, &end));
        if self.on {
            self.suspended = attachment.attached_ids();
            attachment.detach_set(&self.suspended);
        } else {
            let ids = std::mem::take(&mut self.suspended);
            attachment.reattach_set(&ids)?;
        }
        let after = self.meter.read()?;
        self.on = !self.on;
        self.insitu
            .push_change(self.on, Window::between(self.on, &end, &after));
        self.window_start = after;
        self.schedule();
        Ok(true)
    }

    /// During an OFF window a probe's detach or attach asked by the user applies to the
    /// set that comes back at the next ON window. Returns whether the probe is to be
    /// attached then, or `None` in an ON window (the caller acts itself).
    pub(super) fn redirect(&mut self, probe_id: u32, attach: bool) -> Option<bool> {
        if self.on {
            return None;
        }
        self.suspended.retain(|&id| id != probe_id);
        if attach {
            self.suspended.push(probe_id);
        }
        Some(attach)
    }

    /// Whether the probes are attached in the current window.
    pub(super) fn probes_on(&self) -> bool {
        self.on
    }

    /// Whether a probe detached by the driver for this window counts as attached.
    pub(super) fn is_suspended(&self, probe_id: u32) -> bool {
        !self.on && self.suspended.contains(&probe_id)
    }

    /// Closes the current window where the run ends, so its measurements count.
    pub(super) fn finish(&mut self) {
        if self.uncounted_first.is_some() {
            return;
        }
        if let Ok(end) = self.meter.read() {
            // A window cut short is still a window: its rates are per second or per work.
            let window = Window::between(self.on, &self.window_start, &end);
            if window.seconds > 0.0 {
                self.insitu.push_window(window);
            }
        }
    }

    /// The summary with `hits` counted since the start, the uncounted first window's
    /// left out.
    pub(super) fn summary(&self, hits: u64) -> InSituSummary {
        self.insitu
            .summary(hits.saturating_sub(self.uncounted_hits))
    }
}

/// Resolves when `driver`'s window ends; never without a driver.
pub(super) async fn due(driver: &Option<Driver>) {
    match driver {
        Some(driver) => driver.due().await,
        None => std::future::pending().await,
    }
}
