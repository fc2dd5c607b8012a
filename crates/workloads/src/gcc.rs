//! `gcc-like`: the compiler passes of 403.gcc / 502.gcc_r, reference/workloads.md §5.
//!
//! `inputs` invocations run one after the other (M13 counts eight for 403.gcc); each one:
//!
//! 1. **parse**: builds a syntax tree of `nodes` nodes by bump allocation in an arena
//!    (sequential writes; each node is linked into its parent, a recent node, read-modify-write)
//!    and looks every identifier up in a chained hash table (a random bucket read, a dependent
//!    walk of the chain, an insertion for a new name);
//! 2. **expand**: walks the tree depth-first through child and sibling pointers (dependent
//!    loads) and emits RTL instructions, bump-allocated and linked in a list;
//! 3. **passes**: `passes` optimisation passes, each walking the instruction list (dependent
//!    loads, one instruction in four rewritten) and, per basic block of
//!    [`INSNS_PER_BLOCK`] instructions, a data-flow step on the block's live-in / live-out
//!    bitmaps (read-modify-write) reading its successor's bitmap.
//!
//! Every invocation reuses the same arena addresses (a new process gets the same layout; its
//! pages are simply faulted again in reality, here they stay mapped), so the footprint is one
//! invocation's. The reads are about twice the writes (§5: ≈ 2 : 1).

use crate::emit::SplitMix64;
use crate::kernel::{
    compute, scale, scale_suffix, scaled, Copies, SingleKernel, Unit, UnitProgram,
};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadProgram};
use numalab_core::TaskId;

pub const NAME: &str = "gcc-like";
pub const KEYS: &[&str] = &["inputs", "nodes", "buckets", "passes", "seed", "scale"];
pub const DESCRIPTION: &str = "403.gcc-like compiler: arena-allocated syntax tree with an identifier hash table, depth-first RTL expansion, list-walking passes with data-flow bitmaps; several invocations, one copy per thread (§5). \
keys: inputs=invocations (8), nodes=tree nodes per input (500000), buckets=identifier hash buckets (65536), passes=12, seed=1, scale=factor in (0,1] on nodes and buckets (1)";

pub const PHASES: &[&str] = &["parse", "expand", "passes"];
pub const PHASE_PARSE: u16 = 0;
pub const PHASE_EXPAND: u16 = 1;
pub const PHASE_PASSES: u16 = 2;

/// Tree node (tree_common + operands, E) and RTL instruction (rtx + insn fields, E).
pub const TREE_NODE_BYTES: u64 = 64;
pub const INSN_BYTES: u64 = 64;
/// RTL instructions per tree node (E).
pub const INSNS_PER_NODE: u64 = 2;
pub const INSNS_PER_BLOCK: u64 = 8;
/// One node in this many names an identifier.
pub const IDENT_EVERY: u64 = 4;
/// Identifier entry (hash, length, chain pointer, name), E.
pub const IDENT_BYTES: u64 = 64;
/// Live-in + live-out bitmaps of a block: 2 × 64 B (512 pseudo-registers, E).
pub const BITMAP_BYTES: u64 = 128;
/// Compute per tree node parsed, per node expanded, per instruction and pass (E: gcc's MPKI is
/// moderate, ≈ 1-10).
pub const PARSE_CYCLES: u64 = 300;
pub const EXPAND_CYCLES: u64 = 150;
pub const PASS_CYCLES: u64 = 40;
const NONE: u32 = u32::MAX;
const NODES_PER_UNIT: u64 = 256;
const INSNS_PER_UNIT: u64 = 512;

#[derive(Clone, Debug, PartialEq)]
pub struct Gcc {
    pub inputs: u64,
    pub nodes: u64,
    pub buckets: u64,
    pub nodes_full: u64,
    pub buckets_full: u64,
    pub passes: u64,
    pub seed: u64,
    pub scale: f64,
}

impl Gcc {
    pub fn from_params(p: &Params) -> Result<Gcc, WorkloadError> {
        let inputs = p.uint_in("inputs", 8, 1, 1 << 16)?;
        let nodes_full = p.uint_in("nodes", 500_000, 2, u32::MAX as u64 / 4)?;
        let buckets_full = p.uint_in("buckets", 65_536, 1, 1 << 32)?;
        let passes = p.uint("passes", 12)?;
        let seed = p.uint("seed", 1)?;
        let scale = scale(p)?;
        Ok(Gcc {
            inputs,
            nodes: scaled(nodes_full, scale, 2),
            buckets: scaled(buckets_full, scale, 1),
            nodes_full,
            buckets_full,
            passes,
            seed,
            scale,
        })
    }

    pub fn workload(p: &Params, threads: usize) -> Result<Copies<Gcc>, WorkloadError> {
        Copies::new(Self::from_params(p)?, threads, NAME)
    }

