//! First-touch races are decided by simulated time, not by the order in which the engine runs
//! the threads inside an epoch (docs/model.md, "First touch").

use numalab_core::{AccessKind, CpuId, MapOptions, Op, PageSize};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;

const MIB: u64 = 1 << 20;

/// Two threads, thread 0 on node 0 and thread 1 on node 1 of the X5650 preset, and one
/// 2 MiB hugetlbfs page. Thread t computes `delay_cycles[t]` and then writes the page's first
/// line and reads it 100 times.
fn race(delay_cycles: [u32; 2], epoch_us: f64) -> SimResult {
    race_seeded(delay_cycles, epoch_us, 42, 0.0)
}

/// [`race`] with the threads' starts skewed by up to `skew_ns` from `seed`.
fn race_seeded(delay_cycles: [u32; 2], epoch_us: f64, seed: u64, skew_ns: f64) -> SimResult {
    race_on(Backing::Hugetlb, delay_cycles, epoch_us, seed, skew_ns)
}

/// What backs the 2 MiB the threads race for.
#[derive(Copy, Clone)]
enum Backing {
    Hugetlb,
    /// Anonymous memory with THP always.
    Thp,
}

fn race_on(
    backing: Backing,
    delay_cycles: [u32; 2],
    epoch_us: f64,
    seed: u64,
    skew_ns: f64,
) -> SimResult {
    let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
    let hugetlb = matches!(backing, Backing::Hugetlb).then_some(PageSize::Huge2M);
    let w = Script {
        maps: vec![(
            2 * MIB,
            MapOptions {
                hugetlb,
                ..Default::default()
            },
        )],
        threads: 2,
        ops: move |bases: &[u64], t: usize| {
            let mut ops = vec![Op::Compute {
                cycles: delay_cycles[t],
                instructions: delay_cycles[t],
            }];
            ops.push(Op::Access {
                addr: bases[0] + t as u64 * 64,
                kind: AccessKind::Write,
            });
            for _ in 0..100 {
                ops.push(Op::Access {
                    addr: bases[0] + t as u64 * 64,
                    kind: AccessKind::Read,
                });
            }
            ops
        },
    };
    let cfg = SimConfig {
        pinning: Pinning::Cpus(vec![CpuId(0), CpuId(12)]),
        sample_period: 0,
        epoch_ns: epoch_us * 1000.0,
        seed,
        start_skew_ns: skew_ns,
        thp: match backing {
            Backing::Hugetlb => numalab_sim::ThpMode::Never,
            Backing::Thp => numalab_sim::ThpMode::Always,
        },
        ..Default::default()
    };
    simulate(&m, &w, cfg).unwrap()
}

fn node_of_the_page(r: &SimResult) -> usize {
    let on: Vec<usize> = r
        .per_node
        .iter()
        .filter(|n| n.resident_bytes > 0)
        .map(|n| n.node as usize)
        .collect();
    assert_eq!(on.len(), 1, "one huge page on one node: {on:?}");
    on[0]
}

#[test]
fn the_thread_that_touches_first_in_simulated_time_gets_the_page() {
    // 26 600 cycles ≈ 10 µs at 2.66 GHz: thread 0 runs first in every epoch but touches
    // the page 10 µs after thread 1 does
    for epoch_us in [5.0, 20.0, 100.0] {
        let late_0 = race([26_600, 0], epoch_us);
        assert_eq!(node_of_the_page(&late_0), 1, "epochs of {epoch_us} µs");
        let late_1 = race([0, 26_600], epoch_us);
        assert_eq!(node_of_the_page(&late_1), 0, "epochs of {epoch_us} µs");
    }
    // within one epoch the page is placed by the fault, moved at the epoch's end
    let r = race([26_600, 0], 100.0);
    assert_eq!(r.vmstat.first_touch_race_pages, 512);
    assert_eq!(r.vmstat.pgmigrate_success, 0, "not a migration");
}

#[test]
fn a_tie_is_decided_by_the_seeded_start_skew_and_each_seed_repeats() {
    // Both threads touch at the same instant: without skew thread 0 wins (the earlier id on
    // a tie). With starts skewed by up to 1 µs, the seed decides; the same seed gives the
    // same run, and over seeds both nodes win some.
    let tie = race([0, 0], 20.0);
    assert_eq!(node_of_the_page(&tie), 0);
    let winners: Vec<usize> = (1..=16)
        .map(|seed| node_of_the_page(&race_seeded([0, 0], 20.0, seed, 1000.0)))
        .collect();
    assert!(winners.contains(&0) && winners.contains(&1), "{winners:?}");
    let again: Vec<usize> = (1..=16)
        .map(|seed| node_of_the_page(&race_seeded([0, 0], 20.0, seed, 1000.0)))
        .collect();
    assert_eq!(winners, again, "a seed is one fixed run");
    // a lead of 3 µs (about 8 000 cycles) is larger than any skew of 1 µs: thread 1 always wins
    for seed in 1..=8 {
        let r = race_seeded([8000, 0], 20.0, seed, 1000.0);
        assert_eq!(node_of_the_page(&r), 1, "seed {seed}");
    }
    // a skew of 0 is the deterministic run, whatever the seed
    assert_eq!(
        race_seeded([0, 0], 20.0, 7, 0.0).sim_time_ns,
        tie.sim_time_ns
    );
}

