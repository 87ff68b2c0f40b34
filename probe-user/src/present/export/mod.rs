//! Exports: what a run measured, written to files for reports.
//!
//! Every format renders one [`Report`], a self-contained copy of the measurements, so
//! exporters are pure functions and can be tested without probes. [`render`] picks the
//! format by the output file's extension:
//!
//! | extension | format | module |
//! | --- | --- | --- |
//! | `.json` | probetop's JSON summary (stable schema) | [`json`] |
//! | `.csv` | one RFC 4180 row per probe | [`csv`] |
//! | `.html`, `.htm` | self-contained page: summary table and percentile plots | [`html`] |
//! | `.svg` | the all-probes percentile plot | [`html`] |
//! | `.hlog` | HdrHistogram interval log (Java `HistogramLogWriter` layout) | [`hlog`] |
//! | `.hgrm` | HdrHistogram percentile distribution, one file per probe | [`hgrm`] |
//! | `.prom` | Prometheus text exposition (also served by `--listen`) | [`prometheus`] |
//!
//! All handler times are nanoseconds unless a format says otherwise (Prometheus uses
//! seconds, as its conventions require).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;

use crate::spec::ProbeKind;
use crate::target::Target;

pub(crate) mod csv;
pub(crate) mod diff;
mod file;
mod hdr;
pub(crate) mod hgrm;
pub(crate) mod hlog;
pub(crate) mod html;
pub mod json;
pub(crate) mod native;
pub(crate) mod prometheus;
pub(crate) mod promproto;

pub(crate) use file::{check, write, write_file};

/// The measurements of one probe over a run.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    /// Probe id (the BPF cookie), unique within the run.
    pub id: u32,
    /// The spec the user wrote that produced this probe.
    pub spec: String,
    pub kind: ProbeKind,
    /// The symbol as the user wrote it, or `provider:name`.
    pub name: String,
    /// What `name` resolved to when that is another name (an alias, an IFUNC's choice).
    pub resolved: Option<String>,
    pub object: String,
    pub address: u64,
    pub file_offset: u64,
    /// Execs of the target followed before this probe was attached (0: it was attached
    /// to the program probetop started on; see [`ExecReport`]).
    pub generation: u32,
    /// The program the target ran when this probe was attached.
    pub exe: String,
    /// How hits reached probetop at the end.
    pub mode: crate::delivery::DeliveryMode,
    /// Argument values of the last hit that captured any; `None` inside where a read
    /// faulted.
    pub last_args: Option<Vec<Option<u64>>>,
    /// Records received per thread id, sorted by thread id.
    pub threads: Vec<(u32, u64)>,
    /// Records received per process id, sorted; kept in reports only when several
    /// processes are probed (empty otherwise).
    pub processes: Vec<(u32, u64)>,
    /// Which hits `threads` counts.
    pub threads_cover: crate::aggregate::ThreadsCover,
    /// Hits dropped per thread id (a full ring buffer), sorted.
    pub threads_dropped: Vec<(u32, u64)>,
    /// Hits the probe took: records received plus records dropped.
    pub hits: u64,
    pub dropped: u64,
    /// Handler time of every received hit, ns (nothing allocated for a probe without).
    pub handler_ns: crate::aggregate::LiveHistogram,
    /// Cost class, whole cost per hit, CPU share, measured dispatch.
    pub cost: crate::present::ProbeCostReport,
    /// Handler time per interval, oldest first (for interval logs and time series).
    pub intervals: Vec<Interval>,
    /// Another tool's probe, which probetop only counted; `None`: probetop's own.
    pub other: Option<crate::attach::others::OtherSite>,
    /// `--mode auto` moved it into the kernel.
    pub(crate) moved: Option<crate::aggregate::AutoMove>,
}

/// One interval's histogram.
#[derive(Debug, Clone)]
pub struct Interval {
    /// Seconds since the run started at the interval's start.
    pub start_s: f64,
    pub length_s: f64,
    pub handler_ns: Histogram<u64>,
}

