//! `next-touch` (policies.md §4) on the real simulator: marks at a workload phase, lazy
//! migration when a thread changes node, and GF09's blocked LU.

mod common;

use common::*;
use numalab_core::view::MemoryView;
use numalab_core::{AccessKind, Action, NodeId, Op, Policy, ThreadId};
use numalab_policies::next_touch::{MarkLog, NextTouch, NextTouchParams};
use numalab_policies::{by_spec, parse_spec};
use numalab_sim::{simulate, SimConfig, ThpMode};
use std::sync::{Arc, Mutex};

/// 4 MiB, first touched by thread 0 (node 0); each thread then touches its quarter.
/// (A run's stride is a u16: at most 8 pages.)
const DATA: u64 = 4 << 20;

fn policy(spec: &str) -> (Box<dyn Policy>, MarkLog) {
    let log: MarkLog = Arc::new(Mutex::new(Vec::new()));
    let p = NextTouch::new(NextTouchParams::from_values(&parse_spec(spec).unwrap()))
        .with_log(log.clone());
    (Box::new(p), log)
}

/// Thread 0 writes every page; at the barrier every thread opens phase 1 (the hook), then
/// writes the first line of every `stride`-th page of its quarter.
fn quarters(stride_pages: u64) -> Gen {
    match stride_pages {
        1 => |b, t, chunk, out| quarters_gen(b, t, chunk, out, 1),
        _ => |b, t, chunk, out| quarters_gen(b, t, chunk, out, 8),
    }
}

fn quarters_gen(b: &[u64], t: usize, chunk: usize, out: &mut Vec<Op>, stride: u64) -> bool {
    if chunk > 0 {
        return false;
    }
    if t == 0 {
        out.push(touch_pages(b[0], DATA));
    }
    out.push(Op::Barrier);
    out.push(Op::Phase { id: 1 });
    let q = DATA / 4;
    out.push(Op::Run {
        base: b[0] + t as u64 * q,
        lines: (q / KB4 / stride) as u32,
        stride_bytes: (stride * KB4) as u16,
        kind: AccessKind::Write,
    });
    false
}

fn quarter_pages() -> u64 {
    DATA / 4 / KB4
}

/// 4 KiB pages resident per node at the end of the run.
fn resident_pages(r: &numalab_sim::SimResult) -> Vec<u64> {
    r.per_node.iter().map(|n| n.resident_bytes / KB4).collect()
}

#[test]
fn kernel_next_touch_at_the_phase_moves_each_quarter_to_its_thread() {
    let m = machine();
    let w = Script {
        maps: vec![DATA],
        threads: 4,
        gen: quarters(1),
    };
    let (p, log) = policy("next-touch:mechanism=kernel,phase=1");
    let r = simulate_with(&m, &w, ThpMode::Never, 0, Some(p), 1_000_000);
    // marked once for the task, by the first thread reaching the phase
    let events = log.lock().unwrap().clone();
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].phase, events[0].actions), (Some(1), 1));
    let nt = &r.result.next_touch;
    let pages = DATA / KB4;
    // every page faults once; the three quarters touched from nodes 1-3 move
    assert_eq!(nt.kernel_faults, pages);
    assert_eq!(nt.kernel_pages_migrated, 3 * pages / 4);
    assert_eq!(resident_pages(&r.result), vec![quarter_pages(); 4]);
    for t in 1..4 {
        assert_eq!(r.result.per_thread[t].next_touch_migrations, pages / 4);
    }
    // the policy log has the one marking, from the phase hook, with its reason
    let log = &r.result.policy_log;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!((log[0].hook.as_str(), log[0].ranges_marked), ("phase", 1));
    let d = &log[0].decisions[0];
    assert_eq!((d.what.as_str(), d.count), ("mark next-touch", 1));
    assert!(d.reason.contains("reached phase 1"), "{d:?}");
}

#[test]
fn user_next_touch_moves_whole_units_per_touch() {
    let m = machine();
    let w = Script {
        maps: vec![DATA],
        threads: 4,
        gen: quarters(8),
    };
    // 32 KiB units: one write per 8 pages is one touch per unit
    let (p, _) = policy("next-touch:mechanism=user,unit_kb=32,phase=1");
    let r = simulate_with(&m, &w, ThpMode::Never, 0, Some(p), 1_000_000);
    let nt = &r.result.next_touch;
    let units = DATA / (32 << 10);
    assert_eq!(nt.user_faults, units, "one SIGSEGV per unit");
    assert_eq!(nt.user_pages_migrated, 3 * DATA / KB4 / 4);
    assert_eq!(nt.kernel_faults, 0);
    assert_eq!(resident_pages(&r.result), vec![quarter_pages(); 4]);
    // move_pages' base cost is paid per unit: 32 units per thread
    let o = &m.os;
    for t in 1..4 {
        let th = &r.result.per_thread[t];
        assert!(
            th.fault_ns >= 32.0 * (o.signal_ns + o.move_pages_base_ns),
            "thread {t}: {} ns",
            th.fault_ns
        );
    }
}

