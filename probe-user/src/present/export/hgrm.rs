//! `.hgrm`: the percentile distribution text of HdrHistogram, one file per probe.
//!
//! The body is byte for byte what Java's
//! `histogram.outputPercentileDistribution(out, 5, 1.0)` prints for the probe's whole-run
//! histogram: values in nanoseconds (scaling ratio 1.0), 5 percentile ticks per half
//! distance, the `#[Mean ...]`, `#[Max ...]`, `#[Buckets ...]` footer. It is checked
//! against Java's own output by `hlog`'s Java cross-check test (ignored: needs Java).
//!
//! One line is added before it, a `#` comment naming the probe. HdrHistogram's plotter
//! (`plotFiles.html`) skips lines starting with `#`, but it reads every other 4-column row
//! of a file into one curve, so two distributions in one file would plot as one wrong
//! curve. Hence one file per probe: `run.hgrm` becomes `run.<name>.hgrm`, even for a
//! single probe, so the names are predictable. The name is the probe's function (or
//! `provider:name`), as [`file_names`] makes it file-name-safe: `run.work_unit.hgrm`,
//! `run.leaf.ret.hgrm` for a return probe, `run.provider_name.usdt.hgrm`; one glob's
//! files tell their functions apart (`run.THD_send_kill_message.hgrm`), not the spec's
//! (the `.hlog`'s tags stay [`super::hdr::probe_tags`], which its readers select by). Units are not
//! written: the format has no place for them and the plotter asks for them; they are
//! always nanoseconds.
//!
//! A `latency:` pair adds two files, its calls' latency as measured and as corrected
//! (less the probes' cost), tagged as in the `.hlog` ([`latency_tags`]):
//! `run.latency.FUNC.hgrm` and `run.latency.FUNC.corrected.hgrm`.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use super::hdr::{
    CORRECTED_TAG, is_tag_char, java_fixed, java_fixed_width, java_mean, java_std_deviation,
    latency_tags, one_line, percentile_rows, sub_bucket_count,
};
use super::{ExportError, ProbeReport, Report};
use crate::aggregate::full_range;
use crate::spec::ProbeKind;

/// Percentile ticks per half distance to 100%, as `HistogramLogProcessor` uses.
const TICKS_PER_HALF_DISTANCE: u32 = 5;
/// Values are written in the histogram's unit, nanoseconds.
const VALUE_SCALING_RATIO: f64 = 1.0;

/// Longest function part of a file name, bytes: a demangled C++ name can pass the 255
/// bytes a file name may have.
const MAX_NAME: usize = 120;

/// A file-name part per probe, in `probes` order: its function (`provider:name` for a
/// USDT probe) with each run of other characters than `[A-Za-z0-9._+-]` made one `_`
/// (`THD::awake(killed_state)` -> `THD_awake_killed_state`; a run of dots, a variadic
/// `...`, too), then `.ret` for a return
/// probe and `.usdt` for a USDT probe. Where two probes would share one (one function in
/// two objects, a plain probe beside a latency pair's half), the object's file name is
/// added (`@libc.so.6`), and where that still collides, `~<probe id>`. `taken` are names
/// already used (the latency rows' tags).
pub(crate) fn file_names(probes: &[ProbeReport], taken: &[String]) -> Vec<String> {
    let base: Vec<String> = probes
        .iter()
        .map(|p| {
            let mut name = String::new();
            let chars: Vec<char> = p.name.chars().collect();
            for (i, &c) in chars.iter().enumerate() {
                // A run of dots (a variadic `...`) is punctuation, not a name's dot: a
                // file name `f_int_....hgrm` reads as a mistake.
                let dots =
                    c == '.' && (chars.get(i + 1) == Some(&'.') || i > 0 && chars[i - 1] == '.');
                if is_tag_char(c) && !dots {
                    name.push(c);
                } else if !name.ends_with('_') {
                    name.push('_');
                }
            }
            // All ASCII now, so any byte index is a char boundary.
            name.truncate(MAX_NAME);
            let name = name.trim_matches('_');
            let name = if name.is_empty() { "probe" } else { name };
            match p.kind {
                ProbeKind::Uprobe => name.to_string(),
                ProbeKind::Uretprobe => format!("{name}.ret"),
                ProbeKind::Usdt => format!("{name}.usdt"),
            }
        })
        .collect();
    let count = |names: &[String], n: &String| {
        names.iter().filter(|x| *x == n).count() + taken.iter().filter(|x| *x == n).count()
    };
    let with_object: Vec<String> = base
        .iter()
        .zip(probes)
        .map(|(name, p)| {
            if count(&base, name) == 1 {
                return name.clone();
            }
            let file = p.object.rsplit('/').next().unwrap_or_default();
            let file: String = file
                .chars()
                .map(|c| if is_tag_char(c) { c } else { '_' })
                .take(MAX_NAME)
                .collect();
            format!("{name}@{file}")
        })
        .collect();
    with_object
        .iter()
        .zip(&base)
        .zip(probes)
        .map(|((name, base), p)| {
            if count(&with_object, name) == 1 {
                name.clone()
            } else {
                format!("{base}~{}", p.id)
            }
        })
        .collect()
}

