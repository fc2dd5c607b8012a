//! Set-associative cache of 64-byte lines with true LRU replacement (private caches, LLCs),
//! and the set-array engine ([`WaySets`]) that the TLB pools share.
//!
//! This sits on the simulator's hottest path, and with 16 private caches and several LLCs the
//! simulated tag state is larger than the host's caches, so the layout is chosen to touch as
//! few host cache lines per access as possible. No allocation after construction;
//! power-of-two sets indexed by the key's low bits.
//!
//! Layout: each set is one 64-byte-aligned block of `set_words` words:
//!
//! * a header of `groups` × 16 one-byte tag fingerprints, then `groups` × 16 one-byte LRU
//!   ranks (`groups = ⌈ways / 16⌉`; up to 32 ways the header is 64 bytes: one host line);
//! * then `ways` `u64` tags: bits 0..55 the key, bits 55..63 the caller's metadata (the
//!   simulator stores the line's home node), bit 63 an owner bit (the cache's dirty bit).
//!
//! A lookup compares 16 fingerprints at once (SSE2) and checks the full tag only where one
//! matches (a false match costs one extra compare, 1 in 256 per way), so a hit reads the
//! header line and one tag line, and a miss the header line and the victim's tag line.
//!
//! Replacement is **true LRU** by rank: the ranks of a set are always a permutation of
//! `0..ways`, 0 the most recently used; empty ways hold the highest ranks, so the victim is
//! always the way of rank `ways - 1` (an empty way if there is one). Touching a way of rank
//! `r` increments every rank below `r` and sets it to 0, 16 ranks per SSE2 instruction.
//! Only the order of the lines matters to the results, never which way holds which line.
//! One fully associative set of 2^k ≥ 16 ways (the 32-entry L1 DTLB of the Bulldozer
//! presets) keeps its ranks in a *ring form* instead: the row holds slots, rank =
//! `(slot - head) mod ways`, and a miss only moves `head` (see `WaySets::ring`); the order,
//! hence every result, is the same.
//! Each array also remembers the last key it was asked for, so a run of accesses to one line
//! or page (streams) skips the search.
//!
//! No crate offers this (a fixed-geometry true-LRU set array with per-way metadata, dirty
//! bits and eviction reports), hence the hand-written structure.

/// Line size, bytes.
pub const LINE_BYTES: u64 = 64;

const DIRTY: u64 = 1 << 63;
/// Metadata byte position in a stored tag.
const META_SHIFT: u32 = 55;
const META_MASK: u64 = 0xff << META_SHIFT;
/// The bits of a tag that identify it.
const KEY_MASK: u64 = (1 << META_SHIFT) - 1;
/// Key bits of an empty way; no valid key equals them (keys are below `KEY_MASK`).
const EMPTY: u64 = KEY_MASK;

/// Fingerprints and ranks are handled this many at a time.
const CHUNK: usize = 16;
/// Most ways per set: ranks are bytes, and 0xff marks the padding lanes of a rank row.
pub(crate) const MAX_WAYS: usize = 255;
/// Rank of a padding lane (past the last way of a set).
const PAD_RANK: u8 = 0xff;

/// 64-byte-aligned storage unit (one host cache line).
#[repr(C, align(64))]
#[derive(Copy, Clone, Debug)]
struct Block([u64; 8]);

/// Fingerprint of a key: its top byte after a multiplicative hash (all key bits count).
#[inline(always)]
pub(crate) fn fingerprint(key: u64) -> u8 {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
}

/// The byte-row operations on 16 lanes, SSE2 on x86-64 (part of its baseline), scalar
/// elsewhere.
mod lanes {
    use super::CHUNK;

    /// Bit `i` set where `row[i] == v`.
    #[inline(always)]
    pub fn eq_mask(row: &[u8; CHUNK], v: u8) -> u32 {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::*;
            // SAFETY: SSE2 is part of the x86_64 baseline; the load reads the 16 bytes of `row`.
            unsafe {
                let x = _mm_loadu_si128(row.as_ptr().cast());
                _mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8(v as i8))) as u32
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let mut m = 0u32;
            for (i, &b) in row.iter().enumerate() {
                m |= ((b == v) as u32) << i;
            }
            m
        }
    }

    /// `b` where `mask` is all ones, `a` where it is zero.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn select(
        mask: std::arch::x86_64::__m128i,
        a: std::arch::x86_64::__m128i,
        b: std::arch::x86_64::__m128i,
    ) -> std::arch::x86_64::__m128i {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of the x86_64 baseline (register operations only).
        unsafe { _mm_or_si128(_mm_andnot_si128(mask, a), _mm_and_si128(mask, b)) }
    }

    /// [`eq_mask`] with a load the compiler may not merge with its neighbour's (a 16-byte
    /// load can take its value from the 16-byte store that `set_lane` left in the store
    /// buffer; a merged 32-byte load cannot and waits for the store to leave it).
    #[inline(always)]
    pub fn eq_mask_unmerged(row: &[u8; CHUNK], v: u8) -> u32 {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::*;
            // SAFETY: SSE2 is part of the x86_64 baseline; the load reads the 16 bytes of `row`.
            unsafe {
                let x = std::ptr::read_volatile(row.as_ptr().cast::<__m128i>());
                _mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8(v as i8))) as u32
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        eq_mask(row, v)
    }

    /// Adds 1 to every lane at or below `r`. Callers pass the rank of the way they then set
    /// to 0, so its own lane's increment is overwritten: the effect is "every lane below
    /// `r`" (none when `r == 0`) in three SIMD operations instead of five. Padding lanes
    /// (0xff) are never at or below a rank (ranks stay below 0xff).
    #[inline(always)]
    pub fn inc_upto(row: &mut [u8; CHUNK], r: u8) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::*;
            // SAFETY: SSE2 baseline; loads and stores the 16 bytes of `row`.
            unsafe {
                let x = _mm_loadu_si128(row.as_ptr().cast());
                // x <= r  <=>  saturating x - r == 0; subtracting the all-ones lanes adds 1
                let le = _mm_cmpeq_epi8(
                    _mm_subs_epu8(x, _mm_set1_epi8(r as i8)),
                    _mm_setzero_si128(),
                );
                _mm_storeu_si128(row.as_mut_ptr().cast(), _mm_sub_epi8(x, le));
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        for b in row.iter_mut() {
            *b += (*b <= r) as u8;
        }
    }

    /// Sets lane `l` to `v` by rewriting the whole row (no lane where `l >= 16`).
    #[inline(always)]
    pub fn set_lane(row: &mut [u8; CHUNK], l: u8, v: u8) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::*;
            // SAFETY: SSE2 baseline; loads and stores the 16 bytes of `row`.
            unsafe {
                let x = _mm_loadu_si128(row.as_ptr().cast());
                let iota = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
                let at = _mm_cmpeq_epi8(iota, _mm_set1_epi8(l as i8));
                let y = select(at, x, _mm_set1_epi8(v as i8));
                _mm_storeu_si128(row.as_mut_ptr().cast(), y);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        if let Some(b) = row.get_mut(l as usize) {
            *b = v;
        }
    }

    /// Ring form (see `WaySets::ring`): lanes hold slots, rank = (slot - h) & m. Makes the lane
    /// of slot `s` (rank `r`) slot `h` (rank 0) and moves every lane of rank below `r` one
    /// slot on (rank + 1); with `r == 0` nothing changes.
    #[inline(always)]
    pub fn ring_promote(row: &mut [u8; CHUNK], h: u8, r: u8, s: u8, m: u8) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::*;
            // SAFETY: SSE2 baseline; loads and stores the 16 bytes of `row`.
            unsafe {
                let x = _mm_loadu_si128(row.as_ptr().cast());
                let mm = _mm_set1_epi8(m as i8);
                let rel = _mm_and_si128(_mm_sub_epi8(x, _mm_set1_epi8(h as i8)), mm);
                // rel >= r  <=>  max(rel, r) == rel (unsigned)
                let ge = _mm_cmpeq_epi8(_mm_max_epu8(rel, _mm_set1_epi8(r as i8)), rel);
                let lt = _mm_andnot_si128(ge, _mm_set1_epi8(-1));
                let moved = _mm_and_si128(_mm_sub_epi8(x, lt), mm);
                let eq = _mm_cmpeq_epi8(x, _mm_set1_epi8(s as i8));
                let y = select(eq, moved, _mm_set1_epi8(h as i8));
                _mm_storeu_si128(row.as_mut_ptr().cast(), y);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        for b in row.iter_mut() {
            *b = if *b == s {
                h
            } else if b.wrapping_sub(h) & m < r {
                b.wrapping_add(1) & m
            } else {
                *b
            };
        }
    }

    /// Ring form: moves every lane of rank above `r` one slot back (rank - 1).
    #[inline(always)]
    pub fn ring_demote(row: &mut [u8; CHUNK], h: u8, r: u8, m: u8) {
        for b in row.iter_mut() {
            if b.wrapping_sub(h) & m > r {
                *b = b.wrapping_sub(1) & m;
            }
        }
    }

    /// Subtracts 1 from every lane above `r`, padding lanes (0xff) excepted.
    #[inline(always)]
    pub fn dec_above(row: &mut [u8; CHUNK], r: u8) {
        for b in row.iter_mut() {
            *b -= (*b > r && *b != super::PAD_RANK) as u8;
        }
    }
}

