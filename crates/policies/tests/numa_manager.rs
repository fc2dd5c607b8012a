//! The NUMA manager (policies.md §8) on the real simulator: where each thread policy starts
//! threads, where each region policy puts pages, and Auto's thread and memory steps.

mod common;
#[path = "common/tasks.rs"]
mod tasks;

use numalab_core::{AccessKind, CpuId, MapOptions, MemPolicy, NodeId, Op, Policy, TaskId};
use numalab_machine::Machine;
use numalab_policies::numa_manager::{AutoRound, NumaManager};
use numalab_policies::{parse_spec, RoundLog};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use std::sync::{Arc, Mutex};
use tasks::*;

fn manager(spec: &str) -> (Box<NumaManager>, RoundLog<AutoRound>) {
    let log: RoundLog<AutoRound> = Arc::new(Mutex::new(Vec::new()));
    let m = NumaManager::from_values(&parse_spec(spec).expect("valid spec")).with_log(log.clone());
    (Box::new(m), log)
}

/// Simulate with `policy` followed by a [`Watch`] of period `watch_ns`.
fn run(
    m: &Machine,
    w: &Tasks,
    pinning: Pinning,
    policy: Box<dyn Policy>,
    watch_ns: u64,
    pages: bool,
) -> (SimResult, Vec<Snapshot>) {
    let (watch, out) = Watch::new(watch_ns, pages);
    let cfg = SimConfig {
        pinning,
        policies: vec![policy, watch],
        ..Default::default()
    };
    let r = simulate(m, w, cfg).expect("simulation runs");
    let snaps = out.lock().unwrap().clone();
    (r, snaps)
}

/// A thread that only computes for `us` µs (at the preset's clock, roughly): it keeps the
/// run alive so the watch can look.
fn idle(us: u64) -> TaskGen {
    Arc::new(move |_b, _t, chunk, out| {
        out.push(Op::Compute {
            cycles: 2000,
            instructions: 2000,
        });
        (chunk as u64) < us
    })
}

#[test]
fn thread_policies_place_threads_by_their_rules() {
    // opteron6164he-4n: CPUs 0-5 on node 0, 6-11 on node 1, ... Tasks of 2, 3, 1, 1, 2
    // threads (9 threads, numbered task by task).
    let m = common::machine();
    let w = Tasks(
        [2, 3, 1, 1, 2]
            .iter()
            .map(|&threads| TaskSpec {
                maps: vec![(64 << 10, MapOptions::default())],
                threads,
                gen: idle(50),
            })
            .collect(),
    );
    let cases: &[(&str, &[u32])] = &[
        ("threads=fixed", &[0; 9]),
        ("threads=fixed,cpu=7", &[7; 9]),
        // a global cursor over logical CPUs
        ("threads=rr-threads", &[0, 1, 2, 3, 4, 5, 6, 7, 8]),
        // one CPU per task, the cursor advancing per task
        ("threads=rr-tasks", &[0, 0, 1, 1, 1, 2, 3, 4, 4]),
        // tasks homed on nodes 0, 1, 2, 3, then node 0 again (all tie at one task: lowest id);
        // threads take their home's CPUs in order, after the ones already given
        ("threads=balanced", &[0, 1, 6, 7, 8, 12, 18, 2, 3]),
        // auto starts as balanced
        ("threads=auto", &[0, 1, 6, 7, 8, 12, 18, 2, 3]),
    ];
    for (spec, want) in cases {
        let (pol, _) = manager(&format!("numa-manager:{spec},period_ms=0.05"));
        let (_, snaps) = run(&m, &w, Pinning::Sequential, pol, 20_000, false);
        let first = snaps.first().expect("a watch tick");
        eprintln!("{spec}: CPUs {:?}", first.cpus());
        assert_eq!(first.cpus(), *want, "{spec}");
        // the ThreadInfo node follows the CPU
        for t in &first.threads {
            assert_eq!(t.node.index(), t.cpu.0 as usize / 6, "{spec}");
        }
    }
}

