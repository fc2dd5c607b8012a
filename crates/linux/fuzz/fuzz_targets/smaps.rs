//! /proc/PID/smaps: any text parses or gives an error naming a line; never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_linux::smaps::parse_smaps;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match parse_smaps(&text, "smaps") {
        Ok(vmas) => {
            for v in &vmas {
                assert!(v.start <= v.end);
                let _ = v.len_bytes();
            }
        }
        Err(e) => assert!(e.line >= 1 && e.line <= text.lines().count()),
    }
});
