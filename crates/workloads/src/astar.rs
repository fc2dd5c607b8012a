//! `astar-like`: the path finding of 473.astar, reference/workloads.md §5.
//!
//! 473.astar finds paths for many objects on 2-D maps (its inputs are 2048 × 2048-cell
//! `BigLakes2048` and `rivers` maps): each query grows a region from its start cell, wavefront
//! by wavefront (the `regwayobj` and `way2obj` searches), until it reaches the goal or a size
//! bound. Every cell has a record of per-cell search state (the `waymap` entry: fill number,
//! distance, parent; the map's terrain byte; region links): [`CELL_BYTES`] here.
//!
//! One unit expands one cell: take it from the current wavefront (a sequential queue), read
//! its eight neighbours' records (three records in each of its own row and the rows above and
//! below, a line each; the rows one map row apart), mark the unvisited passable ones (their records written) and append
//! them to the next wavefront. The wavefront queues are small and stay in the caches; the
//! grid is the footprint, touched along a moving front: good locality within rows, a new line
//! per row step, so the program misses the LLC moderately (§5).

use crate::emit::SplitMix64;
use crate::kernel::{
    byte_runs, compute, scale, scale_suffix, Copies, SingleKernel, Unit, UnitProgram,
};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadProgram};
use numalab_core::TaskId;

pub const NAME: &str = "astar-like";
pub const KEYS: &[&str] = &["side", "queries", "region", "seed", "scale"];
pub const DESCRIPTION: &str = "473.astar-like path finding: wavefront region growing over a 2-D grid of per-cell search records from many start cells, one copy per thread (§5). \
keys: side=cells per map side (2048), queries=searches (2000), region=cells a search expands at most (20000), seed=1, scale=factor in (0,1] on the map's area (1)";

