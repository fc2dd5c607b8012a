//! NAS LU (NPB 3.4 OpenMP), reference/workloads.md §3.4: SSOR with lower and upper
//! triangular sweeps.
//!
//! Fields u, rsd, frct (5 doubles per point) and qs, rho_i (one each): 136 B per point on the
//! padded grid. `setbv`, `setiv`, `erhs` use a static `collapse(2)` over (k, j): k-slabs. Per
//! SSOR iteration:
//!
//! | phase | partition | rows touched |
//! |---|---|---|
//! | rsd ← dt·rsd | (k, j) | rsd |
//! | lower sweep (jacld + blts) | planes k ascending; in each, the thread's band of rows j | u, qs, rho_i at j, j−1, k−1; rsd updated from j−1 and k−1 |
//! | upper sweep (jacu + buts) | planes k descending, j descending | the same with +1 neighbours |
//! | u ← u + c·rsd | (k, j) | u, rsd |
//! | rhs | (k, j) for ξ; planes for η (j ± 1, 2); j-bands with k innermost for ζ (k ± 1, 2) | rsd from frct and u |
//!
//! NPB pipelines the sweeps with point-to-point flags (`sync_left` / `sync_right`): thread t
//! works on plane k right after thread t−1 finished it. The Op vocabulary has barriers only,
//! so the wavefront is emitted as a skewed barrier schedule: at step s thread t works on plane
//! k = s − t, so thread t still follows thread t−1 plane by plane, with the same references
//! (each thread's j-band in every plane: (N − 1)/N remote), at the cost of a barrier per step
//! instead of a flag per neighbour.

use crate::emit::{static_range, Script};
use crate::grid::{at, near, Field, Grid, RowSweep, Rows, Touch};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, ThreadSpec, Workload};
use numalab_core::TaskId;
use std::sync::Arc;

pub const NAME: &str = "npb-lu";
pub const KEYS: &[&str] = &["class", "itmax"];
pub const DESCRIPTION: &str = "NAS LU (NPB 3.4 OpenMP): SSOR iterations, k-slab first touch, wavefront lower/upper sweeps over j-bands of every plane, rhs with a z-direction pass (§3.4). \
keys: class=S|W|A|B|C|D|E (A), itmax=SSOR iterations (the class's: S 50, W 300, A-C 250, D/E 300)";

pub const PHASES: &[&str] = &[
    "init",
    "rsd-scale",
    "lower-sweep",
    "upper-sweep",
    "update-u",
    "rhs",
];
pub const PHASE_LOWER: u16 = 2;
pub const PHASE_UPPER: u16 = 3;

/// (class, grid, itmax) of §3.4.
pub const CLASSES: [(char, u64, u64); 7] = [
    ('S', 12, 50),
    ('W', 33, 300),
    ('A', 64, 250),
    ('B', 102, 250),
    ('C', 162, 250),
    ('D', 408, 300),
    ('E', 1020, 300),
];
/// Compute per point (cycles, E): a 5 × 5 block solve in the sweeps, flux differences in rhs.
pub const SWEEP_CYCLES: u64 = 60;
pub const RHS_CYCLES: u64 = 30;
pub const SMALL_CYCLES: u64 = 3;

#[derive(Clone, Debug, PartialEq)]
pub struct NpbLu {
    pub class: char,
    pub n: u64,
    pub itmax: u64,
    pub threads: usize,
}

pub const FIELD_NAMES: [&str; 5] = ["lu.u", "lu.rsd", "lu.frct", "lu.qs", "lu.rho_i"];

impl NpbLu {
    pub fn from_params(p: &Params, threads: usize) -> Result<NpbLu, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "LU needs at least one thread".into(),
            });
        }
        let names: Vec<String> = CLASSES.iter().map(|c| c.0.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let (class, n, itmax) = CLASSES[p.choice("class", &names, 2)?];
        let itmax = p.uint_in("itmax", itmax, 0, 1 << 20)?;
        Ok(NpbLu {
            class,
            n,
            itmax,
            threads,
        })
    }

    pub fn grid(&self) -> Grid {
        Grid::npb(self.n, self.n)
    }

    /// Barrier steps of one sweep: interior planes plus the pipeline fill.
    pub fn sweep_steps(&self) -> u64 {
        self.n.saturating_sub(2) + self.threads as u64 - 1
    }
}

