//! Hardware lookup structures on the simulator's hot path: caches and TLBs.

pub mod cache;
pub mod tlb;