pub const PHASES: &[&str] = &["init", "search"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_SEARCH: u16 = 1;

/// Per-cell record: the waymap entry (fill number, distance, parent: 12 B), terrain and
/// region links; 64 B with alignment, so that 2048² cells make the §5 footprint of
/// 0.2-0.3 GB (256 MiB) (E). The real grid search (473.astar's `Way2_.h`) keeps 4 B a cell
/// (`waymapcellt { w16 fillnum; w16 num; }`) and the terrain in a separate byte array, which
/// is why this kernel misses more than the program (docs/VALIDATION.md, NT19 checks).
pub const CELL_BYTES: u64 = 64;
/// Share of impassable cells (lakes, rivers) (E).
pub const BLOCKED_PER_MILLE: u64 = 200;
/// Compute per expanded cell: eight neighbour tests, cost and heuristic arithmetic, queue
/// bookkeeping. Set from 473.astar's measured APKI 7.96 and CPI 0.98 on a Xeon Gold 5120
/// (NT19, see `crate::kernel`): instructions so that a cell's L2 misses (this kernel on
/// `xeon-gold6130-2n`) make that APKI, cycles so that CPI holds. The measured MPKI (0.01-0.54) is
/// not reproduced: the kernel misses the LLC 2.9 times per 1000 instructions, its 64-byte cell
/// records spreading the moving front over more lines than the real `waymap` does
/// (docs/VALIDATION.md).
pub const CYCLES_PER_CELL: u64 = 285;
pub const INSTRUCTIONS_PER_CELL: u64 = 274;

#[derive(Clone, Debug, PartialEq)]
pub struct Astar {
    pub side_full: u64,
    pub side: u64,
    pub queries: u64,
    pub region: u64,
    pub seed: u64,
    pub scale: f64,
}

impl Astar {
    pub fn from_params(p: &Params) -> Result<Astar, WorkloadError> {
        let side_full = p.uint_in("side", 2048, 16, 1 << 15)?;
        let queries = p.uint("queries", 2000)?;
        let region = p.uint_in("region", 20_000, 1, u32::MAX as u64)?;
        let seed = p.uint("seed", 1)?;
        let scale = scale(p)?;
        // the area scales: the side by its square root
        let side = ((side_full as f64 * scale.sqrt()).round() as u64).max(16);
        Ok(Astar {
            side_full,
            side,
            queries,
            region,
            seed,
            scale,
        })
    }

    pub fn workload(p: &Params, threads: usize) -> Result<Copies<Astar>, WorkloadError> {
        Copies::new(Self::from_params(p)?, threads, NAME)
    }
}

impl SingleKernel for Astar {
    fn spec(&self) -> String {
        format!(
            "{NAME}:side={},queries={},region={},seed={}{}",
            self.side_full,
            self.queries,
            self.region,
            self.seed,
            scale_suffix(self.scale)
        )
    }

    fn build_copy(&self, mem: &mut dyn AddressSpace, task: TaskId) -> Box<dyn ThreadProgram> {
        let cells = self.side * self.side;
        let grid = mem.mmap(
            task,
            "astar.waymap",
            cells * CELL_BYTES,
            MapOptions::default(),
        );
        let mut rng = SplitMix64::new(self.seed ^ 0x6173_7461);
        let blocked = (0..cells)
            .map(|_| rng.below(1000) < BLOCKED_PER_MILLE)
            .collect();
        Box::new(UnitProgram::new(
            AstarRun {
                k: self.clone(),
                grid,
                blocked,
                fill: vec![0; cells as usize],
                query: 0,
                front: Vec::new(),
                next: Vec::new(),
                expanded: 0,
                rng,
                init_done: false,
            },
            PHASES,
        ))
    }
}

struct AstarRun {
    k: Astar,
    grid: u64,
    blocked: Vec<bool>,
    /// The query that last reached each cell (the waymap's fill number).
    fill: Vec<u32>,
    query: u32,
    front: Vec<u32>,
    next: Vec<u32>,
    expanded: u64,
    rng: SplitMix64,
    init_done: bool,
}

impl AstarRun {
    fn cell_addr(&self, c: u32) -> u64 {
        self.grid + c as u64 * CELL_BYTES
    }

    /// Start the next query from a random passable cell; false when all are done.
    fn start_query(&mut self) -> bool {
        if self.query as u64 >= self.k.queries {
            return false;
        }
        self.query += 1;
        let cells = self.k.side * self.k.side;
        let start = loop {
            let c = self.rng.below(cells) as u32;
            if !self.blocked[c as usize] {
                break c;
            }
        };
        self.fill[start as usize] = self.query;
        self.front.clear();
        self.next.clear();
        self.front.push(start);
        self.expanded = 0;
        true
    }
}

impl Unit for AstarRun {
    fn unit(&mut self, out: &mut Vec<Op>) -> bool {
        if !self.init_done {
            // the map read and the waymap cleared: every record written once
            out.push(Op::Phase { id: PHASE_INIT });
            let bytes = self.k.side * self.k.side * CELL_BYTES;
            byte_runs(out, self.grid, bytes, AccessKind::Write);
            let lines = bytes.div_ceil(64);
            out.push(compute(lines * 8, lines * 8));
            out.push(Op::Phase { id: PHASE_SEARCH });
            self.init_done = true;
            return self.start_query();
        }
        if self.front.is_empty() {
            std::mem::swap(&mut self.front, &mut self.next);
        }
        let Some(c) = self.front.pop().filter(|_| self.expanded < self.k.region) else {
            return self.start_query();
        };
        self.expanded += 1;
        let side = self.k.side as i64;
        let (x, y) = (c as i64 % side, c as i64 / side);
        // the rows above, at and below: their lines read; a newly reached cell's record written
        for dy in -1..=1i64 {
            let row = y + dy;
            if row < 0 || row >= side {
                continue;
            }
            let lo = (x - 1).max(0);
            let hi = (x + 1).min(side - 1);
            let first = (row * side + lo) as u32;
            let last = (row * side + hi) as u32;
            let (a, b) = (self.cell_addr(first), self.cell_addr(last) + CELL_BYTES);
            byte_runs(out, a, b - a, AccessKind::Read);
            for n in first..=last {
                if n != c && !self.blocked[n as usize] && self.fill[n as usize] != self.query {
                    self.fill[n as usize] = self.query;
                    out.push(Op::Access {
                        addr: self.cell_addr(n),
                        kind: AccessKind::Write,
                    });
                    self.next.push(n);
                }
            }
        }
        out.push(compute(CYCLES_PER_CELL, INSTRUCTIONS_PER_CELL));
        true
    }
}
