//! Page-table pages have a node (os/pt_pages.rs; docs/model.md, "OS model"): a fault that
//! needs a table page allocates it with the faulting task's policy, not the mapping's, and a
//! walk reads each entry from its table page's node. M13's random writes (reference
//! workloads §2.4) to a buffer bound to the other node then walk in local memory.

use numalab_core::{CpuId, MemPolicy, NodeId, NodeMask};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};

/// `randrw` with 4 KiB pages on `xeon-x5650-2n`: one thread on node 0, its buffer bound to
/// node 1 (`mem_node`, an mbind), under `task_policy`.
fn run(task_policy: MemPolicy) -> SimResult {
    let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
    let w = numalab_workloads::by_spec(
        "randrw:bytes=256M,accesses=200000,op=read,page=4K,mem_node=1",
        1,
    )
    .unwrap();
    let cfg = SimConfig {
        pinning: Pinning::Cpus(vec![CpuId(m.topology.nodes[0].cpus[0].0)]),
        task_policy,
        sample_period: 0,
        ..Default::default()
    };
    simulate(&m, w.as_ref(), cfg).unwrap()
}

#[test]
fn tables_follow_the_task_policy_and_walks_read_them_there() {
    // default task policy: the thread faulted the buffer in, so its tables are on node 0;
    // every DRAM read served by node 0 is a walk's, since every data page is on node 1
    let local = run(MemPolicy::Default);
    assert_eq!(local.per_node[0].resident_bytes, 0, "{:?}", local.per_node);
    let t = &local.per_thread[0];
    assert!(t.page_walks[0] > 100_000, "{:?}", t.page_walks);
    assert!(
        t.dram_by_node[0] > 10_000,
        "walk reads from node 0: {:?}",
        t.dram_by_node
    );
    // the task bound to node 1 too: its tables are there, and nothing is read from node 0
    let bound = run(MemPolicy::Bind {
        nodes: NodeMask::single(NodeId(1)),
        numa_balancing: false,
    });
    assert_eq!(bound.per_thread[0].dram_by_node[0], 0);
    // same data reads either way; the local tables make the walks, and the run, shorter
    assert!(
        local.sim_time_ns < bound.sim_time_ns,
        "{} ns with local tables, {} ns with remote ones",
        local.sim_time_ns,
        bound.sim_time_ns
    );
}
