//! Single-value files: weighted-interleave weights and auto, numa_balancing, numastat.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_linux::balancing::parse_numa_balancing;
use numalab_linux::node::parse_numastat;
use numalab_linux::weighted_interleave::{parse_auto, parse_weight};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(w) = parse_weight(&text, "node0") {
        assert!(w >= 1);
    }
    let _ = parse_auto(&text, "auto");
    if let Ok(m) = parse_numa_balancing(&text, "numa_balancing") {
        assert!(m.value() <= 3);
    }
    let _ = parse_numastat(&text, "numastat");
});
