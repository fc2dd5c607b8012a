//! Carrefour-LP (policies.md §7) on small scenarios run by the real simulator.

mod common;

use common::*;
use numalab_core::{AccessKind, NodeId, Op, PageSize};
use numalab_policies::{
    Carrefour, CarrefourLp, CarrefourLpParams, CarrefourParams, CarrefourRound, LpRound, LpState,
    RoundLog,
};
use numalab_sim::ThpMode;
use std::sync::{Arc, Mutex};

fn lp(params: CarrefourLpParams) -> (Box<CarrefourLp>, RoundLog<LpRound>) {
    let log: RoundLog<LpRound> = Arc::new(Mutex::new(Vec::new()));
    (
        Box::new(CarrefourLp::new(params).with_log(log.clone())),
        log,
    )
}

fn lp_params(period_ms: f64) -> CarrefourLpParams {
    CarrefourLpParams {
        period_ms,
        // keep §7's 1 s : 5 s ratio at the scenarios' short periods
        backoff_period_ms: 5.0 * period_ms,
        ..Default::default()
    }
}

/// Mapping 0: one 2 MiB page H, first touched by thread 0 (node 0). Mapping 1: 4 × 2 MiB
/// private pages per thread, first touched by their owner. Every thread repeats a step of
/// 32 lines of H then 16 lines of each of its private pages, so any period sees all pages
/// in the same proportions: H takes a third of the DRAM samples (hot: > 6 %), each private
/// page about 4 % (not hot) and is only ever seen from its owner's node.
fn hot_huge_page(b: &[u64], t: usize, chunk: usize, out: &mut Vec<Op>) -> bool {
    const STEPS: u64 = 4096;
    const STEPS_PER_CHUNK: u64 = 256;
    let (h, private) = (b[0], b[1] + t as u64 * 4 * MB2);
    if chunk == 0 {
        if t == 0 {
            out.push(touch_pages(h, MB2));
        }
        out.push(touch_pages(private, 4 * MB2));
        out.push(Op::Barrier);
        return true;
    }
    let first = (chunk as u64 - 1) * STEPS_PER_CHUNK;
    for s in first..first + STEPS_PER_CHUNK {
        out.push(run(h + (s * 32 * LINE) % MB2, 32, AccessKind::Read));
        for j in 0..4 {
            let page = private + j * MB2;
            out.push(run(page + (s * 16 * LINE) % MB2, 16, AccessKind::Read));
        }
    }
    first + STEPS_PER_CHUNK < STEPS
}

