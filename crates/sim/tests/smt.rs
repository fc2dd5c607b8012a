//! SMT (docs/model.md, "SMT"; issue "Trustworthy simulation II", item 5): the hardware
//! threads of one core share its private cache, TLBs and miss concurrency, so a second thread
//! on a memory-bound core adds little; a core whose sibling has finished is whole again. The
//! two cores of a Bulldozer module share the L2 and nothing else.

use numalab_core::{AccessKind, CpuId, MapOptions, Op};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Threads on `cpus` of the X5650 preset (M13's numbering: CPUs 0 and 1 are one core, 2 and
/// 3 the next). Thread t first touches its own buffer of `bytes`, then (a phase boundary)
/// reads it `passes[t]` times in Runs of 64 independent lines.
fn run(cpus: &[u32], bytes: u64, passes: &[u64]) -> SimResult {
    run_on("xeon-x5650-2n", cpus, bytes, passes)
}

/// As [`run`], on the preset `machine`.
fn run_on(machine: &str, cpus: &[u32], bytes: u64, passes: &[u64]) -> SimResult {
    let m = numalab_machine::preset(machine).unwrap();
    let passes = passes.to_vec();
    let w = Script {
        maps: vec![(bytes, MapOptions::default()); cpus.len()],
        threads: cpus.len(),
        ops: move |bases: &[u64], t: usize| {
            let base = bases[t];
            let mut ops = Vec::new();
            for p in 0..bytes.div_ceil(4096) {
                ops.push(Op::Access {
                    addr: base + p * 4096,
                    kind: AccessKind::Write,
                });
            }
            ops.push(Op::Phase { id: 1 });
            for _ in 0..passes[t] {
                for c in 0..bytes / (64 * 64) {
                    ops.push(Op::Run {
                        base: base + c * 64 * 64,
                        lines: 64,
                        stride_bytes: 64,
                        kind: AccessKind::Read,
                    });
                }
            }
            ops
        },
    };
    let cfg = SimConfig {
        pinning: Pinning::Cpus(cpus.iter().map(|&c| CpuId(c)).collect()),
        sample_period: 0,
        ..Default::default()
    };
    simulate(&m, &w, cfg).unwrap()
}

/// When thread `t` finished its reads, counted from the phase boundary (its own clock).
fn thread_ns(r: &SimResult, t: usize) -> f64 {
    let th = &r.per_thread[t];
    th.time_ns
        - r.phases
            .iter()
            .find(|p| p.id == 1)
            .map_or(0.0, |p| p.start_ns)
}

#[test]
fn a_second_thread_on_a_memory_bound_core_adds_little() {
    // 32 MiB each: far beyond the 12 MiB LLC, every line a miss
    let alone = run(&[0], 32 * MIB, &[2]);
    let siblings = run(&[0, 1], 32 * MIB, &[2, 2]);
    let two_cores = run(&[0, 2], 32 * MIB, &[2, 2]);
    let (a, s, c) = (
        thread_ns(&alone, 0),
        thread_ns(&siblings, 0).max(thread_ns(&siblings, 1)),
        thread_ns(&two_cores, 0).max(thread_ns(&two_cores, 1)),
    );
    eprintln!("alone {a:.0} ns, siblings {s:.0} ns, two cores {c:.0} ns");
    // the same core's concurrency serves twice the lines: about twice the time
    assert!(s > 1.8 * a, "siblings {s:.0} ns against alone {a:.0} ns");
    // two cores have twice the concurrency (the controller's queue slows them somewhat)
    assert!(
        c < 0.8 * s,
        "two cores {c:.0} ns against siblings {s:.0} ns"
    );
}

#[test]
fn siblings_share_the_private_cache() {
    // 160 KiB each: fits the 256 KiB L2 alone, not twice. Siblings take turns an epoch at
    // a time (docs/model.md, "SMT"), so the runs span many epochs: 400 passes.
    let passes = [400, 400];
    let siblings = run(&[0, 1], 160 * KIB, &passes);
    let two_cores = run(&[0, 2], 160 * KIB, &passes);
    let misses = |r: &SimResult| r.per_thread.iter().map(|t| t.private_misses).sum::<u64>();
    let (s, c) = (misses(&siblings), misses(&two_cores));
    eprintln!("private misses: siblings {s}, two cores {c}");
    assert!(s > 5 * c, "siblings {s} misses against two cores {c}");
}

#[test]
fn a_bulldozer_module_shares_its_l2_but_not_its_concurrency() {
    // opteron6272-8n: CPUs 0 and 1 are one module (one 2 MiB L2), 0 and 2 two modules.
    // 1.25 MiB each fits the L2 alone, not twice.
    let passes = [200, 200];
    let module = run_on("opteron6272-8n", &[0, 1], 1280 * KIB, &passes);
    let two_modules = run_on("opteron6272-8n", &[0, 2], 1280 * KIB, &passes);
    let misses = |r: &SimResult| r.per_thread.iter().map(|t| t.private_misses).sum::<u64>();
    let (s, c) = (misses(&module), misses(&two_modules));
    eprintln!("private misses: one module {s}, two modules {c}");
    assert!(s > 5 * c, "one module {s} misses against two modules {c}");
    // beyond every cache the two cores of a module stream as two cores do, not as SMT
    // siblings splitting one core's concurrency
    let module = run_on("opteron6272-8n", &[0, 1], 32 * MIB, &[2, 2]);
    let two_modules = run_on("opteron6272-8n", &[0, 2], 32 * MIB, &[2, 2]);
    let slowest = |r: &SimResult| thread_ns(r, 0).max(thread_ns(r, 1));
    let (s, c) = (slowest(&module), slowest(&two_modules));
    eprintln!("streaming: one module {s:.0} ns, two modules {c:.0} ns");
    assert!(
        s < 1.1 * c,
        "one module {s:.0} ns against two modules {c:.0} ns"
    );
}

#[test]
fn a_core_whose_sibling_finished_is_whole_again() {
    // thread 1 reads 16 times as much as thread 0: most of its run is alone on the core
    let alone = run(&[1], 32 * MIB, &[16]);
    let shared = run(&[0, 1], 32 * MIB, &[1, 16]);
    let (a, s) = (thread_ns(&alone, 0), thread_ns(&shared, 1));
    eprintln!("alone {a:.0} ns, after a short sibling {s:.0} ns");
    // slowed while the sibling ran (about one pass of 16), not after
    assert!(s > a, "{s:.0} against {a:.0}");
    assert!(s < 1.15 * a, "{s:.0} against {a:.0}");
}
