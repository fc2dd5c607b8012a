//! NAS IS (NPB 3.4 OpenMP, bucketed version), reference/workloads.md §3.3.
//!
//! The keys are NPB's: `create_seq` sums four `randlc` numbers per key (seed 314159265,
//! multiplier 5^13) and scales by MAX_KEY/4; each thread generates its block of ⌈n/T⌉ keys
//! from a `find_my_seed` jump-ahead, so the sequence is the serial one (tested against
//! stepping, and against NPB's partial-verification ranks for class S).
//!
//! Emission follows `rank()` exactly:
//! 1. master: `key_array[it] = it`, `key_array[it+10] = MAX_KEY − it`, read the 5 test keys;
//! 2. each thread zeroes its `bucket_size` row (its first touch);
//! 3. count (static `for`): stream `key_array`, increment `bucket_size[t][key >> shift]`;
//! 4. bucket pointers from every thread's counts (reads of all rows);
//! 5. scatter (static `for`): stream `key_array` again, write `key_buff2[bucket_ptrs[b]++]`:
//!    each thread owns a sub-range of every bucket (the all-to-all remote write burst);
//! 6. rank (`schedule(dynamic)` over buckets, see [`kernel::dynamic_schedule`]): zero the
//!    bucket's `key_buff1` window, stream its `key_buff2` range, increment `key_buff1[key]` per
//!    key, prefix-sum the window;
//! 7. master: partial verification reads.
//!
//! One untimed `rank(1)` first (it first-touches `key_buff1`, bucket window by bucket window on
//! whichever thread took the bucket), `niter` timed iterations, then `full_verify` writes every
//! key to `key_array[--key_buff1[key]]` (dynamic over buckets) and a static check loop reads
//! `key_array`. Positions and ranks are computed from the real keys, so the emitted writes are
//! a correct sort (tested).
//!
//! [`kernel::dynamic_schedule`]: crate::kernel::dynamic_schedule

use crate::emit::{static_range, Gen, Script, Span, Status, CHUNK_OPS};
use crate::kernel::{compute, dynamic_schedule};
use crate::npb_cg::randlc;
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{
    map_static, AccessKind, AddressSpace, MapOptions, Op, StaticArray, ThreadSpec, Workload,
    LINE_BYTES,
};
use numalab_core::TaskId;
use std::sync::{Arc, OnceLock};

pub const NAME: &str = "npb-is";
pub const KEYS: &[&str] = &["class", "niter", "scale"];
pub const DESCRIPTION: &str = "NAS IS (NPB 3.4 OpenMP): NPB's key generator, bucket count, all-to-all scatter, dynamic bucket ranking, full verify (§3.3). \
keys: class=S|W|A|B|C|D|E (A), niter=timed iterations (10), scale=factor in (0,1] on the number of keys (1)";

pub const PHASES: &[&str] = &[
    "create_seq",
    "alloc_key_buff",
    "untimed-rank",
    "timed",
    "full_verify",
];
pub const PHASE_CREATE: u16 = 0;
pub const PHASE_ALLOC: u16 = 1;
pub const PHASE_UNTIMED: u16 = 2;
pub const PHASE_TIMED: u16 = 3;
pub const PHASE_VERIFY: u16 = 4;

/// NPB's MAX_ITERATIONS (timed iterations; also the offset of the second modified key).
pub const MAX_ITERATIONS: u64 = 10;
pub const SEED: f64 = 314_159_265.0;
pub const MULTIPLIER: f64 = 1_220_703_125.0;
/// One `randlc`: a chain of about a dozen dependent floating-point operations (E).
pub const RANDLC_CYCLES: u64 = 40;
/// ≈ 1-2 cycles per key per phase (§3.3, E).
pub const CYCLES_PER_KEY: u64 = 2;
/// Keys per emission chunk of the key loops.
const KEYS_PER_UNIT: u64 = 2048;

/// One IS class (§3.3 table).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IsClass {
    pub class: char,
    pub total_keys_log2: u32,
    pub max_key_log2: u32,
    pub buckets_log2: u32,
    /// NPB's `test_index_array` and `test_rank_array` (partial verification).
    pub test_index: [u64; 5],
    pub test_rank: [u64; 5],
}

