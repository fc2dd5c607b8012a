//! Set-associative cache of 64-byte lines with true LRU replacement (private caches, LLCs),
//! and the set-array engine ([`WaySets`]) that the TLB pools share.
//!
//! This sits on the simulator's hottest path, so it is flat arrays and nothing else: no
//! allocation after construction, power-of-two sets indexed by the key's low bits.
//!
//! Layout, per way: a `u64` tag (for the cache, the line number with bit 63 as the dirty bit;
//! a line number is an address >> 6 and stays below 2^63 - 1), a `u8` of caller metadata (the
//! simulator stores the line's home node) and a `u32` age stamp; per set, a row of one-byte tag
//! fingerprints. Replacement is **true LRU** by stamps: every access writes the array's running
//! clock into the way it touches, and a miss replaces the way with the smallest stamp (empty
//! ways have stamp 0 and go first; wide sets find the oldest way four stamps at a time). When
//! the clock reaches 2^31, the stamps of each set are renumbered by rank (order kept), once per
//! 2^31 accesses. Sets wider than 24 ways (large fully associative TLBs) keep true LRU as a
//! doubly linked list per set instead, so that a miss finds its victim without a scan.
//!
//! Search: sets of up to 4 ways compare all their tags without branches; wider sets compare
//! 16 fingerprints at once (SSE2) and check the full tag only where a fingerprint matches (a
//! false match costs one extra compare, 1 in 256 per way). The common associativities (2, 4,
//! 8, 12, 16, 20, 24) get code specialised for their way count. Each array also remembers the last key
//! it was asked for, so a run of accesses to one line or page (streams) skips the search.

/// Line size, bytes.
pub const LINE_BYTES: u64 = 64;

const DIRTY: u64 = 1 << 63;
/// The bits of a tag that identify it (the cache's dirty bit excluded).
const KEY_MASK: u64 = !DIRTY;
/// Tag of an empty way; no key equals its low 63 bits.
const EMPTY: u64 = u64::MAX;

/// Runs `$body` with `$w` bound to `$ways`, as a literal for the common associativities, so
/// that the set operations inlined into `$body` are unrolled for them; any other value takes
/// the generic path.
macro_rules! dispatch_ways {
    ($ways:expr, |$w:ident| $body:expr) => {
        match $ways {
            2 => {
                let $w: usize = 2;
                $body
            }
            4 => {
                let $w: usize = 4;
                $body
            }
            8 => {
                let $w: usize = 8;
                $body
            }
            12 => {
                let $w: usize = 12;
                $body
            }
            16 => {
                let $w: usize = 16;
                $body
            }
            20 => {
                let $w: usize = 20;
                $body
            }
            24 => {
                let $w: usize = 24;
                $body
            }
            other => {
                let $w: usize = other;
                $body
            }
        }
    };
}

/// Sets up to this many ways compare their tags directly (branch-free), without fingerprints.
const DIRECT_MAX_WAYS: usize = 4;
/// Fingerprints are compared this many at a time; a set's row is padded to a multiple of it.
const FP_CHUNK: usize = 16;

/// Bytes of a fingerprint row for `ways` ways.
#[inline(always)]
const fn fp_stride(ways: usize) -> usize {
    ways.div_ceil(FP_CHUNK) * FP_CHUNK
}

/// Fingerprint of a key: its top byte after a multiplicative hash (all key bits count).
#[inline(always)]
fn fingerprint(key: u64) -> u8 {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
}

/// Bit `i` set where `chunk[i] == fp`.
#[inline(always)]
fn match16(chunk: &[u8; FP_CHUNK], fp: u8) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is part of the x86_64 baseline; the load reads the 16 bytes of `chunk`.
        unsafe {
            let v = _mm_loadu_si128(chunk.as_ptr().cast());
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(fp as i8))) as u32
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut m = 0u32;
        for (i, &b) in chunk.iter().enumerate() {
            m |= ((b == fp) as u32) << i;
        }
        m
    }
}

/// Way of one set holding `key` (`tags[i] & KEY_MASK == key`), if any; tags within a set are
/// distinct. `fps` is the set's fingerprint row.
#[inline(always)]
fn find_in_set(fps: &[u8], tags: &[u64], key: u64) -> Option<usize> {
    let w = tags.len();
    if w <= DIRECT_MAX_WAYS {
        let mut m = 0u32;
        for (i, &t) in tags.iter().enumerate() {
            m |= ((t & KEY_MASK == key) as u32) << i;
        }
        return if m != 0 {
            Some(m.trailing_zeros() as usize)
        } else {
            None
        };
    }
    let fp = fingerprint(key);
    for (c, chunk) in fps[..fp_stride(w)].chunks_exact(FP_CHUNK).enumerate() {
        let mut m = match16(chunk.try_into().unwrap(), fp);
        while m != 0 {
            let i = c * FP_CHUNK + m.trailing_zeros() as usize;
            if i < w && tags[i] & KEY_MASK == key {
                return Some(i);
            }
            m &= m - 1;
        }
    }
    None
}

