//! `streamcluster`: PARSEC streamcluster, reference/workloads.md §4.2.
//!
//! The stream is processed in chunks of `chunk` points of `dim` floats. For each chunk the
//! **main thread** generates the points into `block` (reused for every chunk) and fills the
//! Point array (weight, coordinate pointer, assigned centre, cost: 32 B) and the per-point
//! flags (`is_center`, `center_table`, `switch_membership`), so under first touch every page
//! sits on the master's node (`init=parallel` lets each thread touch its own points first, the
//! remedy §4.2 mentions). Thread p owns points [p·n/T, (p+1)·n/T).
//!
//! * pspeedy: `speedy` passes in which every thread computes, for its points, the distance to a
//!   newly opened centre and updates the point's assignment and cost;
//! * pFL: `pgains` calls of pgain(x) for random candidates x. Each call: count the centres in
//!   the thread's range (`is_center`), master prefix over the counts, renumber (`center_table`),
//!   zero the thread's slice of `work_mem`; then for each own point read its coordinates and
//!   Point record, the candidate's coordinates (shared, cached), `center_table[assign]`, and
//!   either mark `switch_membership` (the point would move to x) or add to
//!   `lower[center_table[assign]]` in its `work_mem` slice; the master reduces all slices; if
//!   opening x pays, every thread moves its switching points (Point records rewritten).
//!   Barriers separate the steps, as in the pthreads code.
//!
//! The numerics are not carried (the native input is 10^6 points × 128 dimensions and
//! thousands of pgain calls): which points switch and which centre a point is assigned to are
//! drawn from a seeded generator at the rates given by [`SWITCH_SHARE`] and [`GAIN_SHARE`], E.
//! The data-independent part, streaming every coordinate of the thread's points in each call,
//! is what loads the controller.

use crate::emit::{static_range, Gen, Script, Span, SplitMix64, Status, CHUNK_OPS};
use crate::kernel::compute;
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload};
use numalab_core::TaskId;

pub const NAME: &str = "streamcluster";
pub const KEYS: &[&str] = &[
    "input", "dim", "points", "chunk", "centers", "pgains", "speedy", "init", "seed",
];
pub const DESCRIPTION: &str = "PARSEC streamcluster: master-generated point chunks, pspeedy passes, pgain calls streaming each thread's points with barriers (§4.2). \
keys: input=simsmall|simmedium|simlarge|native (native) setting dim, points, chunk, centers (native: 128, 1000000, 200000, 5000), pgains=pgain calls per chunk (1000, E), speedy=pspeedy passes per chunk (20, E), init=master|parallel (master), seed=1";

pub const PHASES: &[&str] = &["generate", "speedy", "pgain"];
pub const PHASE_GENERATE: u16 = 0;
pub const PHASE_SPEEDY: u16 = 1;
pub const PHASE_PGAIN: u16 = 2;

/// (name, dim, points, chunk, max centres) of the PARSEC 3.0 inputs (§4.2, E).
pub const INPUTS: [(&str, u64, u64, u64, u64); 4] = [
    ("simsmall", 32, 4096, 4096, 1000),
    ("simmedium", 64, 8192, 8192, 1000),
    ("simlarge", 128, 16384, 16384, 1000),
    ("native", 128, 1_000_000, 200_000, 5000),
];
/// Point record: weight, coordinate pointer, assignment, cost.
pub const POINT_BYTES: u64 = 32;
/// Share of points that would switch to the candidate in a pgain call (E).
pub const SWITCH_SHARE: f64 = 0.02;
/// Share of pgain calls whose candidate is opened (E).
pub const GAIN_SHARE: f64 = 0.1;
/// Open centres a point may be assigned to (k1..k2 = 10..20 in the run scripts).
pub const OPEN_CENTRES: u64 = 20;
/// A distance is `dim` multiply-adds, SIMD: ≈ dim/8 cycles (§4.2, E).
pub const DIMS_PER_CYCLE: u64 = 8;
/// Points per emission unit.
const POINTS_PER_UNIT: u64 = 256;

#[derive(Clone, Debug, PartialEq)]
pub struct Streamcluster {
    pub dim: u64,
    pub points: u64,
    pub chunk: u64,
    pub centers: u64,
    pub pgains: u64,
    pub speedy: u64,
    pub parallel_init: bool,
    pub seed: u64,
    pub threads: usize,
}

/// Addresses of the arrays.
#[derive(Copy, Clone, Debug)]
struct Maps {
    block: u64,
    points: u64,
    is_center: u64,
    center_table: u64,
    switch: u64,
    work_mem: u64,
}

