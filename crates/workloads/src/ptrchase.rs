//! Pointer-chase latency probe, reference/workloads.md §2.2.
//!
//! One thread, one buffer of `bytes` holding one 8 B pointer per 64 B line; the lines form a
//! single random cycle, so every load depends on the previous one and misses every cache once
//! the buffer is larger than the LLCs. The buffer is bound to `mem_node` (`mbind` MPOL_BIND) and
//! pre-faulted by the measuring thread; the probe's result is the `chase` phase time divided by
//! [`PtrChase::steps`].
//!
//! Variants: `full-random` (one TLB miss per load with 4 KB pages) and `page-local` (pages in
//! random order, the lines of a page in random order before moving on: one TLB miss per page).

use crate::emit::{Gen, Script, Span, SplitMix64, Status, CHUNK_OPS};
use crate::spec::{format_size, Params, WorkloadError};
use numalab_core::workload::{
    AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload, LINE_BYTES,
};
use numalab_core::{MemPolicy, NodeId, NodeMask, PageSize, TaskId};
use std::sync::Arc;

pub const NAME: &str = "ptrchase";
pub const KEYS: &[&str] = &[
    "bytes", "steps", "page", "mem_node", "variant", "warmup", "seed",
];
pub const DESCRIPTION: &str = "pointer-chase latency probe, 1 thread, one random cycle over the lines of a buffer (§2.2). \
keys: bytes=size (1G), steps=dependent loads timed (1000000), page=4K|2M|1G (THP decides if unset), \
mem_node=N (bind the buffer; unset = task policy), variant=full-random|page-local (full-random), \
warmup=0|1 (1: one full lap before timing), seed=N";

/// Phase names, indexed by phase id.
pub const PHASES: &[&str] = &["init", "warmup", "chase"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_WARMUP: u16 = 1;
pub const PHASE_CHASE: u16 = 2;

pub const DEFAULT_BYTES: u64 = 1 << 30;
pub const DEFAULT_STEPS: u64 = 1_000_000;
pub const DEFAULT_SEED: u64 = 0x5eed_c4a5e;
/// Lines per op of the pre-fault loop (256 KiB): the loop is one long stride-1 write.
const INIT_CHUNK_LINES: u64 = 4096;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Variant {
    FullRandom,
    PageLocal,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::FullRandom => "full-random",
            Variant::PageLocal => "page-local",
        }
    }
}

/// Parameters of one chase (shared with the latency thread of `mlc-loaded`).
#[derive(Clone, Debug, PartialEq)]
pub struct ChaseParams {
    pub bytes: u64,
    pub steps: u64,
    /// Explicit page size of the buffer; `None` leaves it to the THP mode.
    pub page: Option<PageSize>,
    pub mem_node: Option<u16>,
    pub variant: Variant,
    pub warmup: bool,
    pub seed: u64,
}

impl ChaseParams {
    /// Read the chase keys (`bytes`, `steps`, `page`, `mem_node`, `variant`, `warmup`, `seed`).
    pub fn from_params(
        p: &Params,
        default_node: Option<u16>,
    ) -> Result<ChaseParams, WorkloadError> {
        let bytes = p.size("bytes", DEFAULT_BYTES)?;
        let max_bytes = (u32::MAX as u64 + 1) * LINE_BYTES;
        if bytes < 4096 || bytes % LINE_BYTES != 0 || bytes > max_bytes {
            return Err(WorkloadError::BadValue {
                workload: p.workload(),
                key: "bytes",
                value: p.get("bytes").unwrap_or("").to_string(),
                expected: format!("a multiple of 64 between 4K and {}", format_size(max_bytes)),
            });
        }
        let steps = p.uint("steps", DEFAULT_STEPS)?;
        let page = p.page("page")?;
        let mem_node = p.node("mem_node")?.or(default_node);
        let variant = [Variant::FullRandom, Variant::PageLocal]
            [p.choice("variant", &["full-random", "page-local"], 0)?];
        let warmup = p.flag("warmup", true)?;
        let seed = p.uint("seed", DEFAULT_SEED)?;
        Ok(ChaseParams {
            bytes,
            steps,
            page,
            mem_node,
            variant,
            warmup,
            seed,
        })
    }

    pub fn lines(&self) -> u64 {
        self.bytes / LINE_BYTES
    }

    /// `mbind` to `mem_node` if given; hugetlb pages for 2M / 1G; MADV_NOHUGEPAGE for an
    /// explicit 4K so that THP cannot change the page size being measured.
    pub fn map_options(&self) -> MapOptions {
        probe_buffer_options(self.page, self.mem_node)
    }

