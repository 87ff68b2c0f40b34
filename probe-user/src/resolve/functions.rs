//! Uprobe and uretprobe specs: function symbols matched by name or glob, and
//! `FUNC+OFFSET` checked to be an instruction boundary inside its function.

use std::path::PathBuf;

use super::debuginfo::SymbolSource;
use super::glob::Glob;
use super::scope::{ObjectRef, Scope};
use super::{
    FunctionSpan, MAX_SUGGESTIONS, ObjectCache, ProbePoint, ResolveError, ResolveOptions, ifunc,
    suggest,
};
use crate::insn::{classes, sites};
use crate::spec::{ProbeKind, ProbeSpec};

pub(super) fn resolve_functions(
    scope: &Scope<'_>,
    spec: &ProbeSpec,
    objects: &[ObjectRef],
    opts: &ResolveOptions,
    cache: &ObjectCache,
) -> Result<Vec<ProbePoint>, ResolveError> {
    if let Some(address) = spec.address() {
        return at_address(scope, spec, address, objects, opts, cache);
    }
    let glob = Glob::new(&spec.name);
    let mut points = Vec::new();
    // Where each point's object is read from, for an offset's check.
    let mut read_paths = Vec::new();
    let mut loaded = Vec::new();
    for object in objects {
        let obj = cache.load(object, scope, opts)?;
        let table = obj.symbols();
        let literal = glob.literal();
        for f in table.matching(&glob) {
            // The row carries the name the user wrote; the preferred alias goes beside it.
            let wrote = literal
                .as_deref()
                .and_then(|name| f.names().find(|n| n.keys().any(|k| k == name)))
                .unwrap_or(&f.name);
            let mut resolved = (wrote != &f.name).then(|| f.name.display.clone());
            let mut target = (f.address, f.file_offset, f.size);
            // An IFUNC's symbol is its resolver, which runs once at load: the probe goes
            // where the target's calls go, the implementation the resolver chose (read
            // from the target's GOT), for a name and for a pattern alike. A name whose
            // choice cannot be read is refused; a pattern keeps that one at its
            // resolver, as `probetop list` shows it, and the run says so.
            let matched_ifunc = match literal {
                Some(_) => wrote.ifunc,
                None => f.names().any(|n| n.ifunc && n.matches(&glob)),
            };
            let mut ifunc_resolver = false;
            if matched_ifunc {
                let chosen =
                    ifunc::chosen(scope.pid(), obj.load_bias, &obj.image, table, f.address);
                match chosen {
                    Some(Ok(chosen)) => {
                        resolved = Some(chosen.name());
                        let size = chosen.function.as_ref().map_or(0, |g| g.size);
                        target = (chosen.address, chosen.file_offset, size);
                    }
                    Some(Err(reason)) if literal.is_some() => {
                        return Err(ResolveError::Ifunc {
                            name: wrote.display.clone(),
                            object: obj.r.display.clone(),
                            reason,
                        });
                    }
                    // No process to read the choice from (a binary path), or a
                    // pattern's IFUNC without one: at the resolver, said once.
                    _ => ifunc_resolver = literal.is_none(),
                }
            }
            let (address, file_offset, size) = target;
            let span = FunctionSpan {
                offset: 0,
                size,
                inner_symbol: table
                    .next_after(address)
                    .map(|next| next.address - address)
                    .filter(|gap| *gap < size),
            };
            points.push(ProbePoint {
                kind: spec.kind,
                object: obj.r.display.clone(),
                attach_path: obj.r.attach_path.clone(),
                name: wrote.display.clone(),
                address,
                file_offset,
                symbol: wrote.raw.clone(),
                load_bias: obj.load_bias,
                usdt: None,
                function: Some(span),
                resolved,
                ifunc_resolver,
                returns: None,
            });
            read_paths.push(obj.r.read_path.clone());
        }
        loaded.push(obj);
    }
    if let Some(offset) = spec.offset
        && !points.is_empty()
    {
        return at_offset(spec, offset, points, &read_paths, opts, cache);
    }
    if spec.at_returns && !points.is_empty() {
        return points
            .into_iter()
            .zip(&read_paths)
            .map(|(point, path)| at_returns(point, path))
            .collect();
    }
    if points.is_empty() {
        let needle = if glob.is_pattern() {
            glob.longest_literal()
        } else {
            spec.name.clone()
        };
        let suggestions = suggest::closest(
            &needle,
            loaded.iter().flat_map(|o| o.symbols().all_names()),
            MAX_SUGGESTIONS,
        );
        let mut hint = suggest::hint(&suggestions);
        if let Some(o) = loaded.first()
            && matches!(o.source(), SymbolSource::Dynsym)
        {
            hint.push_str(
                " (the object is stripped and no debug info was found: only exported functions are visible)",
            );
        }
        return Err(ResolveError::SymbolNotFound {
            name: spec.name.clone(),
            object: objects
                .first()
                .map(|o| o.display.clone())
                .unwrap_or_default(),
            hint,
        });
    }
    Ok(points)
}

