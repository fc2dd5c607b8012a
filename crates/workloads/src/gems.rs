//! `gems-like`: the FDTD leap-frog of 459.GemsFDTD, reference/workloads.md §5.
//!
//! Six 3-D double arrays Ex, Ey, Ez, Hx, Hy, Hz of nx × ny × nz points (Fortran order, i
//! fastest) and PML auxiliary arrays for a layer of `pml` points on each of the six faces. One
//! time step:
//!
//! 1. `updateH`: for every row (j, k), H ← H − c·curl E: read-modify-write the Hx, Hy, Hz rows
//!    and read the E rows at (j, k), (j+1, k), (j, k+1) (the +1 neighbours; the i+1 neighbour
//!    is in the same row). The (k+1) plane is read again as plane k of the next iteration: the
//!    reuse of 2-3 planes of §5.
//! 2. PML pass for H: each face's auxiliary array is updated (read-modify-write, streamed) with
//!    the H points inside the layer.
//! 3. `updateE` with the −1 neighbours of H, then the PML pass for E.
//!
//! Per step every field array is read once and rewritten once per half step it updates, and
//! the three other arrays are read: 6 arrays read for 3 written, the ≈ 2 : 1 mix of §5.

use crate::kernel::{
    compute, scale, scale_suffix, scaled, Copies, SingleKernel, Unit, UnitProgram,
};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadProgram};
use numalab_core::TaskId;

pub const NAME: &str = "gems-like";
pub const KEYS: &[&str] = &["nx", "ny", "nz", "pml", "steps", "scale"];
pub const DESCRIPTION: &str = "459.GemsFDTD-like FDTD leap-frog: H from curl E (+1 neighbours), E from curl H (-1 neighbours), PML face passes, one copy per thread (§5). \
keys: nx=256, ny=256, nz=256 (points; 6 arrays = 0.8 GB), pml=layer thickness (8), steps=time steps (2000), scale=factor in (0,1] on nz (1)";

