//! Every metric per phase (issue "Trustworthy simulation I", item 4): a phase's LAR,
//! imbalance and counters come from that phase alone.

use numalab_core::{
    AccessKind, Action, CpuId, MapOptions, MemPolicy, MemoryView, NodeId, Op, Policy, ThreadId,
};
use numalab_sim::{simulate, Pinning, SimConfig};
use numalab_workloads::script::Script;

/// Each line of `[start, start+len)` once.
fn lines(start: u64, len: u64, kind: AccessKind) -> Op {
    Op::Run {
        base: start,
        lines: (len / 64) as u32,
        stride_bytes: 64,
        kind,
    }
}

#[test]
fn each_phase_reports_its_own_locality_and_traffic() {
    // Two threads on nodes 0 and 1. Phase 0: each writes its own 8 MiB (first touch: local).
    // Phase 1: each reads the other's 8 MiB, twice (all remote, and more than the LLC holds).
    const MIB8: u64 = 8 << 20;
    let w = Script {
        maps: vec![(2 * MIB8, MapOptions::default())],
        threads: 2,
        ops: |b: &[u64], t: usize| {
            let own = b[0] + t as u64 * MIB8;
            let other = b[0] + (1 - t as u64) * MIB8;
            vec![
                Op::Phase { id: 0 },
                lines(own, MIB8, AccessKind::Write),
                Op::Barrier,
                Op::Phase { id: 1 },
                lines(other, MIB8, AccessKind::Read),
                lines(other, MIB8, AccessKind::Read),
            ]
        },
    };
    let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
    let cfg = SimConfig {
        // CPU 0 is on node 0, CPU 12 on node 1 (xeon-x5650-2n: CPUs 0-11 and 12-23)
        pinning: "0,12".parse::<Pinning>().unwrap(),
        task_policy: MemPolicy::Default,
        sample_period: 97,
        ..Default::default()
    };
    let r = simulate(&m, &w, cfg).unwrap();
    assert_eq!(r.per_thread[1].node, NodeId(1).0, "threads on two nodes");
    assert_eq!(r.phases.len(), 2, "{:?}", r.phases);
    let (p0, p1) = (&r.phases[0], &r.phases[1]);
    let lar0 = p0.metrics.lar_percent.unwrap();
    let lar1 = p1.metrics.lar_percent.unwrap();
    let whole = r.metrics.lar_percent.unwrap();
    assert!(lar0 > 95.0, "first touch is local: {lar0}");
    assert!(lar1 < 5.0, "reading the other's data is remote: {lar1}");
    assert!(lar1 < whole && whole < lar0, "{lar1} < {whole} < {lar0}");
    // both nodes serve the same share in each phase
    assert!(p1.metrics.imbalance_percent.unwrap() < 10.0);
    // the phase's counters add up to the run's
    for t in 0..2 {
        let sum = |f: fn(&numalab_sim::results::ThreadStats) -> u64| {
            r.phases.iter().map(|p| f(&p.per_thread[t])).sum::<u64>()
        };
        let s = &r.per_thread[t];
        assert_eq!(sum(|x| x.loads), s.loads);
        assert_eq!(
            sum(|x| x.dram_local + x.dram_remote),
            s.dram_local + s.dram_remote
        );
        assert_eq!(
            s.dram_by_node.iter().sum::<u64>(),
            s.dram_local + s.dram_remote
        );
        let in_phases: f64 = r.phases.iter().map(|p| p.per_thread[t].time_ns).sum();
        assert!(
            (in_phases - s.time_ns).abs() < 1.0,
            "{in_phases} vs {}",
            s.time_ns
        );
    }
    // phase 1 reads 2 × 16 MiB from DRAM, no faults; phase 0 faults every page
    let reads1: u64 = p1.per_thread.iter().map(|t| t.dram_remote).sum();
    assert!(reads1 > (16 << 20) / 64, "{reads1}");
    assert_eq!(p1.per_thread.iter().map(|t| t.faults).sum::<u64>(), 0);
    assert_eq!(
        p0.per_thread.iter().map(|t| t.faults).sum::<u64>(),
        2 * MIB8 / 4096
    );
    assert!(p0.metrics.max_page_fault_time_share_percent.unwrap() > 0.0);
}

/// Moves thread 0 to CPU 12 (node 1 of xeon-x5650-2n) when it reaches phase 1.
struct MoveAtPhase1;

impl Policy for MoveAtPhase1 {
    fn name(&self) -> &str {
        "move-at-phase-1"
    }
    fn period_ns(&self) -> u64 {
        1_000_000_000
    }
    fn tick(&mut self, _: &dyn MemoryView) -> Vec<Action> {
        Vec::new()
    }
    fn on_phase(&mut self, _: &dyn MemoryView, thread: ThreadId, phase: u16) -> Vec<Action> {
        if (thread.0, phase) == (0, 1) {
            vec![Action::MoveThread {
                thread,
                cpu: CpuId(12),
            }]
        } else {
            Vec::new()
        }
    }
}

