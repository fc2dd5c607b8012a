//! Node and CPU lists (`online`, `has_memory`, `cpulist`): a parsed node list prints back in
//! the kernel's format and parses to the same mask.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_linux::parse::{parse_cpu_list, parse_node_list};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(m) = parse_node_list(&text, "online") {
        let again = parse_node_list(&m.to_string(), "online").expect("own output parses");
        assert_eq!(again, m);
    }
    if let Ok(cpus) = parse_cpu_list(&text, "cpulist") {
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
    }
});
