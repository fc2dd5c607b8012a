//! Migrate-on-next-touch and lazy migration (reference/policies.md §4): the OS side.
//!
//! Three mechanisms move a page only when somebody touches it:
//!
//! - **Kernel next-touch** (Goglin & Furmento's `madvise(MIGRATE_ON_NEXT_TOUCH)`): a flag per
//!   page table entry ([`Os::mark_next_touch_kernel`]); the fault handler copies the touched
//!   folio to the toucher's node and clears the flag ([`Os::kernel_next_touch_fault`]),
//!   strictly page by page (n touched pages = n migrations).
//! - **User-space next-touch** (their library): `mprotect(PROT_NONE)` over the range
//!   ([`Os::mark_next_touch_user`]); the SIGSEGV handler moves the whole unit around the
//!   fault with one `move_pages` call, restores the unit's protection and drops the mark
//!   ([`Os::user_next_touch_fault`]).
//! - **Lazy migration** (Müller's dataspace migration, `migrate(region, dst)`): the range is
//!   unmapped ([`Os::lazy_migrate`]); a fault at page i moves it to `dst` if it is not there,
//!   then maps it. The mapping unit is first one page, then the largest naturally aligned
//!   power-of-two block around the fault inside the range (capped by
//!   [`NextTouchState::lazy_max_block_bytes`]); every flagged page of the block is migrated
//!   before the block is mapped ([`Os::lazy_fault`]). Pages of blocks never touched stay.
//!
//! As everywhere in `os/`, nothing is timed here: the functions report what they did and the
//! engine charges it (docs/model.md, "Next touch and lazy migration"). Pages not yet populated
//! when a range is marked are left to first touch, which already places them on the toucher's
//! node under the default policy. A page moved by another mechanism (a policy's `Migrate`,
//! NUMA balancing) loses its mark, as its entry is rewritten.

use super::{MigrateReport, Os};
use numalab_core::{NodeId, PageSize, TaskId};
use serde::{Deserialize, Serialize};

/// What the three mechanisms did over a run (`SimResult::next_touch`). Pages are 4 KiB units.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NextTouchStats {
    /// Kernel next-touch: madvise calls, pages flagged, faults on flagged folios, pages moved.
    pub kernel_marks: u64,
    pub kernel_pages_marked: u64,
    pub kernel_faults: u64,
    pub kernel_pages_migrated: u64,
    /// User-space next-touch: mprotect(PROT_NONE) calls, pages protected, SIGSEGVs handled
    /// (one move_pages call and one protection restore each), pages moved.
    pub user_marks: u64,
    pub user_pages_marked: u64,
    pub user_faults: u64,
    pub user_pages_migrated: u64,
    /// Lazy migration: calls, present pages unmapped, faults, pages moved to the destination
    /// (pages of a faulting block already there are mapped without a copy).
    pub lazy_calls: u64,
    pub lazy_pages_unmapped: u64,
    pub lazy_faults: u64,
    pub lazy_pages_moved: u64,
}

/// A range protected by user-space next-touch: each `unit`-aligned block moves as one.
#[derive(Clone, Debug)]
struct UserArea {
    start: u64,
    end: u64,
    /// Bytes per unit (a multiple of 4 KiB); the whole area when it was marked with 0.
    unit: u64,
}

/// A lazy migration in progress (Müller's `migrate(region, dst)`).
#[derive(Clone, Debug)]
struct LazyArea {
    start: u64,
    end: u64,
    to: NodeId,
    /// Faults taken so far: the first maps one page, later ones the largest block.
    faults: u64,
    /// Flagged pages left; the area is dropped at 0 (the source backing is released).
    left: u64,
}

/// Marked ranges of every task, newest last (a newer mark wins where ranges overlap).
#[derive(Clone, Debug)]
pub struct NextTouchState {
    user: Vec<UserArea>,
    lazy: Vec<LazyArea>,
    /// Largest lazy-migration mapping unit, bytes (a power of two, 4 KiB or more). Müller maps
    /// the largest aligned block inside the region: `u64::MAX` (the default) keeps that.
    pub lazy_max_block_bytes: u64,
    pub stats: NextTouchStats,
}

