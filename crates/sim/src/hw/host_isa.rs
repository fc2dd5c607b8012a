//! The host instruction sets the engine has builds of its hot loop for, and the tokens that
//! carry the choice down to the code that differs per build.
//!
//! The engine's loop (`engine.rs`, `run_thread_body`) is one generic body compiled once per
//! pair of instruction set and private-cache layout (`hw/private_cache.rs`, `Build`): the
//! x86-64 baseline with the wide layout, AVX2 + BMI with the wide or the compact layout, and
//! AVX-512F on top with the compact one. Most of it is the same source in every build; the
//! one part written per instruction set is the compact private cache's lane code
//! ([`super::compact_cache`]), which only pays with 256- or 512-bit registers. A zero-sized
//! token type ([`Baseline`], [`Avx2`], [`Avx512`]) is passed down the body, so each build
//! inlines its own lane code, and a token can only be made where the host has its features
//! (the `unsafe` constructors), which is what makes calling the lane functions, which use the
//! build's intrinsics, sound. (Crates that clone a function per target,
//! such as `multiversion`, clone the function they annotate, not a caller-chosen variant of
//! code inlined several calls below it; the tokens do that with no dependency.)

use std::fmt;
use std::str::FromStr;

/// An engine build, by the instruction set it needs. Ordered: each needs the one before.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostIsa {
    /// The x86-64 baseline (SSE2), or any other architecture: the wide cache layout.
    Baseline,
    /// AVX2, BMI1/2, LZCNT, POPCNT: the compact private caches, lane code in two 256-bit halves.
    Avx2,
    /// The AVX2 set and AVX-512F: the compact private caches, one 512-bit register per set.
    Avx512,
}

impl HostIsa {
    /// Every build, in order.
    pub const ALL: [HostIsa; 3] = [HostIsa::Baseline, HostIsa::Avx2, HostIsa::Avx512];

    /// The best build this host can run.
    pub fn detect() -> HostIsa {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("bmi1")
                && std::is_x86_feature_detected!("bmi2")
                && std::is_x86_feature_detected!("lzcnt")
                && std::is_x86_feature_detected!("popcnt");
            if avx2 && std::is_x86_feature_detected!("avx512f") {
                return HostIsa::Avx512;
            }
            if avx2 {
                return HostIsa::Avx2;
            }
        }
        HostIsa::Baseline
    }

    /// The build a run uses when allowed at most `self`: the best the host has up to it.
    pub fn capped(self) -> HostIsa {
        self.min(HostIsa::detect())
    }

    pub fn name(self) -> &'static str {
        match self {
            HostIsa::Baseline => "baseline",
            HostIsa::Avx2 => "avx2",
            HostIsa::Avx512 => "avx512",
        }
    }
}

impl fmt::Display for HostIsa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HostIsa {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        HostIsa::ALL
            .into_iter()
            .find(|i| i.name() == s)
            .ok_or_else(|| format!("unknown engine build '{s}': use baseline, avx2 or avx512"))
    }
}

/// A token for one engine build: the lane operations of a compact cache set (16 `u32` lanes
/// of `tag << 5 | dirty << 4 | rank`; see [`super::compact_cache`]).
pub(crate) trait Isa: Copy {
    /// Bit `l` set where lane `l`'s tag (bits 5..32) is `tag`.
    fn eq_tag(self, set: &[u32; 16], tag: u32) -> u32;
    /// The lane whose rank (bits 0..4) is `rank`; the ranks of a set's ways are a
    /// permutation, so there is exactly one.
    fn lane_of_rank(self, set: &[u32; 16], rank: u32) -> usize;
    /// Adds 1 to the rank of every lane ranked below `rank`, then stores `new` into lane
    /// `lane`: the set written back whole, so that the next access's load of it can take its
    /// value from the store buffer.
    fn touch(self, set: &mut [u32; 16], lane: usize, rank: u32, new: u32);
}

const TAG_SHIFT: u32 = 5;
const RANK_MASK: u32 = 15;

