//! Shared by `machine_file.rs` and `vm_machine_file.rs`: checks of a machine made from the
//! kernel's view, through the simulator.

#![allow(dead_code)] // each test target uses part of it

use numalab_core::{MemPolicy, NodeId};
use numalab_machine::{CacheGeom, Machine};
use numalab_sim::{simulate, Pinning, SimConfig};
use std::path::PathBuf;

/// A fresh temporary path for a machine file (the process id and a tag keep runs apart).
pub fn temp_toml(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "numalab-machine-file-{tag}-{}.toml",
        std::process::id()
    ))
}

/// Write `m` as `numalab topo --machine-file` does, load it back the way `numalab sim
/// --machine FILE` does, and check it is the same machine and valid.
pub fn round_trip(m: &Machine, tag: &str) -> Machine {
    let path = temp_toml(tag);
    let shown = path.display().to_string();
    std::fs::write(
        &path,
        numalab_place::machine_file::machine_file_text(m, &shown),
    )
    .unwrap();
    let loaded = numalab_machine::load(&shown).unwrap_or_else(|e| panic!("{shown}: {e}"));
    std::fs::remove_file(&path).unwrap();
    loaded.validate().unwrap();
    assert_eq!(
        &loaded, m,
        "the machine file parses back to the same machine"
    );
    loaded
}

/// Simulated load-to-use latency of a pointer chase from the first CPU of `from` over memory
/// bound to `to`, ns per access. Caches are shrunk (as in crates/sim/tests/calibration.rs) so
/// the 16 MiB chain measures DRAM, not a large host LLC; 2 MiB pages keep the TLB out of it.
pub fn chase_ns(m: &Machine, from: NodeId, to: NodeId) -> f64 {
    let mut m = m.clone();
    m.core.private_cache = CacheGeom {
        bytes: 64 << 10,
        ways: 8,
    };
    for n in &mut m.nodes {
        if n.llc.is_some() {
            n.llc = Some(CacheGeom {
                bytes: 128 << 10,
                ways: 8,
            });
        }
    }
    let steps = 20_000.0;
    let spec = format!(
        "ptrchase:bytes=16M,steps={steps},page=2M,mem_node={},warmup=0",
        to.0
    );
    let w = numalab_workloads::by_spec(&spec, 1).unwrap();
    let cpu = m.topology.nodes[from.index()].cpus[0];
    let cfg = SimConfig {
        pinning: Pinning::Cpus(vec![cpu]),
        task_policy: MemPolicy::Default,
        sample_period: 0,
        ..Default::default()
    };
    let r = simulate(&m, w.as_ref(), cfg).unwrap();
    let chase = r.phase("chase").unwrap();
    (chase.end_ns - chase.start_ns) / steps
}

/// From every CPU node, the simulated idle latency orders memory nodes as the SLIT distances
/// do: a nearer node is faster, nodes at equal distance are within 3 % of each other.
pub fn assert_latency_follows_distances(m: &Machine) {
    let d = &m.topology.distances;
    for s in m.topology.nodes.iter().filter(|n| !n.cpus.is_empty()) {
        let lat: Vec<f64> = m
            .topology
            .nodes
            .iter()
            .map(|t| chase_ns(m, s.id, t.id))
            .collect();
        for a in 0..lat.len() {
            for b in 0..lat.len() {
                let (da, db) = (d[s.id.index()][a], d[s.id.index()][b]);
                if da < db {
                    assert!(
                        lat[a] < lat[b],
                        "from node {}: node {a} (distance {da}) {:.1} ns is not faster than node {b} (distance {db}) {:.1} ns; all: {lat:.1?}",
                        s.id.0,
                        lat[a],
                        lat[b]
                    );
                } else if da == db {
                    assert!(
                        (lat[a] - lat[b]).abs() / lat[a] < 0.03,
                        "from node {}: nodes {a} and {b} are both at distance {da} but take {:.1} and {:.1} ns",
                        s.id.0,
                        lat[a],
                        lat[b]
                    );
                }
            }
        }
    }
}
