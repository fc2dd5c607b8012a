//! A flat page table over the simulator's virtual address space.
//!
//! One 32-bit entry per 4 KiB of virtual space: lookups on the hot path are one array index.
//! A 2 MiB or 1 GiB mapping writes its node and size into all of its base-page entries, so a
//! lookup never needs to know the mapping size in advance; splitting a huge page only
//! rewrites the size bits.

use numalab_core::{NodeId, PageSize};

/// Start of the simulated virtual address space (keeps address 0 unmapped).
pub const VA_BASE: u64 = 1 << 32;

const NODE_MASK: u32 = 0xffff;
const PRESENT: u32 = 1 << 16;
const SIZE_SHIFT: u32 = 17; // 2 bits: 0 = 4K, 1 = 2M, 2 = 1G
const NEXT_TOUCH: u32 = 1 << 19;
const PROT_NONE: u32 = 1 << 20;
/// User-space next-touch (os/next_touch.rs): the range is mprotect(PROT_NONE) by the library;
/// set on every 4 KiB entry of a marked range, populated or not.
const USER_NEXT_TOUCH: u32 = 1 << 21;
/// Lazy migration (os/next_touch.rs): unmapped until a fault moves its block to the
/// destination.
const LAZY: u32 = 1 << 22;
/// Placed by a first touch in the current epoch: a thread touching it earlier in simulated
/// time takes it over (os/first_touch.rs).
const FRESH: u32 = 1 << 23;
/// Being migrated (os/migration_entry.rs): the kernel's migration entry, an access waits in
/// the fault handler until the copy is done.
const MIGRATING: u32 = 1 << 24;
/// A page of a file in the page cache, on the entry's node, not yet mapped (page_cache.rs):
/// a fault maps it. Never with PRESENT.
const CACHED: u32 = 1 << 25;
/// Flags that send a reference to the slow path (with PRESENT clear).
const SLOW: u32 = PRESENT | NEXT_TOUCH | PROT_NONE | USER_NEXT_TOUCH | LAZY | FRESH | MIGRATING;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Pte(pub u32);

impl Pte {
    #[inline]
    pub fn present(self) -> bool {
        self.0 & PRESENT != 0
    }
    #[inline]
    pub fn node(self) -> usize {
        (self.0 & NODE_MASK) as usize
    }
    #[inline]
    pub fn size(self) -> PageSize {
        // a table rather than a match: the match cost six instructions per reference
        const SIZES: [PageSize; 4] = [
            PageSize::Base4K,
            PageSize::Huge2M,
            PageSize::Giant1G,
            PageSize::Giant1G,
        ];
        SIZES[((self.0 >> SIZE_SHIFT) & 3) as usize]
    }
    #[inline]
    pub fn next_touch(self) -> bool {
        self.0 & NEXT_TOUCH != 0
    }
    /// Protected for a NUMA hinting fault (PROT_NONE / _PAGE_PROTNONE).
    #[inline]
    pub fn prot_none(self) -> bool {
        self.0 & PROT_NONE != 0
    }
    /// Protected by user-space next-touch.
    #[inline]
    pub fn user_next_touch(self) -> bool {
        self.0 & USER_NEXT_TOUCH != 0
    }
    /// Unmapped for lazy migration.
    #[inline]
    pub fn lazy(self) -> bool {
        self.0 & LAZY != 0
    }
    /// User-space next-touch or lazy migration: os/next_touch.rs handles the fault first.
    #[inline]
    pub fn moves_on_touch(self) -> bool {
        self.0 & (USER_NEXT_TOUCH | LAZY) != 0
    }
    /// A page-cache page waiting to be mapped (os/page_cache.rs).
    #[inline]
    pub fn cached(self) -> bool {
        self.0 & CACHED != 0
    }
    /// First touched in the current epoch (os/first_touch.rs).
    #[inline]
    pub fn fresh(self) -> bool {
        self.0 & FRESH != 0
    }
    /// Under a migration entry: its copy may still be running.
    #[inline]
    pub fn migrating(self) -> bool {
        self.0 & MIGRATING != 0
    }
    /// Needs the slow path for something other than a migration entry.
    #[inline]
    pub fn needs_fault_beyond_migration(self) -> bool {
        self.0 & (SLOW & !MIGRATING) != PRESENT
    }
    /// Needs the slow path: not present, next-touch, hint-fault protected or lazily
    /// migrating, fresh (its touches are noted), or being migrated.
    #[inline]
    pub fn needs_fault(self) -> bool {
        self.0 & SLOW != PRESENT
    }
    /// Present and nothing to do but note the touch of a fresh folio.
    #[inline]
    pub fn only_fresh(self) -> bool {
        self.0 & SLOW == PRESENT | FRESH
    }
    pub fn mapped(node: NodeId, size: PageSize) -> Pte {
        Pte(node.0 as u32 | PRESENT | ((size.index() as u32) << SIZE_SHIFT))
    }
}

pub struct PageTable {
    entries: Vec<Pte>,
}

impl PageTable {
    pub fn new() -> PageTable {
        PageTable {
            entries: Vec::new(),
        }
    }