pub const PHASES: &[&str] = &["init", "update-h", "update-e"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_H: u16 = 1;
pub const PHASE_E: u16 = 2;

/// Compute per point and half step: three components of ≈ 4 flops each, E, giving the high
/// MPKI class of §5 (≈ 15-25) with ≈ 1 DRAM line per point and step.
pub const CYCLES_PER_POINT: u64 = 12;
pub const INSTRUCTIONS_PER_POINT: u64 = 25;
/// Doubles per PML point in the auxiliary array of one half step (two split-field terms per
/// component, E).
pub const PML_DOUBLES: u64 = 6;

/// Field arrays: 0..3 = Ex, Ey, Ez; 3..6 = Hx, Hy, Hz.
pub const FIELDS: [&str; 6] = [
    "gems.ex", "gems.ey", "gems.ez", "gems.hx", "gems.hy", "gems.hz",
];

#[derive(Clone, Debug, PartialEq)]
pub struct Gems {
    pub nx: u64,
    pub ny: u64,
    pub nz: u64,
    pub nz_full: u64,
    pub pml: u64,
    pub steps: u64,
    pub scale: f64,
}

impl Gems {
    pub fn from_params(p: &Params) -> Result<Gems, WorkloadError> {
        // the x faces are emitted as runs with a stride of one row: nx·8 must fit u16
        let nx = p.uint_in("nx", 256, 2, 8191)?;
        let ny = p.uint_in("ny", 256, 2, 1 << 16)?;
        let nz_full = p.uint_in("nz", 256, 2, 1 << 16)?;
        let pml = p.uint_in("pml", 8, 0, 64)?;
        let steps = p.uint("steps", 2000)?;
        let scale = scale(p)?;
        let nz = scaled(nz_full, scale, 2);
        if 2 * pml > nx.min(ny).min(nz) {
            return Err(WorkloadError::Invalid {
                workload: NAME,
                why: format!("pml={pml} layers on both sides do not fit a {nx} x {ny} x {nz} grid"),
            });
        }
        Ok(Gems {
            nx,
            ny,
            nz,
            nz_full,
            pml,
            steps,
            scale,
        })
    }

    pub fn workload(p: &Params, threads: usize) -> Result<Copies<Gems>, WorkloadError> {
        Copies::new(Self::from_params(p)?, threads, NAME)
    }

    pub fn field_bytes(&self) -> u64 {
        self.nx * self.ny * self.nz * 8
    }

    /// Points in the six PML layers (faces overlap at the edges, as separate arrays do).
    pub fn pml_points(&self) -> u64 {
        2 * self.pml * (self.ny * self.nz + self.nx * self.nz + self.nx * self.ny)
    }

    /// Bytes of one half step's PML auxiliary array.
    pub fn pml_bytes(&self) -> u64 {
        self.pml_points() * PML_DOUBLES * 8
    }
}

impl SingleKernel for Gems {
    fn spec(&self) -> String {
        format!(
            "{NAME}:nx={},ny={},nz={},pml={},steps={}{}",
            self.nx,
            self.ny,
            self.nz_full,
            self.pml,
            self.steps,
            scale_suffix(self.scale)
        )
    }

    fn build_copy(&self, mem: &mut dyn AddressSpace, task: TaskId) -> Box<dyn ThreadProgram> {
        let mut f = [0u64; 6];
        for (i, name) in FIELDS.iter().enumerate() {
            f[i] = mem.mmap(task, name, self.field_bytes(), MapOptions::default());
        }
        let pml_bytes = self.pml_bytes().max(64);
        let pml = [
            mem.mmap(task, "gems.pml-e", pml_bytes, MapOptions::default()),
            mem.mmap(task, "gems.pml-h", pml_bytes, MapOptions::default()),
        ];
        Box::new(UnitProgram::new(
            GemsRun {
                k: self.clone(),
                f,
                pml,
                stage: Stage::Init,
                step: 0,
                row: 0,
            },
            PHASES,
        ))
    }
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Stage {
    Init,
    /// Row sweep of the H (false) or E (true) update.
    Rows(bool),
    /// PML pass after the H (false) or E (true) update.
    Pml(bool),
}

struct GemsRun {
    k: Gems,
    f: [u64; 6],
    pml: [u64; 2],
    stage: Stage,
    step: u64,
    /// Next row (j + k·ny), or the next plane during a PML pass.
    row: u64,
}

impl GemsRun {
    fn row_addr(&self, arr: usize, j: u64, kk: u64) -> u64 {
        self.f[arr] + (kk * self.k.ny + j) * self.k.nx * 8
    }

    fn row_run(&self, arr: usize, j: u64, kk: u64, kind: AccessKind) -> Op {
        Op::Run {
            base: self.row_addr(arr, j, kk),
            lines: (self.k.nx * 8).div_ceil(64) as u32,
            stride_bytes: 64,
            kind,
        }
    }
}

/// Sequential runs over `lines` lines from `base`, split so that `lines` fits u32.
fn stream(out: &mut Vec<Op>, base: u64, lines: u64, kind: AccessKind) {
    let mut done = 0;
    while done < lines {
        let n = (lines - done).min(1 << 20);
        out.push(Op::Run {
            base: base + done * 64,
            lines: n as u32,
            stride_bytes: 64,
            kind,
        });
        done += n;
    }
}

impl Unit for GemsRun {
    fn unit(&mut self, out: &mut Vec<Op>) -> bool {
        let k = self.k.clone();
        match self.stage {
            Stage::Init => {
                // fields zeroed and PML coefficients set by the copy itself (first touch)
                out.push(Op::Phase { id: PHASE_INIT });
                for a in self.f {
                    stream(out, a, k.field_bytes().div_ceil(64), AccessKind::Write);
                }
                for p in self.pml {
                    stream(out, p, k.pml_bytes().div_ceil(64), AccessKind::Write);
                }
                out.push(compute(k.field_bytes() / 8, k.field_bytes() / 8));
                self.stage = Stage::Rows(false);
                self.row = 0;
                k.steps > 0
            }
            Stage::Rows(e) => {
                if self.row == 0 {
                    out.push(Op::Phase {
                        id: if e { PHASE_E } else { PHASE_H },
                    });
                }
                let (j, kk) = (self.row % k.ny, self.row / k.ny);
                // updated arrays: H (3..6) in updateH, E (0..3) in updateE; the other three
                // are read at the row itself and its +1 (H) or −1 (E) neighbours in j and k
                let (upd, src) = if e { (0, 3) } else { (3, 0) };
                for c in 0..3 {
                    out.push(self.row_run(upd + c, j, kk, AccessKind::ReadModifyWrite));
                }
                let nj = if e {
                    j.checked_sub(1)
                } else {
                    Some(j + 1).filter(|&x| x < k.ny)
                };
                let nk = if e {
                    kk.checked_sub(1)
                } else {
                    Some(kk + 1).filter(|&x| x < k.nz)
                };
                // curl of component c uses the two other components: x: y (k-nbr), z (j-nbr);
                // y: z (i-nbr, same row), x (k-nbr); z: x (j-nbr), y (i-nbr, same row)
                for c in 0..3 {
                    out.push(self.row_run(src + c, j, kk, AccessKind::Read));
                }
                if let Some(nk) = nk {
                    out.push(self.row_run(src, j, nk, AccessKind::Read));
                    out.push(self.row_run(src + 1, j, nk, AccessKind::Read));
                }
                if let Some(nj) = nj {
                    out.push(self.row_run(src, nj, kk, AccessKind::Read));
                    out.push(self.row_run(src + 2, nj, kk, AccessKind::Read));
                }
                out.push(compute(
                    k.nx * CYCLES_PER_POINT,
                    k.nx * INSTRUCTIONS_PER_POINT,
                ));
                self.row += 1;
                if self.row == k.ny * k.nz {
                    self.row = 0;
                    self.stage = Stage::Pml(e);
                }
                true
            }
            Stage::Pml(e) => {
                // one plane per unit: the layer points of that plane for the three updated
                // components, then the matching slice of the auxiliary array
                let kk = self.row;
                let upd = if e { 0 } else { 3 };
                let plane_lines = (k.nx * k.ny * 8).div_ceil(64);
                let row_lines = (k.nx * 8).div_ceil(64);
                let mut points = 0;
                for c in 0..3 {
                    let base = self.row_addr(upd + c, 0, kk);
                    if kk < k.pml || kk >= k.nz - k.pml {
                        // z faces: whole planes
                        stream(out, base, plane_lines, AccessKind::ReadModifyWrite);
                        if c == 0 {
                            points += k.nx * k.ny;
                        }
                        continue;
                    }
                    // y faces: the first and last pml rows of the plane
                    stream(out, base, k.pml * row_lines, AccessKind::ReadModifyWrite);
                    let last = self.row_addr(upd + c, k.ny - k.pml, kk);
                    stream(out, last, k.pml * row_lines, AccessKind::ReadModifyWrite);
                    // x faces: the first and last pml points of every row, one row apart
                    let edge_lines = (k.pml * 8).div_ceil(64);
                    for (start, l) in [(0, edge_lines), ((k.nx - k.pml) * 8, edge_lines)] {
                        for i in 0..l {
                            if k.pml == 0 {
                                break;
                            }
                            out.push(Op::Run {
                                base: base + start + i * 64,
                                lines: k.ny as u32,
                                stride_bytes: (k.nx * 8) as u16,
                                kind: AccessKind::ReadModifyWrite,
                            });
                        }
                    }
                    if c == 0 {
                        points += 2 * k.pml * k.nx + 2 * k.pml * k.ny;
                    }
                }
                // the auxiliary array is laid out plane by plane in the same order
                let aux = self.pml[e as usize];
                let aux_lo = self.aux_offset(kk);
                let aux_bytes = points * PML_DOUBLES * 8;
                if aux_bytes > 0 {
                    let first = (aux + aux_lo) & !63;
                    let lines = (aux + aux_lo + aux_bytes).div_ceil(64) - first / 64;
                    stream(out, first, lines, AccessKind::ReadModifyWrite);
                }
                out.push(compute(points * 3 * CYCLES_PER_POINT, points * 3 * 8));
                self.row += 1;
                if self.row < k.nz {
                    return true;
                }
                self.row = 0;
                if e {
                    self.step += 1;
                    self.stage = Stage::Rows(false);
                    self.step < k.steps
                } else {
                    self.stage = Stage::Rows(true);
                    true
                }
            }
        }
    }
}

impl GemsRun {
    /// Byte offset in an auxiliary array of plane `kk`'s layer points (planes in order).
    fn aux_offset(&self, kk: u64) -> u64 {
        let k = &self.k;
        let face = k.nx * k.ny;
        let side = 2 * k.pml * k.nx + 2 * k.pml * k.ny;
        let before = if kk < k.pml {
            kk * face
        } else if kk < k.nz - k.pml {
            k.pml * face + (kk - k.pml) * side
        } else {
            k.pml * face + (k.nz - 2 * k.pml) * side + (kk - (k.nz - k.pml)) * face
        };
        before * PML_DOUBLES * 8
    }
}
