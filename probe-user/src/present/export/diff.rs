//! `probetop diff A B`: two runs' exports (`.json`, or `.hlog` interval logs) compared
//! probe by probe and latency pair by latency pair.
//!
//! Rows are matched by a key that holds across runs and hosts: the kind, the name and
//! the object's file name (not its directory, not the pid), and for another tool's probe
//! its tool; a key repeated within one run (one spec on several sites) is numbered in
//! order. Each matched row gets the change in rate (hits/s; calls/s for a pair), in
//! p50/p90/p99/p99.9 (handler time for a probe, the call's latency for a pair) and in
//! the whole cost per hit, and two tests:
//! - the distributions: a two-sample Kolmogorov-Smirnov test on the two histograms'
//!   buckets (`stats::ks_two_sample`), with the effective sample size `n m / (n + m)`;
//!   absent where an export holds no histogram (JSON from before `handler_ns_hdr`);
//! - the counts: the conditional binomial test of two Poisson rates
//!   (`stats::poisson_rate_test`).
//!
//! A row is flagged when its metric (`--metric`, p50 by default) moved by more than the
//! threshold (`--fail-above`, 10% without it) and its distribution test is significant
//! at `--alpha` (0.001) divided by the number of rows tested (Bonferroni); a percentile
//! metric judges a latency pair by its row, not its halves' handler time. Both are
//! needed: with thousands of hits the test finds a 1% shift that two runs on a busy
//! host show anyway, and a large move in a handful of hits can be chance.
//!
//! A third condition: the metric must have moved by more than the row's floor, the
//! larger of [`MIN_MOVE_NS`] and the measurement's resolution there ([`resolution_ns`]:
//! the clock's step seen in the histograms, or their bucket width at the value). On
//! 20,000 hits at 60 ns the test finds a one-step move of a 10 ns clock (60 -> 70 ns,
//! +16.7%) significant; such a move says nothing about the code.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::json::{JsonEntry, JsonReport};
use crate::stats::{KsTest, RateTest, ks_two_sample, poisson_rate_test};

/// Why two runs could not be compared: each is one line, exit status 2.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DiffError {
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error(
        "{path} is not a probetop export ({reason}): give the .json or .hlog file `probetop -o` wrote"
    )]
    Format { path: PathBuf, reason: String },
    #[error(
        "{a} and {b} have no probe in common (by kind, name and object file): nothing to compare"
    )]
    Disjoint { a: PathBuf, b: PathBuf },
}

/// The metric `--fail-above` and the flags watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Metric {
    P50,
    P90,
    P99,
    #[value(name = "p99.9")]
    #[serde(rename = "p99.9")]
    P999,
    /// The whole cost per hit (per call for a latency pair).
    Cost,
}

impl Metric {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::P50 => "p50",
            Self::P90 => "p90",
            Self::P99 => "p99",
            Self::P999 => "p99.9",
            Self::Cost => "cost",
        }
    }
}

/// What a diff is asked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DiffOptions {
    pub metric: Metric,
    /// The change, in percent, above which a significant move is flagged.
    pub threshold_pct: f64,
    /// The family-wise significance level, split over the rows tested.
    pub alpha: f64,
}

/// One probe or pair of one run.
#[derive(Debug, Clone)]
struct Row {
    kind: String,
    name: String,
    object: String,
    /// Hits (a probe) or calls (a pair), and the seconds they came in.
    count: u64,
    seconds: f64,
    /// p50, p90, p99, p99.9, ns: from the histogram where there is one.
    quantiles: [Option<f64>; 4],
    cost_ns: Option<f64>,
    hist: Option<Histogram<u64>>,
    /// A half of a `latency:` pair of the run (its start or end probe).
    half_of_pair: bool,
}

/// The smallest move, ns, of the metric that is flagged, whatever the resolution.
pub(crate) const MIN_MOVE_NS: f64 = 20.0;

/// The clock's step seen in `hist`: the greatest common divisor of the recorded values
/// the histogram holds exactly (where a bucket is one value wide); 1 where none is.
fn clock_step(hist: &Histogram<u64>) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    hist.iter_recorded()
        .map(|v| v.value_iterated_to())
        .filter(|&v| v > 0 && hist.lowest_equivalent(v) == hist.highest_equivalent(v))
        .fold(0, gcd)
        .max(1)
}

/// The resolution, ns, of a value near `at` measured into `a` and `b`: the coarser of
/// the clock's step seen in either and either's bucket width at `at`.
fn resolution_ns(a: &Histogram<u64>, b: &Histogram<u64>, at: f64) -> f64 {
    let at = at.max(0.0) as u64;
    let width = |h: &Histogram<u64>| h.highest_equivalent(at) - h.lowest_equivalent(at) + 1;
    [clock_step(a), clock_step(b), width(a), width(b)]
        .into_iter()
        .max()
        .unwrap_or(1) as f64
}