#[test]
fn balanced_fills_one_hardware_thread_per_core_first() {
    // xeon-e5-2699v4-2n numbers node 0's cores 0-21 and their second hardware threads
    // 44-65: a task of 24 threads homed on node 0 takes every core once, then siblings.
    let w = Tasks(vec![TaskSpec {
        maps: vec![(64 << 10, MapOptions::default())],
        threads: 24,
        gen: idle(20),
    }]);
    let (pol, _) = manager("numa-manager:threads=balanced");
    let (_, snaps) = run(
        &common::xeon2(),
        &w,
        Pinning::Sequential,
        pol,
        20_000,
        false,
    );
    let want: Vec<u32> = (0..22).chain([44, 45]).collect();
    assert_eq!(snaps[0].cpus(), want);
}

/// One task: thread 0 (the requester of every allocation) idles, thread 1, on another node,
/// writes every page of both mappings, then both idle so the watch sees the result. Mapping 0
/// has no policy of its own, mapping 1 names node `named`.
fn region_workload(named: u16) -> Tasks {
    const PAGES: u64 = 64;
    Tasks(vec![TaskSpec {
        maps: vec![
            (PAGES * 4096, MapOptions::default()),
            (
                PAGES * 4096,
                MapOptions {
                    policy: Some(MemPolicy::Preferred {
                        node: NodeId(named),
                    }),
                    ..Default::default()
                },
            ),
        ],
        threads: 2,
        gen: Arc::new(|b, t, chunk, out| {
            if chunk == 0 && t == 1 {
                for base in &b[..2] {
                    out.push(common::touch_pages(*base, PAGES * 4096));
                }
            }
            out.push(Op::Compute {
                cycles: 2000,
                instructions: 2000,
            });
            chunk < 100
        }),
    }])
}

fn final_pages(m: &Machine, w: &Tasks, cpus: &[u32], spec: &str) -> Snapshot {
    let (pol, _) = manager(&format!("numa-manager:threads=auto,initial=runner,{spec}"));
    let pin = Pinning::Cpus(cpus.iter().map(|c| CpuId(*c)).collect());
    let (_, snaps) = run(m, w, pin, pol, 20_000, true);
    snaps.last().expect("a watch tick").clone()
}

#[test]
fn region_policies_place_pages_by_their_rules() {
    let m = common::machine();
    let w = region_workload(3);
    // requester (thread 0) on node 2, the writer (thread 1) on node 1: first touch would
    // put everything on node 1
    let cpus = [12, 6];
    let all_on = |n: usize| {
        let mut v = vec![0u64; 4];
        v[n] = 64;
        v
    };
    let s = final_pages(&m, &w, &cpus, "memory=default");
    // no node named: the requester's; node 3 named: node 3
    assert_eq!(s.region("t0m0"), &all_on(2));
    assert_eq!(s.region("t0m1"), &all_on(3));
    let s = final_pages(&m, &w, &cpus, "memory=local");
    assert_eq!(s.region("t0m0"), &all_on(2));
    assert_eq!(
        s.region("t0m1"),
        &all_on(2),
        "local overrides the named node"
    );
    // all remote distances are 16: the first in ring order after node 2 is node 3
    let s = final_pages(&m, &w, &cpus, "memory=remote");
    assert_eq!(s.region("t0m0"), &all_on(3));
    assert_eq!(s.region("t0m1"), &all_on(3));
    let s = final_pages(&m, &w, &cpus, "memory=interleaved");
    for (r, pages) in s.pages.iter().enumerate() {
        for (i, node) in pages.iter().enumerate() {
            assert_eq!(*node, Some(NodeId((i % 4) as u16)), "region {r} page {i}");
        }
    }
}

