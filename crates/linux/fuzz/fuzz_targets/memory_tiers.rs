//! Memory tiers: each input line is `dirname:nodelist`; tiers come out sorted and disjoint.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_linux::tiers::parse_memory_tiers;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let pairs: Vec<(&str, &str)> = text
        .lines()
        .map(|l| l.split_once(':').unwrap_or((l, "")))
        .collect();
    if let Ok(tiers) = parse_memory_tiers(&pairs) {
        for w in tiers.windows(2) {
            assert!(w[0].id < w[1].id);
            assert!(w[0].nodes.and(&w[1].nodes).is_empty());
        }
    }
});
