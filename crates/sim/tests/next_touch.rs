//! Next-touch (kernel and user-space), lazy migration and the policy hooks, on hand-built
//! scenarios run by the engine (os/next_touch.rs, engine.rs hook dispatch). The policies here
//! are scripted: they emit fixed actions at fixed hooks, so what is tested is the mechanism.

use numalab_core::view::{MemoryView, NextTouchMechanism, RegionInfo, ThreadInfo};
use numalab_core::{
    AccessKind, Action, CpuId, MapOptions, MemPolicy, NodeId, NodeMask, Op, Policy, TaskId,
    ThreadId,
};
use numalab_machine::Machine;
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;
use std::sync::{Arc, Mutex};

const PAGE: u64 = 4096;
/// Pages of the scenario's mapping.
const PAGES: u64 = 64;

fn machine() -> Machine {
    numalab_machine::preset("xeon-e5-2699v4-2n").expect("preset exists")
}

/// Thread 0 on node 0, thread 1 on node 1.
fn two_nodes(m: &Machine) -> Pinning {
    Pinning::Cpus(vec![
        m.topology.nodes[0].cpus[0],
        m.topology.nodes[1].cpus[0],
    ])
}

/// One write to the first line of each page in `pages`.
fn touch(base: u64, pages: std::ops::Range<u64>) -> Op {
    Op::Run {
        base: base + pages.start * PAGE,
        lines: (pages.end - pages.start) as u32,
        stride_bytes: PAGE as u16,
        kind: AccessKind::Write,
    }
}

/// Thread 0 first-touches the whole mapping (node 0); at the barrier both threads reach
/// phase 1, where the policy acts in its own hook; then thread `toucher` touches `pages`
/// right after its phase op, with no barrier in between.
fn scenario(toucher: usize, pages: std::ops::Range<u64>) -> impl Fn(&[u64], usize) -> Vec<Op> {
    move |b: &[u64], t: usize| {
        let mut v = Vec::new();
        if t == 0 {
            v.push(touch(b[0], 0..PAGES));
        }
        v.push(Op::Barrier);
        v.push(Op::Phase { id: 1 });
        if t == toucher {
            v.push(touch(b[0], pages.clone()));
        }
        v
    }
}

/// Actions built from the regions the view shows at the hook.
type Build = fn(&[RegionInfo]) -> Vec<Action>;

/// Emits `actions` from thread `thread`'s `on_phase` at phase `phase`, once, and records every
/// hook call it sees.
#[derive(Default)]
struct Scripted {
    thread: u32,
    phase: u16,
    actions: Vec<Action>,
    build: Option<Build>,
    place_cpu: Option<(u32, CpuId)>,
    place_policy: Option<MemPolicy>,
    seen: Arc<Mutex<Seen>>,
}

#[derive(Default, Debug)]
struct Seen {
    phases: Vec<(u32, u16)>,
    moves: Vec<(u32, u16, u16)>,
    placed_threads: Vec<u32>,
    placed_regions: Vec<(String, u32)>,
}

impl Policy for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn period_ns(&self) -> u64 {
        1_000_000
    }
    fn tick(&mut self, _view: &dyn MemoryView) -> Vec<Action> {
        Vec::new()
    }
    fn on_phase(&mut self, view: &dyn MemoryView, thread: ThreadId, phase: u16) -> Vec<Action> {
        self.seen.lock().unwrap().phases.push((thread.0, phase));
        if thread.0 != self.thread || phase != self.phase {
            return Vec::new();
        }
        let mut a = std::mem::take(&mut self.actions);
        if let Some(f) = self.build.take() {
            a.extend(f(&view.regions()));
        }
        a
    }
    fn on_thread_moved(
        &mut self,
        _view: &dyn MemoryView,
        thread: ThreadId,
        from: NodeId,
        to: NodeId,
    ) -> Vec<Action> {
        self.seen
            .lock()
            .unwrap()
            .moves
            .push((thread.0, from.0, to.0));
        Vec::new()
    }
    fn place_thread(&mut self, _view: &dyn MemoryView, t: &ThreadInfo) -> Option<CpuId> {
        self.seen.lock().unwrap().placed_threads.push(t.thread.0);
        self.place_cpu
            .filter(|(th, _)| *th == t.thread.0)
            .map(|c| c.1)
    }
    fn place_region(
        &mut self,
        _view: &dyn MemoryView,
        r: &RegionInfo,
        requester: &ThreadInfo,
    ) -> Option<MemPolicy> {
        self.seen
            .lock()
            .unwrap()
            .placed_regions
            .push((r.name.clone(), requester.thread.0));
        self.place_policy.clone()
    }
}