impl Default for NextTouchState {
    fn default() -> Self {
        NextTouchState {
            user: Vec::new(),
            lazy: Vec::new(),
            lazy_max_block_bytes: u64::MAX,
            stats: NextTouchStats::default(),
        }
    }
}

/// One user-space next-touch fault: the unit handled and what `move_pages` did.
#[derive(Clone, Debug, Default)]
pub struct UserTouch {
    pub unit_start: u64,
    pub unit_len: u64,
    pub report: MigrateReport,
}

/// One lazy-migration fault: the block mapped and what moved.
#[derive(Clone, Debug, Default)]
pub struct LazyTouch {
    pub block_start: u64,
    pub block_len: u64,
    pub report: MigrateReport,
}

impl Os {
    /// The parts of `[start, start + len)` inside `task`'s mappings, page aligned.
    fn task_ranges(&self, task: TaskId, start: u64, len: u64) -> Vec<(u64, u64)> {
        let (lo, hi) = (start & !0xfff, (start + len + 0xfff) & !0xfff);
        self.regions
            .iter()
            .filter(|r| r.task == task)
            .filter_map(|r| {
                let (s, e) = (lo.max(r.start), hi.min(r.end()));
                (s < e).then_some((s, e))
            })
            .collect()
    }

    /// madvise(MIGRATE_ON_NEXT_TOUCH): flag every populated folio of the range (a huge folio
    /// overlapping it is flagged whole). Returns the base pages flagged.
    pub fn mark_next_touch_kernel(&mut self, task: TaskId, start: u64, len: u64) -> u64 {
        let mut pages = 0;
        for (s, e) in self.task_ranges(task, start, len) {
            for (fs, pte) in self.pt.folios(s, e - s) {
                self.pt.set_next_touch(fs, pte.size(), true);
                pages += pte.size().base_pages();
            }
        }
        self.nt.stats.kernel_marks += 1;
        self.nt.stats.kernel_pages_marked += pages;
        pages
    }

    /// The kernel fault handler on a flagged folio touched from node `to`: clear the flag and
    /// move the folio there if it is elsewhere (copy-on-write style).
    pub fn kernel_next_touch_fault(&mut self, addr: u64, to: NodeId) -> MigrateReport {
        let pte = self.pt.get(addr);
        let start = pte.size().align_down(addr);
        self.pt.set_next_touch(start, pte.size(), false);
        let mut r = MigrateReport::default();
        self.migrate_folio(start, pte, to, &mut r);
        self.nt.stats.kernel_faults += 1;
        self.nt.stats.kernel_pages_migrated += r.base_pages_moved;
        r
    }

    /// mprotect(PROT_NONE) over the range for user-space next-touch, recording its unit
    /// (`unit_bytes`, rounded up to whole pages; 0 = each marked mapping part is one unit).
    /// Returns the 4 KiB pages protected.
    pub fn mark_next_touch_user(
        &mut self,
        task: TaskId,
        start: u64,
        len: u64,
        unit_bytes: u64,
    ) -> u64 {
        let mut pages = 0;
        for (s, e) in self.task_ranges(task, start, len) {
            self.pt.set_user_next_touch_range(s, e - s, true);
            pages += (e - s) >> 12;
            let unit = if unit_bytes == 0 {
                e - s
            } else {
                unit_bytes.div_ceil(4096) * 4096
            };
            // an older area inside the new one is superseded
            self.nt.user.retain(|a| !(a.start >= s && a.end <= e));
            self.nt.user.push(UserArea {
                start: s,
                end: e,
                unit,
            });
        }
        self.nt.stats.user_marks += 1;
        self.nt.stats.user_pages_marked += pages;
        pages
    }