    /// The order in which the chase visits the buffer's lines (line indices; the cycle closes
    /// from the last back to the first).
    ///
    /// The order takes 4 bytes of host memory per simulated line (16 GiB for a 256 GiB
    /// buffer); where the host cannot allocate it the run is stopped through `mem` with an
    /// error naming the size (`None`), not aborted.
    pub fn chain(&self, mem: &mut dyn AddressSpace) -> Option<Arc<Vec<u32>>> {
        let lines_per_page = self.page.unwrap_or(PageSize::Base4K).bytes() / LINE_BYTES;
        let order = chain_order(self.lines(), lines_per_page, self.variant, self.seed);
        if order.is_none() {
            let bytes = self.lines() * std::mem::size_of::<u32>() as u64;
            mem.host_memory_refused("the pointer chase's visiting order", bytes);
        }
        // an Arc<Vec> takes the order as it is (an Arc<[u32]> would copy it, twice the memory)
        order.map(Arc::new)
    }

    /// `key=value` list for names.
    pub fn keys_string(&self) -> String {
        let mut s = format!(
            "bytes={},steps={},variant={},warmup={}",
            format_size(self.bytes),
            self.steps,
            self.variant.name(),
            self.warmup as u8
        );
        if let Some(p) = self.page {
            s.push_str(&format!(",page={p}"));
        }
        if let Some(n) = self.mem_node {
            s.push_str(&format!(",mem_node={n}"));
        }
        if self.seed != DEFAULT_SEED {
            s.push_str(&format!(",seed={}", self.seed));
        }
        s
    }

    /// Append the measuring thread's program: pre-fault (phase init), then the optional warm-up
    /// lap and the timed chase.
    pub(crate) fn push_init(&self, s: &mut Script, base: u64) {
        s.phase(PHASE_INIT);
        s.streams_chunked(
            &[Span {
                addr: base,
                lines: self.lines(),
                kind: AccessKind::Write,
            }],
            0,
            0,
            INIT_CHUNK_LINES,
        );
    }

    pub(crate) fn push_chase(&self, s: &mut Script, base: u64, order: &Arc<Vec<u32>>) {
        if self.warmup {
            s.phase(PHASE_WARMUP);
            s.gen(Chase {
                order: order.clone(),
                base,
                pos: 0,
                left: order.len() as u64,
            });
        }
        // a full lap ends where it started, so the timed chase starts at the cycle's head
        s.phase(PHASE_CHASE);
        if self.steps > 0 {
            s.gen(Chase {
                order: order.clone(),
                base,
                pos: 0,
                left: self.steps,
            });
        }
    }
}

/// A probe's buffer: bound to `mem_node` if given (`mbind` MPOL_BIND); hugetlb pages for 2M /
/// 1G; MADV_NOHUGEPAGE for an explicit 4K so that THP cannot change the page size measured.
pub(crate) fn probe_buffer_options(page: Option<PageSize>, mem_node: Option<u16>) -> MapOptions {
    MapOptions {
        hugetlb: page.filter(|p| *p != PageSize::Base4K),
        thp_advice: (page == Some(PageSize::Base4K)).then_some(false),
        policy: mem_node.map(|n| MemPolicy::Bind {
            nodes: NodeMask::single(NodeId(n)),
            numa_balancing: false,
        }),
    }
}

/// The visiting order of one random cycle over `lines` lines.
///
/// `FullRandom`: Sattolo's algorithm draws a uniformly random cyclic permutation; following it
/// from line 0 visits the other lines in a uniformly random order. We draw that visiting order
/// directly (line 0 first, Fisher–Yates over lines 1..n), which is the same distribution and
/// spares a second pass over the permutation to expand it. `PageLocal`: pages of
/// `lines_per_page` lines in random order, each page's lines in random order.
///
/// `None` when the host cannot allocate the order (4 bytes a line).
pub fn chain_order(
    lines: u64,
    lines_per_page: u64,
    variant: Variant,
    seed: u64,
) -> Option<Vec<u32>> {
    assert!(lines <= u32::MAX as u64 + 1, "at most 2^32 lines");
    let n = lines as usize;
    let mut rng = SplitMix64::new(seed);
    let mut order: Vec<u32> = Vec::new();
    order.try_reserve_exact(n).ok()?;
    match variant {
        Variant::FullRandom => {
            order.extend((0..n as u64).map(|i| i as u32));
            for i in (2..n).rev() {
                let j = 1 + rng.below(i as u64) as usize;
                order.swap(i, j);
            }
            Some(order)
        }
        Variant::PageLocal => {
            let lpp = lines_per_page.max(1) as usize;
            let pages = n.div_ceil(lpp);
            let mut page_order: Vec<u32> = Vec::new();
            page_order.try_reserve_exact(pages).ok()?;
            page_order.extend((0..pages as u64).map(|p| p as u32));
            shuffle(&mut page_order, &mut rng);
            for p in page_order {
                let start = order.len();
                let lo = p as usize * lpp;
                let hi = (lo + lpp).min(n);
                order.extend((lo..hi).map(|l| l as u32));
                shuffle(&mut order[start..], &mut rng);
            }
            Some(order)
        }
    }
}

