//! Hits per second over a sliding window.

use std::time::Duration;

/// Hits per second over a sliding window, from per-tick counts.
#[derive(Debug, Clone)]
pub(crate) struct RateWindow {
    pub(super) window: Duration,
    /// (elapsed time of the tick, hits counted in it), oldest first.
    ticks: std::collections::VecDeque<(Duration, u64)>,
    current: u64,
}

impl RateWindow {
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            ticks: Default::default(),
            current: 0,
        }
    }

    pub(crate) fn add(&mut self, hits: u64) {
        self.current += hits;
    }

    /// Closes the current tick, which lasted `elapsed`, and drops ticks older than the window.
    pub(crate) fn tick(&mut self, elapsed: Duration) {
        self.ticks
            .push_back((elapsed, std::mem::take(&mut self.current)));
        let mut span: Duration = self.ticks.iter().map(|(d, _)| *d).sum();
        while span > self.window && self.ticks.len() > 1 {
            if let Some((d, _)) = self.ticks.pop_front() {
                span -= d;
            }
        }
    }

    /// Hits per second over the closed ticks in the window; 0 before the first tick.
    pub(crate) fn per_second(&self) -> f64 {
        let span: Duration = self.ticks.iter().map(|(d, _)| *d).sum();
        if span.is_zero() {
            return 0.0;
        }
        let hits: u64 = self.ticks.iter().map(|(_, h)| *h).sum();
        hits as f64 / span.as_secs_f64()
    }
}
