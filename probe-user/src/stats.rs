//! Robust summaries of repeated measurements: median, quartiles, and a bootstrap
//! confidence interval of the median. Deterministic (a fixed-seed generator), so the
//! same samples always give the same interval.

use serde::{Deserialize, Serialize};

/// Summary of one set of repeated measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
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

// Tests for comparing two runs (`probetop diff`): a two-sample Kolmogorov-Smirnov test
// on two histograms' buckets, and a test of two Poisson rates.

/// A two-sample Kolmogorov-Smirnov test's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct KsTest {
    /// The largest distance between the two empirical distribution functions.
    pub d: f64,
    pub n_a: u64,
    pub n_b: u64,
    /// The effective sample size `n_a n_b / (n_a + n_b)` the p-value is read at.
    pub n_eff: f64,
    /// Two-sided, from Kolmogorov's limiting distribution with Stephens' small-sample
    /// correction (`sqrt(n_eff) + 0.12 + 0.11 / sqrt(n_eff)`).
    pub p: f64,
}

/// The two-sample Kolmogorov-Smirnov test of two samples given as counts at values
/// (a histogram's buckets: `(value, count)`, values ascending and each once). Values in
/// one bucket tie, which only makes the test conservative. `None` when either is empty.
pub(crate) fn ks_two_sample(a: &[(u64, u64)], b: &[(u64, u64)]) -> Option<KsTest> {
    let n_a: u64 = a.iter().map(|&(_, c)| c).sum();
    let n_b: u64 = b.iter().map(|&(_, c)| c).sum();
    if n_a == 0 || n_b == 0 {
        return None;
    }
    let (mut i, mut j) = (0, 0);
    let (mut cum_a, mut cum_b) = (0u64, 0u64);
    let mut d: f64 = 0.0;
    while i < a.len() || j < b.len() {
        let next = match (a.get(i), b.get(j)) {
            (Some(&(va, _)), Some(&(vb, _))) => va.min(vb),
            (Some(&(va, _)), None) => va,
            (None, Some(&(vb, _))) => vb,
            (None, None) => break,
        };
        // Every count at this value on both sides first: the functions are compared
        // between values, never inside a tie.
        while let Some(&(_, c)) = a.get(i).filter(|&&(v, _)| v == next) {
            cum_a += c;
            i += 1;
        }
        while let Some(&(_, c)) = b.get(j).filter(|&&(v, _)| v == next) {
            cum_b += c;
            j += 1;
        }
        d = d.max((cum_a as f64 / n_a as f64 - cum_b as f64 / n_b as f64).abs());
    }
    let n_eff = n_a as f64 * n_b as f64 / (n_a + n_b) as f64;
    let root = n_eff.sqrt();
    let p = kolmogorov_q((root + 0.12 + 0.11 / root) * d);
    Some(KsTest {
        d,
        n_a,
        n_b,
        n_eff,
        p,
    })
}

/// Kolmogorov's survival function `Q(x) = P(K > x)`: the limiting distribution of
/// `sqrt(n) D`. Two series, each where it converges fast.
pub(crate) fn kolmogorov_q(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 {
        return 1.0;
    }
    let q = if x < 1.18 {
        // 1 - sqrt(2 pi)/x * sum exp(-(2j-1)^2 pi^2 / (8 x^2))
        let f = -std::f64::consts::PI.powi(2) / (8.0 * x * x);
        let sum: f64 = (1..=7)
            .map(|j| {
                let k = f64::from(2 * j - 1);
                (k * k * f).exp()
            })
            .sum();
        1.0 - (2.0 * std::f64::consts::PI).sqrt() / x * sum
    } else {
        // 2 sum (-1)^(j-1) exp(-2 j^2 x^2)
        let sum: f64 = (1..=20)
            .map(|j| {
                let j = f64::from(j);
                let term = (-2.0 * j * j * x * x).exp();
                if j as u32 % 2 == 1 { term } else { -term }
            })
            .sum();
        2.0 * sum
    };
    q.clamp(0.0, 1.0)
}

/// A test that two Poisson processes have the same rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateTest {
    /// The counts the test conditions on: `count_a + count_b`, its sample size.
    pub n: u64,
    /// Two-sided: twice the smaller binomial tail, at most 1.
    pub p: f64,
}

/// The conditional (exact binomial) test of two Poisson rates: given `count_a +
/// count_b` events, `count_a` is binomial with the share `seconds_a / (seconds_a +
/// seconds_b)` if the rates are equal. `None` without events or time.
pub(crate) fn poisson_rate_test(
    count_a: u64,
    seconds_a: f64,
    count_b: u64,
    seconds_b: f64,
) -> Option<RateTest> {
    let n = count_a.checked_add(count_b)?;
    if n == 0 || !(seconds_a > 0.0 && seconds_b > 0.0) {
        return None;
    }
    let share = seconds_a / (seconds_a + seconds_b);
    let (k, nf) = (count_a as f64, n as f64);
    // P(X <= k) = I_{1-share}(n-k, k+1); P(X >= k) = I_share(k, n-k+1).
    let at_most = if count_a == n {
        1.0
    } else {
        regularized_beta(1.0 - share, nf - k, k + 1.0)
    };
    let at_least = if count_a == 0 {
        1.0
    } else {
        regularized_beta(share, k, nf - k + 1.0)
    };
    Some(RateTest {
        n,
        p: (2.0 * at_most.min(at_least)).min(1.0),
    })
}

