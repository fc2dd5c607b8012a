//! Shared machinery for the single-threaded kernels (reference/workloads.md §5) and for
//! workloads whose emission is easiest to write as "one unit of work at a time".
//!
//! * [`Unit`] + [`UnitProgram`]: a [`ThreadProgram`] that calls a state machine until the chunk
//!   is full. Each unit (one grid row, one event, one pivot...) appends a bounded number of ops,
//!   so a fill stays near [`CHUNK_OPS`].
//! * [`SingleKernel`] + [`Copies`]: a single-threaded program run as N copies, each a separate
//!   process (its own [`TaskId`] and its own mappings), as §5 and the scenarios of §7.3 / §7.5
//!   run them: pages are first-touched by the copy itself and follow its own memory policy.
//!
//! **NT19**, the source of the SPEC CPU2006 INT kernels' compute constants (instructions and
//! cycles per unit of work): Navarro-Torres, Alastruey-Benedé, Ibáñez-Marín, Viñals-Yúfera,
//! "Memory hierarchy characterization of SPEC CPU2006 and SPEC CPU2017 on the Intel Xeon
//! Skylake-SP", PLOS ONE 14(8): e0220135, 2019; its data repository
//! agusnt/Xeon-SP_Memory_Characterization_SPEC-CPU-2K6-2K17, file
//! `data/XEON_SKL/2K6/MPKI_APKI_CPI_Prefetch.csv`: one copy on a Xeon Gold 5120 (19.25 MB LLC),
//! the columns with the hardware prefetchers off, each figure the mean over the program's
//! reference inputs. APKI (L2 misses per 1000 instructions) sets the instructions, CPI the
//! cycles; MPKI is left to check (`crates/sim/tests/spec_characteristics.rs`).

use crate::emit::CHUNK_OPS;
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, Op, ThreadProgram, ThreadSpec, Workload};
use numalab_core::TaskId;

/// A resumable piece of a thread's work.
pub trait Unit: Send {
    /// Append the ops of the next unit of work (at most a few thousand). Return false once the
    /// thread has nothing more to do (ops appended in that call still run).
    fn unit(&mut self, out: &mut Vec<Op>) -> bool;
}

/// A [`ThreadProgram`] driving a [`Unit`] until each chunk holds [`CHUNK_OPS`] ops.
pub struct UnitProgram<U: Unit> {
    unit: U,
    phase_names: &'static [&'static str],
}

impl<U: Unit> UnitProgram<U> {
    pub fn new(unit: U, phase_names: &'static [&'static str]) -> Self {
        UnitProgram { unit, phase_names }
    }
}

impl<U: Unit> ThreadProgram for UnitProgram<U> {
    fn fill(&mut self, out: &mut Vec<Op>) -> bool {
        while out.len() < CHUNK_OPS {
            if !self.unit.unit(out) {
                return false;
            }
        }
        true
    }

    fn phase_names(&self) -> &'static [&'static str] {
        self.phase_names
    }
}

/// `Op::Compute` with both counts clamped to u32 (a unit's compute is far below that).
#[inline]
pub fn compute(cycles: u64, instructions: u64) -> Op {
    Op::Compute {
        cycles: cycles.min(u32::MAX as u64) as u32,
        instructions: instructions.min(u32::MAX as u64) as u32,
    }
}

/// Sequential runs over the lines that `bytes` bytes from `base` cover, each run at most 2^20
/// lines (an `Op::Run` counts its lines in a u32); nothing for no bytes.
pub fn byte_runs(out: &mut Vec<Op>, base: u64, bytes: u64, kind: AccessKind) {
    let (mut line, end) = (base / 64, (base + bytes).div_ceil(64));
    while line < end {
        let n = (end - line).min(1 << 20);
        out.push(Op::Run {
            base: line * 64,
            lines: n as u32,
            stride_bytes: 64,
            kind,
        });
        line += n;
    }
}

