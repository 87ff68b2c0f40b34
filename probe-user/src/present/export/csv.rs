//! `.csv`: one row per probe, for spreadsheets and scripts.
//!
//! RFC 4180: a header row, CRLF line ends, fields quoted when they hold a comma, a quote,
//! CR or LF, quotes doubled. The columns are a stable interface (add at the end, never
//! rename or reorder):
//!
//! `id,spec,kind,name,object,address,file_offset,hits,dropped,count,min,mean,p50,p90,p99,p999,max,generation,exe,owner,whole_cost_ns,cpu_share,cost_method,run_cpu_share,run_target_own_cpu_share,run_per_hit_ns,run_cost_method,calls,corrected_min,corrected_mean,corrected_p50,corrected_p90,corrected_p99,corrected_p999,corrected_max,overhead_share,end_path,open,unwound,unmatched,run_of_target_cpu,run_target_cpu_share`
//!
//! Handler times are nanoseconds, from the probe's whole-run histogram (3 significant
//! digits); `mean` has up to 3 decimals, the rest are integers. `address` and `file_offset`
//! are `0x` hex, as tools print addresses. A probe without hits has `count` 0 and its
//! times and cost empty (CSV's missing value: a spreadsheet reads it as blank, where a
//! `0` would read as a measured time). `generation` and `exe` say which program the probe was
//! attached to (the JSON export's fields of those names; `--follow-exec`). `owner` is empty
//! for probetop's own probes and `TOOL PID` (`TOOL` alone without a pid: tracefs) for
//! another tool's probe that probetop counted.
//!
//! `whole_cost_ns` is what one hit cost the target in all (trap, kernel, BPF program,
//! return; the handler times above are the BPF program's own part of it), `cpu_share`
//! the share of one CPU the probe's hits cost it (0.01: 1%), `cost_method` `estimate`,
//! `in-situ` or `none`. The `run_` columns repeat the run's headline on every row: all
//! probes together as a share of one CPU, the target's own CPU, the cost per hit over
//! every probe, and how it was obtained (per-probe costs do not add up exactly to the
//! set's: read `run_cpu_share`); where the target's own CPU is too small or too
//! uncertain to set the cost against, `run_target_own_cpu_share` is empty and
//! `run_of_target_cpu` the probes' share of its whole CPU (0.9: 90% of what it ran, the
//! JSON's `of_target_cpu`); `run_target_cpu_share` its whole CPU as measured, probes
//! included, share of one CPU.
//!
//! A `latency:` pair is a row of its own after the probes' (as in the JSON's `probes`),
//! of `kind` `latency`: `id`, `address`, `file_offset`, `dropped` and the probe-only
//! columns empty; `hits` and `calls` its calls paired; `count` to `max` every call's
//! latency as measured, ns (from the start probe's clock read to the end probe's), and
//! `corrected_min` to `corrected_max` the same less the probes' cost inside the call;
//! `whole_cost_ns` both probes' whole cost per call, `overhead_share` that over the
//! corrected mean latency; `end_path` how the returns were probed (`uretprobe`,
//! `ret-uprobes`, `usdt`); `open`, `unwound`, `unmatched` the calls not paired, as in
//! the JSON. These columns are empty on a probe's row.

use std::fmt::Write as _;

use super::{ExportError, Report};
use crate::aggregate::HandlerSummary;

pub(crate) const HEADER: [&str; 42] = [
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
    "whole_cost_ns",
    "cpu_share",
    "cost_method",
    "run_cpu_share",
    "run_target_own_cpu_share",
    "run_per_hit_ns",
    "run_cost_method",
    "calls",
    "corrected_min",
    "corrected_mean",
    "corrected_p50",
    "corrected_p90",
    "corrected_p99",
    "corrected_p999",
    "corrected_max",
    "overhead_share",
    "end_path",
    "open",
    "unwound",
    "unmatched",
    "run_of_target_cpu",
    "run_target_cpu_share",
];

/// The `calls` to `unmatched` columns, empty on a probe's row.
const LATENCY_ONLY: usize = 13;

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

