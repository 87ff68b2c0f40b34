//! Where objects come from (a live process's maps and root, or a file on disk), and
//! each object read once, its symbols and USDT notes indexed on first use.

use std::cell::OnceCell;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::debuginfo::{self, DebugSearch, SymbolSource};
use super::debuginfod::Debuginfod;
use super::elf::{self, ElfImage};
use super::symbols::SymbolTable;
use super::usdt::{self, UsdtNoteError, UsdtProbe};
use super::{MAX_SUGGESTIONS, ResolveError, ResolveOptions, ldcache, suggest};
use crate::spec::{ProbeKind, ProbeSpec};
use crate::sys::maps::{self, FileId, MapEntry};
use crate::target::Target;

/// Largest object file read (a debug build of a big server is a few hundred MiB).
const MAX_OBJECT_BYTES: u64 = 2 << 30;

/// Where objects come from: a live process, or a file on disk.
pub(super) enum Scope<'a> {
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
    pub(super) fn pid(&self) -> Option<u32> {
        match self {
            Scope::Process { target, .. } => Some(target.pid),
            Scope::File(_) => None,
        }
    }

    pub(super) fn process(target: &'a Target) -> Self {
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
    pub(super) fn mapped_objects(&self) -> Vec<ObjectRef> {
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
    pub(super) fn objects_for(&self, spec: &ProbeSpec) -> Result<Vec<ObjectRef>, ResolveError> {
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
    debuginfod: Debuginfod,
    symbols: OnceCell<(SymbolTable, SymbolSource)>,
    usdt: OnceCell<Vec<Result<UsdtProbe, UsdtNoteError>>>,
}

impl Loaded {
    pub(super) fn load(
        r: ObjectRef,
        scope: &Scope<'_>,
        opts: &ResolveOptions,
    ) -> Result<Self, ResolveError> {
        let image = read_image(&r.read_path, &r.display)?;
        let load_bias = scope.load_bias(&r, &image);
        Ok(Self {
            r,
            image,
            load_bias,
            debug: opts.debug.clone(),
            debuginfod: opts.debuginfod.clone(),
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
            let extra = debuginfo::find_extra_symbols(&self.image, &self.r.origin, &self.debug)
                .or_else(|| {
                    debuginfo::from_debuginfod(&self.image, &self.r.display, &self.debuginfod)
                });
            match extra {
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

    /// Where separate debug files were looked for (`probetop list` says so of a
    /// stripped object).
    pub(crate) fn debug_looked_in(&self) -> Vec<PathBuf> {
        debuginfo::looked_in(&self.image, &self.r.origin, &self.debug)
    }

    /// Which debuginfod servers were asked for its debug file, or why none was.
    pub(crate) fn debuginfod_said(&self) -> String {
        self.debuginfod.said()
    }

    /// The function table (from the richest symbol source found).
    pub(super) fn symbols(&self) -> &SymbolTable {
        &self.table().0
    }

    /// Where the symbols came from.
    pub(super) fn source(&self) -> &SymbolSource {
        &self.table().1
    }

    /// USDT probe sites, or why each bad note is bad.
    pub(super) fn usdt(&self) -> &[Result<UsdtProbe, UsdtNoteError>] {
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
