//! Resolution: probe specs to probe points, the exact places in files the kernel
//! attaches to, read from ELF symbol tables, USDT notes and the target's /proc maps.
//!
//! - `resolve` / `resolve_with` (the tests'): a spec in a running process; [`Resolver`]:
//!   many specs in one process, each object read once.
//! - `resolve_file` (the tests'): a spec in a file on disk (no process; no load bias).
//! - [`list_with`](list::list_with): every probe-able point of a process or file (`probetop list`).
//!
//! Objects: a spec's OBJECT is an absolute path or a library name (`libc`), found in the
//! target's maps, then in the dynamic linker's cache. Without OBJECT, uprobes go to the
//! main executable and USDT specs look in every mapped object.

pub mod debuginfo;
pub(crate) mod debuginfod;
pub mod elf;
pub mod glob;
pub(crate) mod ifunc;
pub(crate) mod ldcache;
pub(crate) mod list;
pub mod suggest;
pub mod symbols;
pub mod unwind;
pub mod usdt;
pub mod usdt_args;

mod error;
#[cfg(test)]
mod fixture_tests;
mod functions;
mod point;
mod scope;
mod site;
mod usdt_points;
mod usdt_sites;

pub(crate) use error::ResolveError;
pub(crate) use point::{FunctionSpan, ProbePoint, UsdtSite};
pub use usdt_points::usdt_probe_point;

use std::cell::RefCell;
use std::collections::HashMap;
#[cfg(test)]
use std::path::Path;
use std::path::PathBuf;
use std::rc::Rc;

use crate::spec::{ProbeKind, ProbeSpec};
use crate::target::Target;

use self::debuginfo::DebugSearch;
use self::debuginfod::Debuginfod;
use self::functions::resolve_functions;
use self::scope::{Loaded, ObjectRef, Scope};
use self::usdt_points::resolve_usdt;

/// Default cap on the probe points one spec may expand to (`--max-probes`).
pub(crate) const DEFAULT_MAX_PROBES: usize = 1000;
/// Suggestions offered for an unknown name.
const MAX_SUGGESTIONS: usize = 5;

/// Knobs of resolution.
#[derive(Debug, Clone)]
pub(crate) struct ResolveOptions {
    /// Most probe points one spec may expand to.
    pub max_probes: usize,
    /// Where separate debug info is looked for.
    pub debug: DebugSearch,
    /// The debuginfod servers asked for a debug file nothing local has (off by default).
    pub debuginfod: Debuginfod,
    /// `--force`: attach sites refused only for what they may do to the target's red
    /// zone (a 5-byte nop past a function's entry on a kernel that optimizes it), with
    /// a warning.
    pub force: bool,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        Self {
            max_probes: DEFAULT_MAX_PROBES,
            debug: DebugSearch::default(),
            debuginfod: Debuginfod::default(),
            force: false,
        }
    }
}

/// Resolves `spec` in `target` to the points to attach, with default options.
#[cfg(test)]
pub(crate) fn resolve(target: &Target, spec: &ProbeSpec) -> Result<Vec<ProbePoint>, ResolveError> {
    resolve_with(target, spec, &ResolveOptions::default())
}

/// Resolves `spec` in `target` to the points to attach.
#[cfg(test)]
pub(crate) fn resolve_with(
    target: &Target,
    spec: &ProbeSpec,
    opts: &ResolveOptions,
) -> Result<Vec<ProbePoint>, ResolveError> {
    Resolver::new(target, opts.clone()).resolve(spec)
}

/// Resolves the specs of one run in one process. Each object is read, parsed and its
/// symbols demangled once, for every spec: that is most of the work (half a second for
/// mariadbd's 19,000 symbols), and a spec file of a thousand libc functions otherwise
/// repeated it a thousand times.
pub(crate) struct Resolver<'a> {
    scope: Scope<'a>,
    opts: ResolveOptions,
    objects: ObjectCache,
}

impl<'a> Resolver<'a> {
    pub(crate) fn new(target: &'a Target, opts: ResolveOptions) -> Self {
        Self {
            scope: Scope::process(target),
            opts,
            objects: ObjectCache::default(),
        }
    }

    /// Resolves `spec` to the points to attach.
    pub(crate) fn resolve(&self, spec: &ProbeSpec) -> Result<Vec<ProbePoint>, ResolveError> {
        resolve_in(&self.scope, spec, &self.opts, &self.objects)
    }

