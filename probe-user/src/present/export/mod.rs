//! Exports: what a run measured, written to files for reports.
//!
//! Every format renders one [`Report`], a self-contained copy of the measurements, so
//! exporters are pure functions and can be tested without probes.

use std::path::Path;

use hdrhistogram::Histogram;

use crate::spec::ProbeKind;
use crate::target::Target;

pub mod json;

/// The measurements of one probe over a run.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    /// Probe id (the BPF cookie), unique within the run.
    pub id: u32,
    /// The spec the user wrote that produced this probe.
    pub spec: String,
    pub kind: ProbeKind,
    /// Resolved symbol or `provider:name`.
    pub name: String,
    pub object: String,
    pub address: u64,
    pub file_offset: u64,
    /// Hits the probe took: records received plus records dropped.
    pub hits: u64,
    pub dropped: u64,
    /// Handler time of every received hit, ns.
    pub handler_ns: Histogram<u64>,
    /// Handler time per interval, oldest first (for interval logs and time series).
    pub intervals: Vec<Interval>,
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
}

/// Why an export could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("unknown export format {0:?}: use .json")]
    UnknownFormat(String),
    #[error("cannot encode the {format} export: {reason}")]
    Encode {
        format: &'static str,
        reason: String,
    },
}

/// Renders `report` in the format named by `path`'s extension.
pub fn render(report: &Report, path: &Path) -> Result<Vec<u8>, ExportError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    match ext.as_str() {
        "json" => json::render(report),
        _ => Err(ExportError::UnknownFormat(ext)),
    }
}

/// Renders `report` and writes it to `path`.
pub fn write(report: &Report, path: &Path) -> Result<(), ExportError> {
    let bytes = render(report, path)?;
    std::fs::write(path, bytes).map_err(|source| ExportError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
pub(crate) mod testing {
    //! A report with known contents for exporter tests.
    use super::*;
    use crate::aggregate::new_ns_histogram;
    use std::path::PathBuf;

    pub fn sample_report() -> Report {
        let mut a = new_ns_histogram();
        for ns in [100, 200, 300, 400, 5000] {
            a.record(ns).expect("in range");
        }
        let mut b = new_ns_histogram();
        b.record_n(1000, 10).expect("in range");
        let probe = |id: u32, kind, name: &str, hist: Histogram<u64>, dropped| ProbeReport {
            id,
            spec: format!("{kind}:{name}"),
            kind,
            name: name.to_string(),
            object: "/usr/bin/fixture".into(),
            address: 0x1139 + id as u64,
            file_offset: 0x1139 + id as u64,
            hits: hist.len() + dropped,
            dropped,
            intervals: vec![Interval {
                start_s: 0.0,
                length_s: 1.0,
                handler_ns: hist.clone(),
            }],
            handler_ns: hist,
        };
        Report {
            target: Target {
                pid: 4242,
                exe: PathBuf::from("/usr/bin/fixture"),
                comm: "fixture".into(),
                cmdline: "fixture --calls 15".into(),
                start_ticks: 123,
                exe_identity: None,
            },
            started_unix_ms: 1_700_000_000_000,
            duration_s: 1.5,
            probes: vec![
                probe(0, ProbeKind::Uprobe, "work_unit", a, 0),
                probe(1, ProbeKind::Uretprobe, "leaf_ret", b, 2),
            ],
        }
    }
}
