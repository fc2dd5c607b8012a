//! Per-core TLB hierarchy built from the machine description's [`TlbConfig`].
//!
//! Each [`TlbPool`] of the description becomes a set-associative array with true LRU
//! replacement (the engine of [`super::cache`]: flat arrays, power-of-two sets, ways raised
//! when the set count is rounded down so that no entry is lost). An entry is tagged by
//! `(virtual page number, page size)`; the set index is the VPN's low bits. A pool may cache
//! several sizes (a shared 4K/2M STLB); they then compete for its ways.
//!
//! A lookup knows the translation's page size (the simulator passes the mapping's size), so it
//! only searches the pools covering that size: first the L1 pools, then the L2 pools. A size
//! with no L1 pool goes straight to L2; a size with no pool at either level always misses.
//! An L2 hit fills L1; a miss (a page walk) fills L2 and L1. Where several pools of one level
//! cover a size, all are searched and the first one listed is filled. The levels are neither
//! inclusive nor exclusive: each evicts on its own.
//!
//! No allocation after [`Tlb::new`]; counting L1/L2 misses per size is the caller's job.

use super::cache::{fingerprint, WaySets};
use super::psc::{Psc, UpperLevels};
use numalab_core::PageSize;
use numalab_machine::{TlbConfig, TlbPool};

/// Result of [`Tlb::lookup`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TlbOutcome {
    L1Hit,
    /// Missed L1, hit L2 (L1 is filled).
    L2Hit,
    /// Missed both levels: a page walk (L2 and L1 are filled with its result).
    Miss,
}

/// Key of a translation: the VPN in the low bits (so that they index the set), the size's
/// index in bits 52..54 (keys stay below the set array's 2^55 - 1). A VPN is at most 52 bits
/// (4 KiB pages of a 64-bit space).
const SIZE_SHIFT: u32 = 52;
const VPN_MASK: u64 = (1 << SIZE_SHIFT) - 1;

#[inline(always)]
fn key_of(vpn: u64, size: PageSize) -> u64 {
    vpn | ((size.index() as u64) << SIZE_SHIFT)
}

const NONE: usize = usize::MAX;

/// Pools of one page size when each level has at most one: the lookup's fast path.
#[derive(Copy, Clone, Debug)]
struct Route {
    simple: bool,
    l1: usize,
    l2: usize,
    /// The two pools' set shapes where [`Tlb::lookup`] has a copy made for them.
    pair: Pair,
}

/// Set shapes (see `WaySets::shape`) of a simple route's L1 and L2 pool that
/// [`Tlb::lookup`] has a specialised copy for: the presets' TLBs. In these the shape is a
/// constant, so a lookup branches once on it instead of on each pool's form and width, and
/// an L1 miss hashes its key once for both levels (a third of the instructions of an L1
/// miss that hits L2 were that dispatch and the second hash).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Pair {
    /// None of the below: the pools' own dispatch.
    Other,
    /// A 32-entry fully associative L1 (the ring form) and an L2 of up to 16 ways
    /// (Bulldozer's 32-entry L1 DTLB and 8-way L2).
    Ring2Set1,
    /// L1 and L2 of up to 16 ways each (the Intel L1 DTLBs and STLBs).
    Set1Set1,
    /// A 33-48-way L1 and an L2 of up to 16 ways (K10's 48-entry fully associative L1).
    Set3Set1,
}

impl Pair {
    fn of(l1: Option<&WaySets>, l2: Option<&WaySets>) -> Pair {
        match (l1.map(WaySets::shape), l2.map(WaySets::shape)) {
            (Some((true, 2)), Some((false, 1))) => Pair::Ring2Set1,
            (Some((false, 1)), Some((false, 1))) => Pair::Set1Set1,
            (Some((false, 3)), Some((false, 1))) => Pair::Set3Set1,
            _ => Pair::Other,
        }
    }
}

/// A core's TLB hierarchy (L1 DTLB pools and L2 / STLB pools).
#[derive(Clone, Debug)]
pub struct Tlb {
    l1: Vec<WaySets>,
    l2: Vec<WaySets>,
    /// Per page size (`PageSize::index()`): the pools covering it, per level, in the
    /// description's order (the first one is filled).
    l1_of: [Vec<usize>; 3],
    l2_of: [Vec<usize>; 3],
    fast: [Route; 3],
    /// The key of the last lookup whose size has an L1 pool: it is the most recent entry of
    /// that pool, so looking it up again is an L1 hit that changes nothing (checked before
    /// any routing). `NO_KEY` after anything that drops entries.
    last_l1: u64,
    /// The paging-structure caches (hw/psc.rs): cleared with every invalidation, as INVLPG
    /// clears them.
    psc: Psc,
}