#[test]
fn splits_a_hot_huge_page_and_interleaves_its_base_pages() {
    let m = machine();
    let w = Script {
        maps: vec![MB2, 16 * MB2],
        threads: 4,
        gen: hot_huge_page,
    };
    // one sample every 31 references: not a divisor of the 96-line step, so samples do not
    // alias onto fixed offsets of it
    let none = simulate_with(&m, &w, ThpMode::Always, 31, None, 1_000_000);
    let (pol, log) = lp(lp_params(1.0));
    let r = simulate_with(&m, &w, ThpMode::Always, 31, Some(pol), 1_000_000);
    let rounds = log.lock().unwrap().clone();
    let h = r.placement.starts[0];
    let split_round = rounds
        .iter()
        .find(|rd| !rd.hot_splits.is_empty())
        .expect("a round split the hot page");
    eprintln!(
        "split at {} ns: MAPTU/node {:.1}, MAPTU {:.1}, imbalance {:.1?} %, LAR {:.1?} %, \
         estimates {:?}, thp {:?}",
        split_round.time_ns,
        split_round.maptu_per_node,
        split_round.mechanisms.maptu,
        split_round.mechanisms.imbalance_percent,
        split_round.mechanisms.lar_percent,
        split_round.estimates,
        split_round.thp_allocation
    );
    assert_eq!(split_round.hot_splits, vec![h]);
    // no forced split: 4 KiB placement would not beat 2 MiB (H is truly shared)
    assert!(split_round.shared_splits.is_empty() && !split_round.split_mode);
    // promotion held so that khugepaged does not collapse H back; allocation untouched
    assert_eq!(split_round.thp_allocation, Some((true, false)));
    assert_eq!(r.result.splits, 1, "only H is split");
    // H's 512 base pages are spread over the 4 nodes: 128 each right after the split, then
    // Carrefour keeps placing them one by one from their samples
    let h_nodes = r.placement.per_node(0, 4);
    assert!(r.placement.pages[0]
        .iter()
        .all(|p| p.unwrap().1 == PageSize::Base4K));
    assert!(
        h_nodes.iter().all(|n| (96..=160).contains(n)),
        "{h_nodes:?}"
    );
    // private pages stay 2 MiB on their owner's node
    for (i, p) in r.placement.pages[1].iter().enumerate() {
        let owner = i as u64 * KB4 / (4 * MB2);
        assert_eq!(
            *p,
            Some((NodeId(owner as u16), PageSize::Huge2M)),
            "page {i} of {}",
            r.placement.pages[1].len()
        );
    }
    eprintln!(
        "H per node {h_nodes:?}; imbalance none {:.1} % -> carrefour-lp {:.1} %; \
         time {:.3} -> {:.3} ms",
        imbalance(&none.result),
        imbalance(&r.result),
        none.result.sim_time_ns / 1e6,
        r.result.sim_time_ns / 1e6
    );
    assert!(imbalance(&r.result) < imbalance(&none.result));
}

const FS_PAGES: u64 = 20;
/// One sample every 9 references: coprime with the 20-page sweep, so every page is sampled
/// (a period of 8 would sample only every fourth page).
const SP_FS: u64 = 9;

/// THP false sharing: 20 huge pages first touched by thread 0 (all on node 0); thread t reads
/// quarter t of every page, sweeping the 20 pages line by line in turn so that each holds
/// ~5 % of the samples at any time (none is hot). Every 2 MiB page is shared by 4 nodes,
/// every 4 KiB subpage private to one.
fn false_sharing(b: &[u64], t: usize, chunk: usize, out: &mut Vec<Op>) -> bool {
    const PASSES: usize = 6;
    let quarter_lines = MB2 / 4 / LINE;
    if chunk == 0 {
        if t == 0 {
            for p in 0..FS_PAGES {
                out.push(Op::Access {
                    addr: b[0] + p * MB2,
                    kind: AccessKind::Write,
                });
            }
        }
        out.push(Op::Barrier);
        return true;
    }
    // chunk k > 0 covers 256 line offsets of one pass
    let per_chunk = 256;
    let chunks_per_pass = quarter_lines as usize / per_chunk;
    let first = ((chunk - 1) % chunks_per_pass * per_chunk) as u64;
    for l in first..first + per_chunk as u64 {
        for p in 0..FS_PAGES {
            out.push(Op::Access {
                addr: b[0] + p * MB2 + t as u64 * (MB2 / 4) + l * LINE,
                kind: AccessKind::Read,
            });
        }
    }
    chunk < PASSES * chunks_per_pass
}

/// The preset with its move_pages costs shrunk as a scenario's period is shrunk from §7's
/// 1 s, so that a period's migrations take the share of it they take in a real one (what
/// NUMA balancing's `scale_costs` does for its own costs). Moves of huge pages block their
/// readers while copied (docs/model.md, "Migration entries"): 20 of them at 600 MB/s are
/// 70 ms, 7 % of a 1 s period but 17 periods of 4 ms.
fn machine_with_costs_scaled_to(period_ms: f64) -> numalab_machine::Machine {
    let mut m = machine();
    let shrink = 1000.0 / period_ms;
    m.os.move_pages_base_ns /= shrink;
    m.os.move_pages_mbps *= shrink;
    m
}

