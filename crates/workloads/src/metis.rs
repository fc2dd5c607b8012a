//! Metis MapReduce (`metis-wc`, `metis-wr`, `metis-wrmem`), reference/workloads.md §4.4: one
//! framework, three applications.
//!
//! * input: a text of `input` bytes, words of [`WORD_BYTES`] drawn from a Zipf-like
//!   vocabulary of `vocab` words (word = ⌊vocab^u⌋ − 1 for a seeded uniform u, so P(word) ∝
//!   1/(word+1)). `metis-wc` and `metis-wr` mmap a file (wc.c, wr.c: `mmap(..., MAP_PRIVATE,
//!   fd, 0)`) that is already in the page cache, read before the run on the master's node
//!   ([`AddressSpace::mmap_file`]): the mappers read their splits there, each 4 KiB page
//!   mapped by a minor fault at its first read (16 pages a fault from Linux 3.15:
//!   fault-around), never a huge page. `metis-wrmem` generates
//!   its input in memory: the master writes it all (phase `setup`), first touch on its node.
//! * **setup** (the master, before the workers start: `mr_setup`): besides wrmem's input, the
//!   T rows of map buckets, each `malloc`'d (a row is T × `buckets` `btree_t`s of 24 bytes)
//!   and every bucket initialised by the master (`kvst_init` → `mbm_mbks_init` in Metis'
//!   bucket managers), then `map_out`, one 16-byte array header per bucket, so all of it is
//!   first touched on the master's node. Left out: Metis' sampling run over 5 % of the splits
//!   (`mr_sample`), which sizes the reduce side and whose results the workers rehash.
//! * **map**: splits of `split` bytes taken from the task queue (`schedule(dynamic)`-like,
//!   [`crate::kernel::dynamic_schedule`]). A map thread streams its split and inserts each
//!   word into its own row's bucket, a B+tree of order 3 (lib/keyvals_btree.c, the default
//!   `btreebktmgr`): from the bucket's root down to a leaf, each node searched by Metis'
//!   `bsearch_lar` / `bsearch_eq`, and every compare reads a slot's key pointer and the key
//!   copy it points to (`strcmp`). A new word moves the leaf's later slots up, gets its key
//!   copied into a fresh `malloc` chunk (wc.c's `keycopy`), and a full node splits (a new
//!   node `calloc`'d, half the slots copied, the separator pushed up, up to a new root). wc
//!   keeps the count in the slot (its value modifier: a read-modify-write); wr / wrmem append
//!   the position to the key's value array, 8 pointers at first and doubled by `realloc`
//!   (value_helper.c). Every allocation comes from the thread's own glibc arena, chunks in
//!   request order with glibc's sizes ([`malloc_chunk_bytes`]), each thread's heap aligned to
//!   2 MiB (glibc's are 64 MiB heaps of their own), so a huge page never holds two threads'
//!   tables.
//! * **reduce**: thread r runs its partition's bucket columns (`mbm_do_reduce_task`): per
//!   column, every map thread's tree of that bucket walked leaf by leaf, each pair's slot and
//!   key read (the merge compares keys; wr also reads the value array), and one output pair
//!   per distinct word written to its slice of the output (first touch by the reducer).
//! * **merge**: log2 T rounds of pairwise merges of sorted runs, alternating two buffers.
//!
//! Left out besides the sampling run: the mmap_lock writes of glibc's arena growth (a thread
//! heap grows by `mprotect`, by the page-rounded need of the malloc that ran out:
//! `grow_heap`), and with them the VMA's edge, which keeps THP from backing a heap grown a page
//! at a time (the model maps each heap whole: whether G14's Metis used glibc or MOSBENCH's
//! Streamflow, whose 8 MB `mmap`s THP backs, is not published); the master allocating from
//! glibc's main arena, beside the bucket rows (the model gives it a heap like the others'); the
//! frees of the reduce (`pch_shallow_free`) and its iterators' 16-byte mallocs.
//!
//! Barriers separate the phases. The word stream and the task schedule are deterministic, so
//! the map result is replayed (once, shared) to know what each reducer finds.

use crate::emit::{Gen, Script, Span, SplitMix64, Status, CHUNK_OPS};
use crate::kernel::{compute, dynamic_schedule};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{
    AccessKind, AddressSpace, MapOptions, Op, Placements, ThreadSpec, Workload,
};
use numalab_core::TaskId;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

pub const KEYS: &[&str] = &["input", "vocab", "split", "buckets", "seed"];
pub const WC: &str = "metis-wc";
pub const WR: &str = "metis-wr";
pub const WRMEM: &str = "metis-wrmem";
pub const DESCRIPTION_WC: &str = "Metis word count: input mmapped from the page cache, map splits from a task queue into per-thread B+trees, one per bucket (combining counts), column-wise reduce, merge sort (§4.4). \
keys: input=bytes of text (1G, E), vocab=distinct words (1000000, E), split=bytes per map task (1M, E), buckets=hash buckets per partition cell (default: Metis' sizing, about 10 keys a bucket and at least 16 per thread), seed=1";
pub const DESCRIPTION_WR: &str = "Metis inverted index (wr): as metis-wc but appending word positions to per-key value lists (§4.4). \
keys: input=bytes of text (1G, E), vocab=distinct words (1000000, E), split=bytes per map task (1M, E), buckets=hash buckets per partition cell (default: Metis' sizing, about 10 keys a bucket and at least 16 per thread), seed=1";
pub const DESCRIPTION_WRMEM: &str = "Metis wrmem: the inverted index over an input generated in memory by the master (§4.4). \
keys: input=bytes of text (1G, E), vocab=distinct words (1000000, E), split=bytes per map task (1M, E), buckets=hash buckets per partition cell (default: Metis' sizing, about 10 keys a bucket and at least 16 per thread), seed=1";

/// `setup` is the master's work before the map workers start (`mr_setup`): wrmem's input,
/// and the map side's bucket matrix.
pub const PHASES: &[&str] = &["setup", "map", "reduce", "merge"];
pub const PHASE_SETUP: u16 = 0;
pub const PHASE_MAP: u16 = 1;
pub const PHASE_REDUCE: u16 = 2;
pub const PHASE_MERGE: u16 = 3;

/// Average word with its separator (E). A key's copy is the word and its terminating NUL
/// (wc.c's `keycopy`: `malloc(len + 1)`), the same 8 bytes.
pub const WORD_BYTES: u64 = 8;
/// Tokenising and hashing a word (E).
pub const CYCLES_PER_WORD: u64 = 30;
/// Words of text streamed at a time by a map thread (2 KiB).
const WORDS_PER_UNIT: u64 = 256;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum App {
    /// Word count: values combined in place.
    Wc,
    /// Inverted index over a file.
    Wr,
    /// Inverted index over an in-memory generated input.
    WrMem,
}

impl App {
    pub fn name(self) -> &'static str {
        match self {
            App::Wc => WC,
            App::Wr => WR,
            App::WrMem => WRMEM,
        }
    }
}

