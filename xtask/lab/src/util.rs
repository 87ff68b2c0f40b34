//! What several tasks share: /proc readers and CPU-time clocks (`proc`), the
//! statistics their reports give (`stats`: medians with their spread), the splice of a
//! report's section into its document (`doc`), and probetop's JSON read back: a run's
//! export (`export`), a listing and a calibration (`listing`).

pub(crate) mod doc;
pub(crate) mod export;
pub(crate) mod listing;
pub(crate) mod proc;
pub(crate) mod stats;
