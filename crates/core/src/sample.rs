//! One memory-access sample, as an IBS/PEBS-like sampler delivers it. The simulator, the Linux
//! sampler and perf.data ingestion all produce this type, so policies and the analyzer see
//! one format.

use crate::ids::{CpuId, NodeId, TaskId, ThreadId};
use crate::page::PageSize;
use serde::{Deserialize, Serialize};

/// Where the access was served from (perf's `data_src` mem_lvl, coarsened).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataSource {
    /// The core's private caches (L1/L2).
    PrivateCache,
    /// The LLC of the accessing CPU's node.
    LocalLlc,
    /// A cache of another node (remote HITM or forward).
    RemoteCache,
    LocalDram,
    RemoteDram,
}

impl DataSource {
    pub fn is_dram(self) -> bool {
        matches!(self, DataSource::LocalDram | DataSource::RemoteDram)
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AccessSample {
    pub time_ns: u64,
    pub task: TaskId,
    pub thread: ThreadId,
    pub cpu: CpuId,
    /// Node of the accessing CPU.
    pub cpu_node: NodeId,
    /// Virtual data address.
    pub addr: u64,
    /// Node holding the page at the time of the access.
    pub page_node: NodeId,
    pub page_size: PageSize,
    pub source: DataSource,
    pub latency_ns: f32,
    pub write: bool,
}

impl AccessSample {
    pub fn is_local(&self) -> bool {
        self.cpu_node == self.page_node
    }
}
