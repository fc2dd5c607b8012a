//! `--hugetlb 2M|1G`: every workload's heap on hugetlbfs pages, as libhugetlbfs's
//! HUGETLB_MORECORE does (docs/model.md, "Hugetlbfs heap").

use numalab_core::PageSize;
use numalab_sim::{simulate, Pinning, SimConfig, SimResult, ThpMode};

fn run(workload: &str, threads: usize, hugetlb: Option<PageSize>, thp: ThpMode) -> SimResult {
    let m = numalab_machine::preset("opteron6164he-4n").expect("preset exists");
    let w = numalab_workloads::by_spec(workload, threads).unwrap();
    let cfg = SimConfig {
        pinning: Pinning::Sockorder,
        hugetlb,
        thp,
        ..Default::default()
    };
    simulate(&m, w.as_ref(), cfg).unwrap()
}

#[test]
fn one_gib_heap_backs_every_array_and_ends_the_walks() {
    // STREAM's three 32 MB arrays share the heap's first 1 GiB page: one fault maps them all,
    // on the node of the thread that touched first, and the TLB no longer misses.
    let spec = "stream:n=4000000,ntimes=2";
    let base = run(spec, 12, None, ThpMode::Never);
    let giant = run(spec, 12, Some(PageSize::Giant1G), ThpMode::Never);
    assert_eq!(giant.hugetlb, "1G");
    assert_eq!(base.hugetlb, "none");
    assert_eq!(
        (giant.vmstat.pgfault_4k, giant.vmstat.pgfault_1g),
        (0, 1),
        "{:?}",
        giant.vmstat
    );
    let resident: Vec<u64> = giant.per_node.iter().map(|n| n.resident_bytes).collect();
    assert_eq!(
        resident.iter().filter(|&&r| r > 0).count(),
        1,
        "one node holds the page: {resident:?}"
    );
    assert_eq!(resident.iter().sum::<u64>(), 1 << 30);
    let walks = |r: &SimResult| {
        r.per_thread
            .iter()
            .map(|t| t.page_walks.iter().sum::<u64>())
            .sum::<u64>()
    };
    assert!(walks(&base) > 1000 * walks(&giant).max(1));
    // all threads now read one controller: the run is slower than first touch on 4 KiB pages
    assert!(giant.sim_time_ns > 1.5 * base.sim_time_ns);
}

#[test]
fn two_mib_heap_serves_static_arrays_and_overrides_thp() {
    // NPB's .bss goes to the heap too (a program relinked for libhugetlbfs): hugetlbfs pages
    // only, whatever THP says.
    let giant = run(
        "npb-cg:class=S,niter=1",
        4,
        Some(PageSize::Huge2M),
        ThpMode::Always,
    );
    assert_eq!(giant.vmstat.pgfault_4k, 0, "{:?}", giant.vmstat);
    assert!(giant.vmstat.pgfault_2m > 0);
    assert_eq!(
        giant.vmstat.thp_fault_alloc, 0,
        "hugetlbfs pages are not THP"
    );
}