/// The baseline build's token: plain loops (the compact layout is not used there; tests
/// compare it with the others).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Baseline;

impl Isa for Baseline {
    #[inline(always)]
    fn eq_tag(self, set: &[u32; 16], tag: u32) -> u32 {
        let mut m = 0;
        for (l, &v) in set.iter().enumerate() {
            m |= ((v >> TAG_SHIFT == tag) as u32) << l;
        }
        m
    }
    #[inline(always)]
    fn lane_of_rank(self, set: &[u32; 16], rank: u32) -> usize {
        let mut m = 0u32;
        for (l, &v) in set.iter().enumerate() {
            m |= ((v & RANK_MASK == rank) as u32) << l;
        }
        m.trailing_zeros() as usize
    }
    #[inline(always)]
    fn touch(self, set: &mut [u32; 16], lane: usize, rank: u32, new: u32) {
        for v in set.iter_mut() {
            *v += ((*v & RANK_MASK) < rank) as u32;
        }
        set[lane] = new;
    }
}

/// The AVX2 build's token.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Avx2(());

/// The AVX-512 build's token.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Avx512(());

impl Avx2 {
    /// # Safety
    /// The host must have every feature of [`HostIsa::Avx2`].
    pub(crate) unsafe fn new_unchecked() -> Avx2 {
        Avx2(())
    }
    /// The token where the host has the features (tests; the engine checks once per run).
    #[cfg(test)]
    pub(crate) fn new() -> Option<Avx2> {
        // SAFETY: checked just now
        (HostIsa::detect() >= HostIsa::Avx2).then(|| unsafe { Avx2::new_unchecked() })
    }
}

