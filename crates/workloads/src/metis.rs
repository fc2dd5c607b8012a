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
//!   T rows of map buckets, each `malloc`'d and every bucket initialised by the master
//!   (`kvst_init` → `mbm_mbks_init` in Metis' bucket managers), so the whole matrix is first
//!   touched on the master's node. Left out: Metis' sampling run over 5 % of the splits
//!   (`mr_sample`), which sizes the reduce side and whose results the workers rehash.
//! * **map**: splits of `split` bytes taken from the task queue (`schedule(dynamic)`-like,
//!   [`crate::kernel::dynamic_schedule`]). A map thread streams its split and, per word, looks
//!   the word up in its own row of the T × T partition matrix: a bucket read, a dependent read
//!   of the bucket's first node and of the word's node if it differs (buckets hold small sorted
//!   trees, two levels here). wc combines (read-modify-write of the count); wr / wrmem append
//!   the position to the word's value list (a write, a new 64 B block every 8 positions). New
//!   words get a node from the thread's own arena (Metis' allocator: first touch by the mapper).
//! * **reduce**: thread r takes column r: every map thread's cell (t, r), bucket array streamed,
//!   each node read through its pointer (and for wr each value block), and one output pair per
//!   distinct word written to its slice of the output (first touch by the reducer).
//! * **merge**: log2 T rounds of pairwise merges of sorted runs, alternating two buffers.
//!
//! Barriers separate the phases. The word stream and the task schedule are deterministic, so
//! the map result is replayed (once, shared) to know what each reducer finds.

use crate::emit::{Gen, Script, Span, SplitMix64, Status, CHUNK_OPS};
use crate::kernel::{compute, dynamic_schedule};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload};
use numalab_core::TaskId;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

pub const KEYS: &[&str] = &["input", "vocab", "split", "buckets", "seed"];
pub const WC: &str = "metis-wc";
pub const WR: &str = "metis-wr";
pub const WRMEM: &str = "metis-wrmem";
pub const DESCRIPTION_WC: &str = "Metis word count: input mmapped from the page cache, map splits from a task queue into per-thread hash tables (combining counts), column-wise reduce, merge sort (§4.4). \
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

/// Average word with its separator (E).
pub const WORD_BYTES: u64 = 8;
/// Table node: key (inline), count or value-list pointers, tree links (E).
pub const NODE_BYTES: u64 = 64;
/// A value block of wr holds 8 positions.
pub const BLOCK_POSITIONS: u64 = 8;
pub const PAIR_BYTES: u64 = 16;
/// Tokenising and hashing a word (E).
pub const CYCLES_PER_WORD: u64 = 30;
/// Words per emission unit of the map.
const WORDS_PER_UNIT: u64 = 1024;

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

/// What the map phase left in the partition matrix.
#[derive(Debug)]
pub struct MapResult {
    /// Per map thread: its splits in order.
    pub splits: Vec<Vec<u32>>,
    /// Per map thread t: per partition r, its nodes (word, positions) in creation order.
    pub cells: Vec<Vec<Vec<(u32, u32)>>>,
    /// Per thread: node index of each (partition, slot) — nodes are numbered in creation order
    /// over all partitions; `node_index[t][r][i]` is the arena slot of `cells[t][r][i]`.
    pub node_index: Vec<Vec<Vec<u32>>>,
    /// Per thread, per node slot: its value blocks (wr), in order.
    pub node_blocks: Vec<Vec<Vec<u32>>>,
    /// Per thread: value blocks allocated (wr) and nodes created.
    pub blocks: Vec<u64>,
    pub nodes: Vec<u64>,
    /// Distinct words per partition (the reducer's output length).
    pub out_len: Vec<u64>,
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