#[test]
fn splits_falsely_shared_huge_pages_only_after_two_agreeing_iterations() {
    let m = machine_with_costs_scaled_to(4.0);
    let w = Script {
        maps: vec![FS_PAGES * MB2],
        threads: 4,
        gen: false_sharing,
    };
    // a 4 ms period covers one sweep over all the data, as §7's 1 s covers many on real
    // working sets: what a period migrates is read again in the next one
    let none = simulate_with(&m, &w, ThpMode::Always, SP_FS, None, 4_000_000);
    let plain = {
        let log: RoundLog<CarrefourRound> = Arc::new(Mutex::new(Vec::new()));
        let c = Carrefour::new(CarrefourParams {
            period_ms: 4.0,
            ..Default::default()
        })
        .with_log(log);
        simulate_with(&m, &w, ThpMode::Always, SP_FS, Some(Box::new(c)), 4_000_000)
    };
    // 3 % of a 4 ms period is 120 µs: at the presets' 20 µs per split that is 6 splits per
    // iteration; at 1 µs, 120, enough for the 20 pages in one iteration.
    // The first iteration moves the 20 pages whole (40 MiB). Their copies load the
    // controllers in the next period as they run (docs/model.md, "Migration copies"), which
    // at a 4 ms period is a quarter of it where at §7's 1 s it is a few per cent: the
    // activity gates are lowered so that they do not stop the iterations this test is about.
    let (pol, log) = lp(CarrefourLpParams {
        split_cost_us: 1.0,
        maptu_per_node_min: 5.0,
        split_maptu_min: 20.0,
        ..lp_params(4.0)
    });
    let r = simulate_with(&m, &w, ThpMode::Always, SP_FS, Some(pol), 4_000_000);
    let rounds = log.lock().unwrap().clone();
    for rd in rounds.iter().take(6) {
        eprintln!(
            "{} ns {:?} maptu/node {:.1}: LAR {:.1?} imb {:.1?} est {:?} wanted {} votes {} shared splits {} \
             moves {} thp {:?}",
            rd.time_ns,
            rd.state,
            rd.maptu_per_node,
            rd.mechanisms.lar_percent,
            rd.mechanisms.imbalance_percent,
            rd.estimates.map(|e| (
                e.current_percent.round(),
                e.huge_percent.round(),
                e.base_percent.round()
            )),
            rd.split_wanted,
            rd.split_votes,
            rd.shared_splits.len(),
            rd.page_moves,
            rd.thp_allocation
        );
    }
    let first = rounds
        .iter()
        .position(|rd| rd.split_wanted)
        .expect("the 4 KiB estimate wins");
    // first agreeing iteration: no split yet (hysteresis, §7 table: twice in a row)
    assert_eq!(rounds[first].split_votes, 1);
    assert!(rounds[first].shared_splits.is_empty());
    let e = rounds[first].estimates.unwrap();
    assert!(e.base_percent - e.huge_percent >= 5.0, "{e:?}");
    // second: split every shared huge page and stop allocating huge pages
    let second = &rounds[first + 1];
    assert!(second.split_wanted && second.split_mode);
    assert_eq!(second.shared_splits.len(), FS_PAGES as usize);
    assert_eq!(second.thp_allocation, Some((false, false)));
    assert_eq!(r.result.splits, FS_PAGES);
    eprintln!(
        "LAR: none {:.1} %, carrefour {:.1} %, carrefour-lp {:.1} %; time {:.3} / {:.3} / \
         {:.3} ms",
        lar(&none.result),
        lar(&plain.result),
        lar(&r.result),
        none.result.sim_time_ns / 1e6,
        plain.result.sim_time_ns / 1e6,
        r.result.sim_time_ns / 1e6
    );
    // moving whole 2 MiB pages cannot fix false sharing; splitting can
    assert!(lar(&plain.result) < 40.0);
    assert!(lar(&r.result) > lar(&plain.result) + 20.0);
    // most 4 KiB pages sit on the node of the thread that reads them
    let local = r.placement.pages[0]
        .iter()
        .enumerate()
        .filter(|(i, p)| {
            let quarter = (*i as u64 * KB4 % MB2) / (MB2 / 4);
            p.is_some_and(|(n, _)| n.index() as u64 == quarter)
        })
        .count();
    eprintln!(
        "{local} of {} base pages local to their reader",
        FS_PAGES * 512
    );
    assert!(local as u64 > FS_PAGES * 512 * 3 / 4);
}