/// One `(name, file contents)` per probe, in report order, then two per latency row.
pub(crate) fn render(report: &Report) -> Result<Vec<(String, Vec<u8>)>, ExportError> {
    let latency = latency_tags(&report.latency);
    let taken: Vec<String> = latency
        .iter()
        .flat_map(|t| [t.clone(), format!("{t}{CORRECTED_TAG}")])
        .collect();
    let tags = file_names(&report.probes, &taken);
    let mut files: Vec<(String, Vec<u8>)> = report
        .probes
        .iter()
        .zip(tags)
        .map(|(probe, tag)| {
            let bytes = render_probe(probe).into_bytes();
            (tag, bytes)
        })
        .collect();
    for (row, tag) in report.latency.iter().zip(latency) {
        let head = format!(
            "#probetop latency {}: {} in {}, spec {}, {} calls",
            tag,
            one_line(&row.display_name()),
            one_line(&row.object),
            one_line(&row.spec),
            row.calls
        );
        let measured = format!("{head}, as measured\n{}", distribution(&row.latency_hist));
        let corrected = format!(
            "{head}, less the probes' cost\n{}",
            distribution(&row.corrected_hist)
        );
        files.push((tag.clone(), measured.into_bytes()));
        files.push((format!("{tag}{CORRECTED_TAG}"), corrected.into_bytes()));
    }
    Ok(files)
}

/// A probe's file: the naming comment, then its distribution.
pub(crate) fn render_probe(probe: &ProbeReport) -> String {
    let mut out = format!(
        "#probetop probe {}: {} {} in {}, spec {}\n",
        probe.id,
        probe.kind,
        one_line(&probe.name),
        one_line(&probe.object),
        one_line(&probe.spec)
    );
    // The footer's bucket count is that of probetop's full bounds, whatever size the live
    // histogram grew to (see histogram::new_ns_histogram).
    out.push_str(&distribution(&full_range(&probe.handler_ns)));
    out
}

