//! Presentation: the live terminal UI, the end-of-run summary, and exports.
pub mod export;
pub mod list;
