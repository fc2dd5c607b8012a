//! `hmmer-like`: the profile-HMM search of 456.hmmer (HMMER 2's hmmsearch), reference/workloads.md §5.
//!
//! 456.hmmer scores sequences against a profile hidden Markov model with the Viterbi dynamic
//! programme (`P7Viterbi`): for a sequence of L residues and a model of M states it fills an
//! (L + 1) × (M + 1) matrix of three score rows (match, insert, delete: 4-byte integers), row
//! i from row i − 1, the model's transition and emission scores (a few tens of KB, cache-
//! resident) and residue i. The matrix is allocated once at its largest size and reused
//! (`ResizePlan7Matrix`), so each sequence streams through the same few MB; the sequence
//! database (most of the ≈ 30 MB footprint, §5) is read sequentially. Streaming over small
//! matrices with much integer compute per cell: a very low LLC miss rate.

use crate::emit::SplitMix64;
use crate::kernel::{
    byte_runs, compute, scale, scale_suffix, scaled, Copies, SingleKernel, Unit, UnitProgram,
};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadProgram};
use numalab_core::TaskId;

pub const NAME: &str = "hmmer-like";
pub const KEYS: &[&str] = &["states", "sequences", "db_mb", "seed", "scale"];
pub const DESCRIPTION: &str = "456.hmmer-like Viterbi search: per sequence, a DP matrix of 3 score rows × model states filled row by row (reused, streamed), model scores cache-resident, the sequence database read sequentially, one copy per thread (§5). \
keys: states=model states M (500), sequences=sequences scored (20000), db_mb=sequence database (24), seed=1, scale=factor in (0,1] on the database (1)";

pub const PHASES: &[&str] = &["init", "viterbi"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_VITERBI: u16 = 1;

/// Score bytes per DP cell: match, insert and delete scores, 4-byte integers.
pub const CELL_BYTES: u64 = 12;
/// Model scores per state: 7 transitions and 20 emissions for match and insert (4 B each).
pub const MODEL_BYTES_PER_STATE: u64 = (7 + 2 * 20) * 4;
/// Sequence lengths are drawn in [MIN_LEN, MAX_LEN) residues (Swiss-Prot-like, E).
pub const MIN_LEN: u64 = 100;
pub const MAX_LEN: u64 = 700;
/// Compute per DP cell: the three max-of-sums of the Viterbi recurrence with their bounds
/// tests. Set from 456.hmmer's measured APKI 1.64 and CPI 0.375 on a Xeon Gold 5120 (NT19, see
/// `crate::kernel`): a row's lines missing the L2 (the full matrix streams through it, as
/// `P7Viterbi` keeps it for the traceback) over that APKI give the instructions per cell, CPI ×
/// instructions the cycles. MPKI (0.00-0.01 measured) not fitted: 0.011
/// (`tests/spec_characteristics.rs` in crates/sim).
pub const CYCLES_PER_CELL: u64 = 40;
pub const INSTRUCTIONS_PER_CELL: u64 = 106;

#[derive(Clone, Debug, PartialEq)]
pub struct Hmmer {
    pub states: u64,
    pub sequences: u64,
    pub db_mb_full: u64,
    pub db_bytes: u64,
    pub seed: u64,
    pub scale: f64,
}

impl Hmmer {
    pub fn from_params(p: &Params) -> Result<Hmmer, WorkloadError> {
        let states = p.uint_in("states", 500, 1, 100_000)?;
        let sequences = p.uint("sequences", 20_000)?;
        let db_mb_full = p.uint_in("db_mb", 24, 1, 1 << 14)?;
        let seed = p.uint("seed", 1)?;
        let scale = scale(p)?;
        Ok(Hmmer {
            states,
            sequences,
            db_mb_full,
            db_bytes: scaled(db_mb_full << 20, scale, MAX_LEN),
            seed,
            scale,
        })
    }

    pub fn workload(p: &Params, threads: usize) -> Result<Copies<Hmmer>, WorkloadError> {
        Copies::new(Self::from_params(p)?, threads, NAME)
    }

    fn row_bytes(&self) -> u64 {
        (self.states + 1) * CELL_BYTES
    }
}

impl SingleKernel for Hmmer {
    fn spec(&self) -> String {
        format!(
            "{NAME}:states={},sequences={},db_mb={},seed={}{}",
            self.states,
            self.sequences,
            self.db_mb_full,
            self.seed,
            scale_suffix(self.scale)
        )
    }

    fn build_copy(&self, mem: &mut dyn AddressSpace, task: TaskId) -> Box<dyn ThreadProgram> {
        let model_bytes = self.states * MODEL_BYTES_PER_STATE;
        let model = mem.mmap(task, "hmmer.model", model_bytes, MapOptions::default());
        let db = mem.mmap(task, "hmmer.seqdb", self.db_bytes, MapOptions::default());
        let matrix = mem.mmap(
            task,
            "hmmer.dpmatrix",
            (MAX_LEN + 1) * self.row_bytes(),
            MapOptions::default(),
        );
        Box::new(UnitProgram::new(
            HmmerRun {
                k: self.clone(),
                model,
                model_bytes,
                db,
                db_at: 0,
                matrix,
                done: 0,
                len: 0,
                row: 0,
                rng: SplitMix64::new(self.seed ^ 0x686d_6d72),
                init_done: false,
            },
            PHASES,
        ))
    }
}

struct HmmerRun {
    k: Hmmer,
    model: u64,
    model_bytes: u64,
    db: u64,
    db_at: u64,
    matrix: u64,
    done: u64,
    /// The current sequence's length and the next row to fill (0: start a sequence).
    len: u64,
    row: u64,
    rng: SplitMix64,
    init_done: bool,
}

impl Unit for HmmerRun {
    fn unit(&mut self, out: &mut Vec<Op>) -> bool {
        if !self.init_done {
            // the model and the database read in
            out.push(Op::Phase { id: PHASE_INIT });
            byte_runs(out, self.model, self.model_bytes, AccessKind::Write);
            byte_runs(out, self.db, self.k.db_bytes, AccessKind::Write);
            out.push(Op::Phase { id: PHASE_VITERBI });
            self.init_done = true;
            return self.k.sequences > 0;
        }
        if self.row == 0 {
            // the next sequence: read from the database (wrapping), row 0 initialised
            self.len = MIN_LEN + self.rng.below(MAX_LEN - MIN_LEN);
            if self.db_at + self.len > self.k.db_bytes {
                self.db_at = 0;
            }
            byte_runs(out, self.db + self.db_at, self.len, AccessKind::Read);
            self.db_at += self.len;
            byte_runs(out, self.matrix, self.k.row_bytes(), AccessKind::Write);
            self.row = 1;
        }
        // one row: the previous row and the model's scores read, this row written
        let rb = self.k.row_bytes();
        byte_runs(out, self.matrix + (self.row - 1) * rb, rb, AccessKind::Read);
        byte_runs(out, self.model, self.model_bytes, AccessKind::Read);
        byte_runs(out, self.matrix + self.row * rb, rb, AccessKind::Write);
        out.push(compute(
            self.k.states * CYCLES_PER_CELL,
            self.k.states * INSTRUCTIONS_PER_CELL,
        ));
        self.row += 1;
        if self.row > self.len {
            self.row = 0;
            self.done += 1;
        }
        self.done < self.k.sequences
    }
}
