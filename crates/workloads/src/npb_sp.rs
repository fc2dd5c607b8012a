//! NAS SP (NPB 3.4 OpenMP), reference/workloads.md §3.5: scalar pentadiagonal ADI solver.
//!
//! Fields u, rhs, forcing (5 doubles per point) and us, vs, ws, qs, rho_i, speed, square (one
//! each): 176 B per point on the padded grid. `initialize` and `exact_rhs` write u and forcing
//! with a static `collapse(2)` over (k, j), so every field lives in k-slabs. Per time step:
//!
//! | phase | partition | rows touched |
//! |---|---|---|
//! | compute_rhs | (k, j) | u → the 7 point scalars; then rhs from forcing, u at j ± 1, 2 and k ± 1, 2, scalars at ± 1 |
//! | txinvr | (k, j) | rhs updated from the scalars |
//! | x_solve | (k, j) | each i-line (a row): forward elimination and back substitution on rhs |
//! | y_solve | k (whole planes) | forward over j, back substitution over j descending |
//! | z_solve | j-bands, k innermost | forward over k, back over k: the thread sweeps whole z-lines of its j-band through every k-slab, (N − 1)/N remote |
//! | tzetar, add | (k, j) | rhs from u and the scalars; u += rhs |
//!
//! A barrier ends every phase. The line-solve work arrays (lhs, lhsp, lhsm) are thread-private
//! and cache-resident: only their compute is charged.

use crate::emit::{static_range, Script};
use crate::grid::{at, near, Field, Grid, RowSweep, Rows, Touch};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, ThreadSpec, Workload};
use numalab_core::TaskId;

pub const NAME: &str = "npb-sp";
pub const KEYS: &[&str] = &["class", "niter"];
pub const DESCRIPTION: &str = "NAS SP (NPB 3.4 OpenMP): ADI time steps, k-slab first touch, x/y solves local, z_solve sweeping z-lines across all slabs (§3.5). \
keys: class=S|W|A|B|C|D|E (A), niter=time steps (the class's: S 100, W-C 400, D/E 500)";

pub const PHASES: &[&str] = &[
    "init",
    "compute_rhs",
    "txinvr",
    "x_solve",
    "y_solve",
    "z_solve",
    "tzetar-add",
];
pub const PHASE_Z_SOLVE: u16 = 5;

/// (class, grid, niter) of §3.5.
pub const CLASSES: [(char, u64, u64); 7] = [
    ('S', 12, 100),
    ('W', 36, 400),
    ('A', 64, 400),
    ('B', 102, 400),
    ('C', 162, 400),
    ('D', 408, 500),
    ('E', 1020, 500),
];
/// Compute per point (cycles, E): compute_rhs ≈ 100 flops, a line solve ≈ 60, the rest ≈ 10.
pub const RHS_CYCLES: u64 = 50;
pub const SOLVE_CYCLES: u64 = 15;
pub const SMALL_CYCLES: u64 = 5;

#[derive(Clone, Debug, PartialEq)]
pub struct NpbSp {
    pub class: char,
    pub n: u64,
    pub niter: u64,
    pub threads: usize,
}

impl NpbSp {
    pub fn from_params(p: &Params, threads: usize) -> Result<NpbSp, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "SP needs at least one thread".into(),
            });
        }
        let names: Vec<String> = CLASSES.iter().map(|c| c.0.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let (class, n, niter) = CLASSES[p.choice("class", &names, 2)?];
        let niter = p.uint_in("niter", niter, 0, 1 << 20)?;
        Ok(NpbSp {
            class,
            n,
            niter,
            threads,
        })
    }

    pub fn grid(&self) -> Grid {
        Grid::npb(self.n, self.n)
    }
}

/// SP's fields: u, rhs, forcing, then us, vs, ws, qs, rho_i, speed, square.
pub const FIELD_NAMES: [&str; 10] = [
    "sp.u",
    "sp.rhs",
    "sp.forcing",
    "sp.us",
    "sp.vs",
    "sp.ws",
    "sp.qs",
    "sp.rho_i",
    "sp.speed",
    "sp.square",
];

