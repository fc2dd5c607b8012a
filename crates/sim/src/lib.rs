//! The numalab simulator (DESIGN.md, "The simulator's model"; formulas in docs/model.md).
//!
//! - [`hw`]: per-core TLBs and private caches, per-node LLCs (lookup structures);
//! - [`memsys`]: memory controllers and links with contention feedback between epochs;
//! - [`os`]: page table, first-touch placement under memory policies, THP, migration;
//! - [`engine`]: per-thread clocks advanced in epochs, barriers, the sampler, results.

pub mod barrier;
pub mod config;
pub mod engine;
pub mod hw;
pub mod memsys;
pub mod os;
pub mod pinning;
pub mod report;
pub mod results;
pub mod sched;

pub use config::{Progress, SimConfig};
pub use engine::{simulate, SimError, Simulator};
pub use hw::host_isa::HostIsa;
pub use os::numa_balancing::{NumaBalancingParams, NumaBalancingReport};
pub use os::thp_split_ext::{SplitTrigger, ThpSplitParams};
pub use os::ThpMode;
pub use pinning::Pinning;
pub use results::SimResult;
