//! Row sweeps over the structured grids of the NPB pseudo-applications (SP, LU:
//! reference/workloads.md §3.4, §3.5).
//!
//! A grid has nx' × ny' × nz points (x fastest; nx', ny' padded to odd sizes as NPB's
//! `isiz/2·2 + 1`); a field stores `comps` doubles per point, components fastest (Fortran
//! `u(5, i, j, k)`), so the x-line (j, k) of a field is one contiguous row. A loop nest is a
//! [`RowSweep`]: an ordered list of rows (j, k), and per row the rows of each field it touches
//! (the row itself or a neighbour at j ± d, k ± d) with their access kind. Row orders:
//!
//! * [`Rows::KMajor`]: a range of the flattened (k, j) index, as a static `collapse(2)` over
//!   (k, j) or a static loop over k sweeping whole planes gives it (the k-slab partition);
//! * [`Rows::JMajor`]: a band of j, k innermost, as z_solve's (j, i) partition sweeps whole
//!   z-lines across every k-slab.

use crate::emit::{Gen, Status, CHUNK_OPS};
use crate::kernel::compute;
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, StaticArray, LINE_BYTES};
use numalab_core::TaskId;
use std::sync::Arc;

/// Padded extent of a dimension (`n/2·2 + 1`).
pub fn padded(n: u64) -> u64 {
    n / 2 * 2 + 1
}

/// Grid extents.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Grid {
    pub nx: u64,
    pub ny: u64,
    pub nz: u64,
}

impl Grid {
    /// The padded grid of an n × n × nz problem.
    pub fn npb(n: u64, nz: u64) -> Grid {
        Grid {
            nx: padded(n),
            ny: padded(n),
            nz,
        }
    }

    pub fn points(&self) -> u64 {
        self.nx * self.ny * self.nz
    }

    pub fn rows(&self) -> u64 {
        self.ny * self.nz
    }
}

/// A field: its base address and doubles per point.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub base: u64,
    pub comps: u64,
}

impl Field {
    pub fn bytes(&self, g: &Grid) -> u64 {
        g.points() * self.comps * 8
    }

    /// NPB's fields as static arrays, adjacent in one .bss mapping named `segment` in the order
    /// of `names` (their COMMON block), each on a cache line (the workloads emit whole lines):
    /// huge pages straddle neighbouring fields. The first `vectors` fields hold 5 doubles per
    /// point, the others 1.
    pub fn map_static(
        mem: &mut dyn AddressSpace,
        task: TaskId,
        segment: &str,
        names: &[&str],
        vectors: usize,
        g: &Grid,
    ) -> Vec<Field> {
        let comps_of = |i: usize| if i < vectors { 5 } else { 1 };
        let arrays: Vec<StaticArray> = names
            .iter()
            .enumerate()
            .map(|(i, name)| StaticArray::new(name, g.points() * comps_of(i) * 8, LINE_BYTES))
            .collect();
        mem.mmap_static(task, segment, &arrays, MapOptions::default())
            .into_iter()
            .enumerate()
            .map(|(i, base)| Field {
                base,
                comps: comps_of(i),
            })
            .collect()
    }
}

/// One row a loop body touches, relative to the current row.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Touch {
    pub field: Field,
    pub dj: i64,
    pub dk: i64,
    pub kind: AccessKind,
}

/// Touch `field` at the current row.
pub fn at(field: Field, kind: AccessKind) -> Touch {
    Touch {
        field,
        dj: 0,
        dk: 0,
        kind,
    }
}

/// Touch `field` at the row (j + dj, k + dk).
pub fn near(field: Field, dj: i64, dk: i64, kind: AccessKind) -> Touch {
    Touch {
        field,
        dj,
        dk,
        kind,
    }
}

/// Which rows a thread visits, in order.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Rows {
    /// Flattened (k, j) indices [lo, hi): row r is (j, k) = (r mod ny, r div ny).
    KMajor { lo: u64, hi: u64 },
    /// j in [jlo, jhi), each with k = 0..nz innermost.
    JMajor { jlo: u64, jhi: u64 },
    /// The rows j in [jlo, jhi) of the single plane k.
    Plane { k: u64, jlo: u64, jhi: u64 },
}

impl Rows {
    pub fn len(&self, g: &Grid) -> u64 {
        match *self {
            Rows::KMajor { lo, hi } => hi.saturating_sub(lo),
            Rows::JMajor { jlo, jhi } => jhi.saturating_sub(jlo) * g.nz,
            Rows::Plane { jlo, jhi, .. } => jhi.saturating_sub(jlo),
        }
    }

    /// The i-th row visited, as (j, k).
    pub fn row(&self, g: &Grid, i: u64) -> (u64, u64) {
        match *self {
            Rows::KMajor { lo, .. } => ((lo + i) % g.ny, (lo + i) / g.ny),
            Rows::JMajor { jlo, .. } => (jlo + i / g.nz, i % g.nz),
            Rows::Plane { k, jlo, .. } => (jlo + i, k),
        }
    }
}

/// A loop nest over rows.
pub struct RowSweep {
    pub grid: Grid,
    pub rows: Rows,
    /// Shared by the many sweeps of a run (one per plane and step in LU's wavefront).
    pub touches: Arc<[Touch]>,
    /// Compute per point of a row (cycles).
    pub cycles_per_point: u64,
    /// Passes over each row's touches (2 for a forward elimination plus back substitution
    /// along the row itself).
    pub passes: u64,
    /// Visit the rows last to first (a back substitution across rows).
    pub reverse: bool,
    next: u64,
}

impl RowSweep {
    pub fn new(
        grid: Grid,
        rows: Rows,
        touches: impl Into<Arc<[Touch]>>,
        cycles_per_point: u64,
    ) -> Self {
        RowSweep {
            grid,
            rows,
            touches: touches.into(),
            cycles_per_point,
            passes: 1,
            reverse: false,
            next: 0,
        }
    }

    pub fn reversed(mut self) -> Self {
        self.reverse = true;
        self
    }

    pub fn passes(mut self, passes: u64) -> Self {
        self.passes = passes;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.rows.len(&self.grid) == 0
    }
}

impl Gen for RowSweep {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let g = self.grid;
        let n = self.rows.len(&g);
        while self.next < n {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let i = if self.reverse {
                n - 1 - self.next
            } else {
                self.next
            };
            let (j, k) = self.rows.row(&g, i);
            for _ in 0..self.passes {
                for t in self.touches.iter() {
                    let (jj, kk) = (j as i64 + t.dj, k as i64 + t.dk);
                    if jj < 0 || kk < 0 || jj >= g.ny as i64 || kk >= g.nz as i64 {
                        continue;
                    }
                    let row_bytes = g.nx * t.field.comps * 8;
                    let start = t.field.base + (kk as u64 * g.ny + jj as u64) * row_bytes;
                    let first = start & !63;
                    let lines = (start + row_bytes).div_ceil(64) - first / 64;
                    out.push(Op::Run {
                        base: first,
                        lines: lines as u32,
                        stride_bytes: 64,
                        kind: t.kind,
                    });
                }
            }
            let c = g.nx * self.cycles_per_point * self.passes;
            out.push(compute(c, c * 2));
            self.next += 1;
        }
        Status::Done
    }
}
