//! Hardware lookup structures on the simulator's hot path: caches and TLBs; and the core's
//! instruction window (compute overlapping memory); the cores whose state SMT siblings share;
//! the sockets' memory directory.

pub mod cache;
pub(crate) mod compact_cache;
pub mod host_isa;
pub mod memory_directory;
pub mod overlap;
pub(crate) mod private_cache;
pub mod psc;
pub(crate) mod smt;
pub mod store_buffer;
pub mod tlb;
