//! The memory directory (hw/memory_directory.rs, docs/model.md "Memory directory"): on a
//! machine that keeps one, a remote read that changes a line's directory state costs its home
//! controller a line write; re-reading remote read-only data costs it once, streaming over
//! remote data that is written costs it every pass; local data and machines without a
//! directory never pay it.

use numalab_core::{AccessKind, CpuId, MapOptions, MemPolicy, NodeId, NodeMask, Op};
use numalab_machine::Machine;
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;

const ARRAY_BYTES: u64 = 64 << 20; // 3 × the 22 MiB L3 of the Gold 6130: every pass misses
const LINES: u64 = ARRAY_BYTES / 64;

fn dahu(directory: bool) -> Machine {
    let mut m = numalab_machine::preset("xeon-gold6130-2n").unwrap();
    assert!(
        m.memory_directory,
        "the Skylake-SP preset keeps a directory"
    );
    m.memory_directory = directory;
    m
}

/// `threads` threads on node 0 (CPUs 0, 2, 4, ...), each making `passes` passes of `kind`
/// accesses over every line of its own array, placed on `home`.
fn passes(m: &Machine, threads: usize, home: u16, kind: AccessKind, passes: u64) -> SimResult {
    let w = Script {
        maps: (0..threads)
            .map(|_| {
                (
                    ARRAY_BYTES,
                    MapOptions {
                        policy: Some(MemPolicy::Bind {
                            nodes: NodeMask::single(NodeId(home)),
                            numa_balancing: false,
                        }),
                        ..Default::default()
                    },
                )
            })
            .collect(),
        threads,
        ops: move |bases: &[u64], t: usize| {
            (0..passes)
                .map(|_| Op::Run {
                    base: bases[t],
                    lines: LINES as u32,
                    stride_bytes: 64,
                    kind,
                })
                .collect()
        },
    };
    let node0 = &m.topology.nodes[0].cpus;
    let cfg = SimConfig {
        pinning: Pinning::Cpus(node0.iter().copied().take(threads).collect::<Vec<CpuId>>()),
        sample_period: 0,
        ..Default::default()
    };
    simulate(m, &w, cfg).unwrap()
}

fn directory_lines(r: &SimResult, node: usize) -> f64 {
    r.per_node[node].directory_write_bytes as f64 / 64.0
}

#[test]
fn re_reading_remote_read_only_data_updates_the_directory_once() {
    let m = dahu(true);
    let once = passes(&m, 1, 1, AccessKind::Read, 1);
    let thrice = passes(&m, 1, 1, AccessKind::Read, 3);
    // the first pass sets every line to A (a write each); later passes find A
    let lines = LINES as f64;
    assert!(
        (directory_lines(&once, 1) - lines).abs() < 0.01 * lines,
        "{} directory writes for {lines} lines",
        directory_lines(&once, 1)
    );
    assert_eq!(
        thrice.per_node[1].directory_write_bytes, once.per_node[1].directory_write_bytes,
        "clean lines stay in A: no further directory writes"
    );
    // the writes are the home controller's own: nothing more crosses the link than without
    let without = passes(&dahu(false), 1, 1, AccessKind::Read, 3);
    let link_bytes = |r: &SimResult| r.links.iter().map(|l| l.bytes).sum::<f64>();
    let (a, b) = (link_bytes(&thrice), link_bytes(&without));
    assert!((a - b).abs() < 1e-9 * b, "{a} link bytes with, {b} without");
    assert_eq!(
        thrice.per_node[1].ctrl_write_bytes,
        without.per_node[1].ctrl_write_bytes + thrice.per_node[1].directory_write_bytes
    );
}

#[test]
fn every_pass_over_remote_data_that_is_written_back_updates_the_directory_again() {
    let m = dahu(true);
    let r = passes(&m, 1, 1, AccessKind::Write, 3);
    // each pass's stores read their lines for ownership (I → A), the write-backs store I
    let expected = 3.0 * LINES as f64;
    let got = directory_lines(&r, 1);
    assert!(
        (got - expected).abs() < 0.02 * expected,
        "{got} directory writes, expected ≈ {expected}"
    );
}

#[test]
fn local_data_and_machines_without_a_directory_never_pay_it() {
    let local = passes(&dahu(true), 1, 0, AccessKind::Write, 2);
    assert!(local.per_node.iter().all(|n| n.directory_write_bytes == 0));
    let no_dir = passes(&dahu(false), 1, 1, AccessKind::Write, 2);
    assert!(no_dir.per_node.iter().all(|n| n.directory_write_bytes == 0));
    for id in ["xeon-e5-2699v3-2n", "xeon-x5650-2n", "opteron6272-8n"] {
        let m = numalab_machine::preset(id).unwrap();
        assert!(
            !m.memory_directory,
            "{id}: snooping or probes, no directory"
        );
    }
}

#[test]
fn directory_writes_slow_remote_streams_bound_by_the_home_controller() {
    // Broadwell-EP (65 GB/s controller, QPI at 34.875 GB/s of flits): 22 threads of node 0
    // storing to node 1 are bound by the link without a directory (per line, 0 → 1 carries
    // the RFO's 8 B request and the 80 B write-back, 1 → 0 the RFO's 72 B of data and the
    // write-back's 8 B completion) and by node 1's controller with one (RFO + write-back +
    // directory write: 3 × 64 B on 65 GB/s per line), about 1.3 × longer.
    let mut m = numalab_machine::preset("xeon-e5-2699v4-2n").unwrap();
    let with = passes(&m, 22, 1, AccessKind::Write, 2);
    m.memory_directory = false;
    let without = passes(&m, 22, 1, AccessKind::Write, 2);
    let ratio = with.sim_time_ns / without.sim_time_ns;
    assert!(
        ratio > 1.15 && ratio < 1.5,
        "{} ns with, {} ns without a directory",
        with.sim_time_ns,
        without.sim_time_ns
    );
}
