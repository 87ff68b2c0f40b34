//! `probetop list` output: a text table for people, JSON for tools.

use std::fmt::Write as _;

use crate::resolve::debuginfo::SymbolSource;
use crate::resolve::list::{ListedKind, Listing, Stripped};
use crate::sys::stderr::one_line;

/// Renders a listing as text: one section per object, one line per point, then
/// warnings.
pub(crate) fn render_text(listing: &Listing) -> String {
    let mut out = String::new();
    for object in &listing.objects {
        let points: Vec<_> = listing
            .points
            .iter()
            .filter(|p| p.object == object.path)
            .collect();
        if points.is_empty() && object.stripped.is_none() {
            continue;
        }
        let source = match &object.symbols {
            SymbolSource::Symtab => ".symtab".to_string(),
            SymbolSource::Dynsym => ".dynsym only (stripped)".to_string(),
            SymbolSource::BuildId(p) | SymbolSource::DebugLink(p) => {
                one_line(&p.display().to_string()).into_owned()
            }
            SymbolSource::Debuginfod(p) => {
                format!("debuginfod, {}", one_line(&p.display().to_string()))
            }
            SymbolSource::MiniDebugInfo => ".gnu_debugdata".to_string(),
        };
        // Names and paths come from the files listed: each on its line (a crafted
        // symbol may hold a newline or an escape sequence).
        let _ = write!(
            out,
            "{}  (symbols: {source}",
            one_line(&object.path.display().to_string())
        );
        if let Some(bias) = object.load_bias {
            let _ = write!(out, ", load bias {bias:#x}");
        }
        out.push_str(")\n");
        if let Some(stripped) = &object.stripped {
            stripped_note(&mut out, stripped);
        }
        if points.is_empty() {
            out.push('\n');
            continue;
        }
        let _ = writeln!(
            out,
            "  {:<6}  {:>18}  {:>10}  {:<14}  NAME",
            "KIND", "ADDRESS", "OFFSET", "COST CLASS"
        );
        for p in points {
            let _ = write!(
                out,
                "  {:<6}  {:>#18x}  {:>#10x}  {:<14}  {}",
                p.kind.as_str(),
                p.address,
                p.file_offset,
                p.cost_class.map_or("-", |c| c.as_str()),
                one_line(&p.name)
            );
            if p.kind == ListedKind::Usdt {
                if let (Some(addr), Some(off)) = (p.semaphore_address, p.semaphore_offset) {
                    let _ = write!(out, "  semaphore={addr:#x} (offset {off:#x})");
                }
                if let Some(args) = p.args.as_deref().filter(|a| !a.is_empty()) {
                    let _ = write!(out, "  args={args:?}");
                }
            } else if !p.aliases.is_empty() {
                let _ = write!(out, "  aliases: {}", one_line(&p.aliases.join(", ")));
            }
            out.push('\n');
            if let Some(ifunc) = &p.ifunc {
                let said = match (&ifunc.implementation, &ifunc.at_resolver) {
                    (Some(chosen), _) => format!(
                        "IFUNC: a probe goes to {chosen}, which the process calls (its resolver is at {:#x})",
                        ifunc.resolver_address
                    ),
                    (None, why) => format!(
                        "IFUNC: a probe goes to its resolver, which runs once at load: {}",
                        why.as_deref().unwrap_or("its choice is unknown")
                    ),
                };
                let _ = writeln!(out, "  {:<6}  {said}", "");
            }
            if let Some(refused) = &p.refused {
                let _ = writeln!(out, "  {:<6}  refused: {refused}", "");
            }
            if let Some(later) = &p.later_site {
                let _ = writeln!(
                    out,
                    "  {:<6}  hint: entry single-stepped; {}",
                    "",
                    one_line(&later.site.advice(&later.spec))
                );
            }
        }
        out.push('\n');
    }
    let objects = listing
        .objects
        .iter()
        .filter(|o| listing.points.iter().any(|p| p.object == o.path))
        .count();
    if listing.points.is_empty() && listing.objects.iter().any(|o| o.stripped.is_some()) {
        let _ = writeln!(out, "0 points: stripped, see above");
        for w in &listing.warnings {
            let _ = writeln!(out, "warning: {}", one_line(w));
        }
        return out;
    }
    let _ = writeln!(
        out,
        "{} point{} in {} object{}",
        listing.points.len(),
        if listing.points.len() == 1 { "" } else { "s" },
        objects,
        if objects == 1 { "" } else { "s" }
    );
    for w in &listing.warnings {
        let _ = writeln!(out, "warning: {}", one_line(w));
    }
    out
}

