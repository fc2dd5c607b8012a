//! Newtype ids, so a node can never be passed where a CPU is expected.

use serde::{Deserialize, Serialize};
use std::fmt;

/// CPU ids at or above this are rejected by every CPU-list parser: far beyond any kernel's
/// NR_CPUS (8192 on x86-64 MAXSMP), and it bounds the memory a hostile list like
/// `0-4294967295` could make a parser allocate.
pub const MAX_CPU_ID: u32 = 1 << 16;

macro_rules! id_newtype {
    ($(#[$m:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$m])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl $name {
            #[inline]
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl From<$inner> for $name {
            fn from(v: $inner) -> Self {
                $name(v)
            }
        }
    };
}

id_newtype!(
    /// A NUMA node: one memory controller and the CPUs attached to it (may be CPU-less).
    NodeId(u16), "node"
);
id_newtype!(
    /// A logical CPU (hardware thread), numbered as the OS numbers it.
    CpuId(u32), "cpu"
);
id_newtype!(
    /// A schedulable thread of a simulated or real task.
    ThreadId(u32), "thread"
);
id_newtype!(
    /// A task, i.e. an address space (a process).
    TaskId(u32), "task"
);