impl Workload for NpbLu {
    fn name(&self) -> String {
        format!("{NAME}:class={},itmax={}", self.class, self.itmax)
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let g = self.grid();
        let task = TaskId(0);
        // NPB's static arrays (applu.incl's COMMON /cvar/) in one .bss
        let f = Field::map_static(mem, task, "lu.bss", &FIELD_NAMES, 3, &g);
        let (u, rsd, frct, qs, rho) = (f[0], f[1], f[2], f[3], f[4]);
        use AccessKind::{Read as R, ReadModifyWrite as M, Write as W};
        let interior = self.n.saturating_sub(2);
        (0..self.threads)
            .map(|t| {
                let (lo, hi) = static_range(g.rows(), self.threads, t);
                let kj = Rows::KMajor { lo, hi };
                let (klo, khi) = static_range(g.nz, self.threads, t);
                let (jlo, jhi) = static_range(g.ny, self.threads, t);
                let mut s = Script::new(PHASES);
                let sweep = |s: &mut Script, rows: Rows, touches: Vec<Touch>, c: u64, rev: bool| {
                    let mut rs = RowSweep::new(g, rows, touches, c);
                    if rev {
                        rs = rs.reversed();
                    }
                    if !rs.is_empty() {
                        s.gen(rs);
                    }
                };
                s.phase(0);
                // setbv / setiv: u; erhs: frct (rsd as its work array)
                sweep(&mut s, kj, vec![at(u, W)], SMALL_CYCLES, false);
                s.barrier();
                sweep(
                    &mut s,
                    kj,
                    vec![at(frct, W), at(rsd, W), at(u, R)],
                    RHS_CYCLES,
                    false,
                );
                s.barrier();
                for _ in 0..self.itmax {
                    s.phase(1);
                    sweep(&mut s, kj, vec![at(rsd, M)], SMALL_CYCLES, false);
                    s.barrier();
                    for (phase, d) in [(PHASE_LOWER, -1i64), (PHASE_UPPER, 1)] {
                        s.phase(phase);
                        let mut touches = Vec::new();
                        for x in [u, qs, rho] {
                            touches.extend([at(x, R), near(x, d, 0, R), near(x, 0, d, R)]);
                        }
                        touches.extend([near(rsd, d, 0, R), near(rsd, 0, d, R), at(rsd, M)]);
                        let touches: Arc<[Touch]> = touches.into();
                        for step in 0..self.sweep_steps() {
                            // thread t is t steps behind thread 0 in the wavefront
                            if let Some(p) = step.checked_sub(t as u64).filter(|&p| p < interior) {
                                let k = if d < 0 { 1 + p } else { interior - p };
                                let mut rs = RowSweep::new(
                                    g,
                                    Rows::Plane { k, jlo, jhi },
                                    touches.clone(),
                                    SWEEP_CYCLES,
                                );
                                if d > 0 {
                                    rs = rs.reversed();
                                }
                                if !rs.is_empty() {
                                    s.gen(rs);
                                }
                            }
                            s.barrier();
                        }
                    }
                    s.phase(4);
                    sweep(&mut s, kj, vec![at(u, M), at(rsd, R)], SMALL_CYCLES, false);
                    s.barrier();
                    s.phase(5);
                    // rsd = −frct, ξ fluxes along the rows
                    let xi = vec![
                        at(frct, R),
                        at(rsd, W),
                        at(u, R),
                        at(qs, R),
                        at(rho, R),
                        at(rsd, M),
                    ];
                    sweep(&mut s, kj, xi, RHS_CYCLES, false);
                    s.barrier();
                    // η fluxes: planes of the own slab, j ± 1, 2
                    let eta: Vec<Touch> = [(0, 0), (-1, 0), (1, 0), (-2, 0), (2, 0)]
                        .iter()
                        .map(|&(dj, dk)| near(u, dj, dk, R))
                        .chain([at(rsd, M)])
                        .collect();
                    sweep(
                        &mut s,
                        Rows::KMajor {
                            lo: klo * g.ny,
                            hi: khi * g.ny,
                        },
                        eta,
                        RHS_CYCLES,
                        false,
                    );
                    s.barrier();
                    // ζ fluxes: j-band, k innermost, k ± 1, 2
                    let zeta: Vec<Touch> = [(0, 0), (0, -1), (0, 1), (0, -2), (0, 2)]
                        .iter()
                        .map(|&(dj, dk)| near(u, dj, dk, R))
                        .chain([at(rsd, M)])
                        .collect();
                    sweep(&mut s, Rows::JMajor { jlo, jhi }, zeta, RHS_CYCLES, false);
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
