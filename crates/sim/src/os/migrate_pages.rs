//! Whole-process migration: `migrate_pages(2)` on a simulated task, source node by source
//! node as the kernel takes them (`numalab_core::migrate_pages`). The costs (a walk per step,
//! the copies at the call's rate) are the engine's (`Simulator::migration_call`).

use super::{MigrateReport, Os};
use numalab_core::migrate_pages::migration_steps;
use numalab_core::{NodeMask, TaskId};

impl Os {
    /// `migrate_pages(2)` on `task`: every present folio of its regions on a source node moves
    /// to its destination, step by step as the kernel takes them (a folio moved by one step
    /// can be moved again by a later one, as in the kernel). Returns what moved and the
    /// number of steps (address-space walks) made.
    pub fn migrate_process(
        &mut self,
        task: TaskId,
        from: &NodeMask,
        to: &NodeMask,
    ) -> (MigrateReport, usize) {
        let mut report = MigrateReport::default();
        let steps = migration_steps(from, to);
        let ranges: Vec<(u64, u64)> = self
            .regions
            .iter()
            .filter(|r| r.task == task)
            .map(|r| (r.start, r.len))
            .collect();
        for &(source, dest) in &steps {
            for &(start, len) in &ranges {
                for (fs, pte) in self.pt.folios(start, len) {
                    if pte.node() == source.index() {
                        self.migrate_folio(fs, pte, dest, &mut report);
                    }
                }
            }
        }
        (report, steps.len())
    }
}
