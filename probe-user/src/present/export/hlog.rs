//! `.hlog`: an HdrHistogram interval log, as Java's `HistogramLogWriter` writes it.
//!
//! One tagged histogram per probe per interval, V2 + DEFLATE encoded and base64'd, so the
//! whole HdrHistogram tool chain reads it: Java's `HistogramLogReader` and
//! `HistogramLogProcessor` (which also turns it into `.hgrm`), HistogramLogAnalyzer, and
//! the Rust crate's `IntervalLogIterator`. The layout:
//!
//! ```text
//! #[Logged with probetop 0.1.0]
//! #probe uprobe_work_unit: id 0, uprobe work_unit in /usr/bin/fixture, spec uprobe:work_unit
//! #[Histogram log format version 1.3]
//! #[StartTime: 1700000000.000 (seconds since epoch), Tue Nov 14 22:13:20 UTC 2023]
//! #[BaseTime: 1700000000.000 (seconds since epoch)]
//! "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
//! Tag=uprobe_work_unit,0.000,1.000,0.005,HISTFAAAAC...
//! ```
//!
//! - Values in the histograms are nanoseconds. `Interval_Max` is the interval's max divided
//!   by 1,000,000 (milliseconds), the divisor Java's writer uses by default
//!   (`maxValueUnitRatio` = 1e6, "the msec : nsec ratio"). Readers take the max from the
//!   histogram itself; the column is for people.
//! - Timestamps are seconds since the run started; `BaseTime` (= `StartTime`) says so, so
//!   readers need not guess (Java guesses "relative" without it, by a one-year heuristic).
//! - Intervals are ordered by start time, probes in report order within one start time.
//!   A probe with no intervals gets its whole-run histogram as a single interval, so every
//!   probe appears in the log.
//! - A `latency:` pair adds two tags (see [`latency_tags`]): `latency.FUNC`, every call's
//!   latency as measured, and `latency.FUNC.corrected`, less the probes' cost; one
//!   interval each, the whole run (calls are paired over the run, not per interval),
//!   with a `#latency` comment naming the function, its spec and its calls.
//! - Numbers use Java's `%.3f` rounding ([`java_fixed`]); the `StartTime` date is in UTC
//!   where Java would use the JVM's time zone (readers ignore it).

use std::borrow::Cow;
use std::fmt::Write as _;

use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};

use super::hdr::{CORRECTED_TAG, java_fixed, latency_tags, one_line, probe_tags};
use super::{ExportError, Report, UtcTime};
use crate::aggregate::full_range;

/// Java's `HistogramLogWriter.HISTOGRAM_LOG_FORMAT_VERSION` (HdrHistogram 2.1.10+).
const LOG_FORMAT_VERSION: &str = "1.3";
/// Java's default `maxValueUnitRatio`: ns values, max column in ms.
const MAX_VALUE_UNIT_RATIO: f64 = 1_000_000.0;