impl Avx512 {
    /// # Safety
    /// The host must have every feature of [`HostIsa::Avx512`].
    pub(crate) unsafe fn new_unchecked() -> Avx512 {
        Avx512(())
    }
    /// The token where the host has the features (tests; the engine checks once per run).
    #[cfg(test)]
    pub(crate) fn new() -> Option<Avx512> {
        // SAFETY: checked just now
        (HostIsa::detect() >= HostIsa::Avx512).then(|| unsafe { Avx512::new_unchecked() })
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{RANK_MASK, TAG_SHIFT};
    use std::arch::x86_64::*;

    // No `#[target_feature]` on these: such a function may not be `#[inline(always)]`, and
    // LLVM's heuristics then decide whether the lane code joins the loop (a 32-lane variant
    // was left out of line). Inlined into the engine build of the right features
    // (`run_thread_avx2`, `run_thread_avx512`), their intrinsics inline there too; callers
    // must hold the token.

    #[inline(always)]
    pub unsafe fn eq_tag_avx2(set: &[u32; 16], tag: u32) -> u32 {
        let p = set.as_ptr().cast::<__m256i>();
        let t = _mm256_set1_epi32(tag as i32);
        // SAFETY (all loads and stores here): `set` is 64 bytes; unaligned forms, so no
        // alignment requirement beyond the reference's.
        let (lo, hi) = unsafe { (_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1))) };
        let a = _mm256_cmpeq_epi32(_mm256_srli_epi32::<{ TAG_SHIFT as i32 }>(lo), t);
        let b = _mm256_cmpeq_epi32(_mm256_srli_epi32::<{ TAG_SHIFT as i32 }>(hi), t);
        let ma = _mm256_movemask_ps(_mm256_castsi256_ps(a)) as u32;
        let mb = _mm256_movemask_ps(_mm256_castsi256_ps(b)) as u32;
        ma | mb << 8
    }

    #[inline(always)]
    pub unsafe fn lane_of_rank_avx2(set: &[u32; 16], rank: u32) -> usize {
        let p = set.as_ptr().cast::<__m256i>();
        let (r, k) = (
            _mm256_set1_epi32(rank as i32),
            _mm256_set1_epi32(RANK_MASK as i32),
        );
        let (lo, hi) = unsafe { (_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1))) };
        let a = _mm256_cmpeq_epi32(_mm256_and_si256(lo, k), r);
        let b = _mm256_cmpeq_epi32(_mm256_and_si256(hi, k), r);
        let ma = _mm256_movemask_ps(_mm256_castsi256_ps(a)) as u32;
        let mb = _mm256_movemask_ps(_mm256_castsi256_ps(b)) as u32;
        (ma | mb << 8).trailing_zeros() as usize
    }

    #[inline(always)]
    pub unsafe fn touch_avx2(set: &mut [u32; 16], lane: usize, rank: u32, new: u32) {
        let p = set.as_mut_ptr().cast::<__m256i>();
        let (r, k) = (
            _mm256_set1_epi32(rank as i32),
            _mm256_set1_epi32(RANK_MASK as i32),
        );
        let (n, l) = (
            _mm256_set1_epi32(new as i32),
            _mm256_set1_epi32(lane as i32),
        );
        let iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let eight = _mm256_set1_epi32(8);
        let (lo, hi) = unsafe { (_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1))) };
        // rank < r (ranks and r are 0..15: the signed compare is exact); subtracting the
        // all-ones lanes adds 1
        let lo = _mm256_sub_epi32(lo, _mm256_cmpgt_epi32(r, _mm256_and_si256(lo, k)));
        let hi = _mm256_sub_epi32(hi, _mm256_cmpgt_epi32(r, _mm256_and_si256(hi, k)));
        let lo = _mm256_blendv_epi8(lo, n, _mm256_cmpeq_epi32(iota, l));
        let hi = _mm256_blendv_epi8(hi, n, _mm256_cmpeq_epi32(_mm256_add_epi32(iota, eight), l));
        unsafe {
            _mm256_storeu_si256(p, lo);
            _mm256_storeu_si256(p.add(1), hi);
        }
    }

    #[inline(always)]
    pub unsafe fn eq_tag_avx512(set: &[u32; 16], tag: u32) -> u32 {
        let v = unsafe { _mm512_loadu_si512(set.as_ptr().cast()) };
        _mm512_cmpeq_epi32_mask(
            _mm512_srli_epi32::<TAG_SHIFT>(v),
            _mm512_set1_epi32(tag as i32),
        ) as u32
    }

    #[inline(always)]
    pub unsafe fn lane_of_rank_avx512(set: &[u32; 16], rank: u32) -> usize {
        let v = unsafe { _mm512_loadu_si512(set.as_ptr().cast()) };
        let ranks = _mm512_and_si512(v, _mm512_set1_epi32(RANK_MASK as i32));
        (_mm512_cmpeq_epi32_mask(ranks, _mm512_set1_epi32(rank as i32)) as u32).trailing_zeros()
            as usize
    }

    #[inline(always)]
    pub unsafe fn touch_avx512(set: &mut [u32; 16], lane: usize, rank: u32, new: u32) {
        let v = unsafe { _mm512_loadu_si512(set.as_ptr().cast()) };
        let ranks = _mm512_and_si512(v, _mm512_set1_epi32(RANK_MASK as i32));
        let below = _mm512_cmplt_epu32_mask(ranks, _mm512_set1_epi32(rank as i32));
        let v = _mm512_mask_add_epi32(v, below, v, _mm512_set1_epi32(1));
        let v = _mm512_mask_set1_epi32(v, 1 << lane, new as i32);
        unsafe { _mm512_storeu_si512(set.as_mut_ptr().cast(), v) };
    }
}

