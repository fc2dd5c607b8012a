//! Looking at a workload without simulating it: a bump-allocator [`AddressSpace`] and a
//! summary of the ops a thread program emits (used by the tests and the `op_counts` example).

use numalab_core::workload::{
    static_layout, AccessKind, AddressSpace, MapOptions, Op, StaticArray, ThreadSpec, LINE_BYTES,
};
use numalab_core::{PageSize, TaskId};
use std::collections::BTreeMap;

/// One mapping made through [`BumpSpace`].
#[derive(Clone, Debug)]
pub struct Mapping {
    pub task: TaskId,
    pub name: String,
    pub start: u64,
    pub bytes: u64,
    pub opts: MapOptions,
    /// A file in the page cache ([`AddressSpace::mmap_file`]), not anonymous memory.
    pub file: bool,
}

/// Hands out addresses upwards, 2 MiB aligned (1 GiB for 1G hugetlb), with a guard gap between
/// mappings so that an overrun lands outside every mapping.
#[derive(Clone, Debug)]
pub struct BumpSpace {
    pub mappings: Vec<Mapping>,
    next: u64,
}

impl Default for BumpSpace {
    fn default() -> Self {
        BumpSpace {
            mappings: Vec::new(),
            next: 1 << 32,
        }
    }
}

impl BumpSpace {
    pub fn new() -> Self {
        Self::default()
    }

    /// The mapping of `task` containing `addr`.
    pub fn find(&self, task: TaskId, addr: u64) -> Option<&Mapping> {
        self.find_index(task, addr).map(|i| &self.mappings[i])
    }

    fn find_index(&self, task: TaskId, addr: u64) -> Option<usize> {
        // mappings are made in increasing address order
        let i = self
            .mappings
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        let m = &self.mappings[i];
        (m.task == task && addr < m.start + m.bytes).then_some(i)
    }

    pub fn by_name(&self, name: &str) -> Option<&Mapping> {
        self.mappings.iter().find(|m| m.name == name)
    }
}

impl AddressSpace for BumpSpace {
    fn mmap(&mut self, task: TaskId, name: &str, bytes: u64, opts: MapOptions) -> u64 {
        let align = if opts.hugetlb == Some(PageSize::Giant1G) {
            1 << 30
        } else {
            2 << 20
        };
        let start = self.next.div_ceil(align) * align;
        self.next = start + bytes.max(1) + (2 << 20);
        self.mappings.push(Mapping {
            task,
            name: name.to_string(),
            start,
            bytes,
            opts,
            file: false,
        });
        start
    }

    fn mmap_file(&mut self, task: TaskId, name: &str, bytes: u64) -> u64 {
        let start = self.mmap(task, name, bytes, MapOptions::default());
        if let Some(m) = self.mappings.last_mut() {
            m.file = true;
        }
        start
    }

    /// As the simulator lays the segment out, but every array is a mapping of its own name
    /// (adjacent, the guard gap after the segment only), so that references are counted per
    /// array.
    fn mmap_static(
        &mut self,
        task: TaskId,
        segment: &str,
        arrays: &[StaticArray],
        opts: MapOptions,
    ) -> Vec<u64> {
        let (offsets, bytes) = static_layout(arrays);
        let base = self.mmap(task, segment, bytes, opts.clone());
        self.mappings.pop();
        for (a, &o) in arrays.iter().zip(&offsets) {
            self.mappings.push(Mapping {
                task,
                name: a.name.to_string(),
                start: base + o,
                bytes: a.bytes,
                opts: opts.clone(),
                file: false,
            });
        }
        offsets.into_iter().map(|o| base + o).collect()
    }

    /// Test and inspection tooling only (the simulator reports this as an error): there is
    /// no run to stop, so say what could not be allocated.
    fn host_memory_refused(&mut self, what: &str, bytes: u64) {
        panic!("the host could not allocate {bytes} bytes for {what}");
    }
}

