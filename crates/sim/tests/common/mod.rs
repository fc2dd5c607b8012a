//! Pieces several of this crate's test binaries use (each `tests/*.rs` is its own crate; the
//! ones that need these declare `mod common;`).

use numalab_core::view::MemoryView;
use numalab_core::{Action, NodeId, Policy, TaskId};

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
