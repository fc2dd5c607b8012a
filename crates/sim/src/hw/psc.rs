//! Paging-structure caches (Intel SDM vol. 3A §4.10.3) and AMD's page walk cache: the
//! upper-level entries a page walk finds without a memory reference (docs/model.md, "One
//! memory reference", step 2).
//!
//! A 4 KiB walk reads the PML4E, PDPTE, PDE and PTE. With a PDE-cache hit (key: address bits
//! 47:21) only the PTE is read; with a PDPTE-cache hit (bits 47:30) the PDE and the PTE; else
//! the PDPTE too. A 2 MiB walk's leaf is the PDE: a PDPTE-cache hit leaves only it, a miss
//! adds the PDPTE. The PML4 cache (bits 47:39, 512 GiB an entry) is taken to always hit.
//! Intel keeps one cache per level; AMD one unified cache for every level.
//!
//! INVLPG (and any TLB flush) invalidates every paging-structure cache entry of the address
//! space, whatever address it names (SDM vol. 3A §4.10.4.1), so the engine clears them
//! whenever it invalidates the thread's TLB.

use numalab_core::PageSize;
use numalab_machine::PscConfig;

/// A small fully associative cache with true LRU: most recent key first.
#[derive(Clone, Debug)]
struct Lru {
    keys: Vec<u64>,
    entries: usize,
}

impl Lru {
    fn new(entries: u32) -> Lru {
        Lru {
            keys: Vec::with_capacity(entries as usize),
            entries: entries as usize,
        }
    }

    /// Whether `key` is cached; either way it is the most recent entry afterwards.
    fn access(&mut self, key: u64) -> bool {
        if self.entries == 0 {
            return false;
        }
        match self.keys.iter().position(|&k| k == key) {
            Some(i) => {
                self.keys[..=i].rotate_right(1);
                true
            }
            None => {
                if self.keys.len() == self.entries {
                    self.keys.pop();
                }
                self.keys.insert(0, key);
                false
            }
        }
    }

    fn clear(&mut self) {
        self.keys.clear();
    }
}

/// Keys of the unified cache: the level in the top bits above the address bits.
const PDE_TAG: u64 = 1 << 62;
const PDPTE_TAG: u64 = 2 << 62;

/// One core's paging-structure caches.
#[derive(Clone, Debug)]
pub struct Psc {
    pde: Lru,
    /// Unused (0 entries) with a unified cache, which `pde` then is.
    pdpte: Lru,
    unified: bool,
}

/// The upper-level entries a walk has to read from memory.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct UpperLevels {
    pub pdpte: bool,
    pub pde: bool,
}

impl Psc {
    pub fn new(cfg: &PscConfig) -> Psc {
        match *cfg {
            PscConfig::Split {
                pde_entries,
                pdpte_entries,
            } => Psc {
                pde: Lru::new(pde_entries),
                pdpte: Lru::new(pdpte_entries),
                unified: false,
            },
            PscConfig::Unified { entries } => Psc {
                pde: Lru::new(entries),
                pdpte: Lru::new(0),
                unified: true,
            },
        }
    }

    fn pde_hit(&mut self, addr: u64) -> bool {
        let key = addr >> 21;
        self.pde
            .access(if self.unified { PDE_TAG | key } else { key })
    }

    fn pdpte_hit(&mut self, addr: u64) -> bool {
        let key = addr >> 30;
        if self.unified {
            self.pde.access(PDPTE_TAG | key)
        } else {
            self.pdpte.access(key)
        }
    }

    /// A walk for `addr`, mapped by a page of `size`: which upper-level entries it reads
    /// (the leaf is always read); the caches then hold what the walk found.
    pub fn walk(&mut self, addr: u64, size: PageSize) -> UpperLevels {
        match size {
            PageSize::Base4K => {
                if self.pde_hit(addr) {
                    UpperLevels::default()
                } else {
                    UpperLevels {
                        pdpte: !self.pdpte_hit(addr),
                        pde: true,
                    }
                }
            }
            PageSize::Huge2M => UpperLevels {
                pdpte: !self.pdpte_hit(addr),
                pde: false,
            },
            PageSize::Giant1G => UpperLevels::default(),
        }
    }

    /// INVLPG or a flush: every entry goes.
    pub fn clear(&mut self) {
        self.pde.clear();
        self.pdpte.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;
    const GB: u64 = 1 << 30;

    fn intel() -> Psc {
        Psc::new(&PscConfig::Split {
            pde_entries: 32,
            pdpte_entries: 4,
        })
    }

    #[test]
    fn a_4k_walk_reads_the_levels_its_caches_miss() {
        let mut p = intel();
        let both = UpperLevels {
            pdpte: true,
            pde: true,
        };
        assert_eq!(p.walk(0, PageSize::Base4K), both);
        // same 2 MiB: the PDE cache hits
        assert_eq!(p.walk(MB, PageSize::Base4K), UpperLevels::default());
        // another 2 MiB of the same 1 GiB: the PDPTE cache hits, the PDE is read
        let pde_only = UpperLevels {
            pdpte: false,
            pde: true,
        };
        assert_eq!(p.walk(2 * MB, PageSize::Base4K), pde_only);
        // 2 MiB walks only ever need the PDPTE
        assert!(!p.walk(5 * GB, PageSize::Huge2M).pde);
        assert!(p.walk(6 * GB, PageSize::Huge2M).pdpte);
        assert!(!p.walk(6 * GB + 4 * MB, PageSize::Huge2M).pdpte);
        assert_eq!(p.walk(7 * GB, PageSize::Giant1G), UpperLevels::default());
    }

    #[test]
    fn the_pde_cache_covers_its_entries_times_2_mib_and_no_more() {
        let mut p = intel();
        // 32 PDEs reach 64 MiB: a loop over 64 MiB hits them all on the second pass
        for pass in 0..2 {
            for i in 0..32 {
                let l = p.walk(i * 2 * MB, PageSize::Base4K);
                assert_eq!(l.pde, pass == 0, "pass {pass}, 2 MiB region {i}");
            }
        }
        // 33 regions in a loop: LRU evicts each just before it comes back
        let mut p = intel();
        for pass in 0..2 {
            for i in 0..33 {
                assert!(p.walk(i * 2 * MB, PageSize::Base4K).pde, "pass {pass}");
            }
        }
    }

    #[test]
    fn a_unified_cache_shares_its_entries_between_levels_and_clear_drops_all() {
        let mut p = Psc::new(&PscConfig::Unified { entries: 2 });
        assert!(p.walk(0, PageSize::Base4K).pdpte); // PDE and PDPTE now fill both entries
        assert_eq!(p.walk(MB, PageSize::Base4K), UpperLevels::default());
        // a second 1 GiB: its PDPTE and PDE evict the first ones
        assert!(p.walk(GB, PageSize::Base4K).pdpte);
        assert!(p.walk(0, PageSize::Base4K).pdpte);
        p.clear();
        assert!(p.walk(0, PageSize::Base4K).pdpte);
    }
}