/// What one thread program emitted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadSummary {
    pub ops: u64,
    /// `Op::Access` ops, `Op::Run` ops and `Op::Gather` ops.
    pub access_ops: u64,
    pub run_ops: u64,
    pub gather_ops: u64,
    /// Line references (accesses, the lines of runs and the elements of gathers), in total
    /// and by kind.
    pub lines: u64,
    pub reads: u64,
    pub writes: u64,
    pub rmws: u64,
    /// Of those, the locked ones (`AccessKind::Atomic`).
    pub atomics: u64,
    /// Dependent reads and their siblings (`AccessKind::dependent`).
    pub dependent_reads: u64,
    /// Of those, the siblings (`AccessKind::SiblingRead`).
    pub sibling_reads: u64,
    pub barriers: u64,
    /// Pages the program's own move_pages calls name (`Op::MovePages`).
    pub move_pages_pages: u64,
    pub compute_cycles: u64,
    pub compute_instructions: u64,
    /// Phase ids in the order they were emitted.
    pub phases: Vec<u16>,
    /// Line references per phase id.
    pub lines_per_phase: BTreeMap<u16, u64>,
    /// Line references per mapping name.
    pub lines_per_mapping: BTreeMap<String, u64>,
    /// Line references outside every mapping of the thread's task (must be 0).
    pub out_of_range: u64,
    /// `fill` calls, and the most ops one call appended.
    pub fills: u64,
    pub max_fill_ops: usize,
    /// Line references per mapping index, folded into `lines_per_mapping` at the end.
    per_mapping: Vec<u64>,
    current_phase: Option<u16>,
}

impl ThreadSummary {
    fn count(
        &mut self,
        space: &BumpSpace,
        task: TaskId,
        addr: u64,
        lines: u64,
        stride: u64,
        kind: AccessKind,
    ) {
        self.lines += lines;
        match kind {
            AccessKind::Read => self.reads += lines,
            AccessKind::Write => self.writes += lines,
            AccessKind::ReadModifyWrite => self.rmws += lines,
            AccessKind::Atomic => {
                self.rmws += lines;
                self.atomics += lines;
            }
            AccessKind::DependentRead => self.dependent_reads += lines,
            AccessKind::SiblingRead => {
                self.dependent_reads += lines;
                self.sibling_reads += lines;
            }
        }
        if let Some(p) = self.current_phase {
            *self.lines_per_phase.entry(p).or_default() += lines;
        }
        let last = addr + (lines - 1) * stride;
        match (space.find_index(task, addr), space.find_index(task, last)) {
            (Some(i), Some(i2)) if i == i2 => {
                if self.per_mapping.len() <= i {
                    self.per_mapping.resize(i + 1, 0);
                }
                self.per_mapping[i] += lines;
            }
            _ => self.out_of_range += lines,
        }
    }
}

/// Run a thread's program to completion (or until `max_ops`), summarising its ops.
pub fn summarize(spec: &mut ThreadSpec, space: &BumpSpace, max_ops: Option<u64>) -> ThreadSummary {
    let mut s = ThreadSummary::default();
    let mut buf = Vec::with_capacity(8192);
    let table = spec.program.gather_table();
    loop {
        buf.clear();
        let more = spec.program.fill(&mut buf);
        s.fills += 1;
        s.max_fill_ops = s.max_fill_ops.max(buf.len());
        for op in &buf {
            s.ops += 1;
            match *op {
                Op::Access { addr, kind } => {
                    s.access_ops += 1;
                    s.count(space, spec.task, addr, 1, LINE_BYTES, kind);
                }
                Op::Run {
                    base,
                    lines,
                    stride_bytes,
                    kind,
                } => {
                    s.run_ops += 1;
                    if lines > 0 {
                        s.count(
                            space,
                            spec.task,
                            base,
                            lines as u64,
                            stride_bytes as u64,
                            kind,
                        );
                    }
                }
                Op::Gather { .. } => {
                    s.gather_ops += 1;
                    for (addr, kind) in op.accesses(table.as_ref()) {
                        s.count(space, spec.task, addr, 1, LINE_BYTES, kind);
                    }
                }
                Op::Compute {
                    cycles,
                    instructions,
                } => {
                    s.compute_cycles += cycles as u64;
                    s.compute_instructions += instructions as u64;
                }
                Op::Barrier => s.barriers += 1,
                Op::MovePages { pages, .. } => s.move_pages_pages += pages as u64,
                Op::Phase { id } => {
                    s.phases.push(id);
                    s.current_phase = Some(id);
                }
            }
        }
        if !more || max_ops.is_some_and(|m| s.ops >= m) {
            for (i, l) in std::mem::take(&mut s.per_mapping).into_iter().enumerate() {
                if l > 0 {
                    *s.lines_per_mapping
                        .entry(space.mappings[i].name.clone())
                        .or_default() += l;
                }
            }
            return s;
        }
    }
}