#[test]
fn a_phase_counts_a_moved_thread_on_the_node_it_moved_to() {
    // One thread writes 8 MiB on node 0 (phase 0), is moved to node 1, and reads it back
    // (phase 1): phase 1's reads are remote, from node 1's point of view.
    const MIB8: u64 = 8 << 20;
    let w = Script {
        maps: vec![(MIB8, MapOptions::default())],
        threads: 1,
        ops: |b: &[u64], _| {
            vec![
                Op::Phase { id: 0 },
                lines(b[0], MIB8, AccessKind::Write),
                Op::Phase { id: 1 },
                lines(b[0], MIB8, AccessKind::Read),
                lines(b[0], MIB8, AccessKind::Read),
            ]
        },
    };
    let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
    let cfg = SimConfig {
        pinning: "0".parse::<Pinning>().unwrap(),
        policies: vec![Box::new(MoveAtPhase1)],
        ..Default::default()
    };
    let r = simulate(&m, &w, cfg).unwrap();
    let (p0, p1) = (&r.phases[0], &r.phases[1]);
    assert_eq!((p0.per_thread[0].node, p1.per_thread[0].node), (0, 1));
    assert!(p0.metrics.lar_percent.unwrap() > 95.0);
    assert!(p1.metrics.lar_percent.unwrap() < 5.0, "{:?}", p1.metrics);
}

#[test]
fn a_thread_that_ends_in_an_epoch_keeps_that_epochs_waits_in_its_last_phase() {
    // Six threads of node 0 read their own data from node 1, thread t (t + 1) × 512 KiB, and end:
    // the link is oversubscribed, so a thread that ends early in an epoch still waits for its
    // last lines at the epoch's end. Its last phase must hold that wait, as the run's time
    // does: the phase ends when the last thread's run does, and each thread's share of the
    // phase is its whole time after the phase began.
    const MIB4: u64 = 4 << 20;
    let w = Script {
        maps: vec![(
            6 * MIB4,
            MapOptions {
                policy: Some(MemPolicy::Preferred { node: NodeId(1) }),
                ..Default::default()
            },
        )],
        threads: 6,
        ops: |b: &[u64], t: usize| {
            let own = b[0] + t as u64 * MIB4;
            vec![
                Op::Phase { id: 0 },
                lines(own, MIB4, AccessKind::Write),
                Op::Barrier,
                Op::Phase { id: 1 },
                lines(own, (t as u64 + 1) << 19, AccessKind::Read),
            ]
        },
    };
    let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
    for epoch_ns in [20_000.0, 100_000.0] {
        let cfg = SimConfig {
            pinning: "0-5".parse::<Pinning>().unwrap(),
            epoch_ns,
            ..Default::default()
        };
        let r = simulate(&m, &w, cfg).unwrap();
        let last = &r.phases[1];
        assert_eq!(last.end_ns, r.sim_time_ns, "epoch {epoch_ns} ns");
        for (t, th) in r.per_thread.iter().enumerate() {
            let in_phase = last.per_thread[t].time_ns;
            assert!(
                th.time_ns - in_phase >= last.start_ns - 1e-6
                    // it left the barrier with the others, within a few µs
                    && (th.time_ns - in_phase - r.phases[0].end_ns).abs() < 1e4,
                "thread {t}: ends at {} ns, {in_phase} ns of it in the last phase (epoch {epoch_ns})",
                th.time_ns
            );
        }
    }
}

#[test]
fn phases_are_listed_in_the_order_they_began() {
    // Thread 1 enters phase 5 late and leaves it (by finishing) long before thread 0 leaves
    // phase 1, which began at once: phase 5 is closed first, and still listed second.
    const MIB8: u64 = 8 << 20;
    let w = Script {
        maps: vec![(2 * MIB8, MapOptions::default())],
        threads: 2,
        ops: |b: &[u64], t: usize| {
            if t == 0 {
                vec![
                    Op::Phase { id: 1 },
                    lines(b[0], MIB8, AccessKind::Write),
                    lines(b[0], MIB8, AccessKind::Read),
                ]
            } else {
                let own = b[0] + MIB8;
                vec![
                    lines(own, 64 << 10, AccessKind::Write),
                    Op::Phase { id: 5 },
                    lines(own, 64 << 10, AccessKind::Read),
                ]
            }
        },
    };
    let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
    let cfg = SimConfig {
        pinning: "0,12".parse::<Pinning>().unwrap(),
        ..Default::default()
    };
    let r = simulate(&m, &w, cfg).unwrap();
    let ids: Vec<u16> = r.phases.iter().map(|p| p.id).collect();
    assert_eq!(ids, [1, 5], "{:?}", r.phases);
    let (p1, p5) = (&r.phases[0], &r.phases[1]);
    assert!(
        p1.start_ns < p5.start_ns,
        "{} < {}",
        p1.start_ns,
        p5.start_ns
    );
    // phase 5 ended first: the order is not the order of their ends
    assert!(p5.end_ns < p1.end_ns, "{} < {}", p5.end_ns, p1.end_ns);
}
