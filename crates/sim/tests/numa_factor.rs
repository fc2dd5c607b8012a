//! M13's NUMA factors (reference workloads §2.4) are properties of the machine: the ratio of
//! a timed phase of random accesses with remote and with local memory must not depend on how
//! many accesses the phase times. `randrw`'s warm-up lap (workloads/src/randrw.rs) brings the
//! page tables into the caches first, as a long run has them; without it the first walk to
//! each page-table line misses inside the timed phase, a fixed cost a short run cannot hide.

use numalab_core::{CpuId, MemPolicy, NodeId, NodeMask};
use numalab_sim::{simulate, Pinning, SimConfig};

/// Simulated ns per access of the `access` phase, the buffer bound to `node`.
fn ns_per_access(spec: &str, node: u16, accesses: u64) -> f64 {
    let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
    let w = numalab_workloads::by_spec(&format!("{spec},accesses={accesses}"), 1).unwrap();
    let cfg = SimConfig {
        pinning: Pinning::Cpus(vec![CpuId(m.topology.nodes[0].cpus[0].0)]),
        task_policy: MemPolicy::Bind {
            nodes: NodeMask::single(NodeId(node)),
            numa_balancing: false,
        },
        sample_period: 0,
        ..Default::default()
    };
    let r = simulate(&m, w.as_ref(), cfg).unwrap();
    r.phase("access").unwrap().thread_ns / accesses as f64
}

/// Remote over local time of the timed writes, in per cent.
fn write_factor_percent(spec: &str, accesses: u64) -> f64 {
    (ns_per_access(spec, 1, accesses) / ns_per_access(spec, 0, accesses) - 1.0) * 100.0
}

#[test]
fn the_random_write_factor_does_not_depend_on_the_timed_count() {
    // 64 MiB of 4 KiB pages: 2 048 page-table lines
    let spec = "randrw:bytes=64M,op=write,page=4K";
    let (short, long) = (
        write_factor_percent(spec, 20_000),
        write_factor_percent(spec, 160_000),
    );
    assert!(
        (short - long).abs() < 1.0,
        "{short:.2} % over 20 000 writes, {long:.2} % over 160 000"
    );
    // the loop waits for its walks, not for the stores' RFOs, which the store buffer hides:
    // remote writes cost about what local ones do (M13: 1.018)
    assert!(long.abs() < 3.0, "write factor {long:.2} %");
    // without the warm-up, the short run's timed phase pays the tables' first misses, in
    // remote memory for the remote run
    let cold = write_factor_percent(&format!("{spec},warmup=0"), 20_000);
    assert!(cold > short + 2.0, "cold {cold:.2} %, warm {short:.2} %");
}
