//! The work curve (`calibrate::work`): what a hit costs after a range of footprints walked
//! between two calls, the whole iteration timed, with probetop's ring and in-kernel
//! handlers, against the unprobed twin.

use super::gap_phase::Run;
use super::workload::{ColdRun, Func};
use super::{CalibrateError, Drainer, Summary, Workload, XorShift, histogram_mean};
use crate::attach::{Attachment, KernelCounters};
use crate::calibrate::table::{ColdOptions, last_level_cache_bytes};
use crate::calibrate::work::{WorkCurve, WorkPoint};

/// Shares of the cold loop's footprint walked between calls: none (the hot loop), then
/// doubling up to half, then finer up to the cold loop itself (~60 us of walk here): the
/// walk's time jumps past half, where data and code outgrow the L2 (10 to 60 us here),
/// and a server's busy gaps fall in that range.
const SHARES: [f64; 11] = [
    0.0,
    1.0 / 64.0,
    1.0 / 32.0,
    1.0 / 16.0,
    1.0 / 8.0,
    1.0 / 4.0,
    0.5,
    0.625,
    0.75,
    0.875,
    1.0,
];

/// Wall time a run aims for, and the cold loop's iteration it assumes at full size.
const RUN_NS: f64 = 40e6;
const FULL_WALK_NS: f64 = 60e3;

/// The largest walk beyond the cold loop, and the last-level cache assumed where sysfs
/// does not give it (this host's).
const BEYOND_MAX_BYTES: u64 = 64 << 20;
const LLC_ASSUMED_BYTES: u64 = 32 << 20;

/// Walks beyond the cold loop's, with its code: a quarter of the last-level cache and
/// all of it (each at least twice the cold loop's data, at most [`BEYOND_MAX_BYTES`]).
/// A server's slowest hits read the handler's clock where these do (docs/cost.md,
/// "Past the curve's end").
fn beyond(cold: &ColdOptions, llc_bytes: Option<u64>) -> Vec<ColdOptions> {
    let llc = llc_bytes.unwrap_or(LLC_ASSUMED_BYTES);
    let mut sizes: Vec<u64> = [llc / 4, llc]
        .iter()
        .map(|&bytes| (bytes.max(2 * cold.data_bytes).min(BEYOND_MAX_BYTES)) & !63)
        .filter(|&bytes| bytes > cold.data_bytes)
        .collect();
    sizes.dedup();
    sizes
        .into_iter()
        .map(|data_bytes| ColdOptions {
            data_bytes,
            code_bytes: cold.code_bytes,
            iters: iters_for(data_bytes as f64 / cold.data_bytes.max(1) as f64),
        })
        .collect()
}

/// Iterations of a run walking `share` of the cold footprint.
fn iters_for(share: f64) -> u64 {
    (RUN_NS / (share * FULL_WALK_NS + 1e3)).clamp(60.0, 20_000.0) as u64
}

#[derive(Default)]
struct Samples {
    ring: Vec<f64>,
    kernel: Vec<f64>,
    work: Vec<f64>,
    handler_ring: Vec<f64>,
    handler_kernel: Vec<f64>,
}

/// Where the handlers' own clocks are read: the ring's records and the in-kernel
/// probe's histogram.
pub(super) struct HandlerClocks<'a> {
    pub drainer: &'a Drainer,
    pub counters: &'a KernelCounters,
    pub kernel_probe: u32,
}