fn shuffle(v: &mut [u32], rng: &mut SplitMix64) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

/// `left` dependent loads following `order` from position `pos` (wrapping around the cycle).
pub(crate) struct Chase {
    pub order: Arc<Vec<u32>>,
    pub base: u64,
    pub pos: usize,
    pub left: u64,
}

impl Gen for Chase {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let n = self.order.len();
        let room = CHUNK_OPS.saturating_sub(out.len()).max(1) as u64;
        let k = self.left.min(room);
        for _ in 0..k {
            out.push(Op::Access {
                addr: self.base + self.order[self.pos] as u64 * LINE_BYTES,
                kind: AccessKind::DependentRead,
            });
            self.pos += 1;
            if self.pos == n {
                self.pos = 0;
            }
        }
        self.left -= k;
        if self.left == 0 {
            Status::Done
        } else {
            Status::More
        }
    }
}

/// The `ptrchase` workload (always one thread).
#[derive(Clone, Debug)]
pub struct PtrChase {
    pub params: ChaseParams,
}

impl PtrChase {
    pub fn from_params(p: &Params, threads: usize) -> Result<PtrChase, WorkloadError> {
        if threads != 1 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "ptrchase runs exactly 1 thread (use mlc-loaded for a chase under load)"
                    .into(),
            });
        }
        Ok(PtrChase {
            params: ChaseParams::from_params(p, None)?,
        })
    }

    /// Dependent loads in the timed `chase` phase: divide that phase's time by this.
    pub fn steps(&self) -> u64 {
        self.params.steps
    }
}

impl Workload for PtrChase {
    fn name(&self) -> String {
        format!("{NAME}:{}", self.params.keys_string())
    }

    fn threads(&self) -> usize {
        1
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let base = mem.mmap(
            TaskId(0),
            "ptrchase.buffer",
            self.params.bytes,
            self.params.map_options(),
        );
        if mem.refused() {
            // the run stops with the refusal: no chain to build
            return Vec::new();
        }
        let Some(order) = self.params.chain(mem) else {
            return Vec::new();
        };
        let mut s = Script::new(PHASES);
        self.params.push_init(&mut s, base);
        self.params.push_chase(&mut s, base, &order);
        vec![ThreadSpec {
            task: TaskId(0),
            program: Box::new(s),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_permutation(order: &[u32]) -> bool {
        let mut seen = vec![false; order.len()];
        order
            .iter()
            .all(|&l| !std::mem::replace(&mut seen[l as usize], true))
    }

    #[test]
    fn full_random_is_one_cycle_over_all_lines() {
        let o = chain_order(10_000, 64, Variant::FullRandom, 1).unwrap();
        assert!(is_permutation(&o));
        assert_eq!(o[0], 0);
        // successor array of the cycle: following it from 0 visits every line once
        let mut next = vec![0u32; o.len()];
        for k in 0..o.len() {
            next[o[k] as usize] = o[(k + 1) % o.len()];
        }
        let (mut cur, mut steps) = (0u32, 0);
        loop {
            cur = next[cur as usize];
            steps += 1;
            if cur == 0 {
                break;
            }
        }
        assert_eq!(steps, o.len());
        assert_ne!(
            o,
            chain_order(10_000, 64, Variant::FullRandom, 2).unwrap(),
            "seeded"
        );
        assert_eq!(
            o,
            chain_order(10_000, 64, Variant::FullRandom, 1).unwrap(),
            "deterministic"
        );
    }

    #[test]
    fn page_local_finishes_a_page_before_the_next() {
        let o = chain_order(64 * 50 + 10, 64, Variant::PageLocal, 3).unwrap();
        assert!(is_permutation(&o));
        let page_changes = o.windows(2).filter(|w| w[0] / 64 != w[1] / 64).count();
        assert_eq!(page_changes, 50, "51 pages, visited one after the other");
    }
}
