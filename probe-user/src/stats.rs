//! Robust summaries of repeated measurements: median, quartiles, and a bootstrap
//! confidence interval of the median. Deterministic (a fixed-seed generator), so the
//! same samples always give the same interval.

use serde::{Deserialize, Serialize};

/// Summary of one set of repeated measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub n: usize,
    pub median: f64,
    /// First and third quartiles (the IQR is `q3 - q1`).
    pub q1: f64,
    pub q3: f64,
    /// 95% bootstrap percentile interval of the median.
    pub ci_low: f64,
    pub ci_high: f64,
}

/// Bootstrap resamples for the median's interval.
const RESAMPLES: usize = 2000;

impl Summary {
    /// One value, as a summary of itself (tests build calibrations from medians).
    #[cfg(test)]
    pub(crate) fn exact(value: f64) -> Self {
        Self {
            n: 1,
            median: value,
            q1: value,
            q3: value,
            ci_low: value,
            ci_high: value,
        }
    }

    /// Summarises `samples`; `None` when there are none (or any is not finite).
    pub(crate) fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mut rng = XorShift::new(0x9e37_79b9_7f4a_7c15 ^ sorted.len() as u64);
        let mut medians = Vec::with_capacity(RESAMPLES);
        let mut resample = vec![0.0; sorted.len()];
        for _ in 0..RESAMPLES {
            for slot in resample.iter_mut() {
                *slot = sorted[rng.below(sorted.len())];
            }
            resample.sort_by(f64::total_cmp);
            medians.push(quantile(&resample, 0.5));
        }
        medians.sort_by(f64::total_cmp);
        Some(Self {
            n: sorted.len(),
            median: quantile(&sorted, 0.5),
            q1: quantile(&sorted, 0.25),
            q3: quantile(&sorted, 0.75),
            ci_low: quantile(&medians, 0.025),
            ci_high: quantile(&medians, 0.975),
        })
    }
}

/// Quantile `q` of sorted `values` by linear interpolation (type 7, R's default).
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let low = pos.floor() as usize;
            let high = (low + 1).min(n - 1);
            let frac = pos - low as f64;
            sorted[low] + (sorted[high] - sorted[low]) * frac
        }
    }
}

/// xorshift64*: small, fast, good enough to shuffle and resample.
#[derive(Debug, Clone)]
pub(crate) struct XorShift(u64);

impl XorShift {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is negligible for small n).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Fisher-Yates shuffle.
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 2.5);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 4.0);
        assert_eq!(quantile(&v, 0.25), 1.75);
    }

    #[test]
    fn summary_brackets_the_median() {
        let samples: Vec<f64> = (1..=21).map(f64::from).collect();
        let s = Summary::of(&samples).expect("summary");
        assert_eq!(s.median, 11.0);
        assert_eq!((s.q1, s.q3), (6.0, 16.0));
        assert!(s.ci_low <= s.median && s.median <= s.ci_high, "{s:?}");
        assert!(s.ci_low >= 1.0 && s.ci_high <= 21.0);
        // Deterministic.
        assert_eq!(Summary::of(&samples), Some(s));
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn shuffle_keeps_every_item() {
        let mut v: Vec<u32> = (0..50).collect();
        XorShift::new(7).shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(v, sorted);
    }
}