/// Measures the curve; `cold` is the cold loop's footprint, the curve's largest, and
/// the walks [`beyond`] it, past this machine's last-level cache.
pub(super) fn measure(
    child: &mut Workload,
    attachment: &mut Attachment,
    clocks: &HandlerClocks,
    cold: &ColdOptions,
    reps: usize,
    time_every: u64,
    rng: &mut XorShift,
) -> Result<WorkCurve, CalibrateError> {
    let options: Vec<ColdOptions> = SHARES
        .iter()
        .map(|share| ColdOptions {
            data_bytes: (cold.data_bytes as f64 * share) as u64 & !63,
            code_bytes: (cold.code_bytes as f64 * share) as u64 & !63,
            iters: iters_for(*share),
        })
        .chain(beyond(cold, last_level_cache_bytes()))
        .collect();
    let mut samples: Vec<Samples> = options.iter().map(|_| Samples::default()).collect();
    for _ in 0..reps.max(1) {
        let mut order: Vec<usize> = (0..options.len()).collect();
        rng.shuffle(&mut order);
        for at in order {
            let mut runs = [Run::Ring, Run::Kernel, Run::Twin];
            rng.shuffle(&mut runs);
            let (mut ring, mut kernel, mut twin) = (None, None, None);
            let s = &mut samples[at];
            for run in runs {
                match run {
                    Run::Ring => {
                        let before = clocks.drainer.totals();
                        ring = Some(child.run_cold(Func::EmulatedRing, &options[at])?);
                        let after = clocks.drainer.wait_for(before.0 + options[at].iters);
                        let records = after.0.saturating_sub(before.0);
                        if records > 0 {
                            let sum = after.1.saturating_sub(before.1);
                            s.handler_ring.push(sum as f64 / records as f64);
                        }
                    }
                    Run::Kernel => {
                        let before = clocks.counters.histogram(clocks.kernel_probe)?;
                        attachment.set_time_every(time_every)?;
                        let r = child.run_cold(Func::EmulatedKernel, &options[at]);
                        attachment.set_time_every(1)?;
                        kernel = Some(r?);
                        let after = clocks.counters.histogram(clocks.kernel_probe)?;
                        s.handler_kernel.extend(histogram_mean(&after, &before));
                    }
                    Run::Twin => twin = Some(child.run_cold(Func::EmulatedTwin, &options[at])?),
                }
            }
            if let (Some(ring), Some(kernel), Some(twin)) = (ring, kernel, twin) {
                // Past the cold loop, the walk's own spread (tens of us a run) swamps
                // what the hit adds to the whole iteration: the call alone is read,
                // which at the cold loop read 18-60% under the whole iteration here.
                let by_call = at >= SHARES.len();
                let added = |probed: &ColdRun| {
                    if by_call {
                        probed.call_ns_median - twin.call_ns_median
                    } else {
                        probed.iter_ns_median - twin.iter_ns_median
                    }
                };
                s.ring.push(added(&ring));
                s.kernel.push(added(&kernel));
                s.work.push(twin.iter_ns_median - twin.call_ns_median);
            }
        }
    }
    let point = |(o, s): (&ColdOptions, &Samples)| {
        Some(WorkPoint {
            data_bytes: o.data_bytes,
            code_bytes: o.code_bytes,
            work_ns: Summary::of(&s.work)?.median,
            ring_ns: Summary::of(&s.ring)?,
            kernel_ns: Summary::of(&s.kernel)?,
            handler_ring_ns: Summary::of(&s.handler_ring),
            handler_kernel_ns: Summary::of(&s.handler_kernel),
        })
    };
    let shares = SHARES.len();
    let points = options.iter().zip(&samples).take(shares);
    let beyond = options.iter().zip(&samples).skip(shares);
    Ok(WorkCurve {
        points: points.filter_map(point).collect(),
        beyond: beyond.filter_map(point).collect(),
        time_every,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_beyond_reach_the_last_level_cache_and_stop_at_64_mib() {
        let cold = ColdOptions {
            data_bytes: 1 << 20,
            code_bytes: 512 << 10,
            iters: 30,
        };
        let data = |llc| -> Vec<u64> {
            beyond(&cold, llc)
                .iter()
                .map(|o| {
                    assert_eq!(o.code_bytes, cold.code_bytes);
                    assert!(o.iters >= 60, "{o:?}");
                    o.data_bytes >> 20
                })
                .collect()
        };
        assert_eq!(data(Some(32 << 20)), [8, 32]);
        assert_eq!(data(None), [8, 32]);
        assert_eq!(data(Some(256 << 20)), [64]);
        assert_eq!(data(Some(4 << 20)), [2, 4]);
        assert_eq!(data(Some(1 << 20)), [2]);
    }

    #[test]
    fn runs_last_tens_of_ms_whatever_the_share() {
        for share in SHARES {
            let ms = iters_for(share) as f64 * (share * FULL_WALK_NS + 1e3) / 1e6;
            assert!(
                (20.0..=60.0).contains(&ms) || iters_for(share) == 60,
                "{share}: {ms} ms"
            );
        }
    }
}