impl IsClass {
    /// Bytes of a key: int up to class C, long for D and E.
    pub fn elem_bytes(&self) -> u64 {
        if self.total_keys_log2 > 27 {
            8
        } else {
            4
        }
    }

    /// The rank NPB expects for test key `i` after `iteration` (`partial_verify`).
    pub fn expected_rank(&self, i: usize, iteration: u64) -> i64 {
        let r = self.test_rank[i] as i64;
        let it = iteration as i64;
        let plus = match self.class {
            'S' => i <= 2,
            'W' => i < 2,
            'A' => i <= 2,
            'B' => i == 1 || i == 2 || i == 4,
            'C' => i <= 2,
            _ => i < 2,
        };
        let off = match self.class {
            'W' if plus => it - 2,
            'A' => it - 1,
            _ => it,
        };
        if plus {
            r + off
        } else {
            r - off
        }
    }
}

pub const CLASSES: [IsClass; 7] = [
    IsClass {
        class: 'S',
        total_keys_log2: 16,
        max_key_log2: 11,
        buckets_log2: 9,
        test_index: [48427, 17148, 23627, 62548, 4431],
        test_rank: [0, 18, 346, 64917, 65463],
    },
    IsClass {
        class: 'W',
        total_keys_log2: 20,
        max_key_log2: 16,
        buckets_log2: 10,
        test_index: [357773, 934767, 875723, 898999, 404505],
        test_rank: [1249, 11698, 1039987, 1043896, 1048018],
    },
    IsClass {
        class: 'A',
        total_keys_log2: 23,
        max_key_log2: 19,
        buckets_log2: 10,
        test_index: [2112377, 662041, 5336171, 3642833, 4250760],
        test_rank: [104, 17523, 123928, 8288932, 8388264],
    },
    IsClass {
        class: 'B',
        total_keys_log2: 25,
        max_key_log2: 21,
        buckets_log2: 10,
        test_index: [41869, 812306, 5102857, 18232239, 26860214],
        test_rank: [33422937, 10244, 59149, 33135281, 99],
    },
    IsClass {
        class: 'C',
        total_keys_log2: 27,
        max_key_log2: 23,
        buckets_log2: 10,
        test_index: [44172927, 72999161, 74326391, 129606274, 21736814],
        test_rank: [61147, 882988, 266290, 133997595, 133525895],
    },
    IsClass {
        class: 'D',
        total_keys_log2: 31,
        max_key_log2: 27,
        buckets_log2: 10,
        test_index: [1317351170, 995930646, 1157283250, 1503301535, 1453734525],
        test_rank: [1, 36538729, 1978098519, 2145192618, 2147425337],
    },
    IsClass {
        class: 'E',
        total_keys_log2: 35,
        max_key_log2: 31,
        buckets_log2: 10,
        // NPB 3.4's class E values are not reproduced here; the reads are placed like D's
        test_index: [1317351170, 995930646, 1157283250, 1503301535, 1453734525],
        test_rank: [0; 5],
    },
];

pub fn class(c: char) -> Option<&'static IsClass> {
    CLASSES.iter().find(|k| k.class == c.to_ascii_uppercase())
}

/// NPB's `find_my_seed`: the generator's state after skipping the random numbers of the
/// blocks before thread `kn` of `np` (`nn` numbers in all, 4 per key).
pub fn find_my_seed(kn: u64, np: u64, nn: u64, s: f64, a: f64) -> f64 {
    if kn == 0 {
        return s;
    }
    let mq = (nn / 4).div_ceil(np);
    let nq = mq * 4 * kn;
    let (mut t1, mut t2) = (s, a);
    let mut kk = nq;
    while kk > 1 {
        let ik = kk / 2;
        if 2 * ik == kk {
            let sq = t2;
            randlc(&mut t2, sq);
            kk = ik;
        } else {
            randlc(&mut t1, t2);
            kk -= 1;
        }
    }
    randlc(&mut t1, t2);
    t1
}

