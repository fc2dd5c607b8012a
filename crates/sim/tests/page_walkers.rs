//! A core's page walkers (docs/model.md, "One memory reference", Page walkers): independent
//! references that miss the TLB share the core's walkers, so a Skylake core, which does two
//! walks in parallel, pays half a walk for each of a run of independent misses; a dependent
//! reference waits for its whole walk whatever the walkers.

use numalab_core::{CpuId, MemPolicy, NodeId, NodeMask};
use numalab_machine::Machine;
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};

/// `xeon-gold6130-2n` (Skylake-SP) with `walkers` page walkers.
fn skylake(walkers: u32) -> Machine {
    let mut m = numalab_machine::preset("xeon-gold6130-2n").unwrap();
    m.core.tlb.page_walkers = walkers;
    m
}

/// One thread on node 0's first CPU, its memory bound to node 0.
fn run(m: &Machine, spec: &str) -> SimResult {
    let w = numalab_workloads::by_spec(spec, 1).unwrap();
    let cfg = SimConfig {
        pinning: Pinning::Cpus(vec![CpuId(m.topology.nodes[0].cpus[0].0)]),
        task_policy: MemPolicy::Bind {
            nodes: NodeMask::single(NodeId(0)),
            numa_balancing: false,
        },
        sample_period: 0,
        ..Default::default()
    };
    simulate(m, w.as_ref(), cfg).unwrap()
}

#[test]
fn the_skylake_presets_have_two_walkers_and_the_older_cores_one() {
    for name in [
        "xeon-gold6130-2n",
        "xeon-gold6130-4n",
        "xeon-platinum8180-2n",
    ] {
        let m = numalab_machine::preset(name).unwrap();
        assert_eq!(m.core.tlb.page_walkers, 2, "{name}");
    }
    for name in ["xeon-x5650-2n", "xeon-e5-2699v3-2n", "opteron6272-8n"] {
        let m = numalab_machine::preset(name).unwrap();
        assert_eq!(m.core.tlb.page_walkers, 1, "{name}");
    }
}

#[test]
fn independent_misses_share_the_walkers() {
    // 64 MiB of 4 KiB pages, ten times the STLB's reach: nearly every read walks
    let spec = "randrw:bytes=64M,accesses=50000,op=read,page=4K";
    let (one, two) = (run(&skylake(1), spec), run(&skylake(2), spec));
    let (a1, a2) = (one.phase("access").unwrap(), two.phase("access").unwrap());
    let walks = |r: &SimResult| r.per_thread[0].page_walks[0];
    // the same references and the same walks: only their time differs
    assert_eq!(walks(&one), walks(&two));
    assert!(walks(&one) > 50_000, "{} walks", walks(&one));
    // the loop is bound by its walks: a second walker takes off about half of each walk's
    // time, never more (the reads' data time is the same)
    let ratio = a2.thread_ns / a1.thread_ns;
    assert!(
        ratio < 0.85,
        "two walkers {:.0} ns, one {:.0} ns",
        a2.thread_ns,
        a1.thread_ns
    );
    assert!(
        ratio > 0.5,
        "two walkers {:.0} ns, one {:.0} ns",
        a2.thread_ns,
        a1.thread_ns
    );
}

#[test]
fn a_dependent_chase_waits_for_its_whole_walk_whatever_the_walkers() {
    let spec = "ptrchase:bytes=64M,steps=20000,page=4K";
    let (one, two) = (run(&skylake(1), spec), run(&skylake(2), spec));
    let (c1, c2) = (one.phase("chase").unwrap(), two.phase("chase").unwrap());
    assert!(one.per_thread[0].page_walks[0] > 20_000);
    assert_eq!(c1.thread_ns, c2.thread_ns);
}
