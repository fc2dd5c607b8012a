//! One short simulation per workload added for the literature policies, on a small preset:
//! the program runs to its end in the engine, every thread references memory, and the phases
//! it declares are reported.

use numalab_sim::{simulate, SimConfig};
use numalab_workloads::by_spec;

fn smoke(spec: &str, threads: usize) -> numalab_sim::results::SimResult {
    let m = numalab_machine::preset("xeon-e5-2699v4-2n").expect("preset exists");
    let w = by_spec(spec, threads).unwrap_or_else(|e| panic!("{spec}: {e}"));
    let r =
        simulate(&m, w.as_ref(), SimConfig::default()).unwrap_or_else(|e| panic!("{spec}: {e}"));
    assert_eq!(r.per_thread.len(), w.threads(), "{spec}");
    assert!(r.sim_time_ns > 0.0, "{spec}");
    for t in &r.per_thread {
        assert!(
            t.loads + t.stores > 0,
            "{spec}: thread {} made no reference",
            t.thread
        );
        assert!(t.time_ns > 0.0, "{spec}: thread {}", t.thread);
    }
    assert!(!r.phases.is_empty(), "{spec}: phases reported");
    r
}

#[test]
fn spec_kernels_simulate() {
    for spec in [
        "lbm-like:nx=40,ny=40,nz=20,steps=2",
        "gems-like:nx=32,ny=32,nz=32,pml=4,steps=2",
        "mcf-like:nodes=20000,arcs=200000,pivots=200",
        "omnetpp-like:modules=2000,queue=4000,events=20000",
        "libquantum-like:log2_states=16,gates=10",
        "gcc-like:nodes=20000,inputs=2,passes=2",
    ] {
        let r = smoke(spec, 2);
        // two copies: two tasks, each first-touching its own pages
        assert_eq!(r.per_thread[0].task, 0, "{spec}");
        assert_eq!(r.per_thread[1].task, 1, "{spec}");
    }
}

#[test]
fn mix_simulates_with_one_task_per_copy() {
    let r = smoke(
        "mix:lbm-like(nx=20;ny=20;nz=10;steps=1)*2+libquantum-like(log2_states=14;gates=4)*2",
        1,
    );
    let tasks: Vec<u32> = r.per_thread.iter().map(|t| t.task).collect();
    assert_eq!(tasks, vec![0, 1, 2, 3]);
}

#[test]
fn mix_runs_any_workload_with_its_own_policy_and_cpus() {
    // A two-thread STREAM on CPUs 12-13 (node 1 of xeon-x5650-2n) and two lbm copies whose
    // memory is bound to node 1 while they run wherever the run's pinning puts them.
    let m = numalab_machine::preset("xeon-x5650-2n").expect("preset exists");
    let spec = "mix:stream(n=100000;ntimes=2;threads=2;cpus=12-13)+lbm-like(nx=20;ny=20;nz=10;steps=1;mempolicy=bind:1)*2";
    let w = by_spec(spec, 1).unwrap();
    assert_eq!(w.threads(), 4);
    assert_eq!(
        by_spec(&w.name(), 1).unwrap().name(),
        w.name(),
        "the name parses back"
    );
    let cfg = SimConfig {
        pinning: numalab_sim::Pinning::Sockorder,
        ..Default::default()
    };
    let r = simulate(&m, w.as_ref(), cfg).unwrap();
    let stream: Vec<(u32, u32)> = r.per_thread[..2].iter().map(|t| (t.task, t.cpu)).collect();
    assert_eq!(
        stream,
        vec![(0, 12), (0, 13)],
        "STREAM is one process on its CPUs"
    );
    let lbm: Vec<u32> = r.per_thread[2..].iter().map(|t| t.task).collect();
    assert_eq!(lbm, vec![1, 2], "each lbm copy is a process of its own");
    for t in &r.per_thread[2..] {
        // sockorder's first CPUs (node 0), the STREAM's taken out
        assert_eq!(t.node, 0, "lbm thread on CPU {}", t.cpu);
        assert!(
            t.dram_remote > 0 && t.dram_local == 0,
            "bound to node 1: {t:?}"
        );
    }
    for t in &r.per_thread[..2] {
        assert_eq!(t.node, 1);
    }
    // two programs on one CPU take turns on it (the simulator's sched.rs)
    let shared = by_spec("mix:lbm-like(nx=20;ny=20;nz=10;steps=1;cpus=3)*2", 1).unwrap();
    let r = simulate(&m, shared.as_ref(), SimConfig::default()).unwrap();
    assert!(r.per_thread.iter().all(|t| t.cpu == 3));
    assert!(
        r.per_thread.iter().any(|t| t.run_delay_ns > 0.0),
        "{:?}",
        r.per_thread
    );
    // a policy naming a node the machine lacks is refused, naming the task
    let bad = by_spec(
        "mix:lbm-like(nx=20;ny=20;nz=10;steps=1;mempolicy=bind:5)",
        1,
    )
    .unwrap();
    let e = simulate(&m, bad.as_ref(), SimConfig::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("task 0") && e.contains("bind:5"), "{e}");
}

