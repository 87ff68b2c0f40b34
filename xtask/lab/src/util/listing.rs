//! `probetop list --json` and `probetop calibrate --json`, read through the serde types
//! probetop writes them with (`probe_user::inner::resolve::list`,
//! `probe_user::inner::calibrate::table`), so a renamed field fails to build here rather
//! than reading as absent.

use anyhow::{Context as _, Result};
pub(crate) use probe_user::inner::calibrate::table::{Calibration, Case};
pub(crate) use probe_user::inner::insn::classes::CostClass;
pub(crate) use probe_user::inner::resolve::debuginfo::SymbolSource;
pub(crate) use probe_user::inner::resolve::list::{ListedKind, Listing};

/// Parses `probetop list --json`'s output.
pub(crate) fn listing(stdout: &[u8]) -> Result<Listing> {
    serde_json::from_slice(stdout).context("reading probetop list --json")
}

/// The name `list --json` gives where an object's symbols came from (its `kind`).
pub(crate) fn symbols_kind(source: &SymbolSource) -> &'static str {
    match source {
        SymbolSource::Symtab => "symtab",
        SymbolSource::Dynsym => "dynsym",
        SymbolSource::BuildId(_) => "build_id",
        SymbolSource::DebugLink(_) => "debug_link",
        SymbolSource::MiniDebugInfo => "mini_debug_info",
        SymbolSource::Debuginfod(_) => "debuginfod",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are serde's tags of the same variants (the bench's tables show them):
    /// each reads back as its variant.
    #[test]
    fn symbols_kind_is_the_tag_list_writes() {
        let path = std::path::PathBuf::from("/usr/lib/debug/x.debug");
        for source in [
            SymbolSource::Symtab,
            SymbolSource::Dynsym,
            SymbolSource::BuildId(path.clone()),
            SymbolSource::DebugLink(path.clone()),
            SymbolSource::MiniDebugInfo,
            SymbolSource::Debuginfod(path.clone()),
        ] {
            let text = match &source {
                SymbolSource::BuildId(p)
                | SymbolSource::DebugLink(p)
                | SymbolSource::Debuginfod(p) => serde_json::json!({
                    "kind": symbols_kind(&source),
                    "path": p,
                }),
                _ => serde_json::json!({ "kind": symbols_kind(&source) }),
            };
            let back: SymbolSource = serde_json::from_value(text).expect("decode");
            assert_eq!(back, source);
        }
    }
}
