//! Hardware lookup structures on the simulator's hot path: caches and TLBs; and the core's
//! instruction window (compute overlapping memory); the cores whose state SMT siblings share;
//! the sockets' memory directory; cache-line transfers between cores.

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

/// A cache line moved to a core of node `to` from a core of node `from`: on-chip at the LLC's
/// latency, across nodes at about a remote memory access (the idle latency of the route, E).
/// Used for lines that many threads pass around: the mmap_lock's count, a barrier's flag.
pub fn line_transfer_ns(
    m: &numalab_machine::Machine,
    routes: &numalab_machine::Routes,
    from: usize,
    to: usize,
) -> f64 {
    use numalab_core::NodeId;
    if from == to {
        m.core.llc_hit_ns
    } else {
        m.idle_latency_ns(routes, NodeId(to as u16), NodeId(from as u16))
    }
}
