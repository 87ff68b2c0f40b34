//! The end-of-run table printed by headless runs.

use std::fmt::Write as _;

use super::answer;
use super::export::Report;
use super::headline;
use super::names;
use super::{ProbeLabel, format};
use crate::present::Snapshot;

/// The summary's width at most: what an ssh terminal or a mail shows whole. Names are
/// fitted to it ([`names::row_names`]: parameter lists dropped first, never cut in the
/// middle while the function name fits) and the handler's least read columns left out.
pub(crate) const WIDTH: usize = 100;

/// The name column's share kept before handler columns are left out: a C++ method's
/// qualified name and its mark (`Prepared_statement::execute_loop [sstep]`).
const NAME_WANT: usize = 40;

/// The narrowest name column: a function name's start and its mark.
const NAME_MIN: usize = 12;

const HEADERS: [&str; 13] = [
    "PROBE", "COST/HIT", "%CPU", "HITS", "HITS/S", "DROPS", "MIN", "P50", "P90", "P99", "P99.9",
    "MAX", "MEAN",
];
/// Where the handler's columns start in [`HEADERS`].
const HANDLER_FROM: usize = 6;
/// The handler's columns left out when the width runs short, a group at a time, in the
/// order the TUI hides them (P90 and MEAN, then MIN and P99.9, then MAX); P50 and P99
/// stay.
const LEFT_OUT_FIRST: [&[usize]; 3] = [&[8, 12], &[6, 10], &[11]];

/// What a row of the table is: a probe, or one key of a keyed probe under it.
enum Row {
    Probe(usize),
    Keyed(usize, String),
}

