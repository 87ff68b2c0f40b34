//! Median and quartiles.

use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// Statistics

/// Median and quartiles (linear interpolation between order statistics).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Spread {
    pub(super) median: f64,
    pub(super) q1: f64,
    pub(super) q3: f64,
    pub(super) n: usize,
}

pub(super) fn spread(values: &[f64]) -> Spread {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return Spread {
            median: f64::NAN,
            q1: f64::NAN,
            q3: f64::NAN,
            n: 0,
        };
    }
    Spread {
        median: quantile(&sorted, 0.5),
        q1: quantile(&sorted, 0.25),
        q3: quantile(&sorted, 0.75),
        n: sorted.len(),
    }
}

pub(super) fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Spread {
    /// `812 (790-830)`: median and interquartile range.
    pub(super) fn show(&self, decimals: usize) -> String {
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

    pub(super) fn json(&self) -> Value {
        if self.n == 0 {
            return Value::Null;
        }
        json!({"median": round(self.median), "q1": round(self.q1), "q3": round(self.q3), "n": self.n})
    }
}

pub(super) fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}