/// What a stripped object lacks, where its debug file was looked for and what to do, in
/// one line; then, when the pattern matched nothing in it, the closest specs it has.
fn stripped_note(out: &mut String, stripped: &Stripped) {
    let paths = |build_id: bool| {
        let shown: Vec<String> = stripped
            .debug_looked_in
            .iter()
            .filter(|p| p.components().any(|c| c.as_os_str() == ".build-id") == build_id)
            .map(|p| one_line(&p.display().to_string()).into_owned())
            .collect();
        shown.join(", ")
    };
    let by_build_id = if stripped.build_id {
        format!("by build id (none at {})", paths(true))
    } else {
        "no build id".to_string()
    };
    let by_link = match &stripped.debuglink {
        Some(file) => format!(
            "by .gnu_debuglink {} (none at {})",
            one_line(file),
            paths(false)
        ),
        None => "no .gnu_debuglink".to_string(),
    };
    let mini = if stripped.mini_debuginfo {
        "MiniDebugInfo naming no function"
    } else {
        "no MiniDebugInfo"
    };
    let counted = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let functions = counted(stripped.functions, "function");
    let usdt = counted(stripped.usdt, "USDT probe");
    let offers = match (stripped.functions, stripped.usdt) {
        (0, 0) => "nothing to probe".to_string(),
        (_, 0) => format!("only the {functions} its .dynsym exports"),
        (0, _) => format!("only its {usdt}"),
        _ => format!("only the {functions} its .dynsym exports and its {usdt}"),
    };
    let _ = writeln!(
        out,
        "  stripped: no symbol table (.symtab) and no debug file: {by_build_id}, {by_link}, {mini}, {}; install its debug symbols (the -dbgsym or -debuginfo package) or set DEBUGINFOD_URLS to a server that has them; until then it offers {offers}",
        one_line(&stripped.debuginfod)
    );
    let Some(pattern) = &stripped.unmatched else {
        return;
    };
    if stripped.functions + stripped.usdt == 0 {
        return;
    }
    let pattern = one_line(pattern);
    if stripped.suggested.is_empty() {
        let _ = writeln!(
            out,
            "  \"{pattern}\" matches none of them, and none is close to it"
        );
    } else {
        let suggested: Vec<String> = stripped
            .suggested
            .iter()
            .map(|s| one_line(s).into_owned())
            .collect();
        let _ = writeln!(
            out,
            "  \"{pattern}\" matches none of them; closest: {}",
            suggested.join(", ")
        );
    }
}

