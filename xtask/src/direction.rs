//! The direction of probe-user's imports: each top-level module may use only the modules
//! below it in [`LAYERS`] (leaves, then `insitu`, then the pipeline's stages in import
//! order, resolve, attach, calibrate, aggregate, price, stream, present, and `session`
//! on top). Every
//! `crate::` path in probe-user/src (comments aside) is an edge; an edge upwards is a
//! back-edge, and fails the check unless docs/architecture.md lists it as a known
//! exception. An exception that no longer occurs fails too, so the list only shrinks as
//! modules move.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use anyhow::{Context as _, Result, bail};

/// probe-user's top-level modules, lowest first. The leaves use only leaves: `sys`
/// (raw syscalls, the stderr writer), `spec` (what a probe is: `ProbeKind`,
/// `ProbeSpec`), the delivery mode, the shared nanosecond histogram and the parsed ring
/// record, `stats`, and what a probed instruction is (`insn`). In the pipeline, `stream`
/// (the collector, which owns the ring buffer, drives the aggregator and has each
/// snapshot priced) sits above `aggregate` (pure state it feeds) and `price`.
const LAYERS: &[&str] = &[
    "sys",
    "privileges",
    "target",
    "spec",
    "delivery",
    "histogram",
    "record",
    "stats",
    // What a probed instruction is (cost class, decoding, later sites): read by
    // resolve, `probetop list` and price.
    "insn",
    // The in-situ measurement: the target's own CPU time, nothing of the pipeline.
    "insitu",
    "preset",
    "resolve",
    "attach",
    // `probetop calibrate`'s runner (attaches programs, reads records) and the
    // calibration table it fills, which price reads.
    "calibrate",
    "aggregate",
    // Prices what aggregate measured, with calibrate's table.
    "price",
    "stream",
    "present",
    "cli",
    "manual",
    // Says a broken pipe of `manual`'s writers quietly.
    "error_line",
    "session",
    // The `probetop` command whole (lib.rs's `main`): parses, runs a session, exits.
    "run",
];

/// The crate root's own items (lib.rs: `UsageError`, ...) may be used from anywhere.
const ROOT_FILES: &[&str] = &["lib.rs", "main.rs"];

const BEGIN_MARK: &str = "<!-- BEGIN direction exceptions (checked by cargo xtask lint) -->";
const END_MARK: &str = "<!-- END direction exceptions -->";

/// `from -> to` with how many `crate::` paths make it.
pub(crate) type Edges = BTreeMap<(String, String), usize>;

/// Fails with one line per new back-edge, stale exception or unplaced module.
pub(crate) fn check(root: &Path) -> Result<()> {
    let edges = edges(&root.join("probe-user/src"))?;
    let doc = root.join("docs/architecture.md");
    let text = fs::read_to_string(&doc).with_context(|| format!("reading {}", doc.display()))?;
    let allowed = exceptions(&text).with_context(|| format!("in {}", doc.display()))?;
    let problems = judge(&edges, &allowed);
    if !problems.is_empty() {
        bail!(
            "probe-user's import direction (docs/architecture.md, \"The direction of imports\"):\n  {}",
            problems.join("\n  ")
        );
    }
    println!(
        "direction: {} module edges, {} known back-edges, no new one",
        edges.len(),
        allowed.len()
    );
    Ok(())
}

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|m| *m == module)
}

/// What is wrong: back-edges not in `allowed`, `allowed` entries that no longer occur,
/// modules missing from [`LAYERS`].
fn judge(edges: &Edges, allowed: &BTreeSet<(String, String)>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut unplaced = BTreeSet::new();
    let mut back = BTreeSet::new();
    for ((from, to), count) in edges {
        match (rank(from), rank(to)) {
            (Some(f), Some(t)) if t > f => {
                back.insert((from.clone(), to.clone()));
                if !allowed.contains(&(from.clone(), to.clone())) {
                    problems.push(format!(
                        "{from} -> {to} ({count} paths) goes up the pipeline: move what {from} \
                         needs from {to} down, or list it in docs/architecture.md"
                    ));
                }
            }
            (Some(_), Some(_)) => {}
            (f, t) => {
                for (name, r) in [(from, f), (to, t)] {
                    if r.is_none() {
                        unplaced.insert(name.clone());
                    }
                }
            }
        }
    }
    for name in unplaced {
        problems.push(format!(
            "module {name} has no place in xtask/src/direction.rs LAYERS: add it where it belongs"
        ));
    }
    for (from, to) in allowed.difference(&back) {
        problems.push(format!(
            "{from} -> {to} is listed as a known back-edge but no longer occurs: remove it from docs/architecture.md"
        ));
    }
    problems
}

