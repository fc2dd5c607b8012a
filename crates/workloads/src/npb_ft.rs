//! NAS FT (NPB 3.4 OpenMP), reference/workloads.md §3.6: a 3-D FFT by 1-D FFTs along x, y
//! and z, the z pass being a transpose-like gather across every plane.
//!
//! Arrays: u0 and u1, complex doubles of (nx+1) × ny × nz (x fastest, padded by one element
//! as NPB's `NXP`); twiddle, doubles of the same shape; per thread the scratch y1 / y2 of
//! `fftblockpad` (18) × the longest dimension complex values.
//!
//! * setup: `init_ui` zeroes u0, u1, twiddle with a static `collapse(2)` over (k, j) (z-plane
//!   slabs), `compute_initial_conditions` fills u1 plane by plane (static over k, two `randlc`
//!   per value), `compute_indexmap` writes twiddle over (k, j), then the forward FFT
//!   (cffts1, cffts2 on u1, cffts3 from u1 into u0);
//! * each of `niter` iterations: evolve over (k, j) (u0 ← u0·twiddle, u1 ← u0), the inverse FFT
//!   cffts3, cffts2, cffts1 in place on u1, then checksum (1024 scattered reads);
//! * cffts1: static over k; per block of 16 rows j: copy the 16 x-lines (contiguous) into y1,
//!   `cfftz` (log2 nx stages alternating y1 and y2), copy back;
//! * cffts2: static over k; per block of 16 columns i: gather a 256 B piece of every row j;
//! * cffts3: static over j; per block of 16 i: gather one 256 B piece per z-plane (a plane
//!   apart), FFT, scatter back: every piece on a different page, (N − 1)/N of them remote.
//!
//! Every `omp for` ends with a barrier.

use crate::emit::{static_range, Gen, Script, Span, Status, CHUNK_OPS};
use crate::kernel::compute;
use crate::npb_cg::RANDLC_CYCLES;
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{
    map_static, AccessKind, AddressSpace, MapOptions, Op, StaticArray, ThreadSpec, Workload,
    LINE_BYTES,
};
use numalab_core::TaskId;

pub const NAME: &str = "npb-ft";
pub const KEYS: &[&str] = &["class", "niter", "scale"];
pub const DESCRIPTION: &str = "NAS FT (NPB 3.4 OpenMP): 3-D FFT by x, y and z passes over padded complex arrays, z pass gathering one piece per plane (§3.6). \
keys: class=S|W|A|B|C|D|E (A), niter=iterations (the class's: S-A 6, B/C 20, D/E 25), scale=factor in (0,1] on nz, rounded down to a power of two (1)";

pub const PHASES: &[&str] = &["setup", "evolve", "fft-z", "fft-y", "fft-x", "checksum"];
pub const PHASE_SETUP: u16 = 0;
pub const PHASE_EVOLVE: u16 = 1;
pub const PHASE_FFT_Z: u16 = 2;
pub const PHASE_FFT_Y: u16 = 3;
pub const PHASE_FFT_X: u16 = 4;
pub const PHASE_CHECKSUM: u16 = 5;

/// NPB's `fftblock` and `fftblockpad`.
pub const FFTBLOCK: u64 = 16;
pub const FFTBLOCKPAD: u64 = 18;
const COMPLEX: u64 = 16;
/// ≈ 5·log2(n) flops per point per pass (§3.6, E), at two flops per cycle.
pub const FLOPS_PER_POINT_LOG2: u64 = 5;

/// One FT class (§3.6 table).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FtClass {
    pub class: char,
    pub nx: u64,
    pub ny: u64,
    pub nz: u64,
    pub niter: u64,
}

