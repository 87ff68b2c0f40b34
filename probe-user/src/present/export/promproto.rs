//! Prometheus protobuf exposition (`io.prometheus.client.MetricFamily`, length-delimited),
//! which `--listen` serves to a scraper that asks for it: the one exposition in which a
//! released Prometheus takes native histograms.
//!
//! It carries the same families, names, labels and values as the text exposition
//! ([`super::prometheus`]), read back from it so the two cannot drift apart;
//! `probetop_handler_duration_seconds` gains, beside its classic buckets, each probe's
//! HDR histogram as a native histogram ([`super::native`]). A scraper without native
//! histograms reads the classic buckets as before.
//!
//! The messages are those of client_model's `io/prometheus/client/metrics.proto`
//! (proto2), written out for prost: only the fields probetop fills.

use std::collections::HashMap;

use super::Report;
use super::native;

/// The content type of this exposition, as scrapers ask for it and as it is answered.
pub(crate) const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// The histogram family that carries native buckets.
const NATIVE_FAMILY: &str = "probetop_handler_duration_seconds";
/// The `latency:` pairs' histogram families, one metric per row of the report's
/// `latency` in its order, with the row's histogram each.
const LATENCY_FAMILIES: [(&str, LatencyHistogram); 2] = [
    ("probetop_latency_seconds", |r| &r.latency_hist),
    ("probetop_latency_corrected_seconds", |r| &r.corrected_hist),
];