/// `create_seq` as the OpenMP code runs it on `threads` threads: thread t generates keys
/// [t·⌈n/T⌉, ...) from its jumped-ahead seed.
pub fn create_seq(num_keys: u64, max_key: u64, threads: u64) -> Vec<u32> {
    let mut keys = vec![0u32; num_keys as usize];
    let mq = num_keys.div_ceil(threads);
    let k = (max_key / 4) as f64;
    for t in 0..threads {
        let k1 = (mq * t).min(num_keys);
        let k2 = (k1 + mq).min(num_keys);
        let mut s = find_my_seed(t, threads, 4 * num_keys, SEED, MULTIPLIER);
        for key in &mut keys[k1 as usize..k2 as usize] {
            let mut x = randlc(&mut s, MULTIPLIER);
            x += randlc(&mut s, MULTIPLIER);
            x += randlc(&mut s, MULTIPLIER);
            x += randlc(&mut s, MULTIPLIER);
            *key = (k * x) as u32;
        }
    }
    keys
}

/// Keys and their bucket layout, shared by all threads.
#[derive(Debug)]
pub struct IsData {
    pub keys: Vec<u32>,
    pub num_keys: u64,
    pub max_key: u64,
    pub buckets: u64,
    pub shift: u32,
    /// Keys grouped by bucket in index order (the base keys, before any iteration's changes).
    sorted: Vec<u32>,
    seg_start: Vec<u64>,
    /// Base keys among indices 0..=2·MAX_ITERATIONS falling in each bucket.
    low_count: Vec<u32>,
    /// Per iteration 1..=niter: counts[t·buckets + b] of thread t's static key range.
    counts: Vec<Vec<u64>>,
    /// Per iteration 1..=niter: start of every bucket in key_buff2 (buckets + 1 entries).
    bounds: Vec<Vec<u64>>,
    threads: usize,
}

/// Indices below this may be changed by the master (`key_array[it]`, `key_array[it+10]`).
const LOW: u64 = 2 * MAX_ITERATIONS + 1;

impl IsData {
    pub fn new(c: &IsClass, num_keys: u64, threads: usize, niter: u64) -> IsData {
        let max_key = 1u64 << c.max_key_log2;
        let buckets = 1u64 << c.buckets_log2;
        let shift = c.max_key_log2 - c.buckets_log2;
        let keys = create_seq(num_keys, max_key, threads as u64);
        let mut seg_start = vec![0u64; buckets as usize + 1];
        for &k in &keys {
            seg_start[(k >> shift) as usize + 1] += 1;
        }
        for b in 0..buckets as usize {
            seg_start[b + 1] += seg_start[b];
        }
        let mut fill = seg_start.clone();
        let mut sorted = vec![0u32; keys.len()];
        for &k in &keys {
            let b = (k >> shift) as usize;
            sorted[fill[b] as usize] = k;
            fill[b] += 1;
        }
        let mut low_count = vec![0u32; buckets as usize];
        for &k in keys.iter().take(LOW as usize) {
            low_count[(k >> shift) as usize] += 1;
        }
        let mut d = IsData {
            keys,
            num_keys,
            max_key,
            buckets,
            shift,
            sorted,
            seg_start,
            low_count,
            counts: Vec::new(),
            bounds: Vec::new(),
            threads,
        };
        let mut base = vec![0u64; threads * buckets as usize];
        for t in 0..threads {
            let (lo, hi) = static_range(num_keys, threads, t);
            for i in lo..hi {
                base[t * buckets as usize + (d.keys[i as usize] >> shift) as usize] += 1;
            }
        }
        for it in 1..=niter.max(1) {
            let mut c = base.clone();
            for i in 0..LOW.min(num_keys) {
                let (old, new) = (d.keys[i as usize], d.key_at(i, it));
                if old != new {
                    let t = (0..threads)
                        .find(|&t| {
                            let (lo, hi) = static_range(num_keys, threads, t);
                            i >= lo && i < hi
                        })
                        .expect("every key has a thread");
                    c[t * buckets as usize + (old >> shift) as usize] -= 1;
                    c[t * buckets as usize + (new >> shift) as usize] += 1;
                }
            }
            let nb = buckets as usize;
            let mut bounds = vec![0u64; nb + 1];
            for b in 0..nb {
                bounds[b + 1] = bounds[b] + (0..threads).map(|t| c[t * nb + b]).sum::<u64>();
            }
            d.counts.push(c);
            d.bounds.push(bounds);
        }
        d
    }