    /// Replay every map thread (shared, computed once).
    pub fn result(&self) -> Arc<MapResult> {
        self.result
            .get_or_init(|| {
                let splits = self.schedule();
                let mut r = MapResult {
                    cells: Vec::new(),
                    node_index: Vec::new(),
                    node_blocks: Vec::new(),
                    blocks: Vec::new(),
                    nodes: Vec::new(),
                    out_len: vec![0; self.threads],
                    splits: splits.clone(),
                };
                for mine in &splits {
                    let mut st = MapState::new(self);
                    for &s in mine {
                        let (lo, hi) = self.split_words(s as u64);
                        for w in lo..hi {
                            st.insert(self, self.word(w), None);
                        }
                    }
                    r.blocks.push(st.blocks);
                    r.node_blocks.push(st.node_blocks);
                    r.nodes.push(st.nodes.len() as u64);
                    r.cells.push(st.cells);
                    r.node_index.push(st.cell_nodes);
                }
                for (p, len) in r.out_len.iter_mut().enumerate() {
                    let mut seen = std::collections::HashSet::new();
                    for t in 0..self.threads {
                        seen.extend(r.cells[t][p].iter().map(|(w, _)| *w));
                    }
                    *len = seen.len() as u64;
                }
                Arc::new(r)
            })
            .clone()
    }
}

/// Addresses of one run's data.
#[derive(Copy, Clone, Debug)]
struct Maps {
    input: u64,
    /// Per map thread: its row of bucket arrays (first touched by the master), then its
    /// arena.
    buckets: u64,
    bucket_row_bytes: u64,
    arena: u64,
    arena_bytes: u64,
    out: [u64; 2],
}

/// One map thread's tables while it runs.
struct MapState {
    /// word → node slot.
    nodes: HashMap<u32, u32>,
    /// Per node: positions so far (wr) and its current value block.
    positions: Vec<u32>,
    block_of: Vec<u64>,
    node_blocks: Vec<Vec<u32>>,
    /// Per (partition, bucket): the first node (the tree's root).
    root: HashMap<(usize, u64), u32>,
    cells: Vec<Vec<(u32, u32)>>,
    cell_nodes: Vec<Vec<u32>>,
    /// Slot of each node in its cell's list.
    cell_pos: Vec<u32>,
    blocks: u64,
}

impl MapState {
    fn new(m: &Metis) -> MapState {
        MapState {
            nodes: HashMap::new(),
            positions: Vec::new(),
            block_of: Vec::new(),
            node_blocks: Vec::new(),
            root: HashMap::new(),
            cells: vec![Vec::new(); m.threads],
            cell_nodes: vec![Vec::new(); m.threads],
            cell_pos: Vec::new(),
            blocks: 0,
        }
    }