/// One run, read.
struct Run {
    path: PathBuf,
    format: &'static str,
    duration_s: f64,
    /// Under `--in-situ`, the seconds the probes were attached: probes' rates are over
    /// these (hits come only then), so an in-situ run compares with a plain one.
    attached_s: Option<f64>,
    rows: BTreeMap<String, Row>,
}

const QUANTILES: [f64; 4] = [0.50, 0.90, 0.99, 0.999];

/// A number in both runs and its change.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Change {
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// `(b - a) / a`, in percent; null where `a` is 0 or either is missing.
    pub change_pct: Option<f64>,
}

impl Change {
    fn of(a: Option<f64>, b: Option<f64>) -> Self {
        let change_pct = match (a, b) {
            (Some(a), Some(b)) if a > 0.0 => Some(100.0 * (b - a) / a),
            _ => None,
        };
        Self { a, b, change_pct }
    }
}

/// The distribution test of a row (`--json`'s `distribution_test`).
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct JsonKs {
    /// `kolmogorov-smirnov-two-sample`.
    pub test: &'static str,
    pub d: f64,
    pub n_a: u64,
    pub n_b: u64,
    pub n_eff: f64,
    pub p: f64,
}

/// The rate test of a row (`--json`'s `rate_test`).
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct JsonRateTest {
    /// `poisson-conditional-binomial`.
    pub test: &'static str,
    /// Events in both runs together, the test's sample size.
    pub n: u64,
    pub p: f64,
}

/// A matched row (`--json`'s `rows`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DiffRow {
    /// What matched the two runs' rows: `kind:name@object-file` (`#N` for the Nth).
    pub key: String,
    /// `uprobe`, `uretprobe`, `usdt`, ... or `latency`.
    pub kind: String,
    pub name: String,
    /// The object in run B.
    pub object: String,
    /// Hits per second (calls per second for a latency pair).
    pub rate: Change,
    pub rate_test: Option<JsonRateTest>,
    /// Handler time per hit (a probe) or latency per call (a pair), ns.
    pub p50_ns: Change,
    pub p90_ns: Change,
    pub p99_ns: Change,
    pub p999_ns: Change,
    /// Whole cost per hit (per call for a pair), ns: an estimate, not tested.
    pub cost_ns: Change,
    pub distribution_test: Option<JsonKs>,
    /// The smallest move of the metric, ns, that is flagged: the larger of the
    /// diff's `min_move_ns` and the resolution measured there (clock step, bucket width).
    pub floor_ns: f64,
    /// A probe that is a half of a `latency:` pair: the pair's row says how long the
    /// calls took, so a percentile metric does not flag its handler time.
    pub half_of_pair: bool,
    /// `regression` or `improvement` on the metric, or null.
    pub flag: Option<&'static str>,
}

impl DiffRow {
    fn metric(&self, metric: Metric) -> &Change {
        match metric {
            Metric::P50 => &self.p50_ns,
            Metric::P90 => &self.p90_ns,
            Metric::P99 => &self.p99_ns,
            Metric::P999 => &self.p999_ns,
            Metric::Cost => &self.cost_ns,
        }
    }
}

/// One side's file (`--json`'s `a` and `b`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct JsonRun {
    pub path: PathBuf,
    /// `json` or `hlog`.
    pub format: &'static str,
    pub duration_s: f64,
    /// Under `--in-situ`, the seconds the probes were attached, which its probes' rates
    /// are over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attached_s: Option<f64>,
}

/// `probetop diff --json`: field names are a stable interface (add, never rename).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Diff {
    pub a: JsonRun,
    pub b: JsonRun,
    pub metric: Metric,
    pub threshold_pct: f64,
    /// The family-wise level, and the level each row's test is held to.
    pub alpha: f64,
    pub alpha_per_row: f64,
    /// A move of the metric of at most this many ns is never flagged (each row's
    /// `floor_ns` may be higher: the resolution of its measurement).
    pub min_move_ns: f64,
    pub rows: Vec<DiffRow>,
    /// Keys found in one run only.
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    /// Rows flagged `regression`.
    pub regressions: usize,
    /// The largest metric increase among them, percent (what `--fail-above` held).
    pub worst_regression_pct: Option<f64>,
}