    /// Make room for virtual addresses up to `end`; `Err(bytes)` when the host cannot
    /// allocate the entries (4 bytes per simulated 4 KiB), nothing changed then.
    pub fn grow_to(&mut self, end: u64) -> Result<(), u64> {
        let n = ((end - VA_BASE) >> 12) as usize;
        if n > self.entries.len() {
            let more = n - self.entries.len();
            // amortised, as `resize` grows: a run maps many regions one after another
            self.entries
                .try_reserve(more)
                .map_err(|_| (more * std::mem::size_of::<Pte>()) as u64)?;
            self.entries.resize(n, Pte::default());
        }
        Ok(())
    }

    #[inline]
    pub fn index(addr: u64) -> usize {
        ((addr - VA_BASE) >> 12) as usize
    }

    #[inline]
    pub fn get(&self, addr: u64) -> Pte {
        self.entries[Self::index(addr)]
    }

    /// Entry at `addr`, or an empty one outside the mapped space.
    #[inline]
    pub fn try_get(&self, addr: u64) -> Pte {
        // below VA_BASE the subtraction wraps to an index far past the table: one bounds
        // check covers both ends
        let i = (addr.wrapping_sub(VA_BASE) >> 12) as usize;
        self.entries.get(i).copied().unwrap_or_default()
    }

    /// Map the folio of `size` starting at `start` (aligned) on `node`.
    pub fn map(&mut self, start: u64, size: PageSize, node: NodeId) {
        let i = Self::index(start);
        let pte = Pte::mapped(node, size);
        self.entries[i..i + size.base_pages() as usize].fill(pte);
    }

    /// A 4 KiB page of a file, in the page cache on `node` but not mapped (page_cache.rs).
    pub fn set_cached(&mut self, addr: u64, node: NodeId) {
        self.entries[Self::index(addr)] = Pte(node.0 as u32 | CACHED);
    }

    pub fn unmap(&mut self, start: u64, size: PageSize) {
        let i = Self::index(start);
        self.entries[i..i + size.base_pages() as usize].fill(Pte::default());
    }

    /// Rewrite a huge mapping as base pages on the same node (a split).
    pub fn split(&mut self, start: u64, size: PageSize) {
        let i = Self::index(start);
        for e in &mut self.entries[i..i + size.base_pages() as usize] {
            *e = Pte((e.0 & !(3 << SIZE_SHIFT)) & !PROT_NONE);
        }
    }

    /// Set or clear a flag bit on every entry of a folio.
    fn set_flag(&mut self, start: u64, size: PageSize, flag: u32, on: bool) {
        let i = Self::index(start);
        for e in &mut self.entries[i..i + size.base_pages() as usize] {
            if on {
                e.0 |= flag;
            } else {
                e.0 &= !flag;
            }
        }
    }

    pub fn set_next_touch(&mut self, start: u64, size: PageSize, on: bool) {
        self.set_flag(start, size, NEXT_TOUCH, on)
    }

    pub fn set_prot_none(&mut self, start: u64, size: PageSize, on: bool) {
        self.set_flag(start, size, PROT_NONE, on)
    }

    pub fn set_lazy(&mut self, start: u64, size: PageSize, on: bool) {
        self.set_flag(start, size, LAZY, on)
    }

    pub fn set_fresh(&mut self, start: u64, size: PageSize, on: bool) {
        self.set_flag(start, size, FRESH, on)
    }

    pub fn set_migrating(&mut self, start: u64, size: PageSize, on: bool) {
        self.set_flag(start, size, MIGRATING, on)
    }

    /// Move a folio's entries to `node`, keeping their size and flags.
    pub fn set_node(&mut self, start: u64, size: PageSize, node: NodeId) {
        let i = Self::index(start);
        for e in &mut self.entries[i..i + size.base_pages() as usize] {
            e.0 = (e.0 & !NODE_MASK) | node.0 as u32;
        }
    }

    /// Set or clear the user-space next-touch protection on every 4 KiB entry of
    /// `[start, start + len)` (page aligned), present or not; returns how many changed.
    pub fn set_user_next_touch_range(&mut self, start: u64, len: u64, on: bool) -> u64 {
        let i = Self::index(start);
        let mut changed = 0;
        for e in &mut self.entries[i..i + (len >> 12) as usize] {
            let was = e.0 & USER_NEXT_TOUCH != 0;
            if was != on {
                e.0 ^= USER_NEXT_TOUCH;
                changed += 1;
            }
        }
        changed
    }

    /// Number of present base pages in `[start, start + len)`.
    pub fn present_base_pages(&self, start: u64, len: u64) -> usize {
        let i = Self::index(start);
        self.entries[i..i + (len >> 12) as usize]
            .iter()
            .filter(|e| e.present())
            .count()
    }

    /// Iterate the folios present in `[start, start + len)`: (folio start, pte).
    pub fn folios(&self, start: u64, len: u64) -> Vec<(u64, Pte)> {
        let mut out = Vec::new();
        let end = start + len;
        let mut a = start & !0xfff;
        while a < end {
            let e = self.try_get(a);
            if e.present() {
                let fs = e.size().align_down(a);
                out.push((fs, e));
                a = fs + e.size().bytes();
            } else {
                a += 4096;
            }
        }
        out
    }
}

impl Default for PageTable {
    fn default() -> Self {
        Self::new()
    }
}