#[test]
fn remote_is_the_farthest_node_ties_in_ring_order_on_eight_nodes() {
    // opteron6272-8n: node 3 (CPUs 40-47) is 22 away from nodes 0, 6 and 7 and 16 from the
    // rest; in ring order after 3 (4, 5, 6, 7, 0, ...) the first of them is node 6.
    let m = numalab_machine::preset("opteron6272-8n").expect("preset");
    let w = region_workload(1);
    let s = final_pages(&m, &w, &[40, 8], "memory=remote");
    let mut want = vec![0u64; 8];
    want[6] = 64;
    assert_eq!(s.region("t0m0"), &want);
    assert_eq!(s.region("t0m1"), &want);
    // from node 1 (CPUs 8-15; 22 away from 2, 5 and 6): node 2
    let s = final_pages(&m, &w, &[8, 40], "memory=remote");
    let mut want = vec![0u64; 8];
    want[2] = 64;
    assert_eq!(s.region("t0m0"), &want);
}

const ARRAY: u64 = 2 << 20;

/// One single-threaded task streaming its 2 MiB array `passes` times, `extra` instructions
/// of compute per line: about 1000 / (1 + extra) LLC misses per kilo-instruction. The first
/// pass writes (first touch on the thread's node).
fn streamer(extra: u32, passes: u64) -> TaskSpec {
    const PER: u64 = 512;
    const CHUNKS: u64 = ARRAY / 64 / PER;
    TaskSpec {
        maps: vec![(ARRAY, MapOptions::default())],
        threads: 1,
        gen: Arc::new(move |b, _t, chunk, out| {
            let chunk = chunk as u64;
            let kind = if chunk < CHUNKS {
                AccessKind::Write
            } else {
                AccessKind::Read
            };
            let first = (chunk % CHUNKS) * PER;
            for l in first..first + PER {
                out.push(Op::Access {
                    addr: b[0] + l * 64,
                    kind,
                });
                if extra > 0 {
                    out.push(Op::Compute {
                        cycles: extra,
                        instructions: extra,
                    });
                }
            }
            chunk + 1 < passes * CHUNKS
        }),
    }
}

/// Task A's array (region t0m0) is all on node 1, where A moved; B's and C's stayed on node 0.
fn assert_only_a_followed_to_node_1(last: &Snapshot) {
    let pages = ARRAY / 4096;
    assert_eq!(
        last.region("t0m0"),
        &vec![0, pages],
        "A's array followed it"
    );
    assert_eq!(last.region("t1m0"), &vec![pages, 0]);
    assert_eq!(last.region("t2m0"), &vec![pages, 0]);
}

fn print_rounds(rounds: &[AutoRound]) {
    for r in rounds {
        let t: Vec<String> = r
            .tasks
            .iter()
            .map(|t| {
                format!(
                    "{}@{} mpki {:.1} rlr {:.2}",
                    t.task.0,
                    t.home.0,
                    t.mpki,
                    t.remote_load_ratio.unwrap_or(-1.0)
                )
            })
            .collect();
        eprintln!(
            "{:>8} ns pressure {:?} [{}] moves {:?} lazy {}",
            r.time_ns,
            r.pressure.iter().map(|p| p.round()).collect::<Vec<_>>(),
            t.join(", "),
            r.moves
                .iter()
                .map(|m| (m.task.0, m.from.0, m.to.0))
                .collect::<Vec<_>>(),
            r.lazy.len()
        );
    }
}

fn auto_run(w: &Tasks, spec: &str) -> (Vec<AutoRound>, Vec<Snapshot>) {
    let (pol, log) = manager(&format!("numa-manager:threads=auto,initial=runner,{spec}"));
    let pin = Pinning::Cpus((0..w.0.len() as u32).map(CpuId).collect());
    let (r, snaps) = run(&common::xeon2(), w, pin, pol, 1_000_000, false);
    let rounds = log.lock().unwrap().clone();
    print_rounds(&rounds);
    eprintln!("run {:.2} ms", r.sim_time_ns * 1e-6);
    (rounds, snaps)
}

/// Rounds in which every task ran (a finished or stalled task shows MPKI 0).
fn all_running(rounds: &[AutoRound]) -> Vec<&AutoRound> {
    rounds
        .iter()
        .filter(|r| r.tasks.iter().all(|t| t.mpki > 0.0))
        .collect()
}

