//! The engine runs the best build of its hot loop that the host has (engine.rs,
//! `run_thread`): AVX-512 or AVX2 with the compact private-cache layout
//! (hw/compact_cache.rs), AVX2 with the wide layout where a private cache has more than 16
//! ways, or the baseline x86-64 build. All must give the same simulated results to the last
//! bit: every field of the result but the host time. (A build the host lacks falls back to
//! the best it has, and then this checks that a run is deterministic.)

use numalab_core::MemPolicy;
use numalab_sim::{simulate, HostIsa, Pinning, SimConfig, SimResult, ThpMode};

fn run(machine: &str, workload: &str, threads: usize, thp: ThpMode, isa: HostIsa) -> String {
    let mut m = numalab_machine::preset(machine).expect("preset exists");
    if machine == "xeon-gold6130-2n" {
        // a 1.25 MiB 20-way private cache (Ice Lake-SP): wider than the compact layout holds,
        // so the AVX builds take the wide one (`run_thread_avx2_wide`)
        m.core.private_cache.bytes = 1280 << 10;
        m.core.private_cache.ways = 20;
    }
    let w = numalab_workloads::by_spec(workload, threads).expect("workload spec is valid");
    let cfg = SimConfig {
        pinning: Pinning::Sockorder,
        thp,
        task_policy: if workload.starts_with("stream") {
            MemPolicy::Interleave {
                nodes: m.topology.online(),
            }
        } else {
            MemPolicy::Default
        },
        max_host_isa: isa,
        ..Default::default()
    };
    let mut r: SimResult = simulate(&m, w.as_ref(), cfg).expect("simulation runs");
    assert!(
        r.memory_references > 100_000,
        "{workload}: too small to compare"
    );
    r.host_seconds = 0.0;
    serde_json::to_string(&r).expect("result serialises")
}

#[test]
fn every_engine_build_agrees_bit_for_bit() {
    for (machine, workload, threads, thp) in [
        // 32-entry fully associative L1 DTLB (ring form), 24-way LLC
        (
            "opteron6272-8n",
            "npb-cg:class=W,niter=1",
            16,
            ThpMode::Never,
        ),
        // separate L1 pools per page size, THP
        (
            "xeon-e5-2699v4-2n",
            "gups:log2_words=20",
            4,
            ThpMode::Always,
        ),
        // interleaved streams, Run ops crossing pages; a 20-way private cache (see `run`)
        (
            "xeon-gold6130-2n",
            "stream:n=200000,ntimes=2",
            8,
            ThpMode::Never,
        ),
    ] {
        let base = run(machine, workload, threads, thp, HostIsa::Baseline);
        for isa in [HostIsa::Avx2, HostIsa::Avx512] {
            let fast = run(machine, workload, threads, thp, isa);
            assert!(
                fast == base,
                "{machine} {workload}: the {} build ({} here) differs from the baseline",
                isa,
                isa.capped()
            );
        }
    }
}
