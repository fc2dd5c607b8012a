//! `lbm-like`: the lattice-Boltzmann kernel of 470.lbm / 519.lbm_r, reference/workloads.md §5.
//!
//! Two grids (source, destination) of nx × ny × nz cells, each cell 20 doubles (the 19 D3Q19
//! distributions plus the obstacle flags), stored cell after cell as SPEC's lbm does, with a
//! margin of 2 planes before and after the grid (SPEC's `MARGIN = 2·SIZE_X·SIZE_Y`) so that
//! the neighbour offsets never leave the array. One time step is `LBM_performStreamCollide`:
//! a sequential pass over the source cells; each cell's 20 values are read and its 19 new
//! distributions are written to the neighbouring cells of the destination grid (offsets of
//! ±1 cell, ±1 row, ±1 plane: 19 write streams). The grids swap after each step.
//!
//! Emission is per grid row: the loop over x touches, for distribution q, the doubles
//! `src[(cell)·20 + q]` (20 read streams) and `dst[(cell + offset_q)·20 + q]` (19 write streams),
//! each a strided run of nx accesses 160 B apart, so reads and writes are issued 20 : 19, the
//! ≈ 1 : 1 mix of §5.

use crate::kernel::{
    compute, scale, scale_suffix, scaled, Copies, SingleKernel, Unit, UnitProgram,
};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadProgram};
use numalab_core::TaskId;

pub const NAME: &str = "lbm-like";
pub const KEYS: &[&str] = &["nx", "ny", "nz", "steps", "scale"];
pub const DESCRIPTION: &str = "470.lbm-like lattice Boltzmann, D3Q19 stream-collide over two grids of 20-double cells, one copy per thread (§5). \
keys: nx=100, ny=100, nz=130 (cells), steps=time steps (3000), scale=factor in (0,1] on nz (1)";