#[test]
fn a_toucher_waits_for_a_hugetlbfs_fault_in_flight_whatever_the_epoch_length() {
    // hugetlbfs faults on one page serialise on the fault mutex: thread 0 faults the page
    // at once (clearing 2 MiB at its core's store pace, about
    // 200 µs on this preset); thread 1 touches it 30 µs later (79 800 cycles at 2.66 GHz), in
    // a later epoch for epochs of 5 and 20 µs, and waits for the fault in flight, to its
    // end, as with epochs of 100 µs (before, only a touch in the fault's own epoch waited)
    let runs: Vec<(f64, f64)> = [5.0, 20.0, 100.0]
        .iter()
        .map(|&epoch_us| {
            let r = race([0, 79_800], epoch_us);
            assert_eq!(node_of_the_page(&r), 0, "epochs of {epoch_us} µs");
            (r.per_thread[0].fault_ns, r.per_thread[1].fault_ns)
        })
        .collect();
    for &(fault, wait) in &runs {
        assert!(
            (wait - (fault - 30_000.0)).abs() < 0.02 * fault,
            "thread 1 waits to the end of thread 0's fault: {runs:?}"
        );
    }
    let waits: Vec<f64> = runs.iter().map(|r| r.1).collect();
    let (lo, hi) = waits
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), w| (l.min(*w), h.max(*w)));
    assert!(hi / lo < 1.02, "epoch length changed the wait: {waits:?}");
}

#[test]
fn racing_thp_faults_each_clear_a_page_and_the_first_to_finish_maps_it() {
    // Anonymous memory (Linux's __do_huge_pmd_anonymous_page clears its page, then maps it
    // only if the PMD is still empty): thread 1, touching 30 µs after thread 0's fault
    // began, clears a huge page of its own on node 1 for as long as thread 0 clears its
    // (both on an idle machine), ends later, and frees it: it pays its whole fault, not a
    // wait for thread 0's, and node 1's controller takes its 2 MiB of zeroing; the page is
    // thread 0's, on node 0, whatever the epoch length.
    let faults: Vec<(f64, f64)> = [5.0, 20.0, 100.0]
        .iter()
        .map(|&epoch_us| {
            let r = race_on(Backing::Thp, [0, 79_800], epoch_us, 42, 0.0);
            assert_eq!(node_of_the_page(&r), 0, "epochs of {epoch_us} µs");
            assert_eq!(r.vmstat.first_touch_faults_lost, 1);
            assert_eq!(r.vmstat.first_touch_race_pages, 0);
            let zeroed = |n: usize| r.per_node[n].ctrl_write_bytes;
            assert!(
                zeroed(1) >= 2 * MIB && zeroed(0) >= 2 * MIB,
                "both pages were cleared: {} and {} bytes written",
                zeroed(0),
                zeroed(1)
            );
            (r.per_thread[0].fault_ns, r.per_thread[1].fault_ns)
        })
        .collect();
    for &(owner, lost) in &faults {
        assert!(
            owner > 100_000.0,
            "a 2 MiB clear at the core's pace: {faults:?}"
        );
        assert!(
            (lost - owner).abs() < 0.02 * owner,
            "the loser pays its whole clearing, not the 30 µs shorter wait: {faults:?}"
        );
    }
    // a thread touching 10 µs before another that runs first in every epoch ends first
    // and takes the page over; the other cleared for nothing, and keeps its fault time
    for epoch_us in [5.0, 20.0, 100.0] {
        let r = race_on(Backing::Thp, [26_600, 0], epoch_us, 42, 0.0);
        assert_eq!(node_of_the_page(&r), 1, "epochs of {epoch_us} µs");
        assert_eq!(r.vmstat.first_touch_faults_lost, 1);
        // thread 0 faults first in the run where its touch falls in the first epoch
        let run_first = epoch_us > 10.0;
        let moved = if run_first { 512 } else { 0 };
        assert_eq!(
            r.vmstat.first_touch_race_pages, moved,
            "epochs of {epoch_us} µs"
        );
        let (f0, f1) = (r.per_thread[0].fault_ns, r.per_thread[1].fault_ns);
        assert!((f0 - f1).abs() < 0.02 * f1, "no refund: {f0} and {f1}");
    }
}

/// A JVM heap with THP: every TLAB and PLAB is taken at its space's top when a thread asks,
/// so eden's and the old generation's huge pages go to their first touchers in proportion to
/// the threads' allocation: no node takes most of the heap, whatever the epoch length (with
/// buffers assigned ahead of time, a thread running ahead took every page beyond the others:
/// 9-56 % of the heap per node, moving with the epoch length).
#[test]
fn a_jvm_heap_with_thp_is_spread_over_the_nodes_whatever_the_epoch_length() {
    let m = numalab_machine::preset("opteron6164he-4n").unwrap();
    for epoch_us in [5.0, 20.0, 100.0] {
        let w =
            numalab_workloads::by_spec("jbb:transactions=2000,rampup=0,eden=64M,warehouse=4M", 24)
                .unwrap();
        let cfg = SimConfig {
            thp: numalab_sim::ThpMode::Always,
            sample_period: 0,
            epoch_ns: epoch_us * 1000.0,
            ..Default::default()
        };
        let r = simulate(&m, w.as_ref(), cfg).unwrap();
        let total: u64 = r.per_node.iter().map(|n| n.resident_bytes).sum();
        let shares: Vec<f64> = r
            .per_node
            .iter()
            .map(|n| n.resident_bytes as f64 / total as f64)
            .collect();
        for s in &shares {
            assert!(
                (0.10..0.40).contains(s),
                "epochs of {epoch_us} µs: resident shares per node {shares:?}"
            );
        }
    }
}
