//! probetop's JSON export (`-o run.json`), read through the serde types probetop writes
//! it with (`probe_user::inner::present::export::json`), so a renamed field fails to build here
//! rather than reading as absent.

use std::path::Path;

use anyhow::{Context as _, Result};
pub(crate) use probe_user::inner::present::export::json::JsonReport;

/// A run's export, as probetop wrote it.
pub(crate) type Export = JsonReport<'static>;

/// Reads the export at `path`.
pub(crate) fn read(path: &Path) -> Result<Export> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("reading {}", path.display()))
}

/// Hits over every probe of the run.
pub(crate) fn total_hits(export: &Export) -> u64 {
    export.probe_rows().map(|p| p.hits).sum()
}