/// Reads both runs and compares them.
pub(crate) fn diff(a: &Path, b: &Path, options: DiffOptions) -> Result<(Diff, Hists), DiffError> {
    let run_a = read_run(a)?;
    let run_b = read_run(b)?;
    let mut rows = Vec::new();
    let mut hists = Vec::new();
    for (key, ra) in &run_a.rows {
        let Some(rb) = run_b.rows.get(key) else {
            continue;
        };
        let q = |r: &Row, i: usize| r.quantiles[i];
        let ks = match (&ra.hist, &rb.hist) {
            (Some(ha), Some(hb)) => ks_two_sample(&buckets(ha), &buckets(hb)),
            _ => None,
        };
        let rate = |r: &Row| (r.seconds > 0.0).then(|| r.count as f64 / r.seconds);
        let metric_at = match options.metric {
            Metric::P50 => [q(ra, 0), q(rb, 0)],
            Metric::P90 => [q(ra, 1), q(rb, 1)],
            Metric::P99 => [q(ra, 2), q(rb, 2)],
            Metric::P999 => [q(ra, 3), q(rb, 3)],
            Metric::Cost => [ra.cost_ns, rb.cost_ns],
        }
        .into_iter()
        .flatten()
        .reduce(f64::max)
        .unwrap_or(0.0);
        let resolution = match (&ra.hist, &rb.hist) {
            (Some(ha), Some(hb)) => resolution_ns(ha, hb, metric_at),
            _ => 1.0,
        };
        rows.push(DiffRow {
            key: key.clone(),
            kind: rb.kind.clone(),
            name: rb.name.clone(),
            object: rb.object.clone(),
            rate: Change::of(rate(ra), rate(rb)),
            rate_test: poisson_rate_test(ra.count, ra.seconds, rb.count, rb.seconds).map(
                |RateTest { n, p }| JsonRateTest {
                    test: "poisson-conditional-binomial",
                    n,
                    p,
                },
            ),
            p50_ns: Change::of(q(ra, 0), q(rb, 0)),
            p90_ns: Change::of(q(ra, 1), q(rb, 1)),
            p99_ns: Change::of(q(ra, 2), q(rb, 2)),
            p999_ns: Change::of(q(ra, 3), q(rb, 3)),
            cost_ns: Change::of(ra.cost_ns, rb.cost_ns),
            distribution_test: ks.map(
                |KsTest {
                     d,
                     n_a,
                     n_b,
                     n_eff,
                     p,
                 }| JsonKs {
                    test: "kolmogorov-smirnov-two-sample",
                    d,
                    n_a,
                    n_b,
                    n_eff,
                    p,
                },
            ),
            floor_ns: resolution.max(MIN_MOVE_NS),
            half_of_pair: ra.half_of_pair || rb.half_of_pair,
            flag: None,
        });
        hists.push((ra.hist.clone(), rb.hist.clone()));
    }
    if rows.is_empty() {
        return Err(DiffError::Disjoint {
            a: a.to_path_buf(),
            b: b.to_path_buf(),
        });
    }
    let tested = rows
        .iter()
        .filter(|r| r.distribution_test.is_some())
        .count()
        .max(1);
    let alpha_per_row = options.alpha / tested as f64;
    for row in &mut rows {
        let significant = row.distribution_test.is_some_and(|t| t.p < alpha_per_row);
        // The halves' handler time moves with the host's load (its p50 moved by 25% and
        // more between identical runs of the fixture beside builds on 2 CPUs); the
        // pair's latency is what they measure, and is judged.
        let judged = options.metric == Metric::Cost || !row.half_of_pair;
        let significant = significant && judged;
        let change = row.metric(options.metric);
        // Within the floor a move is the clock's step or a bucket's width, not the code.
        let beyond_floor = match (change.a, change.b) {
            (Some(a), Some(b)) => (b - a).abs() > row.floor_ns,
            _ => false,
        };
        let significant = significant && beyond_floor;
        row.flag = match change.change_pct {
            Some(pct) if significant && pct > options.threshold_pct => Some("regression"),
            Some(pct) if significant && pct < -options.threshold_pct => Some("improvement"),
            _ => None,
        };
    }
    let regressions: Vec<f64> = rows
        .iter()
        .filter(|r| r.flag == Some("regression"))
        .filter_map(|r| r.metric(options.metric).change_pct)
        .collect();
    let only = |x: &Run, y: &Run| {
        x.rows
            .keys()
            .filter(|k| !y.rows.contains_key(*k))
            .cloned()
            .collect()
    };
    let diff = Diff {
        only_in_a: only(&run_a, &run_b),
        only_in_b: only(&run_b, &run_a),
        a: JsonRun {
            path: run_a.path.clone(),
            format: run_a.format,
            duration_s: run_a.duration_s,
            attached_s: run_a.attached_s,
        },
        b: JsonRun {
            path: run_b.path.clone(),
            format: run_b.format,
            duration_s: run_b.duration_s,
            attached_s: run_b.attached_s,
        },
        metric: options.metric,
        threshold_pct: options.threshold_pct,
        alpha: options.alpha,
        alpha_per_row,
        min_move_ns: MIN_MOVE_NS,
        regressions: regressions.len(),
        worst_regression_pct: regressions.iter().copied().reduce(f64::max),
        rows,
    };
    Ok((diff, Hists(hists)))
}

