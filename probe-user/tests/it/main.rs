//! probe-user's integration tests, one binary (one link, one run of the harness): each
//! module was a test binary of its own. Most attach real probes to the fixtures
//! (`cargo xtask fixtures`) and so need root; they are `#[ignore = "needs ..."]` as the
//! test policy in docs/architecture.md ("Tests") asks, so a plain `cargo test` passes
//! anywhere and lists what it skipped, and `cargo xtask test` runs them all with
//! `--include-ignored`.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic with its location is the failure report"
)]

mod common;

mod attach;
mod bad_input;
mod budget;
mod cost_calibrate;
mod cost_classes;
mod cost_estimate;
mod cost_insitu;
mod cost_others;
mod debuginfod;
mod detach;
mod diff;
mod edges;
mod exports;
mod forks;
mod host;
mod hostile;
mod latency;
mod list;
mod listen;
mod lost_terminal;
mod memory;
mod mysql;
mod others;
mod otlp;
mod overload;
mod postgres;
mod probe_points;
mod returns;
mod shared_sites;
mod tui;
mod unsafe_sites;
