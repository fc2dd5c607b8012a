//! `jbb`: a SPECjbb2005-like Java server, reference/workloads.md §4.6.
//!
//! A JVM-like heap: eden, two survivor spaces and an old generation; W warehouses, one per
//! worker thread. Each worker first builds its warehouse (districts, customers, orders, stock:
//! trees and hash maps, `warehouse` bytes) as a JVM does: as objects allocated in its TLABs in
//! the shared eden; the collection that ends the load (part of phase `load`: SPECjbb does not
//! time the population) copies them, all alive, into the old generation, each GC thread a
//! warehouse's worth into PLABs ([`OLD_PLAB_BYTES`]). So a
//! warehouse's pages are first-touched by the GC threads, not by its worker, and hold objects
//! of many warehouses. Then the worker runs transactions of the TPC-C-like mix (new order 45 %,
//! payment 43 %, order status 4 %, delivery 4 %, stock level 4 %):
//!
//! * lookups in its warehouse's trees are dependent loads (a path of [`TREE_DEPTH`] nodes) and
//!   updates are read-modify-writes of private records;
//! * new order and stock level read the shared, read-mostly item table; payment updates the
//!   shared company object under a lock (one hot line written by every worker);
//! * every transaction allocates short-lived objects by bumping its TLAB; a TLAB is taken at
//!   eden's top by an atomic bump (a hot shared line).
//!
//! Every TLAB and PLAB is taken at its space's top when the thread reaches the request, by
//! whichever thread asks next ([`Tops`]: the worker ends its fill before each request), as
//! HotSpot's CAS on a space's top hands them out. So a huge page of eden or of the old
//! generation is first touched by whichever thread's buffer reaches into it first, in
//! proportion to the threads' allocation rates, and a thread running ahead of the others
//! does not take every page beyond them.
//!
//! When eden is full, a stop-the-world young collection: every thread is a GC thread; GC
//! thread g scans its share of the card table (old → young roots), traces the live objects of
//! its share of eden (dependent loads, [`SURVIVAL`] of eden), copies them into its PLABs in the
//! to-space survivor ([`YOUNG_PLAB_BYTES`], first touch there by the GC thread), and every
//! [`TENURE_GCS`]-th collection promotes the survivors into old-generation PLABs instead.
//! Barriers open and close the pause, phase `gc`. `pretouch=1` is `-XX:+AlwaysPreTouch`:
//! thread 0 writes the whole heap first.
//!
//! Between the load and the measured `transactions` each worker runs `rampup` transactions,
//! phase `rampup`, their collections included, as SPECjbb2005 runs a ramp-up (30 s) before
//! each measurement interval (240 s): the interval then starts with every young space in use,
//! as a real one does after the dozens of collections of the ramp-up and the earlier points.
//! The default is [`RAMPUP_CYCLES`] collections' worth, the least that has used eden and both
//! survivor spaces once; the first touches of the old generation's promotions stay in the
//! interval, where a growing old generation has them too.

use crate::emit::{Gen, Script, Span, SplitMix64, Status, CHUNK_OPS};
use crate::kernel::compute;
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload};
use numalab_core::TaskId;
use std::sync::{Arc, Mutex};

pub const NAME: &str = "jbb";
pub const KEYS: &[&str] = &[
    "eden",
    "survivor",
    "warehouse",
    "items",
    "tlab",
    "alloc",
    "transactions",
    "rampup",
    "pretouch",
    "seed",
];
pub const DESCRIPTION: &str = "SPECjbb2005-like: one warehouse per worker in the old generation, TPC-C-like transaction mix, TLAB allocation from a shared eden, stop-the-world parallel young GC (§4.6). \
keys: eden=1G, survivor=128M (each of two), warehouse=bytes per warehouse (25M), items=shared item table entries (100000), tlab=256K, alloc=bytes allocated per transaction (2K), transactions=per worker, measured (1000000), rampup=per worker before them (two collections' worth), pretouch=0|1 (0), seed=1 (all sizes E)";