/// The matched rows' histograms (A, B), in `Diff::rows` order, for the HTML plots.
pub(crate) struct Hists(Vec<(Side, Side)>);

/// One run's histogram of a row, where its export holds one.
type Side = Option<Histogram<u64>>;

/// `(value, count)` of every non-empty bucket, ascending.
fn buckets(hist: &Histogram<u64>) -> Vec<(u64, u64)> {
    hist.iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect()
}

fn read_run(path: &Path) -> Result<Run, DiffError> {
    let text = std::fs::read_to_string(path).map_err(|e| DiffError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let format_error = |reason: String| DiffError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let is_hlog = path.extension().is_some_and(|e| e == "hlog")
        || text.starts_with("#[")
        || text.starts_with("\"StartTimestamp\"");
    let (format, duration_s, attached_s, rows) = if is_hlog {
        let (duration, rows) = read_hlog(&text).map_err(format_error)?;
        ("hlog", duration, None, rows)
    } else {
        let report: JsonReport =
            serde_json::from_str(&text).map_err(|e| format_error(e.to_string()))?;
        if report.tool != "probetop" {
            return Err(format_error("no \"tool\": \"probetop\"".into()));
        }
        let rows = json_rows(&report).map_err(format_error)?;
        ("json", report.duration_s, attached_seconds(&report), rows)
    };
    let mut keyed = BTreeMap::new();
    for (key, row) in rows {
        // A key repeated in one run: numbered in the run's order.
        let mut unique = key.clone();
        let mut n = 1;
        while keyed.contains_key(&unique) {
            n += 1;
            unique = format!("{key}#{n}");
        }
        keyed.insert(unique, row);
    }
    Ok(Run {
        path: path.to_path_buf(),
        format,
        duration_s,
        attached_s,
        rows: keyed,
    })
}

/// An in-situ run's attached seconds: the run less its detached windows (as the
/// summary's rates are, `answer::attached_seconds`).
fn attached_seconds(report: &JsonReport) -> Option<f64> {
    let in_situ = report.cost.in_situ.as_ref()?;
    Some((report.duration_s - in_situ.seconds_off).max(f64::MIN_POSITIVE))
}

/// A keyed row's `[KEY]`, as the summary names it, so each key of a run meets the same
/// key of the other; nothing for a row of every call.
fn keyed(key: Option<&str>) -> String {
    key.map(|k| format!("[{k}]")).unwrap_or_default()
}

/// The object's file name: the key holds across directories, hosts and pids.
fn file_name(object: &str) -> &str {
    object.rsplit('/').next().unwrap_or(object)
}

fn quantiles_of(hist: &Histogram<u64>) -> [Option<f64>; 4] {
    QUANTILES.map(|q| Some(hist.value_at_quantile(q) as f64))
}

fn json_rows(report: &JsonReport) -> Result<Vec<(String, Row)>, String> {
    let duration = report.duration_s;
    // Probes' hits came only while attached (--in-situ): their rate is over that time,
    // and so is a latency row's, whose calls are those probes' hits paired.
    let in_situ = attached_seconds(report);
    let attached = in_situ.unwrap_or(duration);
    let decode = |text: &Option<String>, name: &str| {
        text.as_deref()
            .map(|t| super::hdr::decode(t).map_err(|e| format!("histogram of {name}: {e}")))
            .transpose()
    };
    let summary_quantiles = |s: &crate::aggregate::HandlerSummary| {
        if s.count == 0 {
            [None; 4]
        } else {
            [s.p50, s.p90, s.p99, s.p999].map(|v| Some(v as f64))
        }
    };
    let halves: std::collections::BTreeSet<u32> = report
        .probes
        .iter()
        .filter_map(|e| match e {
            JsonEntry::Latency(l) => Some(l.start_probes.iter().chain(l.end_probes.iter())),
            JsonEntry::Probe(_) => None,
        })
        .flatten()
        .copied()
        .collect();
    let mut rows = Vec::new();
    for entry in &report.probes {
        match entry {
            JsonEntry::Probe(p) => {
                let hist = decode(&p.handler_ns_hdr, &p.name)?;
                let owner = match (&p.own, &p.owner) {
                    (false, Some(o)) => format!(" by {}", o.tool),
                    _ => String::new(),
                };
                let key = format!(
                    "{}:{}{}@{}{owner}",
                    p.kind,
                    p.name,
                    keyed(p.key.as_deref()),
                    file_name(&p.object)
                );
                rows.push((
                    key,
                    Row {
                        kind: p.kind.to_string(),
                        name: p.name.to_string(),
                        object: p.object.to_string(),
                        count: p.hits,
                        seconds: attached,
                        quantiles: hist
                            .as_ref()
                            .map_or_else(|| summary_quantiles(&p.handler_ns), quantiles_of),
                        cost_ns: p.whole_cost_ns,
                        hist,
                        half_of_pair: halves.contains(&p.id),
                    },
                ));
            }
            JsonEntry::Latency(l) => {
                let hist = decode(&l.latency_ns_hdr, &l.name)?;
                let key = format!(
                    "latency:{}{}@{}",
                    l.name,
                    keyed(l.key.as_deref()),
                    file_name(&l.object)
                );
                rows.push((
                    key,
                    Row {
                        kind: "latency".into(),
                        name: l.name.to_string(),
                        object: l.object.to_string(),
                        count: l.calls,
                        // The JSON's calls_per_second is over the whole run.
                        seconds: match in_situ {
                            Some(attached) => attached,
                            None if l.calls_per_second > 0.0 => l.calls as f64 / l.calls_per_second,
                            None => duration,
                        },
                        quantiles: hist
                            .as_ref()
                            .map_or_else(|| summary_quantiles(&l.latency_ns), quantiles_of),
                        cost_ns: l.whole_cost_ns,
                        hist,
                        half_of_pair: false,
                    },
                ));
            }
        }
    }
    Ok(rows)
}

/// An `.hlog`: each tag's intervals added up; the run's length is the last interval's
/// end. Its `#probe` comments (probetop's) name the tags' probes; a log without them
/// (another writer's) is keyed by tag. Counts are the histograms' (every hit in ring
/// mode; the timed ones in sample and kernel modes). No cost in a log.
fn read_hlog(text: &str) -> Result<(f64, Vec<(String, Row)>), String> {
    // tag -> (kind, name, object, one half of a latency pair)
    let mut names: BTreeMap<&str, (&str, &str, &str, bool)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut hists: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    let mut end_s: f64 = 0.0;
    let mut saw_header = false;
    // The tags of latency pairs' corrected histograms, not rows of their own.
    let mut corrected: Vec<String> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if let Some(rest) = line.strip_prefix("#probe ") {
            // `#probe TAG: id N, KIND NAME in OBJECT, spec SPEC`
            let parsed = rest.split_once(": id ").and_then(|(tag, rest)| {
                let (_, rest) = rest.split_once(", ")?;
                let (rest, spec) = rest.rsplit_once(", spec ").unwrap_or((rest, ""));
                let (kind, rest) = rest.split_once(' ')?;
                let (name, object) = rest.split_once(" in ").unwrap_or((rest, ""));
                Some((tag, (kind, name, object, spec.starts_with("latency:"))))
            });
            if let Some((tag, n)) = parsed {
                names.insert(tag, n);
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("#latency ") {
            // `#latency TAG: NAME in OBJECT, spec SPEC, N calls, ...; TAG.corrected: ...`:
            // the pair is judged by its measured latencies, as from the JSON; the
            // corrected tag is left out.
            let parsed = rest.split_once(": ").and_then(|(tag, rest)| {
                let (rest, _spec) = rest.split_once(", spec ")?;
                let (name, object) = rest.split_once(" in ").unwrap_or((rest, ""));
                Some((tag, name, object))
            });
            if let Some((tag, name, object)) = parsed {
                names.insert(tag, ("latency", name, object, false));
                corrected.push(format!("{tag}.corrected"));
            }
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            saw_header |= line.starts_with("#[Histogram log format version");
            continue;
        }
        if line.starts_with("\"StartTimestamp\"") {
            saw_header = true;
            continue;
        }
        let (tag, rest) = match line.strip_prefix("Tag=") {
            Some(rest) => rest.split_once(',').ok_or("a Tag= line without fields")?,
            None => ("", line),
        };
        let fields: Vec<&str> = rest.split(',').collect();
        let [start, length, _max, encoded] = fields[..] else {
            return Err(format!("line {}: not an interval log line", number + 1));
        };
        let number_of = |s: &str| {
            s.trim()
                .parse::<f64>()
                .map_err(|_| format!("line {}: {s:?} is not a number", number + 1))
        };
        end_s = end_s.max(number_of(start)? + number_of(length)?);
        let hist = super::hdr::decode(encoded).map_err(|e| format!("line {}: {e}", number + 1))?;
        match hists.get_mut(tag) {
            Some(sum) => {
                for v in hist.iter_recorded() {
                    sum.saturating_record_n(v.value_iterated_to(), v.count_at_value());
                }
            }
            None => {
                order.push(tag.to_string());
                hists.insert(tag.to_string(), crate::aggregate::full_range(&hist));
            }
        }
    }
    if !saw_header && hists.is_empty() {
        return Err("no interval log header and no histogram".into());
    }
    let rows = order
        .into_iter()
        .filter(|tag| !corrected.contains(tag))
        .filter_map(|tag| {
            let hist = hists.remove(&tag)?;
            let (kind, name, object, half_of_pair) =
                names
                    .get(tag.as_str())
                    .copied()
                    .unwrap_or(("tag", tag.as_str(), "", false));
            let key = if object.is_empty() {
                format!("{kind}:{name}")
            } else {
                format!("{kind}:{name}@{}", file_name(object))
            };
            Some((
                key,
                Row {
                    kind: kind.to_string(),
                    name: name.to_string(),
                    object: object.to_string(),
                    count: hist.len(),
                    seconds: end_s,
                    quantiles: quantiles_of(&hist),
                    cost_ns: None,
                    hist: Some(hist),
                    half_of_pair,
                },
            ))
        })
        .collect();
    Ok((end_s, rows))
}

/// A p-value as a few digits (`<1e-300` below what a double holds).
fn p_text(p: f64) -> String {
    if p <= 0.0 {
        "<1e-300".into()
    } else if p < 0.001 {
        format!("{p:.0e}")
    } else {
        format!("{p:.3}")
    }
}

fn pct_text(change: &Change) -> String {
    change
        .change_pct
        .map_or_else(|| "-".into(), |p| format!("{p:+.1}%"))
}

fn ns_text(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| super::html::human_ns(v).replace(' ', ""))
}

/// The text table (the default output).
pub(crate) fn render_text(diff: &Diff) -> String {
    let mut out = String::new();
    let run = |r: &JsonRun| match r.attached_s {
        Some(on) => format!(
            "{} ({}, {:.1} s, in situ: rates over the {on:.1} s attached)",
            r.path.display(),
            r.format,
            r.duration_s
        ),
        None => format!("{} ({}, {:.1} s)", r.path.display(), r.format, r.duration_s),
    };
    let _ = writeln!(out, "A: {}   B: {}", run(&diff.a), run(&diff.b));
    let _ = writeln!(
        out,
        "flagged: {} moved more than {}% and more than FLOOR (the measurement's resolution, at least {} ns) and the distributions differ (two-sample Kolmogorov-Smirnov on the histograms' buckets, p < {} = {} / {} rows tested); rates: Poisson rate test (conditional binomial)",
        diff.metric.as_str(),
        diff.threshold_pct,
        diff.min_move_ns,
        p_text(diff.alpha_per_row),
        diff.alpha,
        ((diff.alpha / diff.alpha_per_row).round() as usize).max(1),
    );
    let header = [
        "PROBE", "RATE/s A", "B", "CHG", "p(rate)", "P50 A", "B", "CHG", "P90", "P99", "P99.9",
        "COST/HIT", "KS D", "n_eff", "p(KS)", "FLOOR", "FLAG",
    ];
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in &diff.rows {
        let rate = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.1}"));
        table.push(vec![
            r.key.clone(),
            rate(r.rate.a),
            rate(r.rate.b),
            pct_text(&r.rate),
            r.rate_test.map_or_else(|| "-".into(), |t| p_text(t.p)),
            ns_text(r.p50_ns.a),
            ns_text(r.p50_ns.b),
            pct_text(&r.p50_ns),
            pct_text(&r.p90_ns),
            pct_text(&r.p99_ns),
            pct_text(&r.p999_ns),
            pct_text(&r.cost_ns),
            r.distribution_test
                .map_or_else(|| "-".into(), |t| format!("{:.3}", t.d)),
            r.distribution_test
                .map_or_else(|| "-".into(), |t| format!("{:.0}", t.n_eff)),
            r.distribution_test
                .map_or_else(|| "no histogram".into(), |t| p_text(t.p)),
            ns_text(Some(r.floor_ns)),
            match r.flag {
                Some("regression") => "REGRESSION".into(),
                Some(other) => other.into(),
                None => String::new(),
            },
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            table
                .iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &table {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c].saturating_sub(cell.chars().count());
            if c == 0 || c == header.len() - 1 {
                let _ = write!(line, "{cell}{} ", " ".repeat(pad));
            } else {
                let _ = write!(line, "{}{cell} ", " ".repeat(pad));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    for (which, keys) in [("A", &diff.only_in_a), ("B", &diff.only_in_b)] {
        if !keys.is_empty() {
            let _ = writeln!(out, "only in {which}: {}", keys.join(", "));
        }
    }
    let _ = writeln!(
        out,
        "{} regression{} flagged",
        diff.regressions,
        if diff.regressions == 1 { "" } else { "s" }
    );
    out
}

/// `--json`.
pub(crate) fn render_json(diff: &Diff) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(diff).map(|s| s + "\n")
}

/// `--html FILE`: the table, then each matched row's two distributions overlaid.
pub(crate) fn render_html(diff: &Diff, hists: &Hists) -> String {
    use super::html::{Overlay, esc};
    let intro = format!(
        "<pre>{}</pre>\n<h2>Distributions, A against B</h2>\n",
        esc(&render_text(diff))
    );
    let plots: Vec<Overlay> = diff
        .rows
        .iter()
        .zip(&hists.0)
        .filter_map(|(row, (a, b))| {
            let curves: Vec<(String, &Histogram<u64>)> = [("A", a), ("B", b)]
                .into_iter()
                .filter_map(|(side, h)| h.as_ref().map(|h| (format!("{side}: {}", row.key), h)))
                .collect();
            (!curves.is_empty()).then(|| Overlay {
                title: match row.flag {
                    Some(flag) => format!("{} ({flag})", row.key),
                    None => row.key.clone(),
                },
                y_label: if row.kind == "latency" {
                    "latency"
                } else {
                    "handler time"
                },
                curves,
            })
        })
        .collect();
    super::html::overlay_page("probetop diff", &intro, &plots)
}

#[cfg(test)]
mod tests {
    use super::super::testing::sample_report;
    use super::*;

    fn options() -> DiffOptions {
        DiffOptions {
            metric: Metric::P50,
            threshold_pct: 10.0,
            alpha: 0.001,
        }
    }

    /// An in-situ run whose probes were attached half of its 3 s, at the plain run's
    /// hits per attached second: the same rate, not -50% (its whole-run rate), and the
    /// text says over what time.
    #[test]
    fn an_in_situ_run_compares_its_rates_over_attached_time() {
        let plain = super::super::testing::latency_report();
        let mut in_situ = super::super::testing::latency_report();
        in_situ.duration_s = 2.0 * plain.duration_s;
        // As the aggregator writes it: the calls' rate over the whole run.
        for row in &mut in_situ.latency {
            row.calls_per_second = row.calls as f64 / in_situ.duration_s;
        }
        let unmeasured = crate::insitu::Interval {
            mean: 0.0,
            low: 0.0,
            high: 0.0,
        };
        in_situ.cost.in_situ = Some(crate::insitu::InSituSummary {
            seconds_on: plain.duration_s,
            seconds_off: plain.duration_s,
            added_share: None,
            ..super::super::testing::in_situ(unmeasured, None)
        });
        let d = diff_of(&plain, &in_situ, "insitu");
        assert_eq!(d.b.attached_s, Some(plain.duration_s));
        assert_eq!(d.a.attached_s, None);
        let latency: Vec<&str> = d
            .rows
            .iter()
            .filter(|r| r.key.starts_with("latency:"))
            .map(|r| r.key.as_str())
            .collect();
        assert_eq!(latency, ["latency:work_unit@fixture"]);
        for row in &d.rows {
            let change = row.rate.change_pct.expect("both rates");
            assert!(change.abs() < 1e-9, "{}: {change}%", row.key);
        }
        // The whole-run rate would have read -50%.
        let whole = |r: &super::super::Report, i: usize| r.probes[i].hits as f64 / r.duration_s;
        assert!((whole(&in_situ, 0) / whole(&plain, 0) - 0.5).abs() < 1e-9);
        let text = render_text(&d);
        assert!(
            text.contains("in situ: rates over the 1.5 s attached"),
            "{text}"
        );
    }

    /// `a` and `b` written as JSON exports and diffed, as `probetop diff` reads them.
    fn diff_of(a: &super::super::Report, b: &super::super::Report, name: &str) -> Diff {
        let dir = std::env::temp_dir().join(format!("probetop-diff-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let paths = [dir.join("a.json"), dir.join("b.json")];
        for (path, report) in paths.iter().zip([a, b]) {
            let json = super::super::json::render(report).expect("render");
            std::fs::write(path, json).expect("write");
        }
        let (diff, _) = diff(&paths[0], &paths[1], options()).expect("diff");
        let _ = std::fs::remove_dir_all(&dir);
        diff
    }

    /// `steps` `(ns, hits)` recorded into a handler-time histogram.
    fn hist_of(steps: &[(u64, u64)]) -> Histogram<u64> {
        let mut hist = crate::histogram::new_ns_histogram();
        for &(ns, hits) in steps {
            hist.record_n(ns, hits).expect("in range");
        }
        hist
    }

    /// Diffs the sample report against itself with the first probe's handler time
    /// `a` in run A and `b` in run B: the first row.
    fn first_row(a: &Histogram<u64>, b: &Histogram<u64>, name: &str) -> DiffRow {
        let with = |hist: &Histogram<u64>| {
            let mut report = sample_report();
            report.probes[0].intervals[0].handler_ns = hist.clone();
            report.probes[0].handler_ns = hist.clone().into();
            report
        };
        let diff = diff_of(&with(a), &with(b), &format!("floor-{name}"));
        let key_of_first = &diff.rows[0].key;
        assert!(key_of_first.contains(&sample_report().probes[0].name));
        diff.rows[0].clone()
    }

    /// 20,000 hits on a 10 ns clock around 60 ns: one step later (p50 60 -> 70 ns,
    /// +16.7%) the distribution test is overwhelming, but the move is within the floor
    /// and not flagged; twice as slow is.
    #[test]
    fn a_move_within_the_resolution_is_not_flagged_and_twice_as_slow_is() {
        let a = hist_of(&[(50, 5000), (60, 10_000), (70, 5000)]);
        let step = hist_of(&[(60, 5000), (70, 10_000), (80, 5000)]);
        let row = first_row(&a, &step, "step");
        assert_eq!((row.p50_ns.a, row.p50_ns.b), (Some(60.0), Some(70.0)));
        let ks = row.distribution_test.expect("histograms");
        assert!(ks.p < 1e-12, "the test alone would flag it: {ks:?}");
        assert_eq!(row.floor_ns, MIN_MOVE_NS.max(10.0));
        assert_eq!(row.flag, None, "{row:#?}");

        let twice = hist_of(&[(100, 5000), (120, 10_000), (140, 5000)]);
        let row = first_row(&a, &twice, "twice");
        assert_eq!(row.flag, Some("regression"), "{row:#?}");
        let row = first_row(&twice, &a, "half");
        assert_eq!(row.flag, Some("improvement"), "{row:#?}");
    }

    /// The floor follows the measurement: a clock ticking in 100 ns steps makes a
    /// one-step move (+25% at 400 ns) unflagged, where 20 ns alone would flag it.
    #[test]
    fn the_floor_is_the_clock_step_seen_in_the_histograms() {
        let a = hist_of(&[(300, 5000), (400, 10_000), (500, 5000)]);
        let b = hist_of(&[(400, 5000), (500, 10_000), (600, 5000)]);
        assert_eq!(clock_step(&a), 100);
        let row = first_row(&a, &b, "clock");
        assert_eq!(row.floor_ns, 100.0);
        assert_eq!(row.flag, None, "{row:#?}");
        // Above the exact range a bucket is wider than one ns: that width is the floor.
        let wide = hist_of(&[(1_000_000, 1)]);
        assert_eq!(clock_step(&wide), 1);
        assert!(resolution_ns(&wide, &wide, 1_000_000.0) > 100.0);
    }

    /// A report written as JSON and as .hlog, read back: each against itself matches
    /// every probe with no distance; against a copy whose second probe is 3 times as
    /// slow, only that probe is flagged.
    #[test]
    fn exports_read_back_and_a_slower_probe_is_flagged() {
        let dir = std::env::temp_dir().join(format!("probetop-diff-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let report = sample_report();
        let mut slower = sample_report();
        let mut hist = crate::histogram::new_ns_histogram();
        hist.record_n(3000, 10).expect("in range");
        // The .hlog writes the intervals' histograms, the JSON the whole run's.
        slower.probes[1].intervals[0].handler_ns = hist.clone();
        slower.probes[1].handler_ns = hist.into();
        for (ext, render) in [
            ("json", super::super::json::render as fn(&_) -> _),
            ("hlog", super::super::hlog::render),
        ] {
            let a = dir.join(format!("a.{ext}"));
            let b = dir.join(format!("b.{ext}"));
            std::fs::write(&a, render(&report).expect("render")).expect("write");
            std::fs::write(&b, render(&slower).expect("render")).expect("write");
            let (same, _) = diff(&a, &a, options()).expect("diff");
            assert_eq!(same.rows.len(), report.probes.len(), "{ext}");
            for row in &same.rows {
                let t = row.distribution_test.expect("histograms");
                assert_eq!((t.d, t.p), (0.0, 1.0), "{ext} {row:?}");
                assert_eq!(row.flag, None);
            }
            let (moved, _) = diff(&a, &b, options()).expect("diff");
            let flagged: Vec<&str> = moved
                .rows
                .iter()
                .filter(|r| r.flag.is_some())
                .map(|r| r.name.as_str())
                .collect();
            assert_eq!(
                flagged,
                [report.probes[1].name.as_str()],
                "{ext}: {moved:#?}"
            );
            assert_eq!(moved.regressions, 1);
            let text = render_text(&moved);
            assert_eq!(
                text.lines().filter(|l| l.ends_with("REGRESSION")).count(),
                1
            );
        }
    }
}