/// Keys Metis wants in a map bucket (`nkeys_per_bkt`, lib/estimation.h).
pub const KEYS_PER_BUCKET: u64 = 10;
/// Reduce tasks per CPU at least (`def_gr_tasks_per_cpu`, lib/mr-sched.c).
pub const TASKS_PER_CPU: u64 = 16;

/// Buckets per partition cell as Metis sizes its map rows: `mr_setup` samples the map, takes
/// ⌊keys per mapper ÷ nkeys_per_bkt⌋ rounded up to a prime (`kvst_sample_finished`), then at
/// least 16 × CPUs (`def_gr_tasks_per_cpu`): that many reduce tasks, which is also the number
/// of buckets in every map thread's row; the model splits a row into `threads` cells. The
/// keys per mapper are the distinct words expected among its `words ÷ threads` draws from
/// the input's vocabulary, where Metis estimates them from its sample: word k (0 ≤ k ≤ V − 2,
/// the values [`Metis::word`] draws) has P(k) = ln((k+2)/(k+1)) / ln V.
pub fn metis_buckets_per_cell(words: u64, vocab: u64, threads: u64) -> u64 {
    let threads = threads.max(1);
    let keys = expected_distinct_words(words / threads, vocab);
    let mut tasks = (keys as u64) / KEYS_PER_BUCKET;
    while !is_prime(tasks) {
        tasks += 1;
    }
    tasks.max(TASKS_PER_CPU * threads).div_ceil(threads)
}

/// Distinct words expected among `draws` words of a `vocab`-word input: Σ 1 − (1 − P(k))^n,
/// exact over the first million words, and over the rest (where P(k) changes slowly) a
/// trapezoid rule on 4 096 geometric steps, so a vocabulary of billions costs no more.
fn expected_distinct_words(draws: u64, vocab: u64) -> f64 {
    let n = draws as f64;
    let ln_v = (vocab.max(2) as f64).ln();
    // 1 − (1 − p)^n without cancellation for small p
    let seen = |k: f64| {
        let p = ((k + 2.0) / (k + 1.0)).ln() / ln_v;
        -(n * (-p).ln_1p()).exp_m1()
    };
    let words = vocab.saturating_sub(1); // k = 0 ..= V − 2
    const EXACT: u64 = 1_000_000;
    let head: f64 = (0..words.min(EXACT)).map(|k| seen(k as f64)).sum();
    if words <= EXACT {
        return head;
    }
    // the tail k = EXACT ..= words − 1 as ∫ seen over [EXACT − ½, words − ½]
    let (lo, hi) = (EXACT as f64 - 0.5, words as f64 - 0.5);
    const STEPS: i32 = 4096;
    let ratio = (hi / lo).powf(1.0 / STEPS as f64);
    let tail: f64 = (0..STEPS)
        .map(|i| {
            let a = lo * ratio.powi(i);
            let b = a * ratio;
            (b - a) * (seen(a) + seen(b)) / 2.0
        })
        .sum();
    head + tail
}

fn is_prime(n: u64) -> bool {
    n >= 2
        && (2..)
            .take_while(|q| q * q <= n)
            .all(|q| !n.is_multiple_of(q))
}

#[derive(Clone, Debug)]
pub struct Metis {
    pub app: App,
    pub input: u64,
    pub vocab: u64,
    pub split: u64,
    pub buckets: u64,
    pub seed: u64,
    pub threads: usize,
    result: Arc<OnceLock<Arc<MapResult>>>,
}

impl Metis {
    pub fn from_params(app: App, p: &Params, threads: usize) -> Result<Metis, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: app.name(),
                threads,
                why: "Metis needs at least one thread".into(),
            });
        }
        let input = p.size("input", 1 << 30)?;
        let vocab = p.uint_in("vocab", 1_000_000, 1, u32::MAX as u64)?;
        let split = p.size("split", 1 << 20)?;
        let buckets = if p.has("buckets") {
            p.uint_in("buckets", 1, 1, 1 << 24)?
        } else {
            metis_buckets_per_cell(input / WORD_BYTES, vocab, threads as u64)
        };
        let seed = p.uint("seed", 1)?;
        if input < WORD_BYTES || split < WORD_BYTES || input / split > u32::MAX as u64 {
            return Err(WorkloadError::Invalid {
                workload: app.name(),
                why: format!(
                    "input={input} and split={split} must hold at least one {WORD_BYTES}-byte word each, and input/split fit 32 bits"
                ),
            });
        }
        Ok(Metis {
            app,
            input,
            vocab,
            split,
            buckets,
            seed,
            threads,
            result: Arc::new(OnceLock::new()),
        })
    }

    pub fn words(&self) -> u64 {
        self.input / WORD_BYTES
    }

    pub fn splits(&self) -> u64 {
        self.input.div_ceil(self.split)
    }

    /// Word ids [lo, hi) of the input.
    fn split_words(&self, s: u64) -> (u64, u64) {
        let per = self.split / WORD_BYTES;
        (s * per, ((s + 1) * per).min(self.words()))
    }

    /// The word at position `w` of the input.
    pub fn word(&self, w: u64) -> u32 {
        let mut r = SplitMix64::new(self.seed.wrapping_mul(0x100_0000_01b3) ^ w);
        let u = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (((self.vocab as f64).powf(u) as u64).saturating_sub(1)).min(self.vocab - 1) as u32
    }

    /// (partition, bucket) of a word.
    pub fn place(&self, word: u32) -> (usize, u64) {
        let h = (word as u64 ^ self.seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (
            ((h >> 40) % self.threads as u64) as usize,
            (h >> 8) % self.buckets,
        )
    }

    fn schedule(&self) -> Vec<Vec<u32>> {
        let costs = vec![1u64; self.splits() as usize];
        dynamic_schedule(&costs, self.threads, self.seed ^ 0x6d65_7469)
    }
}

/// glibc malloc's chunk for a request of `req` bytes (malloc.c, `request2size`): the request
/// and the 8-byte size field, rounded up to 16 bytes, at least `MINSIZE` (32) on x86-64.
pub fn malloc_chunk_bytes(req: u64) -> u64 {
    ((req + 8 + 15) & !15).max(32)
}

/// A chunk's user pointer follows its `prev_size` and `size` fields.
const CHUNK_HEADER_BYTES: u64 = 16;

/// Where a thread arena's first chunk starts in its heap: `sizeof(heap_info)` (32) and
/// `sizeof(struct malloc_state)` (2 184, bins and fastbins), glibc 2.17 on x86-64, rounded
/// to 16 (E: from the structures' fields).
const ARENA_HEADER_BYTES: u64 = 2224;

/// glibc's mmap threshold at start (`DEFAULT_MMAP_THRESHOLD_MIN`, 128 KiB): a larger
/// request gets a mapping of its own, page aligned, its header in the mapping's first bytes.
const MMAP_THRESHOLD_BYTES: u64 = 128 << 10;

