//! What several tasks share: /proc readers and CPU-time clocks (`proc`), the
//! statistics their reports give (`stats`: medians with their spread), the splice of a
//! report's section into its document (`doc`), and probetop's JSON export read back
//! (`export`).

pub(crate) mod doc;
pub(crate) mod export;
pub(crate) mod proc;
pub(crate) mod stats;
