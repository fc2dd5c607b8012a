//! Random reads or random writes, reference/workloads.md §2.4 (M13, after Kiefer et al.).
//!
//! One thread, one buffer of `bytes` bound to `mem_node` and pre-faulted (phase `init`), then
//! (phase `access`) `accesses` independent 8 B reads (summed) or 8 B writes at the lines a
//! deterministic shift-and-mask generator draws: xorshift64 (Marsaglia, "Xorshift RNGs",
//! 2003) masked to the buffer. The ratio of the `access` phase's time with remote and with
//! local memory is M13's NUMA factor: reads 1.42, writes 1.02 on `xeon-x5650-2n`.
//!
//! `warmup=1` (the default, as `ptrchase`'s lap) first runs one untimed lap of draws, as many
//! as the buffer has lines (phase `warmup`), so that the timed accesses find the page tables
//! as a long run does: the pre-fault loop leaves the caches full of the buffer's last lines,
//! and without the lap the first walk to each page-table line (one per 32 KiB of buffer with
//! 4 KiB pages: 16 384 lines for 512 MiB) misses the caches inside the timed phase, an
//! amount that does not grow with the count of accesses. A NUMA factor is a property of the
//! machine, not of the run's length (with 200 000 timed writes these cold lines made the
//! write factor 1.098; with 8 million, 1.003).

use crate::emit::{Gen, Script, Span, Status, CHUNK_OPS};
use crate::spec::{format_size, Params, WorkloadError};
use numalab_core::workload::{
    AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload, LINE_BYTES,
};
use numalab_core::{PageSize, TaskId};

pub const NAME: &str = "randrw";
pub const KEYS: &[&str] = &[
    "bytes", "accesses", "op", "page", "mem_node", "warmup", "seed",
];
pub const DESCRIPTION: &str = "random reads or writes, 1 thread, independent 8 B accesses at xorshift-drawn lines of a pre-faulted buffer (§2.4, M13's NUMA factor). \
keys: bytes=size, a power of two (512M), accesses=N (1000000), op=read|write (read), page=4K|2M|1G (THP decides if unset), \
mem_node=N (bind the buffer; unset = task policy), warmup=0|1 (1: one untimed lap of draws, a draw per line, before timing), seed=N";

pub const PHASES: &[&str] = &["init", "warmup", "access"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_WARMUP: u16 = 1;
pub const PHASE_ACCESS: u16 = 2;

pub const DEFAULT_BYTES: u64 = 512 << 20;
pub const DEFAULT_ACCESSES: u64 = 1_000_000;
const DEFAULT_SEED: u64 = 0x9e37_79b9_7f4a_7c15;
/// The generator's loop-carried chain per access: xorshift64's three shift-xor pairs, six
/// dependent one-cycle ALU operations; the mask, the add of the base, the access and the loop
/// hang off the chain (E, from the instruction count of the loop).
const GEN_CYCLES: u32 = 6;
const GEN_INSTRUCTIONS: u32 = 10;
/// Mixed into the seed for the warm-up lap's draws.
const WARMUP_SEED_MIX: u64 = 0x5bd1_e995_5bd1_e995;
/// Lines per op of the pre-fault loop.
const INIT_CHUNK_LINES: u64 = 4096;

#[derive(Clone, Debug, PartialEq)]
pub struct RandRw {
    pub bytes: u64,
    pub accesses: u64,
    pub write: bool,
    pub page: Option<PageSize>,
    pub mem_node: Option<u16>,
    /// One untimed lap of draws before the timed ones.
    pub warmup: bool,
    pub seed: u64,
}

impl RandRw {
    pub fn from_params(p: &Params, threads: usize) -> Result<RandRw, WorkloadError> {
        if threads != 1 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "randrw runs exactly 1 thread".into(),
            });
        }
        let bytes = p.size("bytes", DEFAULT_BYTES)?;
        if !bytes.is_power_of_two() || !(4096..=1 << 40).contains(&bytes) {
            return Err(WorkloadError::BadValue {
                workload: p.workload(),
                key: "bytes",
                value: p.get("bytes").unwrap_or("").to_string(),
                expected: "a power of two between 4K and 1T (the generator masks to it)".into(),
            });
        }
        Ok(RandRw {
            bytes,
            accesses: p.uint("accesses", DEFAULT_ACCESSES)?,
            write: p.choice("op", &["read", "write"], 0)? == 1,
            page: p.page("page")?,
            mem_node: p.node("mem_node")?,
            warmup: p.flag("warmup", true)?,
            seed: p.uint("seed", DEFAULT_SEED)?,
        })
    }

    fn map_options(&self) -> MapOptions {
        crate::ptrchase::probe_buffer_options(self.page, self.mem_node)
    }
}

/// `left` accesses at xorshift-drawn lines.
struct Draws {
    base: u64,
    line_mask: u64,
    x: u64,
    left: u64,
    kind: AccessKind,
}

impl Gen for Draws {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let room = (CHUNK_OPS.saturating_sub(out.len()) / 2).max(1) as u64;
        let k = self.left.min(room);
        for _ in 0..k {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            out.push(Op::Compute {
                cycles: GEN_CYCLES,
                instructions: GEN_INSTRUCTIONS,
            });
            out.push(Op::Access {
                addr: self.base + (self.x & self.line_mask) * LINE_BYTES,
                kind: self.kind,
            });
        }
        self.left -= k;
        if self.left == 0 {
            Status::Done
        } else {
            Status::More
        }
    }
}

impl Workload for RandRw {
    fn name(&self) -> String {
        let mut s = format!(
            "{NAME}:bytes={},accesses={},op={}",
            format_size(self.bytes),
            self.accesses,
            if self.write { "write" } else { "read" }
        );
        if let Some(p) = self.page {
            s.push_str(&format!(",page={p}"));
        }
        if let Some(n) = self.mem_node {
            s.push_str(&format!(",mem_node={n}"));
        }
        if !self.warmup {
            s.push_str(",warmup=0");
        }
        if self.seed != DEFAULT_SEED {
            s.push_str(&format!(",seed={}", self.seed));
        }
        s
    }

    fn threads(&self) -> usize {
        1
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let base = mem.mmap(TaskId(0), "randrw.buffer", self.bytes, self.map_options());
        let mut s = Script::new(PHASES);
        s.phase(PHASE_INIT);
        s.streams_chunked(
            &[Span {
                addr: base,
                lines: self.bytes / LINE_BYTES,
                kind: AccessKind::Write,
            }],
            0,
            0,
            INIT_CHUNK_LINES,
        );
        let kind = if self.write {
            AccessKind::Write
        } else {
            AccessKind::Read
        };
        let draws = |x: u64, left: u64| Draws {
            base,
            line_mask: self.bytes / LINE_BYTES - 1,
            x,
            left,
            kind,
        };
        if self.warmup {
            // its own stream (a different seed), so the timed draws are the same with or
            // without it
            s.phase(PHASE_WARMUP);
            s.gen(draws(
                (self.seed ^ WARMUP_SEED_MIX).max(1),
                self.bytes / LINE_BYTES,
            ));
        }
        s.phase(PHASE_ACCESS);
        if self.accesses > 0 {
            s.gen(draws(self.seed.max(1), self.accesses));
        }
        vec![ThreadSpec {
            task: TaskId(0),
            program: Box::new(s),
        }]
    }
}