/// Result of [`WaySets::access`], packed in one word so that it stays in a register through
/// the hot path's many merging branches (as a struct it went through the stack): `HIT`, or
/// the replaced way's whole stored tag (key, metadata byte, owner bit; `EMPTY` key for an
/// empty way). No stored tag is all ones: an empty way is `EMPTY` with metadata 0.
#[derive(Copy, Clone, Debug)]
pub(crate) struct WayAccess(u64);

impl WayAccess {
    const HIT: WayAccess = WayAccess(u64::MAX);

    #[inline(always)]
    pub fn hit(self) -> bool {
        self.0 == u64::MAX
    }

    /// Miss only: the replaced way's tag without its metadata (key | owner bit; see
    /// [`WaySets::is_empty_tag`]).
    #[inline(always)]
    pub fn victim_tag(self) -> u64 {
        self.0 & !META_MASK
    }

    /// Miss only: the replaced way's metadata.
    #[inline(always)]
    pub fn victim_meta(self) -> u8 {
        ((self.0 & META_MASK) >> META_SHIFT) as u8
    }
}

/// A set-associative array of keys with per-way metadata and true LRU replacement: the
/// engine of [`SetAssocCache`] and of the TLB pools. Keys must be below 2^55 - 1; bit 63 of a
/// stored tag is free for the owner (the cache's dirty bit) and ignored by lookups.
#[derive(Clone, Debug)]
pub(crate) struct WaySets {
    /// `sets * set_words / 8` blocks; set `s` starts at word `s * set_words`.
    blocks: Box<[Block]>,
    set_words: usize,
    /// Chunks of 16 lanes in a fingerprint or rank row.
    groups: usize,
    set_mask: u64,
    /// Ring form of the LRU ranks, for one fully associative set of 16, 32 or 64 ways (the wide
    /// L1 DTLBs): the rank row holds each way's *slot*, its rank is `(slot - head) mod ways`.
    /// A miss replaces the way of rank `ways - 1`, the slot `head - 1`, and only moves `head`
    /// back by one: every other way ages by one without a store to the row (in a fully
    /// associative TLB that misses on most references, the rank rows were a chain of
    /// dependent loads and stores from one reference to the next). Same LRU order as ranks.
    ring: bool,
    head: u8,
    ways: usize,
    /// The key of the last access and its way: it is already the most recent of its set, so
    /// repeating it (streams, several references to one line or page) skips the search.
    /// `EMPTY` when unknown.
    last_key: u64,
    /// Word offset of the last access's tag (the repeat path needs no set arithmetic).
    last_word: usize,
    /// Bytes per set, and the byte offsets of a set's second, third and fourth host line
    /// (clamped to its last line): the prefetch needs no division and no branch.
    set_bytes: usize,
    prefetch_at: [usize; 3],
}

/// Largest power of two ≤ `x`, at least 1.
#[inline]
fn prev_power_of_two(x: u64) -> u64 {
    if x <= 1 {
        1
    } else {
        1 << (63 - x.leading_zeros())
    }
}

/// The three parts of one set: fingerprint row, rank row (as 16-lane chunks) and tags.
struct SetView<'a> {
    fps: &'a mut [[u8; CHUNK]],
    ranks: &'a mut [[u8; CHUNK]],
    tags: &'a mut [u64],
}

impl WaySets {
    /// `entries` ways in all, `ways` per set. Geometry: `entries` at least 1, `ways` clamped to
    /// `1..=entries` (`ways == entries` is fully associative), `sets = entries / ways` rounded
    /// down to a power of two (at least 1), then `ways = entries / sets` so that rounding the
    /// sets does not lose capacity. Power-of-two geometries are kept exactly. A set holds at
    /// most [`MAX_WAYS`] ways: wider requests get more sets (no preset comes close).
    pub(crate) fn new(entries: u64, ways: u64) -> Self {
        let (sets, ways) = Self::geometry(entries, ways);
        let ways = ways as usize;
        let groups = ways.div_ceil(CHUNK);
        // header: fingerprints and ranks, 2 × 16 bytes per group = 4 words per group
        let set_words = (4 * groups + ways).div_ceil(8) * 8;
        let mut a = WaySets {
            blocks: vec![Block([0; 8]); sets as usize * set_words / 8].into_boxed_slice(),
            set_words,
            groups,
            set_mask: sets - 1,
            // up to 64 ways: the ring's searches build one 64-bit lane mask
            ring: sets == 1 && ways.is_power_of_two() && (CHUNK..=4 * CHUNK).contains(&ways),
            head: 0,
            ways,
            last_key: EMPTY,
            last_word: 0,
            set_bytes: set_words * 8,
            prefetch_at: std::array::from_fn(|l| (l + 1).min(set_words / 8 - 1) * 64),
        };
        a.clear();
        a
    }

    /// (sets, ways) of [`Self::new`]'s geometry.
    pub(crate) fn geometry(entries: u64, ways: u64) -> (u64, u64) {
        let entries = entries.max(1);
        let ways = ways.clamp(1, entries);
        let mut sets = prev_power_of_two(entries / ways);
        while entries / sets > MAX_WAYS as u64 {
            sets *= 2;
        }
        (sets, entries / sets)
    }