/// The top-level module of each `crate::` path in the .rs files under `src`, per the
/// top-level module of the file it is in.
pub(crate) fn edges(src: &Path) -> Result<Edges> {
    let mut edges = Edges::new();
    let mut files = Vec::new();
    rust_files(src, &mut files)?;
    for file in files {
        let rel = file.strip_prefix(src).unwrap_or(&file);
        let Some(first) = rel.components().next() else {
            continue;
        };
        let first = first.as_os_str().to_string_lossy();
        if ROOT_FILES.contains(&first.as_ref()) {
            continue;
        }
        let from = first.trim_end_matches(".rs").to_string();
        let text =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        for to in crate_paths(&text) {
            if to != from && !is_root_item(&to) {
                *edges.entry((from.clone(), to)).or_insert(0) += 1;
            }
        }
    }
    Ok(edges)
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Items of lib.rs are named in UpperCamelCase or are macros; modules are snake_case.
fn is_root_item(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_uppercase())
}

/// The first segment after each `crate::` outside `//` comments, groups
/// (`crate::{a, b::C}`) included.
fn crate_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.split_once("//").map_or(line, |(code, _)| code);
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split_once('}').map_or(group, |(inner, _)| inner);
                out.extend(
                    inner
                        .split(',')
                        .filter_map(|part| first_segment(part.trim())),
                );
            } else if let Some(name) = first_segment(rest) {
                out.push(name);
            }
        }
    }
    out
}

fn first_segment(path: &str) -> Option<String> {
    let name: String = path
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty() && name != "self").then_some(name)
}

/// The `- `from -> to`` lines between the markers of docs/architecture.md.
fn exceptions(doc: &str) -> Result<BTreeSet<(String, String)>> {
    let (_, after) = doc
        .split_once(BEGIN_MARK)
        .with_context(|| format!("no {BEGIN_MARK} marker"))?;
    let (list, _) = after
        .split_once(END_MARK)
        .with_context(|| format!("no {END_MARK} marker"))?;
    let mut allowed = BTreeSet::new();
    for line in list.lines().map(str::trim).filter(|l| l.starts_with('-')) {
        let edge = line.split('`').nth(1).unwrap_or_default();
        let Some((from, to)) = edge.split_once("->") else {
            bail!("cannot read the exception {line:?}: write it as - `from -> to`: why");
        };
        allowed.insert((from.trim().to_string(), to.trim().to_string()));
    }
    Ok(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn reads_paths_and_groups_but_not_comments() {
        let text = "use crate::{UsageError, cost, spec::ProbeSpec};\n\
                    let x = crate::aggregate::new(); // crate::present\n\
                    use crate::stream::{self, Hit};\n";
        assert_eq!(
            crate_paths(text),
            ["UsageError", "cost", "spec", "aggregate", "stream"]
        );
    }

    #[test]
    fn flags_new_and_stale_back_edges_and_unplaced_modules() {
        let mut edges = Edges::new();
        edges.insert(("present".into(), "aggregate".into()), 3); // down: fine
        edges.insert(("attach".into(), "stream".into()), 2); // up, listed
        edges.insert(("delivery".into(), "resolve".into()), 1); // up, new
        edges.insert(("gadget".into(), "spec".into()), 1); // unplaced
        let allowed = pairs(&[("attach", "stream"), ("stream", "present")]);
        let problems = judge(&edges, &allowed);
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].starts_with("delivery -> resolve"));
        assert!(problems[1].contains("module gadget"));
        assert!(problems[2].starts_with("stream -> present is listed"));
    }

    #[test]
    fn reads_the_exceptions_between_the_markers() {
        let doc = format!("x\n{BEGIN_MARK}\n- `cost -> spec`: classes\n{END_MARK}\n- `a -> b`\n");
        assert_eq!(exceptions(&doc).expect("list"), pairs(&[("cost", "spec")]));
        assert!(exceptions("no markers").is_err());
    }

    /// The check itself, on this workspace's probe-user and docs.
    #[test]
    fn probe_user_imports_go_one_way_but_for_the_listed_exceptions() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        check(&root).expect("direction");
    }
}