pub const CLASSES: [FtClass; 7] = [
    FtClass {
        class: 'S',
        nx: 64,
        ny: 64,
        nz: 64,
        niter: 6,
    },
    FtClass {
        class: 'W',
        nx: 128,
        ny: 128,
        nz: 32,
        niter: 6,
    },
    FtClass {
        class: 'A',
        nx: 256,
        ny: 256,
        nz: 128,
        niter: 6,
    },
    FtClass {
        class: 'B',
        nx: 512,
        ny: 256,
        nz: 256,
        niter: 20,
    },
    FtClass {
        class: 'C',
        nx: 512,
        ny: 512,
        nz: 512,
        niter: 20,
    },
    FtClass {
        class: 'D',
        nx: 2048,
        ny: 1024,
        nz: 1024,
        niter: 25,
    },
    FtClass {
        class: 'E',
        nx: 4096,
        ny: 2048,
        nz: 2048,
        niter: 25,
    },
];

pub fn class(c: char) -> Option<&'static FtClass> {
    CLASSES.iter().find(|k| k.class == c.to_ascii_uppercase())
}

#[derive(Clone, Debug)]
pub struct NpbFt {
    pub class: FtClass,
    pub nx: u64,
    pub ny: u64,
    pub nz: u64,
    pub niter: u64,
    pub scale: f64,
    pub threads: usize,
}

/// Addresses of the arrays.
#[derive(Copy, Clone, Debug)]
pub struct FtMaps {
    pub u0: u64,
    pub u1: u64,
    pub twiddle: u64,
    /// This thread's y1 (y2 follows it).
    pub scratch: u64,
}

impl NpbFt {
    pub fn from_params(p: &Params, threads: usize) -> Result<NpbFt, WorkloadError> {
        let names: Vec<String> = CLASSES.iter().map(|c| c.class.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let class = CLASSES[p.choice("class", &names, 2)?];
        let niter = p.uint_in("niter", class.niter, 0, 1 << 20)?;
        let scale = p.float_in("scale", 1.0, 0.0, 1.0)?;
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "FT needs at least one thread".into(),
            });
        }
        let want = ((class.nz as f64 * scale) as u64).max(4);
        let nz = 1u64 << (63 - want.leading_zeros());
        Ok(NpbFt {
            class,
            nx: class.nx,
            ny: class.ny,
            nz,
            niter,
            scale,
            threads,
        })
    }

    /// Elements of one array, padding included.
    pub fn elements(&self) -> u64 {
        (self.nx + 1) * self.ny * self.nz
    }

    /// Element index of (i, j, k).
    pub fn index(&self, i: u64, j: u64, k: u64) -> u64 {
        (k * self.ny + j) * (self.nx + 1) + i
    }

    fn maxdim(&self) -> u64 {
        self.nx.max(self.ny).max(self.nz)
    }

    fn scratch_bytes(&self) -> u64 {
        2 * FFTBLOCKPAD * self.maxdim() * COMPLEX
    }

    /// Rows (k, j) of thread t under the static `collapse(2)` split.
    fn rows(&self, t: usize) -> (u64, u64) {
        static_range(self.nz * self.ny, self.threads, t)
    }

    fn row_span(&self, base: u64, lo: u64, hi: u64, elem: u64, kind: AccessKind) -> Span {
        Span::elems(base, lo * (self.nx + 1), hi * (self.nx + 1), elem, kind)
    }

    fn fft_pass(&self, s: &mut Script, m: FtMaps, t: usize, axis: u8, src: u64, dst: u64) {
        // cffts1 and cffts2 split the k planes, cffts3 the j rows
        let outer = if axis == 3 { self.ny } else { self.nz };
        let (lo, hi) = static_range(outer, self.threads, t);
        if hi > lo {
            s.gen(FftPass {
                ft: self.clone(),
                m,
                axis,
                src,
                dst,
                outer: lo,
                outer_hi: hi,
                block: 0,
            });
        }
        s.barrier();
    }

    fn program(&self, m: FtMaps, t: usize) -> Script {
        let mut s = Script::new(PHASES);
        let (rlo, rhi) = self.rows(t);
        let pts = (rhi - rlo) * (self.nx + 1);
        s.phase(PHASE_SETUP);
        // init_ui: u0 = u1 = 0, twiddle = 0 over (k, j)
        s.streams(
            &[
                self.row_span(m.u0, rlo, rhi, COMPLEX, AccessKind::Write),
                self.row_span(m.u1, rlo, rhi, COMPLEX, AccessKind::Write),
                self.row_span(m.twiddle, rlo, rhi, 8, AccessKind::Write),
            ],
            pts,
            pts,
        );
        s.barrier();
        // compute_initial_conditions: u1 plane by plane, static over k, 2 randlc per value
        let (klo, khi) = static_range(self.nz, self.threads, t);
        let plane = self.ny * (self.nx + 1);
        let kpts = (khi - klo) * self.nx * self.ny;
        s.streams(
            &[Span::elems(
                m.u1,
                klo * plane,
                khi * plane,
                COMPLEX,
                AccessKind::Write,
            )],
            kpts * 2 * RANDLC_CYCLES,
            kpts * 2 * 30,
        );
        s.barrier();
        // compute_indexmap: twiddle = exp(−4απ²t·(i² + j² + k²)) over (k, j)
        s.streams(
            &[self.row_span(m.twiddle, rlo, rhi, 8, AccessKind::Write)],
            pts * 20,
            pts * 20,
        );
        s.barrier();
        // forward FFT: u1 → u0
        self.fft_pass(&mut s, m, t, 1, m.u1, m.u1);
        self.fft_pass(&mut s, m, t, 2, m.u1, m.u1);
        self.fft_pass(&mut s, m, t, 3, m.u1, m.u0);
        for _ in 0..self.niter {
            s.phase(PHASE_EVOLVE);
            s.streams(
                &[
                    self.row_span(m.u0, rlo, rhi, COMPLEX, AccessKind::ReadModifyWrite),
                    self.row_span(m.twiddle, rlo, rhi, 8, AccessKind::Read),
                    self.row_span(m.u1, rlo, rhi, COMPLEX, AccessKind::Write),
                ],
                pts * 2,
                pts * 4,
            );
            s.barrier();
            s.phase(PHASE_FFT_Z);
            self.fft_pass(&mut s, m, t, 3, m.u1, m.u1);
            s.phase(PHASE_FFT_Y);
            self.fft_pass(&mut s, m, t, 2, m.u1, m.u1);
            s.phase(PHASE_FFT_X);
            self.fft_pass(&mut s, m, t, 1, m.u1, m.u1);
            // checksum: u1(j mod nx, 3j mod ny, 5j mod nz), j = 1..1024, static over j
            s.phase(PHASE_CHECKSUM);
            let (jlo, jhi) = static_range(1024, self.threads, t);
            for j in jlo + 1..=jhi {
                let e = self.index(j % self.nx, (3 * j) % self.ny, (5 * j) % self.nz);
                s.access(m.u1 + e * COMPLEX, AccessKind::Read);
            }
            s.compute((jhi - jlo) * 4, (jhi - jlo) * 6);
            s.barrier();
        }
        s
    }
}