/// One copy of a single-threaded program (reference/workloads.md §5).
pub trait SingleKernel: Send + Sync {
    /// Canonical spec of one copy, `name:key=value,...` (parses back to the same kernel).
    fn spec(&self) -> String;
    /// Map this copy's data for `task` (all its own) and return its program.
    fn build_copy(&self, mem: &mut dyn AddressSpace, task: TaskId) -> Box<dyn ThreadProgram>;
}

/// `copies` copies of one single-threaded kernel, copy c being task c: `lbm-like` run with
/// T threads is T processes side by side (§5 "1 per copy").
pub struct Copies<K: SingleKernel> {
    pub kernel: K,
    pub copies: usize,
}

impl<K: SingleKernel> Copies<K> {
    pub fn new(kernel: K, copies: usize, name: &'static str) -> Result<Self, WorkloadError> {
        if copies == 0 {
            return Err(WorkloadError::Threads {
                workload: name,
                threads: copies,
                why: "each thread is one copy of the program: at least one is needed".into(),
            });
        }
        Ok(Copies { kernel, copies })
    }
}

impl<K: SingleKernel> Workload for Copies<K> {
    fn name(&self) -> String {
        self.kernel.spec()
    }

    fn threads(&self) -> usize {
        self.copies
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        (0..self.copies)
            .map(|c| {
                let task = TaskId(c as u32);
                ThreadSpec {
                    task,
                    program: self.kernel.build_copy(mem, task),
                }
            })
            .collect()
    }
}

/// The `scale` key shared by the §5 kernels: a factor in (0, 1] shrinking the data (and so the
/// work per step); runs using it must report it (§0 "size knob").
pub fn scale(p: &Params) -> Result<f64, WorkloadError> {
    p.float_in("scale", 1.0, 0.0, 1.0)
}

/// `round(n · scale)`, at least `min`.
pub fn scaled(n: u64, scale: f64, min: u64) -> u64 {
    ((n as f64 * scale).round() as u64).max(min)
}

/// `,scale=x` when it is not 1, for canonical names.
pub fn scale_suffix(scale: f64) -> String {
    if scale < 1.0 {
        format!(",scale={scale}")
    } else {
        String::new()
    }
}

/// Ops computed ahead by a unit whose work is not bounded (a tree update touching a whole
/// subtree), handed out a chunk at a time.
#[derive(Default)]
pub struct Backlog {
    ops: Vec<Op>,
    pos: usize,
}

impl Backlog {
    pub fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.ops.len()
    }

    /// Move up to [`CHUNK_OPS`] ops to `out`; true while some are left.
    pub fn drain(&mut self, out: &mut Vec<Op>) -> bool {
        let n = (self.ops.len() - self.pos).min(CHUNK_OPS);
        out.extend_from_slice(&self.ops[self.pos..self.pos + n]);
        self.pos += n;
        if self.pos >= self.ops.len() {
            self.ops.clear();
            self.pos = 0;
            return false;
        }
        true
    }
}

/// Which thread runs each iteration of a `schedule(dynamic)` loop with chunk 1
/// (reference/workloads.md §0): iterations are handed out in order to whichever thread asks
/// first. The workload cannot see simulated clocks, so each thread's clock is estimated: it
/// starts at a seeded jitter of up to one mean iteration (threads arrive at the loop at
/// slightly different times) and advances by each iteration's estimated `cost`. A different
/// `seed` per loop instance changes the map from one instance to the next, as real runs do.
/// Returns, per thread, its iterations in the order it runs them.
pub fn dynamic_schedule(costs: &[u64], threads: usize, seed: u64) -> Vec<Vec<u32>> {
    let threads = threads.max(1);
    let mean = (costs.iter().sum::<u64>() / costs.len().max(1) as u64).max(1);
    let mut r = crate::emit::SplitMix64::new(seed);
    let mut clock: Vec<u64> = (0..threads).map(|_| r.below(mean + 1)).collect();
    let mut out = vec![Vec::new(); threads];
    for (i, &c) in costs.iter().enumerate() {
        // the earliest thread asks first; ties go to the lower id
        let t = (0..threads)
            .min_by_key(|&t| (clock[t], t))
            .expect("threads >= 1");
        out[t].push(i as u32);
        clock[t] += c.max(1);
    }
    out
}