fn run_with(
    m: &Machine,
    ops: impl Fn(&[u64], usize) -> Vec<Op> + Send + Sync,
    policy: Scripted,
    lazy_max_block_bytes: u64,
) -> SimResult {
    let w = Script {
        maps: vec![(PAGES * PAGE, MapOptions::default())],
        threads: 2,
        ops,
    };
    let cfg = SimConfig {
        pinning: two_nodes(m),
        lazy_max_block_bytes,
        policies: vec![Box::new(policy)],
        ..Default::default()
    };
    simulate(m, &w, cfg).expect("simulation runs")
}

fn resident_pages(r: &SimResult, node: usize) -> u64 {
    r.per_node[node].resident_bytes / PAGE
}

fn mark(mechanism: NextTouchMechanism) -> Build {
    match mechanism {
        NextTouchMechanism::Kernel => |rs| {
            vec![Action::MarkNextTouch {
                task: TaskId(0),
                start: rs[0].start,
                len_bytes: rs[0].len_bytes,
                mechanism: NextTouchMechanism::Kernel,
            }]
        },
        NextTouchMechanism::User { .. } => |rs| {
            vec![Action::MarkNextTouch {
                task: TaskId(0),
                start: rs[0].start,
                len_bytes: rs[0].len_bytes,
                mechanism: NextTouchMechanism::User {
                    unit_bytes: 16 * PAGE,
                },
            }]
        },
    }
}

#[test]
fn kernel_next_touch_moves_exactly_the_touched_pages() {
    let m = machine();
    // thread 1 marks at its own phase hook and touches pages 10..30 right after
    let pol = Scripted {
        thread: 1,
        phase: 1,
        build: Some(mark(NextTouchMechanism::Kernel)),
        ..Default::default()
    };
    let r = run_with(&m, scenario(1, 10..30), pol, u64::MAX);
    let nt = &r.next_touch;
    assert_eq!((nt.kernel_marks, nt.kernel_pages_marked), (1, PAGES));
    // 20 touched pages: 20 faults, 20 migrations; the 44 others stay on node 0
    assert_eq!((nt.kernel_faults, nt.kernel_pages_migrated), (20, 20));
    assert_eq!(r.per_thread[1].next_touch_migrations, 20);
    assert_eq!((resident_pages(&r, 0), resident_pages(&r, 1)), (44, 20));
    // per page: a fault and a kernel copy, 1 000 + 4 096 B / 1 GB/s = 5.096 µs (§10: ≈ 5.1)
    let o = &m.os;
    let per_page = o.fault_4k_ns + PAGE as f64 / (o.kernel_copy_mbps * 1e-3);
    assert!((per_page - 5_096.0).abs() < 1e-9);
    let t1 = &r.per_thread[1];
    assert!(
        (t1.fault_ns - 20.0 * per_page).abs() < 1e-6,
        "thread 1 fault time {} ns",
        t1.fault_ns
    );
    assert_eq!(r.migrated_pages, 20);
}

#[test]
fn user_next_touch_moves_the_whole_unit_for_one_signal_and_one_move_pages() {
    let m = machine();
    let pol = Scripted {
        thread: 1,
        phase: 1,
        build: Some(mark(NextTouchMechanism::User { unit_bytes: 0 })),
        ..Default::default()
    };
    // one touch in page 20: its 16-page unit (16..32) moves, nothing else
    let r = run_with(&m, scenario(1, 20..21), pol, u64::MAX);
    let nt = &r.next_touch;
    assert_eq!((nt.user_marks, nt.user_pages_marked), (1, PAGES));
    assert_eq!((nt.user_faults, nt.user_pages_migrated), (1, 16));
    assert_eq!((resident_pages(&r, 0), resident_pages(&r, 1)), (48, 16));
    // the toucher pays one signal, one move_pages of 16 pages, one mprotect; thread 0 has
    // ended, so the flushes reach no other CPU (os/tlb_shootdown.rs)
    let o = &m.os;
    let expect = o.signal_ns
        + o.move_pages_base_ns
        + (16 * PAGE) as f64 / (o.move_pages_mbps * 1e-3)
        + o.mprotect_ns;
    let t1 = &r.per_thread[1];
    assert!(
        (t1.fault_ns - expect).abs() < 1e-6,
        "thread 1 fault time {} ns, expected {expect}",
        t1.fault_ns
    );
    assert_eq!(t1.faults, 0, "no first-touch fault on the marked pages");
    assert_eq!(r.migrated_pages, 16);
}