/// One thread's malloc arena as Metis' map phase uses it. Chunks are carved from the top in
/// request order: the map frees nothing but the value arrays that `realloc` moves (wr), and
/// glibc gives such a freed chunk to the next request of its size, the last freed first (its
/// fastbins and small bins), which is what `free_lists` does. Left out: a freed chunk split
/// for a smaller request or coalesced with its neighbours.
#[derive(Clone, Debug, Default)]
struct Arena {
    /// Bytes of the heap in use: the next chunk starts here.
    top: u64,
    free_lists: HashMap<u64, Vec<u64>>,
}

impl Arena {
    fn new() -> Arena {
        Arena {
            top: ARENA_HEADER_BYTES,
            free_lists: HashMap::new(),
        }
    }

    /// `malloc(req)`: the user pointer's offset in the heap.
    fn malloc(&mut self, req: u64) -> u64 {
        let chunk = malloc_chunk_bytes(req);
        if let Some(at) = self.free_lists.get_mut(&chunk).and_then(Vec::pop) {
            return at;
        }
        let at = self.top + CHUNK_HEADER_BYTES;
        self.top += chunk;
        at
    }

    fn free(&mut self, at: u64, req: u64) {
        self.free_lists
            .entry(malloc_chunk_bytes(req))
            .or_default()
            .push(at);
    }
}

/// Metis' B+tree node (lib/pchandler.h, `btnode_t`, order 3): `short nkeys` at 0, the parent
/// pointer at 8, eight 32-byte `keyvals_t` slots from 16 (key pointer, then `vals`, `len`,
/// `alloc_len`, `hash`; an internal node keeps key i and child i in slot i), the next leaf at
/// 272.
pub const BTNODE_BYTES: u64 = 280;
const SLOTS_OFFSET: u64 = 16;
pub const KEYVALS_BYTES: u64 = 32;
const PARENT_OFFSET: u64 = 8;
const NEXT_OFFSET: u64 = 272;
/// `order` in lib/pchandler.h: a leaf splits when it reaches 2·order + 2 keys, an internal
/// node when it reaches 2·order + 1 (keyvals_btree.c).
const ORDER: usize = 3;
/// A map bucket is a `btree_t` (`nkeys`, `nlevel`, `root`): 24 bytes.
pub const BUCKET_BYTES: u64 = 24;
/// `map_out`'s elements, `keyvals_arr_t` (`len`, `alloc_len`, `arr`), one per bucket of the
/// matrix, initialised by the master in `mbm_mbks_init`.
const MAP_OUT_ENTRY_BYTES: u64 = 16;
/// wr's value arrays start at `combiner_threshold` (8) pointers and double (value_helper.c).
const VALUES_FIRST: u32 = 8;
/// One output pair of the reduce: key pointer and value.
pub const PAIR_BYTES: u64 = 16;

/// Metis' `strcmp` order of two distinct words is the order of their spellings, which a
/// word's rank stands for: a bijection of the word id, so that a bucket's sorted keys are in
/// no relation to their frequency.
fn key_rank(word: u32) -> u64 {
    (word as u64 ^ 0x5bd1_e995).wrapping_mul(0xD6E8_FEB8_6659_FD93)
}

/// `bsearch_eq` (lib/bsearch.c): the first position whose key is not below `key`, whether it
/// is `key`, and the positions compared, in order (each compare dereferences that slot's key).
fn bsearch_eq(keys: &[u32], key: u32) -> (usize, bool, Probes) {
    let mut p = Probes::default();
    let mut cmp = |i: usize| {
        p.push(i);
        if keys[i] == key {
            std::cmp::Ordering::Equal
        } else {
            key_rank(key).cmp(&key_rank(keys[i]))
        }
    };
    use std::cmp::Ordering::*;
    let n = keys.len();
    let r = if n == 0 {
        (0, false)
    } else {
        match cmp(n - 1) {
            Equal => (n - 1, true),
            Greater => (n, false),
            Less if n == 1 => (0, false),
            Less if n == 2 => match cmp(0) {
                Equal => (0, true),
                Less => (0, false),
                Greater => (1, false),
            },
            Less => {
                let (mut left, mut right) = (0i64, n as i64 - 2);
                let mut hit = None;
                while left < right {
                    let mid = (left + right) / 2;
                    match cmp(mid as usize) {
                        Equal => {
                            hit = Some(mid as usize);
                            break;
                        }
                        Less => right = mid - 1,
                        Greater => left = mid + 1,
                    }
                }
                match hit {
                    Some(m) => (m, true),
                    None => {
                        let l = left.max(0) as usize;
                        match cmp(l) {
                            Equal => (l, true),
                            Greater => (l + 1, false),
                            Less => (l, false),
                        }
                    }
                }
            }
        }
    };
    (r.0, r.1, p)
}

/// `bsearch_lar` (lib/bsearch.c): the first position whose key is above `key`, and the
/// positions compared.
fn bsearch_lar(keys: &[u32], key: u32) -> (usize, Probes) {
    let mut p = Probes::default();
    // a word looked up may equal a separator (a copy of its leaf's first key): `res >= 0`
    // sends it right, to that leaf; distinct words have distinct ranks
    let mut ge = |i: usize| {
        p.push(i);
        keys[i] == key || key_rank(key) > key_rank(keys[i])
    };
    let n = keys.len();
    let pos = if n == 0 {
        0
    } else if ge(n - 1) {
        n
    } else if n == 1 {
        0
    } else if n == 2 {
        usize::from(ge(0))
    } else {
        let (mut left, mut right) = (0i64, n as i64 - 2);
        while left < right {
            let mid = (left + right) / 2;
            if ge(mid as usize) {
                left = mid + 1;
            } else {
                right = mid - 1;
            }
        }
        let l = left.max(0) as usize;
        if ge(l) {
            l + 1
        } else {
            l
        }
    };
    (pos, p)
}

/// The positions a binary search compared (at most 2·order + 2 keys: four compares).
#[derive(Default)]
struct Probes {
    at: [u8; 8],
    n: usize,
}

impl Probes {
    fn push(&mut self, i: usize) {
        if self.n < self.at.len() {
            self.at[self.n] = i as u8;
            self.n += 1;
        }
    }

    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.at[..self.n].iter().map(|&i| i as usize)
    }
}

/// Addresses of one run's data.
#[derive(Copy, Clone, Debug)]
struct Maps {
    input: u64,
    /// The master's rows of map buckets: row t's user pointer at `buckets + t·row_stride + 16`.
    buckets: u64,
    row_stride: u64,
    /// Each map thread's heap: thread t's at `arena + t·arena_stride`.
    arena: u64,
    arena_stride: u64,
    out: [u64; 2],
}

impl Maps {
    fn bucket(&self, m: &Metis, t: usize, p: usize, b: u64) -> u64 {
        self.buckets
            + t as u64 * self.row_stride
            + CHUNK_HEADER_BYTES
            + (p as u64 * m.buckets + b) * BUCKET_BYTES
    }
}