/// A whole run: the target, when and how long, and every probe.
#[derive(Debug, Clone)]
pub struct Report {
    pub target: Target,
    /// Unix time of the start of measurement, ms.
    pub started_unix_ms: u64,
    pub duration_s: f64,
    pub probes: Vec<ProbeReport>,
    /// What all probes cost the target, and other BPF programs on its probes.
    pub cost: crate::present::RunCostReport,
    /// Every exec of the target probetop followed (`--follow-exec`), oldest first.
    pub execs: Vec<ExecReport>,
    /// How the probes were attached: `uprobe_multi` links or `perf_event`s.
    pub attach_path: Option<&'static str>,
    /// Probe points matched but not attached: the kernel refuses to probe them.
    pub skipped: Vec<SkippedPoint>,
    /// Objects replaced on disk while probed: loaded again by the target (their probes
    /// stayed on the old file), or not loaded yet (their probes moved to the new one).
    pub replaced: Vec<ReplacedObject>,
    /// The target's CPU over the run, probes included, as a share of one CPU (summed
    /// over the process set with several): what the headline sets the probes' cost
    /// against.
    pub target_cpu: Option<f64>,
    /// The standard error of `target_cpu` over its one-second rates (`None`: unknown,
    /// taken as exact).
    pub target_cpu_error: Option<f64>,
    /// What `--budget` did; with it, each probe's `hits` is scaled to the whole run.
    pub budget: Option<crate::insitu::budget::BudgetSummary>,
    /// The `latency:` pairs' rows.
    pub latency: Vec<crate::aggregate::LatencyRow>,
    /// Keyed probes' rows: (probe id, one key's hits).
    pub keyed: Vec<(u32, crate::aggregate::KeyedHits)>,
    /// What `--otlp`'s pushes came to, the final one included.
    pub otlp: Option<OtlpPushes>,
}

/// `--otlp`: where the measurements were pushed, and how many pushes landed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OtlpPushes {
    /// The URL posted to (`.../v1/metrics`).
    pub endpoint: String,
    /// Requests the endpoint accepted (a 2xx).
    pub pushed: u64,
    /// Requests that failed every try.
    pub failed: u64,
    /// Requests dropped unsent: from a full queue, or still queued at exit.
    pub dropped: u64,
    /// Why the last request that failed did.
    pub last_error: Option<String>,
}

/// A probed object whose path names another file now (replaced on disk). Loaded when
/// probing started and loaded again as the new file: the probes on it stay on the old
/// file, and count none of the new file's calls. Not loaded then: the probes were
/// moved to the new file (`probes_moved`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplacedObject {
    pub object: String,
    /// Ids of the probes on the old file.
    pub probes: Vec<u32>,
    /// When probetop noticed it, unix time in ms.
    pub at_unix_ms: u64,
    /// Whether the probes were moved to the new file (those not in it are detached).
    pub probes_moved: bool,
}

/// A probe point a spec matched that was not attached, and why.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SkippedPoint {
    pub spec: String,
    pub name: String,
    pub object: String,
    pub file_offset: u64,
    pub why: String,
}

impl Report {
    /// Puts `--budget`'s summary into the report: a probe with scaled hits (by row)
    /// reports the scaled count as its `hits`, the counted one beside it.
    pub fn apply_budget(&mut self, summary: crate::insitu::budget::BudgetSummary) {
        for probe in &mut self.probes {
            if let Some(scaled) = summary.scaled.get(probe.id as usize) {
                probe.hits = scaled.scaled.round() as u64;
            }
        }
        self.budget = Some(summary);
    }

    /// Puts the in-situ measurement into the report. When it gave a number, each probe's
    /// whole cost becomes its part of the measured cost per hit: the set's in-situ cost
    /// split in proportion to the estimates (all of it for a single probe), and
    /// `whole_cost_method` says `in-situ`; the estimate per hit stays beside it.
    pub fn apply_in_situ(&mut self, summary: crate::insitu::InSituSummary) {
        use crate::insitu::Verdict;
        use crate::present::Method;
        let hits: u64 = self.probes.iter().map(|p| p.hits).sum();
        // A probe without hits has no price (its cost reads `-`) and adds nothing to
        // the weighted mean: it must not void the estimate of those that fired.
        let estimated: Option<f64> = self
            .probes
            .iter()
            .filter(|p| p.hits > 0)
            .map(|p| p.cost.whole_cost_ns.map(|w| w * p.hits as f64))
            .sum::<Option<f64>>()
            .filter(|_| hits > 0)
            .map(|total| total / hits as f64);
        self.cost.estimated_per_hit_ns = estimated;
        let single = self.probes.len() == 1;
        let measured = summary
            .per_hit_ns
            .filter(|_| summary.verdict == Verdict::Measured);
        if let Some(per_hit) = measured {
            let seconds = summary.seconds_on;
            for probe in &mut self.probes {
                // A single probe carries the whole measured cost exactly: the share
                // own / set would round it (set is own * hits / hits).
                let whole = match (estimated, probe.cost.whole_cost_ns) {
                    _ if single => per_hit.mean,
                    (Some(set), Some(own)) if set > 0.0 => per_hit.mean * own / set,
                    _ => continue,
                };
                probe.cost.whole_cost_ns = Some(whole);
                probe.cost.method = Some(Method::InSitu);
                probe.cost.cpu_share =
                    (seconds > 0.0).then(|| whole * 1e-9 * probe.hits as f64 / seconds);
            }
            self.cost.cpu_share = summary.added_share.map(|s| s.mean);
        }
        self.cost.in_situ = Some(summary);
    }
}

