//! Resolution: probe specs to probe points, the exact places in files the kernel
//! attaches to, read from ELF symbol tables, USDT notes and the target's /proc maps.
//!
//! - [`resolve`] / [`resolve_with`]: a spec in a running process; [`Resolver`]: many
//!   specs in one process, each object read once.
//! - [`resolve_file`]: a spec in a file on disk (no process; no load bias).
//! - [`list`](list::list): every probe-able point of a process or file (`probetop list`).
//!
//! Objects: a spec's OBJECT is an absolute path or a library name (`libc`), found in the
//! target's maps, then in the dynamic linker's cache. Without OBJECT, uprobes go to the
//! main executable and USDT specs look in every mapped object.

pub mod costs;
pub mod debuginfo;
pub mod elf;
pub mod glob;
pub mod ifunc;
pub mod ldcache;
pub mod list;
pub mod suggest;
pub mod symbols;
pub mod usdt;
pub mod usdt_args;

#[cfg(test)]
mod fixture_tests;

use std::cell::{OnceCell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::cost::{classes, sites};
use crate::spec::{ProbeKind, ProbeSpec};
use crate::target::Target;

use self::debuginfo::{DebugSearch, SymbolSource};
use self::elf::ElfImage;
use self::glob::Glob;
use self::symbols::SymbolTable;
use self::usdt::{UsdtNoteError, UsdtProbe};
use self::usdt_args::{UsdtArg, UsdtArgError};
use crate::sys::maps::{self, FileId, MapEntry};

/// Default cap on the probe points one spec may expand to (`--max-probes`).
pub const DEFAULT_MAX_PROBES: usize = 1000;
/// Largest object file read (a debug build of a big server is a few hundred MiB).
const MAX_OBJECT_BYTES: u64 = 2 << 30;
/// Suggestions offered for an unknown name.
const MAX_SUGGESTIONS: usize = 5;

/// One place to attach one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePoint {
    pub kind: ProbeKind,
    /// The file as the user knows it (for display and exports).
    pub object: PathBuf,
    /// The path handed to the kernel; for the main executable `/proc/PID/exe`, which
    /// stays valid if the file on disk is replaced; for other mapped objects
    /// `/proc/PID/root/PATH` (the target's mount namespace), or
    /// `/proc/PID/map_files/...` when the file was deleted.
    pub attach_path: PathBuf,
    /// Symbol (demangled where it applies) or `provider:name`.
    pub name: String,
    /// Virtual address in the object (st_value, or the USDT note's pc).
    pub address: u64,
    /// File offset the kernel attaches at.
    pub file_offset: u64,
    /// The symbol as stored (mangled) for uprobes; `provider:name` for USDT.
    pub symbol: String,
    /// Runtime address minus link-time address of the object in the target. `None`
    /// when resolving a file, or when the target has not mapped the object (yet).
    pub load_bias: Option<u64>,
    /// USDT details (`kind == Usdt` only).
    pub usdt: Option<UsdtSite>,
    /// Where the point sits in its function (uprobes and uretprobes only).
    pub function: Option<FunctionSpan>,
    /// What `name`, as the user wrote it, resolved to when that is another name: the
    /// symbol table's preferred alias (`__libc_calloc` for `calloc`), or the
    /// implementation an IFUNC chose in the target (`__strlen_avx2` for `strlen`).
    pub resolved: Option<String>,
    /// An IFUNC matched by a pattern, left at its resolver (which runs once at load), as
    /// `probetop list` shows it: the run says so, naming a way to probe the
    /// implementation.
    pub ifunc_resolver: bool,
}

/// A uprobe's place in its function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionSpan {
    /// Bytes from the function's entry to the point: 0 at the entry, OFFSET for
    /// `uprobe:FUNC+OFFSET`.
    pub offset: u64,
    /// The function's size in the symbol table (0: not given).
    pub size: u64,
    /// Bytes from the entry to the first other function symbol that starts inside
    /// the function, if one does (a second entry point).
    pub inner_symbol: Option<u64>,
}

impl ProbePoint {
    /// File offset of the function's entry (uprobes and uretprobes).
    pub fn entry_file_offset(&self) -> Option<u64> {
        self.function.map(|f| self.file_offset - f.offset)
    }
}