    #[inline(always)]
    fn words(&mut self) -> &mut [u64] {
        let n = self.blocks.len() * 8;
        // SAFETY: `Block` is `repr(C)` around `[u64; 8]`, so the blocks are `n` contiguous words.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr().cast::<u64>(), n) }
    }

    #[inline(always)]
    fn words_ref(&self) -> &[u64] {
        let n = self.blocks.len() * 8;
        // SAFETY: as in `words`.
        unsafe { std::slice::from_raw_parts(self.blocks.as_ptr().cast::<u64>(), n) }
    }

    /// Set `set`, with `g` groups (a literal at the hot call sites, so loops unroll).
    #[inline(always)]
    fn view(&mut self, set: usize, g: usize) -> SetView<'_> {
        let (sw, w) = (self.set_words, self.ways);
        debug_assert!(set <= self.set_mask as usize && g == self.groups);
        // SAFETY: `set` is masked by `set_mask`, so its `sw` words lie inside `blocks`; a set
        // holds 4·g header words then `w` tags (`new` sized `sw` for that). The header's 32·g
        // bytes are viewed as 2·g rows of 16 bytes (u8 has no alignment requirement); the
        // three slices are disjoint and borrow `self` exclusively.
        unsafe {
            let base = self.blocks.as_mut_ptr().cast::<u64>().add(set * sw);
            let rows = base.cast::<[u8; CHUNK]>();
            SetView {
                fps: std::slice::from_raw_parts_mut(rows, g),
                ranks: std::slice::from_raw_parts_mut(rows.add(g), g),
                tags: std::slice::from_raw_parts_mut(base.add(4 * g), w),
            }
        }
    }

    /// Bit `16·c + l` set where lane `l` of row `c` equals `v`, for up to 4 rows (64 ways).
    /// One mask for the whole set, so a search branches on "found" rather than on which row
    /// (a branch the host mispredicts half the time in a 32-way set).
    #[inline(always)]
    fn lane_mask(rows: &[[u8; CHUNK]], v: u8) -> u64 {
        debug_assert!(rows.len() <= 4);
        let mut m = 0u64;
        for (c, row) in rows.iter().enumerate() {
            m |= (lanes::eq_mask(row, v) as u64) << (CHUNK * c);
        }
        m
    }

    /// The first way among the candidate lanes `m` (a fingerprint mask) whose tag holds
    /// `key`.
    #[inline(always)]
    fn first_holding(mut m: u64, tags: &[u64], key: u64) -> Option<usize> {
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            if i < tags.len() && tags[i] & KEY_MASK == key {
                return Some(i);
            }
            m &= m - 1;
        }
        None
    }

    /// Way of `set` holding `key`, if any.
    #[inline(always)]
    fn find_way(fps: &[[u8; CHUNK]], tags: &[u64], key: u64) -> Option<usize> {
        let fp = fingerprint(key);
        if fps.len() <= 4 {
            return Self::first_holding(Self::lane_mask(fps, fp), tags, key);
        }
        for (c, row) in fps.iter().enumerate() {
            let mut m = lanes::eq_mask(row, fp);
            while m != 0 {
                let i = c * CHUNK + m.trailing_zeros() as usize;
                if i < tags.len() && tags[i] & KEY_MASK == key {
                    return Some(i);
                }
                m &= m - 1;
            }
        }
        None
    }

    /// Makes way `i` the most recently used (without a branch on whether it already is: in
    /// a TLB set that branch is a coin toss for the host).
    #[inline(always)]
    fn touch(ranks: &mut [[u8; CHUNK]], i: usize) {
        let r = ranks[i / CHUNK][i % CHUNK];
        for row in ranks.iter_mut() {
            lanes::inc_upto(row, r);
        }
        // way i's own lane was raised too: set it last
        ranks[i / CHUNK][i % CHUNK] = 0;
    }

    /// The lane holding `v` in rows that hold it exactly once (ranks, ring slots).
    #[inline(always)]
    fn lane_of(rows: &[[u8; CHUNK]], v: u8) -> usize {
        if rows.len() <= 4 {
            let m = Self::lane_mask(rows, v);
            debug_assert!(m != 0, "rank rows are a permutation of 0..ways");
            return m.trailing_zeros() as usize;
        }
        for (c, row) in rows.iter().enumerate() {
            let m = lanes::eq_mask(row, v);
            if m != 0 {
                return c * CHUNK + m.trailing_zeros() as usize;
            }
        }
        unreachable!("rank rows are a permutation of 0..ways")
    }

    /// The way of rank `ways - 1`: the least recently used, or an empty way.
    #[inline(always)]
    fn victim(ranks: &[[u8; CHUNK]], ways: usize) -> usize {
        Self::lane_of(ranks, (ways - 1) as u8)
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.sets() * self.ways
    }

    #[inline(always)]
    pub(crate) fn ways(&self) -> usize {
        self.ways
    }

    #[inline(always)]
    pub(crate) fn sets(&self) -> usize {
        self.set_mask as usize + 1
    }

    /// Whether a victim tag from [`WayAccess`] or [`Self::drop_way`] is an empty way.
    #[inline(always)]
    pub(crate) fn is_empty_tag(tag: u64) -> bool {
        tag & KEY_MASK == EMPTY
    }

    #[inline(always)]
    fn tag_at(&self, idx: usize) -> u64 {
        let (set, way) = (idx / self.ways, idx % self.ways);
        self.words_ref()[set * self.set_words + 4 * self.groups + way]
    }

    pub(crate) fn valid(&self) -> usize {
        (0..self.len())
            .filter(|&i| !Self::is_empty_tag(self.tag_at(i)))
            .count()
    }

    #[inline(always)]
    fn set_of(&self, key: u64) -> usize {
        (key & self.set_mask) as usize
    }

    /// Asks the host to bring the lines `key`'s set is searched in (header and tags) into its
    /// caches ahead of an access; changes nothing.
    #[inline(always)]
    pub(crate) fn prefetch(&self, key: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let p = self
                .blocks
                .as_ptr()
                .cast::<u8>()
                .wrapping_add(self.set_of(key) * self.set_bytes);
            // The usual 1 to 4 lines, without branches: a set of fewer lines asks for its
            // last line again (free), wider sets only get their first four.
            // SAFETY: SSE is part of the x86_64 baseline; prefetching never faults.
            let at =
                |off: usize| unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off).cast()) };
            at(0);
            at(self.prefetch_at[0]);
            at(self.prefetch_at[1]);
            at(self.prefetch_at[2]);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = key;
    }

    /// Looks `key` up in set `key & (sets - 1)`. A hit makes the way most recently used and
    /// ORs `bits` (bit 63 only) into its tag. A miss replaces the LRU way (an empty one first)
    /// with `key | bits` and `meta`.
    #[inline(always)]
    pub(crate) fn access(&mut self, key: u64, bits: u64, meta: u8) -> WayAccess {
        debug_assert!(key < KEY_MASK, "key {key:#x} out of range");
        debug_assert!(bits & !DIRTY == 0);
        if key == self.last_key {
            if bits != 0 {
                let at = self.last_word;
                self.words()[at] |= bits;
            }
            return WayAccess::HIT;
        }
        if self.ring {
            return match self.groups {
                1 => self.access_ring::<1>(key, bits, meta),
                2 => self.access_ring::<2>(key, bits, meta),
                _ => self.access_ring_any(key, bits, meta),
            };
        }
        match self.groups {
            1 => self.access_set::<1>(key, bits, meta),
            2 => self.access_set::<2>(key, bits, meta),
            _ => self.access_set_any(key, bits, meta),
        }
    }

    #[inline(always)]
    fn access_set<const G: usize>(&mut self, key: u64, bits: u64, meta: u8) -> WayAccess {
        self.access_in(key, bits, meta, G)
    }

    #[inline(always)]
    fn access_ring<const G: usize>(&mut self, key: u64, bits: u64, meta: u8) -> WayAccess {
        self.ring_in(key, bits, meta, G)
    }

    #[inline(never)]
    fn access_ring_any(&mut self, key: u64, bits: u64, meta: u8) -> WayAccess {
        self.ring_in(key, bits, meta, self.groups)
    }

    /// `access_in` for the ring form (one set).
    #[inline(always)]
    fn ring_in(&mut self, key: u64, bits: u64, meta: u8, g: usize) -> WayAccess {
        let tags_at = 4 * g;
        let m = (self.ways - 1) as u8;
        let h = self.head;
        self.last_key = key;
        let fp = fingerprint(key);
        let v = self.view(0, g);
        if let Some(i) = Self::first_holding(Self::ring_lane_mask(v.fps, fp), v.tags, key) {
            v.tags[i] |= bits;
            Self::ring_touch(v.ranks, i, h, m);
            self.last_word = tags_at + i;
            return WayAccess::HIT;
        }
        // the victim has rank ways - 1, slot head - 1; moving head there makes it rank 0
        // and ages every other way by one
        let nh = h.wrapping_sub(1) & m;
        let i = Self::ring_way_of_slot(v.ranks, nh);
        let old = std::mem::replace(&mut v.tags[i], key | bits | (meta as u64) << META_SHIFT);
        Self::ring_set_fp(v.fps, i, fp);
        self.head = nh;
        self.last_word = tags_at + i;
        WayAccess(old)
    }

    /// The ring form's [`Self::lane_mask`]: each row loaded on its own (see
    /// `lanes::eq_mask_unmerged`). The ring's rows are stored whole, 16 bytes at a time (a
    /// hit's promotion, [`Self::ring_set_fp`]), and the next lookup of the same single set
    /// loads them: a store is forwarded only to a load it covers, so the AVX2 build's
    /// merged 32-byte load (or a load after a one-byte store) waited for the stores to
    /// leave the store buffer, which chained every L1 DTLB miss to the one before it (a
    /// cyclic sweep over 147 pages: 10 -> 7.5 ns per lookup).
    #[inline(always)]
    fn ring_lane_mask(rows: &[[u8; CHUNK]], v: u8) -> u64 {
        let mut m = 0u64;
        for (c, row) in rows.iter().enumerate() {
            m |= (lanes::eq_mask_unmerged(row, v) as u64) << (CHUNK * c);
        }
        m
    }

    /// Ring form: makes way `i` the most recent (slot `h`, rank 0); `m` is `ways - 1`.
    #[inline(always)]
    fn ring_touch(ranks: &mut [[u8; CHUNK]], i: usize, h: u8, m: u8) {
        let s = ranks[i / CHUNK][i % CHUNK];
        let r = s.wrapping_sub(h) & m;
        for row in ranks.iter_mut() {
            lanes::ring_promote(row, h, r, s, m);
        }
    }

    /// Ring form: the way in slot `s`.
    #[inline(always)]
    fn ring_way_of_slot(ranks: &[[u8; CHUNK]], s: u8) -> usize {
        let m = Self::ring_lane_mask(ranks, s);
        debug_assert!(m != 0, "slot rows are a permutation of 0..ways");
        m.trailing_zeros() as usize
    }

    /// Ring form: way `i`'s fingerprint, its rows rewritten whole (see
    /// [`Self::ring_lane_mask`]).
    #[inline(always)]
    fn ring_set_fp(fps: &mut [[u8; CHUNK]], i: usize, fp: u8) {
        for (c, row) in fps.iter_mut().enumerate() {
            // rows other than i's get a lane number of 16 or more: unchanged
            lanes::set_lane(row, i.wrapping_sub(c * CHUNK) as u8, fp);
        }
    }

    #[inline(never)]
    fn access_set_any(&mut self, key: u64, bits: u64, meta: u8) -> WayAccess {
        self.access_in(key, bits, meta, self.groups)
    }

    #[inline(always)]
    fn access_in(&mut self, key: u64, bits: u64, meta: u8, g: usize) -> WayAccess {
        let set = self.set_of(key);
        let w = self.ways;
        // word of the set's first tag: the repeat path's `last_word` needs no division
        let tags_at = set * self.set_words + 4 * g;
        self.last_key = key;
        let v = self.view(set, g);
        if let Some(i) = Self::find_way(v.fps, v.tags, key) {
            v.tags[i] |= bits;
            Self::touch(v.ranks, i);
            self.last_word = tags_at + i;
            return WayAccess::HIT;
        }
        let i = Self::victim(v.ranks, w);
        let old = std::mem::replace(&mut v.tags[i], key | bits | (meta as u64) << META_SHIFT);
        v.fps[i / CHUNK][i % CHUNK] = fingerprint(key);
        Self::touch(v.ranks, i);
        self.last_word = tags_at + i;
        WayAccess(old)
    }

    /// The shape of the sets, for callers that dispatch on it once (the TLB's lookup):
    /// (ring form, groups of 16 lanes).
    #[inline]
    pub(crate) fn shape(&self) -> (bool, usize) {
        (self.ring, self.groups)
    }

    /// [`Self::access`] for a TLB pool whose shape the caller knows (`RING`, `G` groups: see
    /// [`Self::shape`]), with the key's [`fingerprint`] already worked out (a TLB miss
    /// searches two pools for one key) and no owner bit or metadata (TLB entries carry
    /// none). Skips the repeat check: the caller has
    /// already answered a repeat of its last key, and where the key is the pool's last one
    /// anyway (an earlier lookup that went past this pool), searching finds it as the most
    /// recent way of its set and promoting it changes nothing. Returns whether it hit.
    #[inline(always)]
    pub(crate) fn tlb_access<const RING: bool, const G: usize>(
        &mut self,
        key: u64,
        fp: u8,
    ) -> bool {
        debug_assert!(self.ring == RING && self.groups == G);
        debug_assert!(key < KEY_MASK && fp == fingerprint(key));
        let set = if RING { 0 } else { self.set_of(key) };
        let w = self.ways;
        let tags_at = set * self.set_words + 4 * G;
        let h = self.head;
        self.last_key = key;
        let v = self.view(set, G);
        let m = if RING {
            Self::ring_lane_mask(v.fps, fp)
        } else {
            Self::lane_mask(v.fps, fp)
        };
        if let Some(i) = Self::first_holding(m, v.tags, key) {
            if RING {
                Self::ring_touch(v.ranks, i, h, (w - 1) as u8);
            } else {
                Self::touch(v.ranks, i);
            }
            self.last_word = tags_at + i;
            return true;
        }
        // as in `ring_in`: the ring's victim is slot head - 1, which becomes the head
        let nh = h.wrapping_sub(1) & (w - 1) as u8;
        let i = if RING {
            Self::ring_way_of_slot(v.ranks, nh)
        } else {
            Self::victim(v.ranks, w)
        };
        v.tags[i] = key;
        if RING {
            Self::ring_set_fp(v.fps, i, fp);
            self.head = nh;
        } else {
            v.fps[i / CHUNK][i % CHUNK] = fp;
            Self::touch(v.ranks, i);
        }
        self.last_word = tags_at + i;
        false
    }

    /// Set `set` read-only: its fingerprint rows, rank rows and tags.
    #[inline(always)]
    fn view_ref(&self, set: usize) -> (&[[u8; CHUNK]], &[[u8; CHUNK]], &[u64]) {
        let (sw, g, w) = (self.set_words, self.groups, self.ways);
        let words = &self.words_ref()[set * sw..(set + 1) * sw];
        let (hdr, rest) = words.split_at(4 * g);
        // SAFETY: as in `view`: the header's 4·g words are 2·g rows of 16 bytes.
        let rows = unsafe { std::slice::from_raw_parts(hdr.as_ptr().cast::<[u8; CHUNK]>(), 2 * g) };
        let (fps, ranks) = rows.split_at(g);
        (fps, ranks, &rest[..w])
    }

    /// Index of the way holding `key`; changes nothing.
    #[inline]
    pub(crate) fn find(&self, key: u64) -> Option<usize> {
        if key >= KEY_MASK {
            return None;
        }
        let set = self.set_of(key);
        let (fps, _, tags) = self.view_ref(set);
        Self::find_way(fps, tags, key).map(|i| set * self.ways + i)
    }

    /// The stored tag (owner bit included) of the way that an access to `key` would replace
    /// now; `EMPTY` where `key` is present, the victim is an empty way, or the set is in the
    /// ring form. Changes nothing: a hint for prefetching, which later accesses may outdate.
    #[inline(always)]
    pub(crate) fn victim_of(&self, key: u64) -> u64 {
        if self.ring || key >= KEY_MASK {
            return EMPTY;
        }
        let (fps, ranks, tags) = self.view_ref(self.set_of(key));
        if Self::find_way(fps, tags, key).is_some() {
            return EMPTY;
        }
        tags[Self::victim(ranks, self.ways)]
    }

    /// Frees way `idx` (it becomes the set's next victim); returns its tag (without the
    /// metadata) and its metadata.
    #[inline]
    pub(crate) fn drop_way(&mut self, idx: usize) -> (u64, u8) {
        let (set, i, w, g) = (idx / self.ways, idx % self.ways, self.ways, self.groups);
        let (ring, h) = (self.ring, self.head);
        let v = self.view(set, g);
        let old = std::mem::replace(&mut v.tags[i], EMPTY);
        if ring {
            let m = (w - 1) as u8;
            let r = v.ranks[i / CHUNK][i % CHUNK].wrapping_sub(h) & m;
            for row in v.ranks.iter_mut() {
                lanes::ring_demote(row, h, r, m);
            }
            v.ranks[i / CHUNK][i % CHUNK] = h.wrapping_sub(1) & m;
            if old & KEY_MASK == self.last_key {
                self.last_key = EMPTY;
            }
            return (old & !META_MASK, ((old & META_MASK) >> META_SHIFT) as u8);
        }
        let r = v.ranks[i / CHUNK][i % CHUNK];
        for row in v.ranks.iter_mut() {
            lanes::dec_above(row, r);
        }
        v.ranks[i / CHUNK][i % CHUNK] = (w - 1) as u8;
        if old & KEY_MASK == self.last_key {
            // the repeat path must not find a dropped key
            self.last_key = EMPTY;
        }
        (old & !META_MASK, ((old & META_MASK) >> META_SHIFT) as u8)
    }

    /// Frees every way whose key satisfies `drop`; calls `dropped` with each freed tag
    /// (without metadata).
    pub(crate) fn drop_where(
        &mut self,
        mut drop: impl FnMut(u64) -> bool,
        mut dropped: impl FnMut(u64),
    ) {
        for i in 0..self.len() {
            let t = self.tag_at(i);
            if !Self::is_empty_tag(t) && drop(t & KEY_MASK) {
                let (t, _) = self.drop_way(i);
                dropped(t);
            }
        }
    }

    /// Empties every set: ranks 0..ways in way order, padding lanes marked.
    pub(crate) fn clear(&mut self) {
        let (w, g) = (self.ways, self.groups);
        for set in 0..self.sets() {
            let v = self.view(set, g);
            v.tags.fill(EMPTY);
            for (c, (fr, rr)) in v.fps.iter_mut().zip(v.ranks.iter_mut()).enumerate() {
                fr.fill(0);
                for (l, r) in rr.iter_mut().enumerate() {
                    let way = c * CHUNK + l;
                    *r = if way < w { way as u8 } else { PAD_RANK };
                }
            }
        }
        self.head = 0;
        self.last_key = EMPTY;
    }

    /// The ranks of set `set` in way order (tests).
    #[cfg(test)]
    fn ranks_of(&mut self, set: usize) -> Vec<u8> {
        let (w, g, ring, h) = (self.ways, self.groups, self.ring, self.head);
        let v = self.view(set, g);
        let m = (w - 1) as u8;
        v.ranks
            .iter()
            .flatten()
            .take(w)
            .map(|&x| if ring { x.wrapping_sub(h) & m } else { x })
            .collect()
    }
}