/// The least recently used way of one set: the smallest stamp (an empty way, stamp 0, if
/// there is one).
#[inline(always)]
fn lru_way(stamps: &[u32]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if stamps.len() >= 8 {
        return lru_way_sse2(stamps);
    }
    let mut best = 0;
    let mut best_stamp = stamps[0];
    for (i, &s) in stamps.iter().enumerate().skip(1) {
        let less = s < best_stamp;
        best = if less { i } else { best };
        best_stamp = if less { s } else { best_stamp };
    }
    best
}

/// [`lru_way`] four ways at a time: per lane, the smallest stamp seen and its way. Stamps stay
/// below 2^31 (see `STAMP_LIMIT`), so SSE2's signed 32-bit compare orders them.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lru_way_sse2(stamps: &[u32]) -> usize {
    use std::arch::x86_64::*;
    let chunks = stamps.chunks_exact(4);
    let tail = chunks.remainder();
    // SAFETY: SSE2 is part of the x86_64 baseline; each load reads one 4-stamp chunk.
    let (mut best, mut best_stamp) = unsafe {
        let mut min = _mm_set1_epi32(i32::MAX);
        let mut arg = _mm_setzero_si128();
        let mut idx = _mm_setr_epi32(0, 1, 2, 3);
        let four = _mm_set1_epi32(4);
        for c in chunks {
            let v = _mm_loadu_si128(c.as_ptr().cast());
            let lt = _mm_cmplt_epi32(v, min);
            min = _mm_or_si128(_mm_and_si128(lt, v), _mm_andnot_si128(lt, min));
            arg = _mm_or_si128(_mm_and_si128(lt, idx), _mm_andnot_si128(lt, arg));
            idx = _mm_add_epi32(idx, four);
        }
        let mut m = [0u32; 4];
        let mut a = [0u32; 4];
        _mm_storeu_si128(m.as_mut_ptr().cast(), min);
        _mm_storeu_si128(a.as_mut_ptr().cast(), arg);
        let mut best = a[0] as usize;
        let mut best_stamp = m[0];
        for l in 1..4 {
            let less = m[l] < best_stamp;
            best = if less { a[l] as usize } else { best };
            best_stamp = if less { m[l] } else { best_stamp };
        }
        (best, best_stamp)
    };
    let base = stamps.len() - tail.len();
    for (i, &s) in tail.iter().enumerate() {
        let less = s < best_stamp;
        best = if less { base + i } else { best };
        best_stamp = if less { s } else { best_stamp };
    }
    best
}

/// Sets wider than this keep recency in a linked list instead of stamps (list mode).
const STAMP_MAX_WAYS: usize = 24;

/// Stamps are renumbered before the clock reaches this (so they fit a signed 32-bit lane).
const STAMP_LIMIT: u32 = i32::MAX as u32;

/// Largest power of two ≤ `x`, at least 1.
#[inline]
fn prev_power_of_two(x: u64) -> u64 {
    if x <= 1 {
        1
    } else {
        1 << (63 - x.leading_zeros())
    }
}

/// Result of [`WaySets::access`]: the way used and, on a miss, what it held before.
#[derive(Copy, Clone, Debug)]
pub(crate) struct WayAccess {
    pub hit: bool,
    /// Index of the way (into the whole array).
    pub idx: usize,
    /// Miss only: the replaced way's tag (`EMPTY` if it was free) and metadata.
    pub victim_tag: u64,
    pub victim_meta: u8,
}

