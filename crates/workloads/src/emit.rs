//! Shared machinery for writing thread programs: the OpenMP static split, line-granular streams,
//! and [`Script`], a [`ThreadProgram`] made of a list of steps that expand lazily into [`Op`]s.
//!
//! A workload builds one `Script` per thread at build time. Plain ops (phases, barriers) are
//! stored as they are; loops are [`Gen`]erators that keep a cursor and append a bounded number
//! of ops per call, so the engine pulls a few thousand ops at a time and nothing is allocated
//! per op.

use numalab_core::workload::{AccessKind, Op, ThreadProgram, LINE_BYTES};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Ops appended per `fill` call before a program yields back to the engine.
pub const CHUNK_OPS: usize = 4096;

/// Lines per array per chunk of a [`Streams`] loop (4 KiB of each array): small enough that
/// concurrent streams interleave as they do in a real loop, large enough to keep ops few.
pub const STREAM_CHUNK_LINES: u64 = 64;

/// Iterations `[lo, hi)` of thread `t` under OpenMP `schedule(static)` without a chunk, as
/// libgomp assigns them (reference/workloads.md §0): q = n div T, r = n mod T, thread t gets
/// [t·q + min(t, r), (t+1)·q + min(t+1, r)).
pub fn static_range(n: u64, threads: usize, t: usize) -> (u64, u64) {
    let nt = threads.max(1) as u64;
    let t = t as u64;
    let q = n / nt;
    let r = n % nt;
    (t * q + t.min(r), (t + 1) * q + (t + 1).min(r))
}

/// Start address of the 64-byte line holding `addr`.
#[inline]
pub fn line_of(addr: u64) -> u64 {
    addr & !(LINE_BYTES - 1)
}

/// A run of consecutive lines touched with one kind of access.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// First line (line-aligned address).
    pub addr: u64,
    pub lines: u64,
    pub kind: AccessKind,
}

impl Span {
    /// The lines covering bytes `[lo, hi)` of the array at `base` (empty when `hi <= lo`).
    pub fn covering(base: u64, lo: u64, hi: u64, kind: AccessKind) -> Span {
        if hi <= lo {
            return Span {
                addr: line_of(base),
                lines: 0,
                kind,
            };
        }
        let first = line_of(base + lo);
        let last = line_of(base + hi - 1);
        Span {
            addr: first,
            lines: (last - first) / LINE_BYTES + 1,
            kind,
        }
    }

    /// Elements `[lo, hi)` of `elem_bytes` each of the array at `base`.
    pub fn elems(base: u64, lo: u64, hi: u64, elem_bytes: u64, kind: AccessKind) -> Span {
        Span::covering(base, lo * elem_bytes, hi * elem_bytes, kind)
    }

    /// Appends one `Op::Run` over the span's lines (nothing for an empty span).
    pub fn push_run(self, out: &mut Vec<Op>) {
        if self.lines > 0 {
            out.push(Op::Run {
                base: self.addr,
                lines: self.lines as u32,
                stride_bytes: LINE_BYTES as u16,
                kind: self.kind,
            });
        }
    }
}

/// What a generator did in one call.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Finished: the script moves to its next step.
    Done,
    /// Not finished; call again (normally because `out` reached [`CHUNK_OPS`]).
    More,
    /// Not finished, and the program must end this `fill` now (used by generators whose
    /// behaviour depends on simulated time, such as MLC injectors polling a flag).
    Yield,
}

/// A loop that expands into ops incrementally.
pub trait Gen: Send {
    /// Append ops to `out`, stopping around `CHUNK_OPS`.
    fn emit(&mut self, out: &mut Vec<Op>) -> Status;
}

/// One step of a [`Script`].
pub enum Step {
    Op(Op),
    Gen(Box<dyn Gen>),
    /// Set the flag once every op before this step has been executed (it is handled at the
    /// start of a fresh `fill`, which the engine only requests when the previous chunk ran).
    Signal(Arc<AtomicBool>),
    /// A finished generator, its state dropped.
    Spent,
}