/// A line that left the cache (replaced or invalidated).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Evicted {
    /// Line number (address >> 6).
    pub line: u64,
    /// Written since it was filled: the caller owes a write-back.
    pub dirty: bool,
    /// The metadata stored with the line when it was filled.
    pub meta: u8,
}

/// Result of [`SetAssocCache::access`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    Hit,
    /// The line was filled; `evicted` is the line it replaced, if its way was valid.
    Miss {
        evicted: Option<Evicted>,
    },
}

/// What [`SetAssocCache::invalidate_range`] removed.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeInvalidation {
    /// Valid lines removed.
    pub lines: u64,
    /// Of which dirty (write-backs the caller owes).
    pub dirty: u64,
}

/// A set-associative cache of 64-byte lines with true LRU replacement.
#[derive(Clone, Debug)]
pub struct SetAssocCache {
    sets: WaySets,
}

impl SetAssocCache {
    /// A cache of `bytes` (64-byte lines), `ways`-associative.
    ///
    /// Geometry: `lines = bytes / 64` (at least 1), `ways` clamped to `1..=lines`
    /// (`ways == lines` is fully associative), `sets = lines / ways` rounded down to a power of
    /// two (at least 1). When that rounding drops sets (a non-power-of-two size such as 12 MiB
    /// 16-way: 12 288 sets), the ways are raised to `lines / sets` (here 8192 sets of 24 ways)
    /// so that the capacity stays `bytes`, rather than losing a third of it; [`Self::ways`]
    /// reports the effective associativity. Power-of-two geometries are kept exactly. At most
    /// 255 ways per set (see `WaySets::new`).
    pub fn new(bytes: u64, ways: u32) -> Self {
        SetAssocCache {
            sets: WaySets::new(bytes / LINE_BYTES, ways as u64),
        }
    }