/// `ln Gamma(x)` for `x > 0` (Lanczos, g = 7, 9 terms: ~15 digits).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Gamma(x) Gamma(1-x) = pi / sin(pi x).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let sum = G[1..]
        .iter()
        .enumerate()
        .fold(G[0], |acc, (i, g)| acc + g / (x + i as f64 + 1.0));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// The regularized incomplete beta function `I_x(a, b)`, by its continued fraction
/// (modified Lentz), on the side of `x` where it converges fast.
fn regularized_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(x, a, b) / a
    } else {
        1.0 - front * beta_fraction(1.0 - x, b, a) / b
    }
}

fn beta_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut c = 1.0;
    let mut d = 1.0 - (a + b) * x / (a + 1.0);
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=10_000 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        for numerator in [
            m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0)),
        ] {
            d = 1.0 + numerator * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + numerator / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            h *= d * c;
        }
        // The last factor `d * c` is within 1e-15 of 1: converged.
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

#[cfg(test)]
mod diff_tests {
    use super::*;

    fn close(got: f64, want: f64, tolerance: f64) {
        assert!(
            (got - want).abs() <= tolerance,
            "got {got}, want {want} +- {tolerance}"
        );
    }

    #[test]
    fn kolmogorov_survival_matches_the_tables() {
        // Q(x) = 1 - K(x), Kolmogorov's distribution (scipy.special.kolmogorov).
        close(kolmogorov_q(1.0), 0.269_999_671_4, 1e-8);
        close(kolmogorov_q(1.358_098_8), 0.05, 1e-6);
        close(kolmogorov_q(1.627_618_8), 0.01, 1e-6);
        close(kolmogorov_q(0.5), 0.963_945_243_4, 1e-8);
        close(kolmogorov_q(1.18), 0.123_453_81, 1e-7);
        assert_eq!(kolmogorov_q(0.0), 1.0);
        assert!(kolmogorov_q(10.0) < 1e-80);
    }

    #[test]
    fn ks_of_two_shifted_samples() {
        // 1..=10 against 6..=15: the functions are 0.5 apart from 5 to 10.
        let a: Vec<(u64, u64)> = (1..=10).map(|v| (v, 1)).collect();
        let b: Vec<(u64, u64)> = (6..=15).map(|v| (v, 1)).collect();
        let t = ks_two_sample(&a, &b).expect("samples");
        close(t.d, 0.5, 1e-12);
        close(t.n_eff, 5.0, 1e-12);
        let lambda = (5f64.sqrt() + 0.12 + 0.11 / 5f64.sqrt()) * 0.5;
        close(t.p, kolmogorov_q(lambda), 1e-12);
        close(t.p, 0.1109, 5e-4);
        // The same sample: no distance, p = 1.
        let same = ks_two_sample(&a, &a).expect("samples");
        assert_eq!((same.d, same.p), (0.0, 1.0));
        // Counts weigh: 900 at 1 and 100 at 2 against 100 at 1 and 900 at 2.
        let t = ks_two_sample(&[(1, 900), (2, 100)], &[(1, 100), (2, 900)]).expect("samples");
        close(t.d, 0.8, 1e-12);
        assert!(t.p < 1e-100, "{t:?}");
        assert!(ks_two_sample(&[], &a).is_none());
    }

    #[test]
    fn poisson_rate_test_matches_exact_binomial_values() {
        // R: poisson.test(c(10, 20), c(1, 1))$p.value = 0.09873715
        close(
            poisson_rate_test(10, 1.0, 20, 1.0).expect("counts").p,
            0.098_737_15,
            1e-7,
        );
        // R: binom.test(3, 20, 0.5)$p.value = 0.002576828 (two tails, symmetric).
        close(
            poisson_rate_test(3, 2.0, 17, 2.0).expect("counts").p,
            0.002_576_828,
            1e-8,
        );
        // Unequal times: 30 events in 1 s against 60 in 2 s is the same rate: p = 1.
        close(
            poisson_rate_test(30, 1.0, 60, 2.0).expect("counts").p,
            1.0,
            1e-9,
        );
        // Large counts: 1,000,000 against 1,010,000 in equal times is 7 sigma.
        let big = poisson_rate_test(1_000_000, 10.0, 1_010_000, 10.0).expect("counts");
        assert!(big.p < 1e-10 && big.p > 1e-14, "{big:?}");
        assert_eq!(big.n, 2_010_000);
        assert!(poisson_rate_test(0, 1.0, 0, 1.0).is_none());
    }

    #[test]
    fn ln_gamma_at_known_points() {
        close(ln_gamma(1.0), 0.0, 1e-13);
        close(ln_gamma(10.0), 362_880f64.ln(), 1e-12);
        close(ln_gamma(0.5), std::f64::consts::PI.sqrt().ln(), 1e-13);
    }
}