    pub fn insns(&self) -> u64 {
        self.nodes * INSNS_PER_NODE
    }

    pub fn blocks(&self) -> u64 {
        self.insns().div_ceil(INSNS_PER_BLOCK)
    }

    pub fn idents_max(&self) -> u64 {
        self.nodes.div_ceil(IDENT_EVERY)
    }
}

impl SingleKernel for Gcc {
    fn spec(&self) -> String {
        format!(
            "{NAME}:inputs={},nodes={},buckets={},passes={},seed={}{}",
            self.inputs,
            self.nodes_full,
            self.buckets_full,
            self.passes,
            self.seed,
            scale_suffix(self.scale)
        )
    }

    fn build_copy(&self, mem: &mut dyn AddressSpace, task: TaskId) -> Box<dyn ThreadProgram> {
        let o = MapOptions::default;
        let tree = mem.mmap(task, "gcc.tree", self.nodes * TREE_NODE_BYTES, o());
        let insns = mem.mmap(task, "gcc.rtl", self.insns() * INSN_BYTES, o());
        let buckets = mem.mmap(task, "gcc.hash", self.buckets * 8, o());
        let idents = mem.mmap(task, "gcc.idents", self.idents_max() * IDENT_BYTES, o());
        let bitmaps = mem.mmap(task, "gcc.bitmaps", self.blocks() * BITMAP_BYTES, o());
        Box::new(UnitProgram::new(
            GccRun {
                k: self.clone(),
                base: [tree, insns, buckets, idents, bitmaps],
                rng: SplitMix64::new(self.seed ^ 0x0067_6363),
                input: 0,
                stage: Stage::Parse,
                pos: 0,
                pass: 0,
                parent: Vec::new(),
                child: Vec::new(),
                next: Vec::new(),
                chain: Vec::new(),
                bucket_head: Vec::new(),
                names: Vec::new(),
                stack: Vec::new(),
            },
            PHASES,
        ))
    }
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Stage {
    Parse,
    Expand,
    Passes,
}

struct GccRun {
    k: Gcc,
    /// tree, rtl, hash buckets, identifier entries, bitmaps
    base: [u64; 5],
    rng: SplitMix64,
    input: u64,
    stage: Stage,
    /// Next node (parse), insns emitted so far (expand), next insn (passes).
    pos: u64,
    pass: u64,
    parent: Vec<u32>,
    child: Vec<u32>,
    next: Vec<u32>,
    /// Identifier chains: entry → next entry in its bucket; bucket → first entry.
    chain: Vec<u32>,
    bucket_head: Vec<u32>,
    /// Name hash of each identifier entry.
    names: Vec<u64>,
    stack: Vec<u32>,
}

impl GccRun {
    fn node(&self, v: u32) -> u64 {
        self.base[0] + v as u64 * TREE_NODE_BYTES
    }

    fn parse(&mut self, out: &mut Vec<Op>) {
        let k = &self.k;
        if self.pos == 0 {
            out.push(Op::Phase { id: PHASE_PARSE });
            let n = k.nodes as usize;
            self.parent = vec![NONE; n];
            self.child = vec![NONE; n];
            self.next = vec![NONE; n];
            self.chain.clear();
            self.names.clear();
            self.bucket_head = vec![NONE; k.buckets as usize];
            // the table is cleared at start-up
            out.push(Op::Run {
                base: self.base[2],
                lines: (k.buckets * 8).div_ceil(64) as u32,
                stride_bytes: 64,
                kind: AccessKind::Write,
            });
        }
        let lo = self.pos;
        let hi = (lo + NODES_PER_UNIT).min(k.nodes);
        // the new nodes are bump-allocated: one sequential run of writes
        let first = self.node(lo as u32) & !63;
        let end = self.node(hi as u32);
        out.push(Op::Run {
            base: first,
            lines: (end - first).div_ceil(64) as u32,
            stride_bytes: 64,
            kind: AccessKind::Write,
        });
        // vocabulary: a Zipf-like name distribution (few names are very common), E
        let vocabulary = (k.nodes / 16).max(1);
        for v in lo.max(1)..hi {
            // parent: a recent node (statements nest shallowly), linked in as its first child
            let back = 1 + (self.rng.below(64) * self.rng.below(64)) / 64;
            let p = v.saturating_sub(back) as u32;
            self.parent[v as usize] = p;
            self.next[v as usize] = self.child[p as usize];
            self.child[p as usize] = v as u32;
            out.push(Op::Access {
                addr: self.node(p),
                kind: AccessKind::ReadModifyWrite,
            });
            if v % IDENT_EVERY == 0 {
                let r = self.rng.below(vocabulary);
                let name = r * r / vocabulary;
                let h = name.wrapping_mul(0x9E37_79B9_7F4A_7C15) % k.buckets;
                out.push(Op::Access {
                    addr: self.base[2] + h * 8,
                    kind: AccessKind::Read,
                });
                let mut e = self.bucket_head[h as usize];
                let mut found = false;
                while e != NONE {
                    out.push(Op::Access {
                        addr: self.base[3] + e as u64 * IDENT_BYTES,
                        kind: AccessKind::DependentRead,
                    });
                    if self.names[e as usize] == name {
                        found = true;
                        break;
                    }
                    e = self.chain[e as usize];
                }
                if !found {
                    let id = self.names.len() as u32;
                    self.names.push(name);
                    self.chain.push(self.bucket_head[h as usize]);
                    self.bucket_head[h as usize] = id;
                    out.push(Op::Access {
                        addr: self.base[3] + id as u64 * IDENT_BYTES,
                        kind: AccessKind::Write,
                    });
                    out.push(Op::Access {
                        addr: self.base[2] + h * 8,
                        kind: AccessKind::Write,
                    });
                }
            }
        }
        out.push(compute(
            (hi - lo) * PARSE_CYCLES,
            (hi - lo) * PARSE_CYCLES * 2,
        ));
        self.pos = hi;
        if hi == k.nodes {
            self.stage = Stage::Expand;
            self.pos = 0;
            self.stack = vec![0];
            out.push(Op::Phase { id: PHASE_EXPAND });
        }
    }

