#![no_std]
//! The library target only exists so probe-user can build-depend on this package,
//! which makes cargo rerun its build script when the eBPF programs change.
