//! HDR histograms as exponential (base-2, "native") histograms: what `--listen`'s
//! protobuf exposition serves as Prometheus native histograms and `--otlp` pushes as
//! OpenTelemetry exponential histograms, which use the same bucket boundaries (a
//! Prometheus schema is an OTLP scale).
//!
//! Bucket `i` of schema `s` holds the values in `(2^((i-1)/2^s), 2^(i/2^s)]` seconds
//! (Prometheus' index; OTLP's index of the same bucket is `i - 1`). The schema is the
//! finest whose buckets are not finer than the HDR histogram's own resolution: at
//! probetop's 3 significant digits an HDR bucket is at most 1/1024 of its value wide,
//! finer than Prometheus' finest schema, 8 (buckets 0.27% wide), so schema 8. Each HDR
//! bucket's count goes whole to the native bucket that holds its middle value: counts
//! are exact, a value is misplaced by at most half an HDR bucket.

use hdrhistogram::Histogram;

/// The finest schema Prometheus and OTLP take.
pub(crate) const MAX_SCHEMA: i32 = 8;
/// The coarsest schema Prometheus takes.
const MIN_SCHEMA: i32 = -4;
/// The zero bucket's width, seconds: HDR values are at least 1 ns, so it stays empty;
/// it is the Go client's default.
pub(crate) const ZERO_THRESHOLD: f64 = 2.938_735_877_055_719e-39;

/// The native form of one histogram of nanoseconds, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Native {
    pub schema: i32,
    /// (Prometheus bucket index, count), indices ascending, counts above zero.
    pub buckets: Vec<(i32, u64)>,
}

/// The schema whose buckets are as fine as an HDR histogram of `sigfig` significant
/// digits resolves, and no finer: the largest `s` with `2^(2^-s) - 1` at least the
/// HDR's widest relative bucket (one unit over half its sub-bucket count).
pub(crate) fn schema_for(sigfig: u8) -> i32 {
    // hdrhistogram's sub-bucket count: 2 * 10^sigfig rounded up to a power of two.
    let sub_buckets = (2 * 10u64.pow(u32::from(sigfig))).next_power_of_two();
    let resolution = 2.0 / sub_buckets as f64;
    (MIN_SCHEMA..=MAX_SCHEMA)
        .rev()
        .find(|&s| 2f64.powf(2f64.powi(-s)) - 1.0 >= resolution)
        .unwrap_or(MIN_SCHEMA)
}

/// Upper bound of bucket `index` of `schema`, seconds.
pub(crate) fn upper_bound(schema: i32, index: i32) -> f64 {
    2f64.powf(f64::from(index) * 2f64.powi(-schema))
}

/// The bucket of `schema` that holds `seconds` (> 0).
pub(crate) fn bucket_index(schema: i32, seconds: f64) -> i32 {
    let guess = (seconds.log2() * 2f64.powi(schema)).ceil();
    // Within i32 for any f64 above zero at schema 8 (log2 of f64 spans +-1075).
    let mut index = guess as i32;
    // log2 rounds: settle on the bucket whose bounds hold the value.
    while index > i32::MIN && upper_bound(schema, index - 1) >= seconds {
        index -= 1;
    }
    while index < i32::MAX && upper_bound(schema, index) < seconds {
        index += 1;
    }
    index
}

/// `hist` (nanoseconds) as a native histogram in seconds at the schema its precision
/// calls for.
pub(crate) fn of_ns(hist: &Histogram<u64>) -> Native {
    let schema = schema_for(hist.sigfig()).min(MAX_SCHEMA);
    let mut buckets: Vec<(i32, u64)> = Vec::new();
    for v in hist.iter_recorded() {
        let ns = hist.median_equivalent(v.value_iterated_to()).max(1);
        let index = bucket_index(schema, ns as f64 / 1e9);
        match buckets.last_mut() {
            // Values ascend, so one native bucket's HDR buckets come together.
            Some((last, count)) if *last == index => *count += v.count_at_value(),
            _ => buckets.push((index, v.count_at_value())),
        }
    }
    Native { schema, buckets }
}

impl Native {
    /// Prometheus' spans and deltas: runs of consecutive buckets (offset from the end
    /// of the run before, or from index 0 for the first), and each count as the change
    /// from the one before.
    pub(crate) fn spans_and_deltas(&self) -> (Vec<(i32, u32)>, Vec<i64>) {
        let mut spans: Vec<(i32, u32)> = Vec::new();
        let mut deltas = Vec::with_capacity(self.buckets.len());
        let mut next_index: Option<i32> = None;
        let mut previous = 0i64;
        for &(index, count) in &self.buckets {
            match (next_index, spans.last_mut()) {
                (Some(next), Some((_, length))) if next == index => *length += 1,
                (Some(next), _) => spans.push((index - next, 1)),
                (None, _) => spans.push((index, 1)),
            }
            next_index = Some(index + 1);
            let count = i64::try_from(count).unwrap_or(i64::MAX);
            deltas.push(count - previous);
            previous = count;
        }
        (spans, deltas)
    }

