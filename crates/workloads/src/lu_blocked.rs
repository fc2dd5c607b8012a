//! `lu-blocked`: the threaded blocked LU factorisation of Goglin & Furmento (GF09),
//! reference/workloads.md §4.1 and the scenario of §7.2.
//!
//! One N × N row-major matrix of doubles in b × b blocks (nb = N/b per dimension); a block is b
//! row segments of 8b bytes, N·8 bytes apart. The matrix is placed with MPOL_INTERLEAVE over
//! `interleave` nodes (GF09's best static placement; 0 leaves it to the task policy) and
//! written once by a static parallel loop over rows. Step k = 0..nb−1:
//!
//! 0. **next-touch hook**: the step begins with `Op::Phase { id: PHASE_FACTOR }`; an engine
//!    that marks the matrix (at least its trailing part) migrate-on-next-touch at this phase
//!    boundary reproduces GF09's next-touch runs (see `NEXT_TOUCH_HOOK`);
//! 1. thread 0 factors A[k][k] (getrf: b³ work);
//! 2. `omp parallel for` over j > k: A[k][j] ← L_kk⁻¹·A[k][j] (trsm);
//! 3. `omp parallel for` over i > k: A[i][k] ← A[i][k]·U_kk⁻¹ (trsm);
//! 4. `omp parallel for` over the trailing blocks (i, j > k): A[i][j] −= A[i][k]·A[k][j] (gemm:
//!    read two blocks, read-modify-write the third).
//!
//! Each loop ends with a barrier. The block → thread map is libgomp's static split of each
//! loop's current trip count (`map=static`: it shifts from step to step as the count shrinks) or
//! a seeded shuffle per loop instance (`map=random`); GF09 notes nothing guarantees a mapping.

use crate::emit::{static_range, Gen, Script, SplitMix64, Status, CHUNK_OPS};
use crate::kernel::compute;
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload};
use numalab_core::{MemPolicy, NodeMask, TaskId};

pub const NAME: &str = "lu-blocked";
pub const KEYS: &[&str] = &["n", "b", "map", "interleave", "steps", "seed"];
pub const DESCRIPTION: &str = "Blocked LU factorisation (Goglin & Furmento): getrf on the diagonal block, two trsm loops, trailing gemm loop, per-step phase marker for next-touch (§4.1). \
keys: n=matrix order (8192), b=block size (256), map=static|random (static), interleave=nodes to interleave over, 0 for the task policy (4, GF09's machine), steps=steps to run (all n/b), seed=1";

pub const PHASES: &[&str] = &["init", "factor", "trsm-row", "trsm-col", "gemm"];
pub const PHASE_INIT: u16 = 0;
/// Begins every step k: the next-touch hook of GF09.
pub const PHASE_FACTOR: u16 = 1;
pub const PHASE_TRSM_ROW: u16 = 2;
pub const PHASE_TRSM_COL: u16 = 3;
pub const PHASE_GEMM: u16 = 4;
/// The phase at whose start GF09 marks the matrix migrate-on-next-touch.
pub const NEXT_TOUCH_HOOK: u16 = PHASE_FACTOR;
/// Double-precision flops per cycle of the BLAS kernels (SSE2 on the Opteron 8347HE: 4, E).
pub const FLOPS_PER_CYCLE: u64 = 4;

#[derive(Clone, Debug, PartialEq)]
pub struct LuBlocked {
    pub n: u64,
    pub b: u64,
    pub random_map: bool,
    pub interleave: u16,
    pub steps: u64,
    pub seed: u64,
    pub threads: usize,
}

impl LuBlocked {
    pub fn from_params(p: &Params, threads: usize) -> Result<LuBlocked, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "lu-blocked needs at least one thread".into(),
            });
        }
        let n = p.uint_in("n", 8192, 1, 1 << 20)?;
        // GF09 used 64..1024; a block op emits 3·b row segments, which must fit a chunk
        let b = p.uint_in("b", 256, 8, 1024)?;
        if n % b != 0 || b % 8 != 0 {
            return Err(WorkloadError::Invalid {
                workload: NAME,
                why: format!(
                    "b={b} must divide n={n} and be a multiple of 8 (a row segment is whole lines)"
                ),
            });
        }
        let random_map = p.choice("map", &["static", "random"], 0)? == 1;
        let interleave = p.uint_in("interleave", 4, 0, 256)? as u16;
        let steps = p.uint_in("steps", n / b, 0, n / b)?;
        let seed = p.uint("seed", 1)?;
        Ok(LuBlocked {
            n,
            b,
            random_map,
            interleave,
            steps,
            seed,
            threads,
        })
    }

    pub fn nb(&self) -> u64 {
        self.n / self.b
    }

    /// Iterations of a `parallel for` of `count` iterations that thread t runs.
    fn share(&self, count: u64, t: usize, instance: u64) -> Vec<u64> {
        if !self.random_map {
            let (lo, hi) = static_range(count, self.threads, t);
            return (lo..hi).collect();
        }
        let mut it: Vec<u64> = (0..count).collect();
        let mut r = SplitMix64::new(self.seed ^ instance.wrapping_mul(0x9E37_79B9));
        for i in (1..it.len()).rev() {
            it.swap(i, r.below(i as u64 + 1) as usize);
        }
        let (lo, hi) = static_range(count, self.threads, t);
        it[lo as usize..hi as usize].to_vec()
    }
}