#[test]
fn auto_moves_the_task_that_best_evens_pressure_then_migrates_its_memory_lazily() {
    // Tasks A ≈ 30 MPKI, B ≈ 26, C ≈ 3, one thread each, all homed on node 0 (the runner
    // pins them on CPUs 0-2). Moving A leaves |30 - (26 + 3)| ≈ 1, moving B |26 - 33| ≈ 7,
    // moving C |3 - 56| ≈ 53: A is the right one, and once it has moved the gap (≈ 1) is
    // below THRESH_MPKI, so nothing else moves.
    let w = Tasks(vec![streamer(32, 60), streamer(37, 60), streamer(332, 12)]);
    let (rounds, snaps) = auto_run(&w, "period_ms=2");
    let last = snaps.last().expect("a watch tick");
    let running = all_running(&rounds);
    assert!(
        running.len() >= 10,
        "{} rounds with every task running",
        running.len()
    );
    let first = running[0];
    assert_eq!(first.pressure[1], 0.0);
    assert!(first.pressure[0] >= 5.0);
    // the move is the task minimising |(p_cold + t) - (p_hot - t)|, here A
    let gap = |t: &numalab_policies::numa_manager::TaskLoad| {
        ((first.pressure[1] + t.mpki) - (first.pressure[0] - t.mpki)).abs()
    };
    let best = first
        .tasks
        .iter()
        .min_by(|a, b| gap(a).total_cmp(&gap(b)))
        .unwrap();
    assert_eq!(best.task.0, 0);
    assert_eq!(first.moves.len(), 1, "{:?}", first.moves);
    let mv = &first.moves[0];
    assert_eq!((mv.task.0, mv.from.0, mv.to.0), (0, 0, 1));
    assert!(mv.diff_after < 5.0 && mv.diff_after < mv.diff_before);
    // at most one move per period, and none once balanced (|gap| < THRESH_MPKI)
    assert!(rounds.iter().all(|r| r.moves.len() <= 1));
    // balanced after the move, but for at most the one period in which A's memory follows
    // it (its reads then meet node 1's cold LLC; how the period falls depends on how fast
    // A's store pass went: the store buffer hides its stores under its compute)
    let unbalanced: Vec<_> = running[1..]
        .iter()
        .filter(|r| (r.pressure[0] - r.pressure[1]).abs() >= 5.0)
        .map(|r| r.pressure.clone())
        .collect();
    assert!(
        unbalanced.len() <= 1,
        "balanced after the move: {unbalanced:?}"
    );
    for r in &running[1..] {
        assert!(r.moves.is_empty(), "{:?}", r.moves);
    }
    // while all run, A's thread runs on a node-1 CPU (22-43, 66-87), the others stay on
    // node 0 (once A finishes, node 1 is idle and B may follow: not checked)
    let seen = snaps
        .iter()
        .rev()
        .find(|s| s.time_ns == running.last().unwrap().time_ns)
        .expect("a watch tick at the last round");
    let nodes: Vec<u16> = seen.threads.iter().map(|t| t.node.0).collect();
    assert_eq!(nodes, vec![1, 0, 0]);
    assert!((22..44).contains(&seen.threads[0].cpu.0));
    // memory step: the period after the move, A loads remotely (ratio ≈ 1 ≥ 0.3), so its
    // region is lazily migrated home; the pages follow as A touches them
    let after = rounds
        .iter()
        .position(|r| r.time_ns == first.time_ns)
        .unwrap()
        + 1;
    let a = &rounds[after].tasks[0];
    assert!(a.remote_load_ratio.unwrap() > 0.9, "{a:?}");
    assert_eq!(rounds[after].lazy.len(), 1);
    assert_eq!(
        (rounds[after].lazy[0].task.0, rounds[after].lazy[0].to.0),
        (0, 1)
    );
    assert_eq!(rounds.iter().map(|r| r.lazy.len()).sum::<usize>(), 1);
    assert_only_a_followed_to_node_1(last);
    // once home, A loads locally again
    let later = &rounds[after + 1].tasks[0];
    assert!(later.remote_load_ratio.unwrap() < 0.1, "{later:?}");
}

