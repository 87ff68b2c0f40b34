//! What several tasks share: /proc readers and CPU-time clocks (`proc`), and the
//! statistics their reports give (`stats`: medians with their spread).

pub mod proc;
pub mod stats;