/// One of a latency row's histograms.
type LatencyHistogram = fn(&crate::aggregate::LatencyRow) -> &hdrhistogram::Histogram<u64>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub(crate) enum MetricType {
    Counter = 0,
    Gauge = 1,
    Summary = 2,
    Untyped = 3,
    Histogram = 4,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LabelPair {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Value {
    #[prost(double, optional, tag = "1")]
    pub value: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Quantile {
    #[prost(double, optional, tag = "1")]
    pub quantile: Option<f64>,
    #[prost(double, optional, tag = "2")]
    pub value: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Summary {
    #[prost(uint64, optional, tag = "1")]
    pub sample_count: Option<u64>,
    #[prost(double, optional, tag = "2")]
    pub sample_sum: Option<f64>,
    #[prost(message, repeated, tag = "3")]
    pub quantile: Vec<Quantile>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Bucket {
    #[prost(uint64, optional, tag = "1")]
    pub cumulative_count: Option<u64>,
    #[prost(double, optional, tag = "2")]
    pub upper_bound: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BucketSpan {
    #[prost(sint32, optional, tag = "1")]
    pub offset: Option<i32>,
    #[prost(uint32, optional, tag = "2")]
    pub length: Option<u32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Histogram {
    #[prost(uint64, optional, tag = "1")]
    pub sample_count: Option<u64>,
    #[prost(double, optional, tag = "2")]
    pub sample_sum: Option<f64>,
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    #[prost(sint32, optional, tag = "5")]
    pub schema: Option<i32>,
    #[prost(double, optional, tag = "6")]
    pub zero_threshold: Option<f64>,
    #[prost(uint64, optional, tag = "7")]
    pub zero_count: Option<u64>,
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    #[prost(sint64, repeated, packed = "false", tag = "13")]
    pub positive_delta: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Metric {
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Value>,
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Value>,
    #[prost(message, optional, tag = "4")]
    pub summary: Option<Summary>,
    #[prost(message, optional, tag = "5")]
    pub untyped: Option<Value>,
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct MetricFamily {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub help: Option<String>,
    #[prost(enumeration = "MetricType", optional, tag = "3")]
    pub r#type: Option<i32>,
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
}

/// The exposition: every family, each length-delimited.
pub(crate) fn render_protobuf(report: &Report) -> Vec<u8> {
    use prost::Message as _;
    let mut out = Vec::new();
    for family in families(report) {
        // Writing into a Vec only fails for want of memory, which aborts first.
        let _ = family.encode_length_delimited(&mut out);
    }
    out
}

/// The families of the text exposition, with native buckets on the HDR histograms.
pub(crate) fn families(report: &Report) -> Vec<MetricFamily> {
    let text = super::prometheus::render_prometheus(report);
    let mut families = from_text(&text);
    let by_id: HashMap<String, &super::ProbeReport> = report
        .probes
        .iter()
        .map(|p| (p.id.to_string(), p))
        .collect();
    for family in families
        .iter_mut()
        .filter(|f| f.name.as_deref() == Some(NATIVE_FAMILY))
    {
        for metric in &mut family.metric {
            let probe = metric
                .label
                .iter()
                .find(|l| l.name.as_deref() == Some("id"))
                .and_then(|l| by_id.get(l.value.as_deref().unwrap_or_default()));
            if let (Some(probe), Some(histogram)) = (probe, metric.histogram.as_mut()) {
                add_native(histogram, &probe.handler_ns);
            }
        }
    }
    for (name, hist_of) in LATENCY_FAMILIES {
        for family in families
            .iter_mut()
            .filter(|f| f.name.as_deref() == Some(name))
        {
            // The text writes one metric per row, in the rows' order.
            if family.metric.len() != report.latency.len() {
                continue;
            }
            for (metric, row) in family.metric.iter_mut().zip(&report.latency) {
                if let Some(histogram) = metric.histogram.as_mut() {
                    add_native(histogram, hist_of(row));
                }
            }
        }
    }
    families
}

/// Fills the native fields of `histogram` from `hist` (nanoseconds). An empty one gets
/// a no-op span, as metrics.proto asks, so it still reads as native.
fn add_native(histogram: &mut Histogram, hist: &hdrhistogram::Histogram<u64>) {
    let native = native::of_ns(hist);
    let (spans, deltas) = native.spans_and_deltas();
    histogram.schema = Some(native.schema);
    histogram.zero_threshold = Some(native::ZERO_THRESHOLD);
    histogram.zero_count = Some(0);
    histogram.positive_span = if spans.is_empty() {
        vec![BucketSpan {
            offset: Some(0),
            length: Some(0),
        }]
    } else {
        spans
            .into_iter()
            .map(|(offset, length)| BucketSpan {
                offset: Some(offset),
                length: Some(length),
            })
            .collect()
    };
    histogram.positive_delta = deltas;
}

/// One sample line of the text exposition.
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Reads probetop's own text exposition back into families. Only what
/// [`super::prometheus::render_prometheus`] writes: `# HELP`, `# TYPE`, and samples
/// without timestamps.
fn from_text(text: &str) -> Vec<MetricFamily> {
    let mut families: Vec<(MetricFamily, Vec<Sample>)> = Vec::new();
    let mut helps: HashMap<String, String> = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some((name, help)) = rest.split_once(' ') {
                helps.insert(name.to_string(), unescape(help));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let Some((name, kind)) = rest.split_once(' ') else {
                continue;
            };
            let kind = match kind {
                "counter" => MetricType::Counter,
                "gauge" => MetricType::Gauge,
                "summary" => MetricType::Summary,
                "histogram" => MetricType::Histogram,
                _ => MetricType::Untyped,
            };
            families.push((
                MetricFamily {
                    name: Some(name.to_string()),
                    help: helps.remove(name),
                    r#type: Some(kind as i32),
                    metric: Vec::new(),
                },
                Vec::new(),
            ));
            continue;
        }
        if let (Some(sample), Some((_, samples))) = (parse_sample(line), families.last_mut()) {
            samples.push(sample);
        }
    }
    families
        .into_iter()
        .map(|(mut family, samples)| {
            let name = family.name.clone().unwrap_or_default();
            family.metric = match family.r#type() {
                MetricType::Summary => summaries(&name, samples),
                MetricType::Histogram => histograms(&name, samples),
                kind => samples
                    .into_iter()
                    .map(|s| {
                        let value = Some(Value {
                            value: Some(s.value),
                        });
                        let mut metric = Metric {
                            label: label_pairs(&s.labels),
                            ..Default::default()
                        };
                        match kind {
                            MetricType::Counter => metric.counter = value,
                            MetricType::Gauge => metric.gauge = value,
                            _ => metric.untyped = value,
                        }
                        metric
                    })
                    .collect(),
            };
            family
        })
        .collect()
}

/// Groups a summary's quantile, `_sum` and `_count` lines by their other labels, in
/// the order they first appear.
fn summaries(name: &str, samples: Vec<Sample>) -> Vec<Metric> {
    let mut out: Vec<(Vec<(String, String)>, Summary)> = Vec::new();
    for mut s in samples {
        let quantile = take_label(&mut s.labels, "quantile");
        let summary = entry(&mut out, s.labels);
        if s.name == format!("{name}_sum") {
            summary.sample_sum = Some(s.value);
        } else if s.name == format!("{name}_count") {
            summary.sample_count = Some(s.value as u64);
        } else if let Some(q) = quantile.and_then(|q| q.parse().ok()) {
            summary.quantile.push(Quantile {
                quantile: Some(q),
                value: Some(s.value),
            });
        }
    }
    out.into_iter()
        .map(|(labels, summary)| Metric {
            label: label_pairs(&labels),
            summary: Some(summary),
            ..Default::default()
        })
        .collect()
}

/// Groups a histogram's `_bucket`, `_sum` and `_count` lines by their other labels.
fn histograms(name: &str, samples: Vec<Sample>) -> Vec<Metric> {
    let mut out: Vec<(Vec<(String, String)>, Histogram)> = Vec::new();
    for mut s in samples {
        let le = take_label(&mut s.labels, "le");
        let histogram = entry(&mut out, s.labels);
        if s.name == format!("{name}_sum") {
            histogram.sample_sum = Some(s.value);
        } else if s.name == format!("{name}_count") {
            histogram.sample_count = Some(s.value as u64);
        } else if let Some(bound) = le.as_deref().and_then(parse_float) {
            // The +Inf bucket is optional in the protobuf exposition: it is _count.
            if bound.is_finite() {
                histogram.bucket.push(Bucket {
                    cumulative_count: Some(s.value as u64),
                    upper_bound: Some(bound),
                });
            }
        }
    }
    out.into_iter()
        .map(|(labels, histogram)| Metric {
            label: label_pairs(&labels),
            histogram: Some(histogram),
            ..Default::default()
        })
        .collect()
}

/// The entry of `labels` in `out`, added if new.
fn entry<T: Default>(
    out: &mut Vec<(Vec<(String, String)>, T)>,
    labels: Vec<(String, String)>,
) -> &mut T {
    let at = match out.iter().position(|(l, _)| *l == labels) {
        Some(at) => at,
        None => {
            out.push((labels, T::default()));
            out.len() - 1
        }
    };
    &mut out[at].1
}

fn take_label(labels: &mut Vec<(String, String)>, name: &str) -> Option<String> {
    let at = labels.iter().position(|(l, _)| l == name)?;
    Some(labels.remove(at).1)
}

fn label_pairs(labels: &[(String, String)]) -> Vec<LabelPair> {
    labels
        .iter()
        .map(|(name, value)| LabelPair {
            name: Some(name.clone()),
            value: Some(value.clone()),
        })
        .collect()
}

/// `name{l="v",...} value` or `name value`.
fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices();
        loop {
            let (start, c) = chars.next()?;
            if c == '}' {
                rest = &body[start + 1..];
                break;
            }
            if c == ',' {
                continue;
            }
            let eq = start + body[start..].find("=\"")?;
            let label = body[start..eq].to_string();
            // Skip past `="`.
            while chars.next()?.0 < eq + 1 {}
            let mut value = String::new();
            loop {
                match chars.next()?.1 {
                    '"' => break,
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    c => value.push(c),
                }
            }
            labels.push((label, value));
        }
    }
    let value = parse_float(rest.trim())?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

fn parse_float(s: &str) -> Option<f64> {
    match s {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        s => s.parse().ok(),
    }
}

/// HELP text escapes backslash and line feed.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::super::testing::rich_report;
    use super::*;

    fn decode(mut bytes: &[u8]) -> Vec<MetricFamily> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            out.push(MetricFamily::decode_length_delimited(&mut bytes).expect("a family"));
        }
        out
    }

    /// The native buckets' counts, from their deltas.
    fn bucket_counts(histogram: &Histogram) -> Vec<i64> {
        histogram
            .positive_delta
            .iter()
            .scan(0i64, |count, d| {
                *count += d;
                Some(*count)
            })
            .collect()
    }

    /// How many values the native buckets hold.
    fn native_total(histogram: &Histogram) -> u64 {
        bucket_counts(histogram).iter().sum::<i64>() as u64
    }

    fn label<'a>(metric: &'a Metric, name: &str) -> Option<&'a str> {
        metric
            .label
            .iter()
            .find(|l| l.name.as_deref() == Some(name))
            .and_then(|l| l.value.as_deref())
    }

    #[test]
    fn same_families_as_the_text_with_native_buckets() {
        let report = rich_report();
        let text = super::super::prometheus::render_prometheus(&report);
        let families = decode(&render_protobuf(&report));
        let typed: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        let names: Vec<&str> = families.iter().filter_map(|f| f.name.as_deref()).collect();
        assert_eq!(names, typed);
        let family = |name: &str| {
            families
                .iter()
                .find(|f| f.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("{name}"))
        };
        let hits = family("probetop_probe_hits_total");
        assert_eq!(hits.r#type(), MetricType::Counter);
        for p in &report.probes {
            let id = p.id.to_string();
            let m = hits
                .metric
                .iter()
                .find(|m| label(m, "id") == Some(&id))
                .expect("hits of the probe");
            assert_eq!(
                m.counter.as_ref().and_then(|c| c.value),
                Some(p.hits as f64)
            );
            // Escaped labels undo to the strings.
            assert_eq!(label(m, "object"), Some(p.object.as_str()));
            assert_eq!(label(m, "probe"), Some(p.spec.as_str()));

            let summary = family("probetop_handler_seconds")
                .metric
                .iter()
                .find(|m| label(m, "id") == Some(&id))
                .and_then(|m| m.summary.as_ref())
                .expect("summary");
            assert_eq!(summary.sample_count, Some(p.handler_ns.len()));
            let quantiles = if p.handler_ns.is_empty() { 0 } else { 5 };
            assert_eq!(summary.quantile.len(), quantiles);

            let histogram = family(NATIVE_FAMILY)
                .metric
                .iter()
                .find(|m| label(m, "id") == Some(&id))
                .and_then(|m| m.histogram.as_ref())
                .expect("histogram");
            assert!(label(&family(NATIVE_FAMILY).metric[0], "le").is_none());
            assert_eq!(histogram.sample_count, Some(p.handler_ns.len()));
            assert_eq!(histogram.bucket.len(), 25, "classic buckets, +Inf left out");
            assert_eq!(histogram.schema, Some(8));
            assert!(!histogram.positive_span.is_empty());
            // The native buckets hold every value, none of them empty.
            assert!(bucket_counts(histogram).iter().all(|&n| n > 0));
            assert_eq!(native_total(histogram), p.handler_ns.len());
        }
    }

    #[test]
    fn latency_pairs_have_native_buckets_too() {
        let report = super::super::testing::latency_report();
        assert!(!report.latency.is_empty());
        let families = decode(&render_protobuf(&report));
        for (name, hist_of) in LATENCY_FAMILIES {
            let family = families
                .iter()
                .find(|f| f.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("{name}"));
            assert_eq!(family.metric.len(), report.latency.len(), "{name}");
            for (metric, row) in family.metric.iter().zip(&report.latency) {
                let histogram = metric.histogram.as_ref().expect("histogram");
                assert_eq!(histogram.schema, Some(8), "{name}");
                let expected = hist_of(row).len();
                assert_eq!(histogram.sample_count, Some(expected), "{name}");
                assert_eq!(
                    native_total(histogram),
                    expected,
                    "{name}: the native buckets hold every call"
                );
            }
        }
    }

    #[test]
    fn sample_lines_read_back() {
        let s = parse_sample(r#"m_total{a="x\"y\\z\nw",b=""} 1.5e-07"#).expect("sample");
        assert_eq!(s.name, "m_total");
        assert_eq!(
            s.labels,
            vec![
                ("a".into(), "x\"y\\z\nw".into()),
                ("b".into(), String::new())
            ]
        );
        assert_eq!(s.value, 1.5e-7);
        let s = parse_sample("m 3").expect("sample");
        assert!(s.labels.is_empty());
        assert_eq!(s.value, 3.0);
        assert_eq!(unescape("a\\\\b\\nc"), "a\\b\nc");
    }
}
