//! `jbb`: a SPECjbb2005-like Java server, reference/workloads.md §4.6.
//!
//! A JVM-like heap: eden, two survivor spaces and an old generation; W warehouses, one per
//! worker thread. Each worker first builds its warehouse (districts, customers, orders, stock:
//! trees and hash maps, `warehouse` bytes) as a JVM does: as objects allocated in its TLABs in
//! the shared eden; the collection that ends the load copies them, all alive, into the old
//! generation, each GC thread the live objects of its share of eden into its own PLABs
//! ([`OLD_PLAB_BYTES`], taken in turn from the old generation's top). So a warehouse's pages
//! are first-touched by the GC threads, not by its worker, and hold objects of many
//! warehouses. Then the worker runs transactions of the TPC-C-like mix (new order 45 %,
//! payment 43 %, order status 4 %, delivery 4 %, stock level 4 %):
//!
//! * lookups in its warehouse's trees are dependent loads (a path of [`TREE_DEPTH`] nodes) and
//!   updates are read-modify-writes of private records;
//! * new order and stock level read the shared, read-mostly item table; payment updates the
//!   shared company object under a lock (one hot line written by every worker);
//! * every transaction allocates short-lived objects by bumping its TLAB; a TLAB is taken from
//!   the shared eden by an atomic bump of eden's top (a hot shared line), so eden pages are
//!   first-touched by whichever worker's TLAB covers them. Each worker takes one TLAB per
//!   round, in an order drawn per round (the timing of the atomic bumps): which worker gets
//!   which part of eden, and which one touches a huge page first, varies, so a worker
//!   allocates mostly in pages another worker touched first.
//!
//! When eden is full, a stop-the-world young collection: every thread is a GC thread; GC
//! thread g scans its share of the card table (old → young roots), traces the live objects of
//! its share of eden (dependent loads, [`SURVIVAL`] of eden), copies them into its PLAB in the
//! to-space survivor (first touch there by the GC thread), and every [`TENURE_GCS`]-th
//! collection promotes the survivors into the old generation instead. Barriers open and close
//! the pause. `pretouch=1` is `-XX:+AlwaysPreTouch`: thread 0 writes the whole heap first.

use crate::emit::{Gen, Script, Span, SplitMix64, Status, CHUNK_OPS};
use crate::kernel::{compute, Backlog};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload};
use numalab_core::TaskId;

pub const NAME: &str = "jbb";
pub const KEYS: &[&str] = &[
    "eden",
    "survivor",
    "warehouse",
    "items",
    "tlab",
    "alloc",
    "transactions",
    "pretouch",
    "seed",
];
pub const DESCRIPTION: &str = "SPECjbb2005-like: one warehouse per worker in the old generation, TPC-C-like transaction mix, TLAB allocation from a shared eden, stop-the-world parallel young GC (§4.6). \
keys: eden=1G, survivor=128M (each of two), warehouse=bytes per warehouse (25M), items=shared item table entries (100000), tlab=256K, alloc=bytes allocated per transaction (2K), transactions=per worker (1000000), pretouch=0|1 (0), seed=1 (all sizes E)";

pub const PHASES: &[&str] = &["load", "transactions", "gc"];
pub const PHASE_LOAD: u16 = 0;
pub const PHASE_TXN: u16 = 1;
pub const PHASE_GC: u16 = 2;

/// Levels of a warehouse tree lookup (E).
pub const TREE_DEPTH: u64 = 4;
/// Item record (E).
pub const ITEM_BYTES: u64 = 128;
/// Share of eden alive at a young collection (E).
pub const SURVIVAL: f64 = 0.05;
/// Collections between promotions into the old generation (tenuring threshold, E).
pub const TENURE_GCS: u64 = 4;
/// Card table: one byte per 512 bytes of old generation (HotSpot).
pub const CARD_BYTES: u64 = 512;
/// Compute per transaction (business logic, E).
pub const CYCLES_PER_TXN: u64 = 3000;
/// A GC thread's promotion buffer in the old generation: HotSpot's `OldPLABSize` default of
/// 1024 heap words, 8 KiB.
pub const OLD_PLAB_BYTES: u64 = 8192;