impl Streamcluster {
    pub fn from_params(p: &Params, threads: usize) -> Result<Streamcluster, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "streamcluster needs at least one thread".into(),
            });
        }
        let names: Vec<&str> = INPUTS.iter().map(|i| i.0).collect();
        let (_, d, n, c, k) = INPUTS[p.choice("input", &names, 3)?];
        let dim = p.uint_in("dim", d, 1, 1 << 16)?;
        let points = p.uint_in("points", n, 1, 1 << 40)?;
        let chunk = p.uint_in("chunk", c.min(points), 1, points)?;
        let centers = p.uint_in("centers", k, 1, 1 << 24)?;
        let pgains = p.uint("pgains", 1000)?;
        let speedy = p.uint("speedy", 20)?;
        let parallel_init = p.choice("init", &["master", "parallel"], 0)? == 1;
        let seed = p.uint("seed", 1)?;
        Ok(Streamcluster {
            dim,
            points,
            chunk,
            centers,
            pgains,
            speedy,
            parallel_init,
            seed,
            threads,
        })
    }

    pub fn block_bytes(&self) -> u64 {
        self.chunk * self.dim * 4
    }

    /// `work_mem` stride per thread: (centres + 2) doubles, padded to a line (PARSEC's CACHE_LINE).
    fn work_stride(&self) -> u64 {
        ((self.centers + 2) * 8).div_ceil(64) * 64
    }

    fn program(&self, m: Maps, t: usize) -> Script {
        let mut s = Script::new(PHASES);
        let nt = self.threads;
        let chunks = self.points.div_ceil(self.chunk);
        let mut r = SplitMix64::new(self.seed ^ (t as u64 + 1).wrapping_mul(0x5c));
        // every thread draws the same candidate and gain sequence (thread 0's stream)
        let mut shared = SplitMix64::new(self.seed ^ 0x5c5c);
        for c in 0..chunks {
            let n = self.chunk.min(self.points - c * self.chunk);
            let (lo, hi) = static_range(n, nt, t);
            s.phase(PHASE_GENERATE);
            let (glo, ghi) = if self.parallel_init {
                (lo, hi)
            } else if t == 0 {
                (0, n)
            } else {
                (0, 0)
            };
            s.streams(
                &[
                    Span::elems(
                        m.block,
                        glo * self.dim,
                        ghi * self.dim,
                        4,
                        AccessKind::Write,
                    ),
                    Span::elems(m.points, glo, ghi, POINT_BYTES, AccessKind::Write),
                    Span::elems(m.is_center, glo, ghi, 1, AccessKind::Write),
                    Span::elems(m.center_table, glo, ghi, 4, AccessKind::Write),
                    Span::elems(m.switch, glo, ghi, 1, AccessKind::Write),
                ],
                (ghi - glo) * self.dim * 20,
                (ghi - glo) * self.dim * 30,
            );
            s.barrier();
            s.phase(PHASE_SPEEDY);
            for _ in 0..self.speedy {
                let x = shared.below(n);
                s.gen(PointPass {
                    sc: self.clone(),
                    m,
                    pos: lo,
                    hi,
                    x,
                    pgain: false,
                    rng: SplitMix64::new(r.next_u64()),
                    t,
                });
                s.barrier();
            }
            s.phase(PHASE_PGAIN);
            let slice = m.work_mem + t as u64 * self.work_stride();
            for _ in 0..self.pgains {
                let x = shared.below(n);
                let open = (shared.below(1 << 20) as f64) < GAIN_SHARE * (1 << 20) as f64;
                // count centres in the own range
                s.streams(
                    &[Span::elems(m.is_center, lo, hi, 1, AccessKind::Read)],
                    hi - lo,
                    hi - lo,
                );
                s.barrier();
                if t == 0 {
                    s.compute(nt as u64 * 4, nt as u64 * 6);
                }
                s.barrier();
                // renumber the own centres, zero the own work_mem slice
                s.streams(
                    &[
                        Span::elems(m.is_center, lo, hi, 1, AccessKind::Read),
                        Span::elems(m.center_table, lo, hi, 4, AccessKind::ReadModifyWrite),
                    ],
                    hi - lo,
                    hi - lo,
                );
                s.streams(
                    &[Span::covering(
                        slice,
                        0,
                        self.work_stride(),
                        AccessKind::Write,
                    )],
                    0,
                    0,
                );
                s.barrier();
                s.gen(PointPass {
                    sc: self.clone(),
                    m,
                    pos: lo,
                    hi,
                    x,
                    pgain: true,
                    rng: SplitMix64::new(r.next_u64()),
                    t,
                });
                s.barrier();
                if t == 0 {
                    // the master sums every thread's slice
                    s.streams(
                        &[Span::covering(
                            m.work_mem,
                            0,
                            nt as u64 * self.work_stride(),
                            AccessKind::Read,
                        )],
                        nt as u64 * OPEN_CENTRES,
                        nt as u64 * OPEN_CENTRES,
                    );
                }
                s.barrier();
                if open {
                    // move the switching points, close the emptied centres, open x
                    s.streams(
                        &[
                            Span::elems(m.switch, lo, hi, 1, AccessKind::Read),
                            Span::elems(m.is_center, lo, hi, 1, AccessKind::Read),
                        ],
                        hi - lo,
                        hi - lo,
                    );
                    let moved = ((hi - lo) as f64 * SWITCH_SHARE) as u64;
                    for _ in 0..moved {
                        let i = lo + r.below(hi - lo);
                        s.access(m.points + i * POINT_BYTES, AccessKind::ReadModifyWrite);
                    }
                    if x >= lo && x < hi {
                        s.access(m.is_center + x, AccessKind::Write);
                    }
                    s.barrier();
                }
            }
        }
        s
    }
}