    /// The SIGSEGV handler of user-space next-touch for a fault at `addr` from node `to`:
    /// `move_pages` of every populated folio of the unit to `to`, then the unit's protection
    /// is restored and its mark dropped. The fault address's entry is always unprotected.
    pub fn user_next_touch_fault(&mut self, addr: u64, to: NodeId) -> UserTouch {
        let Some(i) = self
            .nt
            .user
            .iter()
            .rposition(|a| a.start <= addr && addr < a.end)
        else {
            // no record (cannot happen while marks only come through mark_next_touch_user)
            self.pt
                .set_user_next_touch_range(addr & !0xfff, 4096, false);
            return UserTouch::default();
        };
        let a = &self.nt.user[i];
        let us = (a.start + (addr - a.start) / a.unit * a.unit).max(a.start);
        let ue = (us + a.unit).min(a.end);
        let mut report = MigrateReport::default();
        for (fs, pte) in self.pt.folios(us, ue - us) {
            self.migrate_folio(fs, pte, to, &mut report);
        }
        self.pt.set_user_next_touch_range(us, ue - us, false);
        // the area is done once no page of it is protected any more
        let (s, e) = (self.nt.user[i].start, self.nt.user[i].end);
        if !self.any_flagged(s, e, |p| p.user_next_touch()) {
            self.nt.user.remove(i);
        }
        self.nt.stats.user_faults += 1;
        self.nt.stats.user_pages_migrated += report.base_pages_moved;
        UserTouch {
            unit_start: us,
            unit_len: ue - us,
            report,
        }
    }

    fn any_flagged(&self, s: u64, e: u64, f: impl Fn(super::pagetable::Pte) -> bool) -> bool {
        (s..e).step_by(4096).any(|a| f(self.pt.get(a)))
    }

    /// Müller's `migrate(region, dst)`: unmap every populated page of the range (those already
    /// on `to` too: the region is unmapped as a whole); faults bring them to `to` block by
    /// block. Returns the 4 KiB pages unmapped.
    pub fn lazy_migrate(&mut self, task: TaskId, start: u64, len: u64, to: NodeId) -> u64 {
        let mut pages = 0;
        for (s, e) in self.task_ranges(task, start, len) {
            let mut left = 0;
            for (fs, pte) in self.pt.folios(s, e - s) {
                self.pt.set_lazy(fs, pte.size(), true);
                left += pte.size().base_pages();
            }
            pages += left;
            self.nt.lazy.retain(|a| !(a.start >= s && a.end <= e));
            if left > 0 {
                self.nt.lazy.push(LazyArea {
                    start: s,
                    end: e,
                    to,
                    faults: 0,
                    left,
                });
            }
        }
        self.nt.stats.lazy_calls += 1;
        self.nt.stats.lazy_pages_unmapped += pages;
        pages
    }

    /// A fault at `addr` in a lazily migrating range: pick the mapping unit (one page at the
    /// area's first fault, else the largest naturally aligned power-of-two block around `addr`
    /// inside the area, at most `lazy_max_block_bytes`), move each of its unmapped folios to
    /// the destination unless already there, and map them.
    pub fn lazy_fault(&mut self, addr: u64) -> LazyTouch {
        let Some(i) = self
            .nt
            .lazy
            .iter()
            .rposition(|a| a.start <= addr && addr < a.end)
        else {
            let pte = self.pt.get(addr);
            self.pt
                .set_lazy(pte.size().align_down(addr), pte.size(), false);
            return LazyTouch::default();
        };
        let a = &self.nt.lazy[i];
        let (bs, be) = if a.faults == 0 {
            let s = addr & !0xfff;
            (s, s + 4096)
        } else {
            largest_aligned_block(addr, a.start, a.end, self.nt.lazy_max_block_bytes)
        };
        let to = a.to;
        let mut report = MigrateReport::default();
        let mut cleared = 0;
        for (fs, pte) in self.pt.folios(bs, be - bs) {
            if !pte.lazy() {
                continue; // mapped by an earlier fault
            }
            self.pt.set_lazy(fs, pte.size(), false);
            cleared += pte.size().base_pages();
            let pte = self.pt.get(fs);
            self.migrate_folio(fs, pte, to, &mut report);
        }
        let a = &mut self.nt.lazy[i];
        a.faults += 1;
        a.left = a.left.saturating_sub(cleared);
        if a.left == 0 {
            self.nt.lazy.remove(i);
        }
        self.nt.stats.lazy_faults += 1;
        self.nt.stats.lazy_pages_moved += report.base_pages_moved;
        LazyTouch {
            block_start: bs,
            block_len: be - bs,
            report,
        }
    }
}

