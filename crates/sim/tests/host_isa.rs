//! The engine runs an AVX2 build of its hot loop where the host has AVX2 (engine.rs,
//! `run_thread_avx2`) and the baseline x86-64 build elsewhere. Both must give the same
//! simulated results to the last bit: every field of the result but the host time.
//! (On a host without AVX2 both runs take the baseline build, and this checks that a run
//! is deterministic.)

use numalab_core::MemPolicy;
use numalab_sim::{simulate, Pinning, SimConfig, SimResult, ThpMode};

fn run(machine: &str, workload: &str, threads: usize, thp: ThpMode, baseline: bool) -> String {
    let m = numalab_machine::preset(machine).expect("preset exists");
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
        baseline_host_isa: baseline,
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
fn avx2_and_baseline_builds_agree_bit_for_bit() {
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
        // interleaved streams, Run ops crossing pages
        (
            "xeon-gold6130-2n",
            "stream:n=200000,ntimes=2",
            8,
            ThpMode::Never,
        ),
    ] {
        let fast = run(machine, workload, threads, thp, false);
        let base = run(machine, workload, threads, thp, true);
        assert!(fast == base, "{machine} {workload}: the two builds differ");
    }
}