pub const PHASES: &[&str] = &["load", "rampup", "transactions", "gc"];
pub const PHASE_LOAD: u16 = 0;
pub const PHASE_RAMPUP: u16 = 1;
pub const PHASE_TXN: u16 = 2;
pub const PHASE_GC: u16 = 3;

/// Collections in the default ramp-up: the first copies the live objects into one survivor
/// space, the second into the other, so that afterwards eden (already used by the load, or by
/// the first cycle where the warehouses did not fill it) and both survivors have been touched
/// and are reused, as in a JVM that has run for a while. SPECjbb2005's own ramp-up, 30 s at
/// ≈ 1 GB/s of allocation, holds dozens of young collections; two is the least that leaves
/// none of the young spaces fresh, so the shrunk run does not pay more of them.
pub const RAMPUP_CYCLES: u64 = 2;

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
/// A GC thread's copy buffer in the to-space survivor: HotSpot's `YoungPLABSize` default of
/// 4096 heap words, 32 KiB.
pub const YOUNG_PLAB_BYTES: u64 = 32 << 10;

#[derive(Clone, Debug, PartialEq)]
pub struct Jbb {
    pub eden: u64,
    pub survivor: u64,
    pub warehouse: u64,
    pub items: u64,
    pub tlab: u64,
    pub alloc: u64,
    pub transactions: u64,
    /// Transactions per worker before the measured ones (phase `rampup`).
    pub rampup: u64,
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
            rampup: 0,
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
        let mut j = j;
        j.rampup = p.uint("rampup", RAMPUP_CYCLES * j.txns_per_cycle())?;
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

    /// PLABs each GC thread fills when the load's collection promotes the warehouses.
    pub fn load_plabs(&self) -> u64 {
        self.warehouse.div_ceil(OLD_PLAB_BYTES)
    }

    /// The old generation's warehouses' area: every GC thread's load PLABs, before the
    /// promotions' area.
    fn warehouse_area_bytes(&self) -> u64 {
        self.threads as u64 * self.load_plabs() * OLD_PLAB_BYTES
    }
}

impl Workload for Jbb {
    fn name(&self) -> String {
        use crate::spec::format_size as f;
        format!(
            "{NAME}:eden={},survivor={},warehouse={},items={},tlab={},alloc={},transactions={},rampup={},pretouch={},seed={}",
            f(self.eden),
            f(self.survivor),
            f(self.warehouse),
            self.items,
            f(self.tlab),
            f(self.alloc),
            self.transactions,
            self.rampup,
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
        let cycles = (self.rampup + self.transactions).div_ceil(self.txns_per_cycle());
        // each GC thread's last PLAB of a promotion may be partly used
        let promoted = (cycles / TENURE_GCS + 1)
            * ((self.eden as f64 * SURVIVAL) as u64 + (64 + OLD_PLAB_BYTES) * nt);
        let old_bytes = self.warehouse_area_bytes() + promoted;
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
        let tops = Arc::new(Mutex::new(Tops::default()));
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
                    tops: Arc::clone(&tops),
                    stage: Stage::Build {
                        left: self.warehouse,
                    },
                    done: 0,
                    txn_phase: PHASE_RAMPUP,
                    in_cycle: 0,
                    tlab_left: 0,
                    tlab_addr: 0,
                    plab_left: 0,
                    plab_addr: 0,
                    cycle: 0,
                    gcs: 0,
                });
                ThreadSpec {
                    task,
                    program: Box::new(s),
                }
            })
            .collect()
    }
}