/// Threads on nodes 1-3 each stream once through their third of 24 MiB first touched on
/// node 0. Carrefour migrates the pages each period has just read, which are never read
/// again: the moves are useless, LAR stays near 0 and imbalance near its maximum.
fn read_once(b: &[u64], t: usize, chunk: usize, out: &mut Vec<Op>) -> bool {
    const DATA: u64 = 24 << 20;
    if chunk == 0 {
        if t == 0 {
            out.push(touch_pages(b[0], DATA));
        }
        out.push(Op::Barrier);
        return t > 0;
    }
    let third = DATA / 3;
    out.push(run(
        b[0] + (t as u64 - 1) * third,
        third / LINE,
        AccessKind::Read,
    ));
    false
}

#[test]
fn backs_off_after_an_iteration_that_does_not_help() {
    let mut m = machine();
    m.os.sample_ns = 0.0;
    let w = Script {
        maps: vec![24 << 20],
        threads: 4,
        gen: read_once,
    };
    let period_ms = 0.2; // a multiple of the 20 µs epoch, so ticks land exactly
    let plain_log: RoundLog<CarrefourRound> = Arc::new(Mutex::new(Vec::new()));
    let c = Carrefour::new(CarrefourParams {
        period_ms,
        ..Default::default()
    })
    .with_log(plain_log.clone());
    let plain = simulate_with(&m, &w, ThpMode::Never, 16, Some(Box::new(c)), 200_000);
    let (pol, log) = lp(lp_params(period_ms));
    let r = simulate_with(&m, &w, ThpMode::Never, 16, Some(pol), 200_000);
    let rounds = log.lock().unwrap().clone();
    let states: Vec<LpState> = rounds.iter().map(|rd| rd.state).collect();
    eprintln!("carrefour-lp iterations: {states:?}");
    let acted = rounds
        .iter()
        .position(|rd| rd.state == LpState::Active && rd.page_moves > 0)
        .expect("an iteration moved pages");
    let judged = &rounds[acted + 1];
    eprintln!(
        "acted at {} ns (LAR {:.1?}, imbalance {:.1?}), judged at {} ns (LAR {:.1?}, \
         imbalance {:.1?})",
        rounds[acted].time_ns,
        rounds[acted].mechanisms.lar_percent,
        rounds[acted].mechanisms.imbalance_percent,
        judged.time_ns,
        judged.mechanisms.lar_percent,
        judged.mechanisms.imbalance_percent
    );
    // the iteration after the moves finds neither LAR nor imbalance improved by 10 %
    assert_eq!(judged.state, LpState::Unproductive);
    assert_eq!(judged.actions, 0);
    // and the next iterations sleep for the back-off period (5 periods)
    let sleeping = rounds[acted + 2..]
        .iter()
        .take_while(|rd| rd.state == LpState::BackedOff)
        .count();
    assert_eq!(sleeping, 4, "{states:?}");
    assert!(rounds[acted + 2..]
        .iter()
        .take(sleeping)
        .all(|rd| rd.actions == 0));
    let plain_rounds = plain_log.lock().unwrap().clone();
    let plain_acting = plain_rounds
        .iter()
        .filter(|rd| !rd.moves.is_empty())
        .count();
    eprintln!(
        "migrated pages: carrefour {} in {plain_acting} iterations, carrefour-lp {}",
        plain.result.migrated_pages, r.result.migrated_pages
    );
    assert!(r.result.migrated_pages * 2 < plain.result.migrated_pages);
}