/// Renders the run's headline (with `--in-situ`, its reconciled answer), then one row
/// per probe: what a hit cost the target and the share of one CPU its hits took, hits,
/// the average rate over the run (under `--in-situ`, over the time attached), drops,
/// then the BPF handler's own time percentiles (a part of the cost). The costs are the
/// report's (in situ where measured); a probe without hits shows `-` where it has no
/// number. Rows are named as the TUI names them: function first, the kind once (a `K`
/// column when kinds are mixed, else the title), in at most [`WIDTH`] columns.
pub(crate) fn table(labels: &[ProbeLabel], snapshot: &Snapshot, report: Option<&Report>) -> String {
    let run_s = snapshot.elapsed.as_secs_f64();
    let in_situ = report.and_then(|r| r.cost.in_situ.as_ref());
    // Under --in-situ hits come only while the probes are attached: rates over that.
    let seconds = in_situ.map_or(run_s, |s| answer::attached_seconds(s, run_s));
    // A share over the run becomes one over the attached time, as in situ's own are.
    let share = |c: &crate::present::ProbeCostReport| match c.method {
        Some(crate::present::Method::InSitu) => c.cpu_share,
        _ => c.cpu_share.map(|s| s * run_s / seconds),
    };
    // Each probe's row, and its keyed rows under it, as groups put in cost order.
    let mut groups: Vec<Vec<(Row, Vec<String>)>> = Vec::with_capacity(snapshot.probes.len());
    let mut order_keys: Vec<(Option<f64>, u64, String)> = Vec::with_capacity(groups.capacity());
    for (id, (label, probe)) in labels.iter().zip(&snapshot.probes).enumerate() {
        let cost = report
            .and_then(|r| r.probes.get(id))
            .map(|p| &p.cost)
            .filter(|_| probe.hits > 0);
        order_keys.push((
            cost.and_then(|c| c.cpu_share),
            probe.hits,
            label.full_name(),
        ));
        let mut group = Vec::new();
        let mut cells = vec![
            cost.and_then(|c| c.whole_cost_ns)
                .map_or_else(|| "-".into(), format::ns_f),
            cost.and_then(share)
                .map_or_else(|| "-".into(), headline::share_text),
            probe.hits.to_string(),
            format::count(if seconds > 0.0 {
                probe.hits as f64 / seconds
            } else {
                0.0
            }),
            probe.dropped.to_string(),
        ];
        if probe.handler.count == 0 {
            cells.extend(std::iter::repeat_n("-".to_string(), 7));
        } else {
            cells.extend(format::handler_cells(&probe.handler));
        }
        group.push((Row::Probe(id), cells));
        // A keyed probe's hits per key, under it: `name[key]`.
        for (_, keyed) in snapshot.keyed.iter().filter(|(k, _)| *k == id as u32) {
            let part = keyed.hits as f64 / probe.hits.max(1) as f64;
            let mut cells = vec![
                cost.and_then(|c| c.whole_cost_ns)
                    .map_or_else(|| "-".into(), format::ns_f),
                cost.and_then(share)
                    .map_or_else(|| "-".into(), |s| headline::share_text(s * part)),
                keyed.hits.to_string(),
                format::count(if seconds > 0.0 {
                    keyed.hits as f64 / seconds
                } else {
                    0.0
                }),
                "-".into(),
            ];
            if keyed.handler_ns.count == 0 {
                cells.extend(std::iter::repeat_n("-".to_string(), 7));
            } else {
                cells.extend(format::handler_cells(&keyed.handler_ns));
            }
            group.push((Row::Keyed(id, keyed.key.as_str().to_string()), cells));
        }
        groups.push(group);
    }
    let rows: Vec<(Row, Vec<String>)> = cost_order(&order_keys)
        .into_iter()
        .flat_map(|at| std::mem::take(&mut groups[at]))
        .collect();

    // The names as a row shows them: one line each (no control bytes), the retired
    // program's mark after the name.
    let shown: Vec<ProbeLabel> = labels
        .iter()
        .map(|l| ProbeLabel {
            display: l.full_name(),
            ..l.clone()
        })
        .collect();
    let kinds = names::shows_kinds(labels);
    let kind_width = if kinds { 3 } else { 0 };
    let probe_ids: Vec<usize> = rows
        .iter()
        .filter_map(|(r, _)| match r {
            Row::Probe(id) => Some(*id),
            Row::Keyed(..) => None,
        })
        .collect();
    let name_cells = |room: usize| -> Vec<String> {
        let mut probes = names::row_names_with(
            &shown,
            &probe_ids,
            room,
            |_| String::new(),
            names::fit_name_at_boundaries,
        )
        .into_iter();
        rows.iter()
            .map(|(r, _)| match r {
                Row::Probe(_) => probes.next().unwrap_or_default(),
                Row::Keyed(id, key) => {
                    let room = room.saturating_sub(key.chars().count() + 2);
                    keyed_name(
                        &names::fit_name_at_boundaries(&shown[*id].display, room),
                        key,
                    )
                }
            })
            .collect()
    };
    let natural = widest(&name_cells(usize::MAX / 2), HEADERS[0]);

    // The handler's columns the width keeps beside a readable name.
    let numbers: Vec<Vec<String>> =
        std::iter::once(HEADERS[1..].iter().map(|h| h.to_string()).collect())
            .chain(rows.iter().map(|(_, cells)| cells.clone()))
            .collect();
    let readable = shown
        .iter()
        .map(|l| names::readable_width(&l.display))
        .max()
        .unwrap_or(0);
    let (kept, room) = kept_columns(
        &column_widths(&numbers),
        &LEFT_OUT_FIRST,
        natural.min(readable.max(NAME_WANT)),
        kind_width,
    );
    let name_room = natural.min(room.max(NAME_MIN));
    let names = name_cells(name_room);
    let name_width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .max(HEADERS[0].len());

    // The table: names (and kinds) first, then the kept columns.
    let first = |name: &str, kind: &str| {
        if kinds {
            format!("{name:<name_width$} {kind:<2}")
        } else {
            name.to_string()
        }
    };
    let mut table: Vec<Vec<String>> = Vec::with_capacity(rows.len() + 1);
    let keep = |cells: &[String], first: String| -> Vec<String> {
        std::iter::once(first)
            .chain(
                cells
                    .iter()
                    .enumerate()
                    .filter(|&(col, _)| kept[col + 1])
                    .map(|(_, c)| c.clone()),
            )
            .collect()
    };
    table.push(keep(&numbers[0], first(HEADERS[0], "K")));
    for ((row, cells), name) in rows.iter().zip(&names) {
        let id = match row {
            Row::Probe(id) | Row::Keyed(id, _) => *id,
        };
        table.push(keep(cells, first(name, names::kind_mark(labels[id].kind))));
    }
    let widths = column_widths(&table);
    let handler_from = 1 + kept[1..HANDLER_FROM].iter().filter(|&&k| k).count();

    let mut out = String::new();
    if let Some(report) = report {
        // With --in-situ, the reconciled answer: which number, and why.
        let headline = format!(
            "probes' cost to the target: {}",
            answer::headline_text(report)
        );
        wrap_into(&mut out, &headline);
    }
    // The title: how many probes of which kind, and the handler's columns under their
    // own heading, above them.
    let handler_at: usize = widths[..handler_from].iter().map(|w| w + 2).sum::<usize>() - 2;
    let handler_width: usize = widths[handler_from..].iter().map(|w| w + 2).sum::<usize>();
    let heading = [
        "handler: the BPF program's own time per hit (part of COST/HIT)",
        "handler: the BPF program's own time per hit",
        "handler (BPF program)",
        "BPF handler",
    ]
    .into_iter()
    .find(|h| h.len() + 2 <= handler_width)
    .unwrap_or("handler");
    let title = probes_title(labels, kinds);
    let _ = writeln!(
        out,
        "{title:<handler_at$}  {heading}",
        handler_at = handler_at.max(title.len())
    );
    push_rows(&mut out, &table, &widths);
    left_out_line(&mut out, &HEADERS, &kept, "handler ");
    if let Some(s) = in_situ.filter(|s| s.seconds_off > 0.0) {
        wrap_into(&mut out, &answer::rates_note(s, run_s));
    }
    let (timed, counted) = snapshot
        .probes
        .iter()
        .filter(|p| p.mode == crate::delivery::DeliveryMode::KernelHistogram)
        .fold((0, 0), |(t, c), p| (t + p.handler.count, c + p.hits));
    if timed < counted {
        wrap_into(
            &mut out,
            &format!(
                "in-kernel probes: every hit counted, handler times from {} of them drawn at random (--time-every; 1 times every hit)",
                format::percent(timed as f64 / counted as f64)
            ),
        );
    }
    out
}