    /// OTLP's positive buckets: the offset (OTLP index of the first bucket) and a count
    /// for every bucket from there to the last, empty ones included.
    pub(crate) fn otlp_positive(&self) -> (i32, Vec<u64>) {
        let (Some(&(first, _)), Some(&(last, _))) = (self.buckets.first(), self.buckets.last())
        else {
            return (0, Vec::new());
        };
        let mut counts = vec![0u64; (last - first) as usize + 1];
        for &(index, count) in &self.buckets {
            counts[(index - first) as usize] = count;
        }
        // OTLP bucket k holds (base^k, base^(k+1)]: Prometheus' bucket k+1.
        (first - 1, counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::new_ns_histogram;

    #[test]
    fn schema_follows_the_precision() {
        // 3 digits: HDR buckets <= 1/1024 wide, finer than schema 8's 0.27%.
        assert_eq!(schema_for(3), 8);
        // 2 digits: 1/128 = 0.78%; schema 7 (0.54%) would be finer, 6 (1.09%) is not.
        assert_eq!(schema_for(2), 6);
        // 1 digit: 1/16 = 6.25%; schema 3 is 9.05%, schema 4 4.43%.
        assert_eq!(schema_for(1), 3);
    }

    #[test]
    fn indices_bracket_their_values() {
        for schema in [-4, 0, 3, 8] {
            for seconds in [1e-9, 3.3e-7, 1.0, 1.5, 2.0, 59.9, 1e-3] {
                let i = bucket_index(schema, seconds);
                assert!(upper_bound(schema, i - 1) < seconds, "{schema} {seconds}");
                assert!(seconds <= upper_bound(schema, i), "{schema} {seconds}");
            }
        }
        // Bounds are inclusive above: 1 s is the top of bucket 0, 2 s of bucket 2^s.
        assert_eq!(bucket_index(8, 1.0), 0);
        assert_eq!(bucket_index(8, 2.0), 256);
        assert_eq!(bucket_index(0, 2.0), 1);
    }

    #[test]
    fn counts_are_kept_and_values_land_in_their_bucket() {
        let mut hist = new_ns_histogram();
        let values = [(1u64, 3u64), (999, 5), (1000, 7), (1001, 1), (250_000, 9)];
        for &(ns, n) in &values {
            hist.record_n(ns, n).expect("record");
        }
        hist.record_n(59_000_000_000, 2).expect("record");
        let native = of_ns(&hist);
        assert_eq!(native.schema, 8);
        let total: u64 = native.buckets.iter().map(|b| b.1).sum();
        assert_eq!(total, hist.len());
        assert!(native.buckets.windows(2).all(|w| w[0].0 < w[1].0));
        for &(ns, n) in &values {
            let index = bucket_index(8, ns as f64 / 1e9);
            let held = native
                .buckets
                .iter()
                .find(|b| b.0 == index)
                .map_or(0, |b| b.1);
            assert!(held >= n, "{ns} ns: bucket {index} holds {held}");
        }
        // Spans and deltas undo to the buckets.
        let (spans, deltas) = native.spans_and_deltas();
        let mut index = 0;
        let mut count = 0i64;
        let mut undone = Vec::new();
        let mut deltas = deltas.into_iter();
        for (n, (offset, length)) in spans.into_iter().enumerate() {
            index += offset;
            for _ in 0..length {
                count += deltas.next().expect("a delta per bucket");
                undone.push((index, count as u64));
                index += 1;
            }
            assert!(n == 0 || offset > 0);
        }
        assert_eq!(undone, native.buckets);
        // OTLP: dense from one below the first Prometheus index.
        let (offset, counts) = native.otlp_positive();
        assert_eq!(offset, native.buckets[0].0 - 1);
        assert_eq!(counts.iter().sum::<u64>(), hist.len());
        for &(i, n) in &native.buckets {
            assert_eq!(counts[(i - 1 - offset) as usize], n);
        }
    }

    #[test]
    fn empty_histograms_have_no_buckets() {
        let native = of_ns(&new_ns_histogram());
        assert!(native.buckets.is_empty());
        assert_eq!(native.spans_and_deltas(), (vec![], vec![]));
        assert_eq!(native.otlp_positive(), (0, vec![]));
    }
}
