//! GUPS (HPCC RandomAccess), reference/workloads.md §2.5.
//!
//! A table of 2^log2_words 64-bit words, initialised `table[i] = i` by a parallel static loop
//! (contiguous blocks per thread, so under first touch each update's home node is uniform), then
//! `updates` read-modify-writes at addresses drawn from HPCC's generator, reproduced exactly:
//! `ran = (ran << 1) ^ (ran < 0 ? POLY : 0); table[ran & (words − 1)] ^= ran`. The global update
//! sequence is split statically among threads, thread t starting its stream with
//! [`hpcc_starts`] at its first update, so the union of all threads' updates is exactly the
//! serial benchmark's sequence. Races are allowed, as in HPCC: there are no locks.

use crate::emit::{static_range, Gen, Script, Span, Status, CHUNK_OPS};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload};
use numalab_core::TaskId;

pub const NAME: &str = "gups";
pub const KEYS: &[&str] = &["log2_words", "updates"];
pub const DESCRIPTION: &str = "GUPS / HPCC RandomAccess: random read-modify-writes over a table of 64-bit words, HPCC generator (§2.5). \
keys: log2_words=table size as a power of two (28 = 2 GiB), updates=total updates (4 x words)";

pub const PHASES: &[&str] = &["init", "update"];

/// HPCC's primitive polynomial for the GF(2) shift register.
pub const POLY: u64 = 0x0000_0000_0000_0007;
/// Period of the HPCC generator.
pub const PERIOD: i64 = 1_317_624_576_693_539_401;
pub const DEFAULT_LOG2_WORDS: u64 = 28;
/// Compute per update, in cycles (a shift, a xor, a mask and the loop: "a few", E).
pub const CYCLES_PER_UPDATE: u64 = 4;
/// HPCC issues its updates in batches of 128; compute is emitted once per batch.
const BATCH: u64 = 128;

/// One step of HPCC's generator.
#[inline]
pub fn hpcc_next(ran: u64) -> u64 {
    (ran << 1) ^ if (ran as i64) < 0 { POLY } else { 0 }
}

/// `HPCC_starts(n)`: the generator's state after n steps from 1, by jumping ahead (squaring in
/// `GF(2)[x]` modulo POLY) instead of stepping, as in HPCC's RandomAccess.
pub fn hpcc_starts(n: i64) -> u64 {
    let mut n = n;
    while n < 0 {
        n += PERIOD;
    }
    while n > PERIOD {
        n -= PERIOD;
    }
    if n == 0 {
        return 0x1;
    }
    let mut m2 = [0u64; 64];
    let mut temp: u64 = 0x1;
    for m in m2.iter_mut() {
        *m = temp;
        temp = hpcc_next(temp);
        temp = hpcc_next(temp);
    }
    let mut i: i32 = 62;
    while i >= 0 {
        if (n >> i) & 1 != 0 {
            break;
        }
        i -= 1;
    }
    let mut ran: u64 = 0x2;
    while i > 0 {
        let mut t = 0u64;
        for (j, m) in m2.iter().enumerate() {
            if (ran >> j) & 1 != 0 {
                t ^= m;
            }
        }
        ran = t;
        i -= 1;
        if (n >> i) & 1 != 0 {
            ran = hpcc_next(ran);
        }
    }
    ran
}

/// The `gups` workload.
#[derive(Clone, Debug)]
pub struct Gups {
    pub log2_words: u32,
    pub updates: u64,
    pub threads: usize,
}

impl Gups {
    pub fn from_params(p: &Params, threads: usize) -> Result<Gups, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "GUPS needs at least one thread".into(),
            });
        }
        let log2_words = p.uint_in("log2_words", DEFAULT_LOG2_WORDS, 6, 40)? as u32;
        let updates = p.uint("updates", 4u64 << log2_words)?;
        Ok(Gups {
            log2_words,
            updates,
            threads,
        })
    }

    pub fn words(&self) -> u64 {
        1 << self.log2_words
    }
}

impl Workload for Gups {
    fn name(&self) -> String {
        format!(
            "{NAME}:log2_words={},updates={}",
            self.log2_words, self.updates
        )
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let words = self.words();
        let table = mem.mmap(TaskId(0), "gups.table", words * 8, MapOptions::default());
        (0..self.threads)
            .map(|t| {
                let mut s = Script::new(PHASES);
                s.phase(0);
                let (lo, hi) = static_range(words, self.threads, t);
                s.streams(
                    &[Span::elems(table, lo, hi, 8, AccessKind::Write)],
                    hi - lo,
                    hi - lo,
                );
                s.barrier();
                s.phase(1);
                let (ulo, uhi) = static_range(self.updates, self.threads, t);
                if uhi > ulo {
                    s.gen(Updates {
                        table,
                        mask: words - 1,
                        ran: hpcc_starts(ulo as i64),
                        left: uhi - ulo,
                        in_batch: 0,
                    });
                }
                ThreadSpec {
                    task: TaskId(0),
                    program: Box::new(s),
                }
            })
            .collect()
    }
}

struct Updates {
    table: u64,
    mask: u64,
    ran: u64,
    left: u64,
    in_batch: u64,
}

impl Gen for Updates {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        while self.left > 0 {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            self.ran = hpcc_next(self.ran);
            out.push(Op::Access {
                addr: self.table + (self.ran & self.mask) * 8,
                kind: AccessKind::ReadModifyWrite,
            });
            self.left -= 1;
            self.in_batch += 1;
            if self.in_batch == BATCH || self.left == 0 {
                let c = (self.in_batch * CYCLES_PER_UPDATE) as u32;
                out.push(Op::Compute {
                    cycles: c,
                    instructions: c,
                });
                self.in_batch = 0;
            }
        }
        Status::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_matches_stepping() {
        let mut ran = 1u64;
        let mut checked = 0;
        for n in 0..=20_000i64 {
            if n < 70 || n % 997 == 0 || n == 20_000 {
                assert_eq!(hpcc_starts(n), ran, "HPCC_starts({n})");
                checked += 1;
            }
            ran = hpcc_next(ran);
        }
        assert!(checked > 80);
        // jump ahead composes: stepping from starts(a) b times gives starts(a + b)
        let mut r = hpcc_starts(1 << 40);
        for _ in 0..1000 {
            r = hpcc_next(r);
        }
        assert_eq!(r, hpcc_starts((1 << 40) + 1000));
        assert_eq!(hpcc_starts(PERIOD), hpcc_starts(0), "periodic");
    }
}