impl Workload for Streamcluster {
    fn name(&self) -> String {
        format!(
            "{NAME}:dim={},points={},chunk={},centers={},pgains={},speedy={},init={},seed={}",
            self.dim,
            self.points,
            self.chunk,
            self.centers,
            self.pgains,
            self.speedy,
            if self.parallel_init {
                "parallel"
            } else {
                "master"
            },
            self.seed
        )
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let task = TaskId(0);
        let o = MapOptions::default;
        let m = Maps {
            block: mem.mmap(task, "sc.block", self.block_bytes(), o()),
            points: mem.mmap(task, "sc.points", self.chunk * POINT_BYTES, o()),
            is_center: mem.mmap(task, "sc.is_center", self.chunk, o()),
            center_table: mem.mmap(task, "sc.center_table", self.chunk * 4, o()),
            switch: mem.mmap(task, "sc.switch_membership", self.chunk, o()),
            work_mem: mem.mmap(
                task,
                "sc.work_mem",
                (self.threads as u64 + 1) * self.work_stride(),
                o(),
            ),
        };
        (0..self.threads)
            .map(|t| ThreadSpec {
                task,
                program: Box::new(self.program(m, t)),
            })
            .collect()
    }
}

/// One thread's pass over its points in pspeedy or pgain.
struct PointPass {
    sc: Streamcluster,
    m: Maps,
    pos: u64,
    hi: u64,
    /// The candidate (pgain) or newly opened centre (pspeedy).
    x: u64,
    pgain: bool,
    rng: SplitMix64,
    t: usize,
}

impl Gen for PointPass {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let d = self.sc.dim;
        let m = self.m;
        let slice = m.work_mem + self.t as u64 * self.sc.work_stride();
        let run = |sp: Span| Op::Run {
            base: sp.addr,
            lines: sp.lines as u32,
            stride_bytes: 64,
            kind: sp.kind,
        };
        while self.pos < self.hi {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let lo = self.pos;
            let hi = (lo + POINTS_PER_UNIT).min(self.hi);
            // the candidate's coordinates (shared, cache-resident after the first touch)
            out.push(run(Span::elems(
                m.block,
                self.x * d,
                (self.x + 1) * d,
                4,
                AccessKind::Read,
            )));
            // the own points' coordinates and records, streamed
            out.push(run(Span::elems(
                m.block,
                lo * d,
                hi * d,
                4,
                AccessKind::Read,
            )));
            let kind = if self.pgain {
                AccessKind::Read
            } else {
                AccessKind::ReadModifyWrite
            };
            out.push(run(Span::elems(m.points, lo, hi, POINT_BYTES, kind)));
            if self.pgain {
                for i in lo..hi {
                    let u = self.rng.below(1 << 20) as f64;
                    if u < SWITCH_SHARE * (1 << 20) as f64 {
                        out.push(Op::Access {
                            addr: m.switch + i,
                            kind: AccessKind::Write,
                        });
                    } else {
                        // lower[center_table[assign]] += current_cost − x_cost
                        let a = self.rng.below(OPEN_CENTRES);
                        let centre = a * (self.sc.chunk / OPEN_CENTRES);
                        out.push(Op::Access {
                            addr: m.center_table + centre * 4,
                            kind: AccessKind::Read,
                        });
                        out.push(Op::Access {
                            addr: slice + a * 8,
                            kind: AccessKind::ReadModifyWrite,
                        });
                    }
                }
            }
            let dist = (hi - lo) * d.div_ceil(DIMS_PER_CYCLE);
            out.push(compute(dist + (hi - lo) * 4, dist * 2 + (hi - lo) * 8));
            self.pos = hi;
        }
        Status::Done
    }
}