/// An exec of the target that probetop followed: the probes of the program before it
/// stopped firing, those of the new one (if any matched) were attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecReport {
    /// 1 for the first exec; probes attached after it have this generation.
    pub generation: u32,
    /// The program exec'd, as the kernel names it.
    pub exe: String,
    /// When probetop noticed it, unix time in ms.
    pub at_unix_ms: u64,
    /// Probes attached to the new program.
    pub probes_attached: usize,
}

/// Why an export could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    // The io::Error is in the message, so it is not also the error's source: a chain
    // printer would print it twice.
    #[error("cannot write {path}: {error}")]
    Write {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("cannot write {path}: directory {dir} {why}")]
    NoDirectory {
        path: PathBuf,
        dir: PathBuf,
        why: &'static str,
    },
    #[error("cannot write {path}: cannot create a file in {dir}: {error}")]
    Unwritable {
        path: PathBuf,
        dir: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "{path} is a {kind}: probetop writes exports to regular files only; choose another path"
    )]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error(
        "{0} is a symbolic link: probetop does not write exports through links; remove it, choose another path, or pass --force"
    )]
    SymlinkRefused(std::path::PathBuf),
    #[error("unknown export format {0:?}: use .json, .csv, .html, .svg, .hlog, .hgrm or .prom")]
    UnknownFormat(String),
    #[error("cannot encode the {format} export: {reason}")]
    Encode {
        format: &'static str,
        reason: String,
    },
}

/// One file an export produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExportFile {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

/// Whether `path` is a JSON export (the one format that carries `--otlp`'s counts).
pub(crate) fn is_json(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// Renders `report` in the format named by `path`'s extension.
///
/// Every format is one file at `path`, except `.hgrm`: HdrHistogram's plotter reads one
/// distribution per file (it would join several into one curve), so `run.hgrm` becomes
/// one `run.<function>.hgrm` per probe (see [`hgrm`]).
pub(crate) fn render(report: &Report, path: &Path) -> Result<Vec<ExportFile>, ExportError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let one = |bytes: Vec<u8>| {
        vec![ExportFile {
            path: path.to_path_buf(),
            bytes,
        }]
    };
    Ok(match ext.as_str() {
        "json" => one(json::render(report)?),
        "csv" => one(csv::render(report)?),
        "html" | "htm" => one(html::render(report)?),
        "svg" => one(html::render_svg(report)?),
        "hlog" => one(hlog::render(report)?),
        "prom" => one(prometheus::render_prometheus(report).into_bytes()),
        "hgrm" => hgrm::render(report)?
            .into_iter()
            .map(|(tag, bytes)| ExportFile {
                path: with_tag(path, &tag),
                bytes,
            })
            .collect(),
        _ => return Err(ExportError::UnknownFormat(ext)),
    })
}

/// `dir/run.hgrm` -> `dir/run.<tag>.hgrm`.
fn with_tag(path: &Path, tag: &str) -> PathBuf {
    let mut name = OsString::new();
    if let Some(stem) = path.file_stem() {
        name.push(stem);
        name.push(".");
    }
    name.push(tag);
    if let Some(ext) = path.extension() {
        name.push(".");
        name.push(ext);
    }
    path.with_file_name(name)
}

/// A Unix time as UTC calendar fields, for the dates formats print (no time zone
/// database needed, and exports do not depend on the machine's zone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UtcTime {
    pub year: i64,
    /// 1..=12
    pub month: u32,
    /// 1..=31
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Sunday.
    pub weekday: u32,
}

