//! Adaptive remote percentage (policies.md §5, [nl] control law) on the real simulator:
//! STREAM processes crowded on node 0 of `xeon-e5-2699v4-2n`.

mod common;
#[path = "common/tasks.rs"]
mod tasks;

use numalab_core::{AccessKind, CpuId, MapOptions, NodeId, Op, Policy};
use numalab_policies::adaptive_percent::{AdaptivePercent, AdaptiveRound};
use numalab_policies::{parse_spec, RoundLog};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use std::sync::{Arc, Mutex};
use tasks::{TaskSpec, Tasks, Watch};

fn adaptive(spec: &str) -> (Box<AdaptivePercent>, RoundLog<AdaptiveRound>) {
    let log: RoundLog<AdaptiveRound> = Arc::new(Mutex::new(Vec::new()));
    let p =
        AdaptivePercent::from_values(&parse_spec(spec).expect("valid spec")).with_log(log.clone());
    (Box::new(p), log)
}

/// `procs` single-threaded STREAM triad processes (one task each, private arrays of `n`
/// doubles, first touched by their own thread) on CPUs 0.. of node 0.
fn stream_on_node0(
    procs: usize,
    n: u64,
    ntimes: u64,
    policy: Option<Box<dyn Policy>>,
) -> SimResult {
    let w = numalab_workloads::by_spec(
        &format!("stream:mode=processes,kernel=triad,n={n},ntimes={ntimes}"),
        procs,
    )
    .expect("workload");
    let cfg = SimConfig {
        pinning: Pinning::Cpus((0..procs as u32).map(CpuId).collect()),
        policies: policy.into_iter().collect(),
        ..Default::default()
    };
    simulate(&common::xeon2(), w.as_ref(), cfg).expect("simulation runs")
}

fn print_rounds(rounds: &[AdaptiveRound]) {
    for r in rounds {
        let t = &r.tasks[0];
        eprintln!(
            "{:>9} ns u {:.2?} p {} -> {} (task 0 remote {} of {} units), {} pages moved",
            r.time_ns, r.util, t.before, t.percent, t.remote_units, t.total_units, r.pages_moved
        );
    }
}

#[test]
fn remote_share_rises_under_congestion_and_settles() {
    // 22 STREAM triad processes on the 22 cores of node 0: node 0's controller is congested
    // (u ≈ 0.75 > u_hi = 0.7), node 1's idle. p must rise from 0 in steps of 10, moving the
    // difference of the placed pages, and settle where node 0 is no longer above u_hi or the
    // remote controller is within the margin.
    let (pol, log) = adaptive("adaptive-percent:period_ms=0.5,move=1");
    let r = stream_on_node0(22, 65536, 20, Some(pol));
    let rounds = log.lock().unwrap().clone();
    print_rounds(&rounds);
    eprintln!("adaptive: {:.2} ms", r.sim_time_ns * 1e-6);
    assert!(rounds.len() >= 15, "{} rounds", rounds.len());
    let p: Vec<u8> = rounds.iter().map(|r| r.tasks[0].percent).collect();
    // every task sees the same controllers, so every task has the same p
    for r in &rounds {
        assert!(r.tasks.iter().all(|t| t.percent == r.tasks[0].percent));
        assert_eq!(r.tasks.len(), 22);
        assert!(r.tasks.iter().all(|t| t.local.0 == 0 && t.remote.0 == 1));
    }
    // rises from 0, one step at a time, never beyond p_max
    assert_eq!(rounds[0].tasks[0].before, 0);
    assert!(p.windows(2).all(|w| w[1].abs_diff(w[0]) <= 10), "{p:?}");
    assert!(p.iter().all(|x| *x <= 50));
    let first_rise = p.iter().position(|x| *x > 0).expect("p rose");
    assert!(
        rounds[first_rise].util[0] > 0.7,
        "it rose because node 0 was congested"
    );
    // settled: the last 8 rounds stay within one step, at a value above 0
    let tail = &rounds[rounds.len() - 8..];
    let (lo, hi) = tail.iter().fold((u8::MAX, 0), |(lo, hi), r| {
        (lo.min(r.tasks[0].percent), hi.max(r.tasks[0].percent))
    });
    assert!(lo > 0 && hi - lo <= 10, "settled p in {lo}..={hi}");
    // where it settled, node 0 is not above u_hi or node 1 is within the margin
    let mean = |n: usize| tail.iter().map(|r| r.util[n]).sum::<f64>() / tail.len() as f64;
    let (u0, u1) = (mean(0), mean(1));
    eprintln!("settled p {lo}..={hi}: u0 {u0:.3}, u1 {u1:.3}");
    assert!(u0 <= 0.7 || u1 >= u0 - 0.1, "u0 {u0:.3}, u1 {u1:.3}");
    // the placed pages follow p: about p % of each task's pages are on node 1
    let t = &tail.last().unwrap().tasks[0];
    let share = 100.0 * t.remote_units as f64 / t.total_units as f64;
    assert!(
        (share - t.percent as f64).abs() < 1.5,
        "{share:.1} % remote at p {}",
        t.percent
    );
    // and the two controllers together serve more than node 0 alone did
    let before = rounds[first_rise].util[0];
    assert!(u0 + u1 > before * 1.2, "{u0:.2} + {u1:.2} vs {before:.2}");
    // the same run without the policy takes longer (simulated time)
    let base = stream_on_node0(22, 65536, 20, None);
    eprintln!("baseline: {:.2} ms", base.sim_time_ns * 1e-6);
    assert!(r.sim_time_ns < base.sim_time_ns);
}