/// No valid key equals it (keys stay below 2^55).
const NO_KEY: u64 = u64::MAX;

fn routes(pools: &[TlbPool]) -> [Vec<usize>; 3] {
    let mut r: [Vec<usize>; 3] = Default::default();
    for (i, p) in pools.iter().enumerate() {
        if p.entries == 0 {
            continue; // an empty pool never hits: leave it out
        }
        for s in PageSize::ALL {
            if p.sizes.contains(&s) {
                r[s.index()].push(i);
            }
        }
    }
    r
}

fn pools(pools: &[TlbPool]) -> Vec<WaySets> {
    pools
        .iter()
        .map(|p| WaySets::new(p.entries as u64, p.ways as u64))
        .collect()
}

impl Tlb {
    /// Builds the pools of `cfg`, all empty. Geometry per pool as for caches: `ways` clamped to
    /// `1..=entries`, sets = entries / ways rounded down to a power of two, ways raised to
    /// `entries / sets`. A pool with 0 entries is ignored.
    pub fn new(cfg: &TlbConfig) -> Self {
        let (l1_of, l2_of) = (routes(&cfg.l1), routes(&cfg.l2));
        let (l1, l2) = (pools(&cfg.l1), pools(&cfg.l2));
        let fast = std::array::from_fn(|s| {
            let simple = l1_of[s].len() <= 1 && l2_of[s].len() <= 1;
            let (p1, p2) = (l1_of[s].first().copied(), l2_of[s].first().copied());
            Route {
                simple,
                l1: p1.unwrap_or(NONE),
                l2: p2.unwrap_or(NONE),
                pair: if simple {
                    Pair::of(p1.map(|p| &l1[p]), p2.map(|p| &l2[p]))
                } else {
                    Pair::Other
                },
            }
        });
        Tlb {
            l1,
            l2,
            l1_of,
            l2_of,
            fast,
            last_l1: NO_KEY,
            psc: Psc::new(&cfg.psc),
        }
    }

    /// A walk for `vaddr` (after a miss): the upper-level entries it reads from memory.
    #[inline]
    pub fn walk_levels(&mut self, vaddr: u64, size: PageSize) -> UpperLevels {
        self.psc.walk(vaddr, size)
    }

    /// Translates `vaddr`, mapped by a page of `size`: L1 hit, L2 hit (fills L1) or miss
    /// (fills L2 and L1 with the walk's result). Hits become most recently used.
    #[inline(always)]
    pub fn lookup(&mut self, vaddr: u64, size: PageSize) -> TlbOutcome {
        let key = key_of(vaddr >> size.shift(), size);
        if key == self.last_l1 {
            return TlbOutcome::L1Hit;
        }
        let r = self.fast[size.index()];
        match r.pair {
            Pair::Ring2Set1 => return self.lookup_pair::<true, 2>(key, r),
            Pair::Set1Set1 => return self.lookup_pair::<false, 1>(key, r),
            Pair::Set3Set1 => return self.lookup_pair::<false, 3>(key, r),
            Pair::Other => {}
        }
        if !r.simple {
            let out = self.lookup_general(key, size.index());
            self.last_l1 = if self.l1_covers(size) { key } else { NO_KEY };
            return out;
        }
        if r.l1 == NONE {
            self.last_l1 = NO_KEY;
        } else {
            self.last_l1 = key;
            // With one pool per level, `access` searches and, on a miss, fills in one pass.
            // SAFETY: `new` built the routes from these pool lists: an index other than NONE
            // is in bounds (the hot path skips the bounds checks).
            if unsafe { self.l1.get_unchecked_mut(r.l1) }
                .access(key, 0, 0)
                .hit()
            {
                return TlbOutcome::L1Hit;
            }
        }
        // SAFETY: as above.
        if r.l2 != NONE
            && unsafe { self.l2.get_unchecked_mut(r.l2) }
                .access(key, 0, 0)
                .hit()
        {
            return TlbOutcome::L2Hit;
        }
        TlbOutcome::Miss
    }

