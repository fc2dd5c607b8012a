//! MLC-like loaded latency, reference/workloads.md §2.3.
//!
//! Thread 0 is the latency thread: a [`ptrchase`](crate::ptrchase) over a buffer bound to
//! `mem_node`. Threads 1..T are injectors: each walks a private buffer bound to `inject_node`
//! sequentially, one line at a time, spinning `delay` cycles after each line, with the chosen
//! read:write mix. Sweeping `delay` over [`MLC_DELAYS`] gives the points of a bandwidth-latency
//! curve (chase latency vs. total injected bandwidth), as Intel MLC's `--loaded_latency` does.
//!
//! All threads pre-fault their buffers and meet at one barrier, so the chase only runs under
//! load. The injectors run until the latency thread has finished its chase: the latency program
//! raises a shared flag when the engine asks it for ops after its last load has executed, and
//! injectors poll the flag at every fill, emitting small batches (a few µs of simulated time)
//! so that they stop close to the chase's end.

use crate::emit::{Gen, Script, Span, Status};
use crate::ptrchase::{ChaseParams, PHASE_INIT};
use crate::spec::{format_size, Params, WorkloadError};
use numalab_core::workload::{
    AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload, LINE_BYTES,
};
use numalab_core::{MemPolicy, NodeId, NodeMask, PageSize, TaskId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub const NAME: &str = "mlc-loaded";
pub const KEYS: &[&str] = &[
    "bytes",
    "steps",
    "page",
    "mem_node",
    "variant",
    "warmup",
    "seed",
    "inject_bytes",
    "inject_node",
    "delay",
    "mix",
];
pub const DESCRIPTION: &str = "MLC-like loaded latency: thread 0 chases pointers, threads 1..T inject sequential traffic (§2.3). \
keys: bytes (1G), steps (1000000), page=4K|2M|1G, mem_node (0), variant, warmup, seed as ptrchase; \
inject_bytes=size per injector (200M), inject_node (= mem_node), delay=cycles after each line (0), mix=r|3:1|2:1|1:1 (r)";

/// Phase names: the latency thread uses init, warmup, chase; injectors init and inject.
pub const PHASES: &[&str] = &["init", "warmup", "chase", "inject"];
pub const PHASE_INJECT: u16 = 3;

/// The injection delays (cycles) that Intel MLC sweeps by default (§2.3).
pub const MLC_DELAYS: &[u32] = &[
    0, 2, 8, 15, 50, 100, 200, 300, 400, 500, 700, 1000, 1300, 1700, 2500, 3500, 5000, 9000, 20000,
];

/// Injector buffer size (≈ 200 MB, §2.3, E).
pub const DEFAULT_INJECT_BYTES: u64 = 200 << 20;

/// Simulated cycles an injector batch should last (≈ 10 µs at 2 GHz): bounds how long the
/// injectors run on after the chase ends. A line is assumed to cost at least this many cycles.
const BATCH_CYCLES: u64 = 20_000;
const MIN_CYCLES_PER_LINE: u64 = 30;
const MAX_BATCH_LINES: u64 = 1024;

/// Read:write mixes of MLC's injectors.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mix {
    AllReads,
    R3W1,
    R2W1,
    R1W1,
}

impl Mix {
    const NAMES: [&'static str; 4] = ["r", "3:1", "2:1", "1:1"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// (reads, writes) per group of lines: the first `reads` lines of a group are loaded, the
    /// remaining `writes` lines stored.
    pub fn pattern(self) -> (u32, u32) {
        match self {
            Mix::AllReads => (1, 0),
            Mix::R3W1 => (3, 1),
            Mix::R2W1 => (2, 1),
            Mix::R1W1 => (1, 1),
        }
    }
}

/// The `mlc-loaded` workload; see the module documentation.
#[derive(Clone, Debug)]
pub struct MlcLoaded {
    pub chase: ChaseParams,
    pub inject_bytes: u64,
    pub inject_node: u16,
    pub delay_cycles: u32,
    pub mix: Mix,
    /// 1 latency thread + injectors.
    pub threads: usize,
}

impl MlcLoaded {
    pub fn from_params(p: &Params, threads: usize) -> Result<MlcLoaded, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "mlc-loaded needs at least 1 thread (thread 0 measures latency, threads 1.. inject)".into(),
            });
        }
        let chase = ChaseParams::from_params(p, Some(0))?;
        let inject_bytes = p.size("inject_bytes", DEFAULT_INJECT_BYTES)?;
        if inject_bytes < LINE_BYTES || inject_bytes % LINE_BYTES != 0 {
            return Err(WorkloadError::BadValue {
                workload: NAME,
                key: "inject_bytes",
                value: p.get("inject_bytes").unwrap_or("").into(),
                expected: "a positive multiple of 64 bytes, e.g. 200M".into(),
            });
        }
        let inject_node = p.node("inject_node")?.or(chase.mem_node).unwrap_or(0);
        let delay_cycles = p.uint_in("delay", 0, 0, u32::MAX as u64)? as u32;
        let mix =
            [Mix::AllReads, Mix::R3W1, Mix::R2W1, Mix::R1W1][p.choice("mix", &Mix::NAMES, 0)?];
        Ok(MlcLoaded {
            chase,
            inject_bytes,
            inject_node,
            delay_cycles,
            mix,
            threads,
        })
    }

    /// Dependent loads in the timed `chase` phase.
    pub fn steps(&self) -> u64 {
        self.chase.steps
    }

    pub fn injectors(&self) -> usize {
        self.threads - 1
    }

    fn inject_options(&self) -> MapOptions {
        MapOptions {
            hugetlb: self.chase.page.filter(|p| *p != PageSize::Base4K),
            thp_advice: (self.chase.page == Some(PageSize::Base4K)).then_some(false),
            policy: Some(MemPolicy::Bind {
                nodes: NodeMask::single(NodeId(self.inject_node)),
                numa_balancing: false,
            }),
        }
    }
}

