//! TLB shootdowns interrupt every other CPU running the task, and a migration raises one per
//! folio before Linux 6.3 (issue "Trustworthy simulation II", items 2 and 10; docs/model.md,
//! "TLB shootdowns"; `os/tlb_shootdown.rs`). A policy daemon, or a thread, moves a task's
//! buffer with one move_pages call while the task's other threads compute.

mod common;

use common::MigrateOnce;
use numalab_core::{AccessKind, MapOptions, Op};
use numalab_machine::Machine;
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;

const PAGE: u64 = 4096;
const PAGES: u64 = 1024;

/// Compute ops of 20 000 cycles each thread runs after the first touches: about 18 ms at the
/// preset's 1.7 GHz, past the end of the daemon's call (2 ms to about 14 ms).
const OUTLAST_THE_CALL: u32 = 1_500;

/// `threads` threads on node 0: thread 0 first-touches the buffer, then all compute past the
/// end of the daemon's call (which comes at 2 ms) and leave.
fn run(m: &Machine, threads: usize) -> SimResult {
    run_on(
        m,
        threads,
        m.topology.nodes[0].cpus[..threads].to_vec(),
        OUTLAST_THE_CALL,
    )
}

/// The buffer at `base` first-touched: one write a page.
fn first_touch(base: u64) -> Op {
    Op::Run {
        base,
        lines: PAGES as u32,
        stride_bytes: PAGE as u16,
        kind: AccessKind::Write,
    }
}

/// `ops` times 20 000 cycles of compute.
fn compute(ops: u32) -> impl Iterator<Item = Op> {
    (0..ops).map(|_| Op::Compute {
        cycles: 20_000,
        instructions: 20_000,
    })
}

/// As `run`, on `cpus`, each thread computing `ops` times 20 000 cycles.
fn run_on(m: &Machine, threads: usize, cpus: Vec<numalab_core::CpuId>, ops: u32) -> SimResult {
    let w = Script {
        maps: vec![(PAGES * PAGE, MapOptions::default())],
        threads,
        ops: |b: &[u64], t: usize| {
            let mut v = Vec::new();
            if t == 0 {
                v.push(first_touch(b[0]));
            }
            v.push(Op::Barrier);
            v.extend(compute(ops));
            v
        },
    };
    let cfg = SimConfig {
        pinning: Pinning::Cpus(cpus),
        sample_period: 0,
        // at 2 ms: after the first touches
        policies: vec![Box::new(MigrateOnce::at(2_000_000))],
        ..Default::default()
    };
    simulate(m, &w, cfg).expect("simulation runs")
}

fn machine(linux: &str) -> Machine {
    let mut m = numalab_machine::preset("opteron6164he-4n").expect("preset exists");
    m.os.linux = linux.into();
    m
}

/// The daemon's call: its base, the copies, and `flushes` shootdowns reaching `cpus` CPUs.
fn call_ns(m: &Machine, flushes: u64, cpus: usize) -> f64 {
    m.os.move_pages_base_ns
        + (PAGES * PAGE) as f64 / (m.os.move_pages_mbps * 1e-3)
        + flushes as f64 * m.os.shootdown_initiator_ns(cpus)
}

#[test]
fn before_6_3_each_page_moved_interrupts_every_thread_of_the_task() {
    let m = machine("3.9");
    let r = run(&m, 6);
    assert_eq!(r.vmstat.pgmigrate_success, PAGES);
    // the kernel's CONFIG_DEBUG_TLBFLUSH counters
    assert_eq!(r.vmstat.nr_tlb_remote_flush, PAGES);
    assert_eq!(r.vmstat.nr_tlb_remote_flush_received, 6 * PAGES);
    let expect = call_ns(&m, PAGES, 6);
    assert!(
        (r.policy_ns / expect - 1.0).abs() < 1e-6,
        "the daemon's call took {} ns, {expect} expected",
        r.policy_ns
    );
    for (i, t) in r.per_thread.iter().enumerate() {
        let ipi = PAGES as f64 * m.os.tlb_flush_ipi_ns;
        assert!(
            (t.migration_ns / ipi - 1.0).abs() < 1e-6,
            "thread {i} lost {} ns, {ipi} expected",
            t.migration_ns
        );
    }
}

#[test]
fn from_6_3_a_batch_of_512_pages_shares_one_flush() {
    let m = machine("6.3");
    let r = run(&m, 6);
    assert_eq!(r.vmstat.pgmigrate_success, PAGES);
    assert_eq!(r.vmstat.nr_tlb_remote_flush, PAGES / 512);
    let expect = call_ns(&m, PAGES / 512, 6);
    assert!(
        (r.policy_ns / expect - 1.0).abs() < 1e-6,
        "the daemon's call took {} ns, {expect} expected",
        r.policy_ns
    );
    let ipi = (PAGES / 512) as f64 * m.os.tlb_flush_ipi_ns;
    assert!((r.per_thread[3].migration_ns / ipi - 1.0).abs() < 1e-6);
}