pub(crate) fn render(report: &Report) -> Result<Vec<u8>, ExportError> {
    let mut out = String::new();
    write_record(&mut out, HEADER.iter().map(|h| h.to_string()));
    let headline = crate::present::headline::Headline::of_report(report);
    for p in &report.probes {
        let s = HandlerSummary::of(&p.handler_ns);
        let time = |ns: u64| {
            if s.count == 0 {
                String::new()
            } else {
                ns.to_string()
            }
        };
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
                time(s.min),
                if s.count == 0 {
                    String::new()
                } else {
                    mean(s.mean)
                },
                time(s.p50),
                time(s.p90),
                time(s.p99),
                time(s.p999),
                time(s.max),
                p.generation.to_string(),
                p.exe.clone(),
                owner(p),
                p.cost.whole_cost_ns.map_or_else(String::new, mean),
                float(p.cost.cpu_share),
                crate::present::headline::probe_method(&p.cost).to_string(),
                float(headline.cpu_share),
                float(headline.target_own),
                headline.per_hit_ns.map_or_else(String::new, mean),
                headline.method.as_str().to_string(),
            ]
            .into_iter()
            .chain(std::iter::repeat_n(String::new(), LATENCY_ONLY))
            .chain(run_target(&headline)),
        );
    }
    for row in &report.latency {
        let m = row.latency_ns;
        let c = row.latency_corrected_ns;
        // No call ended: no time (empty), as for a probe without hits.
        let times = |s: HandlerSummary| -> [String; 7] {
            if s.count == 0 {
                Default::default()
            } else {
                [
                    s.min.to_string(),
                    mean(s.mean),
                    s.p50.to_string(),
                    s.p90.to_string(),
                    s.p99.to_string(),
                    s.p999.to_string(),
                    s.max.to_string(),
                ]
            }
        };
        let [min, avg, p50, p90, p99, p999, max] = times(m);
        let priced = row.whole_cost_ns.is_some();
        write_record(
            &mut out,
            [
                String::new(),
                row.spec.clone(),
                crate::spec::LATENCY.to_string(),
                row.display_name(),
                row.object.clone(),
                String::new(),
                String::new(),
                row.calls.to_string(),
                String::new(),
                m.count.to_string(),
                min,
                avg,
                p50,
                p90,
                p99,
                p999,
                max,
                String::new(),
                String::new(),
                String::new(),
                row.whole_cost_ns.map_or_else(String::new, mean),
                String::new(),
                if priced { "estimate" } else { "none" }.to_string(),
                float(headline.cpu_share),
                float(headline.target_own),
                headline.per_hit_ns.map_or_else(String::new, mean),
                headline.method.as_str().to_string(),
                row.calls.to_string(),
            ]
            .into_iter()
            .chain(times(c))
            .chain([
                float(row.overhead_share),
                row.path.as_str().to_string(),
                row.open.to_string(),
                row.unwound.to_string(),
                row.unmatched.to_string(),
            ])
            .chain(run_target(&headline)),
        );
    }
    Ok(out.into_bytes())
}

/// A number as Rust prints it in full; empty when there is none.
fn float(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v}"))
}

