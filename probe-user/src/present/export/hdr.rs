//! Helpers shared by the HdrHistogram-family exports (`.hlog`, `.hgrm`) and the plots.
//!
//! Tools around HdrHistogram (the Java `HistogramLogProcessor`, the plotter, log analyzers)
//! read files the Java library wrote, so these helpers reproduce the Java library's
//! arithmetic and number formatting rather than the Rust crate's, which differ in small
//! ways (rounding of ties, the order of floating-point sums, the end of the percentile
//! iteration).

use hdrhistogram::Histogram;

use super::ProbeReport;
use crate::aggregate::LatencyRow;

/// Formats `x` as Java's `String.format(Locale.US, "%.{prec}f", x)` does.
///
/// Java rounds the shortest decimal representation of the double half-up, where Rust's
/// `{:.prec$}` rounds the exact binary value half-to-even: `0.0035` is `0.004` in Java and
/// `0.003` in Rust. Files meant to match Java's byte for byte need Java's rule.
pub(super) fn java_fixed(x: f64, prec: usize) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sign = if x.is_sign_negative() { "-" } else { "" };
    // `{:e}` gives the shortest digits that round-trip, as Java's Double.toString does.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let mut digits: Vec<u8> = mantissa
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect();
    // Digits before the decimal point (may be zero or negative for small numbers).
    let mut point = exp + 1;
    let keep = point + prec as i64;
    if keep < 0 {
        // Below half a unit of the last place: rounds to zero.
        digits.clear();
    } else if (keep as usize) < digits.len() {
        let round_up = digits[keep as usize] >= 5;
        digits.truncate(keep as usize);
        if round_up {
            let mut i = digits.len();
            loop {
                if i == 0 {
                    // Carried out of the leading digit: 9.99 -> 10.0.
                    digits.insert(0, 1);
                    point += 1;
                    break;
                }
                i -= 1;
                if digits[i] == 9 {
                    digits[i] = 0;
                } else {
                    digits[i] += 1;
                    break;
                }
            }
        }
    }
    let digit_at = |i: i64| -> char {
        if i >= 0 && (i as usize) < digits.len() {
            char::from(b'0' + digits[i as usize])
        } else {
            '0'
        }
    };
    let mut out = String::from(sign);
    if point <= 0 {
        out.push('0');
    } else {
        out.extend((0..point).map(digit_at));
    }
    if prec > 0 {
        out.push('.');
        out.extend((point..point + prec as i64).map(digit_at));
    }
    out
}

/// Formats like Java's `%{width}.{prec}f`: right-aligned in `width` columns.
pub(super) fn java_fixed_width(x: f64, width: usize, prec: usize) -> String {
    format!("{:>width$}", java_fixed(x, prec))
}

/// One step of Java's `PercentileIterator`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct PercentileRow {
    /// Highest value equivalent to the bucket the step stopped at.
    pub value: u64,
    /// The percentile level (0..=100) the step iterated to: the tick, not the exact
    /// percentile of `value`.
    pub level: f64,
    /// Count of values at or below `value`.
    pub total_count: u64,
}

/// The percentile distribution as Java's `PercentileIterator` walks it: `ticks_per_half`
/// steps in each half of the remaining distance to 100%, then one last step at 100%.
///
/// A port rather than the Rust crate's `iter_quantiles`, so that `.hgrm` rows are the rows
/// the Java library writes for the same histogram.
pub(super) fn percentile_rows(hist: &Histogram<u64>, ticks_per_half: u32) -> Vec<PercentileRow> {
    let total = hist.len();
    let mut rows = Vec::new();
    if total == 0 {
        return rows;
    }
    let mut level = 0.0_f64;
    let mut cumulative = 0_u64;
    let mut last_value = 0_u64;
    // Java visits every bucket but can only stop at one with a count, so walking the
    // recorded buckets visits the same stops.
    'buckets: for v in hist.iter_recorded() {
        cumulative += v.count_at_value();
        last_value = v.value_iterated_to();
        // Java: (100.0 * (double) totalCountToCurrentIndex) / arrayTotalCount.
        while (100.0 * cumulative as f64) / total as f64 >= level {
            rows.push(PercentileRow {
                value: last_value,
                level,
                total_count: cumulative,
            });
            level = next_level(level, ticks_per_half);
            // Java's hasNext() ends the walk once every count is behind it, then adds the
            // step to 100%.
            if cumulative >= total {
                break 'buckets;
            }
        }
    }
    rows.push(PercentileRow {
        value: last_value,
        level: 100.0,
        total_count: cumulative,
    });
    rows
}

