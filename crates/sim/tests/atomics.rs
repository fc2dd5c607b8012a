//! Locked read-modify-writes (docs/model.md, "Atomics"): a `lock cmpxchg` or `xchg` is a full
//! fence. It waits until every earlier load has its data and every earlier store has drained,
//! and nothing after it issues before it completes, so atomics to independent lines do not
//! overlap as plain read-modify-writes do (Intel SDM vol. 3A §8.1.2; Schweizer, Besta &
//! Hoefler, PACT 2015).

mod common;

use common::measured_ns;
use numalab_core::{AccessKind, Op};
use numalab_sim::SimResult;

const MIB: u64 = 1 << 20;
const PRESET: &str = "xeon-gold6130-2n";

/// [`common::after_first_touch`] on [`PRESET`].
fn after_first_touch(body: impl Fn(u64, &mut Vec<Op>) + Send + Sync + 'static) -> SimResult {
    common::after_first_touch(PRESET, body)
}

/// Line `i` of a spread of the buffer's lines (a multiplicative hash: no two near).
fn line(i: u64) -> u64 {
    (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) % (64 * MIB / 64)
}

/// `n` references of `kind` to spread lines of the buffer.
fn spread(n: u64, kind: AccessKind) -> SimResult {
    after_first_touch(move |base, ops| {
        for i in 0..n {
            ops.push(Op::Access {
                addr: base + line(i) * 64,
                kind,
            });
        }
    })
}

/// `n` times: one reference of `before` to a spread line, then an atomic on the buffer's
/// first line (in the private cache after the first time).
fn then_atomic_on_a_cached_line(n: u64, before: AccessKind, atomic: AccessKind) -> SimResult {
    after_first_touch(move |base, ops| {
        for i in 0..n {
            ops.push(Op::Access {
                addr: base + line(i + 1) * 64,
                kind: before,
            });
            ops.push(Op::Access {
                addr: base,
                kind: atomic,
            });
        }
    })
}

#[test]
fn atomics_to_independent_lines_do_not_overlap() {
    const N: u64 = 20_000;
    let plain = measured_ns(&spread(N, AccessKind::ReadModifyWrite));
    let atomic = measured_ns(&spread(N, AccessKind::Atomic));
    let dependent = measured_ns(&spread(N, AccessKind::DependentRead));
    eprintln!("RMW {plain:.0} ns, atomic {atomic:.0}, dependent reads {dependent:.0}");
    // plain read-modify-writes overlap up to the fill buffers (their translations do not:
    // walks are serial in the model); atomics are serial, so they last at least what
    // dependent reads of the same lines do, plus their own cost
    let m = numalab_machine::preset(PRESET).unwrap();
    assert!(
        atomic > 3.0 * plain,
        "atomics {atomic:.0} ns against read-modify-writes {plain:.0}"
    );
    let lock_ns = N as f64 * m.core.locked_op_cycles as f64 / m.core.ghz;
    assert!(
        atomic >= dependent + 0.99 * lock_ns && atomic <= 1.05 * (dependent + lock_ns),
        "atomics {atomic:.0} ns against dependent reads {dependent:.0} + locked ops {lock_ns:.0}"
    );
    let r = spread(N, AccessKind::Atomic);
    let atomics: u64 = r
        .phases
        .last()
        .unwrap()
        .per_thread
        .iter()
        .map(|t| t.atomics)
        .sum();
    assert_eq!(atomics, N, "every atomic counted");
}

#[test]
fn an_atomic_waits_for_the_loads_and_stores_before_it() {
    const N: u64 = 20_000;
    // a miss, then an atomic on a cached line: the atomic waits for the miss's data
    let after_load = measured_ns(&then_atomic_on_a_cached_line(
        N,
        AccessKind::Read,
        AccessKind::Atomic,
    ));
    let after_load_plain = measured_ns(&then_atomic_on_a_cached_line(
        N,
        AccessKind::Read,
        AccessKind::ReadModifyWrite,
    ));
    let dependent = measured_ns(&spread(N, AccessKind::DependentRead));
    eprintln!(
        "read + atomic {after_load:.0} ns, read + RMW {after_load_plain:.0}, one dependent read {dependent:.0}"
    );
    // each pair lasts at least the miss's whole latency
    assert!(
        after_load >= 0.98 * dependent,
        "a read then an atomic {after_load:.0} ns against the reads' latency {dependent:.0}"
    );
    assert!(
        after_load > 3.0 * after_load_plain,
        "a read then an atomic {after_load:.0} ns, with a plain RMW {after_load_plain:.0}"
    );
    // a store that misses costs nothing while the store buffer has room, unless an atomic
    // follows: then its line must come first
    let after_store = measured_ns(&then_atomic_on_a_cached_line(
        N,
        AccessKind::Write,
        AccessKind::Atomic,
    ));
    let after_store_plain = measured_ns(&then_atomic_on_a_cached_line(
        N,
        AccessKind::Write,
        AccessKind::ReadModifyWrite,
    ));
    eprintln!("store + atomic {after_store:.0} ns, store + RMW {after_store_plain:.0}");
    assert!(
        after_store >= 0.98 * dependent,
        "a store then an atomic {after_store:.0} ns against the lines' latency {dependent:.0}"
    );
    assert!(
        after_store > 3.0 * after_store_plain,
        "a store then an atomic {after_store:.0} ns, with a plain RMW {after_store_plain:.0}"
    );
}

#[test]
fn compute_after_an_atomic_does_not_hide_under_the_misses_before_it() {
    // misses, then compute: the compute runs under them; with an atomic between, the
    // atomic waits for them first and the compute comes after
    const N: u64 = 5_000;
    let body = |atomic: bool| {
        after_first_touch(move |base, ops| {
            for i in 0..N {
                for k in 0..4 {
                    ops.push(Op::Access {
                        addr: base + line(4 * i + k + 1) * 64,
                        kind: AccessKind::Read,
                    });
                }
                if atomic {
                    ops.push(Op::Access {
                        addr: base,
                        kind: AccessKind::Atomic,
                    });
                }
                ops.push(Op::Compute {
                    cycles: 200,
                    instructions: 200,
                });
            }
        })
    };
    let overlap = |r: &SimResult| -> f64 {
        r.phases
            .last()
            .unwrap()
            .per_thread
            .iter()
            .map(|t| t.overlap_ns)
            .sum()
    };
    let (with, without) = (overlap(&body(true)), overlap(&body(false)));
    eprintln!("compute hidden with atomics {with:.0} ns, without {without:.0} ns");
    assert!(without > 0.0);
    assert!(
        with < 0.01 * without,
        "compute hid {with:.0} ns across atomics"
    );
}