#[test]
fn npb_is_simulates() {
    let r = smoke("npb-is:class=S,niter=2", 4);
    assert!(r.phase("timed").is_some() && r.phase("full_verify").is_some());
}

#[test]
fn npb_ft_simulates() {
    let r = smoke("npb-ft:class=S,niter=1,scale=0.25", 4);
    assert!(r.phase("fft-z").is_some() && r.phase("checksum").is_some());
}

#[test]
fn matmul_simulates() {
    let r = smoke("matmul:n=256,rows=16", 4);
    assert!(r.phase("multiply").is_some());
}

#[test]
fn lu_blocked_and_streamcluster_simulate() {
    let r = smoke("lu-blocked:n=512,b=64,interleave=2", 4);
    assert!(r.phase("gemm").is_some() && r.phase("factor").is_some());
    let r = smoke("streamcluster:input=simsmall,pgains=3,speedy=2", 4);
    assert!(r.phase("pgain").is_some());
}

#[test]
fn metis_simulates() {
    let r = smoke("metis-wc:input=512K,vocab=20000,split=32K", 4);
    assert!(r.phase("reduce").is_some() && r.phase("merge").is_some());
    smoke("metis-wrmem:input=256K,vocab=20000,split=32K", 3);
}

/// Metis pins worker i to CPU i itself (lib/pthreadpool.c), whatever the run's pinning, alone
/// or in a mix; on a machine with fewer CPUs than threads the run is refused, naming the CPU.
#[test]
fn metis_pins_its_threads_itself() {
    let m = numalab_machine::preset("xeon-e5-2699v4-2n").expect("preset exists");
    let w = by_spec("metis-wc:input=256K,vocab=5000,split=16K", 4).unwrap();
    let cfg = SimConfig {
        pinning: numalab_sim::Pinning::Sequential,
        ..Default::default()
    };
    let r = simulate(&m, w.as_ref(), cfg).unwrap();
    let cpus: Vec<u32> = r.per_thread.iter().map(|t| t.cpu).collect();
    assert_eq!(
        cpus,
        vec![0, 1, 2, 3],
        "sequential would spread them over both nodes"
    );
    // in a mix, each copy pins to CPUs 0.. as the real program would, and they take turns
    let mix = by_spec(
        "mix:metis-wc(input=128K;vocab=2000;split=16K;threads=2)*2+lbm-like(nx=20;ny=20;nz=10;steps=1)",
        1,
    )
    .unwrap();
    let r = simulate(&m, mix.as_ref(), SimConfig::default()).unwrap();
    let cpus: Vec<u32> = r.per_thread.iter().map(|t| t.cpu).collect();
    assert_eq!(&cpus[..4], &[0, 1, 0, 1]);
    assert!(
        !cpus[..4].contains(&cpus[4]),
        "lbm takes a free CPU: {cpus:?}"
    );
    let too_many = by_spec("metis-wc:input=256K,vocab=5000,split=16K", 90).unwrap();
    let e = simulate(&m, too_many.as_ref(), SimConfig::default())
        .expect_err("88 CPUs for 90 threads")
        .to_string();
    assert!(e.contains("CPU 88 does not exist"), "{e}");
}

#[test]
fn ssca2_simulates() {
    let r = smoke("ssca2:log2_vertices=12,sources=2", 4);
    assert!(r.phase("k4-bc").is_some() && r.phase("k1-build").is_some());
}

#[test]
fn jbb_simulates() {
    let r = smoke(
        "jbb:eden=8M,survivor=2M,warehouse=2M,items=10000,tlab=64K,transactions=3000",
        4,
    );
    assert!(r.phase("gc").is_some() && r.phase("transactions").is_some());
}

#[test]
fn npb_sp_and_lu_simulate() {
    let r = smoke("npb-sp:class=S,niter=2", 4);
    assert!(r.phase("z_solve").is_some());
    let r = smoke("npb-lu:class=S,itmax=2", 4);
    assert!(r.phase("lower-sweep").is_some() && r.phase("rhs").is_some());
}

#[test]
fn npb_ua_simulates() {
    let r = smoke("npb-ua:class=S,niter=6", 4);
    assert!(r.phase("diffusion").is_some() && r.phase("adapt").is_some());
}

#[test]
fn a_mapping_larger_than_the_machine_is_refused_before_anything_runs() {
    // Linux's heuristic overcommit: one mapping larger than RAM (no swap) is refused. Neither
    // the chase's permutation (2^31 entries) nor the page table of 7 TiB is built.
    let m = numalab_machine::preset("xeon-x5650-2n").expect("preset exists");
    for spec in [
        "ptrchase:bytes=128G",
        "stream:n=1000000000000",
        "mix:ptrchase(bytes=64G)+lbm-like",
    ] {
        let w = by_spec(spec, 1).unwrap();
        let e = simulate(&m, w.as_ref(), SimConfig::default())
            .err()
            .unwrap_or_else(|| panic!("{spec} ran"))
            .to_string();
        assert!(
            e.contains("refused") && e.contains("24.0 GiB of memory"),
            "{spec}: {e}"
        );
    }
}
