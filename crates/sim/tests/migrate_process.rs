//! Whole-process migration, `migrate_pages(2)` (issue "Trustworthy simulation II", item 10;
//! docs/model.md, "Whole-process migration"): every page of the task on a source node moves to
//! the node the kernel's map gives it, source node by source node in the kernel's order; the
//! call costs its caller a walk of the address space per source node (`migrate_pages_base_ns`,
//! GF09: ≈ 400 µs) and the copies at `migrate_pages_mbps` (GF09: ≈ 780 MB/s), and the copies
//! load the controllers as the call runs them.

use numalab_core::view::MemoryView;
use numalab_core::{
    AccessKind, Action, MapOptions, NodeId, NodeMask, Op, Policy, TaskId, ThreadId,
};
use numalab_machine::Machine;
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;
use std::sync::{Arc, Mutex};

const PAGE: u64 = 4096;
/// 4096 pages per first-toucher: 16 MiB, so that a call's time is its copies' more than its
/// walks'.
const SHARE: u64 = 4096;

/// Thread 0 calls migrate_pages(from, to) in its phase-2 hook; at phase 3 the node of the
/// first page of every toucher's share is recorded.
struct CallThenLook {
    from: NodeMask,
    to: NodeMask,
    touchers: usize,
    seen: Arc<Mutex<Vec<NodeId>>>,
}

impl Policy for CallThenLook {
    fn name(&self) -> &str {
        "call-then-look"
    }
    fn period_ns(&self) -> u64 {
        u64::MAX
    }
    fn tick(&mut self, _view: &dyn MemoryView) -> Vec<Action> {
        Vec::new()
    }
    fn on_phase(&mut self, view: &dyn MemoryView, thread: ThreadId, phase: u16) -> Vec<Action> {
        if thread.0 != 0 {
            return Vec::new();
        }
        let start = view.regions()[0].start;
        match phase {
            2 => vec![Action::MigrateProcess {
                task: TaskId(0),
                from: self.from,
                to: self.to,
            }],
            3 => {
                let mut seen = self.seen.lock().unwrap();
                for k in 0..self.touchers as u64 {
                    let a = start + k * SHARE * PAGE;
                    seen.push(view.page(TaskId(0), a).expect("populated").node);
                }
                Vec::new()
            }
            _ => Vec::new(),
        }
    }
}