#[derive(Clone, Debug, PartialEq)]
pub struct Jbb {
    pub eden: u64,
    pub survivor: u64,
    pub warehouse: u64,
    pub items: u64,
    pub tlab: u64,
    pub alloc: u64,
    pub transactions: u64,
    pub pretouch: bool,
    pub seed: u64,
    pub threads: usize,
}

/// Addresses of the heap spaces.
#[derive(Copy, Clone, Debug)]
struct Heap {
    eden: u64,
    survivor: [u64; 2],
    old: u64,
    old_bytes: u64,
    cards: u64,
    shared: u64,
}

impl Jbb {
    pub fn from_params(p: &Params, threads: usize) -> Result<Jbb, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "one worker per warehouse: at least one thread".into(),
            });
        }
        let j = Jbb {
            eden: p.size("eden", 1 << 30)?,
            survivor: p.size("survivor", 128 << 20)?,
            warehouse: p.size("warehouse", 25 << 20)?,
            items: p.uint_in("items", 100_000, 1, 1 << 32)?,
            tlab: p.size("tlab", 256 << 10)?,
            alloc: p.size("alloc", 2 << 10)?,
            transactions: p.uint("transactions", 1_000_000)?,
            pretouch: p.flag("pretouch", false)?,
            seed: p.uint("seed", 1)?,
            threads,
        };
        if j.tlab < 4096 || j.alloc == 0 || j.alloc > j.tlab || j.eden < j.tlab * threads as u64 {
            return Err(WorkloadError::Invalid {
                workload: NAME,
                why: format!(
                    "need 4K <= tlab, 0 < alloc <= tlab and eden >= tlab x threads (eden={}, tlab={}, alloc={}, {threads} threads)",
                    j.eden, j.tlab, j.alloc
                ),
            });
        }
        if j.warehouse < 64 * 1024 {
            return Err(WorkloadError::BadValue {
                workload: NAME,
                key: "warehouse",
                value: j.warehouse.to_string(),
                expected: "at least 64K".into(),
            });
        }
        Ok(j)
    }

    /// TLABs in eden, and transactions between two collections per worker.
    pub fn tlabs(&self) -> u64 {
        self.eden / self.tlab
    }

    pub fn txns_per_cycle(&self) -> u64 {
        ((self.tlabs() / self.threads as u64) * (self.tlab / self.alloc)).max(1)
    }
}