/// Java's `outputPercentileDistribution(out, 5, 1.0)` of `hist`, as text.
pub(crate) fn distribution(hist: &Histogram<u64>) -> String {
    let digits = usize::from(hist.sigfig());
    let ratio = VALUE_SCALING_RATIO;
    let mut out = String::new();
    // Writes to a String cannot fail, hence the ignored fmt::Results.
    let _ = write!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    for row in percentile_rows(hist, TICKS_PER_HALF_DISTANCE) {
        let value = java_fixed_width(row.value as f64 / ratio, 12, digits);
        let quantile = row.level / 100.0;
        // Java's "%2.12f": width 2 never pads a 14-character number.
        let percentile = java_fixed(quantile, 12);
        if row.level != 100.0 {
            let inverse = java_fixed_width(1.0 / (1.0 - quantile), 14, 2);
            let _ = writeln!(
                out,
                "{value} {percentile} {:>10} {inverse}",
                row.total_count
            );
        } else {
            let _ = writeln!(out, "{value} {percentile} {:>10}", row.total_count);
        }
    }
    let _ = writeln!(
        out,
        "#[Mean    = {}, StdDeviation   = {}]",
        java_fixed_width(java_mean(hist) / ratio, 12, digits),
        java_fixed_width(java_std_deviation(hist) / ratio, 12, digits)
    );
    let _ = writeln!(
        out,
        "#[Max     = {}, Total count    = {:>12}]",
        java_fixed_width(hist.max() as f64 / ratio, 12, digits),
        hist.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        hist.buckets(),
        sub_bucket_count(hist)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::{rich_report, sample_report};
    use super::*;
    use crate::histogram::new_ns_histogram;

    /// A glob's probes are named by function: C++ names made file-name-safe, a return
    /// probe's and a USDT probe's kind added, one function in two objects told apart by
    /// the object, one function twice in one object by the probe id, and a name never
    /// that of a latency row's file.
    #[test]
    fn files_are_named_by_function() {
        let report = sample_report();
        let probe = |id, kind, name: &str, object: &str| {
            let mut p = report.probes[0].clone();
            (p.id, p.kind, p.name, p.object) = (id, kind, name.into(), object.into());
            p.spec = "uprobe:THD::*".into();
            p
        };
        let probes = [
            probe(
                0,
                ProbeKind::Uprobe,
                "THD::awake(killed_state)",
                "/m/mariadbd",
            ),
            probe(1, ProbeKind::Uprobe, "THD::~THD()", "/m/mariadbd"),
            probe(2, ProbeKind::Uretprobe, "THD::~THD()", "/m/mariadbd"),
            probe(3, ProbeKind::Uprobe, "malloc", "/lib/libc.so.6"),
            probe(4, ProbeKind::Uprobe, "malloc", "/m/mariadbd"),
            probe(5, ProbeKind::Uprobe, "dup", "/m/mariadbd"),
            probe(6, ProbeKind::Uprobe, "dup", "/m/mariadbd"),
            probe(7, ProbeKind::Usdt, "mysql:query__start", "/m/mariadbd"),
            probe(8, ProbeKind::Uprobe, "::", "/m/mariadbd"),
            probe(9, ProbeKind::Uprobe, &"x".repeat(400), "/m/mariadbd"),
            probe(10, ProbeKind::Uprobe, "latency.spin", "/m/mariadbd"),
            probe(
                11,
                ProbeKind::Uprobe,
                "THD::raise_note_printf(unsigned int, ...)",
                "/m/mariadbd",
            ),
        ];
        let names = file_names(&probes, &["latency.spin".to_string()]);
        assert_eq!(
            names[..10],
            [
                "THD_awake_killed_state",
                "THD_THD",
                "THD_THD.ret",
                "malloc@libc.so.6",
                "malloc@mariadbd",
                "dup~5",
                "dup~6",
                "mysql_query__start.usdt",
                "probe",
                &"x".repeat(MAX_NAME),
            ]
        );
        assert_eq!(names[10], "latency.spin@mariadbd");
        assert_eq!(names[11], "THD_raise_note_printf_unsigned_int");
    }

    /// One parsed data row: value, percentile, total count, 1/(1-p) (None on the last row).
    type Row = (f64, f64, u64, Option<f64>);

    fn parse(text: &str) -> (Vec<Row>, Vec<String>) {
        let mut rows = Vec::new();
        let mut footer = Vec::new();
        for line in text.lines() {
            if line.starts_with("#[") {
                footer.push(line.to_string());
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() || line.contains("Value") {
                continue;
            }
            let cols: Vec<&str> = line.split_whitespace().collect();
            assert!(cols.len() == 4 || cols.len() == 3, "row {line:?}");
            rows.push((
                cols[0].parse().expect("value"),
                cols[1].parse().expect("percentile"),
                cols[2].parse().expect("count"),
                cols.get(3).map(|c| c.parse().expect("1/(1-p)")),
            ));
        }
        (rows, footer)
    }

    #[test]
    fn a_latency_pair_is_two_files_of_its_calls() {
        let report = super::super::testing::latency_report();
        let files = render(&report).expect("renders");
        let tags: Vec<&str> = files.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            tags,
            [
                "work_unit",
                "leaf_ret.ret",
                "latency.work_unit",
                "latency.work_unit.corrected"
            ]
        );
        let l = &report.latency[0];
        for ((_, bytes), hist) in files[2..].iter().zip([&l.latency_hist, &l.corrected_hist]) {
            let text = String::from_utf8(bytes.clone()).expect("utf8");
            assert!(text.starts_with("#probetop latency latency.work_unit: work_unit"));
            assert!(text.ends_with(&distribution(hist)), "{text}");
            assert!(text.contains("Total count    =         1001]"), "{text}");
        }
    }

    #[test]
    fn sample_file_exactly() {
        let report = sample_report();
        let files = render(&report).expect("renders");
        assert_eq!(files[0].0, "work_unit");
        let text = String::from_utf8(files[0].1.clone()).expect("utf8");
        // Java's algorithm for the values 100, 200, 300, 400, 5000 (5000 is in an HDR
        // bucket of width 4: max 5003, median-equivalent 5002, so the mean is 1200.4).
        let expected = "\
#probetop probe 0: uprobe work_unit in /usr/bin/fixture, spec uprobe:work_unit
       Value     Percentile TotalCount 1/(1-Percentile)

     100.000 0.000000000000          1           1.00
     100.000 0.100000000000          1           1.11
     100.000 0.200000000000          1           1.25
     200.000 0.300000000000          2           1.43
     200.000 0.400000000000          2           1.67
     300.000 0.500000000000          3           2.00
     300.000 0.550000000000          3           2.22
     300.000 0.600000000000          3           2.50
     400.000 0.650000000000          4           2.86
     400.000 0.700000000000          4           3.33
     400.000 0.750000000000          4           4.00
     400.000 0.775000000000          4           4.44
     400.000 0.800000000000          4           5.00
    5003.000 0.825000000000          5           5.71
    5003.000 1.000000000000          5
#[Mean    =     1200.400, StdDeviation   =     1903.429]
#[Max     =     5003.000, Total count    =            5]
#[Buckets =           26, SubBuckets     =         2048]
";
        assert_eq!(text, expected);
    }

    #[test]
    fn numbers_agree_with_the_histogram() {
        for probe in rich_report().probes {
            let h = &probe.handler_ns;
            let (rows, footer) = parse(&render_probe(&probe));
            assert_eq!(footer.len(), 3);
            if h.is_empty() {
                assert!(rows.is_empty());
                assert!(footer[1].contains("Total count    =            0"));
                continue;
            }
            for (value, p, count, inverse) in &rows {
                // The value at each tick is the histogram's value at that quantile...
                let at = h.value_at_quantile(*p);
                assert_eq!(*value as u64, h.highest_equivalent(at), "p {p}");
                // ...and the count is every value at or below it.
                assert_eq!(*count, h.count_between(0, *value as u64), "p {p}");
                if let Some(inverse) = inverse {
                    // p is printed to 12 decimals, which 1/(1-p) magnifies near p = 1.
                    let tolerance = 0.005 + 1e-12 / (1.0 - p).powi(2);
                    assert!((inverse - 1.0 / (1.0 - p)).abs() <= tolerance, "p {p}");
                }
            }
            let last = rows.last().expect("rows");
            assert_eq!((last.0 as u64, last.1, last.2), (h.max(), 1.0, h.len()));
            assert!(footer[1].contains(&format!("Total count    = {:>12}", h.len())));
            let mean: f64 = footer[0]
                .split(['=', ','])
                .nth(1)
                .expect("mean")
                .trim()
                .parse()
                .expect("mean number");
            assert!(
                (mean - h.mean()).abs() < 0.001,
                "mean {mean} vs {}",
                h.mean()
            );
        }
    }

    #[test]
    fn mean_ties_round_half_up_as_java() {
        // 15 x 1 ns and 1 x 2 ns: mean 1.0625 exactly, "1.063" in Java ("1.062" with
        // Rust's half-to-even).
        let mut h = new_ns_histogram();
        h.record_n(1, 15).expect("in range");
        h.record(2).expect("in range");
        assert!(
            distribution(&h).contains("#[Mean    =        1.063, StdDeviation   =        0.242]")
        );
    }

    #[test]
    fn empty_histogram_has_header_and_footer_only() {
        assert_eq!(
            distribution(&new_ns_histogram()),
            "       Value     Percentile TotalCount 1/(1-Percentile)\n\n\
             #[Mean    =        0.000, StdDeviation   =        0.000]\n\
             #[Max     =        0.000, Total count    =            0]\n\
             #[Buckets =           26, SubBuckets     =         2048]\n"
        );
    }

    /// Java's `outputPercentileDistribution` of every probe, via `tests/java/HlogCheck.java`
    /// reading our `.hlog`, must equal our `.hgrm` bodies byte for byte.
    #[test]
    #[ignore = "needs Java 11+ and Maven with access to Maven Central"]
    fn java_prints_the_same_distribution() {
        let report = rich_report();
        let java = super::super::testing::java_check(
            &super::super::hlog::render(&report).expect("renders"),
        );
        let mut sections = java.stdout.split("TAG ").skip(1);
        for probe in &report.probes {
            let section = sections.next().expect("a section per probe");
            let (_, body) = section.split_once('\n').expect("TAG line");
            assert_eq!(body, distribution(&probe.handler_ns), "probe {}", probe.id);
        }
        assert!(sections.next().is_none());
    }
}
