//! `matmul`: the Metis matrix multiply, reference/workloads.md §4.5.
//!
//! C = A × B over n × n matrices (int by default, as Phoenix/Metis' `matrix_mult`; double with
//! `elem=double`). The master writes A and B (their pages all land on its node under first
//! touch). Map tasks are blocks of `rows` rows of A, handed out by the task queue (modelled as
//! `schedule(dynamic)`, [`crate::kernel::dynamic_schedule`]); a task zeroes its rows of C
//! (C is first-touched by the task's thread), then for each block of `kblock` values of k reads
//! those rows of B (so each task reads all of B: B's pages are the shared hot pages of §4.5),
//! the matching piece of its A rows, and updates its C rows (`C[i][:] += A[i][k]·B[k][:]`, the
//! row-wise i-k-j order). The `kblock` sweeps of a C row inside one block hit the private cache
//! and are emitted once per block.

use crate::emit::{static_range, Gen, Script, Span, Status, CHUNK_OPS};
use crate::kernel::{compute, dynamic_schedule};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload};
use numalab_core::TaskId;

pub const NAME: &str = "matmul";
pub const KEYS: &[&str] = &["n", "rows", "kblock", "elem", "init"];
pub const DESCRIPTION: &str = "Metis matrix multiply C = A x B: master-initialised A and B, map tasks of row blocks from a task queue each reading all of B (§4.5). \
keys: n=matrix order (2048, E), rows=rows of A per task (64, E), kblock=k values per pass over a task's C rows (64), elem=int|double (int), init=master|parallel (master)";

pub const PHASES: &[&str] = &["init", "multiply"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_MULTIPLY: u16 = 1;
/// Multiply-adds per cycle (vectorised inner j loop, E).
pub const MACS_PER_CYCLE: u64 = 2;

#[derive(Clone, Debug, PartialEq)]
pub struct Matmul {
    pub n: u64,
    pub rows: u64,
    pub kblock: u64,
    pub elem_bytes: u64,
    pub parallel_init: bool,
    pub threads: usize,
}

impl Matmul {
    pub fn from_params(p: &Params, threads: usize) -> Result<Matmul, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "matmul needs at least one thread".into(),
            });
        }
        let n = p.uint_in("n", 2048, 1, 1 << 20)?;
        let rows = p.uint_in("rows", 64, 1, n)?;
        let kblock = p.uint_in("kblock", 64, 1, n)?;
        let elem_bytes = [4, 8][p.choice("elem", &["int", "double"], 0)?];
        let parallel_init = p.choice("init", &["master", "parallel"], 0)? == 1;
        Ok(Matmul {
            n,
            rows,
            kblock,
            elem_bytes,
            parallel_init,
            threads,
        })
    }

    pub fn tasks(&self) -> u64 {
        self.n.div_ceil(self.rows)
    }

    pub fn matrix_bytes(&self) -> u64 {
        self.n * self.n * self.elem_bytes
    }
}

impl Workload for Matmul {
    fn name(&self) -> String {
        format!(
            "{NAME}:n={},rows={},kblock={},elem={},init={}",
            self.n,
            self.rows,
            self.kblock,
            if self.elem_bytes == 4 {
                "int"
            } else {
                "double"
            },
            if self.parallel_init {
                "parallel"
            } else {
                "master"
            }
        )
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let task = TaskId(0);
        let bytes = self.matrix_bytes();
        let a = mem.mmap(task, "mm.a", bytes, MapOptions::default());
        let b = mem.mmap(task, "mm.b", bytes, MapOptions::default());
        let c = mem.mmap(task, "mm.c", bytes, MapOptions::default());
        let costs = vec![1u64; self.tasks() as usize];
        let sched = dynamic_schedule(&costs, self.threads, 0x6d6d);
        let e = self.elem_bytes;
        let nn = self.n * self.n;
        (0..self.threads)
            .map(|t| {
                let mut s = Script::new(PHASES);
                s.phase(PHASE_INIT);
                let (lo, hi) = if self.parallel_init {
                    static_range(nn, self.threads, t)
                } else if t == 0 {
                    (0, nn)
                } else {
                    (0, 0)
                };
                s.streams(
                    &[
                        Span::elems(a, lo, hi, e, AccessKind::Write),
                        Span::elems(b, lo, hi, e, AccessKind::Write),
                    ],
                    (hi - lo) * 4,
                    (hi - lo) * 6,
                );
                s.barrier();
                s.phase(PHASE_MULTIPLY);
                if !sched[t].is_empty() {
                    s.gen(Tasks {
                        k: self.clone(),
                        abc: [a, b, c],
                        tasks: sched[t].clone(),
                        next: 0,
                        kb: None,
                    });
                }
                s.barrier();
                ThreadSpec {
                    task,
                    program: Box::new(s),
                }
            })
            .collect()
    }
}

/// A thread's map tasks, k block by k block.
struct Tasks {
    k: Matmul,
    abc: [u64; 3],
    tasks: Vec<u32>,
    next: usize,
    /// Next k block of the current task (None: the task has not started).
    kb: Option<u64>,
}

impl Gen for Tasks {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let (n, e) = (self.k.n, self.k.elem_bytes);
        let [a, b, c] = self.abc;
        let run = |sp: Span| Op::Run {
            base: sp.addr,
            lines: sp.lines as u32,
            stride_bytes: 64,
            kind: sp.kind,
        };
        while self.next < self.tasks.len() {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let task = self.tasks[self.next] as u64;
            let (r0, r1) = (task * self.k.rows, ((task + 1) * self.k.rows).min(n));
            let Some(k0) = self.kb else {
                // the task's rows of C start at zero (first touch by this thread)
                out.push(run(Span::elems(c, r0 * n, r1 * n, e, AccessKind::Write)));
                self.kb = Some(0);
                continue;
            };
            let k1 = (k0 + self.k.kblock).min(n);
            out.push(run(Span::elems(b, k0 * n, k1 * n, e, AccessKind::Read)));
            for i in r0..r1 {
                out.push(run(Span::elems(
                    a,
                    i * n + k0,
                    i * n + k1,
                    e,
                    AccessKind::Read,
                )));
                out.push(run(Span::elems(
                    c,
                    i * n,
                    (i + 1) * n,
                    e,
                    AccessKind::ReadModifyWrite,
                )));
            }
            let macs = (r1 - r0) * (k1 - k0) * n;
            out.push(compute(macs / MACS_PER_CYCLE, macs * 2));
            if k1 == n {
                self.kb = None;
                self.next += 1;
            } else {
                self.kb = Some(k1);
            }
        }
        Status::Done
    }
}
