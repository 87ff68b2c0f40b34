//! What attaching can fail with.

use std::io;

use super::perf::UPROBE_PMU;
use crate::spec::ProbeKind;

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("loading the eBPF programs failed: {0}")]
    Load(#[from] aya::EbpfError),
    #[error("the eBPF program {name} was refused by the kernel: {source}")]
    Program {
        name: &'static str,
        source: aya::programs::ProgramError,
    },
    #[error("the eBPF object has no map {0}")]
    MissingMap(&'static str),
    #[error("the eBPF object has no program {0}")]
    MissingProgram(&'static str),
    #[error("map {name}: {source}")]
    Map {
        name: &'static str,
        source: aya::maps::MapError,
    },
    #[error("this kernel has no uprobe PMU ({UPROBE_PMU}): it needs CONFIG_UPROBE_EVENTS ({0})")]
    NoUprobePmu(io::Error),
    #[error("cannot attach {kind} to {path} at offset {offset:#x}: {source}")]
    PerfEventOpen {
        probe_id: u32,
        kind: ProbeKind,
        path: String,
        offset: u64,
        source: io::Error,
    },
    #[error("cannot bind the eBPF program to the {kind} at {path}+{offset:#x}: {source}")]
    Link {
        probe_id: u32,
        kind: ProbeKind,
        path: String,
        offset: u64,
        source: io::Error,
    },
    #[error(
        "cannot attach {kind} to {path} at offset {offset:#x} (uprobe_multi link, probe {probe_id}): {source}"
    )]
    UprobeMulti {
        probe_id: u32,
        kind: ProbeKind,
        path: String,
        offset: u64,
        source: io::Error,
    },
    #[error("the kernel has no uprobe_multi links ({0})")]
    NoUprobeMulti(io::Error),
    #[error(
        "the uprobe_multi copy of the eBPF program {name} was refused: {source}; verifier: {log}"
    )]
    MultiProgram {
        name: &'static str,
        source: io::Error,
        log: String,
    },
    #[error("preparing the eBPF programs for uprobe_multi links failed: {0}")]
    Relocation(String),
    #[error("reading the kernel's statistics of the eBPF program {name}: {source}")]
    ProgramInfo {
        name: &'static str,
        source: io::Error,
    },
    #[error("{0}")]
    Unsupported(String),
    #[error(
        "this probetop was built without its eBPF programs (AYA_BUILD_SKIP was set): rebuild without it"
    )]
    NoEbpfObject,
}

/// A path to show for a probed file: the file a process-relative path names
/// (`/proc/self/fd/9`, `/proc/PID/exe` mean nothing to a reader), else the path itself.
pub(super) fn shown_path(path: &std::path::Path) -> String {
    if path.starts_with("/proc")
        && let Ok(target) = std::fs::read_link(path)
    {
        return target.display().to_string();
    }
    path.display().to_string()
}

impl AttachError {
    /// Whether the kernel refused this one point for the instruction there (ENOTSUPP,
    /// 524: a prefix or opcode it will not probe; ENOEXEC: bytes it cannot decode),
    /// which says nothing about the other points.
    pub fn point_refused(&self) -> bool {
        const ENOTSUPP: i32 = 524;
        match self {
            Self::PerfEventOpen { source, .. } | Self::UprobeMulti { source, .. } => {
                matches!(source.raw_os_error(), Some(ENOTSUPP | libc::ENOEXEC))
            }
            _ => false,
        }
    }

    /// Whether the kernel refused this one point with EINVAL: for a point resolution
    /// found (on an instruction, inside the file) that is the site held by another
    /// probe with another USDT semaphore offset (the kernel logs "ref_ctr_offset
    /// mismatch"), which says nothing about the other points.
    pub fn site_held(&self) -> bool {
        match self {
            Self::PerfEventOpen { source, .. } | Self::UprobeMulti { source, .. } => {
                source.raw_os_error() == Some(libc::EINVAL)
            }
            _ => false,
        }
    }

    /// The probe the kernel refused, when the error is about one.
    pub fn probe_id(&self) -> Option<u32> {
        match self {
            Self::PerfEventOpen { probe_id, .. }
            | Self::Link { probe_id, .. }
            | Self::UprobeMulti { probe_id, .. } => Some(*probe_id),
            _ => None,
        }
    }
}
