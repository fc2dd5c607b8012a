//! More threads than CPUs: threads placed on one CPU take turns on it (issue "Trustworthy
//! simulation I", item 3; docs/model.md, "Time-sharing"; `sched.rs`), with a context switch's
//! cost and the cache and TLB disruption that sharing the core brings.

use numalab_core::{AccessKind, CpuId, MapOptions, Op};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;

fn machine() -> numalab_machine::Machine {
    // 16 CPUs: CFS slices of 12 ms for two threads (6 ms × 4, SCHED_TUNABLESCALING_LOG)
    numalab_machine::preset("xeon-e5520-2n").expect("preset exists")
}

/// `spec` run with its threads on `cpus`, sampling off.
fn run_spec(spec: &str, threads: usize, cpus: Vec<CpuId>) -> SimResult {
    let w = numalab_workloads::by_spec(spec, threads).expect("workload");
    let cfg = SimConfig {
        pinning: Pinning::Cpus(cpus),
        sample_period: 0,
        ..Default::default()
    };
    simulate(&machine(), w.as_ref(), cfg).expect("simulation runs")
}

#[test]
fn two_processes_on_one_cpu_each_take_twice_as_long_in_turns() {
    // a 1 MiB pointer chase (in the LLC), 1.5 million dependent loads: about 32 ms alone
    let spec = "ptrchase(bytes=1M;steps=1500000;page=4K)";
    let alone = run_spec(&format!("mix:{spec}"), 1, vec![CpuId(0)]);
    let shared = run_spec(&format!("mix:{spec}*2"), 2, vec![CpuId(0), CpuId(0)]);
    let t1 = alone.per_thread[0].time_ns;
    let slice = 12e6;
    assert!(t1 > 2.0 * slice, "{t1} ns alone: too short to take turns");
    for t in &shared.per_thread {
        // both end near twice the lone time: the other's turns are their run delay
        assert!(
            t.time_ns > 1.8 * t1 && t.time_ns < 2.3 * t1,
            "thread {} took {} ns, {t1} alone",
            t.thread,
            t.time_ns
        );
        assert!(t.context_switches >= 2, "{} switches", t.context_switches);
        let ran = t.time_ns - t.run_delay_ns;
        assert!((ran / t1 - 1.0).abs() < 0.1, "ran {ran} ns of {t1}");
    }
    // turns of one slice each: about the run's length over the slice
    let switches: u64 = shared.per_thread.iter().map(|t| t.context_switches).sum();
    let expect = shared.sim_time_ns / slice;
    assert!(
        (switches as f64 / expect - 1.0).abs() < 0.35,
        "{switches} switches in {} ns",
        shared.sim_time_ns
    );
    // the switch to another process empties the TLB: more walks than the lone run's
    let walks = |r: &SimResult, t: usize| r.per_thread[t].page_walks[0];
    assert!(
        walks(&shared, 0) > walks(&alone, 0) + 100,
        "{} walks shared, {} alone",
        walks(&shared, 0),
        walks(&alone, 0)
    );
    // alone on its CPU, a thread never switches
    assert_eq!(alone.per_thread[0].context_switches, 0);
}

#[test]
fn an_openmp_team_larger_than_its_cpus_runs_to_the_end_in_turns() {
    // four threads of one process on two CPUs, 20 ms of compute between barriers: each
    // barrier waits for the threads that have not had their turn yet
    let w = Script {
        maps: vec![(1 << 20, MapOptions::default())],
        threads: 4,
        ops: |b: &[u64], t: usize| {
            let mut v = Vec::new();
            for _ in 0..3 {
                for _ in 0..20 {
                    // the thread's own 32 pages, then 1 ms of compute
                    v.push(Op::Run {
                        base: b[0] + t as u64 * (32 << 12),
                        lines: 32,
                        stride_bytes: 4096,
                        kind: AccessKind::Read,
                    });
                    v.push(Op::Compute {
                        cycles: 2_260_000,
                        instructions: 2_260_000,
                    });
                }
                v.push(Op::Barrier);
            }
            v
        },
    };
    let run = |cpus: Vec<CpuId>| {
        let cfg = SimConfig {
            pinning: Pinning::Cpus(cpus),
            sample_period: 0,
            ..Default::default()
        };
        simulate(&machine(), &w, cfg).expect("simulation runs")
    };
    let own = run((0..4).map(CpuId).collect());
    let halved = run(vec![CpuId(0), CpuId(1)]);
    let ratio = halved.sim_time_ns / own.sim_time_ns;
    assert!(
        (1.9..2.1).contains(&ratio),
        "{ratio}: {} ns",
        halved.sim_time_ns
    );
    assert!(halved.per_thread.iter().all(|t| t.context_switches > 0));
    assert_eq!(
        own.per_thread
            .iter()
            .map(|t| t.context_switches)
            .sum::<u64>(),
        0
    );
    // threads of one process keep the TLB across a switch: no more walks than alone
    let walks = |r: &SimResult| r.per_thread.iter().map(|t| t.page_walks[0]).sum::<u64>();
    assert!(walks(&own) >= 4 * 32, "{} walks", walks(&own));
    assert!(
        walks(&halved) <= walks(&own) + 8,
        "{} against {}",
        walks(&halved),
        walks(&own)
    );
}
