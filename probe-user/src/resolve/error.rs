//! Why a spec resolved to nothing usable.

use std::path::PathBuf;

use super::ifunc;

/// Why a spec resolved to nothing usable.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResolveError {
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
    #[error("USDT probe {name} in {object} is refused: {reason}")]
    UsdtUnusable {
        name: String,
        object: PathBuf,
        reason: String,
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