#[test]
fn auto_with_migrate_process_sends_the_moved_tasks_memory_home_in_one_call() {
    // The same tasks as above with `migrate=process`: A moves to node 1, and the period after,
    // loading remotely, its whole memory follows in one migrate_pages(2) call (every other
    // node to node 1), where the lazy step would mark its region. The others stay.
    let w = Tasks(vec![streamer(32, 60), streamer(37, 60), streamer(332, 12)]);
    let (rounds, snaps) = auto_run(&w, "period_ms=2,migrate=process");
    let first = rounds.iter().position(|r| !r.moves.is_empty()).unwrap();
    let mv = &rounds[first].moves[0];
    assert_eq!((mv.task.0, mv.to.0), (0, 1));
    let calls: Vec<_> = rounds.iter().flat_map(|r| r.whole.clone()).collect();
    assert_eq!(calls, [(TaskId(0), NodeId(1))]);
    assert_eq!(rounds[first + 1].whole, calls);
    assert!(rounds.iter().all(|r| r.lazy.is_empty()));
    assert_only_a_followed_to_node_1(snaps.last().unwrap());
    // migrate_pages moves what the lazy step leaves: an interleaved region goes home too
    let w = Tasks(vec![streamer(32, 20), streamer(37, 20), streamer(332, 4)]);
    let (rounds, snaps) = auto_run(&w, "period_ms=2,memory=interleaved,migrate=process");
    let calls: Vec<_> = rounds.iter().flat_map(|r| r.whole.clone()).collect();
    assert!(calls.contains(&(TaskId(0), NodeId(1))), "{calls:?}");
    let last = snaps.last().unwrap();
    let pages = ARRAY / 4096;
    for (task, home) in calls {
        let mut all_home = vec![0; 2];
        all_home[home.index()] = pages;
        assert_eq!(last.region(&format!("t{}m0", task.0)), &all_home);
    }
}

#[test]
fn auto_leaves_light_tasks_alone() {
    // Three tasks of ≈ 1 MPKI on node 0: the gap (≈ 3) is below THRESH_MPKI = 5.
    let w = Tasks(vec![streamer(999, 4), streamer(999, 4), streamer(999, 4)]);
    let (rounds, snaps) = auto_run(&w, "period_ms=2");
    let last = snaps.last().expect("a watch tick");
    let running = all_running(&rounds);
    assert!(running.len() >= 5, "{} rounds", running.len());
    assert!(running.iter().all(|r| r.pressure[0] < 5.0));
    assert!(rounds
        .iter()
        .all(|r| r.moves.is_empty() && r.lazy.is_empty()));
    assert!(last.threads.iter().all(|t| t.node.0 == 0));
    // ... and the same tasks with a threshold of 2 do move one
    let (rounds, _) = auto_run(&w, "period_ms=2,thresh_mpki=2");
    assert_eq!(rounds.iter().map(|r| r.moves.len()).sum::<usize>(), 1);
}

#[test]
fn auto_never_migrates_interleaved_regions() {
    // The same three tasks with interleaved memory: A still moves (pressure does not depend
    // on placement), but interleaved regions are not migratable, so they stay spread.
    let w = Tasks(vec![streamer(32, 20), streamer(37, 20), streamer(332, 4)]);
    let (rounds, snaps) = auto_run(&w, "period_ms=2,memory=interleaved");
    assert!(rounds.iter().any(|r| !r.moves.is_empty()));
    assert!(rounds.iter().all(|r| r.lazy.is_empty()));
    let half = ARRAY / 4096 / 2;
    let last = snaps.last().unwrap();
    for name in ["t0m0", "t1m0", "t2m0"] {
        assert_eq!(last.region(name), &vec![half, half], "{name}");
    }
}
