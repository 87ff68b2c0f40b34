//! `.csv`: one row per probe, for spreadsheets and scripts.
//!
//! RFC 4180: a header row, CRLF line ends, fields quoted when they hold a comma, a quote,
//! CR or LF, quotes doubled. The columns are a stable interface (add at the end, never
//! rename or reorder):
//!
//! `id,spec,kind,name,object,address,file_offset,hits,dropped,count,min,mean,p50,p90,p99,p999,max,generation,exe,owner`
//!
//! Handler times are nanoseconds, from the probe's whole-run histogram (3 significant
//! digits); `mean` has up to 3 decimals, the rest are integers. `address` and `file_offset`
//! are `0x` hex, as tools print addresses. A probe without hits has `count` 0 and every
//! time 0, as in the JSON export. `generation` and `exe` say which program the probe was
//! attached to (the JSON export's fields of those names; `--follow-exec`). `owner` is empty
//! for probetop's own probes and `TOOL PID` (`TOOL` alone without a pid: tracefs) for
//! another tool's probe that probetop counted.

use std::fmt::Write as _;

use super::{ExportError, Report};
use crate::aggregate::HandlerSummary;

pub const HEADER: [&str; 20] = [
    "id",
    "spec",
    "kind",
    "name",
    "object",
    "address",
    "file_offset",
    "hits",
    "dropped",
    "count",
    "min",
    "mean",
    "p50",
    "p90",
    "p99",
    "p999",
    "max",
    "generation",
    "exe",
    "owner",
];

/// `TOOL PID` of another tool's probe; empty for probetop's own.
fn owner(p: &super::ProbeReport) -> String {
    let Some(site) = &p.other else {
        return String::new();
    };
    match site.owner.pid {
        Some(pid) => format!("{} {pid}", site.owner.tool),
        None => site.owner.tool.clone(),
    }
}

pub fn render(report: &Report) -> Result<Vec<u8>, ExportError> {
    let mut out = String::new();
    write_record(&mut out, HEADER.iter().map(|h| h.to_string()));
    for p in &report.probes {
        let s = HandlerSummary::of(&p.handler_ns);
        write_record(
            &mut out,
            [
                p.id.to_string(),
                p.spec.clone(),
                p.kind.to_string(),
                p.name.clone(),
                p.object.clone(),
                format!("{:#x}", p.address),
                format!("{:#x}", p.file_offset),
                p.hits.to_string(),
                p.dropped.to_string(),
                s.count.to_string(),
                s.min.to_string(),
                mean(s.mean),
                s.p50.to_string(),
                s.p90.to_string(),
                s.p99.to_string(),
                s.p999.to_string(),
                s.max.to_string(),
                p.generation.to_string(),
                p.exe.clone(),
                owner(p),
            ],
        );
    }
    Ok(out.into_bytes())
}

/// The mean to 3 decimals without trailing zeros: `1200.6`, `1000`.
fn mean(ns: f64) -> String {
    let fixed = format!("{ns:.3}");
    let trimmed = fixed.trim_end_matches('0').trim_end_matches('.');
    trimmed.to_string()
}

fn write_record(out: &mut String, fields: impl IntoIterator<Item = String>) {
    for (i, field) in fields.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if field.contains([',', '"', '\r', '\n']) {
            let _ = write!(out, "\"{}\"", field.replace('"', "\"\""));
        } else {
            out.push_str(&field);
        }
    }
    out.push_str("\r\n");
}

#[cfg(test)]
mod tests {
    use super::super::testing::{rich_report, sample_report};
    use super::*;

    fn parse(bytes: &[u8]) -> Vec<Vec<String>> {
        // The `csv` crate, an independent RFC 4180 reader.
        ::csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(bytes)
            .records()
            .map(|r| r.expect("valid CSV").iter().map(str::to_string).collect())
            .collect()
    }

    #[test]
    fn sample_rows_exactly() {
        let text = String::from_utf8(render(&sample_report()).expect("renders")).expect("utf8");
        assert_eq!(
            text,
            "id,spec,kind,name,object,address,file_offset,hits,dropped,count,min,mean,p50,p90,p99,p999,max,generation,exe,owner\r\n\
             0,uprobe:work_unit,uprobe,work_unit,/usr/bin/fixture,0x1139,0x1139,5,0,5,100,1200.4,300,5003,5003,5003,5003,0,/usr/bin/fixture,\r\n\
             1,uretprobe:leaf_ret,uretprobe,leaf_ret,/usr/bin/fixture,0x113a,0x113a,12,2,10,1000,1000,1000,1000,1000,1000,1000,0,/usr/bin/fixture,\r\n"
        );
    }

    #[test]
    fn another_tools_probe_names_its_owner() {
        let mut report = sample_report();
        report.probes[1].other = Some(crate::attach::others::OtherSite {
            owner: crate::attach::others::Owner {
                pid: Some(77),
                comm: Some("bpftrace".into()),
                tool: "bpftrace".into(),
            },
            returns: true,
            file: "/usr/bin/fixture".into(),
            offset: 0x113a,
            ref_ctr_offset: 0,
            prog_id: Some(9),
            event: None,
            counted: true,
        });
        let rows = parse(&render(&report).expect("renders"));
        assert_eq!(rows[1][19], "");
        assert_eq!(rows[2][19], "bpftrace 77");
    }

    #[test]
    fn round_trip_through_a_csv_reader() {
        let report = rich_report();
        let rows = parse(&render(&report).expect("renders"));
        assert_eq!(rows[0], HEADER);
        assert_eq!(rows.len(), report.probes.len() + 1);
        for (row, p) in rows[1..].iter().zip(&report.probes) {
            let s = HandlerSummary::of(&p.handler_ns);
            assert_eq!(row.len(), HEADER.len());
            assert_eq!(row[0], p.id.to_string());
            assert_eq!(row[1], p.spec);
            assert_eq!(row[2], p.kind.as_str());
            assert_eq!(row[3], p.name);
            // Quotes, a comma, a backslash and a newline survive.
            assert_eq!(row[4], p.object);
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
            assert_eq!(hex(&row[5]), p.address);
            assert_eq!(hex(&row[6]), p.file_offset);
            let num = |i: usize| row[i].parse::<u64>().expect("integer");
            assert_eq!(num(7), p.hits);
            assert_eq!(num(8), p.dropped);
            assert_eq!(
                [num(9), num(10), num(12), num(13), num(14), num(15), num(16)],
                [s.count, s.min, s.p50, s.p90, s.p99, s.p999, s.max]
            );
            let mean: f64 = row[11].parse().expect("mean");
            assert!((mean - s.mean).abs() <= 0.0005);
            assert_eq!(num(17), u64::from(p.generation));
            assert_eq!(row[18], p.exe);
        }
    }

    #[test]
    fn quoting_follows_rfc_4180() {
        let mut out = String::new();
        write_record(
            &mut out,
            ["plain", "a,b", "say \"hi\"", "two\nlines", ""].map(String::from),
        );
        assert_eq!(out, "plain,\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\",\r\n");
    }
}
