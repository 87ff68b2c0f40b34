//! See probe_user_fuzz::probe_spec.
#![no_main]

probe_user_fuzz::install_meter!();

libfuzzer_sys::fuzz_target!(|data: &[u8]| probe_user_fuzz::probe_spec(data));
