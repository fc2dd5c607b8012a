//! nodeN/meminfo.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_linux::node::parse_meminfo;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(m) = parse_meminfo(&text, "meminfo") {
        assert_eq!(m.fields.get("MemTotal"), Some(&m.mem_total_kb));
        let _ = m.mem_total_bytes();
    }
});