/// Renders a listing as pretty-printed JSON (addresses as numbers).
pub(crate) fn render_json(listing: &Listing) -> serde_json::Result<String> {
    serde_json::to_string_pretty(listing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::classes::CostClass;
    use crate::insn::sites::LaterSite;
    use crate::resolve::list::{ListedIfunc, ListedLaterSite, ListedObject, ListedPoint};
    use std::path::PathBuf;

    fn sample() -> Listing {
        let obj = PathBuf::from("/bin/app");
        Listing {
            objects: vec![ListedObject {
                path: obj.clone(),
                symbols: SymbolSource::Symtab,
                load_bias: Some(0x5555_0000_0000),
                stripped: None,
            }],
            points: vec![
                ListedPoint {
                    kind: ListedKind::Uprobe,
                    object: obj.clone(),
                    name: "ns::f(int)".into(),
                    symbol: Some("_ZN2ns1fEi".into()),
                    aliases: vec![],
                    address: 0x1139,
                    file_offset: 0x1139,
                    size: Some(12),
                    semaphore_address: None,
                    semaphore_offset: None,
                    args: None,
                    cost_class: Some(CostClass::EmulatedPush),
                    instruction: Some("push %rbp".into()),
                    later_site: None,
                    ifunc: None,
                    refused: None,
                },
                ListedPoint {
                    kind: ListedKind::Uprobe,
                    object: obj.clone(),
                    name: "strchr".into(),
                    symbol: Some("strchr".into()),
                    aliases: vec![],
                    address: 0x2000,
                    file_offset: 0x2000,
                    size: Some(64),
                    semaphore_address: None,
                    semaphore_offset: None,
                    args: None,
                    cost_class: Some(CostClass::Refused),
                    instruction: Some("lock orq $0x0,(%rsp)".into()),
                    later_site: None,
                    ifunc: Some(ListedIfunc {
                        resolver_address: 0x1180,
                        implementation: Some("__strchr_avx2".into()),
                        at_resolver: None,
                    }),
                    refused: None,
                },
                ListedPoint {
                    kind: ListedKind::Uprobe,
                    object: obj.clone(),
                    name: "mysqld_stmt_execute(THD*, char*, unsigned int)".into(),
                    symbol: Some("_Z19mysqld_stmt_executeP3THDPcj".into()),
                    aliases: vec![],
                    address: 0x85bc00,
                    file_offset: 0x85bc00,
                    size: Some(62),
                    semaphore_address: None,
                    semaphore_offset: None,
                    args: None,
                    cost_class: Some(CostClass::SingleStepped),
                    instruction: Some("cmp $8,%edx".into()),
                    later_site: Some(ListedLaterSite {
                        site: LaterSite {
                            offset: 3,
                            class: CostClass::EmulatedBranch,
                            instruction: "jbe 0x30".into(),
                        },
                        spec: "uprobe:mysqld_stmt_execute".into(),
                    }),
                    ifunc: None,
                    refused: None,
                },
                ListedPoint {
                    kind: ListedKind::Usdt,
                    object: obj,
                    name: "prov:tick".into(),
                    symbol: None,
                    aliases: vec![],
                    address: 0x1150,
                    file_offset: 0x1150,
                    size: None,
                    semaphore_address: Some(0x4010),
                    semaphore_offset: Some(0x3010),
                    args: Some("-4@%edi".into()),
                    cost_class: Some(CostClass::EmulatedNop),
                    instruction: Some("nop".into()),
                    later_site: None,
                    ifunc: None,
                    refused: None,
                },
            ],
            warnings: vec!["bad note".into()],
        }
    }

    #[test]
    fn text_table() {
        let text = render_text(&sample());
        assert!(
            text.starts_with("/bin/app  (symbols: .symtab, load bias 0x555500000000)\n"),
            "{text}"
        );
        assert!(
            text.contains("  uprobe              0x1139      0x1139  emulated-push   ns::f(int)\n"),
            "{text}"
        );
        assert!(
            text.contains("prov:tick  semaphore=0x4010 (offset 0x3010)  args=\"-4@%edi\""),
            "{text}"
        );
        assert!(
            text.contains(
                "single-stepped  mysqld_stmt_execute(THD*, char*, unsigned int)\n          hint: entry single-stepped; +0x3 (jbe 0x30) is emulated and reached on every call: use uprobe:mysqld_stmt_execute+0x3\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "refused         strchr\n          IFUNC: a probe goes to __strchr_avx2, which the process calls (its resolver is at 0x1180)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("4 points in 1 object\nwarning: bad note\n"),
            "{text}"
        );
    }

    #[test]
    fn json_fields() {
        let json: serde_json::Value =
            serde_json::from_str(&render_json(&sample()).expect("json")).expect("parse");
        let p = &json["points"][3];
        assert_eq!(p["kind"], "usdt");
        assert_eq!(p["semaphore_offset"], 0x3010);
        assert_eq!(p["args"], "-4@%edi");
        assert_eq!(p["cost_class"], "emulated-nop");
        assert_eq!(json["points"][0]["instruction"], "push %rbp");
        assert_eq!(json["points"][0]["symbol"], "_ZN2ns1fEi");
        assert_eq!(json["objects"][0]["symbols"]["kind"], "symtab");
        assert!(json["points"][0].get("later_site").is_none());
        let later = &json["points"][2]["later_site"];
        assert!(json["points"][2].get("ifunc").is_none());
        let ifunc = &json["points"][1]["ifunc"];
        assert_eq!(ifunc["resolver_address"], 0x1180);
        assert_eq!(ifunc["implementation"], "__strchr_avx2");
        assert_eq!(json["points"][1]["cost_class"], "refused");
        assert_eq!(later["offset"], 3);
        assert_eq!(later["class"], "emulated-branch");
        assert_eq!(later["instruction"], "jbe 0x30");
        assert_eq!(later["spec"], "uprobe:mysqld_stmt_execute");
    }

    /// A stripped object is one line: what it lacks, where its debug file was looked
    /// for (by build id, by debuglink, MiniDebugInfo, debuginfod), what to do; the
    /// closest names follow only when the pattern matched nothing in it.
    #[test]
    fn a_stripped_object_is_one_line_and_suggests_only_when_nothing_matched() {
        let stripped = Stripped {
            functions: 3,
            usdt: 2,
            debug_looked_in: vec![
                PathBuf::from("/usr/lib/debug/.build-id/ab/cdef.debug"),
                PathBuf::from("/opt/app.debug"),
                PathBuf::from("/opt/.debug/app.debug"),
            ],
            build_id: true,
            debuglink: Some("app.debug".into()),
            mini_debuginfo: false,
            debuginfod: "no debuginfod server asked (DEBUGINFOD_URLS is empty)".into(),
            unmatched: None,
            suggested: Vec::new(),
        };
        let first = "  stripped: no symbol table (.symtab) and no debug file: by build id (none at /usr/lib/debug/.build-id/ab/cdef.debug), by .gnu_debuglink app.debug (none at /opt/app.debug, /opt/.debug/app.debug), no MiniDebugInfo, no debuginfod server asked (DEBUGINFOD_URLS is empty); install its debug symbols (the -dbgsym or -debuginfo package) or set DEBUGINFOD_URLS to a server that has them; until then it offers only the 3 functions its .dynsym exports and its 2 USDT probes\n";
        let note = |s: &Stripped| {
            let mut out = String::new();
            stripped_note(&mut out, s);
            out
        };
        assert_eq!(note(&stripped), first);
        let unmatched = Stripped {
            unmatched: Some("do_comand".into()),
            suggested: vec!["uprobe:do_command".into(), "usdt:app:command__start".into()],
            ..stripped.clone()
        };
        assert_eq!(
            note(&unmatched),
            format!(
                "{first}  \"do_comand\" matches none of them; closest: uprobe:do_command, usdt:app:command__start\n"
            )
        );
        let far = Stripped {
            unmatched: Some("zzz".into()),
            build_id: false,
            debuglink: None,
            debug_looked_in: Vec::new(),
            ..stripped
        };
        let text = note(&far);
        assert!(
            text.starts_with("  stripped: no symbol table (.symtab) and no debug file: no build id, no .gnu_debuglink, no MiniDebugInfo, "),
            "{text}"
        );
        assert!(
            text.ends_with("\n  \"zzz\" matches none of them, and none is close to it\n"),
            "{text}"
        );
    }

    /// What the lab reads `list --json` with is what wrote it: every field comes back,
    /// the optional ones absent from the text included.
    #[test]
    fn a_listing_round_trips_as_json() {
        let mut listing = sample();
        listing.points[0].aliases = vec!["_ZN2ns1fEi_alias".into()];
        listing.objects.push(ListedObject {
            path: PathBuf::from("/lib/libx.so"),
            symbols: SymbolSource::BuildId(PathBuf::from("/usr/lib/debug/.build-id/ab/cd.debug")),
            load_bias: None,
            stripped: Some(Stripped {
                functions: 2,
                usdt: 0,
                debug_looked_in: vec![PathBuf::from("/usr/lib/debug/.build-id/ab/cd.debug")],
                build_id: true,
                debuglink: Some("libx.so.debug".into()),
                mini_debuginfo: false,
                debuginfod: "DEBUGINFOD_URLS is not set".into(),
                unmatched: Some("b*".into()),
                suggested: vec!["uprobe:b".into()],
            }),
        });
        let text = render_json(&listing).expect("encode");
        let back: Listing = serde_json::from_str(&text).expect("decode");
        assert_eq!(back, listing);
        // A listing from before a field was added reads with it absent.
        let old: Listing = serde_json::from_str(
            r#"{"objects": [], "points": [{"kind": "uprobe", "object": "/bin/app", "name": "f", "address": 16, "file_offset": 16}]}"#,
        )
        .expect("decode an old listing");
        assert_eq!(old.points[0].cost_class, None);
        assert!(old.points[0].aliases.is_empty() && old.warnings.is_empty());
    }
}
