//! Zeroing a huge page at its first-touch fault is write traffic to its node's controller,
//! and threads that fault faster than the controller writes wait for it, in the fault
//! handler (docs/model.md, "OS model", fault cost).

use numalab_core::{AccessKind, CpuId, MapOptions, Op, PageSize};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;

const MIB: u64 = 1 << 20;
const PAGES: u64 = 8;

/// `threads` threads on node 0 of the 8-node Opteron preset (CPUs 0..threads), each writing
/// one line of each of `PAGES` pages of `page` size in its own mapping.
fn fault_storm(threads: usize, page: PageSize, epoch_us: f64) -> SimResult {
    let m = numalab_machine::preset("opteron6272-8n").unwrap();
    let hugetlb = (page != PageSize::Base4K).then_some(page);
    let w = Script {
        maps: (0..threads)
            .map(|_| {
                (
                    PAGES * page.bytes(),
                    MapOptions {
                        hugetlb,
                        ..Default::default()
                    },
                )
            })
            .collect(),
        threads,
        ops: move |bases: &[u64], t: usize| {
            (0..PAGES)
                .map(|p| Op::Access {
                    addr: bases[t] + p * page.bytes(),
                    kind: AccessKind::Write,
                })
                .collect()
        },
    };
    let cfg = SimConfig {
        pinning: Pinning::Cpus((0..threads as u32).map(CpuId).collect()),
        sample_period: 0,
        epoch_ns: epoch_us * 1000.0,
        ..Default::default()
    };
    simulate(&m, &w, cfg).unwrap()
}

fn fault_ns(r: &SimResult) -> f64 {
    r.per_thread.iter().map(|t| t.fault_ns).sum()
}

#[test]
fn zeroing_huge_pages_is_write_traffic_to_their_node() {
    let r = fault_storm(1, PageSize::Huge2M, 20.0);
    let zeroed = PAGES * 2 * MIB;
    assert!(
        r.per_node[0].ctrl_write_bytes >= zeroed,
        "{:?}",
        r.per_node[0]
    );
    assert!(r.per_node[1..].iter().all(|n| n.ctrl_write_bytes == 0));
    // a 4 KiB page's zeroed lines stay in the cache it was cleared through
    let small = fault_storm(1, PageSize::Base4K, 20.0);
    assert!(
        small.per_node[0].ctrl_write_bytes < PAGES * 4096,
        "{:?}",
        small.per_node[0]
    );
}

#[test]
fn a_fault_storm_zeroes_no_faster_than_the_controller_writes() {
    let m = numalab_machine::preset("opteron6272-8n").unwrap();
    let capacity_bytes_per_ns = m.nodes[0].ctrl_peak_gbps;
    let one = fault_storm(1, PageSize::Huge2M, 20.0);
    let eight = fault_storm(8, PageSize::Huge2M, 20.0);
    let zeroed = (8 * PAGES * 2 * MIB) as f64;
    // the controller writes at most its capacity (a few % for the ramp of the smoothing)
    let rate = zeroed / eight.sim_time_ns;
    assert!(
        rate <= capacity_bytes_per_ns * 1.05,
        "zeroed at {rate:.2} B/ns against {capacity_bytes_per_ns} B/ns"
    );
    assert!(rate >= capacity_bytes_per_ns * 0.7, "{rate:.2} B/ns");
    // one thread alone clears at its core's store pace, its lines in flight over the path's
    // latency (9 lines over 95 ns here: 6 GB/s, 2 MiB in ≈ 350 µs, more than the preset's
    // fixed 80 µs), and eight threads' faults take several times that, the controller
    // bounding them; the wait is fault time: the threads do nothing else
    let per_fault_one = fault_ns(&one) / PAGES as f64;
    let core_pace_ns = (2 * MIB / 64) as f64 * m.nodes[0].idle_local_ns / m.core.concurrency_lines;
    assert!(
        per_fault_one >= core_pace_ns && per_fault_one < 1.2 * core_pace_ns,
        "{per_fault_one:.0} ns a fault alone, {core_pace_ns:.0} ns at the core's pace"
    );
    let per_fault_eight = fault_ns(&eight) / (8 * PAGES) as f64;
    assert!(
        per_fault_eight > 2.0 * per_fault_one,
        "{per_fault_one:.0} ns alone, {per_fault_eight:.0} ns with 8 threads"
    );
    for t in &eight.per_thread {
        assert!(t.fault_ns > 0.9 * t.time_ns, "{t:?}");
    }
}

#[test]
fn the_fault_storm_does_not_depend_on_the_epoch_length() {
    let times: Vec<f64> = [5.0, 20.0, 100.0]
        .iter()
        .map(|&e| fault_storm(8, PageSize::Huge2M, e).sim_time_ns)
        .collect();
    let (lo, hi) = (
        times.iter().cloned().fold(f64::MAX, f64::min),
        times.iter().cloned().fold(0.0, f64::max),
    );
    assert!(hi / lo < 1.02, "{times:?}");
}