    /// Key `i` as `rank(iteration)` sees it (after the master's changes of iterations
    /// 1..=iteration).
    pub fn key_at(&self, i: u64, iteration: u64) -> u32 {
        if i >= 1 && i <= iteration.min(MAX_ITERATIONS) {
            i as u32
        } else if i > MAX_ITERATIONS && i <= MAX_ITERATIONS + iteration.min(MAX_ITERATIONS) {
            (self.max_key - (i - MAX_ITERATIONS)) as u32
        } else {
            self.keys[i as usize]
        }
    }

    fn counts(&self, iteration: u64) -> &[u64] {
        &self.counts[(iteration.max(1) - 1) as usize]
    }

    /// Total keys in buckets before `b`, and in `b` (iteration's keys).
    pub fn bucket_bounds(&self, iteration: u64, b: u64) -> (u64, u64) {
        let bounds = &self.bounds[(iteration.max(1) - 1) as usize];
        (bounds[b as usize], bounds[b as usize + 1])
    }

    /// Keys of bucket `b` in `key_buff2` order (index order) for `iteration`.
    pub fn segment(&self, iteration: u64, b: u64) -> Vec<u32> {
        let mut v: Vec<u32> = (0..LOW.min(self.num_keys))
            .map(|i| self.key_at(i, iteration))
            .filter(|&k| (k >> self.shift) as u64 == b)
            .collect();
        let (s, e) = (self.seg_start[b as usize], self.seg_start[b as usize + 1]);
        v.extend_from_slice(
            &self.sorted[(s + self.low_count[b as usize] as u64) as usize..e as usize],
        );
        v
    }

    /// Thread t's scatter cursors (`bucket_ptrs` after step 4) for `iteration`.
    fn cursors(&self, iteration: u64, t: usize) -> Vec<u64> {
        let c = self.counts(iteration);
        let nb = self.buckets as usize;
        let mut ptr = vec![0u64; nb];
        let mut acc = 0;
        for (b, p) in ptr.iter_mut().enumerate() {
            *p = acc + (0..t).map(|k| c[k * nb + b]).sum::<u64>();
            acc += (0..self.threads).map(|k| c[k * nb + b]).sum::<u64>();
        }
        ptr
    }
}

#[derive(Clone, Debug)]
pub struct NpbIs {
    pub class: IsClass,
    pub niter: u64,
    pub scale: f64,
    pub num_keys: u64,
    pub threads: usize,
    data: Arc<OnceLock<Arc<IsData>>>,
}