#[test]
fn threads_taking_turns_on_a_cpu_are_one_cpu_to_reach() {
    // six threads on three CPUs: each shootdown reaches three CPUs, and the thread holding
    // each loses the interrupt
    let m = machine("3.9");
    let c = &m.topology.nodes[0].cpus;
    let cpus = [c[0], c[1], c[2], c[0], c[1], c[2]].to_vec();
    let r = run_on(&m, 6, cpus, OUTLAST_THE_CALL);
    assert_eq!(r.vmstat.pgmigrate_success, PAGES);
    assert_eq!(r.vmstat.nr_tlb_remote_flush_received, 3 * PAGES);
    let lost: f64 = r.per_thread.iter().map(|t| t.migration_ns).sum();
    let ipi = 3.0 * PAGES as f64 * m.os.tlb_flush_ipi_ns;
    assert!(
        (lost / ipi - 1.0).abs() < 1e-6,
        "{lost} ns lost, {ipi} expected"
    );
}

#[test]
fn the_raising_cpu_pays_more_for_each_further_cpu_reached() {
    let m = machine("3.9");
    let one = run(&m, 1);
    let six = run(&m, 6);
    // a lone thread's task: the daemon's flushes reach its one CPU
    assert_eq!(one.vmstat.nr_tlb_remote_flush_received, PAGES);
    assert!(
        (one.policy_ns / call_ns(&m, PAGES, 1) - 1.0).abs() < 1e-6,
        "{} ns",
        one.policy_ns
    );
    let extra = six.policy_ns - one.policy_ns;
    let per_cpu = PAGES as f64 * 5.0 * m.os.tlb_shootdown_per_cpu_ns;
    assert!(
        (extra / per_cpu - 1.0).abs() < 1e-6,
        "{extra} ns for five more CPUs"
    );
}

#[test]
fn a_calls_interrupts_reach_the_others_while_it_runs() {
    // The threads leave at about 5 ms, a third of the way through the daemon's call: each
    // has lost the interrupts of the part of the call it was there for (they come at an even
    // rate over the call's unmapping and copying, engine::interrupt_over), not all of them
    // at the call's start.
    let m = machine("3.9");
    let r = run_on(&m, 6, m.topology.nodes[0].cpus[..6].to_vec(), 400);
    assert_eq!(r.vmstat.pgmigrate_success, PAGES);
    let ipi = PAGES as f64 * m.os.tlb_flush_ipi_ns;
    // the daemon runs from the tick's epoch end; its interrupts over its call less the base
    let from = 2_000_000.0 + m.os.move_pages_base_ns;
    let until = 2_000_000.0 + r.policy_ns;
    for (i, t) in r.per_thread.iter().enumerate() {
        assert!(t.time_ns < until, "thread {i} ends at {} ns", t.time_ns);
        // (the last epoch's part up to its end too; the interrupts themselves moved its end
        // a little, by a twentieth of the last epoch's part)
        let expect = ipi * (t.time_ns - from) / (until - from);
        assert!(
            (t.migration_ns / expect - 1.0).abs() < 0.002,
            "thread {i} lost {} ns by its end at {} ns, {expect} expected",
            t.migration_ns,
            t.time_ns
        );
    }
}

#[test]
fn a_threads_own_call_interrupts_another_thread_once_per_page_however_long_it_waits() {
    // Thread 0 first-touches the buffer on node 0, then moves it to node 1 with its own
    // move_pages call; thread 1 computes past the call's end. On Linux 2.6.27 every page's
    // flush interrupts thread 1 once, handed out as the call runs: all of them, none twice,
    // whatever the epoch length and however the call waits for the link and the anon_vma lock.
    let m = numalab_machine::preset("opteron8347he-4n").expect("preset exists");
    let w = Script {
        maps: vec![(PAGES * PAGE, MapOptions::default())],
        threads: 2,
        ops: |b: &[u64], t: usize| {
            if t == 0 {
                let call = Op::MovePages {
                    base: b[0],
                    pages: PAGES as u32,
                    node: 1,
                };
                vec![first_touch(b[0]), Op::Barrier, call]
            } else {
                // about 16 ms at 1.9 GHz, past the call's 7-10 ms
                std::iter::once(Op::Barrier).chain(compute(1_500)).collect()
            }
        },
    };
    let (c0, c1) = (m.topology.nodes[0].cpus[0], m.topology.nodes[1].cpus[0]);
    for epoch_ns in [5_000.0, 20_000.0, 100_000.0] {
        let cfg = SimConfig {
            pinning: Pinning::Cpus(vec![c0, c1]),
            sample_period: 0,
            epoch_ns,
            ..Default::default()
        };
        let r = simulate(&m, &w, cfg).expect("simulation runs");
        assert_eq!(r.vmstat.pgmigrate_success, PAGES);
        let ipi = PAGES as f64 * m.os.tlb_flush_ipi_ns;
        let lost = r.per_thread[1].migration_ns;
        assert!(
            (lost / ipi - 1.0).abs() < 1e-9,
            "thread 1 lost {lost} ns at {epoch_ns} ns epochs, {ipi} expected"
        );
        assert!(r.per_thread[1].time_ns > r.per_thread[0].time_ns);
    }
}
