//! Pieces several of this crate's test binaries use (each `tests/*.rs` is its own crate; the
//! ones that need these declare `mod common;`, and not every one uses every piece).
#![allow(dead_code)]

use numalab_core::view::MemoryView;
use numalab_core::{AccessKind, Action, CpuId, MapOptions, NodeId, Op, Policy, TaskId};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;

const MIB: u64 = 1 << 20;

/// One thread on CPU 0 of `preset` first touches a 64 MiB buffer (one write per page, so that
/// faults are not in the way), then a phase boundary, then the ops `body` emits for the
/// buffer's start address.
pub fn after_first_touch(
    preset: &str,
    body: impl Fn(u64, &mut Vec<Op>) + Send + Sync + 'static,
) -> SimResult {
    let m = numalab_machine::preset(preset).unwrap();
    let w = Script {
        maps: vec![(64 * MIB, MapOptions::default())],
        threads: 1,
        ops: move |bases: &[u64], _t: usize| {
            let mut ops = Vec::new();
            for p in 0..(64 * MIB / 4096) {
                ops.push(Op::Access {
                    addr: bases[0] + p * 4096,
                    kind: AccessKind::Write,
                });
            }
            ops.push(Op::Phase { id: 1 });
            body(bases[0], &mut ops);
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

/// Time of the last phase (after `after_first_touch`'s first touch), ns.
pub fn measured_ns(r: &SimResult) -> f64 {
    let last = r.phases.last().unwrap();
    last.end_ns - last.start_ns
}

/// At its first tick, moves mapping 0 of task 0 to node 1 with one move_pages call, once: a
/// policy daemon's migration.
pub struct MigrateOnce {
    period_ns: u64,
    done: bool,
}

impl MigrateOnce {
    /// Ticking every `period_ns` (its first tick, and so the call, at `period_ns`).
    pub fn at(period_ns: u64) -> MigrateOnce {
        MigrateOnce {
            period_ns,
            done: false,
        }
    }
}

impl Policy for MigrateOnce {
    fn name(&self) -> &str {
        "migrate-once"
    }
    fn period_ns(&self) -> u64 {
        self.period_ns
    }
    fn tick(&mut self, view: &dyn MemoryView) -> Vec<Action> {
        if std::mem::replace(&mut self.done, true) {
            return Vec::new();
        }
        let r = &view.regions()[0];
        vec![Action::Migrate {
            task: TaskId(0),
            start: r.start,
            len_bytes: r.len_bytes,
            to: NodeId(1),
        }]
    }
}