/// Appends a thread's references to `out`, or nothing while the map is replayed.
struct Emit<'a> {
    out: Option<&'a mut Vec<Op>>,
    /// The thread's heap.
    heap: u64,
}

impl Emit<'_> {
    fn push(&mut self, op: Op) {
        if let Some(out) = self.out.as_deref_mut() {
            out.push(op);
        }
    }

    fn op(&mut self, addr: u64, kind: AccessKind) {
        self.push(Op::Access { addr, kind });
    }

    /// `kind` on the lines of bytes `[at, at + bytes)` of the heap.
    fn lines(&mut self, at: u64, bytes: u64, kind: AccessKind) {
        if let Some(out) = self.out.as_deref_mut() {
            let sp = Span::covering(self.heap + at, 0, bytes, kind);
            if sp.lines > 0 {
                out.push(Op::Run {
                    base: sp.addr,
                    lines: sp.lines as u32,
                    stride_bytes: 64,
                    kind,
                });
            }
        }
    }

    /// Ops appended so far (none while replaying).
    fn len(&self) -> usize {
        self.out.as_ref().map_or(0, |o| o.len())
    }

    fn heap_op(&mut self, at: u64, kind: AccessKind) {
        let a = self.heap + at;
        self.op(a, kind);
    }
}

/// One B+tree node of a map thread's tables.
#[derive(Clone, Debug)]
struct BtNode {
    /// Offset of its user pointer in the thread's heap.
    at: u64,
    /// Its keys in `strcmp` order (word ids).
    keys: Vec<u32>,
    /// An internal node's children (`keys.len() + 1`); empty in a leaf.
    kids: Vec<u32>,
    parent: Option<u32>,
    next: Option<u32>,
}

impl BtNode {
    fn slot(&self, i: usize) -> u64 {
        self.at + SLOTS_OFFSET + i as u64 * KEYVALS_BYTES
    }
}

/// wr's value array of one key.
#[derive(Copy, Clone, Debug)]
struct Values {
    at: u64,
    len: u32,
    alloc: u32,
}

/// One map thread's tables: its heap, the B+tree of each bucket it filled, the copies of its
/// keys and (wr) their value arrays.
#[derive(Clone, Debug)]
pub struct MapState {
    heap: Arena,
    nodes: Vec<BtNode>,
    /// Per (partition, bucket): root node and `nlevel`.
    trees: HashMap<(usize, u64), (u32, u16)>,
    /// Per word: its key copy's offset in the heap.
    key_at: HashMap<u32, u64>,
    values: HashMap<u32, Values>,
    /// Per partition: (word, occurrences) in insertion order, and each word's place there.
    cells: Vec<Vec<(u32, u32)>>,
    cell_pos: HashMap<u32, u32>,
}

impl MapState {
    fn new(m: &Metis) -> MapState {
        MapState {
            heap: Arena::new(),
            nodes: Vec::new(),
            trees: HashMap::new(),
            key_at: HashMap::new(),
            values: HashMap::new(),
            cells: vec![Vec::new(); m.threads],
            cell_pos: HashMap::new(),
        }
    }

    /// Bytes of the thread's heap in use.
    pub fn heap_bytes(&self) -> u64 {
        self.heap.top
    }

    /// `create_node`: `calloc(1, sizeof(btnode_t))`, cleared.
    fn new_node(&mut self, e: &mut Emit) -> u32 {
        let at = self.heap.malloc(BTNODE_BYTES);
        e.lines(at, BTNODE_BYTES, AccessKind::Write);
        self.nodes.push(BtNode {
            at,
            keys: Vec::new(),
            kids: Vec::new(),
            parent: None,
            next: None,
        });
        (self.nodes.len() - 1) as u32
    }

    /// Each compare of a search reads the slot's key pointer and the key it points to.
    fn emit_probes(&self, node: u32, probes: &Probes, e: &mut Emit) {
        let n = &self.nodes[node as usize];
        for i in probes.iter() {
            e.heap_op(n.slot(i), AccessKind::Read);
            e.heap_op(self.key_at[&n.keys[i]], AccessKind::DependentRead);
        }
    }

    /// `pch_insert_kv` of one word's pair into its bucket's B+tree (keyvals_btree.c), with
    /// the references it makes; `bucket` is the bucket's address.
    fn insert(&mut self, m: &Metis, word: u32, bucket: u64, e: &mut Emit) {
        let (p, b) = m.place(word);
        e.op(bucket, AccessKind::Read);
        // get_leaf
        let leaf = match self.trees.get(&(p, b)).copied() {
            None => {
                let n = self.new_node(e);
                self.trees.insert((p, b), (n, 1));
                e.op(bucket, AccessKind::Write);
                n
            }
            Some((root, nlevel)) => {
                let mut node = root;
                for _ in 1..nlevel {
                    let at = self.nodes[node as usize].at;
                    e.heap_op(at, AccessKind::DependentRead);
                    let (ipt, probes) = bsearch_lar(&self.nodes[node as usize].keys, word);
                    self.emit_probes(node, &probes, e);
                    e.heap_op(self.nodes[node as usize].slot(ipt) + 8, AccessKind::Read);
                    node = self.nodes[node as usize].kids[ipt];
                }
                node
            }
        };
        let at = self.nodes[leaf as usize].at;
        e.heap_op(at, AccessKind::DependentRead);
        let (pos, found, probes) = bsearch_eq(&self.nodes[leaf as usize].keys, word);
        self.emit_probes(leaf, &probes, e);
        if !found {
            // insert_key: the slots from pos up move one place, nkeys and the tree's count
            // go up, and the key is copied into a fresh chunk (`keycopy`)
            let n = &self.nodes[leaf as usize];
            let moved = (n.keys.len() - pos) as u64;
            if moved > 0 {
                e.lines(n.slot(pos), moved * KEYVALS_BYTES, AccessKind::Read);
                e.lines(n.slot(pos + 1), moved * KEYVALS_BYTES, AccessKind::Write);
            }
            e.heap_op(at, AccessKind::Write);
            e.op(bucket, AccessKind::ReadModifyWrite);
            let key = self.heap.malloc(WORD_BYTES);
            e.heap_op(key, AccessKind::Write);
            self.key_at.insert(word, key);
            self.nodes[leaf as usize].keys.insert(pos, word);
            self.cell_pos.insert(word, self.cells[p].len() as u32);
            self.cells[p].push((word, 0));
        }
        let slot = self.nodes[leaf as usize].slot(pos);
        let i = self.cell_pos[&word] as usize;
        self.cells[p][i].1 += 1;
        // values_insert
        if m.app == App::Wc {
            // wc's value modifier: the count is kept in `vals`, updated in place
            e.heap_op(slot, AccessKind::ReadModifyWrite);
        } else {
            self.append_value(word, e);
            e.heap_op(slot, AccessKind::ReadModifyWrite);
        }
        if self.nodes[leaf as usize].keys.len() == 2 * ORDER + 2 {
            self.split_leaf(p, b, bucket, leaf, e);
        }
    }

