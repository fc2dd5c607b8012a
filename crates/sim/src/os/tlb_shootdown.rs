//! TLB shootdowns (docs/model.md, "TLB shootdowns"; issue "Trustworthy simulation II",
//! items 2 and 10): who pays for flushing a changed translation from the other CPUs, and how
//! many flushes an operation raises.
//!
//! x86 has no broadcast TLB invalidation: the CPU that changes a mapping of a task flushes its
//! own TLB, sends an IPI to every other CPU in the mm's cpumask and waits until each has
//! flushed (`flush_tlb_mm_range` → `flush_tlb_multi`, `native_flush_tlb_others` before 5.x).
//! The raising CPU pays `tlb_shootdown_ns` for the first CPU reached and
//! `tlb_shootdown_per_cpu_ns` for each further one (the IPIs go out one after another); each
//! CPU reached loses `tlb_flush_ipi_ns` to the interrupt. A task with no other CPU flushes
//! locally, which the operation's own cost holds.
//!
//! How many flushes an operation raises follows the kernel:
//! - a protection change (mprotect, madvise, next-touch marking, lazy migration's unmap, the
//!   NUMA scanner's `change_prot_numa`), a huge page's split and khugepaged's collapse: one
//!   for its range;
//! - a migration: one per folio (`try_to_migrate_one` → `ptep_clear_flush`) before Linux 6.3;
//!   from 6.3, `migrate_pages_batch` unmaps up to `HPAGE_PMD_NR` base pages' worth of folios
//!   and flushes once for them (Huang Ying, "migrate_pages: batch flushing TLB"). A huge
//!   folio's PMD is invalidated and flushed on its own (`pmdp_invalidate`), batched or not;
//! - from Linux 3.8 a base page's PTE that the task cannot access (PROT_NONE: a NUMA hinting
//!   fault's, kernel or user-space next-touch's protected page) needs no flush when it is
//!   cleared (`ptep_clear_flush` tests `pte_accessible`): the protection change flushed it
//!   already. So a hinting fault's migration of a base page raises none.

use numalab_core::PageSize;
use numalab_machine::OsCosts;

/// Base pages whose folios share one flush in a migration from Linux 6.3 on
/// (`NR_MAX_BATCHED_MIGRATION` = `HPAGE_PMD_NR` on x86).
pub const MIGRATION_BATCH_PAGES: u64 = 512;

/// The costs of one shootdown and the kernel's rules for when one is raised.
#[derive(Clone, Copy, Debug)]
pub struct Shootdowns {
    first_ns: f64,
    per_cpu_ns: f64,
    /// Each CPU reached, ns.
    pub ipi_ns: f64,
    /// Migrations flush once per batch (Linux 6.3 and later), not per folio.
    pub migration_batched: bool,
    /// Clearing an inaccessible (PROT_NONE) PTE needs no flush (Linux 3.8 and later).
    pub skip_inaccessible: bool,
}

impl Shootdowns {
    pub fn new(c: &OsCosts) -> Shootdowns {
        Shootdowns {
            first_ns: c.tlb_shootdown_ns,
            per_cpu_ns: c.tlb_shootdown_per_cpu_ns,
            ipi_ns: c.tlb_flush_ipi_ns,
            migration_batched: c.linux_at_least(6, 3),
            skip_inaccessible: c.linux_at_least(3, 8),
        }
    }

    /// The same rules with every cost multiplied by `s` (NUMA balancing's `time_scale`).
    pub fn scaled(self, s: f64) -> Shootdowns {
        Shootdowns {
            first_ns: self.first_ns * s,
            per_cpu_ns: self.per_cpu_ns * s,
            ipi_ns: self.ipi_ns * s,
            ..self
        }
    }

    /// The raising CPU's time for one shootdown that reaches `cpus` other CPUs, ns.
    pub fn initiator_ns(&self, cpus: usize) -> f64 {
        match cpus {
            0 => 0.0,
            k => self.first_ns + (k - 1) as f64 * self.per_cpu_ns,
        }
    }

    /// Flushes raised by migrating `folios`, each (size, whether the task could access its
    /// PTE), in the call's order. A huge folio's PMD is invalidated and flushed on its own
    /// (`pmdp_invalidate`; 6.3's batching leaves huge folios out). A base folio flushes once
    /// before Linux 6.3, and its batch of [`MIGRATION_BATCH_PAGES`] base pages once from 6.3;
    /// none from 3.8 when its PTE was inaccessible (PROT_NONE).
    pub fn migration_flushes(&self, folios: impl Iterator<Item = (PageSize, bool)>) -> u32 {
        let (mut flushes, mut in_batch) = (0u32, MIGRATION_BATCH_PAGES);
        for (size, accessible) in folios {
            if size != PageSize::Base4K {
                flushes += 1;
            } else if !accessible && self.skip_inaccessible {
                continue;
            } else if !self.migration_batched {
                flushes += 1;
            } else {
                if in_batch == MIGRATION_BATCH_PAGES {
                    flushes += 1;
                    in_batch = 0;
                }
                in_batch += 1;
            }
        }
        flushes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs(linux: &str) -> Shootdowns {
        let mut c = OsCosts::reference();
        c.linux = linux.into();
        Shootdowns::new(&c)
    }

    #[test]
    fn the_initiator_pays_for_each_cpu_reached_and_nothing_alone() {
        let s = costs("3.9");
        assert_eq!(s.initiator_ns(0), 0.0);
        assert_eq!(s.initiator_ns(1), 2_600.0);
        assert_eq!(s.initiator_ns(31), 2_600.0 + 30.0 * 405.0);
    }

    #[test]
    fn migrations_flush_per_folio_before_6_3_and_per_batch_after() {
        let base = |n| std::iter::repeat_n((PageSize::Base4K, true), n);
        assert_eq!(costs("6.1").migration_flushes(base(1000)), 1000);
        assert_eq!(costs("6.3").migration_flushes(base(1000)), 2);
        assert_eq!(costs("6.3").migration_flushes(base(512)), 1);
        assert_eq!(costs("6.6").migration_flushes(std::iter::empty()), 0);
        // huge folios flush on their own, batched or not
        let huge = (PageSize::Huge2M, true);
        let mixed = [(PageSize::Base4K, true), huge, (PageSize::Base4K, true)];
        assert_eq!(costs("6.6").migration_flushes(mixed.into_iter()), 2);
        assert_eq!(costs("3.9").migration_flushes(mixed.into_iter()), 3);
    }

    #[test]
    fn inaccessible_base_pages_need_no_flush_from_3_8() {
        let prot_none = [(PageSize::Base4K, false); 4];
        assert_eq!(costs("2.6.27").migration_flushes(prot_none.into_iter()), 4);
        assert_eq!(costs("3.8").migration_flushes(prot_none.into_iter()), 0);
        let huge = [(PageSize::Huge2M, false)];
        assert_eq!(costs("6.1").migration_flushes(huge.into_iter()), 1);
    }
}
