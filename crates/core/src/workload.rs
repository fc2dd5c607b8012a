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
    /// A read whose address depends on an earlier read but not on the dependent read just
    /// before it: it issues alongside that read, and their misses overlap (the two children
    /// a heap's sift-down compares, both reached through pointers loaded together; the next
    /// step of a second chain walked in step with the first). The engine charges it only
    /// the time it lasts beyond the dependent reads it issued with (docs/model.md,
    /// "Compute and memory overlap").
    SiblingRead = 4,
    /// A locked read-modify-write (`lock cmpxchg`, `lock xadd`, `xchg`: a lock's acquire and
    /// release, an atomic counter). It is a full fence: it waits until every earlier load has
    /// its data and every earlier store has drained, and no later access issues before it
    /// completes, so its own miss overlaps nothing (Intel SDM vol. 3A §8.1.2: "locked
    /// operations serialize all outstanding load and store operations (that is, wait for them
    /// to complete)"; §8.2.3.9; Schweizer, Besta & Hoefler, PACT 2015: atomics prevent any
    /// instruction-level parallelism even without dependences). docs/model.md, "Atomics".
    Atomic = 5,
}

impl AccessKind {
    #[inline]
    pub fn writes(self) -> bool {
        matches!(
            self,
            AccessKind::Write | AccessKind::ReadModifyWrite | AccessKind::Atomic
        )
    }

    /// Whether its address comes from an earlier load, so that it cannot issue before that
    /// load's data arrives (a dependent read or its sibling).
    #[inline]
    pub fn dependent(self) -> bool {
        matches!(self, AccessKind::DependentRead | AccessKind::SiblingRead)
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
    /// `count` accesses of an indexed gather (or scatter): access `i` goes to
    /// `base + (index[first + i] << elem_shift)`, where `index` and `elem_shift` are the
    /// program's [`GatherTable`] ([`ThreadProgram::gather_table`]). Sparse kernels emit one
    /// per row instead of an `Access` per element: the indices are the program's own array
    /// (CG's `colidx`), so nothing is copied and the engine walks them in a tight loop.
    Gather {
        base: u64,
        first: u32,
        count: u16,
        kind: AccessKind,
    },
    /// Core work between memory references: `cycles` of compute retiring `instructions`.
    Compute { cycles: u32, instructions: u32 },
    /// Wait until every thread of the task reached its next barrier (an OpenMP barrier).
    Barrier,
    /// A phase boundary (`id` is the workload's phase number); timings are kept per phase and
    /// next-touch / lazy-migration hooks fire here.
    Phase { id: u16 },
    /// The program's own `move_pages(2)` call: the `pages` 4 KiB pages from `base` (page
    /// aligned) to node `node`. The calling thread runs it: its time, copies and TLB
    /// shootdowns are the thread's, as a policy's call made from a thread's hook is.
    MovePages { base: u64, pages: u32, node: u16 },
}

/// The index array that a program's [`Op::Gather`]s read: element `i` of a gather is at
/// `base + (index[first + i] << elem_shift)` (`elem_shift` 3 for `f64` elements).
#[derive(Clone, Debug, PartialEq)]
pub struct GatherTable {
    pub index: std::sync::Arc<[u32]>,
    pub elem_shift: u8,
}

impl GatherTable {
    /// The addresses of a gather over this table.
    pub fn addresses(&self, base: u64, first: u32, count: u16) -> impl Iterator<Item = u64> + '_ {
        let (lo, shift) = (first as usize, self.elem_shift);
        self.index[lo..lo + count as usize]
            .iter()
            .map(move |&i| base + ((i as u64) << shift))
    }
}

impl Op {
    /// The (address, kind) of every access this op makes, in order: one for `Access`, `lines`
    /// for `Run`, `count` for `Gather` (through `table`, the program's gather table), none
    /// for the others. For tests and inspection; the engine does not go through it.
    ///
    /// Panics on a `Gather` without a table or with indices outside it.
    pub fn accesses<'a>(
        &self,
        table: Option<&'a GatherTable>,
    ) -> Box<dyn Iterator<Item = (u64, AccessKind)> + 'a> {
        match *self {
            Op::Access { addr, kind } => Box::new(std::iter::once((addr, kind))),
            Op::Run {
                base,
                lines,
                stride_bytes,
                kind,
            } => Box::new((0..lines as u64).map(move |i| (base + i * stride_bytes as u64, kind))),
            Op::Gather {
                base,
                first,
                count,
                kind,
            } => {
                let t = table.expect("an Op::Gather needs the program's gather table");
                Box::new(t.addresses(base, first, count).map(move |a| (a, kind)))
            }
            Op::Compute { .. } | Op::Barrier | Op::Phase { .. } | Op::MovePages { .. } => {
                Box::new(std::iter::empty())
            }
        }
    }
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
    /// 1 GiB aligned for 1G hugetlb). Pages are populated at first touch. A mapping the
    /// machine refuses (larger than its memory) is reported by the runner once the workload
    /// is built; [`refused`](Self::refused) says so at once.
    fn mmap(&mut self, task: TaskId, name: &str, bytes: u64, opts: MapOptions) -> u64;

    /// Map `bytes` of a file that is already in the page cache, MAP_PRIVATE, as a program
    /// mmaps its input (Metis' `mmap(fd, PROT_READ | PROT_WRITE, MAP_PRIVATE)`). The file was
    /// read before the run by the task's first thread, so its pages sit where that thread's
    /// node and the task policy put them; they are 4 KiB pages whatever THP and hugetlb say
    /// (Linux maps regular files' page cache with base pages), and a first access is a
    /// minor fault that maps the cached page: no allocation, no zeroing. The program only
    /// reads it: the model has no copy-on-write, so a workload must not write a file
    /// mapping. Returns its start address (2 MiB aligned).
    fn mmap_file(&mut self, task: TaskId, name: &str, bytes: u64) -> u64;

    /// Whether a mapping was refused: a workload checks it before preparing host-side data
    /// sized by its mappings (a pointer chase's permutation), which the run will not use.
    fn refused(&self) -> bool {
        false
    }

    /// The host could not allocate `bytes` for the workload's own host-side data (`what`, e.g.
    /// a pointer chase's visiting order): the run stops with an error naming the size rather
    /// than aborting the process, and [`refused`](Self::refused) says so from then on.
    fn host_memory_refused(&mut self, what: &str, bytes: u64);

    /// Map a program's static arrays as the compiler and linker lay them out in its `.bss`
    /// (Fortran COMMON blocks, C globals): one anonymous mapping named `segment`, every array
    /// at the next multiple of its `align` after the previous one and no gap beyond that, so
    /// that pages, huge pages included, straddle neighbouring arrays. Returns each array's
    /// start. An address space that keeps names may record the arrays as parts of the mapping.
    fn mmap_static(
        &mut self,
        task: TaskId,
        segment: &str,
        arrays: &[StaticArray],
        opts: MapOptions,
    ) -> Vec<u64> {
        let (offsets, bytes) = static_layout(arrays);
        let base = self.mmap(task, segment, bytes, opts);
        offsets.into_iter().map(|o| base + o).collect()
    }
}

