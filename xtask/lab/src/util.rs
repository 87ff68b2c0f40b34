//! What several tasks share: /proc readers and CPU-time clocks (`proc`), the
//! statistics their reports give (`stats`: medians with their spread), and the splice of
//! a report's section into its document (`doc`).

pub mod doc;
pub mod proc;
pub mod stats;