/// Java's `PercentileIterator.incrementIterationLevel`, with Java's integer semantics
/// (saturating double-to-long casts, wrapping long arithmetic).
fn next_level(level: f64, ticks_per_half: u32) -> f64 {
    let halvings = ((100.0 / (100.0 - level)).ln() / 2.0_f64.ln()) as i64;
    let scale = 2.0_f64.powf(halvings.wrapping_add(1) as f64) as i64;
    let reporting_ticks = i64::from(ticks_per_half).wrapping_mul(scale);
    level + 100.0 / reporting_ticks as f64
}

/// Mean as Java's `AbstractHistogram.getMean` computes it (sum first, then divide; the
/// Rust crate divides each term, which can differ in the last bits).
pub(super) fn java_mean(hist: &Histogram<u64>) -> f64 {
    if hist.is_empty() {
        return 0.0;
    }
    let total: f64 = hist
        .iter_recorded()
        .map(|v| hist.median_equivalent(v.value_iterated_to()) as f64 * v.count_at_value() as f64)
        .fold(0.0, |acc, x| acc + x);
    total / hist.len() as f64
}

/// Standard deviation as Java's `AbstractHistogram.getStdDeviation` computes it.
pub(super) fn java_std_deviation(hist: &Histogram<u64>) -> f64 {
    if hist.is_empty() {
        return 0.0;
    }
    let mean = java_mean(hist);
    let total: f64 = hist
        .iter_recorded()
        .map(|v| {
            let deviation = hist.median_equivalent(v.value_iterated_to()) as f64 - mean;
            (deviation * deviation) * v.count_at_value() as f64
        })
        .fold(0.0, |acc, x| acc + x);
    (total / hist.len() as f64).sqrt()
}

/// Java's `subBucketCount`: the power of two that gives unit resolution up to
/// 2 * 10^digits. The Rust crate does not expose it.
pub(super) fn sub_bucket_count(hist: &Histogram<u64>) -> u64 {
    let largest_with_unit_resolution = 2 * 10_u64.pow(u32::from(hist.sigfig()));
    largest_with_unit_resolution.next_power_of_two().max(2)
}

/// Whether `c` may appear in a tag or file-name part unchanged.
pub(super) fn is_tag_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-')
}

/// A tag per probe, in `probes` order, usable both as an interval log `Tag=` (which must
/// not contain `,`, space or line breaks) and inside a file name (no `/`).
///
/// The tag is the probe's spec with every other character replaced by `_`
/// (`uretprobe:libc:malloc` -> `uretprobe_libc_malloc`), so it reads like the spec. Probes
/// whose tags would collide (one spec can expand to several probes) get `~<id>` appended;
/// `~` never occurs in the first form, so the result is unique.
pub(super) fn probe_tags(probes: &[ProbeReport]) -> Vec<String> {
    let slugs: Vec<String> = probes
        .iter()
        .map(|p| {
            p.spec
                .chars()
                .map(|c| if is_tag_char(c) { c } else { '_' })
                .collect()
        })
        .collect();
    slugs
        .iter()
        .zip(probes)
        .map(|(slug, probe)| {
            let shared = slugs.iter().filter(|s| *s == slug).count() > 1;
            if slug.is_empty() || shared {
                format!("{slug}~{}", probe.id)
            } else {
                slug.clone()
            }
        })
        .collect()
}

/// A tag per latency row, in `rows` order, as [`probe_tags`] makes them (a log tag and a
/// file-name part): `latency.` and the function (or `START,END`, and a keyed row's
/// `[KEY]`) with every other
/// character replaced by `_` (`latency.spin_2us`). The probes of a pair are tagged
/// `latency_...` (their spec with `:` replaced), so the two never meet. Rows whose
/// tags would collide (one function in two objects) get `~<row>` appended. The
/// corrected histogram's tag is this one with `.corrected` appended.
pub(super) fn latency_tags(rows: &[LatencyRow]) -> Vec<String> {
    let slugs: Vec<String> = rows
        .iter()
        .map(|row| {
            let name: String = row
                .display_name()
                .chars()
                .map(|c| if is_tag_char(c) { c } else { '_' })
                .collect();
            format!("latency.{name}")
        })
        .collect();
    slugs
        .iter()
        .enumerate()
        .map(|(index, slug)| {
            if slugs.iter().filter(|s| *s == slug).count() > 1 {
                format!("{slug}~{index}")
            } else {
                slug.clone()
            }
        })
        .collect()
}