    fn expand(&mut self, out: &mut Vec<Op>) {
        let mut visited = 0;
        let start = self.pos;
        while visited < NODES_PER_UNIT {
            let Some(v) = self.stack.pop() else { break };
            out.push(Op::Access {
                addr: self.node(v),
                kind: AccessKind::DependentRead,
            });
            let mut c = self.child[v as usize];
            while c != NONE {
                self.stack.push(c);
                c = self.next[c as usize];
            }
            self.pos += INSNS_PER_NODE;
            visited += 1;
        }
        // the RTL of those nodes, bump-allocated in order
        let first = self.base[1] + start * INSN_BYTES;
        out.push(Op::Run {
            base: first,
            lines: ((self.pos - start) * INSN_BYTES).div_ceil(64) as u32,
            stride_bytes: 64,
            kind: AccessKind::Write,
        });
        out.push(compute(
            visited * EXPAND_CYCLES,
            visited * EXPAND_CYCLES * 2,
        ));
        if self.stack.is_empty() {
            self.stage = Stage::Passes;
            self.pos = 0;
            self.pass = 0;
            out.push(Op::Phase { id: PHASE_PASSES });
        }
    }

    fn passes(&mut self, out: &mut Vec<Op>) {
        let k = &self.k;
        let lo = self.pos;
        let hi = (lo + INSNS_PER_UNIT).min(k.insns());
        for i in lo..hi {
            let a = self.base[1] + i * INSN_BYTES;
            // NEXT_INSN(insn): each load waits for the previous one
            out.push(Op::Access {
                addr: a,
                kind: AccessKind::DependentRead,
            });
            if self.rng.below(4) == 0 {
                out.push(Op::Access {
                    addr: a,
                    kind: AccessKind::Write,
                });
            }
            if (i + 1) % INSNS_PER_BLOCK == 0 || i + 1 == k.insns() {
                // data flow: live_out |= live_in(successor); live_in = use | (out & ~def)
                let b = i / INSNS_PER_BLOCK;
                let succ = (b + 1).min(k.blocks() - 1);
                out.push(Op::Run {
                    base: self.base[4] + succ * BITMAP_BYTES,
                    lines: 1,
                    stride_bytes: 64,
                    kind: AccessKind::Read,
                });
                out.push(Op::Run {
                    base: self.base[4] + b * BITMAP_BYTES,
                    lines: (BITMAP_BYTES / 64) as u32,
                    stride_bytes: 64,
                    kind: AccessKind::ReadModifyWrite,
                });
            }
        }
        out.push(compute(
            (hi - lo) * PASS_CYCLES,
            (hi - lo) * PASS_CYCLES * 2,
        ));
        self.pos = hi;
        if hi == k.insns() {
            self.pos = 0;
            self.pass += 1;
        }
    }
}

impl Unit for GccRun {
    fn unit(&mut self, out: &mut Vec<Op>) -> bool {
        if self.input == self.k.inputs {
            return false;
        }
        match self.stage {
            Stage::Parse => self.parse(out),
            Stage::Expand => self.expand(out),
            Stage::Passes => {
                if self.pass < self.k.passes {
                    self.passes(out);
                }
                if self.pass == self.k.passes {
                    self.input += 1;
                    self.stage = Stage::Parse;
                    self.pos = 0;
                }
            }
        }
        self.input < self.k.inputs
    }
}
