//! A core's private cache, in one of two layouts, and the engine builds that pair a host
//! instruction set with a layout.
//!
//! [`PrivateCache`] is the compact layout ([`CompactCache`]: one host line per set, up to 16
//! ways) where the engine build has 256-bit lanes or wider, the wide [`SetAssocCache`]
//! elsewhere. Both give the same results. The engine's loop is compiled once per pair
//! ([`Build`]) and reaches its thread's cache through [`PrivateLayout::of`], so each copy
//! holds the code of one layout only: with both layouts inlined behind a `match` at every
//! reference, the loop grew by a third and lost most of the compact layout's gain
//! (docs/PERFORMANCE.md, ninth round).

use std::marker::PhantomData;

use super::cache::{CacheOutcome, SetAssocCache};
use super::compact_cache::CompactCache;
use super::host_isa::{HostIsa, Isa};

/// A core's private cache (see the module documentation).
#[derive(Clone, Debug)]
pub(crate) enum PrivateCache {
    Compact(CompactCache),
    Wide(SetAssocCache),
}

impl PrivateCache {
    /// A cache of `bytes`, `ways`-associative, for an engine build of `isa`: compact where
    /// `isa` has AVX2 and the sets have at most 16 ways.
    pub(crate) fn new(bytes: u64, ways: u32, isa: HostIsa) -> Self {
        if isa >= HostIsa::Avx2 {
            if let Some(c) = CompactCache::new(bytes, ways) {
                return PrivateCache::Compact(c);
            }
        }
        PrivateCache::Wide(SetAssocCache::new(bytes, ways))
    }

    /// Whether the compact layout is in use.
    pub(crate) fn is_compact(&self) -> bool {
        matches!(self, PrivateCache::Compact(_))
    }
}

/// The operations of the engine's loop on a private cache, per layout.
pub(crate) trait PrivateLayout {
    /// The cache of this layout inside `c`. Panics where `c` has the other layout: the engine
    /// picks the build from the layout (`run_thread`), so that never happens.
    fn of(c: &mut PrivateCache) -> &mut Self;
    fn of_ref(c: &PrivateCache) -> &Self;
    /// See [`SetAssocCache::access`].
    fn access<I: Isa>(&mut self, isa: I, line: u64, write: bool, meta: u8) -> CacheOutcome;
    /// See [`SetAssocCache::prefetch`].
    fn prefetch(&self, line: u64);
    /// See [`SetAssocCache::dirty_victim_of`].
    fn dirty_victim_of<I: Isa>(&self, isa: I, line: u64) -> Option<u64>;
}

impl PrivateLayout for CompactCache {
    #[inline(always)]
    fn of(c: &mut PrivateCache) -> &mut Self {
        match c {
            PrivateCache::Compact(c) => c,
            PrivateCache::Wide(_) => unreachable!("the compact build got a wide private cache"),
        }
    }
    #[inline(always)]
    fn of_ref(c: &PrivateCache) -> &Self {
        match c {
            PrivateCache::Compact(c) => c,
            PrivateCache::Wide(_) => unreachable!("the compact build got a wide private cache"),
        }
    }
    #[inline(always)]
    fn access<I: Isa>(&mut self, isa: I, line: u64, write: bool, meta: u8) -> CacheOutcome {
        CompactCache::access(self, isa, line, write, meta)
    }
    #[inline(always)]
    fn prefetch(&self, line: u64) {
        CompactCache::prefetch(self, line)
    }
    #[inline(always)]
    fn dirty_victim_of<I: Isa>(&self, isa: I, line: u64) -> Option<u64> {
        CompactCache::dirty_victim_of(self, isa, line)
    }
}

impl PrivateLayout for SetAssocCache {
    #[inline(always)]
    fn of(c: &mut PrivateCache) -> &mut Self {
        match c {
            PrivateCache::Wide(c) => c,
            PrivateCache::Compact(_) => unreachable!("the wide build got a compact private cache"),
        }
    }
    #[inline(always)]
    fn of_ref(c: &PrivateCache) -> &Self {
        match c {
            PrivateCache::Wide(c) => c,
            PrivateCache::Compact(_) => unreachable!("the wide build got a compact private cache"),
        }
    }
    #[inline(always)]
    fn access<I: Isa>(&mut self, _: I, line: u64, write: bool, meta: u8) -> CacheOutcome {
        SetAssocCache::access(self, line, write, meta)
    }
    #[inline(always)]
    fn prefetch(&self, line: u64) {
        SetAssocCache::prefetch(self, line)
    }
    #[inline(always)]
    fn dirty_victim_of<I: Isa>(&self, _: I, line: u64) -> Option<u64> {
        SetAssocCache::dirty_victim_of(self, line)
    }
}

/// One build of the engine's loop: an instruction-set token and a private-cache layout.
pub(crate) trait Build: Copy {
    type Isa: Isa;
    type Cache: PrivateLayout;
    fn isa(self) -> Self::Isa;
}

/// The build of instruction set `I` (its token) and layout `C`.
pub(crate) struct On<I, C>(I, PhantomData<fn() -> C>);

impl<I: Copy, C> Clone for On<I, C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<I: Copy, C> Copy for On<I, C> {}

impl<I: Isa, C> On<I, C> {
    pub(crate) fn new(isa: I) -> Self {
        On(isa, PhantomData)
    }
}

impl<I: Isa, C: PrivateLayout> Build for On<I, C> {
    type Isa = I;
    type Cache = C;
    #[inline(always)]
    fn isa(self) -> I {
        self.0
    }
}