impl Workload for Jbb {
    fn name(&self) -> String {
        use crate::spec::format_size as f;
        format!(
            "{NAME}:eden={},survivor={},warehouse={},items={},tlab={},alloc={},transactions={},pretouch={},seed={}",
            f(self.eden),
            f(self.survivor),
            f(self.warehouse),
            self.items,
            f(self.tlab),
            f(self.alloc),
            self.transactions,
            self.pretouch as u8,
            self.seed
        )
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let task = TaskId(0);
        let o = MapOptions::default;
        let nt = self.threads as u64;
        // old: the warehouses, then room for every promotion of the run
        let cycles = self.transactions.div_ceil(self.txns_per_cycle());
        let promoted = (cycles / TENURE_GCS + 1) * ((self.eden as f64 * SURVIVAL) as u64 + 64 * nt);
        let old_bytes = nt * self.warehouse + promoted;
        let heap = Heap {
            eden: mem.mmap(task, "jbb.eden", self.eden, o()),
            survivor: [
                mem.mmap(task, "jbb.survivor0", self.survivor, o()),
                mem.mmap(task, "jbb.survivor1", self.survivor, o()),
            ],
            old: mem.mmap(task, "jbb.old", old_bytes, o()),
            old_bytes,
            cards: mem.mmap(task, "jbb.cards", old_bytes.div_ceil(CARD_BYTES), o()),
            shared: mem.mmap(task, "jbb.shared", self.items * ITEM_BYTES + 4096, o()),
        };
        (0..self.threads)
            .map(|t| {
                let mut s = Script::new(PHASES);
                s.phase(PHASE_LOAD);
                if self.pretouch && t == 0 {
                    let all = [
                        (heap.eden, self.eden),
                        (heap.survivor[0], self.survivor),
                        (heap.survivor[1], self.survivor),
                        (heap.old, old_bytes),
                    ];
                    for (b, n) in all {
                        s.streams(
                            &[Span::covering(b, 0, n, AccessKind::Write)],
                            n / 64,
                            n / 64,
                        );
                    }
                }
                s.barrier();
                // thread 0 populates the item table and company; the warehouses are built by
                // the workers (Worker::load)
                if t == 0 {
                    s.streams(
                        &[Span::covering(
                            heap.shared,
                            0,
                            self.items * ITEM_BYTES + 4096,
                            AccessKind::Write,
                        )],
                        self.items * 20,
                        self.items * 30,
                    );
                }
                s.barrier();
                s.gen(Worker {
                    j: self.clone(),
                    heap,
                    t,
                    rng: SplitMix64::new(self.seed ^ (t as u64 + 1).wrapping_mul(0x006a_6262)),
                    done: 0,
                    in_cycle: 0,
                    tlab_left: 0,
                    tlab_addr: 0,
                    tlabs_taken: 0,
                    gcs: 0,
                    promotions: 0,
                    phase_set: false,
                    loaded: false,
                    backlog: Backlog::default(),
                });
                ThreadSpec {
                    task,
                    program: Box::new(s),
                }
            })
            .collect()
    }
}

struct Worker {
    j: Jbb,
    heap: Heap,
    t: usize,
    rng: SplitMix64,
    done: u64,
    /// Transactions since the last collection.
    in_cycle: u64,
    tlab_left: u64,
    tlab_addr: u64,
    /// TLABs this worker took in the current cycle.
    tlabs_taken: u64,
    gcs: u64,
    promotions: u64,
    phase_set: bool,
    /// The warehouse is built and promoted.
    loaded: bool,
    backlog: Backlog,
}

impl Worker {
    fn acc(out: &mut Vec<Op>, addr: u64, kind: AccessKind) {
        out.push(Op::Access { addr, kind });
    }

    /// A lookup in one of the warehouse's trees: a path of dependent loads.
    fn lookup(&mut self, out: &mut Vec<Op>) -> u64 {
        let wh = self.heap.old + self.t as u64 * self.j.warehouse;
        let mut a = 0;
        for _ in 0..TREE_DEPTH {
            a = wh + (self.rng.below(self.j.warehouse / 64)) * 64;
            Self::acc(out, a, AccessKind::DependentRead);
        }
        a
    }

    fn item(&mut self, out: &mut Vec<Op>) {
        let i = self.rng.below(self.j.items);
        Self::acc(
            out,
            self.heap.shared + 4096 + i * ITEM_BYTES,
            AccessKind::Read,
        );
    }

