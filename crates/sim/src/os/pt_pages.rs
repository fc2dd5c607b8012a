//! The node of each page-table page (docs/model.md, "OS model", page-table pages). Linux
//! allocates a page-table page when a fault first needs it (`__pte_alloc`, `__pmd_alloc`,
//! `__pud_alloc`), with the faulting task's memory policy and no regard to the data's
//! (`pagetable_alloc` → `alloc_pages`, which reads the task policy, not the VMA's), and never
//! migrates it with the data. A walk's references then go to where the tables are: a buffer
//! `mbind`-ed to a remote node by a thread that faulted it in is walked in local memory.
//!
//! One table page maps 512 entries: a PTE page 2 MiB of address space, a PMD (page-directory)
//! page 1 GiB, a PUD (page-directory-pointer) page 512 GiB. The walk's line for level `size`
//! (`engine::PtLines`) is an entry of the table page that maps folios of `size`, so the table
//! page's node is looked up by the same level.

use numalab_core::{NodeId, PageSize};

/// No table page there yet.
const NONE: u8 = u8::MAX;

/// Per level (4 KiB: PTE pages, 2 MiB: PMD pages, 1 GiB: PUD pages), the node of the table
/// page covering each span, indexed by `addr >> span_shift`.
#[derive(Clone, Debug, Default)]
pub struct PtPages {
    nodes: [Vec<u8>; 3],
}

/// The address bits one table page of the level that maps folios of `size` covers.
fn span_shift(size: PageSize) -> u32 {
    size.shift() + 9
}

impl PtPages {
    /// The node of the table page holding the entry that maps `addr` at level `size`, if a
    /// fault has allocated it.
    #[inline(always)]
    pub fn node(&self, addr: u64, size: PageSize) -> Option<usize> {
        let v = &self.nodes[size.index()];
        match v.get((addr >> span_shift(size)) as usize) {
            Some(&n) if n != NONE => Some(n as usize),
            _ => None,
        }
    }

    /// A fault maps a folio of `size` at `addr`: the table pages its walk passes through that
    /// no earlier fault allocated are allocated on `node` (the task policy's choice for the
    /// faulting thread). Returns how many were allocated.
    pub fn fault(&mut self, addr: u64, size: PageSize, node: NodeId) -> u32 {
        let mut allocated = 0;
        for level in [PageSize::Giant1G, PageSize::Huge2M, PageSize::Base4K] {
            if level.index() < size.index() {
                // a huge mapping's entry is in the level above: no table below it
                continue;
            }
            let v = &mut self.nodes[level.index()];
            let i = (addr >> span_shift(level)) as usize;
            if v.len() <= i {
                v.resize(i + 1, NONE);
            }
            if v[i] == NONE {
                v[i] = node.index() as u8;
                allocated += 1;
            }
        }
        allocated
    }

    /// Table pages allocated so far (all levels).
    #[cfg(test)]
    fn count(&self) -> usize {
        self.nodes
            .iter()
            .map(|v| v.iter().filter(|&&n| n != NONE).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_allocates_the_tables_it_needs_once_on_the_given_node() {
        let mut pt = PtPages::default();
        let a = 5u64 << 30; // 5 GiB
                            // a 4 KiB fault: a PUD, a PMD and a PTE page
        assert_eq!(pt.fault(a, PageSize::Base4K, NodeId(1)), 3);
        assert_eq!(pt.node(a, PageSize::Base4K), Some(1));
        assert_eq!(pt.node(a, PageSize::Huge2M), Some(1));
        assert_eq!(pt.node(a, PageSize::Giant1G), Some(1));
        // the same 2 MiB span later, from another node: nothing new, the tables stay
        assert_eq!(pt.fault(a + 4096, PageSize::Base4K, NodeId(0)), 0);
        assert_eq!(pt.node(a + 4096, PageSize::Base4K), Some(1));
        // the next 2 MiB: a PTE page of its own, the PMD page shared
        assert_eq!(pt.fault(a + (2 << 20), PageSize::Base4K, NodeId(0)), 1);
        assert_eq!(pt.node(a + (2 << 20), PageSize::Base4K), Some(0));
        // a 2 MiB mapping in another GiB needs no PTE page
        let b = 7u64 << 30;
        assert_eq!(pt.fault(b, PageSize::Huge2M, NodeId(2)), 1);
        assert_eq!(pt.node(b, PageSize::Huge2M), Some(2));
        assert_eq!(pt.node(b, PageSize::Base4K), None);
        assert_eq!(pt.count(), 5);
    }
}