#[test]
fn remote_share_stays_zero_under_light_load() {
    // Two STREAM processes cannot load node 0's controller above u_hi: p stays 0, no task
    // policy is set and no page moves.
    let (pol, log) = adaptive("adaptive-percent:period_ms=0.5,move=1");
    let r = stream_on_node0(2, 65536, 20, Some(pol));
    let rounds = log.lock().unwrap().clone();
    print_rounds(&rounds);
    assert!(rounds.len() >= 5, "{} rounds", rounds.len());
    assert!(rounds.iter().all(|r| r.util[0] < 0.7), "light load");
    assert!(rounds
        .iter()
        .all(|r| r.tasks.iter().all(|t| t.percent == 0) && r.pages_moved == 0));
    assert_eq!(r.migrated_pages, 0);
    assert!(
        r.per_node[1].served_from.iter().sum::<u64>() == 0,
        "nothing served by node 1"
    );
}

/// Bytes of one segment of [`growing`].
const SEG: u64 = 256 << 10;
const SEGS: u64 = 32;

/// A task whose memory grows while it runs: it writes segment k of its mapping (first touch,
/// so the page's node is chosen now, by the task policy in force), reads it three times,
/// then goes on to segment k + 1.
fn growing() -> TaskSpec {
    TaskSpec {
        maps: vec![(SEG * SEGS, MapOptions::default())],
        threads: 1,
        gen: Arc::new(|b, _t, chunk, out| {
            let (seg, pass) = (chunk as u64 / 4, chunk as u64 % 4);
            let kind = if pass == 0 {
                AccessKind::Write
            } else {
                AccessKind::Read
            };
            out.push(Op::Run {
                base: b[0] + seg * SEG,
                lines: (SEG / 64) as u32,
                stride_bytes: 64,
                kind,
            });
            (chunk as u64) + 1 < SEGS * 4
        }),
    }
}

#[test]
fn new_allocations_follow_p_without_moving_pages() {
    // 22 tasks allocating as they go, on node 0: with move=0 the policy only sets each
    // task's remote-percent policy, so pages first touched before p rose are all local and
    // those touched later are p % remote; nothing is migrated.
    let w = Tasks((0..22).map(|_| growing()).collect());
    let (pol, log) = adaptive("adaptive-percent:period_ms=0.5");
    let (watch, snaps) = Watch::new(1_000_000, true);
    let cfg = SimConfig {
        pinning: Pinning::Cpus((0..22).map(CpuId).collect()),
        policies: vec![pol, watch],
        ..Default::default()
    };
    let r = simulate(&common::xeon2(), &w, cfg).expect("simulation runs");
    let rounds = log.lock().unwrap().clone();
    print_rounds(&rounds);
    eprintln!("run {:.2} ms", r.sim_time_ns * 1e-6);
    assert_eq!(r.migrated_pages, 0);
    assert!(rounds.iter().all(|r| r.pages_moved == 0));
    let p: Vec<u8> = rounds.iter().map(|r| r.tasks[0].percent).collect();
    let first_rise = p.iter().position(|x| *x > 0).expect("p rose");
    let settled = *p.last().unwrap();
    assert!(settled > 0);
    // the final placement of task 0's segments: local before p rose, ≈ p % remote at the end
    let snaps = snaps.lock().unwrap();
    let pages = &snaps.last().unwrap().pages[0];
    let seg_pages = (SEG / 4096) as usize;
    // segments fully populated at the watch's last look (the run may end after it)
    let shares: Vec<f64> = pages
        .chunks(seg_pages)
        .take_while(|seg| seg.iter().all(|n| n.is_some()))
        .map(|seg| {
            let remote = seg.iter().filter(|n| **n == Some(NodeId(1))).count();
            100.0 * remote as f64 / seg_pages as f64
        })
        .collect();
    eprintln!("task 0 remote % per segment {shares:.0?}; p per round {p:?}");
    assert!(
        shares.len() >= SEGS as usize / 2,
        "{} segments seen",
        shares.len()
    );
    assert_eq!(
        shares[0], 0.0,
        "touched at p = 0 (first rise in round {first_rise})"
    );
    // each segment is placed at the p of its time: never above p_max, and a run of segments
    // at the plateau where p settled (the climb may overshoot it for a few rounds)
    let top = *p.iter().max().unwrap() as f64;
    assert!(shares.iter().all(|s| *s <= top + 1.0), "{shares:?}");
    let plateau = settled as f64;
    assert!(
        shares
            .iter()
            .filter(|s| (**s - plateau).abs() <= 1.0)
            .count()
            >= 5,
        "{shares:?} against p {settled}"
    );
    let last = *shares.last().unwrap();
    assert!(
        (last - settled as f64).abs() <= 2.0,
        "{last:.1} % remote at p {settled}"
    );
}