/// What a USDT probe point carries beyond its location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtSite {
    pub provider: String,
    pub name: String,
    /// Link-time address of the semaphore (`None`: the probe has none).
    pub semaphore_address: Option<u64>,
    /// File offset of the semaphore: the kernel's `ref_ctr_offset`.
    pub semaphore_offset: Option<u64>,
    /// The argument string as the note stores it.
    pub args_raw: String,
    /// Parsed arguments, or why they do not parse (the probe itself still attaches).
    pub args: Result<Vec<UsdtArg>, UsdtArgError>,
    /// Link-time addresses of the symbols named by arguments (`sym+8(%rip)`), for the
    /// ones the object's symbol tables know.
    pub arg_symbols: BTreeMap<String, u64>,
}

impl UsdtSite {
    /// Runtime address of argument `index` when it is a memory operand that does not
    /// depend on registers (`%rip`-relative or absolute); `Ok(None)` for other operands.
    pub fn arg_static_address(
        &self,
        index: usize,
        load_bias: u64,
    ) -> Result<Option<u64>, UsdtArgError> {
        let args = self.args.as_ref().map_err(Clone::clone)?;
        let Some(arg) = args.get(index) else {
            return Ok(None);
        };
        arg.static_address(|s| self.arg_symbols.get(s).copied(), load_bias)
    }
}

/// Why a spec resolved to nothing usable.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    // The io::Error is in the message, and so not the source too (printed twice).
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "{name} in {object} is an IFUNC: its symbol is a resolver that runs once at load, and {reason}; probe the implementation by its name instead (probetop list --pid PID '*{name}*' lists them)"
    )]
    Ifunc {
        name: String,
        object: PathBuf,
        reason: ifunc::IfuncError,
    },
    #[error("{path} is not an ELF file probetop can read: {reason}")]
    Elf { path: PathBuf, reason: String },
    #[error("symbol {name:?} not found in {object}{hint}")]
    SymbolNotFound {
        name: String,
        object: PathBuf,
        hint: String,
    },
    #[error("USDT probe {name:?} not found in {objects}{hint}")]
    UsdtNotFound {
        name: String,
        /// The objects searched, for the message.
        objects: String,
        hint: String,
    },
    #[error("USDT probe {name} in {object} cannot be used: {reason}")]
    UsdtUnusable {
        name: String,
        object: PathBuf,
        reason: UsdtNoteError,
    },
    #[error(
        "no library {name:?}: not mapped by the process and not in the dynamic linker's cache{hint}; give an absolute path"
    )]
    ObjectNotFound { name: String, hint: String },
    /// `FUNC+OFFSET` that is no instruction boundary inside FUNC, or cannot be checked.
    #[error("{0}")]
    BadOffset(String),
    #[error(
        "{spec}: {name:?} names {count} functions ({names}): an offset needs exactly one; name it by its symbol as stored (probetop list shows it)"
    )]
    AmbiguousOffset {
        spec: String,
        name: String,
        count: usize,
        names: String,
    },
    #[error(
        "{spec} matches {count} probe points, more than the limit of {max}: narrow the pattern, or raise the limit with --max-probes {count}"
    )]
    TooManyProbes {
        spec: String,
        count: usize,
        max: usize,
    },
}

/// Knobs of resolution.
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    /// Most probe points one spec may expand to.
    pub max_probes: usize,
    /// Where separate debug info is looked for.
    pub debug: DebugSearch,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        Self {
            max_probes: DEFAULT_MAX_PROBES,
            debug: DebugSearch::default(),
        }
    }
}

/// Resolves `spec` in `target` to the points to attach, with default options.
pub fn resolve(target: &Target, spec: &ProbeSpec) -> Result<Vec<ProbePoint>, ResolveError> {
    resolve_with(target, spec, &ResolveOptions::default())
}

/// Resolves `spec` in `target` to the points to attach.
pub fn resolve_with(
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
pub struct Resolver<'a> {
    scope: Scope<'a>,
    opts: ResolveOptions,
    objects: ObjectCache,
}

impl<'a> Resolver<'a> {
    pub fn new(target: &'a Target, opts: ResolveOptions) -> Self {
        Self {
            scope: Scope::process(target),
            opts,
            objects: ObjectCache::default(),
        }
    }

    /// Resolves `spec` to the points to attach.
    pub fn resolve(&self, spec: &ProbeSpec) -> Result<Vec<ProbePoint>, ResolveError> {
        resolve_in(&self.scope, spec, &self.opts, &self.objects)
    }
}