/// Thread 0 on node 0 and one first-toucher on each node of `touch_nodes`, each writing its
/// share of one mapping; thread 0 then calls migrate_pages(from, to). Returns the run and the
/// node of each toucher's share afterwards.
fn run(m: &Machine, touch_nodes: &[u16], from: &[u16], to: &[u16]) -> (SimResult, Vec<NodeId>) {
    let mask = |n: &[u16]| NodeMask::from_nodes(n.iter().map(|&i| NodeId(i)));
    let touchers = touch_nodes.len();
    let w = Script {
        maps: vec![(touchers as u64 * SHARE * PAGE, MapOptions::default())],
        threads: touchers + 1,
        ops: move |b: &[u64], t: usize| {
            let mut v = Vec::new();
            if t > 0 {
                v.push(Op::Run {
                    base: b[0] + (t as u64 - 1) * SHARE * PAGE,
                    lines: SHARE as u32,
                    stride_bytes: PAGE as u16,
                    kind: AccessKind::Write,
                });
            }
            v.extend([
                Op::Barrier,
                Op::Phase { id: 2 },
                Op::Barrier,
                Op::Phase { id: 3 },
            ]);
            v
        },
    };
    let mut cpus = vec![m.topology.nodes[0].cpus[0]];
    // a node's second CPU where node 0 is also a toucher's
    cpus.extend(
        touch_nodes
            .iter()
            .map(|&n| *m.topology.nodes[n as usize].cpus.last().unwrap()),
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let cfg = SimConfig {
        pinning: Pinning::Cpus(cpus),
        sample_period: 0,
        policies: vec![Box::new(CallThenLook {
            from: mask(from),
            to: mask(to),
            touchers,
            seen: seen.clone(),
        })],
        ..Default::default()
    };
    let r = simulate(m, &w, cfg).expect("simulation runs");
    let seen = seen.lock().unwrap().clone();
    (r, seen)
}

/// The caller (thread 0) spent, within 1 %, what a call of `walks` address-space walks
/// copying `bytes` costs: `walks × migrate_pages_base_ns + bytes / migrate_pages_mbps`, and a
/// TLB shootdown per page to the process's `others` other threads (os/tlb_shootdown.rs:
/// Linux 2.6.27 flushes each page it unmaps).
fn assert_call_ns(m: &Machine, r: &SimResult, walks: u32, bytes: u64, others: usize) {
    let flushes = (bytes / PAGE) as f64 * m.os.shootdown_initiator_ns(others);
    let expect = f64::from(walks) * m.os.migrate_pages_base_ns
        + bytes as f64 / (m.os.migrate_pages_mbps * 1e-3)
        + flushes;
    let call = r.per_thread[0].migration_ns;
    assert!(
        (call / expect - 1.0).abs() < 0.01,
        "{call} ns for a {expect} ns call"
    );
    // each other thread lost one flush interrupt a page
    let ipi = (bytes / PAGE) as f64 * m.os.tlb_flush_ipi_ns;
    for t in &r.per_thread[1..=others] {
        assert!(
            (t.migration_ns / ipi - 1.0).abs() < 0.01,
            "{} ns of interrupts, {ipi} expected",
            t.migration_ns
        );
    }
}

/// GF09's machine, whose figures the costs come from (reference/policies.md §10).
fn machine() -> Machine {
    numalab_machine::preset("opteron8347he-4n").expect("preset exists")
}

#[test]
fn one_call_moves_a_buffer_at_the_calls_rate_and_loads_both_controllers() {
    let m = machine();
    let (r, seen) = run(&m, &[0], &[0], &[1]);
    assert_eq!(seen, [NodeId(1)]);
    let bytes = SHARE * PAGE;
    assert_eq!(r.vmstat.pgmigrate_success, SHARE);
    assert!(r.per_node[1].resident_bytes >= bytes, "{:?}", r.per_node[1]);
    // one source node: one walk, then the copies at migrate_pages' rate, to the caller
    assert_call_ns(&m, &r, 1, bytes, 1);
    // the copies read node 0's controller and wrote node 1's
    assert!(
        r.per_node[0].ctrl_read_bytes >= bytes,
        "{:?}",
        r.per_node[0]
    );
    assert!(
        r.per_node[1].ctrl_write_bytes >= bytes,
        "{:?}",
        r.per_node[1]
    );
}

#[test]
fn a_chain_keeps_relative_positions_and_walks_once_per_source() {
    // [1,2] -> [2,3]: each share moves one node on and none twice, as the kernel runs 2 -> 3
    // before 1 -> 2 (the other order would pile both shares on node 3)
    let m = machine();
    let (r, seen) = run(&m, &[1, 2], &[1, 2], &[2, 3]);
    assert_eq!(seen, [NodeId(2), NodeId(3)]);
    assert_eq!(r.vmstat.pgmigrate_success, 2 * SHARE);
    assert_call_ns(&m, &r, 2, 2 * SHARE * PAGE, 2);
}

#[test]
fn unequal_sets_leave_pages_already_on_a_destination() {
    // [0-3] -> [1]: "moves only" the nodes outside [1]; node 1's share is not copied
    let m = machine();
    let (r, seen) = run(&m, &[0, 1, 2, 3], &[0, 1, 2, 3], &[1]);
    assert_eq!(seen, [NodeId(1); 4]);
    assert_eq!(r.vmstat.pgmigrate_success, 3 * SHARE);
    // nothing to move: the walk is paid, nothing is copied
    let (r, seen) = run(&m, &[1], &[0], &[1]);
    assert_eq!(seen, [NodeId(1)]);
    assert_eq!(r.vmstat.pgmigrate_success, 0);
    let call = r.per_thread[0].migration_ns;
    assert!(
        (call - m.os.migrate_pages_base_ns).abs() < 1.0,
        "{call} ns for one walk"
    );
}