impl NpbIs {
    pub fn from_params(p: &Params, threads: usize) -> Result<NpbIs, WorkloadError> {
        let names: Vec<String> = CLASSES.iter().map(|c| c.class.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let class = CLASSES[p.choice("class", &names, 2)?];
        let niter = p.uint_in("niter", MAX_ITERATIONS, 0, MAX_ITERATIONS)?;
        let scale = p.float_in("scale", 1.0, 0.0, 1.0)?;
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "IS needs at least one thread".into(),
            });
        }
        let num_keys = ((((1u64 << class.total_keys_log2) as f64) * scale).round() as u64).max(64);
        if num_keys > u32::MAX as u64 {
            return Err(WorkloadError::Invalid {
                workload: NAME,
                why: format!(
                    "class {} has {num_keys} keys; this model holds at most 2^32 (use scale)",
                    class.class
                ),
            });
        }
        Ok(NpbIs {
            class,
            niter,
            scale,
            num_keys,
            threads,
            data: Arc::new(OnceLock::new()),
        })
    }

    pub fn data(&self) -> Arc<IsData> {
        self.data
            .get_or_init(|| {
                Arc::new(IsData::new(
                    &self.class,
                    self.num_keys,
                    self.threads,
                    self.niter,
                ))
            })
            .clone()
    }

    fn program(&self, d: &Arc<IsData>, m: &Maps, t: usize, sched: &[Vec<Vec<u32>>]) -> Script {
        let nt = self.threads;
        let e = self.class.elem_bytes();
        let n = self.num_keys;
        let nb = d.buckets;
        let mut s = Script::new(PHASES);
        // create_seq: ⌈n/T⌉ blocks, 4 randlc per key
        s.phase(PHASE_CREATE);
        let mq = n.div_ceil(nt as u64);
        let (k1, k2) = ((mq * t as u64).min(n), (mq * (t as u64 + 1)).min(n));
        s.streams(
            &[Span::elems(m.key_array, k1, k2, e, AccessKind::Write)],
            (k2 - k1) * 4 * RANDLC_CYCLES,
            (k2 - k1) * 4 * 30,
        );
        s.barrier();
        // alloc_key_buff: key_buff2 zeroed by a static parallel for
        s.phase(PHASE_ALLOC);
        let (lo, hi) = static_range(n, nt, t);
        s.streams(
            &[Span::elems(m.key_buff2, lo, hi, e, AccessKind::Write)],
            hi - lo,
            hi - lo,
        );
        s.barrier();
        let row = |base: u64, k: usize, kind| {
            Span::elems(base, k as u64 * nb, (k as u64 + 1) * nb, e, kind)
        };
        let rank = |s: &mut Script, it: u64, inst: usize| {
            if t == 0 {
                // master: change two keys, read the five test keys
                for i in [it, it + MAX_ITERATIONS] {
                    s.access(m.key_array + (i % n) * e, AccessKind::Write);
                }
                for &ti in &self.class.test_index {
                    s.access(m.key_array + (ti % n) * e, AccessKind::Read);
                }
            }
            s.barrier(); // fork
            s.streams(&[row(m.bucket_size, t, AccessKind::Write)], nb, nb);
            s.gen(KeyLoop::count(d.clone(), m, t, it, lo, hi, e));
            s.barrier();
            // bucket pointers from every thread's counts
            let all: Vec<Span> = (0..nt)
                .map(|k| row(m.bucket_size, k, AccessKind::Read))
                .collect();
            for c in all.chunks(5) {
                let mut spans = c.to_vec();
                spans.push(row(m.bucket_ptrs, t, AccessKind::Write));
                s.streams(&spans, nb * c.len() as u64, nb * c.len() as u64);
            }
            s.gen(KeyLoop::scatter(d.clone(), m, t, it, lo, hi, e));
            s.barrier();
            // pointers now at the end of each bucket: add the later threads' counts
            if t + 1 < nt {
                let later: Vec<Span> = (t + 1..nt)
                    .map(|k| row(m.bucket_size, k, AccessKind::Read))
                    .collect();
                for c in later.chunks(5) {
                    let mut spans = c.to_vec();
                    spans.push(row(m.bucket_ptrs, t, AccessKind::ReadModifyWrite));
                    s.streams(&spans, nb * c.len() as u64, nb * c.len() as u64);
                }
            }
            s.gen(BucketLoop::rank(
                d.clone(),
                m,
                it,
                sched[inst][t].clone(),
                e,
            ));
            s.barrier(); // end of the dynamic for and of the region
            if t == 0 {
                for &ti in &self.class.test_index {
                    let k = d.key_at(ti % n, it) as u64;
                    s.access(m.key_buff1 + k.saturating_sub(1) * e, AccessKind::Read);
                }
            }
        };
        s.phase(PHASE_UNTIMED);
        rank(&mut s, 1, 0);
        if self.niter > 0 {
            s.phase(PHASE_TIMED);
        }
        for it in 1..=self.niter {
            rank(&mut s, it, it as usize);
        }
        s.phase(PHASE_VERIFY);
        let last = self.niter.max(1);
        s.gen(BucketLoop::verify(
            d.clone(),
            m,
            last,
            sched[self.niter as usize + 1][t].clone(),
            e,
        ));
        s.barrier();
        s.streams(
            &[Span::elems(m.key_array, lo, hi, e, AccessKind::Read)],
            hi - lo,
            hi - lo,
        );
        s.barrier();
        s
    }
}

/// Addresses of the IS arrays.
#[derive(Copy, Clone, Debug)]
struct Maps {
    key_array: u64,
    key_buff1: u64,
    key_buff2: u64,
    bucket_size: u64,
    bucket_ptrs: u64,
}