/// Objects read so far. Failed reads are not kept: each spec reports its own error.
#[derive(Default)]
struct ObjectCache {
    loaded: RefCell<HashMap<ObjectKey, Rc<Loaded>>>,
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
pub fn resolve_file(
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

fn resolve_functions(
    scope: &Scope<'_>,
    spec: &ProbeSpec,
    objects: &[ObjectRef],
    opts: &ResolveOptions,
    cache: &ObjectCache,
) -> Result<Vec<ProbePoint>, ResolveError> {
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
            // Through the IFUNC's own name, not its resolver's (`resolve_probe_ifunc`,
            // at the same address, still probes the resolver). A pattern keeps it at the
            // resolver, as `probetop list` shows it, and the run says so.
            let ifunc_resolver =
                literal.is_none() && f.names().any(|n| n.ifunc && n.matches(&glob));
            if literal.is_some()
                && wrote.ifunc
                && let Some((pid, bias)) = scope.pid().zip(obj.load_bias)
            {
                match ifunc::implementation(pid, &obj.image, table, bias, f.address) {
                    Ok(chosen) => {
                        resolved = Some(match &chosen.function {
                            Some(g) => g.name.display.clone(),
                            None => format!("implementation at {:#x}", chosen.address),
                        });
                        let size = chosen.function.as_ref().map_or(0, |g| g.size);
                        target = (chosen.address, chosen.file_offset, size);
                    }
                    Err(reason) => {
                        return Err(ResolveError::Ifunc {
                            name: wrote.display.clone(),
                            object: obj.r.display.clone(),
                            reason,
                        });
                    }
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
            });
            read_paths.push(obj.r.read_path.clone());
        }
        loaded.push(obj);
    }
    if let Some(offset) = spec.offset
        && !points.is_empty()
    {
        return at_offset(spec, offset, points, &read_paths);
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

/// Moves the one point of `FUNC+OFFSET` to the offset, once it is known to be an
/// instruction boundary inside the function.
fn at_offset(
    spec: &ProbeSpec,
    offset: u64,
    mut points: Vec<ProbePoint>,
    read_paths: &[PathBuf],
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
        point.name = format!("{}+{offset:#x}", point.name);
        point.address += offset;
        point.file_offset += offset;
        span.offset = offset;
    }
    Ok(vec![point])
}

fn resolve_usdt(
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
    let mut arg_symbols = BTreeMap::new();
    if let Ok(args) = &probe.args {
        for arg in args {
            let disp = match &arg.location {
                usdt_args::ArgLocation::RipRelative { disp }
                | usdt_args::ArgLocation::Memory { disp, .. } => disp,
                _ => continue,
            };
            if let Some(sym) = &disp.symbol
                && let Some(addr) = obj.symbols().address_of(sym)
            {
                arg_symbols.insert(sym.clone(), addr);
            }
        }
    }
    let full = format!("{}:{}", probe.provider, probe.name);
    let shift = std::fs::File::open(&obj.r.read_path).map_or(0, |file| {
        usdt::nop5_shift_at(&file, probe.file_offset, classes::KernelRules::running())
    });
    ProbePoint {
        kind: ProbeKind::Usdt,
        object: obj.r.display.clone(),
        attach_path: obj.r.attach_path.clone(),
        name: full.clone(),
        address: probe.address + shift,
        file_offset: probe.file_offset + shift,
        symbol: full,
        load_bias: obj.load_bias,
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
    }
}

/// Where objects come from: a live process, or a file on disk.
enum Scope<'a> {
    Process {
        target: &'a Target,
        maps: Vec<MapEntry>,
        /// `/proc/PID/root`: the target's view of the filesystem.
        root: PathBuf,
        exe_id: Option<FileId>,
    },
    File(PathBuf),
}

/// An object to read: how to name it, read it, and attach to it.
#[derive(Debug, Clone)]
pub(crate) struct ObjectRef {
    /// As the user knows it.
    pub display: PathBuf,
    /// Where to read it from.
    pub read_path: PathBuf,
    /// Where the kernel attaches.
    pub attach_path: PathBuf,
    /// Its directory in the (target's) filesystem, for `.gnu_debuglink`.
    pub origin: PathBuf,
    pub id: Option<FileId>,
    pub is_main: bool,
}

impl<'a> Scope<'a> {
    /// The process resolved in, if any.
    fn pid(&self) -> Option<u32> {
        match self {
            Scope::Process { target, .. } => Some(target.pid),
            Scope::File(_) => None,
        }
    }

    fn process(target: &'a Target) -> Self {
        let exe_id = FileId::of(&target.exe_link()).ok();
        Scope::Process {
            target,
            maps: maps::read_maps(target.proc_pid()).unwrap_or_default(),
            root: crate::sys::procfs::file(target.proc_pid(), "root"),
            exe_id,
        }
    }

