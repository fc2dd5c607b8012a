//! `h264ref-like`: the motion search of 464.h264ref (the H.264/AVC reference encoder, JM),
//! reference/workloads.md §5.
//!
//! 464.h264ref encodes short video sequences. For each 16 × 16 macroblock of a frame it
//! searches each reference frame (the last [`REFS`] encoded frames, kept with their
//! quarter-pel interpolated planes) in a window of ±16 pixels around the macroblock: a full
//! search of SADs over the window's rows (read row by row, the rows one padded frame width
//! apart), then a quarter-pel refinement around the best vector. The reconstructed macroblock
//! is written to the current frame, which becomes a reference when the frame is done. The
//! frames and their planes are the ≈ 60 MB footprint (§5); consecutive macroblocks' windows
//! overlap, so most window reads hit the caches: a low LLC miss rate under heavy compute.

use crate::kernel::{byte_runs, compute, Copies, SingleKernel, Unit, UnitProgram};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadProgram};
use numalab_core::TaskId;

pub const NAME: &str = "h264ref-like";
pub const KEYS: &[&str] = &["width", "height", "frames"];
pub const DESCRIPTION: &str = "464.h264ref-like motion search: per 16x16 macroblock, a ±16-pixel full search in each of 5 reference frames with quarter-pel planes, then the reconstructed block written, one copy per thread (§5). \
keys: width=frame width in pixels (352, CIF), height=frame height (288), frames=frames encoded (30)";