impl Workload for NpbIs {
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
        let d = self.data();
        let e = self.class.elem_bytes();
        let o = MapOptions::default;
        let task = TaskId(0);
        let nb = d.buckets;
        // NPB IS's global arrays key_array, key_buff1, key_buff2, adjacent in one .bss (each
        // on a cache line: the workload emits whole lines); the per-thread bucket arrays are
        // malloc'd.
        let [key_array, key_buff1, key_buff2] = map_static(
            mem,
            task,
            "is.bss",
            &[
                StaticArray::new("is.key_array", self.num_keys * e, LINE_BYTES),
                StaticArray::new("is.key_buff1", d.max_key * e, LINE_BYTES),
                StaticArray::new("is.key_buff2", self.num_keys * e, LINE_BYTES),
            ],
            o(),
        );
        let m = Maps {
            key_array,
            key_buff1,
            key_buff2,
            bucket_size: mem.mmap(task, "is.bucket_size", self.threads as u64 * nb * e, o()),
            bucket_ptrs: mem.mmap(task, "is.bucket_ptrs", self.threads as u64 * nb * e, o()),
        };
        // one dynamic schedule per loop instance: untimed rank, each timed rank, full_verify
        let window = d.max_key / nb;
        let sched: Vec<Vec<Vec<u32>>> = (0..self.niter as usize + 2)
            .map(|inst| {
                let it = if inst == 0 {
                    1
                } else {
                    (inst as u64).min(self.niter.max(1))
                };
                let costs: Vec<u64> = (0..nb)
                    .map(|b| {
                        let (lo, hi) = d.bucket_bounds(it, b);
                        hi - lo + window / 4
                    })
                    .collect();
                dynamic_schedule(&costs, self.threads, 0x15_0000 + inst as u64)
            })
            .collect();
        (0..self.threads)
            .map(|t| ThreadSpec {
                task,
                program: Box::new(self.program(&d, &m, t, &sched)),
            })
            .collect()
    }
}

/// The count and scatter loops over a thread's static block of keys.
struct KeyLoop {
    d: Arc<IsData>,
    key_array: u64,
    /// count: bucket_size row of the thread; scatter: key_buff2.
    target: u64,
    scatter: bool,
    cursors: Vec<u64>,
    it: u64,
    t: usize,
    pos: u64,
    hi: u64,
    e: u64,
}

impl KeyLoop {
    fn count(d: Arc<IsData>, m: &Maps, t: usize, it: u64, lo: u64, hi: u64, e: u64) -> KeyLoop {
        let target = m.bucket_size + t as u64 * d.buckets * e;
        KeyLoop {
            d,
            key_array: m.key_array,
            target,
            scatter: false,
            cursors: Vec::new(),
            it,
            t,
            pos: lo,
            hi,
            e,
        }
    }

    fn scatter(d: Arc<IsData>, m: &Maps, t: usize, it: u64, lo: u64, hi: u64, e: u64) -> KeyLoop {
        KeyLoop {
            d,
            key_array: m.key_array,
            target: m.key_buff2,
            scatter: true,
            cursors: Vec::new(),
            it,
            t,
            pos: lo,
            hi,
            e,
        }
    }
}

impl Gen for KeyLoop {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        if self.scatter && self.cursors.is_empty() {
            self.cursors = self.d.cursors(self.it, self.t);
        }
        while self.pos < self.hi {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let lo = self.pos;
            let hi = (lo + KEYS_PER_UNIT).min(self.hi);
            let sp = Span::elems(self.key_array, lo, hi, self.e, AccessKind::Read);
            out.push(Op::Run {
                base: sp.addr,
                lines: sp.lines as u32,
                stride_bytes: 64,
                kind: AccessKind::Read,
            });
            for i in lo..hi {
                let b = (self.d.key_at(i, self.it) >> self.d.shift) as usize;
                let addr = if self.scatter {
                    let p = self.cursors[b];
                    self.cursors[b] += 1;
                    out.push(Op::Access {
                        addr: self.target + p * self.e,
                        kind: AccessKind::Write,
                    });
                    continue;
                } else {
                    self.target + b as u64 * self.e
                };
                out.push(Op::Access {
                    addr,
                    kind: AccessKind::ReadModifyWrite,
                });
            }
            out.push(compute((hi - lo) * CYCLES_PER_KEY, (hi - lo) * 4));
            self.pos = hi;
        }
        Status::Done
    }
}

/// The dynamically scheduled loops over buckets: ranking, or `full_verify`'s placement.
struct BucketLoop {
    d: Arc<IsData>,
    m: Maps,
    it: u64,
    buckets: Vec<u32>,
    verify: bool,
    e: u64,
    next: usize,
    /// Current bucket's keys and progress through them.
    keys: Vec<u32>,
    kpos: usize,
    begin: u64,
    /// full_verify: per key value of the window, the next position to fill (from the top).
    cum: Vec<u64>,
}