/// Which columns to keep beside a name column `want` wide (and `extra` columns more) in
/// [`WIDTH`]: `widths` are the number columns' (column 1 on), `groups` what to leave out
/// first (as column indexes), a group at a time. Returns the columns kept (column 0,
/// the name, always) and the room left for the name.
fn kept_columns(
    widths: &[usize],
    groups: &[&[usize]],
    want: usize,
    extra: usize,
) -> (Vec<bool>, usize) {
    let mut kept = vec![true; widths.len() + 1];
    let room = |kept: &[bool]| {
        let numbers: usize = widths
            .iter()
            .enumerate()
            .filter(|&(col, _)| kept[col + 1])
            .map(|(_, w)| w + 2)
            .sum();
        WIDTH.saturating_sub(numbers + extra)
    };
    for group in groups {
        if room(&kept) >= want {
            break;
        }
        for &col in *group {
            kept[col] = false;
        }
    }
    let room = room(&kept);
    (kept, room)
}

/// `cells` with only the `kept` columns.
fn keep_columns(cells: &[String], kept: &[bool]) -> Vec<String> {
    cells
        .iter()
        .zip(kept)
        .filter(|(_, k)| **k)
        .map(|(c, _)| c.clone())
        .collect()
}

/// The line naming the columns left out, if any.
fn left_out_line(out: &mut String, headers: &[&str], kept: &[bool], what: &str) {
    let left_out: Vec<&str> = headers
        .iter()
        .zip(kept)
        .filter(|(_, k)| !**k)
        .map(|(h, _)| *h)
        .collect();
    if !left_out.is_empty() {
        wrap_into(
            out,
            &format!(
                "{what}{} left out to fit {WIDTH} columns (--export keeps every column)",
                left_out.join(", ")
            ),
        );
    }
}

/// `text`'s words, a `quoted command` as one.
fn unbroken(text: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let mut open = false;
    for word in text.split(' ') {
        match words.last_mut() {
            Some(last) if open => {
                last.push(' ');
                last.push_str(word);
            }
            _ => words.push(word.to_string()),
        }
        if word.matches('`').count() % 2 == 1 {
            open = !open;
        }
    }
    words
}

/// The table's title: `3 uprobes` when all are of one kind (the rows then show none),
/// else `5 probes` (and a `K` column).
fn probes_title(labels: &[ProbeLabel], kinds: bool) -> String {
    let noun = match labels.first().map(|l| l.kind) {
        Some(kind) if !kinds => match kind {
            crate::spec::ProbeKind::Uprobe => "uprobe",
            crate::spec::ProbeKind::Uretprobe => "uretprobe",
            crate::spec::ProbeKind::Usdt => "USDT probe",
        },
        _ => "probe",
    };
    let plural = if labels.len() == 1 { "" } else { "s" };
    format!("{} {noun}{plural}", labels.len())
}

/// Appends `text` in lines of at most [`WIDTH`] columns, broken at spaces; the lines
/// after the first indented by two.
fn wrap_into(out: &mut String, text: &str) {
    let mut line = String::new();
    let mut words = 0;
    for word in unbroken(text) {
        if words > 0 && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = "  ".to_string();
            words = 0;
        }
        if words > 0 {
            line.push(' ');
        }
        line.push_str(&word);
        words += 1;
    }
    out.push_str(&line);
    out.push('\n');
}