impl Workload for NpbSp {
    fn name(&self) -> String {
        format!("{NAME}:class={},niter={}", self.class, self.niter)
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let g = self.grid();
        let task = TaskId(0);
        // NPB's static arrays (header.h's COMMON /fields/, in the model's order) in one .bss
        let f = Field::map_static(mem, task, "sp.bss", &FIELD_NAMES, 3, &g);
        let (u, rhs, forcing) = (f[0], f[1], f[2]);
        let (us, vs, ws, qs, rho, speed, square) = (f[3], f[4], f[5], f[6], f[7], f[8], f[9]);
        use AccessKind::{Read as R, ReadModifyWrite as M, Write as W};
        (0..self.threads)
            .map(|t| {
                let (lo, hi) = static_range(g.rows(), self.threads, t);
                let kj = Rows::KMajor { lo, hi };
                let (klo, khi) = static_range(g.nz, self.threads, t);
                let (jlo, jhi) = static_range(g.ny, self.threads, t);
                let mut s = Script::new(PHASES);
                let sweep = |s: &mut Script, rows: Rows, touches: Vec<Touch>, c: u64| {
                    let rs = RowSweep::new(g, rows, touches, c);
                    if !rs.is_empty() {
                        s.gen(rs);
                    }
                };
                s.phase(0);
                sweep(&mut s, kj, vec![at(u, W)], SMALL_CYCLES);
                s.barrier();
                sweep(&mut s, kj, vec![at(forcing, W)], RHS_CYCLES);
                s.barrier();
                for _ in 0..self.niter {
                    s.phase(1);
                    let mut first = vec![at(u, R)];
                    first.extend([rho, us, vs, ws, square, qs, speed].map(|x| at(x, W)));
                    sweep(&mut s, kj, first, SMALL_CYCLES);
                    s.barrier();
                    let mut rhs_t = vec![at(forcing, R), at(rhs, M)];
                    for (dj, dk) in [
                        (0, 0),
                        (-1, 0),
                        (1, 0),
                        (-2, 0),
                        (2, 0),
                        (0, -1),
                        (0, 1),
                        (0, -2),
                        (0, 2),
                    ] {
                        rhs_t.push(near(u, dj, dk, R));
                    }
                    for x in [us, vs, ws, qs, rho, square] {
                        for (dj, dk) in [(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)] {
                            rhs_t.push(near(x, dj, dk, R));
                        }
                    }
                    sweep(&mut s, kj, rhs_t, RHS_CYCLES);
                    s.barrier();
                    s.phase(2);
                    let mut tx = vec![at(rhs, M)];
                    tx.extend([rho, us, vs, ws, qs, speed].map(|x| at(x, R)));
                    sweep(&mut s, kj, tx, SMALL_CYCLES);
                    s.barrier();
                    s.phase(3);
                    let line = |x: Field| vec![at(x, R), at(rho, R), at(speed, R), at(rhs, M)];
                    let rs = RowSweep::new(g, kj, line(us), SOLVE_CYCLES).passes(2);
                    if !rs.is_empty() {
                        s.gen(rs);
                    }
                    s.barrier();
                    s.phase(4);
                    for k in klo..khi {
                        let plane = Rows::Plane {
                            k,
                            jlo: 0,
                            jhi: g.ny,
                        };
                        s.gen(RowSweep::new(g, plane, line(vs), SOLVE_CYCLES));
                        s.gen(RowSweep::new(g, plane, vec![at(rhs, M)], SOLVE_CYCLES).reversed());
                    }
                    s.barrier();
                    s.phase(PHASE_Z_SOLVE);
                    for j in jlo..jhi {
                        let zl = Rows::JMajor { jlo: j, jhi: j + 1 };
                        s.gen(RowSweep::new(g, zl, line(ws), SOLVE_CYCLES));
                        s.gen(RowSweep::new(g, zl, vec![at(rhs, M)], SOLVE_CYCLES).reversed());
                    }
                    s.barrier();
                    s.phase(6);
                    let mut tz = vec![at(rhs, M)];
                    tz.extend([u, us, vs, ws, qs, speed].map(|x| at(x, R)));
                    sweep(&mut s, kj, tz, SMALL_CYCLES);
                    s.barrier();
                    sweep(&mut s, kj, vec![at(u, M), at(rhs, R)], SMALL_CYCLES);
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