impl Workload for LuBlocked {
    fn name(&self) -> String {
        format!(
            "{NAME}:n={},b={},map={},interleave={},steps={},seed={}",
            self.n,
            self.b,
            if self.random_map { "random" } else { "static" },
            self.interleave,
            self.steps,
            self.seed
        )
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let task = TaskId(0);
        let opts = MapOptions {
            policy: (self.interleave > 0).then(|| MemPolicy::Interleave {
                nodes: NodeMask::first_n(self.interleave as usize),
            }),
            ..Default::default()
        };
        let a = mem.mmap(task, "lu.matrix", self.n * self.n * 8, opts);
        let nb = self.nb();
        (0..self.threads)
            .map(|t| {
                let mut s = Script::new(PHASES);
                s.phase(PHASE_INIT);
                let (lo, hi) = static_range(self.n, self.threads, t);
                s.streams(
                    &[crate::emit::Span::elems(
                        a,
                        lo * self.n,
                        hi * self.n,
                        8,
                        AccessKind::Write,
                    )],
                    (hi - lo) * self.n,
                    (hi - lo) * self.n,
                );
                s.barrier();
                for k in 0..self.steps {
                    let rest = nb - k - 1;
                    s.phase(PHASE_FACTOR);
                    let blk = |i, j, kind| (i, j, kind);
                    if t == 0 {
                        s.gen(Blocks::new(
                            self,
                            a,
                            vec![vec![blk(k, k, AccessKind::ReadModifyWrite)]],
                            2 * self.b.pow(3) / 3,
                        ));
                    }
                    s.barrier();
                    s.phase(PHASE_TRSM_ROW);
                    let work: Vec<_> = self
                        .share(rest, t, 3 * k)
                        .into_iter()
                        .map(|j| {
                            vec![
                                blk(k, k, AccessKind::Read),
                                blk(k, k + 1 + j, AccessKind::ReadModifyWrite),
                            ]
                        })
                        .collect();
                    s.gen(Blocks::new(self, a, work, self.b.pow(3)));
                    s.barrier();
                    s.phase(PHASE_TRSM_COL);
                    let work: Vec<_> = self
                        .share(rest, t, 3 * k + 1)
                        .into_iter()
                        .map(|i| {
                            vec![
                                blk(k, k, AccessKind::Read),
                                blk(k + 1 + i, k, AccessKind::ReadModifyWrite),
                            ]
                        })
                        .collect();
                    s.gen(Blocks::new(self, a, work, self.b.pow(3)));
                    s.barrier();
                    s.phase(PHASE_GEMM);
                    let work: Vec<_> = self
                        .share(rest * rest, t, 3 * k + 2)
                        .into_iter()
                        .map(|x| {
                            let (i, j) = (k + 1 + x / rest, k + 1 + x % rest);
                            vec![
                                blk(i, k, AccessKind::Read),
                                blk(k, j, AccessKind::Read),
                                blk(i, j, AccessKind::ReadModifyWrite),
                            ]
                        })
                        .collect();
                    s.gen(Blocks::new(self, a, work, 2 * self.b.pow(3)));
                    s.barrier();
                }
                ThreadSpec {
                    task,
                    program: Box::new(s),
                }
            })
            .collect()
    }
}

/// A list of block operations, each touching a few blocks row segment by row segment.
struct Blocks {
    a: u64,
    n: u64,
    b: u64,
    /// Per operation: (block row, block column, access) of each block it touches.
    work: Vec<Vec<(u64, u64, AccessKind)>>,
    flops: u64,
    next: usize,
}

impl Blocks {
    fn new(lu: &LuBlocked, a: u64, work: Vec<Vec<(u64, u64, AccessKind)>>, flops: u64) -> Blocks {
        Blocks {
            a,
            n: lu.n,
            b: lu.b,
            work,
            flops,
            next: 0,
        }
    }
}

impl Gen for Blocks {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        while self.next < self.work.len() {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            for &(bi, bj, kind) in &self.work[self.next] {
                // b row segments of 8b bytes, N·8 apart (too far apart for one strided run)
                for r in 0..self.b {
                    out.push(Op::Run {
                        base: self.a + ((bi * self.b + r) * self.n + bj * self.b) * 8,
                        lines: (self.b * 8 / 64) as u32,
                        stride_bytes: 64,
                        kind,
                    });
                }
            }
            out.push(compute(self.flops / FLOPS_PER_CYCLE, self.flops / 2));
            self.next += 1;
        }
        Status::Done
    }
}