pub const PHASES: &[&str] = &["init", "encode"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_ENCODE: u16 = 1;

/// Reference frames searched per macroblock (E: JM's configuration for SPEC's inputs).
pub const REFS: u64 = 5;
/// Search range, pixels each way.
pub const SEARCH: u64 = 16;
/// Padding of each plane, pixels on every side (JM pads the reference planes).
pub const PAD: u64 = 32;
/// Interpolated planes per reference frame: the full-pel luma plus the 15 sub-pel positions.
pub const SUBPEL_PLANES: u64 = 16;
/// Rows read at each of the 8 quarter-pel refinement positions.
pub const REFINE_ROWS: u64 = 16;
/// Compute per macroblock and reference: the SADs of (2·16 + 1)² positions over 256 pixels,
/// mode decision and transform. Set from 464.h264ref's measured APKI 1.0 and CPI 0.377 on a
/// Xeon Gold 5120 (NT19, see `crate::kernel`): instructions so that the search windows' L2 misses
/// (this kernel on `xeon-gold6130-2n`) make that APKI, cycles so that CPI holds. MPKI (0.00-0.03
/// measured) not fitted: 0.000 (`crates/sim/tests/spec_characteristics.rs`).
pub const CYCLES_PER_MB_REF: u64 = 16_500;
pub const INSTRUCTIONS_PER_MB_REF: u64 = 44_500;

#[derive(Clone, Debug, PartialEq)]
pub struct H264ref {
    pub width: u64,
    pub height: u64,
    pub frames: u64,
}

impl H264ref {
    pub fn from_params(p: &Params) -> Result<H264ref, WorkloadError> {
        Ok(H264ref {
            width: p.uint_in("width", 352, 16, 8192)? / 16 * 16,
            height: p.uint_in("height", 288, 16, 8192)? / 16 * 16,
            frames: p.uint("frames", 30)?,
        })
    }

    pub fn workload(p: &Params, threads: usize) -> Result<Copies<H264ref>, WorkloadError> {
        Copies::new(Self::from_params(p)?, threads, NAME)
    }

    /// Bytes of one padded plane (one byte per pixel).
    fn plane_bytes(&self) -> u64 {
        (self.width + 2 * PAD) * (self.height + 2 * PAD)
    }

    /// Bytes of one reference frame: its interpolated luma planes and its chroma.
    pub fn frame_bytes(&self) -> u64 {
        self.plane_bytes() * SUBPEL_PLANES + self.width * self.height / 2
    }
}

impl SingleKernel for H264ref {
    fn spec(&self) -> String {
        format!(
            "{NAME}:width={},height={},frames={}",
            self.width, self.height, self.frames
        )
    }

    fn build_copy(&self, mem: &mut dyn AddressSpace, task: TaskId) -> Box<dyn ThreadProgram> {
        // REFS references and the frame being encoded, in a ring
        let frames = mem.mmap(
            task,
            "h264ref.frames",
            (REFS + 1) * self.frame_bytes(),
            MapOptions::default(),
        );
        Box::new(UnitProgram::new(
            H264Run {
                k: self.clone(),
                frames,
                frame: 0,
                mb: 0,
                init_done: false,
            },
            PHASES,
        ))
    }
}

struct H264Run {
    k: H264ref,
    frames: u64,
    /// Frames encoded so far (the current one's slot is `frame % (REFS + 1)`).
    frame: u64,
    /// Next macroblock of the current frame.
    mb: u64,
    init_done: bool,
}

impl H264Run {
    fn frame_base(&self, f: u64) -> u64 {
        self.frames + (f % (REFS + 1)) * self.k.frame_bytes()
    }

    /// Read a block of `cols` × `rows` pixels at `(x, y)` of plane `plane` of frame `f`
    /// (padded coordinates: x, y ≥ 0 within the padded plane).
    fn rows(
        &self,
        out: &mut Vec<Op>,
        f: u64,
        plane: u64,
        (x, y): (u64, u64),
        (cols, rows): (u64, u64),
    ) {
        let stride = self.k.width + 2 * PAD;
        let base = self.frame_base(f) + plane * self.k.plane_bytes();
        for r in 0..rows {
            byte_runs(out, base + (y + r) * stride + x, cols, AccessKind::Read);
        }
    }
}

impl Unit for H264Run {
    fn unit(&mut self, out: &mut Vec<Op>) -> bool {
        if !self.init_done {
            // the first frames read in and interpolated: every reference slot written
            out.push(Op::Phase { id: PHASE_INIT });
            let bytes = (REFS + 1) * self.k.frame_bytes();
            byte_runs(out, self.frames, bytes, AccessKind::Write);
            let lines = bytes.div_ceil(64);
            out.push(compute(lines * 64, lines * 64));
            out.push(Op::Phase { id: PHASE_ENCODE });
            self.init_done = true;
            return self.k.frames > 0;
        }
        let per_row = self.k.width / 16;
        let (mx, my) = ((self.mb % per_row) * 16, (self.mb / per_row) * 16);
        // search each reference: the ±SEARCH window around the block (full pel), then the
        // quarter-pel refinement in the interpolated planes
        let window = 16 + 2 * SEARCH;
        for r in 1..=REFS.min(self.frame.max(1)) {
            let f = self.frame + REFS + 1 - r;
            let (x, y) = (PAD + mx - SEARCH, PAD + my - SEARCH);
            self.rows(out, f, 0, (x, y), (window, window));
            for plane in [1, 5, 10] {
                self.rows(out, f, plane, (PAD + mx, PAD + my), (17, REFINE_ROWS));
            }
            out.push(compute(CYCLES_PER_MB_REF, INSTRUCTIONS_PER_MB_REF));
        }
        // the reconstructed block written to the current frame (luma rows, full pel)
        let stride = self.k.width + 2 * PAD;
        let cur = self.frame_base(self.frame);
        for r in 0..16 {
            let a = cur + (PAD + my + r) * stride + PAD + mx;
            byte_runs(out, a, 16, AccessKind::Write);
        }
        self.mb += 1;
        if self.mb == per_row * (self.k.height / 16) {
            // the frame done: interpolated into its sub-pel planes (written), and it becomes
            // the newest reference
            byte_runs(out, cur, self.k.frame_bytes(), AccessKind::Write);
            let lines = self.k.frame_bytes().div_ceil(64);
            out.push(compute(lines * 64, lines * 128));
            self.mb = 0;
            self.frame += 1;
        }
        self.frame < self.k.frames
    }
}