/// The largest naturally aligned power-of-two block holding `addr` inside `[start, end)`, of
/// at most `max` bytes (at least one 4 KiB page).
pub fn largest_aligned_block(addr: u64, start: u64, end: u64, max: u64) -> (u64, u64) {
    let mut size = PageSize::Base4K.bytes();
    loop {
        let next = size << 1;
        if next == 0 || next > max {
            break;
        }
        let s = addr & !(next - 1);
        if s < start || s + next > end {
            break;
        }
        size = next;
    }
    let s = addr & !(size - 1);
    (s, s + size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::ThpMode;
    use numalab_core::{CpuId, MemPolicy, NodeInfo, Topology};

    fn os2() -> Os {
        let topo = Topology {
            nodes: (0..2)
                .map(|i| NodeInfo {
                    id: NodeId(i),
                    cpus: vec![CpuId(i as u32)],
                    mem_bytes: 256 << 20,
                })
                .collect(),
            distances: vec![vec![10, 20], vec![20, 10]],
            smt: 1,
        };
        Os::new(&topo, ThpMode::Never, MemPolicy::Default, 1)
    }

    fn populate(os: &mut Os, a: u64, pages: u64, node: u16) {
        for p in 0..pages {
            os.fault(TaskId(0), a + p * 4096, NodeId(node)).unwrap();
        }
    }

    #[test]
    fn largest_block_is_aligned_and_inside() {
        let base = 1u64 << 32;
        // a 16-page range at an aligned start: a fault at page 5 gets the whole range
        assert_eq!(
            largest_aligned_block(base + 5 * 4096, base, base + 16 * 4096, u64::MAX),
            (base, base + 16 * 4096)
        );
        // starting at page 2: page 5 lies in the aligned 4-page block 4..8
        assert_eq!(
            largest_aligned_block(base + 5 * 4096, base + 2 * 4096, base + 16 * 4096, u64::MAX),
            (base + 4 * 4096, base + 8 * 4096)
        );
        // the cap holds
        assert_eq!(
            largest_aligned_block(base + 5 * 4096, base, base + 16 * 4096, 8192),
            (base + 4 * 4096, base + 6 * 4096)
        );
    }

    #[test]
    fn user_unit_moves_whole_and_is_unprotected() {
        let mut os = os2();
        let a = os.mmap(TaskId(0), "r", 64 * 4096, None, None, None);
        populate(&mut os, a, 64, 0);
        assert_eq!(
            os.mark_next_touch_user(TaskId(0), a, 64 * 4096, 16 * 4096),
            64
        );
        let t = os.user_next_touch_fault(a + 20 * 4096 + 8, NodeId(1));
        assert_eq!((t.unit_start, t.unit_len), (a + 16 * 4096, 16 * 4096));
        assert_eq!(t.report.base_pages_moved, 16);
        for p in 0..64 {
            let e = os.pt.get(a + p * 4096);
            let in_unit = (16..32).contains(&p);
            assert_eq!(e.node(), in_unit as usize, "page {p}");
            assert_eq!(e.user_next_touch(), !in_unit, "page {p}");
        }
    }

    #[test]
    fn lazy_first_fault_maps_one_page_then_blocks() {
        let mut os = os2();
        let a = os.mmap(TaskId(0), "r", 64 * 4096, None, None, None);
        populate(&mut os, a, 64, 0);
        assert_eq!(os.lazy_migrate(TaskId(0), a, 64 * 4096, NodeId(1)), 64);
        os.nt.lazy_max_block_bytes = 16 * 4096;
        let f = os.lazy_fault(a + 3 * 4096);
        assert_eq!(f.report.base_pages_moved, 1);
        let f = os.lazy_fault(a + 2 * 4096);
        // block 0..16 minus page 3, mapped already
        assert_eq!((f.block_start, f.block_len), (a, 16 * 4096));
        assert_eq!(f.report.base_pages_moved, 15);
        assert_eq!(os.nt.stats.lazy_faults, 2);
        assert_eq!(os.nt.stats.lazy_pages_moved, 16);
        for p in 16..64 {
            let e = os.pt.get(a + p * 4096);
            assert!(e.lazy() && e.node() == 0, "untouched page {p} stays");
        }
    }
}
