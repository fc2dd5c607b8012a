//! Physical cores and their SMT siblings (docs/model.md, "SMT").
//!
//! The hardware threads of one core share its private cache, its TLBs (with their
//! paging-structure caches) and its line-fill buffers; while both run, Intel's Hyper-Threading
//! gives each half of the reorder buffer (IA-32 Intel Architecture Optimization Reference
//! Manual, "Processor Resources and Hyper-Threading Technology": the partitioned resources).
//! So the private state lives here, one per core, and a thread borrows its core's state for
//! its turn; the engine divides the core's miss concurrency and reorder buffer among the
//! core's live threads. On AMD's Bulldozer family two cores (a module) share one L2 and
//! nothing else (`core.private_cache_cores`): the TLBs stay per core, the private cache is
//! kept per group of cores.

use crate::hw::host_isa::HostIsa;
use crate::hw::private_cache::PrivateCache;
use crate::hw::tlb::Tlb;
use numalab_core::CpuId;
use numalab_machine::{CacheGeom, Machine, TlbConfig};

/// What one physical core caches for the threads that run on it.
pub(crate) struct CoreState {
    pub(crate) tlb: Tlb,
    /// The slot of the private cache the core uses in `Cores::l2s`.
    pub(crate) l2_slot: usize,
}

/// Every core a thread has run on, and which core each CPU belongs to.
pub(crate) struct Cores {
    /// Core of each CPU id (a dense index over the machine's cores); `NONE` for ids the
    /// machine lacks.
    of_cpu: Vec<u32>,
    /// Slot of each core in `states`, `NONE` until a thread is placed there (a machine of
    /// hundreds of cores simulates only the cores the workload uses).
    slot: Vec<u32>,
    states: Vec<CoreState>,
    /// Private cache of each core (dense, as `of_cpu`'s cores).
    cache_of_core: Vec<u32>,
    /// Slot of each private cache in `l2s`, `NONE` until a core using it is placed.
    l2_slot: Vec<u32>,
    l2s: Vec<PrivateCache>,
    tlb: TlbConfig,
    l2: CacheGeom,
    host_isa: HostIsa,
}

const NONE: u32 = u32::MAX;

impl Cores {
    pub(crate) fn new(machine: &Machine, host_isa: HostIsa) -> Cores {
        let pairs = machine.cores_of_cpus();
        let max_cpu = pairs.iter().map(|(c, _)| c.0 as usize).max().unwrap_or(0);
        let cores = pairs.iter().map(|&(_, k)| k + 1).max().unwrap_or(0);
        let mut of_cpu = vec![NONE; max_cpu + 1];
        for &(cpu, core) in &pairs {
            of_cpu[cpu.0 as usize] = core as u32;
        }
        let mut cache_of_core = vec![NONE; cores];
        let mut caches = 0;
        for ((_, core), (_, cache)) in pairs.iter().zip(machine.private_caches_of_cpus()) {
            cache_of_core[*core] = cache as u32;
            caches = caches.max(cache + 1);
        }
        Cores {
            of_cpu,
            slot: vec![NONE; cores],
            states: Vec::new(),
            cache_of_core,
            l2_slot: vec![NONE; caches],
            l2s: Vec::new(),
            tlb: machine.core.tlb.clone(),
            l2: machine.core.private_cache.clone(),
            host_isa,
        }
    }

    /// A fresh, empty TLB of this machine's cores (also a thread's own, which it holds
    /// between turns in place of its core's).
    pub(crate) fn fresh_tlb(&self) -> Tlb {
        Tlb::new(&self.tlb)
    }

    /// A fresh, empty private cache of this machine's cores (also a thread's own).
    pub(crate) fn fresh_l2(&self) -> PrivateCache {
        PrivateCache::new(self.l2.bytes, self.l2.ways, self.host_isa)
    }

