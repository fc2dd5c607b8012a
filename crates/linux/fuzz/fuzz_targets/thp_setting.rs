//! Bracketed THP choice files (`always [madvise] never`).
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_linux::thp::{parse_choice, ShmemEnabled, ThpDefrag, ThpEnabled};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = parse_choice(&text, "enabled") {
        assert!(c.options.contains(&c.selected));
    }
    if let Ok(e) = ThpEnabled::parse(&text, "enabled") {
        assert_eq!(ThpEnabled::from_kernel(e.as_str()), Some(e));
    }
    let _ = ThpDefrag::parse(&text, "defrag");
    let _ = ShmemEnabled::parse(&text, "shmem_enabled");
});
