//! /proc/PID/numa_maps: any text parses or gives an error naming a line; never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_linux::numa_maps::{bytes_per_node, parse_numa_maps};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match parse_numa_maps(&text, "numa_maps") {
        Ok(entries) => {
            let _ = bytes_per_node(&entries);
            for e in &entries {
                let _ = e.pages();
                let _ = e.policy.to_mempolicy();
            }
        }
        Err(e) => assert!(e.line <= text.lines().count()),
    }
});