    /// [`Self::lookup`] past the repeat check for a route of one L1 pool of shape
    /// (`L1_RING`, `L1_G`) and one L2 pool of up to 16 ways (`Pair`).
    #[inline(always)]
    fn lookup_pair<const L1_RING: bool, const L1_G: usize>(
        &mut self,
        key: u64,
        r: Route,
    ) -> TlbOutcome {
        self.last_l1 = key;
        let fp = fingerprint(key);
        // SAFETY: a route other than `Pair::Other` names one pool at each level, and `new`
        // built the routes from these pool lists.
        unsafe {
            if self
                .l1
                .get_unchecked_mut(r.l1)
                .tlb_access::<L1_RING, L1_G>(key, fp)
            {
                return TlbOutcome::L1Hit;
            }
            if self
                .l2
                .get_unchecked_mut(r.l2)
                .tlb_access::<false, 1>(key, fp)
            {
                return TlbOutcome::L2Hit;
            }
        }
        TlbOutcome::Miss
    }

    /// Whether an L1 pool caches translations of `size` (a repeated lookup then hits L1).
    #[inline]
    pub fn l1_covers(&self, size: PageSize) -> bool {
        !self.l1_of[size.index()].is_empty()
    }

    /// Lookup where a level has several pools for the size.
    #[inline(never)]
    fn lookup_general(&mut self, key: u64, si: usize) -> TlbOutcome {
        for &p in &self.l1_of[si] {
            if self.l1[p].find(key).is_some() {
                self.l1[p].access(key, 0, 0);
                return TlbOutcome::L1Hit;
            }
        }
        let mut out = TlbOutcome::Miss;
        for &p in &self.l2_of[si] {
            if self.l2[p].find(key).is_some() {
                self.l2[p].access(key, 0, 0);
                out = TlbOutcome::L2Hit;
                break;
            }
        }
        if out == TlbOutcome::Miss {
            if let Some(&p) = self.l2_of[si].first() {
                self.l2[p].access(key, 0, 0);
            }
        }
        if let Some(&p) = self.l1_of[si].first() {
            self.l1[p].access(key, 0, 0);
        }
        out
    }

    /// Where a lookup would hit, without changing anything.
    pub fn probe(&self, vaddr: u64, size: PageSize) -> TlbOutcome {
        let key = key_of(vaddr >> size.shift(), size);
        let si = size.index();
        if self.l1_of[si]
            .iter()
            .any(|&p| self.l1[p].find(key).is_some())
        {
            TlbOutcome::L1Hit
        } else if self.l2_of[si]
            .iter()
            .any(|&p| self.l2[p].find(key).is_some())
        {
            TlbOutcome::L2Hit
        } else {
            TlbOutcome::Miss
        }
    }

    /// Drops every translation (a full flush, e.g. a context switch without PCID).
    pub fn flush(&mut self) {
        self.last_l1 = NO_KEY;
        self.psc.clear();
        for p in self.l1.iter_mut().chain(self.l2.iter_mut()) {
            p.clear();
        }
    }

    /// Drops the translation of the `size` page containing `vaddr` (INVLPG), at both levels.
    pub fn invalidate(&mut self, vaddr: u64, size: PageSize) {
        self.last_l1 = NO_KEY;
        self.psc.clear();
        let key = key_of(vaddr >> size.shift(), size);
        let si = size.index();
        self.for_pools_of(si, |pool| {
            if let Some(i) = pool.find(key) {
                pool.drop_way(i);
            }
        });
    }

    /// Drops every translation, of any size, whose page overlaps `start .. start + len`.
    /// Costs, per pool and size, `min(pages in range, sets) · ways`.
    pub fn invalidate_range(&mut self, start: u64, len: u64) {
        self.last_l1 = NO_KEY;
        self.psc.clear();
        if len == 0 {
            return;
        }
        let end = start.saturating_add(len - 1); // inclusive
        for size in PageSize::ALL {
            let (first, last) = (start >> size.shift(), end >> size.shift());
            let si = size.index();
            self.for_pools_of(si, |pool| {
                if last - first < pool.sets() as u64 {
                    for vpn in first..=last {
                        if let Some(i) = pool.find(key_of(vpn, size)) {
                            pool.drop_way(i);
                        }
                    }
                } else {
                    let sz = si as u64;
                    pool.drop_where(
                        |k| k >> SIZE_SHIFT == sz && (first..=last).contains(&(k & VPN_MASK)),
                        |_| {},
                    );
                }
            });
        }
    }

