//! numalab's shared vocabulary.
//!
//! Everything here is used by both the simulator and the Linux runtime, so the names follow
//! the kernel's (`mm/mempolicy.c`, `mm/migrate.c`): nodes, nodemasks, policy modes, folios of a
//! page size, migrate reasons. Nothing in this crate knows how a machine is modelled.

pub mod atomic_file;
pub mod ids;
pub mod mempolicy;
pub mod metrics;
pub mod migrate_pages;
pub mod nodemask;
pub mod page;
pub mod sample;
pub mod topology;
pub mod view;
pub mod workload;

pub use ids::{CpuId, NodeId, TaskId, ThreadId};
pub use mempolicy::{MemPolicy, MemPolicyError};
pub use nodemask::{NodeMask, NodeMaskError};
pub use page::PageSize;
pub use sample::{AccessSample, DataSource};
pub use topology::{NodeInfo, Topology, TopologyError};
pub use view::{
    Action, Decision, MemoryView, NextTouchMechanism, PageInfo, Policy, RegionInfo, ThreadInfo,
};
pub use workload::{
    map_static, static_layout, AccessKind, AddressSpace, GatherTable, MapOptions, Op, Placements,
    StaticArray, ThreadProgram, ThreadSpec, Workload,
};