/// The order probes are reported in, the answer first: probes with hits by the share of
/// one CPU they cost the target, dearest first, then those without a price by their
/// hits; ties by name, then as given; probes without hits last, by name. `probes`: each
/// one's (share of a CPU, hits, name). The summary table, the HTML report's and the
/// end-of-run cost lines share it.
pub(crate) fn cost_order(probes: &[(Option<f64>, u64, String)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..probes.len()).collect();
    order.sort_by(|&a, &b| {
        let ((share_a, hits_a, name_a), (share_b, hits_b, name_b)) = (&probes[a], &probes[b]);
        (*hits_a == 0)
            .cmp(&(*hits_b == 0))
            .then_with(|| match (share_a, share_b) {
                (Some(x), Some(y)) => y.total_cmp(x),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => hits_b.cmp(hits_a),
            })
            .then_with(|| name_a.cmp(name_b))
            .then(a.cmp(&b))
    });
    order
}

/// A keyed row's name: the key after the probe's name, before its marks
/// (`uprobe:f[3] [sstep]`).
fn keyed_name(full: &str, key: &str) -> String {
    match full.find(" [") {
        Some(at) => format!("{}[{key}]{}", &full[..at], &full[at..]),
        None => format!("{full}[{key}]"),
    }
}

/// The latency table's columns.
const LATENCY_HEADERS: [&str; 13] = [
    "LATENCY",
    "CALLS",
    "CALLS/S",
    "P50",
    "P90",
    "P99",
    "P99.9",
    "MAX",
    "CORR P50",
    "CORR MEAN",
    "COST/CALL",
    "OVERHEAD",
    "RETURNS",
];
/// What the latency table leaves out first when the width runs short: how returns were
/// taken, P90 and P99.9, the corrected median, then the maximum.
const LATENCY_LEFT_OUT_FIRST: [&[usize]; 4] = [&[12], &[4, 6], &[8], &[7]];

