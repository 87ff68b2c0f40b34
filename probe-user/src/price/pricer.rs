//! The one place a run's hits are priced: the collector owns a [`Pricer`], which prices
//! each live snapshot, and hands it back with the aggregator so the end-of-run report is
//! priced the same way.

use std::time::Duration;

use crate::aggregate::{Aggregator, Measurements, Snapshot};
use crate::calibrate::gap::GapCounts;
use crate::price::assume::{Assumer, Assumption};

/// Prices what the aggregator measured, under the run's `--assume` choice.
#[derive(Debug, Default)]
pub(crate) struct Pricer {
    /// Hot or cold: which calibration prices the hits, and what auto reads of the
    /// target (its mappings and CPU time) to decide.
    pub assumer: Assumer,
}

impl Pricer {
    pub(crate) fn new(assumer: Assumer) -> Self {
        Self { assumer }
    }

    /// The measurement window opened, or was reset: the run's decision starts over.
    pub(crate) fn open(&mut self) {
        self.assumer.open();
    }

    /// Reads the target for auto's decision (once a second).
    pub(crate) fn observe(&mut self) {
        self.assumer.observe();
    }

    /// Gives every probe the gaps of all of them, for those with too few of their own.
    pub(crate) fn pool_gaps(aggregator: &mut Aggregator) {
        if aggregator
            .probes()
            .iter()
            .all(|p| p.cost.gap_curve.is_none())
        {
            return;
        }
        let pooled = GapCounts::pooled(aggregator.probes().iter().map(|p| &p.cost.gaps));
        for probe in aggregator.probes_mut() {
            probe.cost.gaps_pooled = pooled.clone();
        }
    }

    /// The current numbers of every probe, priced under the decision of the last second.
    pub(crate) fn snapshot(&self, aggregator: &Aggregator, elapsed: Duration) -> Snapshot {
        let mut snapshot = aggregator.snapshot(elapsed);
        let mut decision = self.assumer.live(
            aggregator
                .probes()
                .iter()
                .map(|p| p.rate.per_second())
                .sum(),
        );
        let mut priced_hot = false;
        for (p, row) in aggregator.probes().iter().zip(&mut snapshot.probes) {
            let estimate = p.cost.estimate(
                p.mode,
                Some(&p.handler_ns),
                p.timed_share(),
                decision.assumes,
            );
            if let Some(e) = estimate {
                priced_hot |= e.assumes != decision.assumes;
            }
            row.gap_median_us = match estimate.map(|e| e.assumes) {
                Some(Assumption::Clock) => p.cost.gaps.summary().map(|g| g.median_us),
                _ => None,
            };
            row.whole_cost_ns = estimate.map(|e| e.whole_ns);
            row.cpu_share = row
                .whole_cost_ns
                .map(|ns| super::cpu_share(ns, row.per_second));
            row.reading = estimate.and_then(|e| e.reading);
        }
        match decision.assumes {
            // A calibration without cold rows prices every hit hot.
            Assumption::Cold if priced_hot => {
                decision.assumes = Assumption::Hot;
                decision.why.push_str("; the calibration has no cold rows");
            }
            // Too few hits clocked yet, or a probe capturing arguments.
            Assumption::Clock if priced_hot => {
                decision
                    .why
                    .push_str("; cold where the clock cannot be read yet");
            }
            _ => {}
        }
        snapshot.assumption = Some(decision);
        snapshot.target_cpu = self
            .assumer
            .target_cores_live()
            .filter(|_| !aggregator.count_processes);
        snapshot
    }

    /// A copy of what reports need, with the run's decision: each probe is priced
    /// under it (`price::report`).
    /// Prices the probes of every latency pair for its correction
    /// (`aggregate::latency`): each probe's whole cost per hit and handler mean.
    pub(crate) fn price_latency(&self, aggregator: &mut Aggregator) {
        if aggregator.latency.is_empty() {
            return;
        }
        let assumes = self
            .assumer
            .live(
                aggregator
                    .probes()
                    .iter()
                    .map(|p| p.rate.per_second())
                    .sum(),
            )
            .assumes;
        let price = |id: u32| {
            let p = aggregator.probes().get(id as usize)?;
            let whole = p
                .cost
                .estimate(p.mode, Some(&p.handler_ns), p.timed_share(), assumes)?
                .whole_ns;
            Some((whole, p.handler_ns.mean()))
        };
        let prices: Vec<_> = aggregator
            .latency
            .halves()
            .map(|(start, end)| {
                price(start).zip(price(end)).map(
                    |((whole_start, handler_start), (whole_end, handler_end))| {
                        crate::aggregate::LatencyPrices {
                            whole_start,
                            whole_end,
                            handler_start,
                            handler_end,
                        }
                    },
                )
            })
            .collect();
        for (pair, prices) in prices.into_iter().enumerate() {
            aggregator.latency.set_prices(pair, prices);
        }
    }

    pub(crate) fn measurements(&self, aggregator: &Aggregator) -> Measurements {
        let mut measurements = aggregator.measurements();
        let decision = self
            .assumer
            .run(aggregator.probes().iter().map(|p| p.hits()).sum());
        for probe in &mut measurements.probes {
            probe.assumes = decision.assumes;
        }
        measurements.assumption = Some(decision);
        measurements.target_cpu = self
            .assumer
            .target_cores_run()
            .filter(|_| !aggregator.count_processes);
        measurements
    }
}