    /// wr's `values_insert`: the position appended to the key's array, which starts at 8
    /// pointers and doubles by `realloc` (a new chunk, the old one copied and freed).
    fn append_value(&mut self, word: u32, e: &mut Emit) {
        let v = match self.values.get(&word).copied() {
            None => Values {
                at: self.heap.malloc(VALUES_FIRST as u64 * 8),
                len: 0,
                alloc: VALUES_FIRST,
            },
            Some(v) if v.len == v.alloc => {
                let at = self.heap.malloc(2 * v.alloc as u64 * 8);
                e.lines(v.at, v.len as u64 * 8, AccessKind::Read);
                e.lines(at, v.len as u64 * 8, AccessKind::Write);
                self.heap.free(v.at, v.alloc as u64 * 8);
                Values {
                    at,
                    len: v.len,
                    alloc: 2 * v.alloc,
                }
            }
            Some(v) => v,
        };
        e.heap_op(v.at + v.len as u64 * 8, AccessKind::Write);
        self.values.insert(
            word,
            Values {
                len: v.len + 1,
                ..v
            },
        );
    }

    /// `split_leaf`: the upper four keys move to a new right sibling, whose first key goes
    /// up to the parent.
    fn split_leaf(&mut self, p: usize, b: u64, bucket: u64, leaf: u32, e: &mut Emit) {
        let right = self.new_node(e);
        let (l, r) = (leaf as usize, right as usize);
        let upper = self.nodes[l].keys.split_off(ORDER + 1);
        e.lines(
            self.nodes[l].slot(ORDER + 1),
            4 * KEYVALS_BYTES,
            AccessKind::Read,
        );
        e.lines(self.nodes[r].slot(0), 4 * KEYVALS_BYTES, AccessKind::Write);
        e.heap_op(self.nodes[l].at, AccessKind::Write);
        let up = upper[0];
        self.nodes[r].keys = upper;
        self.insert_index(p, b, bucket, up, leaf, right, e);
        self.nodes[r].next = self.nodes[l].next.replace(right);
        e.heap_op(self.nodes[l].at + NEXT_OFFSET, AccessKind::Write);
        e.heap_op(self.nodes[r].at + NEXT_OFFSET, AccessKind::Write);
    }

    /// `btree_insert_index`: `key` separates `left` from its new sibling `right` in their
    /// parent, a new root if `left` had none; a parent that fills splits in turn.
    #[allow(clippy::too_many_arguments)]
    fn insert_index(
        &mut self,
        p: usize,
        b: u64,
        bucket: u64,
        key: u32,
        left: u32,
        right: u32,
        e: &mut Emit,
    ) {
        let Some(parent) = self.nodes[left as usize].parent else {
            let root = self.new_node(e);
            let nlevel = self.trees[&(p, b)].1;
            self.trees.insert((p, b), (root, nlevel + 1));
            e.op(bucket, AccessKind::Write);
            let rt = &mut self.nodes[root as usize];
            rt.keys = vec![key];
            rt.kids = vec![left, right];
            e.lines(
                self.nodes[root as usize].slot(0),
                2 * KEYVALS_BYTES,
                AccessKind::Write,
            );
            for n in [left, right] {
                self.nodes[n as usize].parent = Some(root);
                e.heap_op(self.nodes[n as usize].at + PARENT_OFFSET, AccessKind::Write);
            }
            return;
        };
        let pi = parent as usize;
        e.heap_op(
            self.nodes[left as usize].at + PARENT_OFFSET,
            AccessKind::Read,
        );
        e.heap_op(self.nodes[pi].at, AccessKind::DependentRead);
        let (ikey, probes) = bsearch_lar(&self.nodes[pi].keys, key);
        self.emit_probes(parent, &probes, e);
        let shifted = (self.nodes[pi].keys.len() + 1 - ikey) as u64;
        e.lines(
            self.nodes[pi].slot(ikey),
            (shifted + 1) * KEYVALS_BYTES,
            AccessKind::Write,
        );
        e.heap_op(self.nodes[pi].at, AccessKind::Write);
        self.nodes[pi].keys.insert(ikey, key);
        self.nodes[pi].kids.insert(ikey + 1, right);
        self.nodes[right as usize].parent = Some(parent);
        e.heap_op(
            self.nodes[right as usize].at + PARENT_OFFSET,
            AccessKind::Write,
        );
        if self.nodes[pi].keys.len() == 2 * ORDER + 1 {
            // btree_split_internal: keys 4.. and children 4.. move to a new sibling, key 3
            // goes up, and the moved children get their new parent
            let sib = self.new_node(e);
            let (si, pi) = (sib as usize, parent as usize);
            let keys = self.nodes[pi].keys.split_off(ORDER + 1);
            let kids = self.nodes[pi].kids.split_off(ORDER + 1);
            let up = self.nodes[pi]
                .keys
                .pop()
                .expect("an internal node of 7 keys");
            e.lines(
                self.nodes[pi].slot(ORDER + 1),
                (ORDER as u64 + 1) * KEYVALS_BYTES,
                AccessKind::Read,
            );
            e.lines(
                self.nodes[si].slot(0),
                (ORDER as u64 + 1) * KEYVALS_BYTES,
                AccessKind::Write,
            );
            self.nodes[si].keys = keys;
            self.nodes[si].kids = kids;
            self.insert_index(p, b, bucket, up, parent, sib, e);
            for k in self.nodes[si].kids.clone() {
                self.nodes[k as usize].parent = Some(sib);
                e.heap_op(self.nodes[k as usize].at + PARENT_OFFSET, AccessKind::Write);
            }
        }
    }

    /// The internal nodes on the way down to a bucket's first leaf (`pch_iter_begin`
    /// follows `arr[0].vals`), and that leaf (None: an empty bucket).
    fn first_leaf(&self, p: usize, b: u64) -> (Vec<u32>, Option<u32>) {
        let Some(&(root, nlevel)) = self.trees.get(&(p, b)) else {
            return (Vec::new(), None);
        };
        let (mut node, mut down) = (root, Vec::new());
        for _ in 1..nlevel {
            down.push(node);
            node = self.nodes[node as usize].kids[0];
        }
        (down, Some(node))
    }

    /// A bucket's leaves, left to right.
    #[cfg(test)]
    fn leaves(&self, p: usize, b: u64) -> Vec<u32> {
        let mut leaves: Vec<u32> = self.first_leaf(p, b).1.into_iter().collect();
        while let Some(n) = leaves.last().and_then(|&l| self.nodes[l as usize].next) {
            leaves.push(n);
        }
        leaves
    }
}

