//! JSON export. The fields below are a stable interface for scripts: add, never rename.

use serde::Serialize;

use super::{ExportError, Report};
use crate::aggregate::HandlerSummary;
use crate::spec::ProbeKind;

#[derive(Serialize)]
struct JsonTarget<'a> {
    pid: u32,
    exe: &'a std::path::Path,
    comm: &'a str,
    cmdline: &'a str,
}

#[derive(Serialize)]
struct JsonProbe<'a> {
    id: u32,
    spec: &'a str,
    kind: ProbeKind,
    name: &'a str,
    object: &'a str,
    address: u64,
    file_offset: u64,
    /// `ring`, `sample` or `kernel`: how hits reached probetop at the end.
    mode: &'static str,
    hits: u64,
    dropped: u64,
    handler_ns: HandlerSummary,
    /// Argument values of the last hit that captured any (`--args`); null where a read
    /// faulted.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_args: Option<&'a [Option<u64>]>,
    /// Records received per thread: `{"tid": count}`.
    threads: std::collections::BTreeMap<String, u64>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    tool: &'static str,
    version: &'static str,
    target: JsonTarget<'a>,
    started_unix_ms: u64,
    duration_s: f64,
    probes: Vec<JsonProbe<'a>>,
}

pub fn render(report: &Report) -> Result<Vec<u8>, ExportError> {
    let doc = JsonReport {
        tool: "probetop",
        version: env!("CARGO_PKG_VERSION"),
        target: JsonTarget {
            pid: report.target.pid,
            exe: &report.target.exe,
            comm: &report.target.comm,
            cmdline: &report.target.cmdline,
        },
        started_unix_ms: report.started_unix_ms,
        duration_s: report.duration_s,
        probes: report
            .probes
            .iter()
            .map(|p| JsonProbe {
                id: p.id,
                spec: &p.spec,
                kind: p.kind,
                name: &p.name,
                object: &p.object,
                address: p.address,
                file_offset: p.file_offset,
                mode: match p.mode {
                    probe_common::mode::SAMPLE => "sample",
                    probe_common::mode::KERNEL_HISTOGRAM => "kernel",
                    _ => "ring",
                },
                hits: p.hits,
                dropped: p.dropped,
                handler_ns: HandlerSummary::of(&p.handler_ns),
                last_args: p.last_args.as_deref(),
                threads: p
                    .threads
                    .iter()
                    .map(|(tid, n)| (tid.to_string(), *n))
                    .collect(),
            })
            .collect(),
    };
    let mut out = serde_json::to_vec_pretty(&doc).map_err(|e| ExportError::Encode {
        format: "json",
        reason: e.to_string(),
    })?;
    out.push(b'\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::testing::sample_report;
    use super::*;

    #[test]
    fn schema_fields_and_values() {
        let bytes = render(&sample_report()).expect("renders");
        let v: serde_json::Value = serde_json::from_slice(&bytes).expect("valid JSON");
        assert_eq!(v["target"]["pid"], 4242);
        assert_eq!(v["duration_s"], 1.5);
        let probes = v["probes"].as_array().expect("probes array");
        assert_eq!(probes.len(), 2);
        let p = &probes[0];
        assert_eq!(p["spec"], "uprobe:work_unit");
        assert_eq!(p["kind"], "uprobe");
        assert_eq!(p["hits"], 5);
        assert_eq!(p["dropped"], 0);
        let h = &p["handler_ns"];
        for field in ["count", "min", "mean", "p50", "p90", "p99", "p999", "max"] {
            assert!(h.get(field).is_some(), "handler_ns.{field} missing");
        }
        assert_eq!(h["count"], 5);
        assert_eq!(h["min"], 100);
        assert_eq!(h["p50"], 300);
        assert_eq!(probes[1]["kind"], "uretprobe");
        assert_eq!(probes[1]["hits"], 12);
        assert_eq!(probes[1]["dropped"], 2);
    }
}