    /// (sets, ways) of a cache of `bytes`, `ways`-associative (see [`Self::new`]).
    pub fn geometry(bytes: u64, ways: u32) -> (u64, u64) {
        WaySets::geometry(bytes / LINE_BYTES, ways as u64)
    }

    /// Capacity in lines (`sets * ways`).
    #[inline]
    pub fn lines(&self) -> usize {
        self.sets.len()
    }

    /// Effective associativity (see [`Self::new`]).
    #[inline]
    pub fn ways(&self) -> u32 {
        self.sets.ways() as u32
    }

    /// Number of sets (a power of two).
    #[inline]
    pub fn sets(&self) -> usize {
        self.sets.sets()
    }

    /// Number of valid lines (walks the whole cache; for tests and reports).
    pub fn valid_lines(&self) -> usize {
        self.sets.valid()
    }

    /// Looks `line` (address >> 6) up. A hit makes it most recently used and, if `write`,
    /// dirty; the stored metadata is kept. A miss fills it (dirty if `write`) with `meta`,
    /// replacing the least recently used way of its set, and reports the replaced line.
    /// `line` must be below 2^55 - 1 (addresses below 2^61).
    #[inline(always)]
    pub fn access(&mut self, line: u64, write: bool, meta: u8) -> CacheOutcome {
        let a = self.sets.access(line, (write as u64) << 63, meta);
        if a.hit() {
            CacheOutcome::Hit
        } else if WaySets::is_empty_tag(a.victim_tag()) {
            CacheOutcome::Miss { evicted: None }
        } else {
            let t = a.victim_tag();
            CacheOutcome::Miss {
                evicted: Some(Evicted {
                    line: t & KEY_MASK,
                    dirty: t & DIRTY != 0,
                    meta: a.victim_meta(),
                }),
            }
        }
    }