impl Workload for NpbFt {
    fn name(&self) -> String {
        let mut s = format!("{NAME}:class={},niter={}", self.class.class, self.niter);
        if self.scale < 1.0 {
            s.push_str(&format!(",scale={}", self.scale));
        }
        s
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let task = TaskId(0);
        let o = MapOptions::default;
        let n = self.elements();
        // NPB's COMMON /bigarrays/ u0, pad1(3), u1, pad2(3), twiddle: adjacent in one .bss,
        // the 3-element pads included, each on a cache line (the workload emits whole lines)
        let [u0, _pad1, u1, _pad2, twiddle] = map_static(
            mem,
            task,
            "ft.bss",
            &[
                StaticArray::new("ft.u0", n * COMPLEX, LINE_BYTES),
                StaticArray::new("ft.pad1", 3 * COMPLEX, LINE_BYTES),
                StaticArray::new("ft.u1", n * COMPLEX, LINE_BYTES),
                StaticArray::new("ft.pad2", 3 * COMPLEX, LINE_BYTES),
                StaticArray::new("ft.twiddle", n * 8, LINE_BYTES),
            ],
            o(),
        );
        let scratch = mem.mmap(
            task,
            "ft.scratch",
            self.threads as u64 * self.scratch_bytes(),
            o(),
        );
        (0..self.threads)
            .map(|t| {
                let m = FtMaps {
                    u0,
                    u1,
                    twiddle,
                    scratch: scratch + t as u64 * self.scratch_bytes(),
                };
                ThreadSpec {
                    task,
                    program: Box::new(self.program(m, t)),
                }
            })
            .collect()
    }
}

