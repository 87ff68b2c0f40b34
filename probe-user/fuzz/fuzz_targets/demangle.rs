//! See probe_user_fuzz::demangle.
#![no_main]

probe_user_fuzz::install_meter!();

libfuzzer_sys::fuzz_target!(|data: &[u8]| probe_user_fuzz::demangle(data));