/// A thread program made of steps.
pub struct Script {
    steps: Vec<Step>,
    pos: usize,
    phase_names: &'static [&'static str],
}

impl Script {
    pub fn new(phase_names: &'static [&'static str]) -> Script {
        Script {
            steps: Vec::new(),
            pos: 0,
            phase_names,
        }
    }

    pub fn phase(&mut self, id: u16) {
        debug_assert!(
            (id as usize) < self.phase_names.len(),
            "phase {id} has no name"
        );
        self.steps.push(Step::Op(Op::Phase { id }));
    }

    pub fn barrier(&mut self) {
        self.steps.push(Step::Op(Op::Barrier));
    }

    pub fn compute(&mut self, cycles: u64, instructions: u64) {
        push_compute_steps(&mut self.steps, cycles, instructions);
    }

    pub fn access(&mut self, addr: u64, kind: AccessKind) {
        self.op(Op::Access { addr, kind });
    }

    /// Any single op (a long `Run` resumes across epochs in the engine; a program's
    /// `MovePages` call).
    pub fn op(&mut self, op: Op) {
        self.steps.push(Step::Op(op));
    }

    pub fn gen(&mut self, g: impl Gen + 'static) {
        self.steps.push(Step::Gen(Box::new(g)));
    }

    /// A loop over several arrays at once (see [`Streams`]); nothing is added if it is empty.
    pub fn streams(&mut self, spans: &[Span], cycles: u64, instructions: u64) {
        self.streams_chunked(spans, cycles, instructions, STREAM_CHUNK_LINES);
    }

    pub fn streams_chunked(
        &mut self,
        spans: &[Span],
        cycles: u64,
        instructions: u64,
        chunk_lines: u64,
    ) {
        let s = Streams::new(spans, cycles, instructions, chunk_lines);
        if !s.is_empty() {
            self.gen(s);
        }
    }

    pub fn signal(&mut self, flag: Arc<AtomicBool>) {
        self.steps.push(Step::Signal(flag));
    }

    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

fn push_compute_steps(steps: &mut Vec<Step>, mut cycles: u64, mut instructions: u64) {
    while cycles > 0 || instructions > 0 {
        let c = cycles.min(u32::MAX as u64);
        let i = instructions.min(u32::MAX as u64);
        steps.push(Step::Op(Op::Compute {
            cycles: c as u32,
            instructions: i as u32,
        }));
        cycles -= c;
        instructions -= i;
    }
}

impl ThreadProgram for Script {
    fn fill(&mut self, out: &mut Vec<Op>) -> bool {
        while self.pos < self.steps.len() {
            if out.len() >= CHUNK_OPS {
                return true;
            }
            match &mut self.steps[self.pos] {
                Step::Op(op) => {
                    out.push(*op);
                    self.pos += 1;
                }
                Step::Gen(g) => match g.emit(out) {
                    Status::Done => {
                        // free the generator's state as soon as it is finished
                        self.steps[self.pos] = Step::Spent;
                        self.pos += 1;
                    }
                    Status::More => {}
                    Status::Yield => return true,
                },
                Step::Signal(flag) => {
                    if !out.is_empty() {
                        return true;
                    }
                    flag.store(true, Ordering::Release);
                    self.pos += 1;
                }
                Step::Spent => self.pos += 1,
            }
        }
        false
    }

    fn phase_names(&self) -> &'static [&'static str] {
        self.phase_names
    }
}

/// A loop streaming through several arrays together (a stride-1 `do` loop touching 1-6
/// arrays), emitted as interleaved [`Op::Run`]s of up to `chunk_lines` lines per array, with
/// the loop's compute spread evenly over the chunks. Arrays of different element sizes advance
/// proportionally, as they do in the real loop.
pub struct Streams {
    spans: [Span; 6],
    nspans: usize,
    nchunks: u64,
    next: u64,
    cycles: u64,
    instructions: u64,
}