/// Moves thread 0 to node 1 at its phase 2, like a NUMA manager re-homing a task.
struct Mover;

impl Policy for Mover {
    fn name(&self) -> &str {
        "mover"
    }
    fn period_ns(&self) -> u64 {
        1_000_000
    }
    fn tick(&mut self, _view: &dyn MemoryView) -> Vec<Action> {
        Vec::new()
    }
    fn on_phase(&mut self, view: &dyn MemoryView, thread: ThreadId, phase: u16) -> Vec<Action> {
        if thread != ThreadId(0) || phase != 2 {
            return Vec::new();
        }
        vec![Action::MoveThread {
            thread,
            cpu: view.node_cpus(NodeId(1))[1],
        }]
    }
}

/// Thread 0 alone: writes its 2 MiB working set (mapping 0) and a 1 MiB side buffer
/// (mapping 1), reaches phase 2 (where it is moved), then reads its working set twice.
fn working_set(b: &[u64], t: usize, chunk: usize, out: &mut Vec<Op>) -> bool {
    if chunk > 0 || t != 0 {
        return false;
    }
    out.push(touch_pages(b[0], 2 << 20));
    out.push(touch_pages(b[1], 1 << 20));
    out.push(Op::Phase { id: 2 });
    for _ in 0..2 {
        out.push(run(b[0], (2 << 20) / LINE, AccessKind::Read));
    }
    false
}

#[test]
fn a_moved_thread_pulls_its_working_set_lazily() {
    let m = machine();
    let w = Script {
        maps: vec![2 << 20, 1 << 20],
        threads: 1,
        gen: working_set,
    };
    let run_it = |spec: Option<&str>| {
        let mut policies: Vec<Box<dyn Policy>> = vec![Box::new(Mover)];
        policies.extend(spec.map(|s| by_spec(s).unwrap()));
        let cfg = SimConfig {
            pinning: numalab_sim::Pinning::Cpus(vec![numalab_core::CpuId(0)]),
            policies,
            ..Default::default()
        };
        simulate(&m, &w, cfg).unwrap()
    };
    let base = run_it(None);
    let r = run_it(Some("next-touch:mechanism=lazy,trigger=thread-move"));
    // `lazy-migration` is the same policy under its own name
    assert_eq!(run_it(Some("lazy-migration")).next_touch, r.next_touch);
    let nt = &r.next_touch;
    // both mappings were unmapped towards node 1 (one call per region) ...
    assert_eq!(nt.lazy_calls, 2);
    assert_eq!(nt.lazy_pages_unmapped, (3 << 20) / KB4);
    // ... but only the working set was touched, so only it moved, in far fewer faults
    assert_eq!(nt.lazy_pages_moved, (2 << 20) / KB4);
    assert!(nt.lazy_faults <= 2, "{} faults", nt.lazy_faults);
    assert_eq!(r.per_node[1].resident_bytes, 2 << 20);
    assert_eq!(
        r.per_node[0].resident_bytes,
        1 << 20,
        "the side buffer stays"
    );
    // the reads after the move are local, where without the policy they are all remote
    let lar = r.metrics.lar_percent.unwrap();
    let lar0 = base.metrics.lar_percent.unwrap();
    eprintln!("LAR after a move: {lar0:.1} % without, {lar:.1} % with lazy migration");
    assert!(lar > lar0 + 30.0, "LAR {lar0:.1} -> {lar:.1}");
}

#[test]
fn blocked_lu_with_next_touch_at_each_step_is_more_local() {
    let m = machine();
    let spec = "lu-blocked:n=1024,b=128,steps=8";
    let run_it = |policy: Option<&str>| {
        let w = numalab_workloads::by_spec(spec, 4).unwrap();
        let cfg = SimConfig {
            pinning: one_thread_per_node(),
            policies: policy.map(|p| by_spec(p).unwrap()).into_iter().collect(),
            ..Default::default()
        };
        simulate(&m, w.as_ref(), cfg).unwrap()
    };
    let base = run_it(None);
    let kernel = run_it(Some("next-touch:mechanism=kernel,phase=1"));
    let user = run_it(Some("next-touch:mechanism=user,unit_kb=8,phase=1"));
    let lar = |r: &numalab_sim::SimResult| r.metrics.lar_percent.unwrap();
    eprintln!(
        "lu-blocked LAR: interleaved {:.1} %, kernel next-touch {:.1} % ({} pages moved, {:.2} ms), \
         user next-touch {:.1} % ({} pages moved, {:.2} ms); baseline {:.2} ms",
        lar(&base),
        lar(&kernel),
        kernel.next_touch.kernel_pages_migrated,
        kernel.sim_time_ns / 1e6,
        lar(&user),
        user.next_touch.user_pages_migrated,
        user.sim_time_ns / 1e6,
        base.sim_time_ns / 1e6
    );
    assert_eq!(kernel.next_touch.kernel_marks, 8, "one mark per step");
    assert!(kernel.next_touch.kernel_pages_migrated > 0);
    assert!(lar(&kernel) > lar(&base) + 10.0);
    assert!(lar(&user) > lar(&base) + 10.0);
}