/// One cffts pass of one thread: its outer indices, block by block.
struct FftPass {
    ft: NpbFt,
    m: FtMaps,
    /// 1 = x, 2 = y, 3 = z.
    axis: u8,
    src: u64,
    dst: u64,
    outer: u64,
    outer_hi: u64,
    block: u64,
}

impl FftPass {
    /// Line length and number of 16-wide blocks per outer index.
    fn shape(&self) -> (u64, u64) {
        let f = &self.ft;
        match self.axis {
            1 => (f.nx, f.ny / FFTBLOCK),
            2 => (f.ny, f.nx / FFTBLOCK),
            _ => (f.nz, f.nx / FFTBLOCK),
        }
    }

    /// The 16 values (i0..i0+16, j, k) of one x-row as a span.
    fn piece(&self, base: u64, i0: u64, j: u64, k: u64, kind: AccessKind) -> Op {
        let e = self.ft.index(i0, j, k);
        let sp = Span::elems(base, e, e + FFTBLOCK, COMPLEX, kind);
        Op::Run {
            base: sp.addr,
            lines: sp.lines as u32,
            stride_bytes: 64,
            kind,
        }
    }

    fn gather(&self, base: u64, kind: AccessKind, out: &mut Vec<Op>) {
        let f = &self.ft;
        let b = self.block * FFTBLOCK;
        match self.axis {
            1 => {
                // 16 consecutive x-rows of plane k: contiguous
                let k = self.outer;
                let sp = Span::elems(
                    base,
                    f.index(0, b, k),
                    f.index(0, b + FFTBLOCK, k),
                    COMPLEX,
                    kind,
                );
                out.push(Op::Run {
                    base: sp.addr,
                    lines: sp.lines as u32,
                    stride_bytes: 64,
                    kind,
                });
            }
            2 => {
                for j in 0..f.ny {
                    out.push(self.piece(base, b, j, self.outer, kind));
                }
            }
            _ => {
                for k in 0..f.nz {
                    out.push(self.piece(base, b, self.outer, k, kind));
                }
            }
        }
    }
}

impl Gen for FftPass {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let (n, blocks) = self.shape();
        let stages = 63 - n.leading_zeros() as u64;
        let scratch_lines = (FFTBLOCK * n * COMPLEX).div_ceil(64);
        let y2 = self.m.scratch + FFTBLOCKPAD * self.ft.maxdim() * COMPLEX;
        while self.outer < self.outer_hi {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            // copy in, cfftz's stages alternating y1 → y2 → y1, copy out
            self.gather(self.src, AccessKind::Read, out);
            out.push(Op::Run {
                base: self.m.scratch,
                lines: scratch_lines as u32,
                stride_bytes: 64,
                kind: AccessKind::Write,
            });
            for st in 0..stages {
                let (from, to) = if st % 2 == 0 {
                    (self.m.scratch, y2)
                } else {
                    (y2, self.m.scratch)
                };
                for (base, kind) in [(from, AccessKind::Read), (to, AccessKind::Write)] {
                    out.push(Op::Run {
                        base,
                        lines: scratch_lines as u32,
                        stride_bytes: 64,
                        kind,
                    });
                }
            }
            let last = if stages.is_multiple_of(2) {
                self.m.scratch
            } else {
                y2
            };
            out.push(Op::Run {
                base: last,
                lines: scratch_lines as u32,
                stride_bytes: 64,
                kind: AccessKind::Read,
            });
            self.gather(self.dst, AccessKind::Write, out);
            let pts = FFTBLOCK * n;
            let flops = pts * FLOPS_PER_POINT_LOG2 * stages;
            out.push(compute(flops / 2, flops));
            self.block += 1;
            if self.block == blocks {
                self.block = 0;
                self.outer += 1;
            }
        }
        Status::Done
    }
}
