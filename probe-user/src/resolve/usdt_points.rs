//! USDT specs: the sites of the objects' stapsdt notes, matched by provider and name.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::glob::Glob;
use super::scope::{Loaded, ObjectRef, Scope};
use super::usdt::{UsdtNoteError, UsdtProbe};
use super::{
    MAX_SUGGESTIONS, ObjectCache, ProbePoint, ResolveError, ResolveOptions, UsdtSite, suggest,
    usdt_args, usdt_sites,
};
use crate::insn::classes;
use crate::spec::{ProbeKind, ProbeSpec};

pub(super) fn resolve_usdt(
    scope: &Scope<'_>,
    spec: &ProbeSpec,
    objects: &[ObjectRef],
    opts: &ResolveOptions,
    cache: &ObjectCache,
) -> Result<Vec<ProbePoint>, ResolveError> {
    let name_glob = Glob::new(&spec.name);
    let provider_glob = spec.provider.as_deref().map(Glob::new);
    let wanted = |provider: &str, name: &str| {
        name_glob.matches(name) && provider_glob.as_ref().is_none_or(|g| g.matches(provider))
    };
    let mut points = Vec::new();
    let mut all_names: Vec<String> = Vec::new();
    let mut unusable = None;
    // One line per matching note refused (or forced) while others are kept.
    let mut notices = Vec::new();
    let rules = classes::KernelRules::running();
    for object in objects {
        let obj = match cache.load(object, scope, opts) {
            Ok(obj) => obj,
            // Without OBJECT every mapped file is searched: skip the unreadable ones.
            Err(_) if spec.object.is_none() && !object.is_main => continue,
            Err(e) => return Err(e),
        };
        let file = std::fs::File::open(&obj.r.read_path);
        for probe in obj.usdt() {
            let probe = match probe {
                Ok(p) => p,
                Err(e) => {
                    if let UsdtNoteError::PcOutsideText { provider, name, .. }
                    | UsdtNoteError::SemaphoreOutsideData { provider, name, .. }
                    | UsdtNoteError::SemaphoreOutsideProbes { provider, name, .. } = e
                        && wanted(provider, name)
                    {
                        notices.push(format!(
                            "probetop: {}: refused {provider}:{name} in {}: {}",
                            spec.text,
                            obj.r.display.display(),
                            note_reason(e)
                        ));
                        unusable.get_or_insert_with(|| ResolveError::UsdtUnusable {
                            name: format!("{provider}:{name}"),
                            object: obj.r.display.clone(),
                            reason: note_reason(e),
                        });
                    }
                    continue;
                }
            };
            if !wanted(&probe.provider, &probe.name) {
                all_names.push(format!("{}:{}", probe.provider, probe.name));
                continue;
            }
            let full = format!("{}:{}", probe.provider, probe.name);
            let checked = match &file {
                Ok(file) => usdt_sites::check(&obj, file, probe, rules),
                Err(e) => Err(usdt_sites::SiteProblem {
                    reason: format!("cannot read its site: {e}"),
                    forcible: false,
                }),
            };
            let at_entry = match checked {
                Ok(ok) => ok.at_entry,
                Err(problem) if problem.forcible && opts.force => {
                    notices.push(format!(
                        "probetop: warning: {}: {full} in {} attached because of --force, though {}: values it keeps below %rsp will be corrupted",
                        spec.text,
                        obj.r.display.display(),
                        problem.reason
                    ));
                    false
                }
                Err(problem) => {
                    let mut reason = problem.reason;
                    if problem.forcible {
                        reason.push_str("; --force attaches it anyway");
                    }
                    notices.push(format!(
                        "probetop: {}: refused {full} in {}: {reason}",
                        spec.text,
                        obj.r.display.display(),
                    ));
                    unusable.get_or_insert_with(|| ResolveError::UsdtUnusable {
                        name: full,
                        object: obj.r.display.clone(),
                        reason,
                    });
                    continue;
                }
            };
            let mut point = usdt_point(&obj, probe);
            if let Some(site) = point.usdt.as_mut() {
                site.at_function_entry = at_entry;
            }
            points.push(point);
        }
    }
    if points.is_empty() {
        // Every note that matched was refused: the error says why, in one line.
        if let Some(e) = unusable {
            return Err(e);
        }
        let full = match &spec.provider {
            Some(p) => format!("{p}:{}", spec.name),
            None => spec.name.clone(),
        };
        let needle = if name_glob.is_pattern() {
            name_glob.longest_literal()
        } else {
            spec.name.clone()
        };
        all_names.sort();
        all_names.dedup();
        // With a provider, compare `provider:name` whole; without, compare names and
        // offer the full `provider:name` of the close ones.
        let bare = |full: &str| full.split_once(':').map_or(full, |(_, n)| n).to_string();
        let suggestions: Vec<String> = match &spec.provider {
            Some(p) => suggest::closest(
                &format!("{p}:{needle}"),
                all_names.iter().map(String::as_str),
                MAX_SUGGESTIONS,
            ),
            None => {
                let bare_names: Vec<String> = all_names.iter().map(|n| bare(n)).collect();
                let close = suggest::closest(
                    &needle,
                    bare_names.iter().map(String::as_str),
                    MAX_SUGGESTIONS,
                );
                all_names
                    .iter()
                    .filter(|full| close.contains(&bare(full)))
                    .take(MAX_SUGGESTIONS)
                    .cloned()
                    .collect()
            }
        };
        let objects = match objects {
            [one] => one.display.display().to_string(),
            many => format!("{} mapped objects", many.len()),
        };
        return Err(ResolveError::UsdtNotFound {
            name: full,
            objects,
            hint: suggest::hint(&suggestions),
        });
    }
    cache.notices.borrow_mut().extend(notices);
    Ok(points)
}