    /// Insert one word; with `emit`, the references (bucket, tree, node or value list).
    fn insert(&mut self, m: &Metis, word: u32, emit: Option<(&Maps, usize, &mut Vec<Op>)>) {
        let (p, b) = m.place(word);
        let wr = m.app != App::Wc;
        let found = self.nodes.get(&word).copied();
        let node = match found {
            Some(n) => n,
            None => {
                let n = self.nodes.len() as u32;
                self.nodes.insert(word, n);
                self.positions.push(0);
                self.block_of.push(u64::MAX);
                self.node_blocks.push(Vec::new());
                self.cell_pos.push(self.cells[p].len() as u32);
                self.cells[p].push((word, 0));
                self.cell_nodes[p].push(n);
                n
            }
        };
        let root = *self.root.entry((p, b)).or_insert(node);
        let pos = self.positions[node as usize];
        let new_block = wr && pos.is_multiple_of(BLOCK_POSITIONS as u32);
        if new_block {
            self.block_of[node as usize] = self.blocks;
            self.node_blocks[node as usize].push(self.blocks as u32);
            self.blocks += 1;
        }
        self.positions[node as usize] += 1;
        let slot = self.cell_pos[node as usize] as usize;
        self.cells[p][slot].1 += 1;
        if let Some((maps, t, out)) = emit {
            let bucket =
                maps.buckets + t as u64 * maps.bucket_row_bytes + (p as u64 * m.buckets + b) * 8;
            let arena = maps.arena + t as u64 * maps.arena_bytes;
            let node_addr = arena + node as u64 * NODE_BYTES;
            out.push(Op::Access {
                addr: bucket,
                kind: AccessKind::Read,
            });
            if root != node {
                out.push(Op::Access {
                    addr: arena + root as u64 * NODE_BYTES,
                    kind: AccessKind::DependentRead,
                });
            }
            if found.is_none() {
                // a new node from the thread's arena, linked into the bucket's tree
                out.push(Op::Access {
                    addr: node_addr,
                    kind: AccessKind::Write,
                });
                out.push(Op::Access {
                    addr: if root == node {
                        bucket
                    } else {
                        arena + root as u64 * NODE_BYTES
                    },
                    kind: AccessKind::Write,
                });
            } else if !wr {
                // wc's combiner: count += 1 in place
                out.push(Op::Access {
                    addr: node_addr,
                    kind: AccessKind::ReadModifyWrite,
                });
            } else {
                out.push(Op::Access {
                    addr: node_addr,
                    kind: AccessKind::DependentRead,
                });
            }
            if wr {
                // append the position to the value list (a new block every 8)
                let nodes_bytes = m.vocab.min(m.words()) * NODE_BYTES;
                let blk = arena + nodes_bytes + self.block_of[node as usize] * 64;
                out.push(Op::Access {
                    addr: blk + (pos as u64 % BLOCK_POSITIONS) * 8,
                    kind: AccessKind::Write,
                });
                if new_block && pos > 0 {
                    out.push(Op::Access {
                        addr: node_addr,
                        kind: AccessKind::Write,
                    });
                }
            }
        }
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

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let task = TaskId(0);
        let o = MapOptions::default;
        let nt = self.threads as u64;
        let splits = self.schedule();
        // arena per thread: nodes (at most the vocabulary), then value blocks (wr)
        let max_words = splits
            .iter()
            .map(|s| {
                s.iter()
                    .map(|&x| {
                        let (lo, hi) = self.split_words(x as u64);
                        hi - lo
                    })
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        let nodes_bytes = self.vocab.min(self.words()) * NODE_BYTES;
        let blocks_bytes = if self.app == App::Wc {
            0
        } else {
            (max_words / BLOCK_POSITIONS + self.vocab.min(max_words) + 1) * 64
        };
        let arena_bytes = (nodes_bytes + blocks_bytes).div_ceil(4096) * 4096;
        let bucket_row_bytes = (nt * self.buckets * 8).div_ceil(4096) * 4096;
        let maps = Maps {
            // wc.c and wr.c mmap the file (MAP_PRIVATE) and the mappers read it there;
            // wrmem generates it in a malloc'd buffer
            input: if self.app == App::WrMem {
                mem.mmap(task, "metis.input", self.input, o())
            } else {
                mem.mmap_file(task, "metis.input", self.input)
            },
            buckets: mem.mmap(task, "metis.buckets", nt * bucket_row_bytes, o()),
            bucket_row_bytes,
            arena: mem.mmap(task, "metis.arena", nt * arena_bytes, o()),
            arena_bytes,
            out: [
                mem.mmap(task, "metis.out", self.vocab * PAIR_BYTES, o()),
                mem.mmap(task, "metis.merge", self.vocab * PAIR_BYTES, o()),
            ],
        };
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
                    // thread's row of buckets and initialises each bucket, before any worker
                    // starts, so the whole matrix is first touched on its node
                    let row_bytes = nt * self.buckets * 8;
                    let rows: Vec<Span> = (0..nt)
                        .map(|r| {
                            Span::covering(
                                maps.buckets + r * bucket_row_bytes,
                                0,
                                row_bytes,
                                AccessKind::Write,
                            )
                        })
                        .collect();
                    for row in &rows {
                        s.streams(std::slice::from_ref(row), 0, 0);
                    }
                }
                s.barrier();
                s.phase(PHASE_MAP);
                s.gen(MapGen {
                    m: self.clone(),
                    maps,
                    t,
                    splits: splits[t].clone(),
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
                    from: 0,
                    i: 0,
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
    /// (next word, end) of the current split.
    word: Option<(u64, u64)>,
    state: MapState,
}

impl Gen for MapGen {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        loop {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let (lo, hi) = match self.word {
                Some(w) => w,
                None => {
                    let Some(&s) = self.splits.get(self.next) else {
                        return Status::Done;
                    };
                    self.next += 1;
                    let w = self.m.split_words(s as u64);
                    self.word = Some(w);
                    w
                }
            };
            let end = (lo + WORDS_PER_UNIT).min(hi);
            // the split's text, streamed
            let sp = Span::covering(
                self.maps.input,
                lo * WORD_BYTES,
                end * WORD_BYTES,
                AccessKind::Read,
            );
            out.push(Op::Run {
                base: sp.addr,
                lines: sp.lines as u32,
                stride_bytes: 64,
                kind: sp.kind,
            });
            for w in lo..end {
                let word = self.m.word(w);
                self.state
                    .insert(&self.m, word, Some((&self.maps, self.t, &mut *out)));
            }
            out.push(compute(
                (end - lo) * CYCLES_PER_WORD,
                (end - lo) * CYCLES_PER_WORD * 2,
            ));
            self.word = if end == hi { None } else { Some((end, hi)) };
        }
    }
}

struct ReduceGen {
    m: Metis,
    maps: Maps,
    r: usize,
    /// Map thread whose cell (from, r) is being read, and the next node in it.
    from: usize,
    i: usize,
    res: Option<Arc<MapResult>>,
    /// word → output slot of this reducer.
    seen: HashMap<u32, u64>,
}

impl Gen for ReduceGen {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let res = self.res.get_or_insert_with(|| self.m.result()).clone();
        let out_base: u64 =
            self.maps.out[0] + res.out_len[..self.r].iter().sum::<u64>() * PAIR_BYTES;
        let nodes_bytes = self.m.vocab.min(self.m.words()) * NODE_BYTES;
        while self.from < self.m.threads {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let t = self.from;
            let arena = self.maps.arena + t as u64 * self.maps.arena_bytes;
            if self.i == 0 {
                // the cell's bucket array
                let b0 = self.maps.buckets
                    + t as u64 * self.maps.bucket_row_bytes
                    + self.r as u64 * self.m.buckets * 8;
                let sp = Span::covering(b0, 0, self.m.buckets * 8, AccessKind::Read);
                out.push(Op::Run {
                    base: sp.addr,
                    lines: sp.lines as u32,
                    stride_bytes: 64,
                    kind: sp.kind,
                });
            }
            let cell = &res.cells[t][self.r];
            let end = (self.i + 512).min(cell.len());
            for (&(word, _), &node) in cell[self.i..end]
                .iter()
                .zip(&res.node_index[t][self.r][self.i..end])
            {
                out.push(Op::Access {
                    addr: arena + node as u64 * NODE_BYTES,
                    kind: AccessKind::DependentRead,
                });
                if self.m.app != App::Wc {
                    // the value list's blocks are not contiguous: follow them
                    for &b in &res.node_blocks[t][node as usize] {
                        out.push(Op::Access {
                            addr: arena + nodes_bytes + b as u64 * 64,
                            kind: AccessKind::DependentRead,
                        });
                    }
                }
                let n = self.seen.len() as u64;
                let slot = *self.seen.entry(word).or_insert(n);
                out.push(Op::Access {
                    addr: out_base + slot * PAIR_BYTES,
                    kind: if slot == n {
                        AccessKind::Write
                    } else {
                        AccessKind::ReadModifyWrite
                    },
                });
            }
            out.push(compute(
                (end - self.i) as u64 * 20,
                (end - self.i) as u64 * 40,
            ));
            self.i = end;
            if self.i >= cell.len() {
                self.from += 1;
                self.i = 0;
            }
        }
        Status::Done
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
