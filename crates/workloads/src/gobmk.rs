//! `gobmk-like`: the game-tree search of 445.gobmk (GNU Go), reference/workloads.md §5.
//!
//! 445.gobmk analyses Go positions (its inputs are test suites of positions to read out):
//! a depth-first search that plays and undoes moves on a small board, matches local shapes
//! against its pattern databases at each node, and keeps results in a hash table (the
//! transposition/reading cache). The board and the search stack are a few KB; the pattern
//! databases are a few MB of read-only tables; the hash table is most of the ≈ 30 MB footprint
//! (§5). Per search node: play the move (board writes), [`PATTERN_READS`] pattern-table reads at
//! shape-dependent positions, one hash probe and, at a new node, its store; much compute
//! between them: a very low LLC miss rate.

use crate::emit::SplitMix64;
use crate::kernel::{
    byte_runs, compute, scale, scale_suffix, scaled, Copies, SingleKernel, Unit, UnitProgram,
};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadProgram};
use numalab_core::TaskId;

pub const NAME: &str = "gobmk-like";
pub const KEYS: &[&str] = &["hash_mb", "nodes", "seed", "scale"];
pub const DESCRIPTION: &str = "445.gobmk-like game-tree search: moves played on a cache-resident board, pattern-database reads, a transposition hash table, heavy compute per node, one copy per thread (§5). \
keys: hash_mb=hash table (24), nodes=search nodes (5000000), seed=1, scale=factor in (0,1] on the hash table (1)";

pub const PHASES: &[&str] = &["init", "search"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_SEARCH: u16 = 1;

/// Board, move stack and search state: a few KB (19 × 19 board arrays, E).
pub const BOARD_BYTES: u64 = 16 * 1024;
/// Pattern databases (the compiled `patterns.db`, `eyes.db`, joseki...): a few MB (E).
pub const PATTERN_BYTES: u64 = 4 << 20;
/// Pattern-table reads per node (E).
pub const PATTERN_READS: u64 = 8;
/// Compute per node: move generation, liberty counting, pattern matching. Set from
/// 445.gobmk's measured APKI 1.02 and CPI 0.736 on a Xeon Gold 5120 (NT19, see `crate::kernel`):
/// instructions so that a node's L2 misses (this kernel on `xeon-gold6130-2n`) make that APKI,
/// cycles so that the node takes CPI × instructions with its stalls. MPKI (0.11-0.56 measured) not
/// fitted: 0.07 (`crates/sim/tests/spec_characteristics.rs`).
pub const CYCLES_PER_NODE: u64 = 5_200;
pub const INSTRUCTIONS_PER_NODE: u64 = 7_300;

#[derive(Clone, Debug, PartialEq)]
pub struct Gobmk {
    pub hash_mb_full: u64,
    pub hash_bytes: u64,
    pub nodes: u64,
    pub seed: u64,
    pub scale: f64,
}

impl Gobmk {
    pub fn from_params(p: &Params) -> Result<Gobmk, WorkloadError> {
        let hash_mb_full = p.uint_in("hash_mb", 24, 1, 1 << 14)?;
        let nodes = p.uint("nodes", 5_000_000)?;
        let seed = p.uint("seed", 1)?;
        let scale = scale(p)?;
        Ok(Gobmk {
            hash_mb_full,
            hash_bytes: scaled(hash_mb_full << 20, scale, 4096),
            nodes,
            seed,
            scale,
        })
    }

    pub fn workload(p: &Params, threads: usize) -> Result<Copies<Gobmk>, WorkloadError> {
        Copies::new(Self::from_params(p)?, threads, NAME)
    }
}

impl SingleKernel for Gobmk {
    fn spec(&self) -> String {
        format!(
            "{NAME}:hash_mb={},nodes={},seed={}{}",
            self.hash_mb_full,
            self.nodes,
            self.seed,
            scale_suffix(self.scale)
        )
    }

    fn build_copy(&self, mem: &mut dyn AddressSpace, task: TaskId) -> Box<dyn ThreadProgram> {
        let board = mem.mmap(task, "gobmk.board", BOARD_BYTES, MapOptions::default());
        let patterns = mem.mmap(task, "gobmk.patterns", PATTERN_BYTES, MapOptions::default());
        let hash = mem.mmap(task, "gobmk.hash", self.hash_bytes, MapOptions::default());
        Box::new(UnitProgram::new(
            GobmkRun {
                k: self.clone(),
                board,
                patterns,
                hash,
                done: 0,
                rng: SplitMix64::new(self.seed ^ 0x676f_626d),
                init_done: false,
            },
            PHASES,
        ))
    }
}

struct GobmkRun {
    k: Gobmk,
    board: u64,
    patterns: u64,
    hash: u64,
    done: u64,
    rng: SplitMix64,
    init_done: bool,
}

impl Unit for GobmkRun {
    fn unit(&mut self, out: &mut Vec<Op>) -> bool {
        if !self.init_done {
            // the databases loaded and the hash table cleared
            out.push(Op::Phase { id: PHASE_INIT });
            for (base, bytes) in [
                (self.board, BOARD_BYTES),
                (self.patterns, PATTERN_BYTES),
                (self.hash, self.k.hash_bytes),
            ] {
                byte_runs(out, base, bytes, AccessKind::Write);
            }
            out.push(Op::Phase { id: PHASE_SEARCH });
            self.init_done = true;
            return self.k.nodes > 0;
        }
        // play the move: a few board lines updated
        for _ in 0..4 {
            out.push(Op::Access {
                addr: self.board + self.rng.below(BOARD_BYTES),
                kind: AccessKind::ReadModifyWrite,
            });
        }
        for _ in 0..PATTERN_READS {
            out.push(Op::Access {
                addr: self.patterns + self.rng.below(PATTERN_BYTES),
                kind: AccessKind::Read,
            });
        }
        // the reading cache: probe, and store the result of a node not found (half, E)
        let slot = self.hash + self.rng.below(self.k.hash_bytes / 64) * 64;
        out.push(Op::Access {
            addr: slot,
            kind: AccessKind::Read,
        });
        if self.rng.below(2) == 0 {
            out.push(Op::Access {
                addr: slot,
                kind: AccessKind::Write,
            });
        }
        out.push(compute(CYCLES_PER_NODE, INSTRUCTIONS_PER_NODE));
        self.done += 1;
        self.done < self.k.nodes
    }
}
