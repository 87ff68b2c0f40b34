//! `probetop --all`: one row per process whose objects carry user-space probes of any
//! tool, as the `--no-tui` table, the TUI's list and the JSON export (`processes`).

use std::fmt::Write as _;

use serde::Serialize;

use super::format;
use crate::attach::others::{Owner, ReportedShape};

/// One process with probes armed in it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct ProcessRow {
    pub pid: u32,
    pub comm: String,
    /// Probe sites armed in it now (at the end of the run: every one counted in it).
    pub probes: usize,
    /// Hits counted in it since probetop started counting there.
    pub hits: u64,
    /// Over the last interval (TUI), or over the time counted (table and export).
    pub hits_per_s: f64,
    /// What a hit costs it on average, ns: the trap of each site's class plus every
    /// owner's program, weighted by hits (unweighted while nothing hit).
    pub whole_cost_ns: Option<f64>,
    /// hits/s x whole cost: the share of one CPU the probes take from it.
    pub cpu_share: Option<f64>,
    /// The process's own CPU time over the same time, as a share of one CPU.
    pub process_cpu: Option<f64>,
    /// `cpu_share / process_cpu`: how much of the process's CPU its probes are.
    pub share_of_process: Option<f64>,
    /// Every tool with a probe armed in it.
    pub owners: Vec<Owner>,
    /// The process exited while probetop ran (its row keeps what was counted).
    pub exited: bool,
    /// Seconds its probes were counted.
    pub seconds: f64,
    pub sites: Vec<SiteRow>,
}

/// One probed site in a process.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct SiteRow {
    pub kind: String,
    pub name: String,
    pub object: String,
    pub hits: u64,
    pub whole_cost_ns: Option<f64>,
    /// `calibrated-trap-and-owner-program`, or `not-priced` without a calibration.
    pub whole_cost_method: &'static str,
    pub owners: Vec<SiteOwner>,
    /// The owners' probes went while probetop ran (its hits are kept).
    pub gone: bool,
}

/// An owner of a site's probe, with a tracefs event's shape (`fetch_args`,
/// `instances`) as a `--pid` run's probe rows carry it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SiteOwner {
    #[serde(flatten)]
    pub owner: Owner,
    #[serde(flatten)]
    pub shape: Option<ReportedShape>,
}

impl ProcessRow {
    /// The owners as one cell: `bpftrace 1234, tracefs`.
    pub(crate) fn owners_cell(&self) -> String {
        owners_text(&self.owners)
    }

    /// The comm with the process's state.
    pub(crate) fn name_cell(&self) -> String {
        let comm = crate::sys::stderr::one_line(&self.comm).into_owned();
        if self.exited {
            format!("{comm} (exited)")
        } else {
            comm
        }
    }
}

/// Owners as `bpftrace 1234, tracefs`.
pub(crate) fn owners_text(owners: &[Owner]) -> String {
    owners
        .iter()
        .map(|o| match o.pid {
            Some(pid) => format!("{} {pid}", o.tool),
            None => o.tool.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Sorted as top sorts: by CPU share, then hits/s, then pid.
pub(crate) fn sort(rows: &mut [ProcessRow]) {
    rows.sort_by(|a, b| {
        let share = |r: &ProcessRow| r.cpu_share.unwrap_or(0.0);
        share(b)
            .total_cmp(&share(a))
            .then(b.hits_per_s.total_cmp(&a.hits_per_s))
            .then(a.pid.cmp(&b.pid))
    });
}

/// The cells of a row, in [`HEADERS`] order.
pub(crate) fn cells(row: &ProcessRow) -> [String; 9] {
    let opt_percent = |v: Option<f64>| v.map_or_else(|| "-".into(), format::percent);
    [
        row.pid.to_string(),
        row.name_cell(),
        row.probes.to_string(),
        row.hits.to_string(),
        format::count(row.hits_per_s),
        row.whole_cost_ns.map_or_else(|| "-".into(), format::ns_f),
        opt_percent(row.cpu_share),
        opt_percent(row.share_of_process),
        row.owners_cell(),
    ]
}

/// Column titles.
pub(crate) const HEADERS: [&str; 9] = [
    "PID", "COMM", "PROBES", "HITS", "HITS/S", "COST/HIT", "CPU", "OF PROC", "OWNERS",
];

/// The `--no-tui` table: a header and one line per process.
pub(crate) fn table(rows: &[ProcessRow]) -> String {
    let mut lines: Vec<Vec<String>> = vec![HEADERS.iter().map(|h| h.to_string()).collect()];
    lines.extend(rows.iter().map(|r| cells(r).to_vec()));
    let widths: Vec<usize> = (0..HEADERS.len())
        .map(|col| {
            lines
                .iter()
                .map(|l| l[col].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &lines {
        let mut text = String::new();
        for (col, cell) in line.iter().enumerate() {
            // Numbers right-aligned, names and owners left.
            let _ = match col {
                1 | 8 => write!(text, "{cell:<w$}  ", w = widths[col]),
                _ => write!(text, "{cell:>w$}  ", w = widths[col]),
            };
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// The export: `{"processes": [...], "seconds", "started_unix_ms"}`.
#[derive(Debug, Serialize)]
pub(crate) struct HostReport<'a> {
    pub started_unix_ms: u64,
    pub seconds: f64,
    /// How hits were counted and costs priced, for scripts.
    pub hits_method: &'static str,
    pub processes: &'a [ProcessRow],
}

/// The JSON of `report`.
pub(crate) fn json(report: &HostReport<'_>) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec_pretty(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pid: u32, share: Option<f64>, hits_per_s: f64) -> ProcessRow {
        ProcessRow {
            pid,
            comm: format!("p{pid}"),
            hits_per_s,
            cpu_share: share,
            owners: vec![Owner {
                pid: Some(7),
                comm: Some("bpftrace".into()),
                tool: "bpftrace".into(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn rows_sort_like_top_and_print_with_their_owners() {
        let mut rows = vec![
            row(3, None, 50.0),
            row(1, Some(0.01), 10.0),
            row(2, Some(0.2), 5.0),
        ];
        sort(&mut rows);
        let pids: Vec<u32> = rows.iter().map(|r| r.pid).collect();
        assert_eq!(pids, vec![2, 1, 3]);
        let text = table(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("PID"), "{text}");
        assert!(lines[1].contains("bpftrace 7"), "{text}");
        assert!(lines[1].trim_start().starts_with("2 "), "{text}");
        assert_eq!(table(&[]).lines().count(), 1);
    }
}
