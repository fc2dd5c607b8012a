//! numalab's Linux runtime, low level: typed NUMA syscalls and readers for the kernel's NUMA
//! state in sysfs and procfs.
//!
//! - [`syscalls`]: `set_mempolicy`, `get_mempolicy` (thread policy, range policy, node of an
//!   address, mems_allowed), `mbind`, `move_pages` (query and move, batched),
//!   `migrate_pages`, `set_mempolicy_home_node`. numalab's [`MemPolicy`](numalab_core::MemPolicy)
//!   maps to the kernel's modes through [`policy::KernelPolicy`].
//! - Readers, each a pure parser of text plus a function reading under a [`SysRoot`] (the real
//!   `/`, or a recorded tree in tests): [`node`] (`/sys/devices/system/node`), [`tiers`]
//!   (memory tiers), [`weighted_interleave`] (weights), [`thp`] (transparent huge pages),
//!   [`balancing`] (`numa_balancing`), [`numa_maps`], [`smaps`], [`vmstat`].
//!
//! Every failure is an [`Error`] naming the syscall or file, the argument or line at fault,
//! the errno, and what to do. Parsers never panic, whatever the input (they are fuzzed:
//! `crates/linux/fuzz`).

#![warn(missing_docs)]

pub mod balancing;
pub mod error;
pub mod node;
pub mod numa_maps;
pub mod numastat;
pub mod parse;
pub mod policy;
pub mod smaps;
pub mod syscalls;
pub mod sysroot;
pub mod thp;
pub mod tiers;
pub mod vmstat;
pub mod weighted_interleave;

pub use error::{Error, ParseError};
pub use policy::{KernelMode, KernelPolicy, MbindFlags, ModeFlags};
pub use syscalls::{
    get_mempolicy, get_range_policy, mbind, mems_allowed, migrate_pages, move_pages,
    move_pages_query, move_pages_to, node_of_address, set_kernel_mempolicy, set_mempolicy,
    set_mempolicy_flags, set_mempolicy_home_node, MovePagesOptions, MoveReport, PageStatus,
};
pub use sysroot::{Pid, SysRoot};
