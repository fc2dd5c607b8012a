//! Hardware lookup structures on the simulator's hot path: caches and TLBs.

pub mod cache;
pub(crate) mod compact_cache;
pub mod host_isa;
pub(crate) mod private_cache;
pub mod tlb;
