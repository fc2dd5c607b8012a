//! Stores (docs/model.md, "Stores"; issue "Trustworthy simulation II", item 7): a store
//! retires into the store buffer, so its miss costs the thread nothing while the buffer has
//! room, a remote store about what a local one does; a stream of stores fills the buffer and
//! is then bound by bandwidth like reads. The RFOs still load the controllers.

use numalab_core::{AccessKind, CpuId, MapOptions, MemPolicy, Op, PageSize};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;

const MIB: u64 = 1 << 20;
const LINE: u64 = 64;

/// The 4-node Magny-Cours preset: the chase's memory can sit on a node that neither the
/// local nor the remote stores load.
const MACHINE: &str = "opteron6164he-4n";

/// Bound to `node`, backed by 2 MiB pages (the L1 DTLB holds all 32 of a buffer's: the
/// tests time the stores, not their translations).
fn bound_to(node: &str) -> MapOptions {
    let m = numalab_machine::preset(MACHINE).unwrap();
    MapOptions {
        policy: Some(MemPolicy::parse(&format!("bind:{node}"), &m.topology.online()).unwrap()),
        hugetlb: Some(PageSize::Huge2M),
        ..Default::default()
    }
}

/// One thread on CPU 0 (node 0) over two 64 MiB buffers, `chase` on node 2 and `data` on
/// `data_node`; both first touched before a phase boundary, then `body`.
fn run(
    data_node: &str,
    body: impl Fn(u64, u64, &mut Vec<Op>) + Send + Sync + 'static,
) -> SimResult {
    let m = numalab_machine::preset(MACHINE).unwrap();
    let w = Script {
        maps: vec![(64 * MIB, bound_to("2")), (64 * MIB, bound_to(data_node))],
        threads: 1,
        ops: move |bases: &[u64], _t: usize| {
            let mut ops = Vec::new();
            for b in bases {
                for p in 0..64 * MIB / 4096 {
                    ops.push(Op::Access {
                        addr: b + p * 4096,
                        kind: AccessKind::Write,
                    });
                }
            }
            ops.push(Op::Phase { id: 1 });
            body(bases[0], bases[1], &mut ops);
            ops
        },
    };
    let cfg = SimConfig {
        pinning: Pinning::Cpus(vec![CpuId(0)]),
        sample_period: 0,
        ..Default::default()
    };
    simulate(&m, &w, cfg).unwrap()
}

/// Time after the phase boundary, ns.
fn measured_ns(r: &SimResult) -> f64 {
    let last = r.phases.last().unwrap();
    last.end_ns - last.start_ns
}

/// Line `i` of a 64 MiB buffer in a fixed pseudo-random order (an LCG's low bits).
fn scattered(i: u64) -> u64 {
    (i.wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        >> 20)
        % (64 * MIB / LINE)
}

/// `steps` dependent reads around a random cycle of `chase`, each followed by `stores`
/// stores to scattered lines of `data`.
fn chase_and_store(steps: u64, stores: u64) -> impl Fn(u64, u64, &mut Vec<Op>) + Send + Sync {
    move |chase, data, ops| {
        for s in 0..steps {
            ops.push(Op::Access {
                addr: chase + scattered(s + 1_000_000) * LINE,
                kind: AccessKind::DependentRead,
            });
            for k in 0..stores {
                ops.push(Op::Access {
                    addr: data + scattered(s * stores + k) * LINE,
                    kind: AccessKind::Write,
                });
            }
        }
    }
}

#[test]
fn stores_behind_a_pointer_chase_cost_nothing_local_or_remote() {
    // 4 stores per step drain in ≈ 4 × 130 / 14 ≈ 37 ns, under a ≈ 130 ns dependent read
    let chase_only = measured_ns(&run("0", chase_and_store(50_000, 0)));
    let local = measured_ns(&run("0", chase_and_store(50_000, 4)));
    let remote = measured_ns(&run("1", chase_and_store(50_000, 4)));
    eprintln!("chase {chase_only:.0} ns, + local stores {local:.0}, + remote stores {remote:.0}");
    assert!(
        local < 1.1 * chase_only,
        "{local:.0} against {chase_only:.0}"
    );
    let factor = remote / local;
    assert!((0.98..1.04).contains(&factor), "remote / local {factor:.3}");
}

#[test]
fn a_stream_of_stores_is_bound_by_bandwidth_like_reads() {
    let stream = |kind: AccessKind| {
        move |_chase: u64, data: u64, ops: &mut Vec<Op>| {
            for c in 0..64 * MIB / (64 * LINE) {
                ops.push(Op::Run {
                    base: data + c * 64 * LINE,
                    lines: 64,
                    stride_bytes: LINE as u16,
                    kind,
                });
            }
        }
    };
    let reads = run("1", stream(AccessKind::Read));
    let writes = run("1", stream(AccessKind::Write));
    let (r, w) = (measured_ns(&reads), measured_ns(&writes));
    eprintln!("remote read stream {r:.0} ns, write stream {w:.0} ns");
    // not hidden: the buffer fills and the stores wait at the fill buffers' pace; their
    // write-backs add to the traffic (the link both ways) the reads do not have
    assert!(
        (0.95..1.3).contains(&(w / r)),
        "writes {w:.0} against reads {r:.0}"
    );
    // the RFOs were read from the remote controller all the same
    let t = &writes.per_thread[0];
    assert!(
        t.dram_remote >= 64 * MIB / LINE,
        "{} remote reads",
        t.dram_remote
    );
}