pub const PHASES: &[&str] = &["init", "step"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_STEP: u16 = 1;

/// Doubles per cell: 19 distributions and the flags word (§5).
pub const CELL_DOUBLES: u64 = 20;
pub const CELL_BYTES: u64 = CELL_DOUBLES * 8;
/// Planes of margin before and after the grid (SPEC lbm's MARGIN).
pub const MARGIN_PLANES: u64 = 2;
/// Compute per cell update: ≈ 200 flops of collision, E, chosen so that the ≈ 5-8 DRAM lines
/// per cell give the very high MPKI of §5 (≈ 20-40).
pub const CYCLES_PER_CELL: u64 = 100;
pub const INSTRUCTIONS_PER_CELL: u64 = 220;

/// D3Q19 velocities (cx, cy, cz) in lbm.h order: C, N, S, E, W, T, B, NE, NW, SE, SW, NT, NB,
/// ST, SB, ET, EB, WT, WB.
pub const VELOCITIES: [(i64, i64, i64); 19] = [
    (0, 0, 0),
    (0, 1, 0),
    (0, -1, 0),
    (1, 0, 0),
    (-1, 0, 0),
    (0, 0, 1),
    (0, 0, -1),
    (1, 1, 0),
    (-1, 1, 0),
    (1, -1, 0),
    (-1, -1, 0),
    (0, 1, 1),
    (0, 1, -1),
    (0, -1, 1),
    (0, -1, -1),
    (1, 0, 1),
    (1, 0, -1),
    (-1, 0, 1),
    (-1, 0, -1),
];

#[derive(Clone, Debug, PartialEq)]
pub struct Lbm {
    pub nx: u64,
    pub ny: u64,
    /// Planes after scaling.
    pub nz: u64,
    pub nz_full: u64,
    pub steps: u64,
    pub scale: f64,
}

impl Lbm {
    pub fn from_params(p: &Params) -> Result<Lbm, WorkloadError> {
        let nx = p.uint_in("nx", 100, 1, 8192)?;
        let ny = p.uint_in("ny", 100, 1, 1 << 16)?;
        let nz_full = p.uint_in("nz", 130, 1, 1 << 16)?;
        let steps = p.uint("steps", 3000)?;
        let scale = scale(p)?;
        Ok(Lbm {
            nx,
            ny,
            nz: scaled(nz_full, scale, 1),
            nz_full,
            steps,
            scale,
        })
    }

    pub fn workload(p: &Params, threads: usize) -> Result<Copies<Lbm>, WorkloadError> {
        Copies::new(Self::from_params(p)?, threads, NAME)
    }

    /// Cells of one grid array, margins included.
    pub fn cells_allocated(&self) -> u64 {
        self.nx * self.ny * (self.nz + 2 * MARGIN_PLANES)
    }

    pub fn grid_bytes(&self) -> u64 {
        self.cells_allocated() * CELL_BYTES
    }
}

impl SingleKernel for Lbm {
    fn spec(&self) -> String {
        format!(
            "{NAME}:nx={},ny={},nz={},steps={}{}",
            self.nx,
            self.ny,
            self.nz_full,
            self.steps,
            scale_suffix(self.scale)
        )
    }

    fn build_copy(&self, mem: &mut dyn AddressSpace, task: TaskId) -> Box<dyn ThreadProgram> {
        let bytes = self.grid_bytes();
        let a = mem.mmap(task, "lbm.grid0", bytes, MapOptions::default());
        let b = mem.mmap(task, "lbm.grid1", bytes, MapOptions::default());
        Box::new(UnitProgram::new(
            LbmRun {
                k: self.clone(),
                grids: [a, b],
                init_done: false,
                step: 0,
                row: 0,
            },
            PHASES,
        ))
    }
}

struct LbmRun {
    k: Lbm,
    grids: [u64; 2],
    init_done: bool,
    step: u64,
    /// Next row (y + z·ny) of the current step.
    row: u64,
}

impl Unit for LbmRun {
    fn unit(&mut self, out: &mut Vec<Op>) -> bool {
        let k = &self.k;
        if !self.init_done {
            // LBM_initializeGrid on both grids: sequential first touch by the copy itself
            out.push(Op::Phase { id: PHASE_INIT });
            let lines = k.grid_bytes().div_ceil(64);
            for g in self.grids {
                let mut done = 0;
                while done < lines {
                    let n = (lines - done).min(1 << 20);
                    out.push(Op::Run {
                        base: g + done * 64,
                        lines: n as u32,
                        stride_bytes: 64,
                        kind: AccessKind::Write,
                    });
                    done += n;
                }
            }
            out.push(compute(k.cells_allocated() * 2, k.cells_allocated() * 4));
            self.init_done = true;
            return k.steps > 0;
        }
        if self.row == 0 {
            out.push(Op::Phase { id: PHASE_STEP });
        }
        let (src, dst) = if self.step.is_multiple_of(2) {
            (self.grids[0], self.grids[1])
        } else {
            (self.grids[1], self.grids[0])
        };
        let cell0 = MARGIN_PLANES * k.nx * k.ny + self.row * k.nx;
        // the 20 values of each cell of the row (19 distributions + flags)
        for q in 0..CELL_DOUBLES {
            out.push(Op::Run {
                base: src + (cell0 * CELL_DOUBLES + q) * 8,
                lines: k.nx as u32,
                stride_bytes: CELL_BYTES as u16,
                kind: AccessKind::Read,
            });
        }
        // distribution q of each cell streams to the neighbour cell in direction q
        let plane = (k.nx * k.ny) as i64;
        for (q, &(cx, cy, cz)) in VELOCITIES.iter().enumerate() {
            let off = cx + cy * k.nx as i64 + cz * plane;
            let cell = (cell0 as i64 + off) as u64;
            out.push(Op::Run {
                base: dst + (cell * CELL_DOUBLES + q as u64) * 8,
                lines: k.nx as u32,
                stride_bytes: CELL_BYTES as u16,
                kind: AccessKind::Write,
            });
        }
        out.push(compute(
            k.nx * CYCLES_PER_CELL,
            k.nx * INSTRUCTIONS_PER_CELL,
        ));
        self.row += 1;
        if self.row == k.ny * k.nz {
            self.row = 0;
            self.step += 1;
        }
        self.step < k.steps
    }
}