/// A set-associative array of `u64` keys with per-way metadata and true LRU replacement: the
/// engine of [`SetAssocCache`] and of the TLB pools. Keys must be below 2^63 - 1; bit 63 of a
/// stored tag is free for the owner (the cache's dirty bit) and ignored by lookups.
#[derive(Clone, Debug)]
pub(crate) struct WaySets {
    /// `sets * ways` tags, set-major (`EMPTY` or key | owner bit 63).
    tags: Box<[u64]>,
    /// Fingerprint of each way's key, `fp_stride(ways)` bytes per set (stale where the way is
    /// empty: the tag check rejects those). Unused up to `DIRECT_MAX_WAYS` ways.
    fps: Box<[u8]>,
    /// Metadata of each way, parallel to `tags`.
    meta: Box<[u8]>,
    /// Age stamp of each way (0 = empty), parallel to `tags`; empty in list mode.
    stamps: Box<[u32]>,
    /// List mode (sets wider than `STAMP_MAX_WAYS`): recency is a doubly linked list per set,
    /// most recent first, so the victim is found in O(1) rather than by scanning the stamps.
    /// `next`/`prev` hold way numbers within the set; `head` (MRU) and `tail` (LRU) are per
    /// set. Empty ways are kept at the tail. All four are empty in stamp mode.
    list: bool,
    next: Box<[u16]>,
    prev: Box<[u16]>,
    head: Box<[u16]>,
    tail: Box<[u16]>,
    set_mask: u64,
    ways: usize,
    /// Next stamp; greater than every stamp in use (renumbered before it reaches
    /// `STAMP_LIMIT`).
    clock: u32,
    /// The key of the last access and its way: it already has the newest stamp, so repeating
    /// it (streams, several references to one line or page) skips the search. `EMPTY` when
    /// unknown.
    last_key: u64,
    last_idx: usize,
}

impl WaySets {
    /// `entries` ways in all, `ways` per set. Geometry: `entries` at least 1, `ways` clamped to
    /// `1..=entries` (`ways == entries` is fully associative), `sets = entries / ways` rounded
    /// down to a power of two (at least 1), then `ways = entries / sets` so that rounding the
    /// sets does not lose capacity. Power-of-two geometries are kept exactly.
    pub(crate) fn new(entries: u64, ways: u64) -> Self {
        let entries = entries.max(1);
        let ways = ways.clamp(1, entries);
        let sets = prev_power_of_two(entries / ways);
        let ways = (entries / sets) as usize;
        let n = sets as usize * ways;
        let fp_bytes = if ways > DIRECT_MAX_WAYS {
            sets as usize * fp_stride(ways)
        } else {
            0
        };
        let list = ways > STAMP_MAX_WAYS && ways <= 1 << 16;
        let (n_stamps, n_links, n_ends) = if list {
            (0, n, sets as usize)
        } else {
            (n, 0, 0)
        };
        let mut a = WaySets {
            tags: vec![EMPTY; n].into_boxed_slice(),
            fps: vec![0u8; fp_bytes].into_boxed_slice(),
            meta: vec![0u8; n].into_boxed_slice(),
            stamps: vec![0u32; n_stamps].into_boxed_slice(),
            list,
            next: vec![0u16; n_links].into_boxed_slice(),
            prev: vec![0u16; n_links].into_boxed_slice(),
            head: vec![0u16; n_ends].into_boxed_slice(),
            tail: vec![0u16; n_ends].into_boxed_slice(),
            set_mask: sets - 1,
            ways,
            clock: 1,
            last_key: EMPTY,
            last_idx: 0,
        };
        a.reset_lists();
        a
    }

    /// List mode: every set's list back to ways 0, 1, ..., ways - 1 (all empty).
    fn reset_lists(&mut self) {
        let w = self.ways;
        for (next, prev) in self
            .next
            .chunks_exact_mut(w)
            .zip(self.prev.chunks_exact_mut(w))
        {
            for i in 0..w {
                next[i] = (i + 1) as u16; // the tail's `next` is never read
                prev[i] = i.wrapping_sub(1) as u16; // nor the head's `prev`
            }
        }
        self.head.fill(0);
        self.tail.fill((w - 1) as u16);
    }

    /// List mode: makes way `i` of `set` the most recent.
    #[inline(always)]
    fn list_to_front(&mut self, set: usize, i: usize) {
        let h = self.head[set] as usize;
        if i == h {
            return;
        }
        let base = set * self.ways;
        let (p, n) = (self.prev[base + i], self.next[base + i]);
        self.next[base + p as usize] = n;
        if i == self.tail[set] as usize {
            self.tail[set] = p;
        } else {
            self.prev[base + n as usize] = p;
        }
        self.next[base + i] = h as u16;
        self.prev[base + h] = i as u16;
        self.head[set] = i as u16;
    }

    /// List mode: makes way `i` of `set` the least recent (the next victim).
    fn list_to_back(&mut self, set: usize, i: usize) {
        let t = self.tail[set] as usize;
        if i == t {
            return;
        }
        let base = set * self.ways;
        let (p, n) = (self.prev[base + i], self.next[base + i]);
        self.prev[base + n as usize] = p;
        if i == self.head[set] as usize {
            self.head[set] = n;
        } else {
            self.next[base + p as usize] = n;
        }
        self.prev[base + i] = t as u16;
        self.next[base + t] = i as u16;
        self.tail[set] = i as u16;
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.tags.len()
    }