    /// The slot of the core `cpu` belongs to, made (with an empty state) the first time.
    /// `cpu` must exist on the machine.
    pub(crate) fn slot_of(&mut self, cpu: CpuId) -> usize {
        let core = self.of_cpu[cpu.0 as usize];
        debug_assert_ne!(core, NONE, "CPU {} is not on the machine", cpu.0);
        let core = core as usize;
        if self.slot[core] == NONE {
            let cache = self.cache_of_core[core] as usize;
            if self.l2_slot[cache] == NONE {
                self.l2_slot[cache] = self.l2s.len() as u32;
                let l2 = self.fresh_l2();
                self.l2s.push(l2);
            }
            self.slot[core] = self.states.len() as u32;
            self.states.push(CoreState {
                tlb: self.fresh_tlb(),
                l2_slot: self.l2_slot[cache] as usize,
            });
        }
        self.slot[core] as usize
    }

    /// The TLB of core slot `slot` and the private cache it uses.
    pub(crate) fn state_and_l2(&mut self, slot: usize) -> (&mut Tlb, &mut PrivateCache) {
        let s = &mut self.states[slot];
        (&mut s.tlb, &mut self.l2s[s.l2_slot])
    }

    /// Core slots in use.
    pub(crate) fn len(&self) -> usize {
        self.states.len()
    }

    pub(crate) fn state(&mut self, slot: usize) -> &mut CoreState {
        &mut self.states[slot]
    }

    pub(crate) fn states(&mut self) -> impl Iterator<Item = &mut CoreState> {
        self.states.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_share_a_slot_and_other_cores_do_not() {
        // X5650 as M13's L4 numbers it: (0, 1) one core; Broadwell-EP as Linux does: 0 and 44.
        let x = numalab_machine::preset("xeon-x5650-2n").unwrap();
        let mut c = Cores::new(&x, HostIsa::Baseline);
        assert_eq!(c.slot_of(CpuId(0)), c.slot_of(CpuId(1)));
        assert_ne!(c.slot_of(CpuId(1)), c.slot_of(CpuId(2)));
        assert_eq!(c.slot_of(CpuId(12)), c.slot_of(CpuId(13)));
        assert_eq!(c.len(), 3);
        let b = numalab_machine::preset("xeon-e5-2699v4-2n").unwrap();
        let mut c = Cores::new(&b, HostIsa::Baseline);
        assert_eq!(c.slot_of(CpuId(0)), c.slot_of(CpuId(44)));
        assert_eq!(c.slot_of(CpuId(22)), c.slot_of(CpuId(66)));
        assert_ne!(c.slot_of(CpuId(0)), c.slot_of(CpuId(1)));
        assert_ne!(c.slot_of(CpuId(0)), c.slot_of(CpuId(22)));
        // no SMT: a core per CPU
        let o = numalab_machine::preset("opteron6272-8n").unwrap();
        let mut c = Cores::new(&o, HostIsa::Baseline);
        let slots: std::collections::BTreeSet<usize> =
            (0..64).map(|i| c.slot_of(CpuId(i))).collect();
        assert_eq!(slots.len(), 64);
    }

    #[test]
    fn a_bulldozer_module_shares_its_l2_and_nothing_else() {
        let o = numalab_machine::preset("opteron6272-8n").unwrap();
        assert_eq!(o.core.private_cache_cores, 2);
        let mut c = Cores::new(&o, HostIsa::Baseline);
        // CPUs 0 and 1: one module (two cores, two TLBs, one L2); CPU 2 the next module;
        // node 2's CPUs start at 32 (the preset's numbering), a module of its own
        let slots: Vec<usize> = [0, 1, 2, 32, 33].map(|i| c.slot_of(CpuId(i))).to_vec();
        let l2 = |c: &Cores, s: usize| c.states[s].l2_slot;
        assert_ne!(slots[0], slots[1], "each core keeps its TLBs");
        assert_eq!(l2(&c, slots[0]), l2(&c, slots[1]));
        assert_ne!(l2(&c, slots[1]), l2(&c, slots[2]));
        assert_eq!(l2(&c, slots[3]), l2(&c, slots[4]));
        assert_ne!(l2(&c, slots[0]), l2(&c, slots[3]));
        assert_eq!(c.l2s.len(), 3);
        // without sharing (a K10 Opteron) every core has its own
        let k = numalab_machine::preset("opteron6164he-4n").unwrap();
        let mut c = Cores::new(&k, HostIsa::Baseline);
        let (a, b) = (c.slot_of(CpuId(0)), c.slot_of(CpuId(1)));
        assert_ne!(c.states[a].l2_slot, c.states[b].l2_slot);
    }
}