/// What the map phase left: every map thread's tables.
#[derive(Debug)]
pub struct MapResult {
    /// Per map thread: its splits in order.
    pub splits: Vec<Vec<u32>>,
    /// Per map thread t: per partition r, (word, occurrences) in insertion order.
    pub cells: Vec<Vec<Vec<(u32, u32)>>>,
    /// Per map thread: its tables as the map left them (their cells moved to `cells`).
    pub tables: Vec<MapState>,
    /// Distinct words per partition (the reducer's output length).
    pub out_len: Vec<u64>,
}

impl Metis {
    /// Replay every map thread (shared, computed once).
    pub fn result(&self) -> Arc<MapResult> {
        self.result
            .get_or_init(|| {
                let splits = self.schedule();
                let mut tables = Vec::with_capacity(self.threads);
                for mine in &splits {
                    let mut st = MapState::new(self);
                    let mut e = Emit { out: None, heap: 0 };
                    for &s in mine {
                        let (lo, hi) = self.split_words(s as u64);
                        for w in lo..hi {
                            st.insert(self, self.word(w), 0, &mut e);
                        }
                    }
                    // what only the map needs goes; the cells move to the result
                    st.cell_pos = HashMap::new();
                    st.heap.free_lists = HashMap::new();
                    tables.push(st);
                }
                let cells: Vec<_> = tables
                    .iter_mut()
                    .map(|s| std::mem::take(&mut s.cells))
                    .collect();
                let out_len = (0..self.threads)
                    .map(|p| {
                        let mut seen = std::collections::HashSet::new();
                        for c in &cells {
                            seen.extend(c[p].iter().map(|(w, _)| *w));
                        }
                        seen.len() as u64
                    })
                    .collect();
                Arc::new(MapResult {
                    splits,
                    cells,
                    tables,
                    out_len,
                })
            })
            .clone()
    }

    /// A row of the bucket matrix: `cols` = T × buckets `btree_t`s.
    fn row_bytes(&self) -> u64 {
        self.threads as u64 * self.buckets * BUCKET_BYTES
    }
}

impl Workload for Metis {
    fn name(&self) -> String {
        format!(
            "{}:input={},vocab={},split={},buckets={},seed={}",
            self.app.name(),
            crate::spec::format_size(self.input),
            self.vocab,
            crate::spec::format_size(self.split),
            self.buckets,
            self.seed
        )
    }

    fn threads(&self) -> usize {
        self.threads
    }

    /// Metis pins its threads itself: worker i calls `sched_setaffinity` for CPU i and the
    /// master stays on CPU 0 (lib/pthreadpool.c, `mthread_entry` and `mthread_init`, through
    /// `lcpu_to_pcpu[i] = i` of lib/cpumap.c), whatever the launcher asked. A machine with
    /// fewer CPUs than threads is refused, as Metis' own `assert` refuses it.
    fn placements(&self) -> Placements {
        Placements {
            task_policies: Vec::new(),
            thread_cpus: (0..self.threads).map(|t| (t, t.to_string(), 0)).collect(),
        }
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let task = TaskId(0);
        let o = MapOptions::default;
        let nt = self.threads as u64;
        let res = self.result();
        // every map thread mallocs from an arena of its own: glibc gives each new thread one
        // (up to 8 per core), a heap of its own aligned to 64 MiB, so no page, huge or not,
        // holds two threads' tables; the model aligns them to 2 MiB
        let heap_bytes = res
            .tables
            .iter()
            .map(MapState::heap_bytes)
            .max()
            .unwrap_or(0);
        let arena_stride = heap_bytes.max(1).div_ceil(2 << 20) * (2 << 20);
        // mbm_mbks_init mallocs the rows one after another: packed chunks from the master's
        // heap, or a page-aligned mapping each above the mmap threshold
        let row_bytes = self.row_bytes();
        let row_stride = if row_bytes >= MMAP_THRESHOLD_BYTES {
            (row_bytes + CHUNK_HEADER_BYTES).div_ceil(4096) * 4096
        } else {
            malloc_chunk_bytes(row_bytes)
        };
        let map_out_bytes = nt * row_bytes / BUCKET_BYTES * MAP_OUT_ENTRY_BYTES;
        let maps = Maps {
            // wc.c and wr.c mmap the file (MAP_PRIVATE) and the mappers read it there;
            // wrmem generates it in a malloc'd buffer
            input: if self.app == App::WrMem {
                mem.mmap(task, "metis.input", self.input, o())
            } else {
                mem.mmap_file(task, "metis.input", self.input)
            },
            // the last row's bytes reach 8 past its chunk, into the top chunk's header
            buckets: mem.mmap(
                task,
                "metis.buckets",
                nt * row_stride + CHUNK_HEADER_BYTES,
                o(),
            ),
            row_stride,
            arena: mem.mmap(task, "metis.arena", nt * arena_stride, o()),
            arena_stride,
            out: [
                mem.mmap(task, "metis.out", self.vocab * PAIR_BYTES, o()),
                mem.mmap(task, "metis.merge", self.vocab * PAIR_BYTES, o()),
            ],
        };
        let map_out = mem.mmap(
            task,
            "metis.map_out",
            map_out_bytes + CHUNK_HEADER_BYTES,
            o(),
        );
        (0..self.threads)
            .map(|t| {
                let mut s = Script::new(PHASES);
                s.phase(PHASE_SETUP);
                if t == 0 {
                    if self.app == App::WrMem {
                        // wrmem's generator: the master writes the whole input
                        s.streams(
                            &[Span::covering(maps.input, 0, self.input, AccessKind::Write)],
                            self.input * 4,
                            self.input * 4,
                        );
                    }
                    // mr_setup → kvst_init → mbm_mbks_init: the master mallocs every map
                    // thread's row of buckets and initialises each bucket (`pch_init`), then
                    // `map_out` and each of its arrays, before any worker starts, so all of
                    // it is first touched on its node
                    for r in 0..nt {
                        let row = maps.buckets + r * row_stride + CHUNK_HEADER_BYTES;
                        s.streams(
                            &[Span::covering(row, 0, row_bytes, AccessKind::Write)],
                            0,
                            0,
                        );
                    }
                    s.streams(
                        &[Span::covering(
                            map_out + CHUNK_HEADER_BYTES,
                            0,
                            map_out_bytes,
                            AccessKind::Write,
                        )],
                        0,
                        0,
                    );
                }
                s.barrier();
                s.phase(PHASE_MAP);
                s.gen(MapGen {
                    m: self.clone(),
                    maps,
                    t,
                    splits: res.splits[t].clone(),
                    next: 0,
                    word: None,
                    state: MapState::new(self),
                });
                s.barrier();
                s.phase(PHASE_REDUCE);
                s.gen(ReduceGen {
                    m: self.clone(),
                    maps,
                    r: t,
                    b: 0,
                    t: 0,
                    leaf: None,
                    res: None,
                    seen: HashMap::new(),
                });
                s.barrier();
                s.phase(PHASE_MERGE);
                s.gen(MergeGen {
                    m: self.clone(),
                    maps,
                    t,
                    round: 0,
                    started: false,
                });
                ThreadSpec {
                    task,
                    program: Box::new(s),
                }
            })
            .collect()
    }
}