    #[inline(always)]
    pub(crate) fn ways(&self) -> usize {
        self.ways
    }

    #[inline(always)]
    pub(crate) fn sets(&self) -> usize {
        self.tags.len() / self.ways
    }

    #[inline(always)]
    pub(crate) fn is_empty_tag(tag: u64) -> bool {
        tag == EMPTY
    }

    pub(crate) fn valid(&self) -> usize {
        self.tags.iter().filter(|&&t| t != EMPTY).count()
    }

    #[inline(always)]
    fn set_of(&self, key: u64) -> usize {
        (key & self.set_mask) as usize
    }

    /// Looks `key` up in set `key & (sets - 1)`. A hit makes the way most recently used and
    /// ORs `bits` into its tag. A miss replaces the LRU way with `key | bits` and `meta`.
    #[inline(always)]
    pub(crate) fn access(&mut self, key: u64, bits: u64, meta: u8) -> WayAccess {
        debug_assert!(key < KEY_MASK, "key {key:#x} out of range");
        if key == self.last_key {
            self.tags[self.last_idx] |= bits;
            return WayAccess {
                hit: true,
                idx: self.last_idx,
                victim_tag: 0,
                victim_meta: 0,
            };
        }
        let a = self.access_set(key, bits, meta);
        self.last_key = key;
        self.last_idx = a.idx;
        a
    }

    #[inline(always)]
    fn access_set(&mut self, key: u64, bits: u64, meta: u8) -> WayAccess {
        let set = self.set_of(key);
        if self.list {
            return self.access_list(set, key, bits, meta);
        }
        let mut now = self.clock;
        if now == STAMP_LIMIT {
            self.renumber();
            now = self.clock;
        }
        self.clock = now + 1;
        dispatch_ways!(self.ways, |w| {
            let base = set * w;
            let tags = &mut self.tags[base..base + w];
            let stamps = &mut self.stamps[base..base + w];
            let fps: &mut [u8] = if w > DIRECT_MAX_WAYS {
                let fb = set * fp_stride(w);
                &mut self.fps[fb..fb + fp_stride(w)]
            } else {
                &mut []
            };
            if let Some(i) = find_in_set(fps, tags, key) {
                tags[i] |= bits;
                stamps[i] = now;
                return WayAccess {
                    hit: true,
                    idx: base + i,
                    victim_tag: 0,
                    victim_meta: 0,
                };
            }
            let v = lru_way(stamps);
            let victim_tag = tags[v];
            tags[v] = key | bits;
            stamps[v] = now;
            if w > DIRECT_MAX_WAYS {
                fps[v] = fingerprint(key);
            }
            let victim_meta = std::mem::replace(&mut self.meta[base + v], meta);
            WayAccess {
                hit: false,
                idx: base + v,
                victim_tag,
                victim_meta,
            }
        })
    }

    /// [`Self::access_set`] in list mode.
    #[inline]
    fn access_list(&mut self, set: usize, key: u64, bits: u64, meta: u8) -> WayAccess {
        let w = self.ways;
        let (base, fb) = (set * w, set * fp_stride(w));
        let found = find_in_set(
            &self.fps[fb..fb + fp_stride(w)],
            &self.tags[base..base + w],
            key,
        );
        if let Some(i) = found {
            self.tags[base + i] |= bits;
            self.list_to_front(set, i);
            return WayAccess {
                hit: true,
                idx: base + i,
                victim_tag: 0,
                victim_meta: 0,
            };
        }
        let v = self.tail[set] as usize;
        let victim_tag = std::mem::replace(&mut self.tags[base + v], key | bits);
        let victim_meta = std::mem::replace(&mut self.meta[base + v], meta);
        self.fps[fb + v] = fingerprint(key);
        self.list_to_front(set, v);
        WayAccess {
            hit: false,
            idx: base + v,
            victim_tag,
            victim_meta,
        }
    }

    /// Index of the way holding `key`; changes nothing.
    #[inline]
    pub(crate) fn find(&self, key: u64) -> Option<usize> {
        let set = self.set_of(key);
        let base = set * self.ways;
        let fps = if self.ways > DIRECT_MAX_WAYS {
            &self.fps[set * fp_stride(self.ways)..]
        } else {
            &[]
        };
        find_in_set(fps, &self.tags[base..base + self.ways], key).map(|i| base + i)
    }

