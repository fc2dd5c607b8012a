//! /proc/vmstat: parse, and every counter kept is found again by name.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_linux::vmstat::parse_vmstat;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(s) = parse_vmstat(&text, "vmstat") {
        for (k, v) in s.iter() {
            assert_eq!(s.get(&k), Some(v), "{k}");
        }
        let _ = s.since(&s);
    }
});