/// Renders one row per latency pair: calls, the rate over `seconds`, the latency as
/// measured and as corrected for the probes' own cost, the probes' whole cost per call
/// and its share of the corrected mean, then how its returns were taken. `attached_s`,
/// under `--in-situ`: the seconds the probes were attached, which calls are counted
/// in, so the rate is over them as the probes' HITS/S is (not the whole run's, about
/// half). Named as the probes' rows are (function first, parameter lists dropped
/// first; a key after the name; the object only where two rows would read the same),
/// in at most [`WIDTH`] columns.
pub(crate) fn latency_table(
    rows: &[crate::aggregate::LatencyRow],
    seconds: f64,
    attached_s: Option<f64>,
) -> String {
    let mut table: Vec<Vec<String>> = vec![LATENCY_HEADERS.iter().map(|h| h.to_string()).collect()];
    for row in rows {
        let rate = if let Some(attached) = attached_s.filter(|&a| a > 0.0) {
            row.calls as f64 / attached
        } else if row.calls_per_second > 0.0 {
            row.calls_per_second
        } else if seconds > 0.0 {
            row.calls as f64 / seconds
        } else {
            0.0
        };
        let (m, c) = (&row.latency_ns, &row.latency_corrected_ns);
        let has = m.count > 0;
        let cell = |v: u64| if has { format::ns(v) } else { "-".into() };
        // A pair `--budget` detached for good counted a few calls: no rate nor share.
        let shed = |cell: String| if row.shed { "shed".into() } else { cell };
        table.push(vec![
            String::new(),
            row.calls.to_string(),
            shed(format::count(rate)),
            cell(m.p50),
            cell(m.p90),
            cell(m.p99),
            cell(m.p999),
            cell(m.max),
            cell(c.p50),
            if has {
                format::ns_f(c.mean)
            } else {
                "-".into()
            },
            row.whole_cost_ns.map_or_else(|| "-".into(), format::ns_f),
            shed(format::Overhead::of(row).cell()),
            row.path.as_str().to_string(),
        ]);
    }
    // Names: `latency:` keeps a USDT pair's provider in the name, not the kind.
    let displays: Vec<String> = rows
        .iter()
        .map(|r| sys_one_line(&format!("latency:{}", r.name)))
        .collect();
    // The object, where two rows of one name and key come from two objects.
    let suffixes: Vec<String> = rows
        .iter()
        .map(|r| {
            let twin = rows
                .iter()
                .any(|o| o.name == r.name && o.key == r.key && o.object != r.object);
            let object = std::path::Path::new(&r.object)
                .file_name()
                .map_or_else(|| r.object.clone(), |f| f.to_string_lossy().into_owned());
            let key = r
                .key
                .as_ref()
                .map_or_else(String::new, |k| format!("[{}]", sys_one_line(k.as_str())));
            if twin {
                format!("{key} ({object})")
            } else {
                key
            }
        })
        .collect();
    let name_cells = |room: usize| -> Vec<String> {
        displays
            .iter()
            .zip(&suffixes)
            .map(|(d, suffix)| {
                let room = room.saturating_sub(suffix.chars().count());
                format!("{}{suffix}", names::fit_name_at_boundaries(d, room))
            })
            .collect()
    };
    let natural = widest(&name_cells(usize::MAX / 2), LATENCY_HEADERS[0]);
    let readable = displays
        .iter()
        .zip(&suffixes)
        .map(|(d, suffix)| names::readable_width(d) + suffix.chars().count())
        .max()
        .unwrap_or(0);
    let numbers: Vec<Vec<String>> = table.iter().map(|r| r[1..].to_vec()).collect();
    let (kept, room) = kept_columns(
        &column_widths(&numbers),
        &LATENCY_LEFT_OUT_FIRST,
        natural.min(readable.max(NAME_WANT)),
        0,
    );
    let names = name_cells(natural.min(room.max(NAME_MIN)));
    for (row, name) in table[1..].iter_mut().zip(&names) {
        row[0] = name.clone();
    }
    table[0][0] = LATENCY_HEADERS[0].to_string();
    let table: Vec<Vec<String>> = table.iter().map(|r| keep_columns(r, &kept)).collect();
    let mut out = render_rows(&table);
    for (row, name) in rows.iter().zip(&names) {
        if row.open + row.unwound + row.unmatched + row.overflowed > 0 {
            wrap_into(
                &mut out,
                &format!(
                    "{name}: {} open at the end, {} unwound (an exception or longjmp), {} ended before the window, {} too deep to track",
                    row.open, row.unwound, row.unmatched, row.overflowed
                ),
            );
        }
    }
    if !rows.is_empty() {
        left_out_line(&mut out, &LATENCY_HEADERS, &kept, "");
        if let Some(attached) = attached_s {
            wrap_into(
                &mut out,
                &format!(
                    "CALLS/S over the {attached:.1} s the probes were attached (--in-situ detached them the rest)"
                ),
            );
        }
        wrap_into(
            &mut out,
            "CORR: less the probes' own cost inside each call (the entry's hit and every probed hit in it)",
        );
    }
    out
}

/// `text` on one line, without control bytes: a name read from the target.
fn sys_one_line(text: &str) -> String {
    crate::sys::stderr::one_line(text).into_owned()
}

/// Rows of cells, the first column left-aligned, the others right-aligned.
fn render_rows(rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    push_rows(&mut out, rows, &column_widths(rows));
    out
}