    /// Frees way `idx`; returns its tag and metadata.
    #[inline]
    pub(crate) fn drop_way(&mut self, idx: usize) -> (u64, u8) {
        if idx == self.last_idx {
            self.last_key = EMPTY;
        }
        let t = std::mem::replace(&mut self.tags[idx], EMPTY);
        if self.list {
            self.list_to_back(idx / self.ways, idx % self.ways);
        } else {
            self.stamps[idx] = 0;
        }
        (t, self.meta[idx])
    }

    /// Frees every way whose key (tag without bit 63) satisfies `drop`; calls `dropped` with
    /// each freed tag.
    pub(crate) fn drop_where(
        &mut self,
        mut drop: impl FnMut(u64) -> bool,
        mut dropped: impl FnMut(u64),
    ) {
        for i in 0..self.tags.len() {
            let t = self.tags[i];
            if t != EMPTY && drop(t & KEY_MASK) {
                self.drop_way(i);
                dropped(t);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.tags.fill(EMPTY);
        self.stamps.fill(0);
        self.reset_lists();
        self.last_key = EMPTY;
    }

    /// Renumbers the stamps of every set to 1..=ways by rank, keeping their order and leaving
    /// 0 (empty) as is, and restarts the clock above them.
    #[cold]
    fn renumber(&mut self) {
        let ways = self.ways;
        let mut order: Vec<usize> = Vec::with_capacity(ways);
        for set in self.stamps.chunks_exact_mut(ways) {
            order.clear();
            order.extend((0..ways).filter(|&i| set[i] != 0));
            order.sort_unstable_by_key(|&i| set[i]);
            for (rank, &i) in order.iter().enumerate() {
                set[i] = rank as u32 + 1;
            }
        }
        self.clock = ways as u32 + 1;
    }

    #[cfg(test)]
    pub(crate) fn set_clock(&mut self, clock: u32) {
        self.clock = clock;
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
    /// reports the effective associativity. Power-of-two geometries are kept exactly.
    pub fn new(bytes: u64, ways: u32) -> Self {
        SetAssocCache {
            sets: WaySets::new(bytes / LINE_BYTES, ways as u64),
        }
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
    #[inline]
    pub fn access(&mut self, line: u64, write: bool, meta: u8) -> CacheOutcome {
        let a = self.sets.access(line, (write as u64) << 63, meta);
        if a.hit {
            CacheOutcome::Hit
        } else if WaySets::is_empty_tag(a.victim_tag) {
            CacheOutcome::Miss { evicted: None }
        } else {
            let t = a.victim_tag;
            CacheOutcome::Miss {
                evicted: Some(Evicted {
                    line: t & KEY_MASK,
                    dirty: t & DIRTY != 0,
                    meta: a.victim_meta,
                }),
            }
        }
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
    fn clock_wrap_keeps_lru_order() {
        let mut c = SetAssocCache::new(4 * 64, 4); // one set, 4 ways
        c.sets.set_clock(STAMP_LIMIT - 3);
        for l in [10u64, 11, 12, 13] {
            c.access(l, false, 0); // the clock wraps and the stamps are renumbered here
        }
        c.access(11, false, 0);
        c.access(10, false, 0);
        // LRU order now: 12, 13, 11, 10.
        for (new, old) in [(20, 12), (21, 13), (22, 11), (23, 10)] {
            assert_eq!(
                c.access(new, false, 0),
                miss(Some(Evicted {
                    line: old,
                    dirty: false,
                    meta: 0
                }))
            );
        }
    }

    #[test]
    fn clock_wrap_keeps_lru_order_in_wide_sets() {
        let mut c = SetAssocCache::new(16 * 64, 16); // one set, 16 ways (vector argmin)
        c.sets.set_clock(STAMP_LIMIT - 10);
        for l in 0..16u64 {
            c.access(l, false, 0); // the clock is renumbered during this loop
        }
        for l in (0..16u64).rev() {
            assert_eq!(c.access(l, false, 0), CacheOutcome::Hit);
        }
        // Touched 15, 14, ..., 0 last: 15 is the LRU, then 14, ...
        for k in 0..16u64 {
            assert_eq!(
                c.access(100 + k, false, 0),
                miss(Some(Evicted {
                    line: 15 - k,
                    dirty: false,
                    meta: 0
                }))
            );
        }
    }

    #[test]
    fn list_mode_true_lru() {
        // 2 sets of 32 ways (list mode); even lines go to set 0.
        let mut c = SetAssocCache::new(64 * 64, 32);
        assert_eq!((c.sets(), c.ways()), (2, 32));
        assert!(c.sets.list);
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