    /// The lines resolution has to say since the last call, one per point it refused
    /// while others of the spec were kept (a USDT note off an instruction boundary, say)
    /// or attached only because of `--force`.
    pub(crate) fn take_notices(&self) -> Vec<String> {
        self.objects.notices.take()
    }
}

/// Objects read so far. Failed reads are not kept: each spec reports its own error.
#[derive(Default)]
struct ObjectCache {
    loaded: RefCell<HashMap<ObjectKey, Rc<Loaded>>>,
    /// See [`Resolver::take_notices`].
    notices: RefCell<Vec<String>>,
}

/// What makes two [`ObjectRef`]s the same object: the file read and the names its points
/// carry.
type ObjectKey = (PathBuf, PathBuf, PathBuf, PathBuf);

impl ObjectCache {
    fn load(
        &self,
        r: &ObjectRef,
        scope: &Scope<'_>,
        opts: &ResolveOptions,
    ) -> Result<Rc<Loaded>, ResolveError> {
        let key = (
            r.read_path.clone(),
            r.attach_path.clone(),
            r.display.clone(),
            r.origin.clone(),
        );
        if let Some(obj) = self.loaded.borrow().get(&key) {
            return Ok(Rc::clone(obj));
        }
        let obj = Rc::new(Loaded::load(r.clone(), scope, opts)?);
        self.loaded.borrow_mut().insert(key, Rc::clone(&obj));
        Ok(obj)
    }
}

/// Resolves `spec` in the file `path` (its OBJECT, if any, is looked up on this host).
/// Points have no load bias; `attach_path` is the file's path.
#[cfg(test)]
pub(crate) fn resolve_file(
    path: &Path,
    spec: &ProbeSpec,
    opts: &ResolveOptions,
) -> Result<Vec<ProbePoint>, ResolveError> {
    resolve_in(
        &Scope::File(path.to_path_buf()),
        spec,
        opts,
        &ObjectCache::default(),
    )
}

fn resolve_in(
    scope: &Scope<'_>,
    spec: &ProbeSpec,
    opts: &ResolveOptions,
    cache: &ObjectCache,
) -> Result<Vec<ProbePoint>, ResolveError> {
    let objects = scope.objects_for(spec)?;
    let points = match spec.kind {
        ProbeKind::Uprobe | ProbeKind::Uretprobe => {
            resolve_functions(scope, spec, &objects, opts, cache)?
        }
        ProbeKind::Usdt => resolve_usdt(scope, spec, &objects, opts, cache)?,
    };
    if points.len() > opts.max_probes {
        return Err(ResolveError::TooManyProbes {
            spec: spec.text.clone(),
            count: points.len(),
            max: opts.max_probes,
        });
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_main_function_resolves() {
        let me = Target::open(std::process::id()).expect("self");
        let spec = ProbeSpec::parse("uprobe:main").expect("spec");
        let points = resolve(&me, &spec).expect("resolve main");
        assert_eq!(points.len(), 1);
        let p = &points[0];
        assert_eq!(p.name, "main");
        assert!(p.file_offset > 0 && p.load_bias.is_some());
        assert_eq!(p.attach_path, me.exe_link());
    }

    #[test]
    fn libc_by_name_in_this_process() {
        let me = Target::open(std::process::id()).expect("self");
        let spec = ProbeSpec::parse("uprobe:libc:malloc").expect("spec");
        let points = resolve(&me, &spec).expect("resolve libc:malloc");
        assert_eq!(points.len(), 1, "{points:?}");
        let p = &points[0];
        assert!(p.object.to_string_lossy().contains("libc.so"), "{p:?}");
        assert!(p.load_bias.is_some());
        assert!(
            p.attach_path
                .starts_with(format!("/proc/{}/root", std::process::id()))
        );
    }

    #[test]
    fn unknown_library_is_a_clear_error() {
        let me = Target::open(std::process::id()).expect("self");
        let spec = ProbeSpec::parse("uprobe:libdoesnotexist:f").expect("spec");
        let err = resolve(&me, &spec).expect_err("no such lib");
        assert!(matches!(err, ResolveError::ObjectNotFound { .. }), "{err}");
    }
}