/// Each column's width: its widest cell, in characters.
fn column_widths(rows: &[Vec<String>]) -> Vec<usize> {
    let columns = rows.first().map_or(0, Vec::len);
    (0..columns)
        .map(|col| {
            rows.iter()
                .map(|r| r[col].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// Appends `rows` to `out` in columns of `widths`, two spaces apart: the first column
/// (a name) left-aligned, the others (numbers) right-aligned.
fn push_rows(out: &mut String, rows: &[Vec<String>], widths: &[usize]) {
    for row in rows {
        for (col, cell) in row.iter().enumerate() {
            let width = widths[col];
            let _ = if col == 0 {
                write!(out, "{cell:<width$}")
            } else {
                write!(out, "  {cell:>width$}")
            };
        }
        out.push('\n');
    }
}

/// The width of the widest of `cells` and their column's `header`, in characters.
fn widest(cells: &[String], header: &str) -> usize {
    cells
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .max(header.chars().count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::HandlerSummary;
    use crate::present::ProbeSnapshot;
    use crate::spec::ProbeKind;

    #[test]
    fn aligned_rows() {
        let labels = vec![ProbeLabel::new(ProbeKind::Uprobe, "work_unit", "/bin/w")];
        let snapshot = Snapshot {
            elapsed: std::time::Duration::from_secs(4),
            probes: vec![ProbeSnapshot {
                mode: crate::delivery::DeliveryMode::Ring,
                hits: 100_000,
                dropped: 0,
                per_second: 0.0,
                handler: HandlerSummary {
                    count: 100_000,
                    min: 90,
                    mean: 250.4,
                    p50: 240,
                    p90: 300,
                    p99: 1200,
                    p999: 5000,
                    max: 30_000,
                },
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = table(&labels, &snapshot, None);
        assert!(text.starts_with("1 uprobe "), "{text}");
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("PROBE"));
        assert!(lines[1].starts_with("work_unit "), "{text}");
        assert!(lines[1].contains("100000"));
        assert!(lines[1].contains("1.20us"));
        assert!(lines[1].contains("25.0k"), "average rate: {}", lines[1]);
        assert_eq!(lines[0].len(), lines[1].len());
        // A probe without hits: `-` for its times, never 0ns.
        let mut idle = snapshot.clone();
        idle.probes[0].hits = 0;
        idle.probes[0].handler = HandlerSummary::default();
        let text = table(&labels, &idle, None);
        let row = text.lines().nth(2).expect("row");
        assert!(!row.contains("0ns"), "{row}");
        assert_eq!(
            row.split_whitespace().filter(|c| *c == "-").count(),
            9,
            "{row}"
        );
        // Unpriced, no report: `-` under the cost columns.
        let text = table(&labels, &snapshot, None);
        let cells: Vec<&str> = text
            .lines()
            .nth(2)
            .expect("row")
            .split_whitespace()
            .collect();
        assert_eq!(&cells[1..3], ["-", "-"]);
    }

    #[test]
    fn probes_are_reported_dearest_first_and_without_hits_last() {
        let probes = |rows: &[(Option<f64>, u64, &str)]| -> Vec<(Option<f64>, u64, String)> {
            rows.iter()
                .map(|(s, h, n)| (*s, *h, n.to_string()))
                .collect()
        };
        // Spec order: a probe without hits, a cheap one, two tied, the dearest.
        let order = cost_order(&probes(&[
            (None, 0, "uprobe:main"),
            (Some(0.001), 500, "uprobe:leaf"),
            (Some(0.02), 900, "uprobe:zeta"),
            (Some(0.02), 100, "uprobe:alpha"),
            (Some(0.05), 10, "uprobe:dear"),
        ]));
        assert_eq!(order, [4, 3, 2, 1, 0]);
        // No calibration: no share, so by hits; ties by name; no hits last by name.
        let order = cost_order(&probes(&[
            (None, 0, "uprobe:b"),
            (None, 10, "uprobe:few"),
            (None, 0, "uprobe:a"),
            (None, 3000, "uprobe:many"),
            (None, 10, "uprobe:else"),
        ]));
        assert_eq!(order, [3, 4, 1, 2, 0]);
    }

    #[test]
    fn the_table_reads_in_cost_order() {
        use crate::present::export::ProbeReport;
        let labels: Vec<ProbeLabel> = ["main", "work_unit", "leaf_ret"]
            .iter()
            .map(|n| ProbeLabel::new(ProbeKind::Uprobe, n, "/bin/w"))
            .collect();
        let mut snapshot = Snapshot {
            elapsed: std::time::Duration::from_secs(4),
            probes: vec![ProbeSnapshot::default(); 3],
            ..Default::default()
        };
        snapshot.probes[1].hits = 4000;
        snapshot.probes[2].hits = 8000;
        let mut report = crate::present::export::testing::sample_report();
        report.probes = (0..3)
            .map(|id| {
                let mut p: ProbeReport = report.probes[0].clone();
                p.id = id;
                p.hits = snapshot.probes[id as usize].hits;
                p.cost.whole_cost_ns = Some(1000.0);
                p.cost.cpu_share = Some(p.hits as f64 * 1e-6 / 4.0);
                p
            })
            .collect();
        let text = table(&labels, &snapshot, Some(&report));
        let names: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("PROBE"))
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(names, ["leaf_ret", "work_unit", "main"], "{text}");
    }

    /// A `THD::*`-like set: long C++ signatures, entries and a return, two overloads,
    /// millions of hits and microsecond handler times.
    fn cpp_set() -> (Vec<ProbeLabel>, Snapshot) {
        let mut labels: Vec<ProbeLabel> = (0..30)
            .map(|n| {
                let kind = if n == 3 {
                    ProbeKind::Uretprobe
                } else {
                    ProbeKind::Uprobe
                };
                let mark = if n % 2 == 0 { " [sstep]" } else { "" };
                let mut label = ProbeLabel::new(
                    kind,
                    &format!(
                        "THD::set_n_backup_active_arena_{n}(Query_arena*, Query_arena*, st_mysql_const_lex_string const*, bool){mark}"
                    ),
                    "/usr/sbin/mariadbd",
                );
                label.site = Some(0x1000 + n as u64);
                label
            })
            .collect();
        for (at, params) in [
            (
                0x2a10,
                "(Item*, st_mysql_const_lex_string const*, bool, bool, bool, bool)",
            ),
            (
                0x2b20,
                "(Item_func*, unsigned long long, bool, bool, bool, bool)",
            ),
        ] {
            let mut label = ProbeLabel::new(
                ProbeKind::Uprobe,
                &format!("THD::set_overloaded{params}"),
                "/usr/sbin/mariadbd",
            );
            label.site = Some(at);
            labels.push(label);
        }
        let handler = HandlerSummary {
            count: 1_234_567,
            min: 190,
            mean: 3456.7,
            p50: 2_340,
            p90: 12_300,
            p99: 45_600,
            p999: 123_000,
            max: 1_230_000,
        };
        let snapshot = Snapshot {
            elapsed: std::time::Duration::from_secs(100),
            probes: (0..labels.len())
                .map(|n| ProbeSnapshot {
                    mode: crate::delivery::DeliveryMode::Ring,
                    hits: 1_234_567 - n as u64,
                    handler,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        (labels, snapshot)
    }

    #[test]
    fn a_cpp_set_fits_the_width_named_function_first() {
        let (labels, snapshot) = cpp_set();
        let mut report = crate::present::export::testing::sample_report();
        let template = report.probes[0].clone();
        report.probes = (0..labels.len())
            .map(|n| {
                let mut p = template.clone();
                p.id = n as u32;
                p.hits = snapshot.probes[n].hits;
                p.cost.whole_cost_ns = Some(12_345.6);
                p.cost.cpu_share = Some(0.123);
                p
            })
            .collect();
        let text = table(&labels, &snapshot, Some(&report));
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?} in\n{text}");
        }
        let lines: Vec<&str> = text.lines().collect();
        let header = lines
            .iter()
            .position(|l| l.starts_with("PROBE"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(lines[header - 1].starts_with("32 probes "), "{text}");
        // Kinds are mixed: a K column, `ur` on the return's row only.
        let k_at = lines[header].find(" K ").expect("a K column") + 1;
        let k_at = lines[header][..k_at].chars().count();
        let rows = &lines[header + 1..header + 1 + labels.len()];
        let kinds: Vec<String> = rows
            .iter()
            .map(|r| {
                r.chars()
                    .skip(k_at)
                    .take(2)
                    .collect::<String>()
                    .trim()
                    .to_string()
            })
            .collect();
        assert_eq!(kinds.iter().filter(|k| **k == "ur").count(), 1, "{text}");
        assert_eq!(kinds.iter().filter(|k| **k == "u").count(), 31, "{text}");
        // Each row's function whole at its start; the parameter lists went first.
        for n in 0..30 {
            let name = format!("THD::set_n_backup_active_arena_{n}");
            assert!(
                rows.iter().any(|r| r
                    .strip_prefix(&name)
                    .is_some_and(|rest| rest.starts_with([' ', '(']))),
                "{name} in\n{text}"
            );
        }
        // The overloads read apart by their sites.
        for site in ["@0x2a10", "@0x2b20"] {
            assert!(
                rows.iter()
                    .any(|r| r.starts_with("THD::set_overloaded(…) @") && r.contains(site)),
                "{site} in\n{text}"
            );
        }
        // The handler's columns left out are named.
        assert!(text.contains(" left out to fit 100 columns"), "{text}");
        let titles: Vec<&str> = lines[header].split_whitespace().collect();
        assert!(titles.contains(&"P50") && titles.contains(&"P99"), "{text}");
        // The exact counts stay.
        assert!(rows.iter().any(|r| r.contains(" 1234567 ")), "{text}");
    }

    #[test]
    fn short_names_keep_most_handler_columns() {
        let (_, snapshot) = cpp_set();
        let labels: Vec<ProbeLabel> = ["do_command", "mysql_parse"]
            .iter()
            .map(|n| ProbeLabel::new(ProbeKind::Uprobe, n, "/usr/sbin/mariadbd"))
            .collect();
        let snapshot = Snapshot {
            probes: snapshot.probes[..2].to_vec(),
            ..snapshot
        };
        let text = table(&labels, &snapshot, None);
        assert!(text.starts_with("2 uprobes "), "{text}");
        assert!(
            text.contains("\nhandler P90, MEAN left out to fit 100 columns"),
            "{text}"
        );
        let header = text.lines().nth(1).unwrap_or_default();
        for title in ["MIN", "P50", "P99", "P99.9", "MAX"] {
            assert!(header.split_whitespace().any(|t| t == title), "{text}");
        }
        assert!(
            text.lines()
                .nth(2)
                .unwrap_or_default()
                .starts_with("do_command "),
            "{text}"
        );
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?} in\n{text}");
        }
        // No K column: the title names the one kind.
        assert!(
            !text.lines().nth(1).unwrap_or_default().contains(" K "),
            "{text}"
        );
    }

    #[test]
    fn long_lines_wrap_at_spaces() {
        let mut out = String::new();
        let words = vec!["word"; 40].join(" ");
        wrap_into(&mut out, &words);
        let lines: Vec<&str> = out.lines().collect();
        // 20 words (99 columns), 19 after the indent, the last.
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines.iter().all(|l| l.len() <= WIDTH), "{out}");
        assert!(lines[1].starts_with("  word"), "{out}");
        assert_eq!(out.split_whitespace().count(), 40);
    }

    #[test]
    fn a_latency_row_shows_its_latency_cost_and_share() {
        let summary = |p50| HandlerSummary {
            count: 300,
            min: p50 - 100,
            mean: p50 as f64,
            p50,
            p90: p50 + 100,
            p99: p50 + 200,
            p999: p50 + 300,
            max: p50 + 400,
        };
        let row = crate::aggregate::LatencyRow {
            spec: "latency:spin".into(),
            name: "spin".into(),
            key: None,
            object: "/bin/w".into(),
            path: crate::aggregate::EndPath::RetUprobes,
            starts: vec![0],
            ends: vec![1],
            calls: 300,
            calls_per_second: 150.0,
            open: 0,
            unwound: 2,
            unmatched: 0,
            overflowed: 0,
            latency_ns: summary(20_600),
            corrected_applied: true,
            latency_corrected_ns: summary(20_000),
            whole_cost_ns: Some(1_000.0),
            overhead_share: Some(0.05),
            shed: false,
            latency_hist: hdrhistogram::Histogram::new(3).expect("3 digits"),
            corrected_hist: hdrhistogram::Histogram::new(3).expect("3 digits"),
        };
        let text = latency_table(std::slice::from_ref(&row), 2.0, None);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("LATENCY"), "{text}");
        for cell in ["300", "150", "20.6us", "20.0us", "5.0%"] {
            assert!(lines[1].contains(cell), "{cell:?} in {text}");
        }
        // The name alone: one object, no need to name it.
        assert!(lines[1].starts_with("spin "), "{text}");
        assert!(!text.contains("/bin/w"), "{text}");
        assert_eq!(lines[0].len(), lines[1].len());
        assert!(lines[2].contains("2 unwound"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
        // How returns were taken goes first when the width runs short, said so.
        assert!(
            text.contains("\nP90, P99.9, RETURNS left out to fit 100 columns"),
            "{text}"
        );
        assert!(!text.contains("CALLS/S over the"), "{text}");

        // Under --in-situ the calls came in the 1.2 s attached: 250 a second, said so.
        let text = latency_table(std::slice::from_ref(&row), 2.0, Some(1.2));
        let lines: Vec<&str> = text.lines().collect();
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(&cells[1..3], ["300", "250"], "{text}");
        assert!(
            lines.contains(
                &"CALLS/S over the 1.2 s the probes were attached (--in-situ detached them the rest)"
            ),
            "{text}"
        );

        // A C++ signature keyed by command, and one name in two objects (a pair
        // followed through an exec): the function first, the key whole, the objects
        // named where the rows would read the same.
        let signature = "dispatch_command(enum_server_command, THD*, char*, unsigned int, bool)";
        let keyed = crate::aggregate::LatencyRow {
            name: signature.into(),
            spec: format!("latency:{signature}"),
            key: Some(crate::aggregate::RowKey::Value("COM_STMT_EXECUTE".into())),
            ..row.clone()
        };
        let other = crate::aggregate::LatencyRow {
            object: "/usr/bin/other".into(),
            ..row.clone()
        };
        let text = latency_table(&[keyed, row, other], 2.0, None);
        assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
        let names: Vec<&str> = text.lines().skip(1).take(3).collect();
        assert!(
            names[0].starts_with("dispatch_command[COM_STMT_EXECUTE] "),
            "{text}"
        );
        assert!(names[1].starts_with("spin (w) "), "{text}");
        assert!(names[2].starts_with("spin (other) "), "{text}");
    }
}