impl Streams {
    pub fn new(spans: &[Span], cycles: u64, instructions: u64, chunk_lines: u64) -> Streams {
        assert!(spans.len() <= 6, "a Streams loop takes at most 6 arrays");
        assert!(chunk_lines > 0 && chunk_lines <= u32::MAX as u64);
        let mut arr = [Span {
            addr: 0,
            lines: 0,
            kind: AccessKind::Read,
        }; 6];
        let mut n = 0;
        for s in spans.iter().filter(|s| s.lines > 0) {
            arr[n] = *s;
            n += 1;
        }
        let max_lines = arr[..n].iter().map(|s| s.lines).max().unwrap_or(0);
        let mut nchunks = max_lines.div_ceil(chunk_lines);
        if nchunks == 0 && (cycles > 0 || instructions > 0) {
            nchunks = 1;
        }
        Streams {
            spans: arr,
            nspans: n,
            nchunks,
            next: 0,
            cycles,
            instructions,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.nchunks == 0
    }
}

#[inline]
fn share(total: u64, c: u64, k: u64) -> u64 {
    ((total as u128 * c as u128) / k as u128) as u64
}

impl Gen for Streams {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let k = self.nchunks;
        while self.next < k {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let c = self.next;
            for s in &self.spans[..self.nspans] {
                let lo = share(s.lines, c, k);
                let hi = share(s.lines, c + 1, k);
                if hi > lo {
                    out.push(Op::Run {
                        base: s.addr + lo * LINE_BYTES,
                        lines: (hi - lo) as u32,
                        stride_bytes: LINE_BYTES as u16,
                        kind: s.kind,
                    });
                }
            }
            let cy = share(self.cycles, c + 1, k) - share(self.cycles, c, k);
            let ins = share(self.instructions, c + 1, k) - share(self.instructions, c, k);
            if cy > 0 || ins > 0 {
                out.push(Op::Compute {
                    cycles: cy.min(u32::MAX as u64) as u32,
                    instructions: ins.min(u32::MAX as u64) as u32,
                });
            }
            self.next += 1;
        }
        Status::Done
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a small, fast, seedable generator for the shuffles
/// that do not have to reproduce a benchmark's own RNG.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (multiply-shift; the bias is below 2^-32 for the bounds used here).
    #[inline]
    pub fn below(&mut self, bound: u64) -> u64 {
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libgomp_static_split() {
        // 10 iterations over 4 threads: 3,3,2,2
        let r: Vec<_> = (0..4).map(|t| static_range(10, 4, t)).collect();
        assert_eq!(r, vec![(0, 3), (3, 6), (6, 8), (8, 10)]);
        // more threads than iterations: the first n threads get one each
        assert_eq!(static_range(2, 4, 3), (2, 2));
        assert_eq!(static_range(2, 4, 1), (1, 2));
    }

    #[test]
    fn spans_cover_lines() {
        let s = Span::covering(0x1000, 8, 8 * 17, AccessKind::Read);
        assert_eq!((s.addr, s.lines), (0x1000, 3));
        assert_eq!(Span::covering(0x1000, 64, 64, AccessKind::Read).lines, 0);
        assert_eq!(Span::elems(0, 0, 16, 4, AccessKind::Read).lines, 1);
    }

    #[test]
    fn streams_emit_every_line_once() {
        let spans = [
            Span {
                addr: 0,
                lines: 1000,
                kind: AccessKind::Read,
            },
            Span {
                addr: 1 << 30,
                lines: 500,
                kind: AccessKind::Write,
            },
        ];
        let mut s = Streams::new(&spans, 777, 0, 64);
        let mut out = Vec::new();
        while s.emit(&mut out) != Status::Done {}
        let mut lines = [0u64; 2];
        let mut cycles = 0u64;
        for op in &out {
            match *op {
                Op::Run {
                    base,
                    lines: l,
                    kind,
                    ..
                } => {
                    lines[(base >= 1 << 30) as usize] +=
                        l as u64 * (kind == spans[(base >= 1 << 30) as usize].kind) as u64
                }
                Op::Compute { cycles: c, .. } => cycles += c as u64,
                _ => panic!(),
            }
        }
        assert_eq!(lines, [1000, 500]);
        assert_eq!(cycles, 777);
    }
}