/// A bad note's reason without its `provider:name`, which the line names already.
fn note_reason(e: &UsdtNoteError) -> String {
    let text = e.to_string();
    match text.split_once(": ") {
        Some((_, reason)) => reason.to_string(),
        None => text,
    }
}

fn usdt_point(obj: &Loaded, probe: &UsdtProbe) -> ProbePoint {
    usdt_probe_point(
        probe,
        obj.r.display.clone(),
        obj.r.attach_path.clone(),
        obj.load_bias,
        |sym| obj.symbols().address_of(sym),
    )
}

/// The probe point of the USDT site `probe` of `object` (attached through
/// `attach_path`), on the note's own address, with the address `lookup` gives each
/// symbol its arguments name. Public for the fuzz targets, which build their points
/// with it.
pub fn usdt_probe_point(
    probe: &UsdtProbe,
    object: PathBuf,
    attach_path: PathBuf,
    load_bias: Option<u64>,
    lookup: impl Fn(&str) -> Option<u64>,
) -> ProbePoint {
    let mut arg_symbols = BTreeMap::new();
    if let Ok(args) = &probe.args {
        for arg in args {
            let disp = match &arg.location {
                usdt_args::ArgLocation::RipRelative { disp }
                | usdt_args::ArgLocation::Memory { disp, .. } => disp,
                _ => continue,
            };
            if let Some(sym) = &disp.symbol
                && let Some(addr) = lookup(sym)
            {
                arg_symbols.insert(sym.clone(), addr);
            }
        }
    }
    let full = format!("{}:{}", probe.provider, probe.name);
    ProbePoint {
        kind: ProbeKind::Usdt,
        object,
        attach_path,
        name: full.clone(),
        address: probe.address,
        file_offset: probe.file_offset,
        symbol: full,
        load_bias,
        usdt: Some(UsdtSite {
            provider: probe.provider.clone(),
            name: probe.name.clone(),
            semaphore_address: probe.semaphore_address,
            semaphore_offset: probe.semaphore_offset,
            args_raw: probe.args_raw.clone(),
            args: probe.args.clone(),
            arg_symbols,
            at_function_entry: false,
        }),
        function: None,
        resolved: None,
        ifunc_resolver: false,
        returns: None,
    }
}
