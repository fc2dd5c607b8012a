//! Files in the page cache, mapped MAP_PRIVATE and read (docs/model.md, "Page cache").
//!
//! A program that mmaps its input (Metis' wc and wr) finds the file's pages already in
//! memory: whoever read the file before the run put them on its node. The model places them
//! when the run starts, as the task's first thread would have read them (the task policy
//! from that thread's node, `populate_page_cache`), and keeps them unmapped (`Pte::cached`)
//! until a thread touches one. That fault (`map_cached`) allocates and clears nothing: it
//! maps the cached page, 4 KiB whatever THP says, and from Linux 3.15 the cached pages
//! around it in the same fault (`do_fault_around`, `fault_around_bytes` = 64 KiB, the
//! 16-page window aligned on its size, clipped to the mapping).

use super::{Fault, Os, OsError};
use numalab_core::{NodeId, PageSize, TaskId};

/// Linux 3.15's `fault_around_bytes` default, in base pages.
pub const FAULT_AROUND_PAGES: u64 = 16;

impl Os {
    /// Follow the modelled kernel: fault-around from Linux 3.15 (`do_fault_around` with
    /// `vm_ops->map_pages`).
    pub fn set_fault_around(&mut self, linux_3_15_or_later: bool) {
        self.fault_around_pages = if linux_3_15_or_later {
            FAULT_AROUND_PAGES
        } else {
            1
        };
    }

    /// Whether `addr` lies in a file mapping.
    pub fn in_file_mapping(&self, addr: u64) -> bool {
        self.region_index(addr)
            .is_some_and(|i| self.regions[i].file)
    }

    /// Read `task`'s mapped files into the page cache from a CPU of `reader`: every 4 KiB
    /// page placed by the task policy as a read(2) there would place it, falling back along
    /// the policy's node order where a node is full. Files already read are left alone.
    pub fn populate_page_cache(&mut self, task: TaskId, reader: NodeId) -> Result<(), OsError> {
        for ri in 0..self.regions.len() {
            let r = &self.regions[ri];
            if !r.file || r.task != task || self.pt.get(r.start).cached() {
                continue;
            }
            let (start, end, name) = (r.start, r.end(), r.name.clone());
            self.task_mut(task);
            for addr in (start..end).step_by(4096) {
                let placement = self.task_placement(task, reader);
                let Some(node) = self.room_for(&placement, 1) else {
                    let what = format!("the page cache of file mapping '{name}'");
                    return Err(self.out_of_memory(what, (end - addr) >> 12, &placement));
                };
                self.free_pages[node.index()] -= 1;
                self.pt.set_cached(addr, node);
                // a page-cache allocation counts in numastat as any other
                self.count_numa_alloc(node, &placement, reader, 1);
            }
        }
        Ok(())
    }

    /// A read fault at `addr` (a cached page) in the file mapping `ri` by a CPU of `local`:
    /// map it, and with fault-around the cached pages of its window that are not mapped yet.
    pub(super) fn map_cached(&mut self, ri: usize, addr: u64, local: NodeId) -> Fault {
        let page = PageSize::Base4K.align_down(addr);
        let window = self.fault_around_pages * 4096;
        let r = &self.regions[ri];
        let lo = (page / window * window).max(r.start);
        let hi = (lo + window).min(r.end());
        let task = r.task;
        for a in (lo..hi).step_by(4096) {
            let pte = self.pt.get(a);
            // a neighbour under user-space next-touch stays out: its protection splits
            // the VMA, and fault-around maps only inside the faulting one
            if pte.cached() && (a == page || !pte.moves_on_touch()) {
                self.pt.map(a, PageSize::Base4K, NodeId(pte.node() as u16));
            }
        }
        if self.pt_pages.node(page, PageSize::Base4K).is_none() {
            let table_node = self.table_node(task, local);
            self.pt_pages.fault(page, PageSize::Base4K, table_node);
        }
        self.vm.pgfault_4k += 1;
        Fault {
            folio_start: page,
            size: PageSize::Base4K,
            node: NodeId(self.pt.get(page).node() as u16),
            local_rule: false,
            hugetlb: false,
            file: true,
        }
    }
}