struct MapGen {
    m: Metis,
    maps: Maps,
    t: usize,
    splits: Vec<u32>,
    next: usize,
    /// In the current split: the next word, the end of the text streamed so far, the end.
    word: Option<(u64, u64, u64)>,
    state: MapState,
}

impl Gen for MapGen {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        loop {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let (mut w, mut streamed, hi) = match self.word {
                Some(x) => x,
                None => {
                    let Some(&s) = self.splits.get(self.next) else {
                        return Status::Done;
                    };
                    self.next += 1;
                    let (lo, hi) = self.m.split_words(s as u64);
                    (lo, lo, hi)
                }
            };
            if w == streamed {
                // the split's next stretch of text, streamed
                streamed = (w + WORDS_PER_UNIT).min(hi);
                let sp = Span::covering(
                    self.maps.input,
                    w * WORD_BYTES,
                    streamed * WORD_BYTES,
                    AccessKind::Read,
                );
                if sp.lines > 0 {
                    out.push(Op::Run {
                        base: sp.addr,
                        lines: sp.lines as u32,
                        stride_bytes: 64,
                        kind: sp.kind,
                    });
                }
            }
            let heap = self.maps.arena + self.t as u64 * self.maps.arena_stride;
            let mut e = Emit {
                out: Some(&mut *out),
                heap,
            };
            let start = w;
            // word by word, so that a fill stays near CHUNK_OPS however deep the trees are
            while w < streamed && e.len() < CHUNK_OPS {
                let word = self.m.word(w);
                let (p, b) = self.m.place(word);
                let bucket = self.maps.bucket(&self.m, self.t, p, b);
                self.state.insert(&self.m, word, bucket, &mut e);
                w += 1;
            }
            out.push(compute(
                (w - start) * CYCLES_PER_WORD,
                (w - start) * CYCLES_PER_WORD * 2,
            ));
            self.word = if w == hi {
                None
            } else {
                Some((w, streamed, hi))
            };
        }
    }
}

/// Reducer r runs the reduce tasks of its partition, one bucket column at a time
/// (`mbm_do_reduce_task`): every map thread's tree of that bucket walked leaf by leaf, each
/// pair's key compared to group equal keys (and wr's value array read), one output pair per
/// distinct word.
struct ReduceGen {
    m: Metis,
    maps: Maps,
    r: usize,
    /// The bucket column, the map thread whose tree of it is being walked, and that tree's
    /// next leaf (None: the tree not begun).
    b: u64,
    t: usize,
    leaf: Option<u32>,
    res: Option<Arc<MapResult>>,
    /// word → output slot of this reducer.
    seen: HashMap<u32, u64>,
}

impl ReduceGen {
    /// On to the next map thread's tree, or the next column.
    fn next_tree(&mut self) {
        self.leaf = None;
        self.t += 1;
        if self.t == self.m.threads {
            self.t = 0;
            self.b += 1;
        }
    }
}

impl Gen for ReduceGen {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let res = self.res.get_or_insert_with(|| self.m.result()).clone();
        let out_base: u64 =
            self.maps.out[0] + res.out_len[..self.r].iter().sum::<u64>() * PAIR_BYTES;
        loop {
            if self.b >= self.m.buckets {
                return Status::Done;
            }
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let tables = &res.tables[self.t];
            let mut e = Emit {
                out: Some(&mut *out),
                heap: self.maps.arena + self.t as u64 * self.maps.arena_stride,
            };
            let leaf = match self.leaf {
                Some(l) => l,
                None => {
                    // pch_iter_begin: the bucket, then arr[0].vals down to the first leaf
                    e.op(
                        self.maps.bucket(&self.m, self.t, self.r, self.b),
                        AccessKind::Read,
                    );
                    let (down, first) = tables.first_leaf(self.r, self.b);
                    for n in down {
                        e.heap_op(
                            tables.nodes[n as usize].slot(0) + 8,
                            AccessKind::DependentRead,
                        );
                    }
                    match first {
                        Some(l) => l,
                        None => {
                            self.next_tree();
                            continue;
                        }
                    }
                }
            };
            let node = &tables.nodes[leaf as usize];
            e.heap_op(node.at, AccessKind::DependentRead);
            for (i, &word) in node.keys.iter().enumerate() {
                e.heap_op(node.slot(i), AccessKind::Read);
                e.heap_op(tables.key_at[&word], AccessKind::DependentRead);
                if let Some(v) = tables.values.get(&word) {
                    e.lines(v.at, v.len as u64 * 8, AccessKind::Read);
                }
                let n = self.seen.len() as u64;
                let slot = *self.seen.entry(word).or_insert(n);
                let kind = if slot == n {
                    AccessKind::Write
                } else {
                    AccessKind::ReadModifyWrite
                };
                e.op(out_base + slot * PAIR_BYTES, kind);
            }
            e.heap_op(node.at + NEXT_OFFSET, AccessKind::Read);
            let pairs = node.keys.len() as u64;
            e.push(compute(pairs * 20, pairs * 40));
            match node.next {
                Some(n) => self.leaf = Some(n),
                None => self.next_tree(),
            }
        }
    }
}

struct MergeGen {
    m: Metis,
    maps: Maps,
    t: usize,
    round: u32,
    started: bool,
}

impl Gen for MergeGen {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let res = self.m.result();
        let nt = self.m.threads;
        let rounds = usize::BITS - (nt - 1).leading_zeros();
        let offset = |r: usize| res.out_len[..r.min(nt)].iter().sum::<u64>() * PAIR_BYTES;
        while self.round < rounds {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            if !self.started {
                let width = 1usize << self.round;
                let (src, dst) = (
                    self.maps.out[(self.round % 2) as usize],
                    self.maps.out[(self.round % 2 + 1) as usize % 2],
                );
                if self.t.is_multiple_of(2 * width) && self.t + width < nt {
                    // merge runs [t, t+w) and [t+w, t+2w) into the other buffer
                    let (lo, hi) = (offset(self.t), offset(self.t + 2 * width));
                    for (base, kind) in [(src, AccessKind::Read), (dst, AccessKind::Write)] {
                        let sp = Span::covering(base, lo, hi, kind);
                        out.push(Op::Run {
                            base: sp.addr,
                            lines: sp.lines as u32,
                            stride_bytes: 64,
                            kind,
                        });
                    }
                    let pairs = (hi - lo) / PAIR_BYTES;
                    out.push(compute(pairs * 8, pairs * 12));
                }
                self.started = true;
            }
            out.push(Op::Barrier);
            self.round += 1;
            self.started = false;
        }
        Status::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metis(app: App, input: u64, vocab: u64, buckets: u64, threads: usize) -> Metis {
        Metis {
            app,
            input,
            vocab,
            split: 16 << 10,
            buckets,
            seed: 7,
            threads,
            result: Arc::new(OnceLock::new()),
        }
    }

