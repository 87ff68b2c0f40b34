//! USDT specs: the sites of the objects' stapsdt notes, matched by provider and name.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::glob::Glob;
use super::scope::{Loaded, ObjectRef, Scope};
use super::usdt::{UsdtNoteError, UsdtProbe};
use super::{
    MAX_SUGGESTIONS, ObjectCache, ProbePoint, ResolveError, ResolveOptions, UsdtSite, suggest,
    usdt, usdt_args,
};
use crate::cost::classes;
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
    for object in objects {
        let obj = match cache.load(object, scope, opts) {
            Ok(obj) => obj,
            // Without OBJECT every mapped file is searched: skip the unreadable ones.
            Err(_) if spec.object.is_none() && !object.is_main => continue,
            Err(e) => return Err(e),
        };
        for probe in obj.usdt() {
            let probe = match probe {
                Ok(p) => p,
                Err(e) => {
                    if let UsdtNoteError::PcOutsideText { provider, name, .. }
                    | UsdtNoteError::SemaphoreOutsideData { provider, name, .. } = e
                        && wanted(provider, name)
                    {
                        unusable.get_or_insert_with(|| ResolveError::UsdtUnusable {
                            name: format!("{provider}:{name}"),
                            object: obj.r.display.clone(),
                            reason: e.clone(),
                        });
                    }
                    continue;
                }
            };
            if !wanted(&probe.provider, &probe.name) {
                all_names.push(format!("{}:{}", probe.provider, probe.name));
                continue;
            }
            points.push(usdt_point(&obj, probe));
        }
    }
    if points.is_empty() {
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
    Ok(points)
}

fn usdt_point(obj: &Loaded, probe: &UsdtProbe) -> ProbePoint {
    let shift = std::fs::File::open(&obj.r.read_path).map_or(0, |file| {
        usdt::nop5_shift_at(&file, probe.file_offset, classes::KernelRules::running())
    });
    usdt_probe_point(
        probe,
        obj.r.display.clone(),
        obj.r.attach_path.clone(),
        obj.load_bias,
        shift,
        |sym| obj.symbols().address_of(sym),
    )
}

/// The probe point of the USDT site `probe` of `object` (attached through
/// `attach_path`): moved `shift` bytes on ([`usdt::nop5_shift`]), with the address
/// `lookup` gives each symbol its arguments name. Public for the fuzz targets, which
/// build their points with it.
pub fn usdt_probe_point(
    probe: &UsdtProbe,
    object: PathBuf,
    attach_path: PathBuf,
    load_bias: Option<u64>,
    shift: u64,
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
        address: probe.address + shift,
        file_offset: probe.file_offset + shift,
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
        }),
        function: None,
        resolved: None,
        ifunc_resolver: false,
        returns: None,
    }
}
