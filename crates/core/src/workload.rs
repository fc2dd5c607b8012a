//! The access-emitting interface between workloads and the simulator.
//!
//! A workload allocates its data through an [`AddressSpace`] (mmap-like) and returns one
//! [`ThreadProgram`] per thread. The engine pulls [`Op`]s from a program in chunks, so a
//! workload is a resumable state machine that walks its real data structures and emits one
//! reference per 64-byte line (or a run of lines for stride loops).

use crate::ids::TaskId;
use crate::mempolicy::MemPolicy;
use crate::page::PageSize;

pub const LINE_BYTES: u64 = 64;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AccessKind {
    Read = 0,
    Write = 1,
    /// Read-modify-write of the same line (one read for ownership, line left dirty).
    ReadModifyWrite = 2,
    /// A read whose address depends on the previous read (pointer chasing): no overlap.
    DependentRead = 3,
}

impl AccessKind {
    #[inline]
    pub fn writes(self) -> bool {
        matches!(self, AccessKind::Write | AccessKind::ReadModifyWrite)
    }
}

/// One step of a thread. Kept small (16 bytes): the engine's hot loop walks millions of them.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Op {
    /// One access to the line containing `addr`.
    Access { addr: u64, kind: AccessKind },
    /// `lines` accesses starting at `base`, `stride_bytes` apart (stride-1 loops: 64).
    Run {
        base: u64,
        lines: u32,
        stride_bytes: u16,
        kind: AccessKind,
    },
    /// Core work between memory references: `cycles` of compute retiring `instructions`.
    Compute { cycles: u32, instructions: u32 },
    /// Wait until every thread of the task reached its next barrier (an OpenMP barrier).
    Barrier,
    /// A phase boundary (`id` is the workload's phase number); timings are kept per phase and
    /// next-touch / lazy-migration hooks fire here.
    Phase { id: u16 },
}

/// Options of one mapping, like mmap flags plus an immediate mbind/madvise.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MapOptions {
    /// Back the range with pages of this size explicitly (hugetlbfs-like, no THP involved).
    pub hugetlb: Option<PageSize>,
    /// MADV_HUGEPAGE (Some(true)) / MADV_NOHUGEPAGE (Some(false)).
    pub thp_advice: Option<bool>,
    /// A range policy (mbind) that overrides the task policy for this mapping.
    pub policy: Option<MemPolicy>,
}

pub trait AddressSpace {
    /// Map `bytes` of anonymous memory for `task`; returns its start address (2 MiB aligned,
    /// 1 GiB aligned for 1G hugetlb). Pages are populated at first touch.
    fn mmap(&mut self, task: TaskId, name: &str, bytes: u64, opts: MapOptions) -> u64;
}

/// A thread of a workload: the task it belongs to and its program.
pub struct ThreadSpec {
    pub task: TaskId,
    pub program: Box<dyn ThreadProgram>,
}

pub trait ThreadProgram: Send {
    /// Append this thread's next ops to `out` (a few thousand at a time is a good chunk).
    /// Return false once the thread has nothing more to do; ops appended in that same call
    /// still run.
    fn fill(&mut self, out: &mut Vec<Op>) -> bool;
    /// Names of the phases whose ids this program emits, indexed by id (for reports).
    fn phase_names(&self) -> &'static [&'static str] {
        &[]
    }
}

pub trait Workload: Send + Sync {
    /// Canonical name with parameters, e.g. `npb-cg:class=B`.
    fn name(&self) -> String;
    /// Threads the workload runs (all tasks together).
    fn threads(&self) -> usize;
    /// Allocate data and build the per-thread programs.
    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_stays_small() {
        assert!(std::mem::size_of::<Op>() <= 16);
    }
}