/// The tops of the heap's spaces, shared by every thread of the JVM: a TLAB or a PLAB is
/// taken at its space's top by whichever thread asks next, as HotSpot's CAS on the top. A
/// worker ends its fill before each request (`Status::Yield`) and the engine asks a thread
/// for more ops only when it has run the previous ones, so buffers are handed out in the
/// order the threads reach them: by simulated time across epochs, by the engine's run order
/// within one (where the first-touch race of a huge page is still decided by time,
/// sim/os/first_touch.rs). A static assignment (buffer k to thread k mod T, or an order drawn
/// per round) handed a thread running ahead of the others every huge page beyond them, so one
/// node took the old generation or eden whole, by a margin that moved with the epoch length.
#[derive(Debug, Default)]
struct Tops {
    /// Bytes of eden taken in each cycle (index: collections before it, the load's included).
    eden: Vec<u64>,
    /// Bytes of the to-space survivor taken in each young collection (index: its number).
    survivor: Vec<u64>,
    /// Bytes of the old generation taken: the warehouses, then the promotions.
    old: u64,
}

impl Tops {
    fn take(v: &mut Vec<u64>, i: usize, bytes: u64) -> u64 {
        if v.len() <= i {
            v.resize(i + 1, 0);
        }
        let at = v[i];
        v[i] += bytes;
        at
    }
}

/// What a worker emits next.
#[derive(Copy, Clone, Debug)]
enum Stage {
    /// Building its warehouse in TLABs: bytes left.
    Build { left: u64 },
    /// The collection that ends the load: old-generation PLABs left to fill with the
    /// warehouses' objects; `work` the tracing compute that follows.
    Promote { left: u64, work: u64 },
    /// Transactions.
    Transactions,
    /// A young collection: live objects of eden `[lo, hi)` (lines) left to copy, into the
    /// survivor or, every `TENURE_GCS`-th collection, the old generation.
    Copy {
        left: u64,
        live: u64,
        lo: u64,
        hi: u64,
        promote: bool,
    },
}

struct Worker {
    j: Jbb,
    heap: Heap,
    t: usize,
    rng: SplitMix64,
    tops: Arc<Mutex<Tops>>,
    stage: Stage,
    /// Transactions run, the ramp-up's included.
    done: u64,
    /// The phase the worker's transactions are in: `rampup`, then `transactions`.
    txn_phase: u16,
    /// Transactions since the last collection.
    in_cycle: u64,
    tlab_left: u64,
    tlab_addr: u64,
    plab_left: u64,
    plab_addr: u64,
    /// Collections so far, the load's included: the eden cycle the worker allocates in.
    cycle: u64,
    /// Young collections so far.
    gcs: u64,
}

impl Worker {
    fn acc(out: &mut Vec<Op>, addr: u64, kind: AccessKind) {
        out.push(Op::Access { addr, kind });
    }

    fn tops(&self) -> std::sync::MutexGuard<'_, Tops> {
        // a poisoned lock means another generator panicked: the run is over anyway
        self.tops.lock().unwrap_or_else(|e| e.into_inner())
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

    /// A new TLAB at eden's top (wrapping where the load's warehouses overfill eden).
    fn take_tlab(&mut self, out: &mut Vec<Op>) {
        // the atomic bump of eden's top (a `lock cmpxchg` loop, HotSpot's `par_allocate`):
        // a hot shared line
        Self::acc(out, self.heap.shared, AccessKind::Atomic);
        let (cycle, tlab) = (self.cycle as usize, self.j.tlab);
        let at = Tops::take(&mut self.tops().eden, cycle, tlab);
        self.tlab_addr = self.heap.eden + (at / tlab % self.j.tlabs()) * tlab;
        self.tlab_left = tlab;
    }

