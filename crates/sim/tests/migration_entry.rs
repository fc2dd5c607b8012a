//! Migration takes time where Linux takes it (issue "Trustworthy simulation II", item 2;
//! docs/model.md, "Migration"): a folio being copied is under a migration entry, a touch
//! waits for the copy in the fault handler, and a daemon's move_pages time is lost by a
//! program thread only when no CPU is free to run the daemon.

mod common;

use common::MigrateOnce;
use numalab_core::{AccessKind, MapOptions, Op, PageSize};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;

const MIB: u64 = 1 << 20;
const TICK_NS: u64 = 1_000_000;

/// `threads` threads of the X5650 preset (CPUs 0..threads, node 0 first): thread 0 writes a
/// 2 MiB huge page and then reads it over and over for several milliseconds; the others read
/// their own 2 MiB page the same way.
fn run(threads: usize, migrate: bool) -> SimResult {
    run_on("xeon-x5650-2n", threads, migrate)
}

fn run_on(preset: &str, threads: usize, migrate: bool) -> SimResult {
    let m = numalab_machine::preset(preset).unwrap();
    let w = Script {
        maps: (0..threads)
            .map(|_| {
                (
                    2 * MIB,
                    MapOptions {
                        hugetlb: Some(PageSize::Huge2M),
                        ..Default::default()
                    },
                )
            })
            .collect(),
        threads,
        ops: |bases: &[u64], t: usize| {
            let mut ops = vec![Op::Access {
                addr: bases[t],
                kind: AccessKind::Write,
            }];
            for _ in 0..60 {
                ops.push(Op::Run {
                    base: bases[t],
                    lines: (2 * MIB / 64) as u32,
                    stride_bytes: 64,
                    kind: AccessKind::Read,
                });
            }
            ops
        },
    };
    let cfg = SimConfig {
        pinning: Pinning::Cpus((0..threads as u32).map(numalab_core::CpuId).collect()),
        sample_period: 0,
        policies: if migrate {
            vec![Box::new(MigrateOnce::at(TICK_NS))]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    simulate(&m, &w, cfg).unwrap()
}

/// The copy of 2 MiB by move_pages with the preset's figures: base + bytes / rate, ns.
fn move_pages_ns() -> f64 {
    let os = numalab_machine::preset("xeon-x5650-2n").unwrap().os;
    os.move_pages_base_ns + (2 * MIB) as f64 / (os.move_pages_mbps * 1e6) * 1e9
}

#[test]
fn a_touch_of_a_folio_being_copied_waits_for_the_copy() {
    let still = run(2, false);
    let moved = run(2, true);
    assert_eq!(
        moved.per_node[1].resident_bytes,
        2 * MIB,
        "{:?}",
        moved.per_node
    );
    assert!(
        moved.vmstat.migration_entry_waits >= 1,
        "{:?}",
        moved.vmstat
    );
    // thread 0 reads its page all along: it waits for most of the copy (which starts after
    // the call's base cost, at the 1 ms tick) in the fault handler
    let copy_ns = (2 * MIB) as f64 / 600.0 * 1e3;
    let waited = moved.per_thread[0].fault_ns - still.per_thread[0].fault_ns;
    assert!(
        waited > 0.8 * copy_ns && waited <= move_pages_ns(),
        "thread 0 waited {waited:.0} ns for a {copy_ns:.0} ns copy"
    );
    // thread 1 never touches the migrated page: no wait, only the shootdown
    let other = moved.per_thread[1].fault_ns - still.per_thread[1].fault_ns;
    assert!(other.abs() < 1.0, "thread 1 waited {other} ns");
}

#[test]
fn the_daemon_runs_on_a_free_cpu_and_takes_a_busy_one_when_none_is_free() {
    // 2 threads on 24 CPUs: the move_pages call, with the flush of its one folio from the
    // task's two CPUs (os/tlb_shootdown.rs), costs the threads nothing but that interrupt
    let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
    let ipi = m.os.tlb_flush_ipi_ns;
    let few = run(2, true);
    let call = move_pages_ns();
    let flush = m.os.shootdown_initiator_ns(2);
    assert!(
        (few.policy_ns - call - flush).abs() < 1.0,
        "{} ns",
        few.policy_ns
    );
    assert!((few.per_thread[1].migration_ns - ipi).abs() < 1.0);
    // every CPU busy: one thread (not thread 0, which waits in its fault) loses the call
    let full = run(24, true);
    let lost: Vec<f64> = full.per_thread.iter().map(|t| t.migration_ns).collect();
    let losers = lost.iter().filter(|&&ns| ns > call).count();
    assert_eq!(losers, 1, "{lost:?}");
    let flush = m.os.shootdown_initiator_ns(24);
    assert!(
        lost.iter().all(|&ns| ns <= call + flush + ipi + 1.0),
        "{lost:?}"
    );
}

#[test]
fn a_huge_folio_migrated_whole_copies_at_the_huge_page_rate() {
    // Skylake-SP preset: move_pages moves a 2 MiB THP whole at thp_migrate_mbps (Zi Yan's
    // 2.97 GB/s on Haswell-EP), not at the 600 MB/s of 4 KiB pages
    let os = numalab_machine::preset("xeon-gold6130-2n").unwrap().os;
    assert!(os.thp_migrate_mbps > os.move_pages_mbps);
    let still = run_on("xeon-gold6130-2n", 1, false);
    let moved = run_on("xeon-gold6130-2n", 1, true);
    let waited = moved.per_thread[0].fault_ns - still.per_thread[0].fault_ns;
    let whole_ns = (2 * MIB) as f64 / os.thp_migrate_mbps * 1e3;
    let split_ns = (2 * MIB) as f64 / os.move_pages_mbps * 1e3;
    assert!(
        waited > 0.8 * whole_ns && waited <= 1.01 * whole_ns,
        "waited {waited:.0} ns for a {whole_ns:.0} ns copy ({split_ns:.0} ns at the 4 KiB rate)"
    );
    // the presets of the older kernels' studies keep moving huge folios at the 4 KiB rate
    assert_eq!(
        numalab_machine::preset("xeon-x5650-2n")
            .unwrap()
            .os
            .thp_migrate_mbps,
        0.0
    );
}
