//! The stdout summary table read back as a user reads it: rows named function first
//! (the kind in a `K` column, or the title when all are of one kind), cells found under
//! their column's title.

use std::collections::HashMap;

/// One row of the summary table.
#[derive(Debug, Clone)]
pub(crate) struct SummaryRow {
    /// The name as the row shows it (`dispatch_command(…) [sstep]`).
    pub(crate) name: String,
    /// `uprobe`, `uretprobe` or `usdt`: the row's `K` cell, or the title's kind.
    pub(crate) kind: String,
    cells: HashMap<String, String>,
}

impl SummaryRow {
    /// `kind:function` as a spec names it: the name without its parameter list, site
    /// and marks (a keyed row keeps its `[key]`).
    pub(crate) fn spec(&self) -> String {
        let end = self.name.find([' ', '(']).unwrap_or(self.name.len());
        format!("{}:{}", self.kind, &self.name[..end])
    }

    /// The cell under `title` (`HITS`, `COST/HIT`, ...).
    pub(crate) fn cell(&self, title: &str) -> &str {
        self.cells
            .get(title)
            .unwrap_or_else(|| panic!("no {title} column in {self:?}"))
    }

    /// The HITS cell as a number: the exact count.
    pub(crate) fn hits(&self) -> u64 {
        self.cell("HITS")
            .parse()
            .unwrap_or_else(|_| panic!("HITS of {self:?}"))
    }
}

/// The kind a `K` cell or the title (`3 uprobes`, `2 USDT probes`) names.
fn kind_of(word: &str) -> Option<&'static str> {
    match word.trim_end_matches('s') {
        "u" | "uprobe" => Some("uprobe"),
        "ur" | "uretprobe" => Some("uretprobe"),
        "U" | "USDT" => Some("usdt"),
        _ => None,
    }
}

/// The rows of the summary table in `lines` (its header starts with `PROBE`), in the
/// table's order. Every line of the table is as wide as its header; numbers are
/// right-aligned under their titles and never hold a space.
pub(crate) fn summary_rows<S: AsRef<str>>(lines: &[S]) -> Vec<SummaryRow> {
    let lines: Vec<&str> = lines.iter().map(|l| l.as_ref()).collect();
    let Some(at) = lines.iter().position(|l| l.starts_with("PROBE")) else {
        panic!("no summary table in {lines:#?}");
    };
    let header: Vec<char> = lines[at].chars().collect();
    // Each title's (start, end) in characters.
    let mut titles: Vec<(usize, usize, String)> = Vec::new();
    let mut start = None;
    for (i, c) in header.iter().chain(std::iter::once(&' ')).enumerate() {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                titles.push((s, i, header[s..i].iter().collect()));
                start = None;
            }
            _ => {}
        }
    }
    let k_at = titles.iter().find(|t| t.2 == "K").map(|t| t.0);
    let numbers: Vec<&(usize, usize, String)> =
        titles.iter().skip(1).filter(|t| t.2 != "K").collect();
    let title_kind = at
        .checked_sub(1)
        .and_then(|i| lines[i].split_whitespace().nth(1))
        .and_then(kind_of);
    let mut rows = Vec::new();
    for line in &lines[at + 1..] {
        let chars: Vec<char> = line.chars().collect();
        if chars.len() != header.len() {
            break;
        }
        let text = |from: usize, to: usize| -> String { chars[from..to].iter().collect() };
        let first_end = numbers.first().map_or(chars.len(), |t| t.1);
        let (name, kind, numbers_from) = match k_at {
            Some(k) => (
                text(0, k).trim_end().to_string(),
                kind_of(text(k, k + 2).trim()).map(str::to_string),
                k + 2,
            ),
            None => {
                // The first number is the last word before its title's end (in
                // characters: a cut name holds a `…`).
                let cut = chars[..first_end]
                    .iter()
                    .rposition(|c| *c == ' ')
                    .map_or(0, |i| i + 1);
                (
                    text(0, cut).trim_end().to_string(),
                    title_kind.map(str::to_string),
                    cut,
                )
            }
        };
        let mut cells = HashMap::new();
        let mut left = numbers_from;
        for t in &numbers {
            cells.insert(t.2.clone(), text(left, t.1).trim().to_string());
            left = t.1;
        }
        rows.push(SummaryRow {
            name,
            kind: kind.unwrap_or_else(|| panic!("no kind for {line:?}")),
            cells,
        });
    }
    rows
}

/// The summary's headline (`probes' cost to the target: ...`), its wrapped lines joined.
pub(crate) fn summary_headline<S: AsRef<str>>(lines: &[S]) -> String {
    let mut lines = lines.iter().map(|l| l.as_ref());
    let mut text = lines.next().unwrap_or_default().to_string();
    for more in lines.take_while(|l| l.starts_with("  ")) {
        text.push(' ');
        text.push_str(more.trim_start());
    }
    text
}

/// The widest line of `text`, in columns (characters).
pub(crate) fn widest_line(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}
