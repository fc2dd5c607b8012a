//! Node and CPU specs of numalab's numactl-compatible commands (`--membind`, `--cpunodebind`,
//! `--physcpubind`, `+`-relative and `!`-inverted lists), memory policy specs and the CPU lists
//! of machine files: parsed or refused with an error, never a panic; what parses lies inside
//! what exists.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_core::{CpuId, MemPolicy, NodeId, NodeMask};
use numalab_place::nodespec::{parse_cpus, parse_nodes, SpecContext};

fuzz_target!(|data: &[u8]| {
    let spec = String::from_utf8_lossy(data);
    // 4 nodes of 8 CPUs; the caller may use nodes 0-2 and CPUs 0-19
    let online = NodeMask::from_nodes((0..4).map(NodeId));
    let ctx = SpecContext {
        online_nodes: online.clone(),
        allowed_nodes: NodeMask::from_nodes((0..3).map(NodeId)),
        online_cpus: (0..32).map(CpuId).collect(),
        allowed_cpus: (0..20).map(CpuId).collect(),
        // device specs would read the host's sysfs and resolve host names: refused here
        devices: None,
    };
    if let Ok(m) = parse_nodes(&spec, &ctx) {
        assert!(m.is_subset_of(&online), "{spec:?} gave {m:?}");
    }
    if let Ok(cpus) = parse_cpus(&spec, &ctx) {
        assert!(cpus.iter().all(|c| c.0 < 32), "{spec:?} gave {cpus:?}");
    }
    if let Ok(m) = NodeMask::parse(&spec, &online) {
        assert!(m.is_subset_of(&online), "{spec:?} gave {m:?}");
    }
    let _ = MemPolicy::parse(&spec, &online);
    let _ = numalab_machine::cpulist::parse(&spec);
});