    /// Starts loading the host lines that an access to `line` will read; changes nothing.
    #[inline(always)]
    pub fn prefetch(&self, line: u64) {
        self.sets.prefetch(line)
    }

    /// The dirty line that an access to `line` would write back if it came now; changes
    /// nothing (a prefetch hint: later accesses may change the set first).
    #[inline(always)]
    pub fn dirty_victim_of(&self, line: u64) -> Option<u64> {
        let t = self.sets.victim_of(line);
        (t & DIRTY != 0 && !WaySets::is_empty_tag(t)).then_some(t & KEY_MASK)
    }

    /// Whether `line` is cached; changes nothing (not even recency).
    #[inline]
    pub fn probe(&self, line: u64) -> bool {
        self.sets.find(line).is_some()
    }

    /// Removes `line` if cached and returns it (with its dirty bit and metadata).
    #[inline]
    pub fn invalidate(&mut self, line: u64) -> Option<Evicted> {
        let i = self.sets.find(line)?;
        let (t, meta) = self.sets.drop_way(i);
        Some(Evicted {
            line,
            dirty: t & DIRTY != 0,
            meta,
        })
    }

    /// Removes every cached line in `first_line .. first_line + n_lines` (e.g. the lines of a
    /// migrated page) and says how many were removed and how many of them were dirty.
    ///
    /// Costs `min(n_lines, sets) · ways`: a range with fewer lines than the cache has sets is
    /// invalidated line by line, a larger one (a 2 MiB or 1 GiB page against a small cache)
    /// by one pass over the cache.
    pub fn invalidate_range(&mut self, first_line: u64, n_lines: u64) -> RangeInvalidation {
        let mut out = RangeInvalidation::default();
        if n_lines == 0 {
            return out;
        }
        if n_lines < self.sets.sets() as u64 {
            for line in first_line..first_line.saturating_add(n_lines) {
                if let Some(e) = self.invalidate(line) {
                    out.lines += 1;
                    out.dirty += e.dirty as u64;
                }
            }
            return out;
        }
        let last = first_line.saturating_add(n_lines - 1); // inclusive, no overflow
        self.sets.drop_where(
            |line| (first_line..=last).contains(&line),
            |t| {
                out.lines += 1;
                out.dirty += (t & DIRTY != 0) as u64;
            },
        );
        out
    }