    /// `/` or `/proc/PID/root`.
    fn root(&self) -> PathBuf {
        match self {
            Scope::Process { root, .. } => root.clone(),
            Scope::File(_) => PathBuf::from("/"),
        }
    }

    /// Maps `path` (absolute, in the target's namespace) to a path we can open.
    fn in_root(&self, path: &Path) -> PathBuf {
        match self {
            Scope::Process { root, .. } => root.join(path.strip_prefix("/").unwrap_or(path)),
            Scope::File(_) => path.to_path_buf(),
        }
    }

    fn main_object(&self) -> ObjectRef {
        match self {
            Scope::Process { target, exe_id, .. } => {
                let exe_text = target.exe.to_string_lossy();
                let clean = exe_text.strip_suffix(" (deleted)").unwrap_or(&exe_text);
                ObjectRef {
                    display: target.exe.clone(),
                    read_path: target.exe_link(),
                    attach_path: target.exe_link(),
                    origin: self.in_root(Path::new(clean)),
                    id: *exe_id,
                    is_main: true,
                }
            }
            Scope::File(path) => ObjectRef {
                display: path.clone(),
                read_path: path.clone(),
                attach_path: path.clone(),
                origin: path.clone(),
                id: FileId::of(path).ok(),
                is_main: true,
            },
        }
    }

    /// The object of a mapping (a mapped file, in the target).
    fn mapped_object(&self, entry: &MapEntry) -> Option<ObjectRef> {
        let Scope::Process { target, exe_id, .. } = self else {
            return None;
        };
        let path = entry.path.as_deref()?;
        let id = FileId {
            dev_major: entry.dev_major,
            dev_minor: entry.dev_minor,
            inode: entry.inode,
        };
        if Some(id) == *exe_id {
            return Some(self.main_object());
        }
        let in_root = self.in_root(Path::new(path));
        let via = if entry.deleted {
            // The name now points elsewhere (or nowhere); the mapping still reaches the
            // mapped inode.
            crate::sys::procfs::file(
                target.proc_pid(),
                &format!("map_files/{:x}-{:x}", entry.start, entry.end),
            )
        } else {
            in_root.clone()
        };
        Some(ObjectRef {
            display: PathBuf::from(path),
            read_path: via.clone(),
            attach_path: via,
            origin: in_root,
            id: Some(id),
            is_main: false,
        })
    }

    /// Every distinct mapped file, the main executable first.
    fn mapped_objects(&self) -> Vec<ObjectRef> {
        let mut out = vec![self.main_object()];
        if let Scope::Process { maps, .. } = self {
            let mut seen: HashSet<FileId> = out.iter().filter_map(|o| o.id).collect();
            for entry in maps.iter().filter(|m| m.is_file()) {
                let id = FileId {
                    dev_major: entry.dev_major,
                    dev_minor: entry.dev_minor,
                    inode: entry.inode,
                };
                if seen.insert(id)
                    && let Some(o) = self.mapped_object(entry)
                {
                    out.push(o);
                }
            }
        }
        out
    }

    /// The objects a spec names.
    fn objects_for(&self, spec: &ProbeSpec) -> Result<Vec<ObjectRef>, ResolveError> {
        match (&spec.object, spec.kind) {
            (None, ProbeKind::Usdt) => Ok(self.mapped_objects()),
            (None, _) => Ok(vec![self.main_object()]),
            (Some(name), _) if name.starts_with('/') => Ok(vec![self.object_at(Path::new(name))]),
            (Some(name), _) => self.library(name),
        }
    }

    /// An object by absolute path: its mapping if the target has one.
    fn object_at(&self, path: &Path) -> ObjectRef {
        if let Scope::Process { maps, .. } = self {
            let text = path.to_string_lossy();
            let id = FileId::of(&self.in_root(path)).ok();
            if let Some(entry) = maps::mappings_of(maps, id, &text)
                .find(|m| m.is_file())
                .cloned()
                && let Some(o) = self.mapped_object(&entry)
            {
                return o;
            }
            if let Some(o) = self
                .mapped_objects()
                .into_iter()
                .find(|o| o.id.is_some() && o.id == id)
            {
                return o;
            }
        }
        let read = self.in_root(path);
        ObjectRef {
            display: path.to_path_buf(),
            read_path: read.clone(),
            attach_path: read.clone(),
            origin: read.clone(),
            id: FileId::of(&read).ok(),
            is_main: false,
        }
    }

