//! `probetop list`: every probe-able point of a process or a file.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::debuginfo::SymbolSource;
use super::glob::Glob;
use super::symbols::{Function, SymbolTable};
use super::{Loaded, ResolveError, ResolveOptions, Scope, ifunc, suggest};
use crate::insn::classes::{self, CostClass, KernelRules};
use crate::insn::sites::{self, LaterSite};
use crate::target::Target;

/// What to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListSource {
    /// A running process: its executable first, then every mapped object.
    Pid(u32),
    /// One ELF file.
    Path(PathBuf),
}

/// Kind of a listed point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListedKind {
    /// A function (probe-able with uprobe and uretprobe).
    Uprobe,
    Usdt,
}

impl ListedKind {
    /// The name as printed (`uprobe`, `usdt`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ListedKind::Uprobe => "uprobe",
            ListedKind::Usdt => "usdt",
        }
    }
}

/// One probe-able point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedPoint {
    pub kind: ListedKind,
    pub object: PathBuf,
    /// Demangled symbol, or `provider:name`.
    pub name: String,
    /// The symbol as stored (mangled); absent for USDT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    /// Other symbols at the same address (raw).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    pub address: u64,
    pub file_offset: u64,
    /// Function size from the symbol table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semaphore_address: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semaphore_offset: Option<u64>,
    /// USDT argument string as stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<String>,
    /// What the kernel does with the instruction at this point on every hit
    /// (`insn::classes`); absent if the file could not be read there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_class: Option<CostClass>,
    /// That instruction, AT&T syntax.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
    /// For a function whose entry is single-stepped: a later instruction the kernel
    /// emulates and every call reaches once, if a linear decode can vouch for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub later_site: Option<ListedLaterSite>,
    /// For an IFUNC (`strlen`): where a probe on it goes, as a run puts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifunc: Option<ListedIfunc>,
    /// Why probetop will not attach a probe here (a USDT note off an instruction
    /// boundary or on another instruction than a nop, or on a 5-byte nop past its
    /// function's entry that the kernel would rewrite into a call writing below %rsp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Where a probe on an IFUNC goes. In a process, the implementation its resolver chose
/// (the point's address, offset, size, class and later site are that one's: a run
/// attaches there, or skips it where the kernel refuses it); in a file, or where the
/// choice cannot be read, the resolver itself, which runs once at load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedIfunc {
    /// The symbol's own address: the resolver.
    pub resolver_address: u64,
    /// The implementation the process calls, by name (or address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<String>,
    /// Why the point is the resolver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_resolver: Option<String>,
}

/// A later probe site offered for a single-stepped entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedLaterSite {
    #[serde(flatten)]
    pub site: LaterSite,
    /// The spec of the function at its entry (`uprobe:f`, `uprobe:/lib/x.so:f`): the
    /// offer is this plus `+OFFSET`.
    pub spec: String,
}

impl ListedLaterSite {}

/// One object looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedObject {
    pub path: PathBuf,
    /// Where function symbols came from.
    pub symbols: SymbolSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_bias: Option<u64>,
    /// The main object, stripped with no debug file found: what it still offers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripped: Option<Stripped>,
}

/// What a stripped object (no `.symtab`, no debug file) lacks, where its debug file was
/// looked for, and what it still offers to probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stripped {
    /// The functions its `.dynsym` names (exported ones), and its USDT probes.
    pub functions: usize,
    pub usdt: usize,
    /// Every path a separate debug file was looked for at (none found): by build id
    /// under `/usr/lib/debug/.build-id`, then by `.gnu_debuglink`.
    #[serde(default)]
    pub debug_looked_in: Vec<PathBuf>,
    /// Whether it has a build id, and the file its `.gnu_debuglink` names.
    #[serde(default)]
    pub build_id: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debuglink: Option<String>,
    /// Whether it holds MiniDebugInfo (`.gnu_debugdata`) that named no function.
    #[serde(default)]
    pub mini_debuginfo: bool,
    /// The debuginfod servers asked (none had it), or why none was.
    #[serde(default)]
    pub debuginfod: String,
    /// The pattern, when it matched nothing in the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmatched: Option<String>,
    /// Then the specs closest to it (`uprobe:NAME`, `usdt:PROVIDER:NAME`), closest
    /// first; empty when none is close.
    #[serde(default)]
    pub suggested: Vec<String>,
}