impl UtcTime {
    pub(crate) fn from_unix_ms(ms: u64) -> Self {
        let secs = ms / 1000;
        let days = (secs / 86_400) as i64;
        let rem = secs % 86_400;
        // Howard Hinnant's civil_from_days: days since 1970-01-01 to a proleptic
        // Gregorian date.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Self {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem / 60 % 60) as u32,
            second: (rem % 60) as u32,
            // 1970-01-01 was a Thursday.
            weekday: (days + 4).rem_euclid(7) as u32,
        }
    }

    /// As Java's `Date.toString()` prints it in UTC: `Tue Nov 14 22:13:20 UTC 2023`.
    pub(crate) fn java_date_string(&self) -> String {
        const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        format!(
            "{} {} {:02} {:02}:{:02}:{:02} UTC {}",
            DAYS[self.weekday as usize % 7],
            MONTHS[(self.month as usize + 11) % 12],
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.year
        )
    }

    /// ISO 8601: `2023-11-14 22:13:20 UTC`.
    pub(crate) fn iso(&self) -> String {
        format!(
            "{}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A report with known contents for exporter tests.
    use super::*;
    use crate::histogram::new_ns_histogram;

    /// In situ measured over 7 windows on and 8 off (6 pairs, one process), 20,000 hits
    /// a second while attached: `added_share` of one CPU added, on `base_share`; no work
    /// meter, per-hit figure or churn timing (a test sets those it reads).
    pub(crate) fn in_situ(
        added_share: crate::insitu::Interval,
        base_share: Option<f64>,
    ) -> crate::insitu::InSituSummary {
        crate::insitu::InSituSummary {
            work: crate::insitu::WorkMeter::None,
            windows_on: 7,
            windows_off: 8,
            pairs: 6,
            dropped_pairs: 0,
            processes: (1, 1),
            seconds_on: 7.0,
            seconds_off: 8.0,
            added_share: Some(added_share),
            per_hit_ns: None,
            work_moved: None,
            per_hit_cpu_alone_ns: None,
            hits_per_second: 20_000.0,
            base_share,
            verdict: crate::insitu::Verdict::Measured,
            detach_ms: None,
            attach_ms: None,
            churn_cpu_ms: None,
        }
    }

    pub(crate) fn sample_report() -> Report {
        let mut a = new_ns_histogram();
        for ns in [100, 200, 300, 400, 5000] {
            a.record(ns).expect("in range");
        }
        let mut b = new_ns_histogram();
        b.record_n(1000, 10).expect("in range");
        let probe = |id: u32, kind, name: &str, hist: Histogram<u64>, dropped| ProbeReport {
            mode: crate::delivery::DeliveryMode::Ring,
            moved: None,
            last_args: None,
            threads: Vec::new(),
            processes: Vec::new(),
            threads_cover: crate::aggregate::ThreadsCover::EveryHit,
            threads_dropped: Vec::new(),
            id,
            spec: format!("{kind}:{name}"),
            kind,
            name: name.to_string(),
            resolved: None,
            object: "/usr/bin/fixture".into(),
            address: 0x1139 + id as u64,
            file_offset: 0x1139 + id as u64,
            generation: 0,
            exe: "/usr/bin/fixture".into(),
            hits: hist.len() + dropped,
            dropped,
            intervals: vec![Interval {
                start_s: 0.0,
                length_s: 1.0,
                handler_ns: hist.clone(),
            }],
            handler_ns: hist.into(),
            cost: Default::default(),
            other: None,
        };
        Report {
            target: Target {
                pid: 4242,
                exe: PathBuf::from("/usr/bin/fixture"),
                comm: "fixture".into(),
                cmdline: "fixture --calls 15".into(),
                start_ticks: 123,
                exe_identity: None,
                exec_token: None,
                given_tid: None,
                live_thread: None,
            },
            started_unix_ms: 1_700_000_000_000,
            duration_s: 1.5,
            probes: vec![
                probe(0, ProbeKind::Uprobe, "work_unit", a, 0),
                probe(1, ProbeKind::Uretprobe, "leaf_ret", b, 2),
            ],
            cost: Default::default(),
            execs: Vec::new(),
            attach_path: None,
            skipped: Vec::new(),
            replaced: Vec::new(),
            target_cpu: None,
            target_cpu_error: None,
            budget: None,
            latency: Vec::new(),
            keyed: Vec::new(),
            otlp: None,
        }
    }

    /// The sample report with a latency pair on `work_unit` (probes 0 and 1 as its
    /// halves): 1000 calls of 10 to 19.99 us and one of 2 ms, priced 100 + 200 ns a
    /// call, paired by the aggregator itself.
    pub(crate) fn latency_report() -> Report {
        use crate::aggregate::{DEFAULT_MAX_KEYS, EndPath, Latency, LatencyPrices, PairSetup};
        let mut pairs = Latency::new(
            vec![PairSetup {
                spec: "latency:work_unit".into(),
                name: "work_unit".into(),
                object: "/usr/bin/fixture".into(),
                path: EndPath::Uretprobe,
                starts: vec![0],
                ends: vec![1],
                key: None,
                slot: None,
            }],
            DEFAULT_MAX_KEYS,
        );
        pairs.set_prices(
            0,
            Some(LatencyPrices {
                whole_start: 100.0,
                whole_end: 200.0,
                handler_start: 40.0,
                handler_end: 60.0,
            }),
        );
        let mut clock = 1_000_000_u64;
        for call in 0..1001_u64 {
            let took = if call == 1000 {
                2_000_000
            } else {
                10_000 + call * 10
            };
            // A uretprobe sees the stack pointer 8 above the entry's.
            pairs.record(0, 7, clock, 0x7ff0, None);
            pairs.record(1, 7, clock + took, 0x7ff8, None);
            clock += took + 500;
        }
        let mut report = sample_report();
        report.latency = pairs.rows(report.duration_s);
        report
    }

    /// A harder report: wide value ranges (1 ns to 59 s), counts in the millions, ties
    /// that round differently in Java and Rust, several intervals per probe (one empty),
    /// a probe without hits, one spec expanded to two probes, and an object path with
    /// quotes, a backslash, a comma, a space and a newline.
    pub(crate) fn rich_report() -> Report {
        // A fixed linear congruential generator: deterministic, no extra dependency.
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as f64 / (1u64 << 31) as f64
        };
        let mut log_uniform = |lo: f64, hi: f64| (lo.ln() + next() * (hi / lo).ln()).exp() as u64;

        let mut probes = Vec::new();
        let mut add = |id: u32,
                       kind: ProbeKind,
                       spec: &str,
                       name: &str,
                       object: &str,
                       dropped: u64,
                       intervals: Vec<Histogram<u64>>| {
            let mut whole = new_ns_histogram();
            for h in &intervals {
                whole.add(h).expect("same bounds");
            }
            probes.push(ProbeReport {
                mode: crate::delivery::DeliveryMode::Ring,
                moved: None,
                last_args: None,
                threads: Vec::new(),
                processes: Vec::new(),
                threads_cover: crate::aggregate::ThreadsCover::EveryHit,
                threads_dropped: Vec::new(),
                id,
                spec: spec.into(),
                kind,
                name: name.into(),
                resolved: None,
                object: object.into(),
                address: 0x40_1000 + u64::from(id) * 0x10,
                file_offset: 0x1000 + u64::from(id) * 0x10,
                generation: 0,
                exe: "/usr/bin/fixture".into(),
                hits: whole.len() + dropped,
                dropped,
                intervals: intervals
                    .into_iter()
                    .enumerate()
                    .map(|(i, handler_ns)| Interval {
                        start_s: i as f64,
                        length_s: 1.0,
                        handler_ns,
                    })
                    .collect(),
                handler_ns: whole.into(),
                cost: Default::default(),
                other: None,
            });
        };

        let mut wide = Vec::new();
        for i in 0..3 {
            let mut h = new_ns_histogram();
            for _ in 0..(1000 + i * 500) {
                h.record(log_uniform(1.0, 1e7).max(1)).expect("in range");
            }
            wide.push(h);
        }
        wide[2].record(59_000_000_000).expect("in range");
        add(
            0,
            ProbeKind::Uprobe,
            "uprobe:work_unit",
            "work_unit",
            "/usr/bin/fixture",
            0,
            wide,
        );

        let mut heavy = Vec::new();
        for i in 0..3_u64 {
            let mut h = new_ns_histogram();
            if i != 1 {
                h.record_n(250, 1_000_000 * (i + 1)).expect("in range");
                // Values whose ms and us forms end in 5: half-up (Java) and half-even
                // (Rust) rounding disagree on them.
                for v in [1500, 3500, 2500, 1_000_500] {
                    h.record_n(v, 7 + i).expect("in range");
                }
                for _ in 0..200 {
                    h.record(log_uniform(200.0, 50_000.0)).expect("in range");
                }
            }
            heavy.push(h);
        }
        add(
            1,
            ProbeKind::Uretprobe,
            "uretprobe:libc:malloc",
            "malloc",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            17,
            heavy,
        );

        for (id, name) in [(2, "handle_read"), (3, "handle_write")] {
            let mut intervals = Vec::new();
            for _ in 0..2 {
                let mut h = new_ns_histogram();
                for _ in 0..300 {
                    h.record(log_uniform(800.0, 3_000.0)).expect("in range");
                }
                intervals.push(h);
            }
            add(
                id,
                ProbeKind::Uprobe,
                "uprobe:handle_*",
                name,
                "/usr/bin/fixture",
                0,
                intervals,
            );
        }

        add(
            4,
            ProbeKind::Usdt,
            "usdt:/opt/my app/lib.so:prov:never",
            "prov:never",
            "/opt/my \"app\"\\dir,x/lib\nname.so",
            0,
            vec![new_ns_histogram()],
        );

        // Mean 1.0625 exactly: a tie that Java's %.3f rounds up, Rust's {:.3} down.
        let mut tie = new_ns_histogram();
        tie.record_n(1, 15).expect("in range");
        tie.record(2).expect("in range");
        add(
            5,
            ProbeKind::Uprobe,
            "uprobe:tiny",
            "tiny",
            "/usr/bin/fixture",
            0,
            vec![tie],
        );

        Report {
            target: Target {
                pid: 31337,
                exe: PathBuf::from("/usr/bin/fixture"),
                comm: "fixture".into(),
                cmdline: "fixture --calls 15 --name \"a b\"".into(),
                start_ticks: 456,
                exe_identity: None,
                exec_token: None,
                given_tid: None,
                live_thread: None,
            },
            started_unix_ms: 1_700_000_123_456,
            duration_s: 3.0,
            probes,
            cost: Default::default(),
            execs: Vec::new(),
            attach_path: None,
            skipped: Vec::new(),
            replaced: Vec::new(),
            target_cpu: None,
            target_cpu_error: None,
            budget: None,
            latency: Vec::new(),
            keyed: Vec::new(),
            otlp: None,
        }
    }

    /// What `tests/java/HlogCheck.java` made of an `.hlog`.
    pub(crate) struct JavaCheck {
        /// Per tag: `TAG` line and the Java `.hgrm` text (after a `START` line).
        pub stdout: String,
        /// The log written again by Java's HistogramLogWriter.
        pub rewritten: String,
    }

    /// Runs `tests/java/HlogCheck.java` (Java's HdrHistogram reading `hlog` and writing
    /// it again). Panics with the reason when Java or Maven fail. The commands, by hand:
    ///
    /// ```text
    /// cd probe-user/tests/java
    /// mvn -q -f pom.xml dependency:copy-dependencies -DoutputDirectory=target/lib
    /// java -Duser.timezone=UTC -cp 'target/lib/*' HlogCheck.java FILE.hlog [REWRITTEN.hlog]
    /// ```
    pub(crate) fn java_check(hlog: &[u8]) -> JavaCheck {
        use std::process::Command;
        let java_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java");
        let lib_dir = java_dir.join("target/lib");
        let tmp = std::env::temp_dir();
        let unique = format!("{}-{:?}", std::process::id(), std::thread::current().id())
            .replace(|c: char| !c.is_ascii_alphanumeric(), "");
        let log = tmp.join(format!("probetop-java-check-{unique}.hlog"));
        let rewritten = tmp.join(format!("probetop-java-check-{unique}.java.hlog"));
        std::fs::write(&log, hlog).expect("write temp .hlog");
        // Once per test process: the tests calling this run in parallel, and two Maven
        // runs copying the same jar into one directory collide (seen on a fresh clone).
        static DEPENDENCIES: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
        let copied = DEPENDENCIES.get_or_init(|| {
            let mvn = Command::new("mvn")
                .arg("-q")
                .arg("-f")
                .arg(java_dir.join("pom.xml"))
                .arg("dependency:copy-dependencies")
                .arg(format!("-DoutputDirectory={}", lib_dir.display()))
                .output()
                .map_err(|e| format!("cannot run mvn (Maven 3 on PATH): {e}"))?;
            if mvn.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "mvn dependency:copy-dependencies failed:\n{}{}",
                    String::from_utf8_lossy(&mvn.stdout),
                    String::from_utf8_lossy(&mvn.stderr)
                ))
            }
        });
        if let Err(why) = copied {
            panic!("{why}");
        }
        let java = Command::new("java")
            .arg("-Duser.timezone=UTC")
            .arg("-cp")
            .arg(format!("{}/*", lib_dir.display()))
            .arg(java_dir.join("HlogCheck.java"))
            .arg(&log)
            .arg(&rewritten)
            .output()
            .expect("run java (JDK 11+ on PATH)");
        let rewritten_text = std::fs::read_to_string(&rewritten).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(&rewritten);
        assert!(
            java.status.success(),
            "HlogCheck failed:\n{}",
            String::from_utf8_lossy(&java.stderr)
        );
        JavaCheck {
            stdout: String::from_utf8(java.stdout).expect("utf8 from HlogCheck"),
            rewritten: rewritten_text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::sample_report;
    use super::*;

    #[test]
    fn every_format_renders_by_extension() {
        let report = sample_report();
        for ext in ["json", "csv", "html", "HTML", "svg", "hlog", "prom"] {
            let path = PathBuf::from(format!("out/run.{ext}"));
            let files = render(&report, &path).expect(ext);
            assert_eq!(files.len(), 1, "{ext}");
            assert_eq!(files[0].path, path);
            assert!(!files[0].bytes.is_empty(), "{ext}");
        }
    }

    #[test]
    fn hgrm_is_one_file_per_probe() {
        let files = render(&sample_report(), Path::new("out/run.hgrm")).expect("hgrm");
        let paths: Vec<&Path> = files.iter().map(|f| f.path.as_path()).collect();
        assert_eq!(
            paths,
            [
                Path::new("out/run.work_unit.hgrm"),
                Path::new("out/run.leaf_ret.ret.hgrm")
            ]
        );
    }

    #[test]
    fn unknown_extension_is_an_error() {
        let err = render(&sample_report(), Path::new("run.xlsx")).expect_err("unknown");
        assert!(matches!(err, ExportError::UnknownFormat(ref e) if e == "xlsx"));
        assert!(err.to_string().contains(".hgrm"));
    }

    #[test]
    fn write_creates_every_file() {
        let dir =
            std::env::temp_dir().join(format!("probetop-export-write-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let written = write(&sample_report(), &dir.join("run.hgrm"), false).expect("writes");
        assert_eq!(written.len(), 2);
        for path in &written {
            assert!(std::fs::metadata(path).expect("exists").len() > 0);
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// Writes every format of the rich test report into $PROBETOP_EXPORT_SAMPLES_DIR, to
    /// look at by hand or feed to other tools (promtool, Java, a browser); skipped without
    /// the variable.
    #[test]
    fn write_samples_for_inspection() {
        let Some(dir) = std::env::var_os("PROBETOP_EXPORT_SAMPLES_DIR") else {
            eprintln!("skipped: set PROBETOP_EXPORT_SAMPLES_DIR=DIR to write sample exports");
            return;
        };
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("samples dir");
        let report = super::testing::rich_report();
        for ext in ["json", "csv", "html", "svg", "hlog", "hgrm", "prom"] {
            for path in write(&report, &dir.join(format!("rich.{ext}")), false).expect(ext) {
                eprintln!("wrote {}", path.display());
            }
        }
    }

    #[test]
    fn utc_calendar_fields() {
        let t = UtcTime::from_unix_ms(1_700_000_000_000);
        assert_eq!(t.java_date_string(), "Tue Nov 14 22:13:20 UTC 2023");
        assert_eq!(t.iso(), "2023-11-14 22:13:20 UTC");
        assert_eq!(
            UtcTime::from_unix_ms(0).java_date_string(),
            "Thu Jan 01 00:00:00 UTC 1970"
        );
        // A leap day.
        assert_eq!(
            UtcTime::from_unix_ms(1_709_164_800_000).iso(),
            "2024-02-29 00:00:00 UTC"
        );
    }
}
