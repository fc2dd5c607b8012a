//! The readers on trees recorded in the test VM (tests/vm_record.rs, extracted with
//! tests/data/extract-vm-record.sh): real Linux 6.12 and 6.1 kernels with 4 CPU nodes in a ring
//! (10/16/22), CPU-less node 4 at 28, an HMAT, and (6.12) weighted interleave and a separate
//! memory tier for node 4.

use numalab_core::{CpuId, MemPolicy, NodeId, NodeMask};
use numalab_linux::numa_maps::read_numa_maps;
use numalab_linux::smaps::read_smaps;
use numalab_linux::thp::{read_thp, ThpEnabled};
use numalab_linux::tiers::read_memory_tiers;
use numalab_linux::vmstat::read_vmstat;
use numalab_linux::weighted_interleave::read_weights;
use numalab_linux::{node::read_node_tree, Pid, SysRoot};
use std::path::PathBuf;

fn fixture(name: &str) -> SysRoot {
    SysRoot::new(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name),
    )
}

fn mask(s: &str) -> NodeMask {
    numalab_linux::parse::parse_node_list(s, "test").unwrap()
}

const KERNELS: [&str; 2] = ["vm-6.12-5node", "vm-6.1-5node"];

#[test]
fn node_tree_is_the_ring_with_a_cpuless_node() {
    for k in KERNELS {
        let t = read_node_tree(&fixture(k)).unwrap();
        assert_eq!(t.online, mask("0-4"), "{k}");
        assert_eq!(t.has_cpu, Some(mask("0-3")), "{k}");
        assert_eq!(t.has_memory, Some(mask("0-4")), "{k}");
        assert_eq!(t.cpuless(), mask("4"), "{k}");
        for i in 0..4u16 {
            assert_eq!(
                t.node(NodeId(i)).unwrap().cpus,
                vec![CpuId(i as u32)],
                "{k}"
            );
            for j in 0..4u16 {
                let ring = match (i as i32 - j as i32).rem_euclid(4) {
                    0 => 10,
                    2 => 22,
                    _ => 16,
                };
                assert_eq!(
                    t.distance(NodeId(i), NodeId(j)),
                    Some(ring),
                    "{k}: {i}->{j}"
                );
            }
            assert_eq!(t.distance(NodeId(i), NodeId(4)), Some(28), "{k}");
        }
        let topo = t.to_topology(1).unwrap();
        assert_eq!(topo.nodes.len(), 5);
        assert!(
            topo.nodes[4].cpus.is_empty() && topo.nodes[4].mem_bytes > 0,
            "{k}"
        );
        // The harness's HMAT: node 4's latency from its initiator (node 0) is 280 ns.
        let a = t.node(NodeId(4)).unwrap().access[0]
            .as_ref()
            .expect("HMAT access0 on node 4");
        assert_eq!(a.read_latency_ns, Some(280), "{k}");
        assert_eq!(a.initiators, mask("0"), "{k}");
    }
}

#[test]
fn tiers_and_weights_follow_the_kernel_version() {
    let tiers = read_memory_tiers(&fixture("vm-6.12-5node"))
        .unwrap()
        .unwrap();
    let by_nodes: Vec<NodeMask> = tiers.iter().map(|t| t.nodes).collect();
    assert!(
        by_nodes.contains(&mask("0-3")) && by_nodes.contains(&mask("4")),
        "6.12 puts node 4 in its own tier: {tiers:?}"
    );
    let tiers = read_memory_tiers(&fixture("vm-6.1-5node"))
        .unwrap()
        .unwrap();
    assert_eq!(
        tiers.len(),
        1,
        "6.1 keeps every node in one tier: {tiers:?}"
    );
    assert_eq!(tiers[0].nodes, mask("0-4"));
    let w = read_weights(&fixture("vm-6.12-5node"))
        .unwrap()
        .expect("6.12 has weighted interleave");
    assert_eq!(w.weights.len(), 5);
    assert!(w.weights.values().all(|v| *v >= 1));
    assert!(
        read_weights(&fixture("vm-6.1-5node")).unwrap().is_none(),
        "6.1 has none"
    );
}

#[test]
fn numa_maps_of_an_interleaved_mapping() {
    for k in KERNELS {
        let maps = read_numa_maps(&fixture(k), Pid::SELF).unwrap();
        let il: Vec<_> = maps
            .iter()
            .filter(|e| {
                e.policy.to_mempolicy() == Some(MemPolicy::Interleave { nodes: mask("0-3") })
            })
            .collect();
        assert_eq!(il.len(), 1, "{k}: the recorder's interleaved 64 pages");
        let per: Vec<u64> = (0..4)
            .map(|n| il[0].pages_per_node.get(&NodeId(n)).copied().unwrap_or(0))
            .collect();
        assert_eq!(per, vec![16, 16, 16, 16], "{k}");
        assert_eq!(il[0].kernel_page_size_kb, Some(4));
        let smaps = read_smaps(&fixture(k), Pid::SELF).unwrap();
        assert!(
            smaps
                .iter()
                .any(|v| v.start == il[0].start && v.rss_kb == Some(256)),
            "{k}"
        );
    }
}

#[test]
fn thp_and_vmstat_parse() {
    for k in KERNELS {
        let thp = read_thp(&fixture(k)).unwrap().unwrap();
        assert_eq!(thp.enabled, ThpEnabled::Always, "{k}: Debian's default");
        assert_eq!(thp.hpage_pmd_size_bytes, Some(2 << 20));
        let v = read_vmstat(&fixture(k)).unwrap();
        assert!(v.numa_hit.is_some_and(|n| n > 0), "{k}");
    }
}