/// The headline's `run_of_target_cpu` and `run_target_cpu_share`.
fn run_target(headline: &crate::present::headline::Headline) -> [String; 2] {
    [float(headline.of_target), float(headline.target_cpu)]
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
            "id,spec,kind,name,object,address,file_offset,hits,dropped,count,min,mean,p50,p90,p99,p999,max,generation,exe,owner,\
             whole_cost_ns,cpu_share,cost_method,run_cpu_share,run_target_own_cpu_share,run_per_hit_ns,run_cost_method,\
             calls,corrected_min,corrected_mean,corrected_p50,corrected_p90,corrected_p99,corrected_p999,corrected_max,\
             overhead_share,end_path,open,unwound,unmatched,run_of_target_cpu,run_target_cpu_share\r\n\
             0,uprobe:work_unit,uprobe,work_unit,/usr/bin/fixture,0x1139,0x1139,5,0,5,100,1200.4,300,5003,5003,5003,5003,0,/usr/bin/fixture,,,,none,,,,none,,,,,,,,,,,,,,,\r\n\
             1,uretprobe:leaf_ret,uretprobe,leaf_ret,/usr/bin/fixture,0x113a,0x113a,12,2,10,1000,1000,1000,1000,1000,1000,1000,0,/usr/bin/fixture,,,,none,,,,none,,,,,,,,,,,,,,,\r\n"
        );
    }

    #[test]
    fn a_latency_row_follows_the_probes() {
        let report = super::super::testing::latency_report();
        let rows = parse(&render(&report).expect("renders"));
        let col = |name: &str| HEADER.iter().position(|h| *h == name).expect("column");
        assert_eq!(rows.len(), 1 + report.probes.len() + 1);
        let row = &rows[rows.len() - 1];
        let l = &report.latency[0];
        assert_eq!(row.len(), HEADER.len());
        assert_eq!(
            [&row[col("id")], &row[col("spec")], &row[col("kind")]],
            ["", "latency:work_unit", "latency"]
        );
        assert_eq!(row[col("calls")], l.calls.to_string());
        assert_eq!(row[col("hits")], l.calls.to_string());
        assert_eq!(row[col("count")], l.calls.to_string());
        for (name, value) in [
            ("p50", l.latency_ns.p50),
            ("max", l.latency_ns.max),
            ("corrected_p50", l.latency_corrected_ns.p50),
            ("corrected_p999", l.latency_corrected_ns.p999),
            ("corrected_max", l.latency_corrected_ns.max),
        ] {
            assert_eq!(row[col(name)], value.to_string(), "{name}");
        }
        assert_eq!(row[col("whole_cost_ns")], "300");
        let share: f64 = row[col("overhead_share")].parse().expect("share");
        assert_eq!(Some(share), l.overhead_share);
        assert_eq!(row[col("end_path")], "uretprobe");
        assert_eq!(row[col("cost_method")], "estimate");
        // A probe's row leaves the latency columns empty.
        assert!(rows[1][col("calls")..].iter().all(String::is_empty));
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
            shape: None,
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
            assert_eq!(num(9), s.count);
            if s.count == 0 {
                // No hits: no time, no cost (empty, CSV's missing value), never 0.
                assert!(row[10..17].iter().all(String::is_empty), "{row:?}");
                assert_eq!((row[20].as_str(), row[21].as_str()), ("", ""));
            } else {
                assert_eq!(
                    [num(10), num(12), num(13), num(14), num(15), num(16)],
                    [s.min, s.p50, s.p90, s.p99, s.p999, s.max]
                );
                let mean: f64 = row[11].parse().expect("mean");
                assert!((mean - s.mean).abs() <= 0.0005);
            }
            assert_eq!(num(17), u64::from(p.generation));
            assert_eq!(row[18], p.exe);
        }
    }

    #[test]
    fn cost_columns_carry_each_probe_and_the_headline() {
        let mut report = sample_report();
        report.probes[0].cost.whole_cost_ns = Some(2000.0);
        report.probes[0].cost.cpu_share = Some(0.03);
        report.probes[0].cost.method = Some(crate::present::Method::Calibration);
        report.target_cpu = Some(0.2);
        let rows = parse(&render(&report).expect("renders"));
        let col = |name: &str| HEADER.iter().position(|h| *h == name).expect("column");
        assert_eq!(rows[1][col("whole_cost_ns")], "2000");
        assert_eq!(rows[1][col("cpu_share")], "0.03");
        assert_eq!(rows[1][col("cost_method")], "estimate");
        assert_eq!(rows[2][col("whole_cost_ns")], "");
        for row in &rows[1..] {
            assert_eq!(row[col("run_cpu_share")], "0.03");
            // The target's 20% less the probes' 3%.
            let own: f64 = row[col("run_target_own_cpu_share")].parse().expect("own");
            assert!((own - 0.17).abs() < 1e-9, "{own}");
            assert_eq!(row[col("run_per_hit_ns")], "2000");
            assert_eq!(row[col("run_cost_method")], "estimate");
            assert_eq!(row[col("run_target_cpu_share")], "0.2");
            assert_eq!(row[col("run_of_target_cpu")], "");
        }
        // A target that is mostly the probes: their share of its whole CPU instead.
        report.target_cpu = Some(0.031);
        let rows = parse(&render(&report).expect("renders"));
        for row in &rows[1..] {
            assert_eq!(row[col("run_target_own_cpu_share")], "");
            let whole: f64 = row[col("run_of_target_cpu")].parse().expect("of target");
            assert!((whole - 0.03 / 0.031).abs() < 1e-9, "{whole}");
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
