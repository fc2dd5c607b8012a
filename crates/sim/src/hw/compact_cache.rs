//! The private caches' compact layout: a set of up to 16 ways in one 64-byte host line.
//!
//! [`SetAssocCache`]'s sets are a header of fingerprints and ranks plus one `u64` tag per way,
//! so a 16-way set spans three host lines and a hit reads two of them. Here a set is 16 `u32`
//! lanes, `tag << 5 | dirty << 4 | rank`, compared all at once by the AVX2 or AVX-512 engine
//! build ([`super::host_isa`]): a hit reads one host line, and a 2 MiB 16-way private cache
//! takes 128 KiB of host memory instead of 384 (16 of them no longer crowd the host's L2 out
//! between turns). CG class B on the 6272: 9 % less host time (docs/PERFORMANCE.md, ninth round).
//!
//! * **tag**: the line number without its set-index bits, 27 bits. Keys whose tag does not fit
//!   store the escape tag and their whole key in `big`, read only when such a key is searched
//!   or evicted (a slow path: the engine numbers page-walk lines just above the data so that
//!   they fit, `PtLines` in engine.rs). Data lines fit up to 2^(33 + set bits)
//!   bytes of address space.
//! * **rank**: true LRU exactly as in [`SetAssocCache`] (0 most recent, a permutation of
//!   `0..ways`, empty ways ranked last); lanes past `ways` are padding, rank 15, never
//!   matched or chosen. The same accesses give the same hits, misses and victims as the wide
//!   layout (the differential test below), so results do not depend on the layout.
//! * the home node (the metadata byte) lives in `meta`: written on a fill, read only when a
//!   dirty line is evicted.
//!
//! The baseline build keeps the wide layout: with SSE2's four 128-bit operations per compare
//! the compact one was slower there (fifth round).

use super::cache::{CacheOutcome, Evicted, SetAssocCache, MAX_WAYS};
use super::host_isa::Isa;

const RANK_MASK: u32 = 15;
const DIRTY_LANE: u32 = 1 << 4;
const TAG_SHIFT: u32 = 5;
/// Tag of an empty way or a padding lane: never searched for.
const EMPTY_TAG: u32 = (1 << 27) - 1;
/// Tag of a way whose key is in `big`.
const ESC_TAG: u32 = (1 << 27) - 2;
/// Ways the compact layout holds at most.
pub(crate) const COMPACT_MAX_WAYS: u64 = 16;

/// One set: 16 lanes in one host line.
#[repr(C, align(64))]
#[derive(Copy, Clone, Debug)]
struct Set16([u32; 16]);

/// A set-associative cache of 64-byte lines with true LRU replacement, up to 16 ways, one
/// host line per set. Same geometry and behaviour as [`SetAssocCache`].
#[derive(Clone, Debug)]
pub(crate) struct CompactCache {
    sets: Box<[Set16]>,
    /// Per way (`set * 16 + lane`): the metadata byte stored by the fill.
    meta: Box<[u8]>,
    /// Per way: the whole key of an escape-tagged way (otherwise unused, and never touched).
    big: Box<[u64]>,
    set_bits: u32,
    set_mask: u64,
    ways: u32,
    /// As in `WaySets`: the last key accessed is the most recent of its set, so repeating it
    /// (several references to one line) skips the search. `u64::MAX` when unknown.
    last_key: u64,
    /// Its lane, as `set * 16 + lane`.
    last_lane: usize,
}

impl CompactCache {
    /// A cache of `bytes`, `ways`-associative, with the geometry of [`SetAssocCache::new`];
    /// `None` where that geometry has more than 16 ways per set.
    pub(crate) fn new(bytes: u64, ways: u32) -> Option<Self> {
        let (sets, ways) = SetAssocCache::geometry(bytes, ways);
        if ways > COMPACT_MAX_WAYS {
            return None;
        }
        debug_assert!(ways <= MAX_WAYS as u64 && sets.is_power_of_two());
        let n = sets as usize;
        let mut c = CompactCache {
            sets: vec![Set16([0; 16]); n].into_boxed_slice(),
            meta: vec![0; n * 16].into_boxed_slice(),
            // zeroed allocation: its pages are only committed where an escape key lands
            big: vec![0; n * 16].into_boxed_slice(),
            set_bits: sets.trailing_zeros(),
            set_mask: sets - 1,
            ways: ways as u32,
            last_key: u64::MAX,
            last_lane: 0,
        };
        c.clear();
        Some(c)
    }

    /// Empties the cache (dirty lines are dropped, not reported).
    pub(crate) fn clear(&mut self) {
        let ways = self.ways;
        for s in self.sets.iter_mut() {
            for (l, lane) in (0u32..).zip(s.0.iter_mut()) {
                let rank = if l < ways { l } else { RANK_MASK };
                *lane = EMPTY_TAG << TAG_SHIFT | rank;
            }
        }
        self.last_key = u64::MAX;
    }