/// The suffix of a latency row's corrected histogram's tag.
pub(super) const CORRECTED_TAG: &str = ".corrected";

/// `s` on one line, for `#` comments in line-oriented formats: control characters
/// (a path may hold a newline) would end the comment early.
pub(super) use crate::sys::stderr::one_line;

/// `hist` in HdrHistogram's V2 + DEFLATE encoding, base64 (an `.hlog` line's last
/// column), over probetop's full bounds; `None` when empty or not encodable.
pub(crate) fn encode(hist: &Histogram<u64>) -> Option<String> {
    use base64::Engine as _;
    use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
    if hist.is_empty() {
        return None;
    }
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(&crate::aggregate::full_range(hist), &mut bytes)
        .ok()?;
    Some(base64::engine::general_purpose::STANDARD.encode(&bytes))
}

/// A histogram [`encode`] (or any HdrHistogram writer's base64 V2 encoding) wrote.
pub(crate) fn decode(text: &str) -> Result<Histogram<u64>, String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("not an HdrHistogram: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::super::testing::sample_report;
    use super::*;
    use crate::histogram::new_ns_histogram;

    #[test]
    fn java_fixed_rounds_half_up_on_shortest_digits() {
        assert_eq!(java_fixed(0.0035, 3), "0.004");
        assert_eq!(java_fixed(0.0015, 3), "0.002");
        assert_eq!(java_fixed(1.0005, 3), "1.001");
        assert_eq!(java_fixed(0.0004999, 3), "0.000");
        assert_eq!(java_fixed(0.00049, 3), "0.000");
        assert_eq!(java_fixed(0.0005, 3), "0.001");
        assert_eq!(java_fixed(9.9996, 3), "10.000");
        assert_eq!(java_fixed(999.9999, 2), "1000.00");
        assert_eq!(java_fixed(0.0, 3), "0.000");
        assert_eq!(java_fixed(5000.0, 3), "5000.000");
        assert_eq!(java_fixed(60e9, 3), "60000000000.000");
        assert_eq!(java_fixed(0.9, 12), "0.900000000000");
        assert_eq!(java_fixed(0.99990234375, 12), "0.999902343750");
        assert_eq!(java_fixed(1.0 / (1.0 - 0.9), 2), "10.00");
        assert_eq!(java_fixed(1.5, 0), "2");
        assert_eq!(java_fixed(1_700_000_000.0, 3), "1700000000.000");
        assert_eq!(java_fixed(f64::INFINITY, 2), "Infinity");
        assert_eq!(java_fixed_width(3.0, 12, 3), "       3.000");
    }

    #[test]
    fn percentile_rows_end_at_max_with_100() {
        let report = sample_report();
        let rows = percentile_rows(&report.probes[0].handler_ns, 5);
        let first = rows.first().expect("rows");
        assert_eq!((first.value, first.level, first.total_count), (100, 0.0, 1));
        let last = rows.last().expect("rows");
        assert_eq!(last.level, 100.0);
        assert_eq!(last.value, report.probes[0].handler_ns.max());
        assert_eq!(last.total_count, 5);
        // Levels rise strictly until the final 100% step.
        assert!(rows.windows(2).all(|w| w[0].level < w[1].level));
    }

    #[test]
    fn percentile_rows_of_empty_histogram_are_empty() {
        assert!(percentile_rows(&new_ns_histogram(), 5).is_empty());
    }

    #[test]
    fn java_mean_matches_crate_mean_closely() {
        let h = &sample_report().probes[0].handler_ns;
        assert!((java_mean(h) - h.mean()).abs() < 1e-9);
        assert!((java_std_deviation(h) - h.stdev()).abs() < 1e-9);
    }

    #[test]
    fn sub_bucket_count_for_three_digits() {
        assert_eq!(sub_bucket_count(&new_ns_histogram()), 2048);
    }

    #[test]
    fn tags_are_safe_and_unique() {
        let mut report = sample_report();
        report.probes[1].spec = "uretprobe:/opt/my app/lib.so:f,g".into();
        let mut dup = report.probes[0].clone();
        dup.id = 7;
        report.probes.push(dup);
        let tags = probe_tags(&report.probes);
        assert_eq!(
            tags,
            [
                "uprobe_work_unit~0",
                "uretprobe__opt_my_app_lib.so_f_g",
                "uprobe_work_unit~7"
            ]
        );
    }
}