    /// Allocate up to `bytes` of objects in the TLAB, taking a new one when it is used up.
    /// Returns the bytes allocated: all of them, or, where a further TLAB would be needed
    /// after this fill's first request, what fits (the caller yields before the next).
    fn allocate(&mut self, out: &mut Vec<Op>, bytes: u64) -> u64 {
        let mut left = bytes;
        let mut taken = false;
        while left > 0 {
            if self.tlab_left == 0 {
                if taken {
                    break;
                }
                self.take_tlab(out);
                taken = true;
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
        bytes - left
    }

    /// A new PLAB at the top of the survivor of the current collection, or of the old
    /// generation (the warehouses' area first, then the promotions', wrapping there).
    fn take_plab(&mut self, promote: bool) {
        let (bytes, gc) = if promote {
            (OLD_PLAB_BYTES, 0)
        } else {
            (YOUNG_PLAB_BYTES, self.gcs as usize)
        };
        let at = {
            let mut tops = self.tops();
            if promote {
                let at = tops.old;
                tops.old += bytes;
                at
            } else {
                Tops::take(&mut tops.survivor, gc, bytes)
            }
        };
        self.plab_addr = if promote {
            let area = self.j.warehouse_area_bytes();
            let room = (self.heap.old_bytes - area) / bytes * bytes;
            if at < area || room == 0 {
                self.heap.old + at % self.heap.old_bytes
            } else {
                self.heap.old + area + (at - area) % room
            }
        } else {
            let to = self.heap.survivor[(self.gcs % 2) as usize];
            to + (at / bytes) % (self.j.survivor / bytes).max(1) * bytes
        };
        self.plab_left = bytes;
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
                // `synchronized` on the company: HotSpot's stack lock takes and gives back
                // the object's mark word by compare-and-swap, around the update
                let company = self.heap.shared + 64;
                Self::acc(out, company, AccessKind::Atomic);
                Self::acc(out, company, AccessKind::ReadModifyWrite);
                Self::acc(out, company, AccessKind::Atomic);
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
        let n = self.allocate(out, self.j.alloc);
        debug_assert_eq!(n, self.j.alloc, "alloc <= tlab: one TLAB at most");
        out.push(compute(CYCLES_PER_TXN, CYCLES_PER_TXN * 2));
    }

    /// The safepoint that ends the load: eden holds every warehouse; GC thread t traces its
    /// share of the eden used (all of it alive), then copies a warehouse's worth into PLABs.
    fn start_promote(&mut self, out: &mut Vec<Op>) {
        let nt = self.j.threads as u64;
        let g = self.t as u64;
        // the collection that ends the load is the load's (SPECjbb does not time the
        // warehouses' population): phase `gc` holds the young collections of the transactions
        out.push(Op::Barrier);
        let used_lines = (nt * self.j.warehouse).min(self.j.eden) / 64;
        let (lo, hi) = (used_lines * g / nt, used_lines * (g + 1) / nt);
        let mut at = lo;
        while at < hi {
            let n = (hi - at).min(u32::MAX as u64 / 2);
            out.push(Op::Run {
                base: self.heap.eden + at * 64,
                lines: n as u32,
                stride_bytes: 64,
                kind: AccessKind::Read,
            });
            at += n;
        }
        self.stage = Stage::Promote {
            left: self.j.load_plabs(),
            work: hi - lo,
        };
    }

    /// The safepoint of a young collection: GC thread t scans its share of the card table
    /// (old → young roots), then copies the live objects of its share of eden.
    fn start_collect(&mut self, out: &mut Vec<Op>) {
        let nt = self.j.threads as u64;
        let g = self.t as u64;
        out.push(Op::Barrier);
        // the ramp-up's collections are the ramp-up's (the one that ends it too)
        let gc_phase = if self.done <= self.j.rampup && self.j.rampup > 0 {
            PHASE_RAMPUP
        } else {
            PHASE_GC
        };
        out.push(Op::Phase { id: gc_phase });
        let cards = self.heap.old_bytes.div_ceil(CARD_BYTES);
        let sp = Span::covering(
            self.heap.cards,
            cards * g / nt,
            cards * (g + 1) / nt,
            AccessKind::Read,
        );
        sp.push_run(out);
        let eden_lines = self.j.eden / 64;
        let (lo, hi) = (eden_lines * g / nt, eden_lines * (g + 1) / nt);
        let live = ((hi - lo) as f64 * SURVIVAL) as u64;
        self.stage = Stage::Copy {
            left: live,
            live,
            lo,
            hi,
            promote: (self.gcs + 1).is_multiple_of(TENURE_GCS),
        };
        self.plab_left = 0;
    }

    /// The end of a pause: the closing barrier, and a fresh TLAB in the next cycle.
    fn end_pause(&mut self, out: &mut Vec<Op>) {
        out.push(Op::Barrier);
        self.txn_phase = if self.done < self.j.rampup {
            PHASE_RAMPUP
        } else {
            PHASE_TXN
        };
        out.push(Op::Phase { id: self.txn_phase });
        self.cycle += 1;
        self.in_cycle = 0;
        self.tlab_left = 0;
        self.plab_left = 0;
        self.stage = Stage::Transactions;
    }
}

impl Gen for Worker {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        loop {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            match self.stage {
                Stage::Build { left } => {
                    if left == 0 {
                        self.start_promote(out);
                        continue;
                    }
                    // one TLAB's worth per fill: the next TLAB is taken when it is reached
                    if self.tlab_left == 0 && !out.is_empty() {
                        return Status::Yield;
                    }
                    let n = self.allocate(out, left);
                    out.push(compute(n / 8, n / 4));
                    self.stage = Stage::Build { left: left - n };
                }
                Stage::Promote { left, work } => {
                    if left == 0 {
                        out.push(compute(work * 30, work * 40));
                        self.end_pause(out);
                        continue;
                    }
                    if !out.is_empty() {
                        return Status::Yield;
                    }
                    // the warehouses' objects, all alive, written into the next PLAB
                    self.take_plab(true);
                    out.push(Op::Run {
                        base: self.plab_addr,
                        lines: (OLD_PLAB_BYTES / 64) as u32,
                        stride_bytes: 64,
                        kind: AccessKind::Write,
                    });
                    self.plab_left = 0;
                    self.stage = Stage::Promote {
                        left: left - 1,
                        work,
                    };
                }
                Stage::Transactions => {
                    if self.done == self.j.rampup + self.j.transactions {
                        return Status::Done;
                    }
                    if self.in_cycle == self.j.txns_per_cycle() {
                        // eden is full: every worker reaches the safepoint after the same count
                        self.start_collect(out);
                        continue;
                    }
                    if self.tlab_left < self.j.alloc && !out.is_empty() {
                        // this transaction takes a TLAB: when the worker reaches it
                        return Status::Yield;
                    }
                    if self.done == self.j.rampup && self.txn_phase == PHASE_RAMPUP {
                        // the measurement interval begins (no pause: SPECjbb starts timing
                        // while the warehouses run on)
                        self.txn_phase = PHASE_TXN;
                        out.push(Op::Phase { id: PHASE_TXN });
                    }
                    self.transaction(out);
                    self.in_cycle += 1;
                    self.done += 1;
                }
                Stage::Copy {
                    left,
                    live,
                    lo,
                    hi,
                    promote,
                } => {
                    if left == 0 {
                        out.push(compute(live * 30, live * 40));
                        self.gcs += 1;
                        self.end_pause(out);
                        continue;
                    }
                    if self.plab_left == 0 {
                        if !out.is_empty() {
                            return Status::Yield;
                        }
                        self.take_plab(promote);
                    }
                    // trace one live object of the eden share and copy it into the PLAB
                    let a = self.heap.eden + (lo + self.rng.below(hi - lo)) * 64;
                    Self::acc(out, a, AccessKind::DependentRead);
                    Self::acc(out, self.plab_addr, AccessKind::Write);
                    self.plab_addr += 64;
                    self.plab_left -= 64;
                    self.stage = Stage::Copy {
                        left: left - 1,
                        live,
                        lo,
                        hi,
                        promote,
                    };
                }
            }
        }
    }
}
