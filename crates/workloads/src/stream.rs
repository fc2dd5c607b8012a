//! STREAM 5.10 (McCalpin) copy / scale / add / triad, reference/workloads.md §2.1.
//!
//! Three arrays a, b, c of n doubles. Every loop is an `omp parallel for` with the static
//! schedule (libgomp split, §0) and its implicit barrier, so each thread streams its own slice of
//! every array; the parallel initialisation loop gives each thread's slice to its node under
//! first touch, and `init=serial` makes the master write everything (all pages on its node).
//! `mode=processes` is M13's setup: one single-threaded STREAM process per CPU, each its own task
//! with private arrays (they all start at time 0 here; M13 started them one after the other).

use crate::emit::{static_range, Script, Span};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, ThreadSpec, Workload};
use numalab_core::TaskId;

pub const NAME: &str = "stream";
pub const KEYS: &[&str] = &["kernel", "n", "ntimes", "init", "mode"];
pub const DESCRIPTION: &str = "STREAM copy/scale/add/triad over 3 arrays of n doubles, static OpenMP split (§2.1). \
keys: kernel=all|copy|scale|add|triad (all; triad with mode=processes), n=elements (10000000), ntimes=10, \
init=parallel|serial (parallel), mode=threads|processes (threads)";

/// Phase names, indexed by phase id: 0 = init, then 1 + [`Kernel`] index.
pub const PHASES: &[&str] = &["init", "copy", "scale", "add", "triad"];

/// STREAM 5.10's default array size.
pub const DEFAULT_N: u64 = 10_000_000;
/// STREAM's NTIMES.
pub const DEFAULT_NTIMES: u64 = 10;
/// Compute per element of every loop, in cycles (§2.1: ≈ 1 cycle per element, E).
pub const CYCLES_PER_ELEMENT: u64 = 1;
const ELEM_BYTES: u64 = 8;

/// The four STREAM kernels, in the order STREAM runs them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// `c[j] = a[j]`
    Copy,
    /// `b[j] = s·c[j]`
    Scale,
    /// `c[j] = a[j] + b[j]`
    Add,
    /// `a[j] = b[j] + s·c[j]`
    Triad,
}

impl Kernel {
    pub const ALL: [Kernel; 4] = [Kernel::Copy, Kernel::Scale, Kernel::Add, Kernel::Triad];

    pub fn name(self) -> &'static str {
        PHASES[self.phase() as usize]
    }

    /// The phase id this kernel's repetitions are timed under.
    pub fn phase(self) -> u16 {
        1 + self as u16
    }

    /// Bytes per element that STREAM counts when it reports bandwidth (§2.1): 16 for copy and
    /// scale, 24 for add and triad. Write-allocate traffic (one more 8 B per element) is not
    /// counted, as STREAM does not count it.
    pub fn counted_bytes_per_element(self) -> u64 {
        match self {
            Kernel::Copy | Kernel::Scale => 16,
            Kernel::Add | Kernel::Triad => 24,
        }
    }

    /// (arrays read, array written) as indices 0 = a, 1 = b, 2 = c.
    fn arrays(self) -> (&'static [usize], usize) {
        match self {
            Kernel::Copy => (&[0], 2),
            Kernel::Scale => (&[2], 1),
            Kernel::Add => (&[0, 1], 2),
            Kernel::Triad => (&[1, 2], 0),
        }
    }
}