impl BucketLoop {
    fn rank(d: Arc<IsData>, m: &Maps, it: u64, buckets: Vec<u32>, e: u64) -> BucketLoop {
        Self::new(d, m, it, buckets, e, false)
    }

    fn verify(d: Arc<IsData>, m: &Maps, it: u64, buckets: Vec<u32>, e: u64) -> BucketLoop {
        Self::new(d, m, it, buckets, e, true)
    }

    fn new(d: Arc<IsData>, m: &Maps, it: u64, buckets: Vec<u32>, e: u64, verify: bool) -> Self {
        BucketLoop {
            d,
            m: *m,
            it,
            buckets,
            verify,
            e,
            next: 0,
            keys: Vec::new(),
            kpos: 0,
            begin: 0,
            cum: Vec::new(),
        }
    }
}

impl Gen for BucketLoop {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let window = self.d.max_key / self.d.buckets;
        loop {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            if self.kpos >= self.keys.len() {
                // finish the current bucket, start the next
                if !self.keys.is_empty() || self.kpos > 0 {
                    if !self.verify {
                        // prefix sum over the window
                        let b = self.buckets[self.next - 1] as u64;
                        let sp = Span::elems(
                            self.m.key_buff1,
                            b * window,
                            (b + 1) * window,
                            self.e,
                            AccessKind::ReadModifyWrite,
                        );
                        out.push(Op::Run {
                            base: sp.addr,
                            lines: sp.lines as u32,
                            stride_bytes: 64,
                            kind: sp.kind,
                        });
                        out.push(compute(window, window * 2));
                    }
                    self.keys.clear();
                    self.kpos = 0;
                }
                if self.next == self.buckets.len() {
                    return Status::Done;
                }
                let b = self.buckets[self.next] as u64;
                self.next += 1;
                let (begin, end) = self.d.bucket_bounds(self.it, b);
                self.keys = self.d.segment(self.it, b);
                debug_assert_eq!(self.keys.len() as u64, end - begin);
                self.begin = begin;
                if self.verify {
                    // ranks of the window's values: keys ≤ v, counted from the segment
                    let k1 = b * window;
                    let mut cum = vec![0u64; window as usize];
                    for &k in &self.keys {
                        cum[(k as u64 - k1) as usize] += 1;
                    }
                    let mut acc = begin;
                    for c in cum.iter_mut() {
                        acc += *c;
                        *c = acc;
                    }
                    self.cum = cum;
                } else {
                    // zero the window, then stream the bucket's range of key_buff2
                    let sp = Span::elems(
                        self.m.key_buff1,
                        b * window,
                        (b + 1) * window,
                        self.e,
                        AccessKind::Write,
                    );
                    out.push(Op::Run {
                        base: sp.addr,
                        lines: sp.lines as u32,
                        stride_bytes: 64,
                        kind: sp.kind,
                    });
                }
                if self.keys.is_empty() {
                    self.kpos = 1; // mark the bucket started so it is finished next round
                }
                continue;
            }
            let lo = self.kpos;
            let hi = (lo + KEYS_PER_UNIT as usize).min(self.keys.len());
            let sp = Span::elems(
                self.m.key_buff2,
                self.begin + lo as u64,
                self.begin + hi as u64,
                self.e,
                AccessKind::Read,
            );
            out.push(Op::Run {
                base: sp.addr,
                lines: sp.lines as u32,
                stride_bytes: 64,
                kind: AccessKind::Read,
            });
            let k1 = self.buckets[self.next - 1] as u64 * window;
            for &k in &self.keys[lo..hi] {
                out.push(Op::Access {
                    addr: self.m.key_buff1 + k as u64 * self.e,
                    kind: AccessKind::ReadModifyWrite,
                });
                if self.verify {
                    // key_array[--key_buff_ptr_global[k]] = k
                    let c = &mut self.cum[(k as u64 - k1) as usize];
                    *c -= 1;
                    out.push(Op::Access {
                        addr: self.m.key_array + *c * self.e,
                        kind: AccessKind::Write,
                    });
                }
            }
            out.push(compute(
                (hi - lo) as u64 * CYCLES_PER_KEY,
                (hi - lo) as u64 * 4,
            ));
            self.kpos = hi;
        }
    }
}
