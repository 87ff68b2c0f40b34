//! Medians, quartiles and ranges of repeated measurements: what bench, mysql-report and
//! insitu-check report instead of means (a noisy machine's outliers do not move them).

use serde_json::{Value, json};

/// Median, quartiles and range of the finite values (linear interpolation between order
/// statistics); every field NaN and `n` 0 when there are none.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Spread {
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

pub(crate) fn spread(values: &[f64]) -> Spread {
    let sorted = sorted_finite(values);
    let (Some(&min), Some(&max)) = (sorted.first(), sorted.last()) else {
        return Spread {
            median: f64::NAN,
            q1: f64::NAN,
            q3: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
            n: 0,
        };
    };
    Spread {
        median: quantile_of_sorted(&sorted, 0.5),
        q1: quantile_of_sorted(&sorted, 0.25),
        q3: quantile_of_sorted(&sorted, 0.75),
        min,
        max,
        n: sorted.len(),
    }
}

/// The median of the finite values, NaN when there are none.
pub(crate) fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5)
}

/// The `q` quantile (0 to 1) of the finite values, NaN when there are none.
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    let sorted = sorted_finite(values);
    if sorted.is_empty() {
        return f64::NAN;
    }
    quantile_of_sorted(&sorted, q)
}

fn sorted_finite(values: &[f64]) -> Vec<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    sorted
}

/// `sorted` must be non-empty.
fn quantile_of_sorted(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Spread {
    /// `812 (790-830)`: median and interquartile range.
    pub(crate) fn show(&self, decimals: usize) -> String {
        if self.n == 0 {
            return "-".into();
        }
        if self.n == 1 {
            return format!("{:.*}", decimals, self.median);
        }
        format!(
            "{:.*} ({:.*}-{:.*})",
            decimals, self.median, decimals, self.q1, decimals, self.q3
        )
    }

    pub(crate) fn json(&self) -> Value {
        if self.n == 0 {
            return Value::Null;
        }
        json!({"median": round(self.median), "q1": round(self.q1), "q3": round(self.q3), "n": self.n})
    }
}

pub(crate) fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_interpolate() {
        let s = spread(&[4.0, 1.0, 3.0, 2.0, 5.0]);
        assert_eq!((s.median, s.q1, s.q3, s.n), (3.0, 2.0, 4.0, 5));
        assert_eq!((s.min, s.max), (1.0, 5.0));
        let s = spread(&[1.0, 2.0]);
        assert_eq!((s.median, s.q1, s.q3), (1.5, 1.25, 1.75));
        assert_eq!(spread(&[]).n, 0);
        assert_eq!(spread(&[f64::NAN, 7.0]).median, 7.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.25), 2.0);
        assert!(median(&[f64::NAN]).is_nan());
    }
}
