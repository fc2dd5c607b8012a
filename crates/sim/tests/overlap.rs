//! Compute overlaps memory (docs/model.md, "Compute and memory overlap"; issue "Trustworthy
//! simulation II", item 6): independent misses and compute overlap up to the reorder buffer,
//! dependent chains stay serial.

mod common;

use common::measured_ns;
use numalab_core::{AccessKind, Op};
use numalab_sim::SimResult;

const MIB: u64 = 1 << 20;

/// [`common::after_first_touch`] on the Skylake preset.
fn after_first_touch(body: impl Fn(u64, &mut Vec<Op>) + Send + Sync + 'static) -> SimResult {
    common::after_first_touch("xeon-gold6130-2n", body)
}

/// `chunks` Runs of 64 lines of `kind` over the buffer (each line touched once), each
/// followed by `cycles` of compute retiring `instructions` (a Run of 0 lines: compute only).
fn run(kind: AccessKind, lines: u32, cycles: u32, instructions: u32) -> SimResult {
    after_first_touch(move |base, ops| {
        let chunks = 64 * MIB / (64 * 64);
        for c in 0..chunks {
            if lines > 0 {
                ops.push(Op::Run {
                    base: base + c * 64 * 64,
                    lines,
                    stride_bytes: 64,
                    kind,
                });
            }
            ops.push(Op::Compute {
                cycles,
                instructions,
            });
        }
    })
}

#[test]
fn a_streaming_loop_costs_the_larger_of_compute_and_memory_not_their_sum() {
    // 64 lines of independent reads ≈ 64 × 90 ns / 18 ≈ 320 ns a chunk; 600 cycles ≈ 285 ns
    let mem = measured_ns(&run(AccessKind::Read, 64, 0, 0));
    let comp = measured_ns(&run(AccessKind::Read, 0, 600, 1200));
    let both = measured_ns(&run(AccessKind::Read, 64, 600, 1200));
    let (hi, sum) = (mem.max(comp), mem + comp);
    eprintln!("memory {mem:.0} ns, compute {comp:.0} ns, both {both:.0} ns");
    assert!(
        both < 1.1 * hi && both >= 0.99 * hi,
        "both {both:.0} ns against max {hi:.0} (memory {mem:.0}, compute {comp:.0})"
    );
    assert!(
        both < 0.7 * sum,
        "both {both:.0} ns against the sum {sum:.0}"
    );
}

#[test]
fn a_dependent_chain_stays_serial() {
    let mem = measured_ns(&run(AccessKind::DependentRead, 64, 0, 0));
    let comp = measured_ns(&run(AccessKind::DependentRead, 0, 600, 1200));
    let both = measured_ns(&run(AccessKind::DependentRead, 64, 600, 1200));
    let sum = mem + comp;
    assert!(
        (both - sum).abs() < 0.02 * sum,
        "both {both:.0} ns against the sum {sum:.0}"
    );
}

#[test]
fn one_miss_hides_at_most_one_reorder_buffer_of_compute() {
    // one line per chunk, then 20 000 instructions in 20 000 cycles: the 224-entry ROB
    // holds 224 cycles (≈ 107 ns at 2.1 GHz) of it, more than the miss lasts (≈ 90 ns idle);
    // so per chunk at most one miss's worth hides, and never more than 224 cycles
    let mem = measured_ns(&run(AccessKind::Read, 1, 0, 0));
    let comp = measured_ns(&run(AccessKind::Read, 0, 20_000, 20_000));
    let both = measured_ns(&run(AccessKind::Read, 1, 20_000, 20_000));
    let chunks = (64 * MIB / (64 * 64)) as f64;
    let hidden = mem + comp - both;
    assert!(hidden > 0.0, "some of each miss hides under the compute");
    assert!(
        hidden <= chunks * 224.0 / 2.1 + 1.0,
        "hidden {hidden:.0} ns: more than one ROB per miss"
    );
    let per_chunk = hidden / chunks;
    let miss_ns = mem / chunks;
    assert!(
        per_chunk <= miss_ns * 1.01,
        "per chunk {per_chunk:.1} ns hidden, the miss lasts {miss_ns:.1}"
    );
}

/// `pairs` pairs of reads of random lines of the buffer, the first of each pair a dependent
/// read and the second of kind `second` (none: the first alone), with a compute op of
/// `gap_cycles` between them where that is not 0.
fn pairs(pairs: u64, second: Option<AccessKind>, gap_cycles: u32) -> SimResult {
    after_first_touch(move |base, ops| {
        // a multiplicative hash of the index: lines spread over the whole buffer
        let line = |i: u64| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) % (64 * MIB / 64);
        for i in 0..pairs {
            ops.push(Op::Access {
                addr: base + line(2 * i) * 64,
                kind: AccessKind::DependentRead,
            });
            if gap_cycles > 0 {
                ops.push(Op::Compute {
                    cycles: gap_cycles,
                    instructions: gap_cycles,
                });
            }
            if let Some(kind) = second {
                ops.push(Op::Access {
                    addr: base + line(2 * i + 1) * 64,
                    kind,
                });
            }
        }
    })
}

#[test]
fn a_sibling_read_overlaps_the_dependent_read_it_issues_with() {
    const N: u64 = 20_000;
    let single = measured_ns(&pairs(N, None, 0));
    let serial = measured_ns(&pairs(N, Some(AccessKind::DependentRead), 0));
    let siblings = measured_ns(&pairs(N, Some(AccessKind::SiblingRead), 0));
    eprintln!("one read {single:.0} ns, two dependent {serial:.0}, with a sibling {siblings:.0}");
    // two misses of about the same latency in flight at once: the pair lasts about one miss
    // (the longer of the two), not two
    assert!(
        serial > 1.9 * single,
        "two dependent reads {serial:.0} ns against one {single:.0}"
    );
    assert!(
        siblings >= single && siblings < 1.4 * single,
        "a pair with a sibling {siblings:.0} ns against one read {single:.0}"
    );
    // never below what an independent read would have cost for the second
    let independent = measured_ns(&pairs(N, Some(AccessKind::Read), 0));
    assert!(
        siblings >= independent * 0.999,
        "sibling pairs {siblings:.0} ns below independent pairs {independent:.0}"
    );
}

#[test]
fn a_sibling_after_compute_waits_as_a_dependent_read() {
    // the compute op between them: the sibling cannot have issued with the first read
    const N: u64 = 5_000;
    let serial = measured_ns(&pairs(N, Some(AccessKind::DependentRead), 4));
    let siblings = measured_ns(&pairs(N, Some(AccessKind::SiblingRead), 4));
    assert!(
        (siblings - serial).abs() < 1e-6 * serial,
        "with compute between: sibling {siblings:.0} ns, dependent {serial:.0}"
    );
}
