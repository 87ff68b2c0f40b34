//! The nanosecond histogram every stage shares: its bounds and precision. A leaf, so
//! that `cost` and `attach` (dispatch histograms) need not reach up into `aggregate`.

use hdrhistogram::Histogram;

/// Largest value the histograms track: 60 s, far above any handler time.
pub(crate) const HIGHEST_TRACKABLE_NS: u64 = 60_000_000_000;
/// HDR precision: values are kept to 3 significant digits (0.1% relative error).
pub(crate) const SIGNIFICANT_DIGITS: u8 = 3;

/// A histogram of nanoseconds with probetop's bounds and precision: what reports and
/// exports carry.
pub(crate) fn new_ns_histogram() -> Histogram<u64> {
    // The bounds are constants known to be valid, so creation cannot fail.
    Histogram::new_with_bounds(1, HIGHEST_TRACKABLE_NS, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}
