//! nodeN/distance rows.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_linux::node::parse_distance;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(row) = parse_distance(&text, "distance") {
        assert_eq!(row.len(), text.split_whitespace().count());
    }
});
