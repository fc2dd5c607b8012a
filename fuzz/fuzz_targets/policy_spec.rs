//! Policy spec strings (`--policy name:key=value,...`, comma lists of them): built or refused
//! with an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let spec = String::from_utf8_lossy(data);
    let _ = numalab_policies::parse_spec(&spec);
    let _ = numalab_policies::by_specs(&spec);
});