    /// Library `name` (`libc`): mapped ones, else the dynamic linker's cache.
    fn library(&self, name: &str) -> Result<Vec<ObjectRef>, ResolveError> {
        let mut mapped_names = Vec::new();
        let mut found = Vec::new();
        let mut seen = HashSet::new();
        if let Scope::Process { maps, .. } = self {
            for entry in maps.iter().filter(|m| m.is_file()) {
                let Some(file_name) = entry
                    .path
                    .as_deref()
                    .and_then(|p| Path::new(p).file_name())
                    .map(|f| f.to_string_lossy().into_owned())
                else {
                    continue;
                };
                if ldcache::library_name_matches(name, &file_name) {
                    if seen.insert((entry.dev_major, entry.dev_minor, entry.inode))
                        && let Some(o) = self.mapped_object(entry)
                    {
                        found.push(o);
                    }
                } else {
                    mapped_names.push(file_name);
                }
            }
        }
        if !found.is_empty() {
            return Ok(found);
        }
        let entries = ldcache::entries(&self.root());
        if let Some(path) = ldcache::lookup(&entries, name) {
            return Ok(vec![self.object_at(&path)]);
        }
        mapped_names.extend(entries.iter().map(|e| e.name.clone()));
        mapped_names.sort();
        mapped_names.dedup();
        let suggestions = suggest::closest(
            name,
            mapped_names.iter().map(String::as_str),
            MAX_SUGGESTIONS,
        );
        Err(ResolveError::ObjectNotFound {
            name: name.to_string(),
            hint: suggest::hint(&suggestions),
        })
    }

    fn load_bias(&self, r: &ObjectRef, image: &ElfImage) -> Option<u64> {
        let Scope::Process { maps, .. } = self else {
            return None;
        };
        let text = r.display.to_string_lossy();
        elf::load_bias(image, maps::mappings_of(maps, r.id, &text))
    }
}

/// An object read, its symbol table and USDT notes indexed on first use.
pub(crate) struct Loaded {
    pub r: ObjectRef,
    pub image: ElfImage,
    pub load_bias: Option<u64>,
    debug: DebugSearch,
    symbols: OnceCell<(SymbolTable, SymbolSource)>,
    usdt: OnceCell<Vec<Result<UsdtProbe, UsdtNoteError>>>,
}

impl Loaded {
    fn load(r: ObjectRef, scope: &Scope<'_>, opts: &ResolveOptions) -> Result<Self, ResolveError> {
        let image = read_image(&r.read_path, &r.display)?;
        let load_bias = scope.load_bias(&r, &image);
        Ok(Self {
            r,
            image,
            load_bias,
            debug: opts.debug.clone(),
            symbols: OnceCell::new(),
            usdt: OnceCell::new(),
        })
    }

    fn table(&self) -> &(SymbolTable, SymbolSource) {
        self.symbols.get_or_init(|| {
            if self.image.has_symtab {
                return (
                    SymbolTable::build(&self.image.symbols, &self.image),
                    SymbolSource::Symtab,
                );
            }
            match debuginfo::find_extra_symbols(&self.image, &self.r.origin, &self.debug) {
                Some(extra) => (
                    // The object's own .dynsym plus the debug file's .symtab; offsets
                    // always from the object's own segments.
                    SymbolTable::build(
                        self.image.symbols.iter().chain(extra.symbols.iter()),
                        &self.image,
                    ),
                    extra.source,
                ),
                None => (
                    SymbolTable::build(&self.image.symbols, &self.image),
                    SymbolSource::Dynsym,
                ),
            }
        })
    }

    /// The function table (from the richest symbol source found).
    pub fn symbols(&self) -> &SymbolTable {
        &self.table().0
    }

    /// Where the symbols came from.
    pub fn source(&self) -> &SymbolSource {
        &self.table().1
    }

    /// USDT probe sites, or why each bad note is bad.
    pub fn usdt(&self) -> &[Result<UsdtProbe, UsdtNoteError>] {
        self.usdt.get_or_init(|| usdt::probes(&self.image))
    }
}

/// Reads and parses an ELF file, capping its size.
fn read_image(path: &Path, display: &Path) -> Result<ElfImage, ResolveError> {
    let data =
        debuginfo::read_capped(path, MAX_OBJECT_BYTES).map_err(|error| ResolveError::Read {
            path: display.to_path_buf(),
            error,
        })?;
    ElfImage::parse(&data).map_err(|e| ResolveError::Elf {
        path: display.to_path_buf(),
        reason: e.0,
    })
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