    /// Allocate `bytes` of short-lived objects in the TLAB (taking a new one when needed).
    fn allocate(&mut self, out: &mut Vec<Op>, bytes: u64) {
        let mut left = bytes;
        while left > 0 {
            if self.tlab_left == 0 {
                // a new TLAB: atomic bump of eden's top. Every worker takes one TLAB per
                // round; within a round the order of the bumps follows their timing, which
                // the model draws per round (a rotation by a hash of the round and the
                // collection count, the same for every worker, so each round is a
                // permutation): no worker always gets the same place, nor always comes first
                // in a huge page.
                Self::acc(out, self.heap.shared, AccessKind::ReadModifyWrite);
                let nt = self.j.threads as u64;
                let round = self.tlabs_taken;
                let shift = SplitMix64::new(self.j.seed ^ (self.gcs << 32) ^ round).below(nt);
                let turn = (self.t as u64 + shift) % nt;
                let idx = (round * nt + turn) % self.j.tlabs();
                self.tlabs_taken += 1;
                self.tlab_addr = self.heap.eden + idx * self.j.tlab;
                self.tlab_left = self.j.tlab;
            }
            let n = left.min(self.tlab_left);
            let sp = Span::covering(self.tlab_addr, 0, n, AccessKind::Write);
            out.push(Op::Run {
                base: sp.addr,
                lines: sp.lines as u32,
                stride_bytes: 64,
                kind: sp.kind,
            });
            self.tlab_addr += n;
            self.tlab_left -= n;
            left -= n;
        }
    }

    fn transaction(&mut self, out: &mut Vec<Op>) {
        let kind = self.rng.below(100);
        match kind {
            0..=44 => {
                // new order: customer, 10 order lines (item + stock update), the new order
                self.lookup(out);
                for _ in 0..10 {
                    self.item(out);
                    let a = self.lookup(out);
                    Self::acc(out, a, AccessKind::ReadModifyWrite);
                }
                let a = self.lookup(out);
                Self::acc(out, a, AccessKind::Write);
            }
            45..=87 => {
                // payment: warehouse and district totals, customer, company under its lock
                let wh = self.heap.old + self.t as u64 * self.j.warehouse;
                Self::acc(out, wh, AccessKind::ReadModifyWrite);
                Self::acc(
                    out,
                    wh + 64 * (1 + self.rng.below(10)),
                    AccessKind::ReadModifyWrite,
                );
                let a = self.lookup(out);
                Self::acc(out, a, AccessKind::ReadModifyWrite);
                Self::acc(out, self.heap.shared + 64, AccessKind::ReadModifyWrite);
            }
            88..=91 => {
                // order status: customer, its last order and lines
                self.lookup(out);
                for _ in 0..10 {
                    self.lookup(out);
                }
            }
            92..=95 => {
                // delivery: the oldest new order of each of 10 districts
                for _ in 0..10 {
                    let a = self.lookup(out);
                    Self::acc(out, a, AccessKind::ReadModifyWrite);
                    let c = self.lookup(out);
                    Self::acc(out, c, AccessKind::ReadModifyWrite);
                }
            }
            _ => {
                // stock level: lines of the last 20 orders and their stock
                for _ in 0..20 {
                    self.lookup(out);
                    self.item(out);
                }
            }
        }
        self.allocate(out, self.j.alloc);
        out.push(compute(CYCLES_PER_TXN, CYCLES_PER_TXN * 2));
    }

    /// The load, into the backlog: the worker allocates its warehouse's objects in its
    /// TLABs, then, as GC thread t of the collection that ends the load, copies the live
    /// objects of its share of the eden used (all of them) into its PLABs in the old
    /// generation: PLAB k of the warehouses' area is GC thread k mod T's.
    fn load(&mut self) {
        let nt = self.j.threads as u64;
        let g = self.t as u64;
        let mut ops = Vec::new();
        self.allocate(&mut ops, self.j.warehouse);
        ops.push(compute(self.j.warehouse / 8, self.j.warehouse / 4));
        ops.push(Op::Barrier); // eden holds every warehouse: the safepoint
        ops.push(Op::Phase { id: PHASE_GC });
        // trace and copy the eden share (read), into the PLABs (first touch of the old space)
        let used_lines = (nt * self.j.warehouse).min(self.j.eden) / 64;
        let (lo, hi) = (used_lines * g / nt, used_lines * (g + 1) / nt);
        let mut at = lo;
        while at < hi {
            let n = (hi - at).min(u32::MAX as u64 / 2);
            ops.push(Op::Run {
                base: self.heap.eden + at * 64,
                lines: n as u32,
                stride_bytes: 64,
                kind: AccessKind::Read,
            });
            at += n;
        }
        let plabs = (nt * self.j.warehouse).div_ceil(OLD_PLAB_BYTES);
        let mut k = g;
        while k < plabs {
            ops.push(Op::Run {
                base: self.heap.old + k * OLD_PLAB_BYTES,
                lines: (OLD_PLAB_BYTES / 64) as u32,
                stride_bytes: 64,
                kind: AccessKind::Write,
            });
            k += nt;
        }
        ops.push(compute((hi - lo) * 30, (hi - lo) * 40));
        ops.push(Op::Barrier); // end of the pause
        for op in ops {
            self.backlog.push(op);
        }
        self.tlabs_taken = 0;
        self.tlab_left = 0;
    }