/// One array of a static segment ([`AddressSpace::mmap_static`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StaticArray<'a> {
    pub name: &'a str,
    pub bytes: u64,
    /// Where it may start: its element size inside a COMMON block, or the block's own
    /// alignment for the first array of a block.
    pub align: u64,
}

impl<'a> StaticArray<'a> {
    pub fn new(name: &'a str, bytes: u64, align: u64) -> Self {
        StaticArray { name, bytes, align }
    }
}

/// [`AddressSpace::mmap_static`] for a fixed number of arrays: their starts as an array.
pub fn map_static<const N: usize>(
    mem: &mut dyn AddressSpace,
    task: TaskId,
    segment: &str,
    arrays: &[StaticArray; N],
    opts: MapOptions,
) -> [u64; N] {
    let starts = mem.mmap_static(task, segment, arrays, opts);
    // mmap_static returns one start per array
    std::array::from_fn(|i| starts[i])
}

/// The offset of every array of a static segment from its start, and the segment's size.
pub fn static_layout(arrays: &[StaticArray]) -> (Vec<u64>, u64) {
    let mut end = 0u64;
    let offsets = arrays
        .iter()
        .map(|a| {
            let at = end.div_ceil(a.align.max(1)) * a.align.max(1);
            end = at + a.bytes;
            at
        })
        .collect();
    (offsets, end)
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
    /// The index array of this program's [`Op::Gather`]s (asked once, before the first
    /// `fill`). A program that emits no `Gather` has none.
    fn gather_table(&self) -> Option<GatherTable> {
        None
    }
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
    /// Placement the workload asks for its own tasks and threads (a mix's per-program
    /// `mempolicy=` and `cpus=`), as of the last `build`; the runner resolves it against the
    /// machine and it overrides the run's task policy and pinning for those tasks and threads.
    fn placements(&self) -> Placements {
        Placements::default()
    }
}

/// Per-task memory policies and per-thread CPU lists a workload asks for (specs as the
/// command line writes them: `bind:1`, `remote-percent:40`, `0-5,12`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placements {
    /// (task, memory policy spec): the task's policy (`set_mempolicy`) instead of the run's.
    pub task_policies: Vec<(TaskId, String)>,
    /// (thread index in build order, CPU list, k): the thread runs on the list's k-th CPU
    /// (modulo its length) and may run on any CPU of the list (its affinity). The list is a
    /// CPU list (`0-5,12`) or `node:N`, the CPUs of node N.
    pub thread_cpus: Vec<(usize, String, usize)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_stays_small() {
        assert!(std::mem::size_of::<Op>() <= 16);
    }

    #[test]
    fn static_arrays_follow_each_other_at_their_alignment() {
        // a COMMON block of 4-byte ints, then one of doubles starting on a line
        let arrays = [
            StaticArray::new("a", 12, 4),
            StaticArray::new("b", 10, 4),
            StaticArray::new("c", 8, 64),
            StaticArray::new("d", 0, 8),
            StaticArray::new("e", 16, 8),
        ];
        let (offsets, bytes) = static_layout(&arrays);
        assert_eq!(offsets, vec![0, 12, 64, 72, 72]);
        assert_eq!(bytes, 88);
    }

    #[test]
    fn gather_addresses_follow_the_table() {
        let t = GatherTable {
            index: vec![5, 0, 7, 2].into(),
            elem_shift: 3,
        };
        let op = Op::Gather {
            base: 0x1000,
            first: 1,
            count: 3,
            kind: AccessKind::Read,
        };
        let got: Vec<_> = op.accesses(Some(&t)).collect();
        assert_eq!(
            got,
            vec![
                (0x1000, AccessKind::Read),
                (0x1000 + 7 * 8, AccessKind::Read),
                (0x1000 + 2 * 8, AccessKind::Read)
            ]
        );
        let run = Op::Run {
            base: 64,
            lines: 2,
            stride_bytes: 128,
            kind: AccessKind::Write,
        };
        assert_eq!(
            run.accesses(None).collect::<Vec<_>>(),
            vec![(64, AccessKind::Write), (192, AccessKind::Write)]
        );
        assert_eq!(Op::Barrier.accesses(None).count(), 0);
    }
}