/// `uprobe:[OBJECT:]0xADDR`: the function of the (first) object that holds the address,
/// probed at the address's offset into it, checked as `FUNC+OFFSET` is: an instruction
/// boundary, and not a nop5 past the entry the kernel would turn into a call (unless
/// `--force`). An address no function symbol holds is refused: nothing says where its
/// instructions start. A uretprobe takes a function's entry only.
fn at_address(
    scope: &Scope<'_>,
    spec: &ProbeSpec,
    address: u64,
    objects: &[ObjectRef],
    opts: &ResolveOptions,
    cache: &ObjectCache,
) -> Result<Vec<ProbePoint>, ResolveError> {
    let Some(object) = objects.first() else {
        return Err(ResolveError::BadOffset(format!(
            "{}: no object to find {address:#x} in",
            spec.text
        )));
    };
    let obj = cache.load(object, scope, opts)?;
    let table = obj.symbols();
    let holder = table
        .functions
        .iter()
        .filter(|f| f.address <= address && address < f.address.saturating_add(f.size.max(1)))
        .max_by_key(|f| f.address);
    let Some(f) = holder else {
        let stripped = if matches!(obj.source(), SymbolSource::Dynsym) {
            " (it is stripped: its debug symbols would say)"
        } else {
            ""
        };
        return Err(ResolveError::BadOffset(format!(
            "{}: no function of {} holds {address:#x}{stripped}, so probetop cannot check it is an instruction boundary (a probe off one corrupts the target's code): `probetop list` shows the functions' addresses",
            spec.text,
            obj.r.display.display()
        )));
    };
    let offset = address - f.address;
    if spec.kind != ProbeKind::Uprobe && offset > 0 {
        return Err(ResolveError::BadOffset(format!(
            "{}: {address:#x} is {}+{offset:#x}, not a function's entry, where a return probe must start",
            spec.text, f.name.display
        )));
    }
    let point = ProbePoint {
        kind: spec.kind,
        object: obj.r.display.clone(),
        attach_path: obj.r.attach_path.clone(),
        name: f.name.display.clone(),
        address: f.address,
        file_offset: f.file_offset,
        symbol: f.name.raw.clone(),
        load_bias: obj.load_bias,
        usdt: None,
        function: Some(FunctionSpan {
            offset: 0,
            size: f.size,
            inner_symbol: table
                .next_after(f.address)
                .map(|next| next.address - f.address)
                .filter(|gap| *gap < f.size),
        }),
        resolved: None,
        ifunc_resolver: false,
        returns: None,
    };
    // Checked and said as `FUNC+OFFSET` is.
    let by_name = ProbeSpec {
        name: f.name.display.clone(),
        offset: Some(offset),
        ..spec.clone()
    };
    at_offset(
        &by_name,
        offset,
        vec![point],
        std::slice::from_ref(&obj.r.read_path),
        opts,
        cache,
    )
    .map_err(|e| match e {
        ResolveError::BadOffset(why) => {
            ResolveError::BadOffset(format!("{} ({address:#x}): {why}", spec.text))
        }
        other => other,
    })
}

