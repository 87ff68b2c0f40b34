//! The gap curve (`calibrate::gap`): what a hit costs after a range of sleeps between two
//! calls, with probetop's ring and in-kernel handlers, against the unprobed twin.

use super::workload::Func;
use super::workload::GapRun;
use super::{CalibrateError, Drainer, Summary, Workload, XorShift};
use crate::attach::Attachment;
use crate::calibrate::gap::{GapCurve, GapPoint};

/// Sleeps between two calls, us: none (the hot loop), then about 4x apart up to the
/// idle time between two requests of a server at a few hundred requests per second.
pub(super) const SLEEPS_US: [u64; 7] = [0, 2, 8, 32, 128, 512, 2048];

/// Wall time a run aims for.
const RUN_NS: f64 = 150e6;

/// Repetitions at most: the curve is one more input among the rows, and each repetition
/// takes ~3 s.
pub(super) const MAX_REPS: usize = 9;

/// Iterations of a run with `sleep_us` between calls: ~[`RUN_NS`] of wall time (a
/// sleep costs ~10 us more than asked in syscalls and wakeup).
fn iters_for(sleep_us: u64) -> u64 {
    if sleep_us == 0 {
        return 200_000;
    }
    (RUN_NS / (sleep_us as f64 * 1e3 + 10e3)).clamp(50.0, 100_000.0) as u64
}

impl Workload {
    /// Runs `iters` iterations of the gap loop calling `func`.
    fn run_gap(&mut self, func: Func, iters: u64, sleep_us: u64) -> Result<GapRun, CalibrateError> {
        let command = format!("gap {} {iters} {}", func.name(), sleep_us * 1000);
        let values = self.ask(&command, "gap", 3)?;
        Ok(GapRun {
            cpu_ns_per_iter: values[0],
            wall_ns_per_iter: values[1],
            call_ns_trimmed_mean: values[2],
        })
    }
}

#[derive(Default)]
struct Samples {
    ring: Vec<f64>,
    kernel: Vec<f64>,
    ring_call: Vec<f64>,
    kernel_call: Vec<f64>,
    handler_ring: Vec<f64>,
    gap: Vec<f64>,
}

/// Which function a run calls (the work curve's runs too).
#[derive(Clone, Copy)]
pub(super) enum Run {
    Ring,
    Kernel,
    Twin,
}

/// Measures the curve. The in-kernel runs time one hit in `time_every`, as a run does
/// by default; the others every hit.
pub(super) fn measure(
    child: &mut Workload,
    attachment: &mut Attachment,
    drainer: &Drainer,
    reps: usize,
    time_every: u64,
    rng: &mut XorShift,
) -> Result<GapCurve, CalibrateError> {
    let mut samples: Vec<Samples> = SLEEPS_US.iter().map(|_| Samples::default()).collect();
    for _ in 0..reps.clamp(1, MAX_REPS) {
        let mut order: Vec<usize> = (0..SLEEPS_US.len()).collect();
        rng.shuffle(&mut order);
        for at in order {
            let sleep_us = SLEEPS_US[at];
            let iters = iters_for(sleep_us);
            let mut runs = [Run::Ring, Run::Kernel, Run::Twin];
            rng.shuffle(&mut runs);
            let (mut ring, mut kernel, mut twin) = (None, None, None);
            for run in runs {
                match run {
                    Run::Ring => {
                        let before = drainer.totals();
                        let r = child.run_gap(Func::EmulatedRing, iters, sleep_us)?;
                        let after = drainer.wait_for(before.0 + iters);
                        let records = after.0.saturating_sub(before.0);
                        if records > 0 {
                            samples[at]
                                .handler_ring
                                .push(after.1.saturating_sub(before.1) as f64 / records as f64);
                        }
                        ring = Some(r);
                    }
                    Run::Kernel => {
                        attachment.set_time_every(time_every)?;
                        let r = child.run_gap(Func::EmulatedKernel, iters, sleep_us);
                        attachment.set_time_every(1)?;
                        kernel = Some(r?);
                    }
                    Run::Twin => twin = Some(child.run_gap(Func::EmulatedTwin, iters, sleep_us)?),
                }
            }
            if let (Some(ring), Some(kernel), Some(twin)) = (ring, kernel, twin) {
                let s = &mut samples[at];
                s.ring.push(ring.cpu_ns_per_iter - twin.cpu_ns_per_iter);
                s.kernel.push(kernel.cpu_ns_per_iter - twin.cpu_ns_per_iter);
                s.ring_call
                    .push(ring.call_ns_trimmed_mean - twin.call_ns_trimmed_mean);
                s.kernel_call
                    .push(kernel.call_ns_trimmed_mean - twin.call_ns_trimmed_mean);
                // From one hit to the next: the probed runs' iterations.
                s.gap
                    .push((ring.wall_ns_per_iter + kernel.wall_ns_per_iter) / 2.0);
            }
        }
    }
    let points = SLEEPS_US
        .iter()
        .zip(&samples)
        .filter_map(|(sleep_us, s)| {
            Some(GapPoint {
                sleep_us: *sleep_us as f64,
                gap_ns: Summary::of(&s.gap)?.median,
                ring_ns: Summary::of(&s.ring)?,
                kernel_ns: Summary::of(&s.kernel)?,
                handler_ring_ns: Summary::of(&s.handler_ring),
                ring_call_ns: Summary::of(&s.ring_call),
                kernel_call_ns: Summary::of(&s.kernel_call),
            })
        })
        .collect();
    Ok(GapCurve { points, time_every })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_last_about_the_same_whatever_the_sleep() {
        assert_eq!(iters_for(0), 200_000);
        for sleep_us in SLEEPS_US.into_iter().filter(|s| *s > 0) {
            let wall_ms = iters_for(sleep_us) as f64 * (sleep_us as f64 + 10.0) / 1e3;
            assert!(
                (100.0..=200.0).contains(&wall_ms),
                "{sleep_us} us: {wall_ms} ms"
            );
        }
    }
}
