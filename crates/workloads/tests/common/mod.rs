//! Draining workloads against a bump allocator, shared by the workload test files.

#![allow(dead_code)]

use numalab_core::workload::{Op, ThreadSpec, Workload};
use numalab_core::TaskId;
use numalab_workloads::by_spec;
use numalab_workloads::inspect::{summarize, BumpSpace, ThreadSummary};

pub fn build(spec: &str, threads: usize) -> (Box<dyn Workload>, BumpSpace, Vec<ThreadSpec>) {
    let w = by_spec(spec, threads).unwrap_or_else(|e| panic!("{spec}: {e}"));
    let mut space = BumpSpace::new();
    let specs = w.build(&mut space);
    assert_eq!(
        specs.len(),
        w.threads(),
        "{spec}: one ThreadSpec per thread"
    );
    (w, space, specs)
}

/// Every op of one thread, fill by fill (each fill gets an empty buffer, as the engine does).
pub fn drain(spec: &mut ThreadSpec) -> Vec<Op> {
    let (mut all, mut buf) = (Vec::new(), Vec::new());
    loop {
        buf.clear();
        let more = spec.program.fill(&mut buf);
        all.extend_from_slice(&buf);
        if !more {
            return all;
        }
    }
}

/// Drain every thread; check ranges and per-task barrier counts.
pub fn run_all(
    spec: &str,
    threads: usize,
) -> (Box<dyn Workload>, BumpSpace, Vec<(TaskId, ThreadSummary)>) {
    let (w, space, mut specs) = build(spec, threads);
    let sums: Vec<_> = specs
        .iter_mut()
        .map(|s| (s.task, summarize(s, &space, None)))
        .collect();
    for (t, (task, s)) in sums.iter().enumerate() {
        assert_eq!(
            s.out_of_range, 0,
            "{spec}: thread {t} touches unmapped lines"
        );
        assert!(
            s.max_fill_ops <= 2 * numalab_workloads::emit::CHUNK_OPS,
            "{spec}: thread {t} fills {} ops at once",
            s.max_fill_ops
        );
        let first = sums.iter().find(|(k, _)| k == task).unwrap();
        assert_eq!(
            s.barriers, first.1.barriers,
            "{spec}: thread {t} emits a different number of barriers than its task's first thread"
        );
    }
    (w, space, sums)
}