/// How many names a [`Stripped`] note offers.
const SUGGESTED: usize = 5;

/// The result of `list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub objects: Vec<ListedObject>,
    pub points: Vec<ListedPoint>,
    /// Objects that could not be read, malformed notes, and the like.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// Lists the probe points of `source` whose name matches `pattern` (a glob over every
/// spelling: mangled, demangled, without parameters; `provider:name` or `name` for USDT).
#[cfg(test)]
pub(crate) fn list(source: &ListSource, pattern: Option<&str>) -> Result<Listing, ResolveError> {
    list_with(source, pattern, &ResolveOptions::default())
}

/// The points of `source` whose name matches `pattern` (a glob over every spelling:
/// mangled, demangled, without parameters; `provider:name` or `name` for USDT), with
/// explicit options (where debug files are looked for, the debuginfod servers).
pub(crate) fn list_with(
    source: &ListSource,
    pattern: Option<&str>,
    opts: &ResolveOptions,
) -> Result<Listing, ResolveError> {
    let target;
    let scope = match source {
        ListSource::Pid(pid) => {
            target = Target::open(*pid).map_err(|e| ResolveError::Read {
                path: PathBuf::from(format!("/proc/{pid}")),
                error: std::io::Error::other(e.to_string()),
            })?;
            Scope::process(&target)
        }
        ListSource::Path(path) => Scope::File(path.clone()),
    };
    let glob = pattern.map(Glob::new);
    let mut listing = Listing {
        objects: Vec::new(),
        points: Vec::new(),
        warnings: Vec::new(),
    };
    for r in scope.mapped_objects() {
        let obj = match Loaded::load(r.clone(), &scope, opts) {
            Ok(obj) => obj,
            Err(e) if !r.is_main => {
                // Mapped non-ELF files (locale archives, caches) are expected: only say
                // something about ELF files that could not be read.
                if !matches!(e, ResolveError::Elf { .. }) {
                    listing.warnings.push(e.to_string());
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        list_object(&obj, scope.pid(), pattern.zip(glob.as_ref()), &mut listing);
    }
    // Names are suggested only when the pattern matched nothing anywhere.
    if !listing.points.is_empty() {
        for stripped in listing
            .objects
            .iter_mut()
            .filter_map(|o| o.stripped.as_mut())
        {
            stripped.unmatched = None;
            stripped.suggested.clear();
        }
    }
    Ok(listing)
}

fn list_object(
    obj: &Loaded,
    pid: Option<u32>,
    pattern: Option<(&str, &Glob)>,
    listing: &mut Listing,
) {
    let glob = pattern.map(|(_, g)| g);
    // One open per object: each point's class reads its first instruction.
    let file = std::fs::File::open(&obj.r.read_path).ok();
    let rules = KernelRules::running();
    let class_at = |offset: u64| {
        file.as_ref()
            .and_then(|f| classes::classify_at(f, offset, rules).ok())
            .map(|c| {
                (
                    c.class,
                    (!c.instruction.is_empty()).then_some(c.instruction),
                )
            })
            .unwrap_or((CostClass::Unknown, None))
    };
    let table = obj.symbols();
    let listed_before = listing.points.len();
    // Built on the first offer only: every spelling of every function, and how many
    // functions answer to it.
    let mut spellings: Option<HashMap<&str, usize>> = None;
    for f in &table.functions {
        if glob.is_some_and(|g| !f.matches(g)) {
            continue;
        }
        // An IFUNC name the pattern matched is probed where a run probes it
        // (`functions::resolve_functions`): the implementation the process calls.
        let (at, ifunc) = listed_ifunc(obj, pid, glob, f);
        let at_f = at.as_ref().unwrap_or(f);
        let (cost_class, instruction) = class_at(at_f.file_offset);
        let later_site = match (&file, cost_class) {
            (Some(file), CostClass::SingleStepped) => {
                later_site_of(file, table, at_f, rules).map(|site| {
                    let spellings = spellings.get_or_insert_with(|| spelling_counts(table));
                    let object = if obj.r.is_main {
                        String::new()
                    } else {
                        format!("{}:", obj.r.display.display())
                    };
                    ListedLaterSite {
                        site,
                        spec: format!("uprobe:{object}{}", spec_name(f, at.is_some(), spellings)),
                    }
                })
            }
            _ => None,
        };
        listing.points.push(ListedPoint {
            kind: ListedKind::Uprobe,
            object: obj.r.display.clone(),
            name: f.name.display.clone(),
            symbol: Some(f.name.raw.clone()),
            aliases: f.aliases.iter().map(|a| a.raw.clone()).collect(),
            address: at_f.address,
            file_offset: at_f.file_offset,
            size: (at_f.size > 0 || at.is_none()).then_some(at_f.size),
            semaphore_address: None,
            semaphore_offset: None,
            args: None,
            cost_class: file.is_some().then_some(cost_class),
            instruction,
            later_site,
            ifunc,
            refused: None,
        });
    }
    for e in &obj.image.read_errors {
        listing
            .warnings
            .push(format!("{}: {e}", obj.r.display.display()));
    }
    for probe in obj.usdt() {
        let probe = match probe {
            Ok(p) => p,
            Err(e) => {
                listing
                    .warnings
                    .push(format!("{}: {e}", obj.r.display.display()));
                continue;
            }
        };
        let full = format!("{}:{}", probe.provider, probe.name);
        if glob.is_some_and(|g| !g.matches(&full) && !g.matches(&probe.name)) {
            continue;
        }
        // As an attach checks it (`resolve::usdt_sites`), on the note's own address.
        let (cost_class, instruction) = class_at(probe.file_offset);
        let checked = match &file {
            Some(f) => super::usdt_sites::check(obj, f, probe, rules),
            None => Ok(super::usdt_sites::SiteOk { at_entry: false }),
        };
        let (cost_class, refused) = match checked {
            Ok(ok) if ok.at_entry => (cost_class, None),
            Ok(_) => (cost_class.past_entry(), None),
            Err(problem) if problem.forcible => (
                cost_class.past_entry(),
                Some(format!("{}; --force attaches it anyway", problem.reason)),
            ),
            Err(problem) => (cost_class, Some(problem.reason)),
        };
        listing.points.push(ListedPoint {
            kind: ListedKind::Usdt,
            object: obj.r.display.clone(),
            name: full,
            symbol: None,
            aliases: Vec::new(),
            address: probe.address,
            file_offset: probe.file_offset,
            size: None,
            semaphore_address: probe.semaphore_address,
            semaphore_offset: probe.semaphore_offset,
            args: Some(probe.args_raw.clone()),
            cost_class: file.is_some().then_some(cost_class),
            instruction,
            refused,
            later_site: None,
            ifunc: None,
        });
    }
    let stripped = (obj.r.is_main && *obj.source() == SymbolSource::Dynsym).then(|| {
        let unmatched = pattern.filter(|_| listing.points.len() == listed_before);
        stripped_note(obj, unmatched)
    });
    listing.objects.push(ListedObject {
        path: obj.r.display.clone(),
        symbols: obj.source().clone(),
        load_bias: obj.load_bias,
        stripped,
    });
}

/// What the stripped `obj` lacks and still offers; with the pattern that matched nothing
/// in it, the specs closest to that pattern.
fn stripped_note(obj: &Loaded, unmatched: Option<(&str, &Glob)>) -> Stripped {
    let table = obj.symbols();
    let usdt: Vec<(String, &str)> = obj
        .usdt()
        .iter()
        .flatten()
        .map(|p| (format!("{}:{}", p.provider, p.name), p.name.as_str()))
        .collect();
    let suggested = unmatched.map_or_else(Vec::new, |(_, glob)| {
        let wanted = glob.longest_literal().to_lowercase();
        let closest = |keys: &mut dyn Iterator<Item = &str>| {
            keys.filter_map(|k| suggest::distance(&wanted, &k.to_lowercase()))
                .min()
        };
        let spellings = spelling_counts(table);
        // (how far, how long, spec), closest first.
        let mut scored: Vec<((u8, usize), usize, String)> = table
            .functions
            .iter()
            .filter_map(|f| {
                let far = closest(&mut f.names().flat_map(|n| n.keys()))?;
                let name = spec_name(f, false, &spellings);
                Some((far, name.len(), format!("uprobe:{name}")))
            })
            .chain(usdt.iter().filter_map(|(full, name)| {
                let far = closest(&mut [full.as_str(), *name].into_iter())?;
                Some((far, full.len(), format!("usdt:{full}")))
            }))
            .collect();
        scored.sort();
        let mut seen = std::collections::HashSet::new();
        scored
            .into_iter()
            .map(|(_, _, spec)| spec)
            .filter(|spec| seen.insert(spec.clone()))
            .take(SUGGESTED)
            .collect()
    });
    Stripped {
        functions: table.functions.len(),
        usdt: usdt.len(),
        debug_looked_in: obj.debug_looked_in(),
        build_id: obj.image.build_id.as_ref().is_some_and(|id| id.len() > 1),
        debuglink: obj.image.debuglink.as_ref().map(|l| l.file.clone()),
        mini_debuginfo: obj.image.gnu_debugdata.is_some(),
        debuginfod: obj.debuginfod_said(),
        unmatched: unmatched.map(|(pattern, _)| pattern.to_string()),
        suggested,
    }
}

/// For `f` when a name of it the pattern matched is an IFUNC: the implementation the
/// process calls as a function (named, or bare where the symbol tables lack it), and what
/// the listing says of it.
fn listed_ifunc(
    obj: &Loaded,
    pid: Option<u32>,
    glob: Option<&Glob>,
    f: &Function,
) -> (Option<Function>, Option<ListedIfunc>) {
    if !f
        .names()
        .any(|n| n.ifunc && glob.is_none_or(|g| n.matches(g)))
    {
        return (None, None);
    }
    let listed = |implementation, at_resolver| ListedIfunc {
        resolver_address: f.address,
        implementation,
        at_resolver,
    };
    match ifunc::chosen(pid, obj.load_bias, &obj.image, obj.symbols(), f.address) {
        Some(Ok(chosen)) => {
            let name = chosen.name();
            let at = chosen.function.unwrap_or_else(|| Function {
                address: chosen.address,
                file_offset: chosen.file_offset,
                size: 0,
                ..f.clone()
            });
            (Some(at), Some(listed(Some(name), None)))
        }
        Some(Err(reason)) => (None, Some(listed(None, Some(reason.to_string())))),
        None => (
            None,
            Some(listed(
                None,
                Some(
                    "no process to read its choice from (`probetop list --pid PID` shows the implementation it calls)"
                        .to_string(),
                ),
            )),
        ),
    }
}

/// The later site of `f`, whose entry is single-stepped (see [`sites::later_site`]).
fn later_site_of(
    file: &std::fs::File,
    table: &SymbolTable,
    f: &Function,
    rules: KernelRules,
) -> Option<LaterSite> {
    if f.size == 0 || f.size > sites::MAX_FUNCTION_BYTES {
        return None;
    }
    let code = sites::read_code(file, f.file_offset, f.size).ok()?;
    if code.len() as u64 != f.size {
        return None;
    }
    let inner: Vec<u64> = table
        .next_after(f.address)
        .map(|next| next.address - f.address)
        .filter(|gap| *gap < f.size)
        .into_iter()
        .collect();
    sites::later_site(&code, f.address, f.file_offset, &inner, rules).ok()
}

/// How many functions answer to each spelling (any name, any key).
fn spelling_counts(table: &SymbolTable) -> HashMap<&str, usize> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for f in &table.functions {
        let mut keys: Vec<&str> = f.names().flat_map(|n| n.keys()).collect();
        keys.sort_unstable();
        keys.dedup();
        for k in keys {
            *counts.entry(k).or_default() += 1;
        }
    }
    counts
}

/// The shortest spelling of `f` a spec can carry (no blanks, no glob characters) that
/// names no other function; the symbol as stored if none does. For an IFUNC probed at
/// its implementation (`ifunc`), a spelling of an IFUNC name: a name of the resolver's
/// own symbol would put `+OFFSET` into the resolver.
fn spec_name<'a>(f: &'a Function, ifunc: bool, spellings: &HashMap<&str, usize>) -> &'a str {
    let name = if ifunc {
        f.names().find(|n| n.ifunc).unwrap_or(&f.name)
    } else {
        &f.name
    };
    name.keys()
        .filter(|k| {
            !k.is_empty()
                && !k.contains(|c: char| c.is_whitespace() || "*?[+".contains(c))
                // A single `:` would split the spec into OBJECT and FUNC.
                && !k.replace("::", "").contains(':')
        })
        .filter(|k| spellings.get(k) == Some(&1))
        .min_by_key(|k| k.len())
        .unwrap_or(&name.raw)
}