    /// Capacity in lines.
    #[cfg(test)]
    pub(crate) fn lines(&self) -> usize {
        self.sets.len() * self.ways as usize
    }

    /// Starts loading the host line that an access to `line` reads; changes nothing.
    #[inline(always)]
    pub(crate) fn prefetch(&self, line: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let p = self
                .sets
                .as_ptr()
                .wrapping_add((line & self.set_mask) as usize);
            // SAFETY: SSE is part of the x86_64 baseline; prefetching never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }

    /// The lane tag of `key`: its bits above the set index, or the escape tag.
    #[inline(always)]
    fn tag_of(&self, key: u64) -> u32 {
        let t = key >> self.set_bits;
        if t < ESC_TAG as u64 {
            t as u32
        } else {
            ESC_TAG
        }
    }

    /// The lane of set `set` holding `key`, given the lanes `m` whose tag is `tag_of(key)`: a
    /// tag that fits identifies the key by itself (at most one lane holds it).
    #[inline(always)]
    fn find(&self, set: usize, tag: u32, m: u32, key: u64) -> Option<usize> {
        if tag != ESC_TAG {
            return (m != 0).then(|| m.trailing_zeros() as usize);
        }
        self.find_escaped(set, m, key)
    }

    #[cold]
    #[inline(never)]
    fn find_escaped(&self, set: usize, mut m: u32, key: u64) -> Option<usize> {
        while m != 0 {
            let l = m.trailing_zeros() as usize;
            if self.big[set * 16 + l] == key {
                return Some(l);
            }
            m &= m - 1;
        }
        None
    }

    /// The line held by lane `l` of set `set`, whose lane value is `v` (not empty).
    #[inline(always)]
    fn line_of(&self, set: usize, l: usize, v: u32) -> u64 {
        let t = v >> TAG_SHIFT;
        if t == ESC_TAG {
            self.big[set * 16 + l]
        } else {
            (t as u64) << self.set_bits | set as u64
        }
    }

    /// As [`SetAssocCache::access`]: a hit makes `line` the most recent and, if `write`, dirty;
    /// a miss fills it (dirty if `write`) with `meta` over the least recently used way and
    /// reports the line it replaced.
    #[inline(always)]
    pub(crate) fn access<I: Isa>(
        &mut self,
        isa: I,
        line: u64,
        write: bool,
        meta: u8,
    ) -> CacheOutcome {
        let wbit = (write as u32) << 4;
        if line == self.last_key {
            let at = self.last_lane;
            self.sets[at / 16].0[at % 16] |= wbit;
            return CacheOutcome::Hit;
        }
        self.last_key = line;
        let set = (line & self.set_mask) as usize;
        let tag = self.tag_of(line);
        let m = isa.eq_tag(&self.sets[set].0, tag);
        if let Some(l) = self.find(set, tag, m, line) {
            let s = &mut self.sets[set].0;
            let v = s[l];
            isa.touch(s, l, v & RANK_MASK, (v & !RANK_MASK) | wbit);
            self.last_lane = set * 16 + l;
            return CacheOutcome::Hit;
        }
        let s = &mut self.sets[set].0;
        let l = isa.lane_of_rank(s, self.ways - 1);
        let old = s[l];
        isa.touch(s, l, self.ways - 1, tag << TAG_SHIFT | wbit);
        let at = set * 16 + l;
        self.last_lane = at;
        // (an `if`, not `bool::then`: LLVM left that closure out of line in the engine loop)
        let evicted = if old >> TAG_SHIFT == EMPTY_TAG {
            None
        } else {
            Some(Evicted {
                line: self.line_of(set, l, old),
                dirty: old & DIRTY_LANE != 0,
                meta: self.meta[at],
            })
        };
        if tag == ESC_TAG {
            self.big[at] = line;
        }
        self.meta[at] = meta;
        CacheOutcome::Miss { evicted }
    }

    /// As [`SetAssocCache::dirty_victim_of`]: the dirty line an access to `line` would evict
    /// now; changes nothing.
    #[inline(always)]
    pub(crate) fn dirty_victim_of<I: Isa>(&self, isa: I, line: u64) -> Option<u64> {
        let set = (line & self.set_mask) as usize;
        let tag = self.tag_of(line);
        let s = &self.sets[set].0;
        if self.find(set, tag, isa.eq_tag(s, tag), line).is_some() {
            return None;
        }
        let l = isa.lane_of_rank(s, self.ways - 1);
        let v = s[l];
        if v & DIRTY_LANE != 0 && v >> TAG_SHIFT != EMPTY_TAG {
            Some(self.line_of(set, l, v))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::host_isa::{Avx2, Avx512, Baseline, HostIsa};
    use crate::hw::private_cache::PrivateCache;

    /// xorshift64*: a fixed, seedable stream of keys (no crate needed for a test stream).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    /// Runs the same accesses through a compact and a wide cache and checks every outcome and
    /// every dirty-victim prediction: hot lines, a scattered tail, repeats and escape keys.
    fn differential<I: Isa>(isa: I, bytes: u64, ways: u32, seed: u64) {
        let mut c = CompactCache::new(bytes, ways).expect("at most 16 ways");
        let mut w = SetAssocCache::new(bytes, ways);
        assert_eq!(c.lines(), w.lines(), "{bytes} {ways}");
        let lines = w.lines() as u64;
        let mut rng = Rng(seed | 1);
        let mut last = 0u64;
        for step in 0..40_000u32 {
            let r = rng.next();
            let line = match r % 16 {
                // repeat the last line
                0 => last,
                // escape keys: page-walk lines and the top of the key space
                1 => (1 << 53) + (r >> 8) % (lines * 2),
                2 => (1u64 << 55) - 2 - (r >> 8) % 64,
                // the largest tags that still fit, beside the escape tag
                3 => ((ESC_TAG as u64 - 1 - (r >> 8) % 3) << c.set_bits) | ((r >> 20) % 8),
                // a hot set of lines about twice the capacity
                4..=11 => (1 << 26) + (r >> 8) % (lines * 2),
                _ => (r >> 8) % (1 << 40),
            };
            last = line;
            let write = r >> 60 & 1 == 1;
            let meta = (r >> 50) as u8;
            // the prediction is exact here (nothing comes between it and the access); the
            // wide layout gives none for its ring form (one set of 16 ways)
            let predicted = c.dirty_victim_of(isa, line);
            if let Some(p) = w.dirty_victim_of(line) {
                assert_eq!(predicted, Some(p), "step {step} line {line:#x}");
            }
            let out = c.access(isa, line, write, meta);
            assert_eq!(
                out,
                w.access(line, write, meta),
                "step {step} line {line:#x}, {bytes} B {ways}-way"
            );
            let evicted_dirty = match out {
                CacheOutcome::Miss {
                    evicted: Some(e), ..
                } if e.dirty => Some(e.line),
                _ => None,
            };
            assert_eq!(predicted, evicted_dirty, "step {step} line {line:#x}");
            if step == 30_000 {
                c.clear();
                w.clear();
            }
        }
    }

    fn every_shape<I: Isa>(isa: I) {
        for (bytes, ways) in [
            (2 << 20, 16),  // the 6272's private L2: 2048 sets of 16
            (256 << 10, 8), // Intel's 256 KiB 8-way L2
            (1 << 20, 16),
            (48 << 10, 12), // 64 sets of 12: padding lanes
            (24 << 10, 3),  // 3 ways: a non-power-of-two set
            (4 << 10, 1),   // direct mapped
            (16 * 64, 16),  // one fully associative set
        ] {
            differential(isa, bytes, ways, bytes ^ ways as u64);
        }
    }

    #[test]
    fn compact_layout_matches_the_wide_one_in_every_build() {
        every_shape(Baseline);
        match Avx2::new() {
            Some(t) => every_shape(t),
            None => eprintln!("host without AVX2: that build's lanes are not tested here"),
        }
        match Avx512::new() {
            Some(t) => every_shape(t),
            None => eprintln!("host without AVX-512F: that build's lanes are not tested here"),
        }
    }

    #[test]
    fn geometry_and_layout_choice() {
        // 12 MiB 16-way becomes 24-way sets (see SetAssocCache::new): too wide to be compact
        assert!(CompactCache::new(12 << 20, 16).is_none());
        assert_eq!(CompactCache::new(2 << 20, 16).unwrap().lines(), 32768);
        assert!(!PrivateCache::new(2 << 20, 16, HostIsa::Baseline).is_compact());
        assert!(PrivateCache::new(2 << 20, 16, HostIsa::Avx2).is_compact());
        assert!(!PrivateCache::new(1280 << 10, 20, HostIsa::Avx512).is_compact());
    }

    #[test]
    fn escape_keys_keep_their_whole_key() {
        // one set of 2 ways: two page-walk keys that differ only above bit 40 both stay
        let mut c = CompactCache::new(2 * 64, 2).unwrap();
        let (a, b) = ((1u64 << 53) + 5, (1u64 << 53) + (1 << 41) + 5);
        assert_eq!(
            c.access(Baseline, a, true, 7),
            CacheOutcome::Miss { evicted: None }
        );
        assert_eq!(
            c.access(Baseline, b, false, 1),
            CacheOutcome::Miss { evicted: None }
        );
        assert_eq!(c.access(Baseline, a, false, 0), CacheOutcome::Hit);
        assert_eq!(c.dirty_victim_of(Baseline, 3), None, "b is clean");
        assert_eq!(c.access(Baseline, b, false, 0), CacheOutcome::Hit);
        assert_eq!(c.dirty_victim_of(Baseline, 3), Some(a));
        assert_eq!(
            c.access(Baseline, 3, false, 2),
            CacheOutcome::Miss {
                evicted: Some(Evicted {
                    line: a,
                    dirty: true,
                    meta: 7
                })
            }
        );
    }
}
