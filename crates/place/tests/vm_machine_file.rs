//! `numalab topo --machine-file` on the live multi-node VM kernel (docs/testing.md): five
//! nodes, CPUs 0-3 on a ring, node 4 CPU-less.

mod machine_file_common;

use machine_file_common::{assert_latency_follows_distances, round_trip};
use numalab_linux::SysRoot;
use numalab_place::machine_file::machine_from_host;

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_kernel_gives_the_five_node_ring() {
    let m = machine_from_host(&SysRoot::host()).unwrap();
    assert_eq!(m.topology.num_nodes(), 5, "{}", m.description);
    for i in 0..4 {
        let cpus: Vec<u32> = m.topology.nodes[i].cpus.iter().map(|c| c.0).collect();
        assert_eq!(cpus, vec![i as u32], "node {i}");
    }
    assert!(m.topology.nodes[4].cpus.is_empty(), "node 4 has no CPUs");
    assert_eq!(
        m.topology.distances,
        vec![
            vec![10, 16, 22, 16, 28],
            vec![16, 10, 16, 22, 28],
            vec![22, 16, 10, 16, 28],
            vec![16, 22, 16, 10, 28],
            vec![28, 28, 28, 28, 10],
        ]
    );
    assert!(m.topology.nodes.iter().all(|n| n.mem_bytes > 0));
    assert_eq!(
        m.links.len(),
        8,
        "ring links plus one to node 4 per CPU node"
    );
    println!("{}", m.description);
    round_trip(&m, "vm");
    assert_latency_follows_distances(&m);
}