/// Bytes STREAM counts for one repetition of `kernel` over `n` elements, so that a test can
/// turn a phase time into STREAM's bandwidth figure.
pub fn counted_bytes(kernel: Kernel, n: u64) -> u64 {
    kernel.counted_bytes_per_element() * n
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Init {
    /// Each thread initialises its static slice (STREAM's default).
    Parallel,
    /// The master thread initialises every array (§2.1 variant `serial-init`).
    Serial,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One OpenMP process with T threads.
    Threads,
    /// T single-threaded processes (tasks 0..T), each with its own arrays (M13).
    Processes,
}

/// The STREAM workload; see the module documentation.
#[derive(Clone, Debug)]
pub struct Stream {
    pub n: u64,
    pub ntimes: u64,
    pub kernels: Vec<Kernel>,
    pub init: Init,
    pub mode: Mode,
    pub threads: usize,
}

impl Stream {
    pub fn from_params(p: &Params, threads: usize) -> Result<Stream, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "STREAM needs at least one thread".into(),
            });
        }
        let mode =
            [Mode::Threads, Mode::Processes][p.choice("mode", &["threads", "processes"], 0)?];
        let default_kernel = if mode == Mode::Processes { 4 } else { 0 };
        let k = p.choice(
            "kernel",
            &["all", "copy", "scale", "add", "triad"],
            default_kernel,
        )?;
        let kernels = if k == 0 {
            Kernel::ALL.to_vec()
        } else {
            vec![Kernel::ALL[k - 1]]
        };
        let n = p.uint_in("n", DEFAULT_N, 1, 1 << 40)?;
        let ntimes = p.uint_in("ntimes", DEFAULT_NTIMES, 1, 1 << 20)?;
        let init = [Init::Parallel, Init::Serial][p.choice("init", &["parallel", "serial"], 0)?];
        Ok(Stream {
            n,
            ntimes,
            kernels,
            init,
            mode,
            threads,
        })
    }

    fn kernel_key(&self) -> &'static str {
        if self.kernels.len() == 4 {
            "all"
        } else {
            self.kernels[0].name()
        }
    }

    /// Bytes STREAM counts for one repetition of every selected kernel, in order.
    pub fn counted_bytes_per_repetition(&self) -> Vec<(Kernel, u64)> {
        self.kernels
            .iter()
            .map(|k| (*k, counted_bytes(*k, self.n)))
            .collect()
    }

    /// The program of thread `t` of `nthreads` over arrays at `bases`.
    fn program(&self, bases: [u64; 3], t: usize, nthreads: usize) -> Script {
        let mut s = Script::new(PHASES);
        let (lo, hi) = static_range(self.n, nthreads, t);
        let slice = |arr: usize, kind| Span::elems(bases[arr], lo, hi, ELEM_BYTES, kind);
        let work = (hi - lo) * CYCLES_PER_ELEMENT;
        s.phase(0);
        // for (j...) { a[j] = 1.0; b[j] = 2.0; c[j] = 0.0; }
        match self.init {
            Init::Parallel => s.streams(
                &[
                    slice(0, AccessKind::Write),
                    slice(1, AccessKind::Write),
                    slice(2, AccessKind::Write),
                ],
                work,
                work,
            ),
            Init::Serial if t == 0 => {
                let all =
                    |arr: usize| Span::elems(bases[arr], 0, self.n, ELEM_BYTES, AccessKind::Write);
                s.streams(
                    &[all(0), all(1), all(2)],
                    self.n * CYCLES_PER_ELEMENT,
                    self.n,
                );
            }
            Init::Serial => {}
        }
        s.barrier();
        // STREAM's clock-granularity test loop: a[j] = 2.0E0 * a[j] (parallel, static)
        s.streams(&[slice(0, AccessKind::ReadModifyWrite)], work, work);
        s.barrier();
        for _ in 0..self.ntimes {
            for k in &self.kernels {
                s.phase(k.phase());
                let (reads, write) = k.arrays();
                let mut spans: Vec<Span> =
                    reads.iter().map(|&r| slice(r, AccessKind::Read)).collect();
                spans.push(slice(write, AccessKind::Write));
                s.streams(&spans, work, work);
                s.barrier();
            }
        }
        s
    }
}

impl Workload for Stream {
    fn name(&self) -> String {
        let init = match self.init {
            Init::Parallel => "parallel",
            Init::Serial => "serial",
        };
        let mode = match self.mode {
            Mode::Threads => "threads",
            Mode::Processes => "processes",
        };
        format!(
            "{NAME}:kernel={},n={},ntimes={},init={init},mode={mode}",
            self.kernel_key(),
            self.n,
            self.ntimes
        )
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let bytes = self.n * ELEM_BYTES;
        let map = |mem: &mut dyn AddressSpace, task: TaskId| {
            [
                mem.mmap(task, "stream.a", bytes, MapOptions::default()),
                mem.mmap(task, "stream.b", bytes, MapOptions::default()),
                mem.mmap(task, "stream.c", bytes, MapOptions::default()),
            ]
        };
        match self.mode {
            Mode::Threads => {
                let bases = map(mem, TaskId(0));
                (0..self.threads)
                    .map(|t| ThreadSpec {
                        task: TaskId(0),
                        program: Box::new(self.program(bases, t, self.threads)),
                    })
                    .collect()
            }
            Mode::Processes => (0..self.threads)
                .map(|t| {
                    let task = TaskId(t as u32);
                    let bases = map(mem, task);
                    ThreadSpec {
                        task,
                        program: Box::new(self.program(bases, 0, 1)),
                    }
                })
                .collect(),
        }
    }
}