// Off x86-64 no token of these two can be made (`detect` says Baseline), so their lane code
// is the baseline's.
macro_rules! lanes_via {
    ($token:ty, $eq:ident, $rank:ident, $touch:ident) => {
        impl Isa for $token {
            #[inline(always)]
            fn eq_tag(self, set: &[u32; 16], tag: u32) -> u32 {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the token exists only where the host has the features.
                return unsafe { x86::$eq(set, tag) };
                #[cfg(not(target_arch = "x86_64"))]
                Baseline.eq_tag(set, tag)
            }
            #[inline(always)]
            fn lane_of_rank(self, set: &[u32; 16], rank: u32) -> usize {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above.
                return unsafe { x86::$rank(set, rank) };
                #[cfg(not(target_arch = "x86_64"))]
                Baseline.lane_of_rank(set, rank)
            }
            #[inline(always)]
            fn touch(self, set: &mut [u32; 16], lane: usize, rank: u32, new: u32) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above.
                return unsafe { x86::$touch(set, lane, rank, new) };
                #[cfg(not(target_arch = "x86_64"))]
                Baseline.touch(set, lane, rank, new)
            }
        }
    };
}

lanes_via!(Avx2, eq_tag_avx2, lane_of_rank_avx2, touch_avx2);
lanes_via!(Avx512, eq_tag_avx512, lane_of_rank_avx512, touch_avx512);

#[cfg(test)]
mod tests {
    use super::*;

    /// A set of 16 lanes with ranks a permutation, some tags repeated.
    fn sample(seed: u32) -> [u32; 16] {
        std::array::from_fn(|l| {
            let rank = (l as u32 * 7 + seed) % 16;
            let tag = (l as u32).wrapping_mul(2654435761u32.wrapping_mul(seed + 1)) % 5;
            tag << TAG_SHIFT | ((l as u32 + seed) & 1) << 4 | rank
        })
    }

    fn agree<I: Isa>(isa: I) {
        for seed in 0..64 {
            let s = sample(seed);
            for tag in 0..6 {
                assert_eq!(
                    isa.eq_tag(&s, tag),
                    Baseline.eq_tag(&s, tag),
                    "{seed} {tag}"
                );
            }
            for rank in 0..16 {
                assert_eq!(isa.lane_of_rank(&s, rank), Baseline.lane_of_rank(&s, rank));
            }
            for lane in 0..16 {
                for rank in 0..16 {
                    let (mut a, mut b) = (s, s);
                    let new = 77 << TAG_SHIFT | 1 << 4;
                    isa.touch(&mut a, lane, rank, new);
                    Baseline.touch(&mut b, lane, rank, new);
                    assert_eq!(a, b, "seed {seed} lane {lane} rank {rank}");
                }
            }
        }
    }

    #[test]
    fn baseline_lanes_do_what_they_say() {
        let s = sample(3);
        let m = Baseline.eq_tag(&s, 2);
        for (l, v) in s.iter().enumerate() {
            assert_eq!(m >> l & 1 == 1, v >> TAG_SHIFT == 2);
        }
        for rank in 0..16 {
            assert_eq!(s[Baseline.lane_of_rank(&s, rank)] & RANK_MASK, rank);
        }
        let mut t = s;
        Baseline.touch(&mut t, 5, s[5] & RANK_MASK, 9 << TAG_SHIFT);
        assert_eq!(t[5], 9 << TAG_SHIFT);
        for l in (0..16).filter(|&l| l != 5) {
            let up = (s[l] & RANK_MASK) < (s[5] & RANK_MASK);
            assert_eq!(t[l], s[l] + up as u32, "lane {l}");
        }
    }

    #[test]
    fn vector_lanes_match_the_baseline() {
        match Avx2::new() {
            Some(t) => agree(t),
            None => eprintln!("host without AVX2: its lanes are not tested here"),
        }
        match Avx512::new() {
            Some(t) => agree(t),
            None => eprintln!("host without AVX-512F: its lanes are not tested here"),
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_say_what_to_use() {
        for i in HostIsa::ALL {
            assert_eq!(i.name().parse::<HostIsa>(), Ok(i));
        }
        let e = "sse9".parse::<HostIsa>().unwrap_err();
        assert!(e.contains("sse9") && e.contains("avx512"), "{e}");
        assert!(HostIsa::Baseline.capped() == HostIsa::Baseline);
        assert!(HostIsa::Avx512.capped() == HostIsa::detect());
    }
}