/// Moves a function's point to its `ret` instructions (`uprobe:FUNC+ret`): the first
/// holds the point, the others ride with it (`ProbePoint::returns`). Each is a plain
/// uprobe on a `ret`, which the kernel single-steps (`insn::classes`); one the kernel
/// would refuse refuses the spec, as a partial count would mislead.
fn at_returns(mut point: ProbePoint, read_path: &PathBuf) -> Result<ProbePoint, ResolveError> {
    let size = point.function.map_or(0, |f| f.size);
    let code = if size == 0 || size > sites::MAX_FUNCTION_BYTES {
        Vec::new()
    } else {
        std::fs::File::open(read_path)
            .and_then(|file| sites::read_code(&file, point.file_offset, size))
            .map_err(|error| ResolveError::Read {
                path: point.object.clone(),
                error,
            })?
    };
    let returns =
        sites::return_sites(&code).map_err(|e| ResolveError::BadOffset(e.message(&point.name)))?;
    let rules = classes::KernelRules::running();
    for &offset in &returns.offsets {
        let site = classes::classify(&code[offset as usize..], point.file_offset + offset, rules);
        if site.class == classes::CostClass::Refused {
            return Err(ResolveError::BadOffset(format!(
                "{}+ret: the kernel refuses to probe its ret at +{offset:#x} ({}): probetop cannot count every return",
                point.name, site.instruction
            )));
        }
    }
    let Some(&first) = returns.offsets.first() else {
        return Err(ResolveError::BadOffset(
            sites::NoReturnSites::NoRet.message(&point.name),
        ));
    };
    point.name = format!("{}+ret", point.name);
    point.address += first;
    point.file_offset += first;
    if let Some(span) = point.function.as_mut() {
        span.offset = first;
    }
    point.returns = Some(returns);
    Ok(point)
}

/// Moves the one point of `FUNC+OFFSET` to the offset, once it is known to be an
/// instruction boundary inside the function, and not a 5-byte nop the kernel would
/// turn into a call writing below %rsp (unless `--force`).
fn at_offset(
    spec: &ProbeSpec,
    offset: u64,
    mut points: Vec<ProbePoint>,
    read_paths: &[PathBuf],
    opts: &ResolveOptions,
    cache: &ObjectCache,
) -> Result<Vec<ProbePoint>, ResolveError> {
    if points.len() > 1 {
        return Err(ResolveError::AmbiguousOffset {
            spec: spec.text.clone(),
            name: spec.name.clone(),
            count: points.len(),
            names: points
                .iter()
                .map(|p| p.symbol.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let mut point = points.remove(0);
    let span = point
        .function
        .as_mut()
        .expect("function points have a span");
    if offset > 0 {
        let code = if span.size == 0 || offset >= span.size {
            Vec::new()
        } else {
            std::fs::File::open(&read_paths[0])
                .and_then(|file| {
                    sites::read_code(
                        &file,
                        point.file_offset,
                        span.size
                            .min(offset.saturating_add(classes::MAX_INSN_LEN as u64)),
                    )
                })
                .map_err(|error| ResolveError::Read {
                    path: point.object.clone(),
                    error,
                })?
        };
        sites::check_offset(&code, span.size, offset)
            .map_err(|e| ResolveError::BadOffset(e.message(&spec.name, offset)))?;
        let site = classes::classify(
            code.get(offset as usize..).unwrap_or_default(),
            point.file_offset + offset,
            classes::KernelRules::running(),
        )
        .past_entry();
        if site.class == classes::CostClass::Unsafe {
            let at = format!("{}+{offset:#x}", spec.name);
            if !opts.force {
                return Err(ResolveError::BadOffset(format!(
                    "{at} is {}; probe another instruction, or give --force to attach anyway",
                    classes::RED_ZONE
                )));
            }
            cache.notices.borrow_mut().push(format!(
                "probetop: warning: {}: attached because of --force, though {at} is {}: values {} keeps below %rsp will be corrupted",
                spec.text,
                classes::RED_ZONE,
                spec.name
            ));
        }
        point.name = format!("{}+{offset:#x}", point.name);
        point.address += offset;
        point.file_offset += offset;
        span.offset = offset;
    }
    Ok(vec![point])
}