    /// Empties the cache (dirty lines are dropped, not reported).
    pub fn clear(&mut self) {
        self.sets.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn miss(evicted: Option<Evicted>) -> CacheOutcome {
        CacheOutcome::Miss { evicted }
    }

    #[test]
    fn geometry() {
        // 32 KiB 8-way: 512 lines, 64 sets.
        let c = SetAssocCache::new(32 << 10, 8);
        assert_eq!((c.lines(), c.ways(), c.sets()), (512, 8, 64));
        // 12 MiB 16-way: 196 608 lines, 12 288 sets -> 8192 sets of 24 ways (capacity kept).
        let c = SetAssocCache::new(12 << 20, 16);
        assert_eq!((c.lines(), c.ways(), c.sets()), (196_608, 24, 8192));
        // Tiny and degenerate inputs still give a working cache.
        let c = SetAssocCache::new(64, 1);
        assert_eq!((c.lines(), c.ways(), c.sets()), (1, 1, 1));
        let c = SetAssocCache::new(0, 0);
        assert_eq!(c.lines(), 1);
        // More ways than lines: fully associative.
        let c = SetAssocCache::new(256, 16);
        assert_eq!((c.lines(), c.ways(), c.sets()), (4, 4, 1));
    }

    #[test]
    fn lru_order_in_a_two_way_set() {
        // 4 lines, 2 ways -> 2 sets; even lines go to set 0.
        let mut c = SetAssocCache::new(4 * 64, 2);
        assert_eq!(c.sets(), 2);
        assert_eq!(c.access(0, false, 0), miss(None));
        assert_eq!(c.access(2, false, 0), miss(None));
        assert_eq!(c.access(1, false, 0), miss(None)); // set 1, no effect on set 0
                                                       // Touch 0: now 2 is the LRU of set 0.
        assert_eq!(c.access(0, false, 0), CacheOutcome::Hit);
        assert_eq!(
            c.access(4, false, 0),
            miss(Some(Evicted {
                line: 2,
                dirty: false,
                meta: 0
            }))
        );
        // Set 0 = [4, 0]; 0 is LRU now.
        assert_eq!(
            c.access(6, false, 0),
            miss(Some(Evicted {
                line: 0,
                dirty: false,
                meta: 0
            }))
        );
        assert!(c.probe(4) && c.probe(6) && c.probe(1));
        assert!(!c.probe(0) && !c.probe(2));
        // probe changes nothing: 4 is still the LRU.
        assert!(c.probe(4));
        assert_eq!(
            c.access(8, false, 0),
            miss(Some(Evicted {
                line: 4,
                dirty: false,
                meta: 0
            }))
        );
    }

    #[test]
    fn dirty_eviction_reports_meta() {
        let mut c = SetAssocCache::new(2 * 64, 2); // one set, 2 ways
        assert_eq!(c.access(10, true, 3), miss(None)); // filled dirty, home node 3
        assert_eq!(c.access(11, false, 5), miss(None));
        assert_eq!(c.access(11, true, 9), CacheOutcome::Hit); // write hit dirties; meta kept
        assert_eq!(
            c.access(12, false, 1),
            miss(Some(Evicted {
                line: 10,
                dirty: true,
                meta: 3
            }))
        );
        assert_eq!(
            c.access(13, false, 1),
            miss(Some(Evicted {
                line: 11,
                dirty: true,
                meta: 5
            }))
        );
        assert_eq!(
            c.invalidate(12),
            Some(Evicted {
                line: 12,
                dirty: false,
                meta: 1
            })
        );
        assert_eq!(c.invalidate(12), None);
        // The invalidated way is the one refilled: no eviction.
        assert_eq!(c.access(14, false, 0), miss(None));
        assert_eq!(
            c.access(15, false, 0),
            miss(Some(Evicted {
                line: 13,
                dirty: false,
                meta: 1
            }))
        );
    }

    #[test]
    fn fully_associative() {
        // 8 lines, 8 ways: any 8 lines fit regardless of their low bits.
        let mut c = SetAssocCache::new(8 * 64, 8);
        assert_eq!(c.sets(), 1);
        for i in 0..8 {
            assert_eq!(c.access(i * 1024, false, i as u8), miss(None));
        }
        for i in 0..8 {
            assert_eq!(c.access(i * 1024, false, 0), CacheOutcome::Hit);
        }
        // Touched in order 0..8, so 7 is the MRU and 0 the LRU.
        assert_eq!(
            c.access(99, false, 0),
            miss(Some(Evicted {
                line: 0,
                dirty: false,
                meta: 0
            }))
        );
        // A cyclic sweep over 9 lines misses every time under LRU.
        let mut c = SetAssocCache::new(8 * 64, 8);
        let mut hits = 0;
        for _ in 0..5 {
            for l in 0..9 {
                hits += (c.access(l, false, 0) == CacheOutcome::Hit) as u32;
            }
        }
        assert_eq!(hits, 0);
    }

    #[test]
    fn invalidate_range_both_paths() {
        // 64 KiB 4-way: 1024 lines, 256 sets.
        for n_sets_probe in [false, true] {
            let mut c = SetAssocCache::new(64 << 10, 4);
            for l in 0..1024u64 {
                c.access(l, l % 3 == 0, 0);
            }
            assert_eq!(c.valid_lines(), 1024);
            let (first, n) = if n_sets_probe {
                (100, 50)
            } else {
                (100, 100_000)
            };
            let r = c.invalidate_range(first, n);
            let last = (first + n).min(1024);
            let removed = last - first;
            let dirty = (first..last).filter(|l| l % 3 == 0).count() as u64;
            assert_eq!(
                r,
                RangeInvalidation {
                    lines: removed,
                    dirty
                }
            );
            assert_eq!(c.valid_lines() as u64, 1024 - removed);
            for l in 0..1024 {
                assert_eq!(c.probe(l), !(first..last).contains(&l), "line {l}");
            }
            // LRU order of the survivors is kept: set 0 held [768, 512, 256, 0] (MRU first);
            // after the large invalidation (100..) only 0 survives there, so 3 fills evict
            // nothing and the 4th evicts 0.
            if !n_sets_probe {
                for k in 1..=3 {
                    assert_eq!(c.access(k * 256 + 2048, false, 0), miss(None));
                }
                assert_eq!(
                    c.access(4096, false, 0),
                    miss(Some(Evicted {
                        line: 0,
                        dirty: true,
                        meta: 0
                    }))
                );
            }
        }
        // Ranges reaching the top of the line space do not overflow.
        let mut c = SetAssocCache::new(64 << 10, 4);
        c.access(5, false, 0);
        assert_eq!(c.invalidate_range(u64::MAX >> 8, u64::MAX).lines, 0);
        assert_eq!(c.invalidate_range(0, u64::MAX).lines, 1);
        c.access(5, false, 0);
        c.clear();
        assert_eq!(c.valid_lines(), 0);
    }

    #[test]
    fn wide_set_true_lru() {
        // One fully associative set of 16 ways (fingerprint search path).
        let mut c = SetAssocCache::new(16 * 64, 16);
        assert_eq!((c.sets(), c.ways()), (1, 16));
        for l in 0..16u64 {
            assert_eq!(c.access(l * 1000, false, l as u8), miss(None));
        }
        // Touch in a scrambled order; the misses must then evict in exactly that order.
        let order: Vec<u64> = (0..16u64).map(|i| (i * 7) % 16).collect();
        for &l in &order {
            assert_eq!(c.access(l * 1000, false, 0), CacheOutcome::Hit);
        }
        for (k, &l) in order.iter().enumerate() {
            let new = 100_000 + k as u64;
            assert_eq!(
                c.access(new, false, 0),
                miss(Some(Evicted {
                    line: l * 1000,
                    dirty: false,
                    meta: l as u8
                }))
            );
        }
    }

    #[test]
    fn fingerprint_collisions_are_resolved() {
        // 32-way fully associative; fill it with keys sharing one fingerprint.
        let fp0 = fingerprint(1);
        let same: Vec<u64> = (1..).filter(|&k| fingerprint(k) == fp0).take(32).collect();
        let mut c = SetAssocCache::new(32 * 64, 32);
        for &k in &same {
            assert_eq!(c.access(k, false, 0), miss(None));
        }
        for &k in &same {
            assert!(c.probe(k));
            assert_eq!(c.access(k, false, 0), CacheOutcome::Hit);
        }
        assert!(!c.probe(same[31] + 1));
        assert_eq!(c.invalidate(same[5]).map(|e| e.line), Some(same[5]));
        assert!(!c.probe(same[5]) && c.probe(same[6]));
    }

    #[test]
    fn ranks_stay_a_permutation() {
        // One set of 24 ways (two rank chunks): after any mix of fills, hits and
        // invalidations the ranks are a permutation of 0..24 with the empty ways on top.
        let mut c = SetAssocCache::new(24 * 64, 24);
        assert_eq!((c.sets(), c.ways()), (1, 24));
        let mut x = 12345u64;
        for step in 0..5000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let line = x % 40;
            if step % 7 == 3 {
                c.invalidate(line);
            } else {
                c.access(line, step % 3 == 0, 0);
            }
            let mut r = c.sets.ranks_of(0);
            let valid = c.valid_lines();
            let empty_ranks_ok = (0..24).all(|i| {
                let t = c.sets.tag_at(i);
                WaySets::is_empty_tag(t) == (r[i] as usize >= valid)
            });
            assert!(
                empty_ranks_ok,
                "step {step}: empty ways must hold the top ranks"
            );
            r.sort_unstable();
            assert_eq!(r, (0..24).collect::<Vec<u8>>(), "step {step}");
        }
    }