impl Workload for MlcLoaded {
    fn name(&self) -> String {
        format!(
            "{NAME}:{},inject_bytes={},inject_node={},delay={},mix={}",
            self.chase.keys_string(),
            format_size(self.inject_bytes),
            self.inject_node,
            self.delay_cycles,
            self.mix.name()
        )
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let task = TaskId(0);
        let done = Arc::new(AtomicBool::new(false));
        let base = mem.mmap(
            task,
            "mlc.chase",
            self.chase.bytes,
            self.chase.map_options(),
        );
        if mem.refused() {
            // the run stops with the refusal: no chain to build
            return Vec::new();
        }
        let Some(order) = self.chase.chain(mem) else {
            return Vec::new();
        };
        let mut lat = Script::new(PHASES);
        self.chase.push_init(&mut lat, base);
        lat.barrier();
        self.chase.push_chase(&mut lat, base, &order);
        lat.signal(done.clone());
        let mut specs = vec![ThreadSpec {
            task,
            program: Box::new(lat),
        }];

        let lines = self.inject_bytes / LINE_BYTES;
        let per_line = self.delay_cycles as u64 + MIN_CYCLES_PER_LINE;
        let batch = (BATCH_CYCLES / per_line).clamp(1, MAX_BATCH_LINES);
        let (reads, writes) = self.mix.pattern();
        for t in 1..self.threads {
            let ibase = mem.mmap(
                task,
                &format!("mlc.inject{t}"),
                self.inject_bytes,
                self.inject_options(),
            );
            let mut s = Script::new(PHASES);
            s.phase(PHASE_INIT);
            s.streams_chunked(
                &[Span {
                    addr: ibase,
                    lines,
                    kind: AccessKind::Write,
                }],
                0,
                0,
                4096,
            );
            s.barrier();
            s.phase(PHASE_INJECT);
            s.gen(Injector {
                base: ibase,
                lines,
                pos: 0,
                group_pos: 0,
                reads,
                group: reads + writes,
                delay: self.delay_cycles,
                batch,
                done: done.clone(),
            });
            specs.push(ThreadSpec {
                task,
                program: Box::new(s),
            });
        }
        specs
    }
}

/// One injector: sequential lines with a delay after each, until `done` is raised.
struct Injector {
    base: u64,
    lines: u64,
    pos: u64,
    group_pos: u32,
    reads: u32,
    group: u32,
    delay: u32,
    batch: u64,
    done: Arc<AtomicBool>,
}

impl Gen for Injector {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        if self.done.load(Ordering::Acquire) {
            return Status::Done;
        }
        for _ in 0..self.batch {
            let kind = if self.group_pos < self.reads {
                AccessKind::Read
            } else {
                AccessKind::Write
            };
            self.group_pos += 1;
            if self.group_pos == self.group {
                self.group_pos = 0;
            }
            out.push(Op::Access {
                addr: self.base + self.pos * LINE_BYTES,
                kind,
            });
            self.pos += 1;
            if self.pos == self.lines {
                self.pos = 0;
            }
            if self.delay > 0 {
                // MLC's delay is a spin loop: about one instruction per cycle
                out.push(Op::Compute {
                    cycles: self.delay,
                    instructions: self.delay,
                });
            }
        }
        Status::Yield
    }
}