    /// Calls `f` on every pool, of both levels, that covers size index `si`.
    fn for_pools_of(&mut self, si: usize, mut f: impl FnMut(&mut WaySets)) {
        for &p in &self.l1_of[si] {
            f(&mut self.l1[p]);
        }
        for &p in &self.l2_of[si] {
            f(&mut self.l2[p]);
        }
    }

    /// Valid entries in the L1 pools and in the L2 pools (walks them; for tests and reports).
    pub fn occupancy(&self) -> (usize, usize) {
        (
            self.l1.iter().map(WaySets::valid).sum(),
            self.l2.iter().map(WaySets::valid).sum(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PageSize::*;

    const K4: u64 = 4096;
    const M2: u64 = 2 << 20;

    fn pool(entries: u32, ways: u32, sizes: &[PageSize]) -> TlbPool {
        TlbPool {
            entries,
            ways,
            sizes: sizes.to_vec(),
        }
    }

    fn cfg(l1: Vec<TlbPool>, l2: Vec<TlbPool>) -> TlbConfig {
        TlbConfig {
            l1,
            l2,
            l2_hit_ns: 2.0,
            walk_base_ns: 10.0,
            page_walkers: 1,
            psc: Default::default(),
        }
    }

    /// Broadwell-like: L1 64 × 4K 4-way, 32 × 2M 4-way, 4 × 1G; STLB 1536 shared 4K/2M
    /// 12-way + 16 × 1G 4-way.
    fn broadwell() -> TlbConfig {
        cfg(
            vec![
                pool(64, 4, &[Base4K]),
                pool(32, 4, &[Huge2M]),
                pool(4, 4, &[Giant1G]),
            ],
            vec![pool(1536, 12, &[Base4K, Huge2M]), pool(16, 4, &[Giant1G])],
        )
    }

    #[test]
    fn fully_associative_capacity() {
        // One fully associative 8-entry L1, no L2.
        let mut t = Tlb::new(&cfg(vec![pool(8, 8, &[Base4K])], vec![]));
        // 9 pages round robin: LRU misses every time.
        for _ in 0..4 {
            for p in 0..9 {
                assert_eq!(t.lookup(p * K4 + 8, Base4K), TlbOutcome::Miss);
            }
        }
        // 8 pages: misses on the first lap only.
        let mut t = Tlb::new(&cfg(vec![pool(8, 8, &[Base4K])], vec![]));
        for lap in 0..4 {
            for p in 0..8 {
                let want = if lap == 0 {
                    TlbOutcome::Miss
                } else {
                    TlbOutcome::L1Hit
                };
                assert_eq!(t.lookup(p * K4 + 100, Base4K), want);
            }
        }
        // Any address within the page hits the same entry.
        assert_eq!(t.lookup(3 * K4 + 4095, Base4K), TlbOutcome::L1Hit);
    }

    #[test]
    fn wide_fully_associative_capacity() {
        // K10-like 48-entry fully associative L1 for all sizes (fingerprint search, vector LRU).
        let k10 = || Tlb::new(&cfg(vec![pool(48, 48, &[Base4K, Huge2M, Giant1G])], vec![]));
        let mut t = k10();
        for _ in 0..3 {
            for p in 0..49 {
                assert_eq!(t.lookup(p * K4, Base4K), TlbOutcome::Miss);
            }
        }
        let mut t = k10();
        for lap in 0..3 {
            for p in 0..48 {
                let want = if lap == 0 {
                    TlbOutcome::Miss
                } else {
                    TlbOutcome::L1Hit
                };
                assert_eq!(t.lookup(p * M2, Huge2M), want);
            }
        }
    }

    #[test]
    fn two_levels() {
        // L1 4 entries fully assoc., L2 16 entries fully assoc.
        let mut t = Tlb::new(&cfg(
            vec![pool(4, 4, &[Base4K])],
            vec![pool(16, 16, &[Base4K])],
        ));
        for p in 0..16 {
            assert_eq!(t.lookup(p * K4, Base4K), TlbOutcome::Miss);
        }
        assert_eq!(t.occupancy(), (4, 16));
        // Pages 12..16 are in L1; 0 is only in L2 -> L2 hit, then L1 hit.
        assert_eq!(t.lookup(15 * K4, Base4K), TlbOutcome::L1Hit);
        assert_eq!(t.lookup(0, Base4K), TlbOutcome::L2Hit);
        assert_eq!(t.lookup(0, Base4K), TlbOutcome::L1Hit);
        // 17 pages round robin do not fit L2 either.
        let mut t = Tlb::new(&cfg(
            vec![pool(4, 4, &[Base4K])],
            vec![pool(16, 16, &[Base4K])],
        ));
        for _ in 0..3 {
            for p in 0..17 {
                assert_eq!(t.lookup(p * K4, Base4K), TlbOutcome::Miss);
            }
        }
    }

    #[test]
    fn shared_pool_holds_both_sizes_and_sizes_are_distinct() {
        let mut t = Tlb::new(&cfg(vec![pool(8, 8, &[Base4K, Huge2M])], vec![]));
        assert_eq!(t.lookup(0, Base4K), TlbOutcome::Miss);
        assert_eq!(t.lookup(0, Huge2M), TlbOutcome::Miss); // same address, other size
        assert_eq!(t.lookup(5 * M2, Huge2M), TlbOutcome::Miss);
        assert_eq!(t.occupancy(), (3, 0));
        assert_eq!(t.lookup(0x10, Base4K), TlbOutcome::L1Hit);
        assert_eq!(t.lookup(0x1f_ffff, Huge2M), TlbOutcome::L1Hit);
        assert_eq!(t.lookup(5 * M2 + 12345, Huge2M), TlbOutcome::L1Hit);
        // 4K page 1 is not covered by the 2M entry of page 0.
        assert_eq!(t.lookup(K4, Base4K), TlbOutcome::Miss);
    }

    #[test]
    fn size_without_l1_pool_goes_to_l2() {
        // 1G has no L1 pool, only an L2 one; 2M has no pool at all.
        let mut t = Tlb::new(&cfg(
            vec![pool(4, 4, &[Base4K])],
            vec![pool(16, 4, &[Base4K, Giant1G])],
        ));
        assert_eq!(t.lookup(1 << 30, Giant1G), TlbOutcome::Miss);
        assert_eq!(t.lookup((1 << 30) + 999, Giant1G), TlbOutcome::L2Hit);
        assert_eq!(t.lookup((1 << 30) + 999, Giant1G), TlbOutcome::L2Hit);
        assert_eq!(t.occupancy(), (0, 1));
        assert_eq!(t.lookup(0, Huge2M), TlbOutcome::Miss);
        assert_eq!(t.lookup(0, Huge2M), TlbOutcome::Miss);
        assert_eq!(t.occupancy(), (0, 1));
    }

    #[test]
    fn invalidation() {
        let mut t = Tlb::new(&broadwell());
        for p in 0..8 {
            t.lookup(p * K4, Base4K);
        }
        t.lookup(M2, Huge2M);
        t.lookup(1 << 30, Giant1G);
        // One translation, both levels.
        t.invalidate(3 * K4 + 5, Base4K);
        assert_eq!(t.probe(3 * K4, Base4K), TlbOutcome::Miss);
        assert_eq!(t.probe(2 * K4, Base4K), TlbOutcome::L1Hit);
        // Invalidating the 4K page at M2 leaves the 2M entry alone.
        t.invalidate(M2, Base4K);
        assert_eq!(t.probe(M2, Huge2M), TlbOutcome::L1Hit);
        // A range covering 4K pages 5 and 6 only.
        t.invalidate_range(5 * K4 + 100, K4);
        assert_eq!(t.probe(5 * K4, Base4K), TlbOutcome::Miss);
        assert_eq!(t.probe(6 * K4, Base4K), TlbOutcome::Miss);
        assert_eq!(t.probe(4 * K4, Base4K), TlbOutcome::L1Hit);
        assert_eq!(t.probe(7 * K4, Base4K), TlbOutcome::L1Hit);
        // One byte of the 2M page drops it (overlap, any size).
        t.invalidate_range(M2 + M2 - 1, 1);
        assert_eq!(t.probe(M2, Huge2M), TlbOutcome::Miss);
        assert_eq!(t.probe(1 << 30, Giant1G), TlbOutcome::L1Hit);
        // A large range (whole-pool path): everything below 2 GiB.
        t.invalidate_range(0, 2 << 30);
        assert_eq!(t.occupancy(), (0, 0));
        t.lookup(0, Base4K);
        t.flush();
        assert_eq!(t.occupancy(), (0, 0));
        // Overflowing ranges are clamped.
        t.lookup(u64::MAX, Base4K);
        t.invalidate_range(u64::MAX - 10, u64::MAX);
        assert_eq!(t.occupancy(), (0, 0));
    }

    #[test]
    fn repeated_lookup_after_invalidation_misses() {
        // `lookup` answers a repeat of the last key before routing; anything that drops
        // entries must end that, or a dropped translation would still "hit".
        let mut t = Tlb::new(&broadwell());
        assert_eq!(t.lookup(5 * K4, Base4K), TlbOutcome::Miss);
        assert_eq!(t.lookup(5 * K4 + 64, Base4K), TlbOutcome::L1Hit);
        t.invalidate(5 * K4, Base4K);
        assert_eq!(t.lookup(5 * K4, Base4K), TlbOutcome::Miss);
        t.invalidate_range(5 * K4, 1);
        assert_eq!(t.lookup(5 * K4, Base4K), TlbOutcome::Miss);
        t.flush();
        assert_eq!(t.lookup(5 * K4, Base4K), TlbOutcome::Miss);
        assert_eq!(t.lookup(5 * K4, Base4K), TlbOutcome::L1Hit);
        // a size with no L1 pool: a repeat is an L2 hit every time, never an L1 hit
        let mut t = Tlb::new(&cfg(
            vec![pool(4, 4, &[Base4K])],
            vec![pool(16, 4, &[Base4K, Huge2M])],
        ));
        assert_eq!(t.lookup(M2, Huge2M), TlbOutcome::Miss);
        assert_eq!(t.lookup(M2, Huge2M), TlbOutcome::L2Hit);
        assert_eq!(t.lookup(M2, Huge2M), TlbOutcome::L2Hit);
        // two L1 pools for one size (the general route): the repeat still hits L1
        let mut t = Tlb::new(&cfg(
            vec![pool(2, 2, &[Base4K]), pool(2, 2, &[Base4K])],
            vec![],
        ));
        assert_eq!(t.lookup(0, Base4K), TlbOutcome::Miss);
        assert_eq!(t.lookup(0, Base4K), TlbOutcome::L1Hit);
        t.invalidate(0, Base4K);
        assert_eq!(t.lookup(0, Base4K), TlbOutcome::Miss);
    }

    #[test]
    fn remove_range_keeps_lru_order() {
        // One set of 4 ways: fill 0,1,2,3 (MRU 3), drop 1 and 2 via the whole-pool path.
        let mut t = Tlb::new(&cfg(vec![pool(4, 4, &[Base4K])], vec![]));
        for p in 0..4 {
            t.lookup(p * K4, Base4K);
        }
        t.invalidate_range(K4, 2 * K4);
        assert_eq!(t.occupancy(), (2, 0));
        // Survivors: [3, 0]; two fills use the free ways, the third evicts 0 (LRU).
        t.lookup(10 * K4, Base4K);
        t.lookup(11 * K4, Base4K);
        t.lookup(12 * K4, Base4K);
        assert_eq!(t.probe(0, Base4K), TlbOutcome::Miss);
        assert_eq!(t.probe(3 * K4, Base4K), TlbOutcome::L1Hit);
    }

    /// One pool of [`ReferenceTlb`]: the sizes it covers, its sets (keys, most recent
    /// first), its ways.
    type ReferencePool = (Vec<PageSize>, Vec<Vec<u64>>, usize);

    /// A TLB as per-set LRU lists, for checking `Tlb` against.
    struct ReferenceTlb {
        /// Per level, its pools.
        levels: [Vec<ReferencePool>; 2],
    }

    impl ReferenceTlb {
        /// Pools of power-of-two geometry only (no rounding to model).
        fn new(c: &TlbConfig) -> Self {
            let level = |pools: &[TlbPool]| {
                pools
                    .iter()
                    .map(|p| {
                        let sets = (p.entries / p.ways) as usize;
                        assert!(
                            sets.is_power_of_two() && sets * p.ways as usize == p.entries as usize
                        );
                        (p.sizes.clone(), vec![Vec::new(); sets], p.ways as usize)
                    })
                    .collect()
            };
            ReferenceTlb {
                levels: [level(&c.l1), level(&c.l2)],
            }
        }

        /// Searches `level`'s pools for `size`; promotes on a hit.
        fn hit(&mut self, level: usize, vpn: u64, size: PageSize) -> bool {
            for (sizes, sets, _) in &mut self.levels[level] {
                if !sizes.contains(&size) {
                    continue;
                }
                let n = sets.len();
                let set = &mut sets[vpn as usize % n];
                if let Some(at) = set.iter().position(|&k| k == key_of(vpn, size)) {
                    let k = set.remove(at);
                    set.insert(0, k);
                    return true;
                }
            }
            false
        }

        /// Fills the first pool of `level` covering `size`.
        fn fill(&mut self, level: usize, vpn: u64, size: PageSize) {
            if let Some((_, sets, ways)) = self.levels[level]
                .iter_mut()
                .find(|(s, _, _)| s.contains(&size))
            {
                let n = sets.len();
                let set = &mut sets[vpn as usize % n];
                set.insert(0, key_of(vpn, size));
                set.truncate(*ways);
            }
        }

        fn lookup(&mut self, vaddr: u64, size: PageSize) -> TlbOutcome {
            let vpn = vaddr >> size.shift();
            if self.hit(0, vpn, size) {
                return TlbOutcome::L1Hit;
            }
            let out = if self.hit(1, vpn, size) {
                TlbOutcome::L2Hit
            } else {
                self.fill(1, vpn, size);
                TlbOutcome::Miss
            };
            self.fill(0, vpn, size);
            out
        }

        fn invalidate(&mut self, vaddr: u64, size: PageSize) {
            let key = key_of(vaddr >> size.shift(), size);
            for level in &mut self.levels {
                for (_, sets, _) in level.iter_mut() {
                    for set in sets.iter_mut() {
                        set.retain(|&k| k != key);
                    }
                }
            }
        }

        fn flush(&mut self) {
            for level in &mut self.levels {
                for (_, sets, _) in level.iter_mut() {
                    sets.iter_mut().for_each(Vec::clear);
                }
            }
        }
    }

    /// The lookups specialised per pair of set shapes (`Pair`: Bulldozer's 32-entry ring L1,
    /// the Intel 4-way L1s, K10's 48-way L1, each over an L2 of up to 16 ways) and the general
    /// one agree with LRU lists, through hits, fills, invalidations and flushes.
    #[test]
    fn lookups_match_reference_lru() {
        let bulldozer = cfg(
            vec![pool(32, 32, &[Base4K, Huge2M, Giant1G])],
            vec![pool(1024, 8, &[Base4K, Huge2M, Giant1G])],
        );
        let k10 = cfg(
            vec![pool(48, 48, &[Base4K, Huge2M, Giant1G])],
            vec![pool(512, 4, &[Base4K]), pool(128, 2, &[Huge2M])],
        );
        let broadwell_4k = cfg(
            vec![pool(64, 4, &[Base4K]), pool(32, 4, &[Huge2M])],
            vec![pool(1024, 8, &[Base4K, Huge2M])],
        );
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rng = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (name, c, want_pair) in [
            ("bulldozer", &bulldozer, Pair::Ring2Set1),
            ("k10", &k10, Pair::Set3Set1),
            ("broadwell", &broadwell_4k, Pair::Set1Set1),
        ] {
            let mut t = Tlb::new(c);
            assert_eq!(t.fast[Base4K.index()].pair, want_pair, "{name}");
            let mut r = ReferenceTlb::new(c);
            let mut seen = [0usize; 3];
            for step in 0..200_000 {
                let size = if rng() % 8 == 0 { Huge2M } else { Base4K };
                // pages from a window that drifts, so that sets fill, hit and evict
                let window = (step / 5000) as u64 * 64;
                let vaddr = ((window + rng() % 300) << size.shift()) + rng() % 4096;
                match rng() % 1000 {
                    0 => {
                        t.flush();
                        r.flush();
                    }
                    1..=9 => {
                        t.invalidate(vaddr, size);
                        r.invalidate(vaddr, size);
                    }
                    _ => {
                        let got = t.lookup(vaddr, size);
                        assert_eq!(got, r.lookup(vaddr, size), "{name}, step {step}");
                        seen[got as usize] += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&n| n > 1000), "{name}: {seen:?}");
        }
    }

    /// Throughput report, no assertion on time (tests never assert on wall time). To see it:
    /// `cargo test -p numalab-sim hw::tlb::tests::throughput_report -- --nocapture` (the
    /// workspace's test profile is optimised but keeps debug assertions and overflow checks, so a
    /// release build is faster). Best of 3 timed laps of 2 M lookups.
    #[test]
    fn throughput_report() {
        use std::time::Instant;
        let n = 2_000_000u64;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rng = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // K10-like: 48-entry fully associative L1 for all sizes; L2 512 × 4K 4-way, 128 × 2M
        // 2-way, 16 × 1G.
        let k10 = cfg(
            vec![pool(48, 48, &[Base4K, Huge2M, Giant1G])],
            vec![
                pool(512, 4, &[Base4K]),
                pool(128, 2, &[Huge2M]),
                pool(16, 16, &[Giant1G]),
            ],
        );
        let seq: Vec<u64> = (0..n).map(|i| (i * 8) % (64 << 20)).collect();
        let r64: Vec<u64> = (0..n).map(|_| rng() % (256 << 10)).collect();
        let r1k: Vec<u64> = (0..n).map(|_| rng() % (4 << 20)).collect();
        let r1g: Vec<u64> = (0..n).map(|_| rng() % (1 << 30)).collect();
        // Bulldozer (the 6272 preset): 32-entry fully associative L1, 1024-entry 8-way L2; NAS
        // CG class B's gathers sweep p's 147 pages in order, about 71 % of them per row, so
        // every new page misses L1 and hits L2.
        let bulldozer = cfg(
            vec![pool(32, 32, &[Base4K, Huge2M, Giant1G])],
            vec![pool(1024, 8, &[Base4K, Huge2M, Giant1G])],
        );
        let mut sweep = Vec::with_capacity(n as usize);
        while sweep.len() < n as usize {
            sweep.extend((0..147u64).filter(|_| rng() % 100 < 71).map(|p| p * 4096));
        }
        sweep.truncate(n as usize);
        let cases: [(&str, &TlbConfig, &[u64], PageSize); 8] = [
            (
                "bulldozer 4K, rows sweeping 147 pages (L1 misses, L2 hits)",
                &bulldozer,
                &sweep,
                Base4K,
            ),
            (
                "broadwell 4K, sequential 8-byte steps",
                &broadwell(),
                &seq,
                Base4K,
            ),
            (
                "broadwell 4K, random over 64 pages (L1 hits)",
                &broadwell(),
                &r64,
                Base4K,
            ),
            (
                "broadwell 4K, random over 1024 pages (STLB hits)",
                &broadwell(),
                &r1k,
                Base4K,
            ),
            (
                "broadwell 4K, random over 1 GiB (walks)",
                &broadwell(),
                &r1g,
                Base4K,
            ),
            (
                "broadwell 2M, random over 1 GiB (STLB hits)",
                &broadwell(),
                &r1g,
                Huge2M,
            ),
            ("k10 4K, sequential 8-byte steps", &k10, &seq, Base4K),
            ("k10 4K, random over 1024 pages", &k10, &r1k, Base4K),
        ];
        for (what, c, addrs, size) in cases {
            // One untimed lap first (warms up the arrays).
            let mut t = Tlb::new(c);
            let mut best = f64::INFINITY;
            let mut counts = [0u64; 3];
            for lap in 0..4 {
                counts = [0; 3];
                let start = Instant::now();
                for &a in addrs {
                    counts[t.lookup(a, size) as usize] += 1;
                }
                if lap > 0 {
                    best = best.min(start.elapsed().as_nanos() as f64 / addrs.len() as f64);
                }
            }
            let [l1, l2, miss] = counts.map(|c| c as f64 / n as f64);
            println!(
                "tlb {what}: {best:.2} ns/lookup (L1 hit {l1:.3}, L2 hit {l2:.3}, miss {miss:.3})"
            );
        }
    }
}