    #[test]
    fn dirty_victim_of_predicts_the_next_dirty_eviction() {
        // Before every access, the prediction must name exactly the dirty line that the
        // access then evicts (None for hits, empty ways and clean victims), in 1-, 2- and
        // 3-group sets; the ring form (one fully associative set) never predicts.
        for (lines, ways) in [(64u64, 4u32), (256, 16), (384, 24), (768, 48)] {
            let mut c = SetAssocCache::new(lines * 64, ways);
            let (mut x, mut predicted) = (7u64 + lines, 0);
            for step in 0..20_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let line = x % (3 * lines);
                let want = c.dirty_victim_of(line);
                let got = match c.access(line, step % 3 != 0, 0) {
                    CacheOutcome::Miss {
                        evicted: Some(e), ..
                    } if e.dirty => Some(e.line),
                    _ => None,
                };
                assert_eq!(want, got, "{lines} lines {ways}-way, step {step}");
                predicted += want.is_some() as u32;
            }
            assert!(
                predicted > 1000,
                "the walk evicted few dirty lines: {predicted}"
            );
        }
        let mut ring = SetAssocCache::new(32 * 64, 32);
        for line in 0..40 {
            ring.access(line, true, 0);
        }
        assert_eq!(ring.dirty_victim_of(1000), None);
    }

    #[test]
    fn ring_sets_match_a_reference_lru() {
        // One fully associative set of 2^k >= 16 ways uses the ring form; it must behave as
        // true LRU (a reference list, most recent first) under fills, hits and invalidations.
        for ways in [16u64, 32, 64] {
            let mut c = SetAssocCache::new(ways * 64, ways as u32);
            assert!(c.sets.ring && c.sets() == 1);
            let mut lru: Vec<(u64, bool)> = Vec::new();
            let mut x = 99u64 + ways;
            for step in 0..20_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let line = x % (ways + ways / 2);
                if step % 11 == 5 {
                    let got = c.invalidate(line);
                    let want = lru.iter().position(|e| e.0 == line).map(|p| lru.remove(p));
                    assert_eq!(got.map(|e| (e.line, e.dirty)), want, "step {step}");
                    continue;
                }
                let write = step % 3 == 0;
                let got = c.access(line, write, 0);
                let want = match lru.iter().position(|e| e.0 == line) {
                    Some(p) => {
                        let (l, d) = lru.remove(p);
                        lru.insert(0, (l, d || write));
                        CacheOutcome::Hit
                    }
                    None => {
                        let ev = if lru.len() == ways as usize {
                            lru.pop()
                        } else {
                            None
                        };
                        lru.insert(0, (line, write));
                        miss(ev.map(|(l, d)| Evicted {
                            line: l,
                            dirty: d,
                            meta: 0,
                        }))
                    }
                };
                assert_eq!(got, want, "{ways} ways, step {step}");
                let mut r = c.sets.ranks_of(0);
                r.sort_unstable();
                assert_eq!(r, (0..ways as u8).collect::<Vec<u8>>(), "step {step}");
            }
            c.clear();
            assert_eq!(c.valid_lines(), 0);
        }
    }

    #[test]
    fn widest_sets_are_split() {
        // A 300-line fully associative request exceeds MAX_WAYS: 2 sets of 150 ways.
        let c = SetAssocCache::new(300 * 64, 300);
        assert_eq!((c.sets(), c.ways()), (2, 150));
        let mut c = SetAssocCache::new(255 * 64, 255);
        assert_eq!((c.sets(), c.ways()), (1, 255));
        for l in 0..255u64 {
            assert_eq!(c.access(l * 3, false, 0), miss(None));
        }
        assert_eq!(
            c.access(1, false, 0),
            miss(Some(Evicted {
                line: 0,
                dirty: false,
                meta: 0
            }))
        );
    }

    #[test]
    fn two_chunk_sets_true_lru() {
        // 2 sets of 32 ways (two rank chunks); even lines go to set 0.
        let mut c = SetAssocCache::new(64 * 64, 32);
        assert_eq!((c.sets(), c.ways()), (2, 32));
        for k in 0..32u64 {
            assert_eq!(c.access(2 * k, k & 1 == 0, k as u8), miss(None));
            assert_eq!(c.access(2 * k + 1, false, 0), miss(None));
        }
        // Scrambled touch order in set 0; evictions must follow it exactly.
        let order: Vec<u64> = (0..32u64).map(|i| (i * 13) % 32).collect();
        for &k in &order {
            assert_eq!(c.access(2 * k, false, 0), CacheOutcome::Hit);
        }
        for (j, &k) in order.iter().take(8).enumerate() {
            let want = Evicted {
                line: 2 * k,
                dirty: k & 1 == 0,
                meta: k as u8,
            };
            assert_eq!(c.access(1000 + 2 * j as u64, false, 0), miss(Some(want)));
        }
        // Set 1 was untouched by all this: line 1 is its LRU.
        assert_eq!(
            c.access(999, false, 0),
            miss(Some(Evicted {
                line: 1,
                dirty: false,
                meta: 0
            }))
        );
        // An invalidated way is refilled first, without eviction.
        let k = order[20];
        assert!(c.invalidate(2 * k).is_some());
        assert_eq!(c.access(5000, false, 0), miss(None));
        assert_eq!(
            c.access(5002, false, 0),
            miss(Some(Evicted {
                line: 2 * order[8],
                dirty: order[8] & 1 == 0,
                meta: order[8] as u8
            }))
        );
        // A range over everything (cache-walk path), then refills evict nothing.
        let r = c.invalidate_range(0, 1 << 20);
        assert_eq!(r.lines, 64);
        assert_eq!(c.valid_lines(), 0);
        for l in 0..64 {
            assert_eq!(c.access(l, false, 0), miss(None));
        }
        c.clear();
        assert_eq!(c.valid_lines(), 0);
        for l in 0..64 {
            assert_eq!(c.access(l + 64, false, 0), miss(None));
        }
        assert_eq!(
            c.access(128, false, 0),
            miss(Some(Evicted {
                line: 64,
                dirty: false,
                meta: 0
            }))
        );
    }

    /// Throughput report, no assertion on time (tests never assert on wall time). To see it:
    /// `cargo test -p numalab-sim hw::cache::tests::throughput_report -- --nocapture` (the
    /// workspace's test profile is optimised but keeps debug assertions and overflow checks, so a
    /// release build is faster). Best of 3 timed laps of 2 M accesses.
    #[test]
    fn throughput_report() {
        use std::time::Instant;
        let n = 2_000_000u64;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rng = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let random = |span_lines: u64, rng: &mut dyn FnMut() -> u64| -> Vec<u64> {
            (0..n).map(|_| rng() % span_lines).collect()
        };
        let cases: [(&str, u64, u32, Vec<u64>); 4] = [
            (
                "1 MiB 16-way, random over 512 KiB (hits)",
                1 << 20,
                16,
                random(8192, &mut rng),
            ),
            (
                "1 MiB 16-way, streaming, 8 accesses per line",
                1 << 20,
                16,
                (0..n).map(|i| i >> 3).collect(),
            ),
            (
                "256 KiB 8-way, random over 4 MiB (mostly misses)",
                256 << 10,
                8,
                random(1 << 16, &mut rng),
            ),
            (
                "32 MiB 16-way, random over 256 MiB (mostly misses)",
                32 << 20,
                16,
                random(4 << 20, &mut rng),
            ),
        ];
        for (what, bytes, ways, lines) in &cases {
            // One untimed lap first: it also faults in the arrays' host pages.
            let mut c = SetAssocCache::new(*bytes, *ways);
            let mut best = f64::INFINITY;
            let mut hits = 0u64;
            for lap in 0..4 {
                hits = 0;
                let t = Instant::now();
                for &l in lines {
                    hits += (c.access(l, l & 7 == 0, 1) == CacheOutcome::Hit) as u64;
                }
                if lap > 0 {
                    best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
                }
            }
            println!(
                "cache {what}: {best:.2} ns/access, hit rate {:.3}",
                hits as f64 / n as f64
            );
        }
    }
}
