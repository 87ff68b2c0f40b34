//! Presentation: the live terminal UI, the end-of-run summary, and exports.
pub mod export;
pub mod format;
pub mod list;
pub mod listen;
pub mod summary;
pub mod tui;

use crate::spec::ProbeKind;

/// How a probe is named on screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeLabel {
    pub kind: ProbeKind,
    /// `kind:name`, as a user would write the spec.
    pub display: String,
    /// The object's path.
    pub object: String,
}

impl ProbeLabel {
    pub fn new(kind: ProbeKind, name: &str, object: &str) -> Self {
        Self {
            kind,
            display: format!("{kind}:{name}"),
            object: object.to_string(),
        }
    }
}