    /// This thread's part of a young collection, into the backlog (it can exceed a chunk).
    fn collect(&mut self) {
        let nt = self.j.threads as u64;
        let g = self.t as u64;
        let b = &mut self.backlog;
        b.push(Op::Barrier); // safepoint: every worker stopped
        b.push(Op::Phase { id: PHASE_GC });
        // roots: the share of the card table
        let cards = self.heap.old_bytes.div_ceil(CARD_BYTES);
        let sp = Span::covering(
            self.heap.cards,
            cards * g / nt,
            cards * (g + 1) / nt,
            AccessKind::Read,
        );
        if sp.lines > 0 {
            b.push(Op::Run {
                base: sp.addr,
                lines: sp.lines as u32,
                stride_bytes: 64,
                kind: sp.kind,
            });
        }
        // trace the live objects of the eden share, copy them to survivor or old space
        let eden_lines = self.j.eden / 64;
        let (lo, hi) = (eden_lines * g / nt, eden_lines * (g + 1) / nt);
        let live = ((hi - lo) as f64 * SURVIVAL) as u64;
        let promote = (self.gcs + 1).is_multiple_of(TENURE_GCS);
        let promo_base = self.heap.old + nt * self.j.warehouse;
        let (dest, cap_lines, first) = if promote {
            let cap = ((self.heap.old_bytes - nt * self.j.warehouse) / 64).max(1);
            (promo_base, cap, self.promotions * live * nt + g * live)
        } else {
            let to = self.heap.survivor[(self.gcs % 2) as usize];
            (to, (self.j.survivor / 64).max(1), g * live)
        };
        for i in 0..live {
            let a = self.heap.eden + (lo + self.rng.below(hi - lo)) * 64;
            b.push(Op::Access {
                addr: a,
                kind: AccessKind::DependentRead,
            });
            b.push(Op::Access {
                addr: dest + ((first + i) % cap_lines) * 64,
                kind: AccessKind::Write,
            });
        }
        b.push(compute(live * 30, live * 40));
        self.gcs += 1;
        if promote {
            self.promotions += 1;
        }
        b.push(Op::Barrier); // end of the pause
        b.push(Op::Phase { id: PHASE_TXN });
        self.in_cycle = 0;
        self.tlabs_taken = 0;
        self.tlab_left = 0;
    }
}

impl Gen for Worker {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        if !self.backlog.is_empty() && self.backlog.drain(out) {
            return Status::More;
        }
        if !self.loaded {
            self.loaded = true;
            self.load();
            if self.backlog.drain(out) {
                return Status::More;
            }
        }
        if !self.phase_set {
            out.push(Op::Phase { id: PHASE_TXN });
            self.phase_set = true;
        }
        let per_cycle = self.j.txns_per_cycle();
        while self.done < self.j.transactions {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            if self.in_cycle == per_cycle {
                // eden is full: every worker reaches the safepoint after the same count
                self.collect();
                if self.backlog.drain(out) {
                    return Status::More;
                }
                continue;
            }
            self.transaction(out);
            self.in_cycle += 1;
            self.done += 1;
        }
        Status::Done
    }
}
