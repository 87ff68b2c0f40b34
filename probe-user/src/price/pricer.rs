//! The one place a run's hits are priced: the collector owns a [`Pricer`], which prices
//! each live snapshot, and hands it back with the aggregator so the end-of-run report is
//! priced the same way.

use std::time::Duration;

use crate::aggregate::{Aggregator, Measurements};
use crate::calibrate::gap::GapCounts;
use crate::price::ProbeCost;
use crate::price::Run;
use crate::price::assume::{Assumer, Assumption, Decision};
use crate::price::snapshot::{Snapshot, unpriced};
use crate::price::target_cpu::TargetCpu;

/// Prices what the aggregator measured, under the run's `--assume` choice.
#[derive(Debug, Default)]
pub(crate) struct Pricer {
    /// Hot or cold: which calibration prices the hits, and what auto reads of the
    /// target (its mappings and CPU time) to decide.
    pub assumer: Assumer,
    /// What prices each probe's hits, by probe id (the aggregator's order).
    costs: Vec<ProbeCost>,
    /// Every probe's gaps together, for a probe with too few of its own.
    pooled_gaps: GapCounts,
    /// The target's (or the set's) CPU, which the headline sets the cost against.
    target: TargetCpu,
}

impl Pricer {
    pub(crate) fn new(assumer: Assumer, costs: Vec<ProbeCost>) -> Self {
        Self {
            assumer,
            costs,
            pooled_gaps: GapCounts::default(),
            target: TargetCpu::default(),
        }
    }

    /// Reads the CPU of `members` (the target, or the process set) for the headline.
    pub(crate) fn meter_target(&mut self, members: crate::insitu::Members) {
        self.target = TargetCpu::new(members);
    }

    /// What prices each probe, by probe id: other tools' programs are known at the end.
    pub(crate) fn costs_mut(&mut self) -> &mut [ProbeCost] {
        &mut self.costs
    }

    /// Prices probes appended to the aggregator (`Aggregator::add_probes`).
    pub(crate) fn add(&mut self, costs: impl IntoIterator<Item = ProbeCost>) {
        self.costs.extend(costs);
    }

    /// Probe `id`'s cost knowledge (none known: priced as nothing).
    fn cost(&self, id: usize) -> &ProbeCost {
        static NONE: std::sync::OnceLock<ProbeCost> = std::sync::OnceLock::new();
        self.costs
            .get(id)
            .unwrap_or_else(|| NONE.get_or_init(ProbeCost::default))
    }

    /// The measurement window opened, or was reset: the run's decision starts over.
    pub(crate) fn open(&mut self) {
        let reading = self.target.open();
        self.assumer.open(reading);
    }

    /// Reads the target's CPU once for auto's decision and the headline (once a second).
    pub(crate) fn observe(&mut self) {
        let reading = self.target.observe();
        self.assumer.observe(reading);
    }

    /// Pools every probe's gaps, for those with too few of their own.
    pub(crate) fn pool_gaps(&mut self, aggregator: &Aggregator) {
        if self.costs.iter().all(|c| c.gap_curve.is_none()) {
            return;
        }
        self.pooled_gaps = GapCounts::pooled(aggregator.probes().iter().map(|p| &p.measured.gaps));
    }

    /// The current numbers of every probe, priced under the decision of the last second.
    pub(crate) fn snapshot(&self, aggregator: &Aggregator, elapsed: Duration) -> Snapshot {
        let mut snapshot = unpriced(aggregator, elapsed);
        let mut decision = self.assumer.live(
            aggregator
                .probes()
                .iter()
                .map(|p| p.rate.per_second())
                .sum(),
        );
        let mut priced_hot = false;
        for (id, (p, row)) in aggregator
            .probes()
            .iter()
            .zip(&mut snapshot.probes)
            .enumerate()
        {
            let estimate = self.cost(id).with(&p.measured, &self.pooled_gaps).estimate(
                p.mode,
                Some(&p.handler_ns),
                p.timed_share(),
                decision.assumes,
            );
            if let Some(e) = estimate {
                priced_hot |= e.assumes != decision.assumes;
            }
            row.gap_median_us = match estimate.map(|e| e.assumes) {
                Some(Assumption::Clock) => p.measured.gaps.summary().map(|g| g.median_us),
                _ => None,
            };
            row.whole_cost_ns = estimate.map(|e| e.whole_ns);
            row.cpu_share = row
                .whole_cost_ns
                .map(|ns| super::cpu_share(ns, row.per_second));
            row.reading = estimate.and_then(|e| e.reading);
            row.priced = estimate.map(|e| (e.method, e.assumes));
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
        snapshot.calibrated = self.costs.iter().any(|c| c.basis.is_some());
        let target = self.target.live();
        snapshot.target_cpu = target.map(|t| t.mean);
        snapshot.target_cpu_error = target.map(|t| t.error);
        snapshot
    }

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
            let whole = self
                .cost(id as usize)
                .with(&p.measured, &self.pooled_gaps)
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

    /// A copy of what reports need, with what prices it and the run's decision
    /// (`price::report` prices each probe under it).
    pub(crate) fn measurements(&self, aggregator: &Aggregator) -> Run {
        let mut measurements: Measurements = aggregator.measurements();
        let decision: Decision = self
            .assumer
            .run(aggregator.probes().iter().map(|p| p.hits()).sum());
        let target = self.target.run();
        measurements.target_cpu = target.map(|t| t.mean);
        measurements.target_cpu_error = target.map(|t| t.error);
        let costs = (0..measurements.probes.len())
            .map(|id| self.cost(id).clone())
            .collect();
        Run {
            measurements,
            costs,
            pooled_gaps: self.pooled_gaps.clone(),
            assumption: Some(decision),
        }
    }
}