    #[test]
    fn chunks_are_sized_as_glibc_sizes_them() {
        assert_eq!(malloc_chunk_bytes(WORD_BYTES), 32, "a key copy: MINSIZE");
        assert_eq!(malloc_chunk_bytes(24), 32);
        assert_eq!(malloc_chunk_bytes(25), 48);
        assert_eq!(malloc_chunk_bytes(BTNODE_BYTES), 288);
        let mut a = Arena::new();
        let k = a.malloc(8);
        let n = a.malloc(BTNODE_BYTES);
        assert_eq!(k, ARENA_HEADER_BYTES + 16);
        assert_eq!(n, k + 32, "chunks follow each other from the top");
        let v = a.malloc(64);
        a.free(v, 64);
        assert_eq!(
            a.malloc(8),
            n + 288 + 80,
            "a freed chunk serves only its own size"
        );
        assert_eq!(a.malloc(64), v, "the freed chunk is taken again");
    }

    #[test]
    fn binary_searches_find_what_metis_finds() {
        let mut r = SplitMix64::new(3);
        for n in 0..=8usize {
            for _ in 0..200 {
                let mut keys: Vec<u32> = Vec::new();
                while keys.len() < n {
                    let w = (r.next_u64() % 50) as u32;
                    if !keys.contains(&w) {
                        keys.push(w);
                    }
                }
                keys.sort_by_key(|&w| key_rank(w));
                let key = (r.next_u64() % 50) as u32;
                let below = keys.partition_point(|&k| key_rank(k) < key_rank(key));
                let (pos, found, probes) = bsearch_eq(&keys, key);
                assert_eq!(found, keys.contains(&key), "{keys:?} {key}");
                assert_eq!(pos, below, "{keys:?} {key}");
                assert!(probes.n <= 4 && probes.iter().all(|i| i < n));
                let (lar, probes) = bsearch_lar(&keys, key);
                let not_above = keys.partition_point(|&k| key_rank(k) <= key_rank(key));
                assert_eq!(lar, not_above, "{keys:?} {key}");
                assert!(probes.n <= 4);
            }
        }
    }

    /// The positions compared, in order, as lib/bsearch.c compares them (worked by hand on
    /// eight keys ranked 0..7).
    #[test]
    fn binary_searches_compare_in_metis_order() {
        let mut keys: Vec<u32> = (0..200u32).collect();
        keys.sort_by_key(|&w| key_rank(w));
        let keys = &keys[..8];
        let probes = |p: Probes| p.iter().collect::<Vec<_>>();
        // above the last: one compare
        let above = (200..10_000u32)
            .find(|&w| key_rank(w) > key_rank(keys[7]))
            .unwrap();
        let (pos, found, p) = bsearch_eq(keys, above);
        assert_eq!((pos, found, probes(p)), (8, false, vec![7]));
        // key 2 itself: E[7], then mid 3 (below: right = 2), mid 1 (above: left = 2), E[2]
        let (pos, found, p) = bsearch_eq(keys, keys[2]);
        assert_eq!((pos, found, probes(p)), (2, true, vec![7, 3, 1, 2]));
        // key 5 in bsearch_lar: E[7], mid 3 (left = 4), mid 5 (left = 6), E[6]: position 6
        let (pos, p) = bsearch_lar(keys, keys[5]);
        assert_eq!((pos, probes(p)), (6, vec![7, 3, 5, 6]));
        // two keys: E[1], then E[0]
        let (pos, found, p) = bsearch_eq(&keys[..2], keys[0]);
        assert_eq!((pos, found, probes(p)), (0, true, vec![1, 0]));
    }

    /// Every bucket's tree after the map is a B+tree of order 3 holding exactly the words
    /// that landed in the bucket, in order, and every node's parent link points back.
    #[test]
    fn the_map_builds_metis_btrees() {
        let m = metis(App::Wc, 1 << 20, 20_000, 4, 2);
        let res = m.result();
        let mut levels = 0;
        for (t, st) in res.tables.iter().enumerate() {
            let mut seen = 0;
            for (&(p, b), &(root, nlevel)) in &st.trees {
                levels = levels.max(nlevel);
                assert!(st.nodes[root as usize].parent.is_none());
                // depth of every path is nlevel
                let mut stack = vec![(root, 1u16)];
                while let Some((n, d)) = stack.pop() {
                    let node = &st.nodes[n as usize];
                    // a split leaves a leaf 4 keys, an internal node 3 (keyvals_btree.c)
                    let least = if n == root {
                        1
                    } else if node.kids.is_empty() {
                        ORDER + 1
                    } else {
                        ORDER
                    };
                    assert!(node.keys.len() >= least, "{} keys", node.keys.len());
                    if node.kids.is_empty() {
                        assert_eq!(d, nlevel);
                        assert!(node.keys.len() <= 2 * ORDER + 1);
                    } else {
                        assert_eq!(node.kids.len(), node.keys.len() + 1);
                        assert!(node.keys.len() <= 2 * ORDER);
                        for &k in &node.kids {
                            assert_eq!(st.nodes[k as usize].parent, Some(n));
                            stack.push((k, d + 1));
                        }
                    }
                }
                let leaves = st.leaves(p, b);
                let keys: Vec<u32> = leaves
                    .iter()
                    .flat_map(|&l| st.nodes[l as usize].keys.clone())
                    .collect();
                assert!(keys.windows(2).all(|w| key_rank(w[0]) < key_rank(w[1])));
                assert!(keys.iter().all(|&w| m.place(w) == (p, b)));
                seen += keys.len();
            }
            let distinct: usize = res.cells[t].iter().map(Vec::len).sum();
            assert_eq!(
                seen, distinct,
                "thread {t}: every key once, in its bucket's tree"
            );
            assert_eq!(st.key_at.len(), distinct);
            // a key copy and a share of a node each: about 90 bytes a key
            assert!(st.heap_bytes() > distinct as u64 * (32 + 288 / 8));
        }
        assert!(
            levels >= 3,
            "buckets of hundreds of keys grow internal levels: {levels}"
        );
    }

    #[test]
    fn wr_value_arrays_double_by_realloc_and_hold_every_position() {
        let m = metis(App::Wr, 256 << 10, 3_000, 8, 2);
        let res = m.result();
        for (t, st) in res.tables.iter().enumerate() {
            let positions: u64 = st.values.values().map(|v| v.len as u64).sum();
            let counted: u64 = res.cells[t].iter().flatten().map(|&(_, c)| c as u64).sum();
            assert_eq!(positions, counted);
            for v in st.values.values() {
                assert!(v.alloc >= v.len && v.alloc.is_power_of_two() && v.alloc >= 8);
                assert!(v.len > v.alloc / 2 || v.alloc == VALUES_FIRST);
            }
        }
    }
}