pub(crate) fn render(report: &Report) -> Result<Vec<u8>, ExportError> {
    let tags = probe_tags(&report.probes);
    let mut out = String::new();
    // Writes to a String cannot fail, hence the ignored fmt::Results below.
    let _ = writeln!(out, "#[Logged with probetop {}]", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(
        out,
        "#target pid {}, comm {}, exe {}",
        report.target.pid,
        one_line(&report.target.comm),
        one_line(&report.target.exe.to_string_lossy())
    );
    for (probe, tag) in report.probes.iter().zip(&tags) {
        let _ = writeln!(
            out,
            "#probe {tag}: id {}, {} {} in {}, spec {}",
            probe.id,
            probe.kind,
            one_line(&probe.name),
            one_line(&probe.object),
            one_line(&probe.spec)
        );
    }
    let latency = latency_tags(&report.latency);
    for (row, tag) in report.latency.iter().zip(&latency) {
        let _ = writeln!(
            out,
            "#latency {tag}: {} in {}, spec {}, {} calls, {} ends; {tag}{CORRECTED_TAG}: less the probes' cost",
            one_line(&row.display_name()),
            one_line(&row.object),
            one_line(&row.spec),
            row.calls,
            row.path.as_str()
        );
    }
    let _ = writeln!(out, "#[Histogram log format version {LOG_FORMAT_VERSION}]");
    let start_s = java_fixed(report.started_unix_ms as f64 / 1000.0, 3);
    let _ = writeln!(
        out,
        "#[StartTime: {start_s} (seconds since epoch), {}]",
        UtcTime::from_unix_ms(report.started_unix_ms).java_date_string()
    );
    let _ = writeln!(out, "#[BaseTime: {start_s} (seconds since epoch)]");
    out.push_str(
        "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n",
    );

    // (start, length, histogram, tag), stably sorted by start. A probe's histogram is
    // written with probetop's full handler bounds (see histogram::new_ns_histogram), a
    // latency's as it is (1 ns to an hour, already fixed).
    let mut lines: Vec<(f64, f64, Cow<'_, Histogram<u64>>, &str)> = Vec::new();
    for (probe, tag) in report.probes.iter().zip(&tags) {
        if probe.intervals.is_empty() {
            lines.push((
                0.0,
                report.duration_s,
                Cow::Owned(full_range(&probe.handler_ns)),
                tag,
            ));
        }
        for interval in &probe.intervals {
            lines.push((
                interval.start_s,
                interval.length_s,
                Cow::Owned(full_range(&interval.handler_ns)),
                tag,
            ));
        }
    }
    // A latency pair's calls are kept for the whole run, not per interval: one interval
    // each, the measured and the corrected.
    let corrected: Vec<String> = latency
        .iter()
        .map(|tag| format!("{tag}{CORRECTED_TAG}"))
        .collect();
    for ((row, tag), corrected_tag) in report.latency.iter().zip(&latency).zip(&corrected) {
        lines.push((
            0.0,
            report.duration_s,
            Cow::Borrowed(&row.latency_hist),
            tag,
        ));
        lines.push((
            0.0,
            report.duration_s,
            Cow::Borrowed(&row.corrected_hist),
            corrected_tag,
        ));
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));

    let mut serializer = V2DeflateSerializer::new();
    let mut encoded = Vec::new();
    for (start, length, hist, tag) in lines {
        encoded.clear();
        serializer
            .serialize(hist.as_ref(), &mut encoded)
            .map_err(|e| ExportError::Encode {
                format: "hlog",
                reason: format!("histogram of {tag}: {e}"),
            })?;
        // Java writes getMaxValueAsDouble(), which is 0 for an empty histogram; the Rust
        // crate's max() is 0 then too.
        let max = hist.max() as f64 / MAX_VALUE_UNIT_RATIO;
        let _ = writeln!(
            out,
            "Tag={tag},{},{},{},{}",
            java_fixed(start, 3),
            java_fixed(length, 3),
            java_fixed(max, 3),
            base64::engine::general_purpose::STANDARD.encode(&encoded)
        );
    }
    Ok(out.into_bytes())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    use super::super::Interval;
    use super::super::testing::{rich_report, sample_report};
    use super::*;
    use crate::histogram::new_ns_histogram;

    /// Every interval read back with the crate's interval log reader: (tag, start, length,
    /// max column, histogram), plus the StartTime and BaseTime entries.
    struct ReadBack {
        start_time: Option<Duration>,
        base_time: Option<Duration>,
        intervals: Vec<(String, Duration, Duration, f64, Histogram<u64>)>,
    }

    fn read_back(bytes: &[u8]) -> ReadBack {
        let mut deserializer = Deserializer::new();
        let mut back = ReadBack {
            start_time: None,
            base_time: None,
            intervals: Vec::new(),
        };
        for entry in IntervalLogIterator::new(bytes) {
            match entry.expect("log parses") {
                LogEntry::StartTime(t) => back.start_time = Some(t),
                LogEntry::BaseTime(t) => back.base_time = Some(t),
                LogEntry::Interval(ilh) => {
                    let raw = base64::engine::general_purpose::STANDARD
                        .decode(ilh.encoded_histogram())
                        .expect("base64");
                    let hist: Histogram<u64> = deserializer
                        .deserialize(&mut &raw[..])
                        .expect("V2 deflate histogram");
                    back.intervals.push((
                        ilh.tag().expect("tagged").as_str().to_string(),
                        ilh.start_timestamp(),
                        ilh.duration(),
                        ilh.max(),
                        hist,
                    ));
                }
            }
        }
        back
    }

    /// Every (value, count) of a histogram, bucket by bucket.
    fn counts(h: &Histogram<u64>) -> Vec<(u64, u64)> {
        h.iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    #[test]
    fn header_lines_as_java_writes_them() {
        let text = String::from_utf8(render(&sample_report()).expect("renders")).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "#[Logged with probetop 0.1.0]");
        assert!(lines.contains(&"#[Histogram log format version 1.3]"));
        assert!(lines.contains(
            &"#[StartTime: 1700000000.000 (seconds since epoch), Tue Nov 14 22:13:20 UTC 2023]"
        ));
        assert!(lines.contains(&"#[BaseTime: 1700000000.000 (seconds since epoch)]"));
        let legend = lines
            .iter()
            .position(|l| l.starts_with("\"StartTimestamp\""))
            .expect("legend");
        assert_eq!(
            lines[legend],
            "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
        );
        // Everything before the legend is a comment; everything after is an interval.
        assert!(lines[..legend].iter().all(|l| l.starts_with('#')));
        assert!(lines[legend + 1..].iter().all(|l| l.starts_with("Tag=")));
        // Probe 0's max is 5000 ns, highest-equivalent 5003 ns = 0.005003 ms.
        assert!(
            lines[legend + 1].starts_with("Tag=uprobe_work_unit,0.000,1.000,0.005,HISTF"),
            "{}",
            lines[legend + 1]
        );
    }

    #[test]
    fn a_latency_pair_is_two_tags_with_every_call() {
        let report = super::super::testing::latency_report();
        let text = String::from_utf8(render(&report).expect("renders")).expect("utf8");
        assert!(
            text.contains("#latency latency.work_unit: work_unit in /usr/bin/fixture, spec latency:work_unit, 1001 calls"),
            "{text}"
        );
        let back = read_back(text.as_bytes());
        let l = &report.latency[0];
        for (tag, hist) in [
            ("latency.work_unit", &l.latency_hist),
            ("latency.work_unit.corrected", &l.corrected_hist),
        ] {
            let got: Vec<_> = back.intervals.iter().filter(|i| i.0 == tag).collect();
            assert_eq!(got.len(), 1, "{tag}");
            assert_eq!(got[0].4.len(), 1001, "{tag}");
            assert_eq!(counts(&got[0].4), counts(hist), "{tag}");
        }
        // The 2 ms call as measured; corrected, less the 240 ns inside it.
        assert_eq!(
            back.intervals
                .iter()
                .find(|i| i.0 == "latency.work_unit")
                .map(|i| i.4.max()),
            Some(l.latency_hist.max())
        );
    }

    #[test]
    fn round_trip_every_count_of_every_interval() {
        let report = rich_report();
        let back = read_back(&render(&report).expect("renders"));
        let start = Duration::from_millis(report.started_unix_ms);
        assert_eq!(back.start_time, Some(start));
        assert_eq!(back.base_time, Some(start));

        let tags = probe_tags(&report.probes);
        let mut expected: Vec<(String, Duration, Duration, f64, &Histogram<u64>)> = Vec::new();
        for (probe, tag) in report.probes.iter().zip(&tags) {
            for i in &probe.intervals {
                expected.push((
                    tag.clone(),
                    Duration::from_secs_f64(i.start_s),
                    Duration::from_secs_f64(i.length_s),
                    i.handler_ns.max() as f64 / 1e6,
                    &i.handler_ns,
                ));
            }
        }
        expected.sort_by_key(|e| e.1);
        assert_eq!(back.intervals.len(), expected.len());
        for (got, want) in back.intervals.iter().zip(&expected) {
            assert_eq!(got.0, want.0);
            // Timestamps are written to the millisecond.
            assert!(got.1.abs_diff(want.1) < Duration::from_micros(500));
            assert!(got.2.abs_diff(want.2) < Duration::from_micros(500));
            assert!(
                (got.3 - want.3).abs() <= 0.0005,
                "max {} vs {}",
                got.3,
                want.3
            );
            assert_eq!(got.4.len(), want.4.len());
            assert_eq!(counts(&got.4), counts(want.4), "counts of {}", got.0);
            assert_eq!(got.4.max(), want.4.max());
            assert_eq!(got.4.min(), want.4.min());
            // Same bounds and precision, so the reader's histogram is interchangeable.
            assert_eq!(got.4.low(), want.4.low());
            assert_eq!(got.4.high(), want.4.high());
            assert_eq!(got.4.sigfig(), want.4.sigfig());
        }

        // Summing a tag's intervals gives back the probe's whole-run histogram.
        let mut sums: BTreeMap<&str, Histogram<u64>> = BTreeMap::new();
        for (tag, _, _, _, h) in &back.intervals {
            sums.entry(tag)
                .or_insert_with(new_ns_histogram)
                .add(h)
                .expect("same bounds");
        }
        for (probe, tag) in report.probes.iter().zip(&tags) {
            assert_eq!(counts(&sums[tag.as_str()]), counts(&probe.handler_ns));
        }
    }

    #[test]
    fn probe_without_intervals_is_logged_as_one_interval() {
        let mut report = sample_report();
        report.probes[1].intervals.clear();
        let back = read_back(&render(&report).expect("renders"));
        let (_, start, length, _, hist) = back
            .intervals
            .iter()
            .find(|i| i.0 == "uretprobe_leaf_ret")
            .expect("probe 1 logged");
        assert_eq!(*start, Duration::ZERO);
        assert_eq!(*length, Duration::from_millis(1500));
        assert_eq!(counts(hist), counts(&report.probes[1].handler_ns));
    }

    #[test]
    fn empty_interval_round_trips() {
        let mut report = sample_report();
        report.probes[0].intervals.push(Interval {
            start_s: 1.0,
            length_s: 0.5,
            handler_ns: new_ns_histogram(),
        });
        let back = read_back(&render(&report).expect("renders"));
        let empty = back
            .intervals
            .iter()
            .find(|i| i.1 == Duration::from_secs(1))
            .expect("empty interval logged");
        assert_eq!(empty.3, 0.0);
        assert!(empty.4.is_empty());
    }

    /// Reads our log with the Java library (`tests/java/HlogCheck.java`) and compares the
    /// start time and per-tag interval counts, totals and maxima it sees with ours, then
    /// has Java's HistogramLogWriter write the same intervals and compares every line but
    /// our extra comments and the payload (DEFLATE output differs between zlib builds).
    /// `hgrm` has the matching check of the distributions.
    #[test]
    #[ignore = "needs Java 11+ and Maven with access to Maven Central"]
    fn java_reads_our_log() {
        let report = rich_report();
        let ours = String::from_utf8(render(&report).expect("renders")).expect("utf8");
        let java = super::super::testing::java_check(ours.as_bytes());
        let got: Vec<&str> = java
            .stdout
            .lines()
            .filter(|l| l.starts_with("START ") || l.starts_with("TAG "))
            .collect();
        let mut expected = vec!["START 1700000123.456".to_string()];
        for (probe, tag) in report.probes.iter().zip(probe_tags(&report.probes)) {
            expected.push(format!(
                "TAG {tag} intervals={} count={} max={}",
                probe.intervals.len(),
                probe.handler_ns.len(),
                probe.handler_ns.max()
            ));
        }
        assert_eq!(got, expected);

        // Header lines and interval columns up to the payload, as Java writes them.
        let comparable = |log: &str| -> Vec<String> {
            log.lines()
                .filter(|l| {
                    !(l.starts_with("#[Logged with")
                        || l.starts_with("#target ")
                        || l.starts_with("#probe "))
                })
                .map(|l| match l.rfind(',') {
                    Some(at) if l.starts_with("Tag=") => l[..at].to_string(),
                    _ => l.to_string(),
                })
                .collect()
        };
        assert_eq!(comparable(&ours), comparable(&java.rewritten));
        assert!(
            java.rewritten.lines().count() > 4,
            "Java wrote no intervals"
        );

        // A latency pair's two tags, every call in each.
        let report = super::super::testing::latency_report();
        let ours = render(&report).expect("renders");
        let java = super::super::testing::java_check(&ours);
        let l = &report.latency[0];
        for (tag, hist) in [
            ("latency.work_unit", &l.latency_hist),
            ("latency.work_unit.corrected", &l.corrected_hist),
        ] {
            let line = format!(
                "TAG {tag} intervals=1 count={} max={}",
                hist.len(),
                hist.max()
            );
            assert!(
                java.stdout.lines().any(|l| l == line),
                "{line} in\n{}",
                java.stdout
            );
        }
    }
}