fn lazy_to_node1(rs: &[RegionInfo]) -> Vec<Action> {
    vec![Action::LazyMigrate {
        task: TaskId(0),
        start: rs[0].start,
        len_bytes: rs[0].len_bytes,
        to: NodeId(1),
    }]
}

#[test]
fn lazy_migration_moves_touched_blocks_only_and_the_block_grows() {
    let m = machine();
    // thread 0 (node 0) unmaps the range towards node 1 and reads pages 0..24 in order: the
    // destination is the call's, not the toucher's
    let pol = Scripted {
        thread: 0,
        phase: 1,
        build: Some(lazy_to_node1),
        ..Default::default()
    };
    let r = run_with(&m, scenario(0, 0..24), pol, 8 * PAGE);
    let nt = &r.next_touch;
    assert_eq!((nt.lazy_calls, nt.lazy_pages_unmapped), (1, PAGES));
    // page 0 alone, then aligned 8-page blocks 0..8 (7 left), 8..16, 16..24
    assert_eq!(nt.lazy_faults, 4);
    assert_eq!(nt.lazy_pages_moved, 24);
    assert!(nt.lazy_faults < nt.lazy_pages_moved);
    // pages 24..64 were never touched: they stay on node 0
    assert_eq!((resident_pages(&r, 0), resident_pages(&r, 1)), (40, 24));

    // without a cap (Müller): the second fault maps the largest aligned block inside the
    // region, here the whole 64-page region
    let pol = Scripted {
        thread: 0,
        phase: 1,
        build: Some(lazy_to_node1),
        ..Default::default()
    };
    let r = run_with(&m, scenario(0, 0..24), pol, u64::MAX);
    assert_eq!(
        (r.next_touch.lazy_faults, r.next_touch.lazy_pages_moved),
        (2, 64)
    );
    assert_eq!(resident_pages(&r, 1), 64);
}

#[test]
fn phase_hook_fires_once_per_phase_per_thread_and_moves_are_reported() {
    let m = machine();
    let seen = Arc::new(Mutex::new(Seen::default()));
    // at thread 0's phase 2 the policy moves thread 0 to node 1's second CPU
    let cpu = m.topology.nodes[1].cpus[1];
    let pol = Scripted {
        thread: 0,
        phase: 2,
        actions: vec![Action::MoveThread {
            thread: ThreadId(0),
            cpu,
        }],
        seen: seen.clone(),
        ..Default::default()
    };
    // thread 0 alone first-touches pages 0..4 (two threads touching the same pages at once
    // race for them: os/first_touch.rs)
    let ops = |b: &[u64], t: usize| {
        let mut v = vec![Op::Phase { id: 1 }];
        if t == 0 {
            v.push(touch(b[0], 0..4));
        }
        v.push(Op::Barrier);
        v.push(Op::Phase { id: 2 });
        v.push(touch(b[0] + 32 * PAGE * t as u64, 0..8));
        v.push(Op::Phase { id: 1 });
        v
    };
    let r = run_with(&m, ops, pol, u64::MAX);
    let s = seen.lock().unwrap();
    let mut phases = s.phases.clone();
    phases.sort();
    assert_eq!(phases, vec![(0, 1), (0, 1), (0, 2), (1, 1), (1, 1), (1, 2)]);
    assert_eq!(s.moves, vec![(0, 0, 1)]);
    // pages 0..4 were first touched by thread 0 on node 0 before the move; after it, its
    // pages 4..8 are first touched on node 1, as are thread 1's pages 32..40
    assert_eq!((resident_pages(&r, 0), resident_pages(&r, 1)), (4, 4 + 8));
}

#[test]
fn placement_hooks_run_before_the_first_access() {
    let m = machine();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let cpu1 = m.topology.nodes[1].cpus[2];
    let pol = Scripted {
        thread: 99,
        place_cpu: Some((0, cpu1)),
        place_policy: Some(MemPolicy::Bind {
            nodes: NodeMask::single(NodeId(1)),
            numa_balancing: false,
        }),
        seen: seen.clone(),
        ..Default::default()
    };
    let r = run_with(&m, scenario(0, 0..0), pol, u64::MAX);
    let s = seen.lock().unwrap();
    assert_eq!(s.placed_threads, vec![0, 1]);
    assert_eq!(s.placed_regions, vec![("m0".to_string(), 0)]);
    // thread 0 started on node 1 and its first touches obeyed the region's new policy
    assert_eq!((r.per_thread[0].cpu, r.per_thread[0].node), (cpu1.0, 1));
    assert_eq!(resident_pages(&r, 1), PAGES);
    assert!(r.metrics.lar_percent.unwrap() > 99.0);
}
