//! `migrate-buffer`: GF09's threaded migration microbenchmark (reference/workloads.md §7.2,
//! microbenchmark 3): threads bound to one node pull a buffer that another node holds.
//!
//! Thread 0 runs on node `from` and writes the whole buffer (phase `fill`), so first touch puts
//! every page there, and ends after phase `mark` (GF09's main thread then sleeps in
//! `pthread_join`: the copiers' shootdowns do not reach it). Every thread reaches phase `mark`, the hook at which a next-touch
//! policy marks the task's memory (`policy=next-touch`, whose default hook is phase 1: this
//! one), and after a barrier the copiers, threads 1 to T−1 on node `to`, migrate their
//! shares of the buffer's pages (phase `migrate`), as GF09 splits the buffer among them:
//!
//! * `how=touch` (GF09's lazy migration): one write a page; with the buffer marked, each
//!   touch is a fault that migrates its page to the toucher's node. Without a policy the
//!   touches are plain remote writes.
//! * `how=move_pages` (GF09's threaded `move_pages`): one `move_pages(2)` call a copier, its
//!   share to node `to` (`Op::MovePages`); no policy needed.
//!
//! GF09's figure is the buffer's size over that phase's time (validate's `migrate_gbps`).
//!
//! The workload places its own threads (`Workload::placements`), as the benchmark binds them:
//! thread 0 on the first CPU of `from`, copier i on the i-th CPU of `to` (threads beyond the
//! node's CPUs take turns on them).

use crate::emit::{Script, Span};
use crate::spec::{format_size, Params, WorkloadError};
use numalab_core::workload::{
    AccessKind, AddressSpace, MapOptions, Op, Placements, ThreadSpec, Workload, LINE_BYTES,
};
use numalab_core::TaskId;

pub const NAME: &str = "migrate-buffer";
pub const KEYS: &[&str] = &["size", "from", "to", "how"];
pub const DESCRIPTION: &str = "GF09's threaded migration microbenchmark (§7.2, microbenchmark 3): thread 0 fills a buffer on node `from`, then threads 1..T-1, bound to node `to`, migrate their shares of it: how=touch, one write a page (with policy=next-touch, which marks the buffer at phase `mark`, each touch migrates its page: GF09's lazy migration), or how=move_pages, one move_pages call a thread. \
keys: size=buffer bytes (16M), from=node holding the buffer (0), to=node of the copiers (1), how=touch|move_pages (touch); threads = 1 filler + the copiers (at least 2; by default one copier per CPU of node `to`)";

pub const PHASES: &[&str] = &["fill", "mark", "migrate"];
pub const PHASE_FILL: u16 = 0;
/// The next-touch policy's default hook (`next-touch:phase=1`).
pub const PHASE_MARK: u16 = 1;
pub const PHASE_MIGRATE: u16 = 2;

/// The page the copiers touch once each: GF09's buffers are base pages (Linux 2.6.27, no THP).
pub const PAGE_BYTES: u64 = 4096;
/// Lines per op of the fill.
const FILL_CHUNK_LINES: u64 = 4096;

/// The copiers' node: `to`, node 1 by default.
fn copier_node(p: &Params) -> Result<u16, WorkloadError> {
    Ok(p.node("to")?.unwrap_or(1))
}

/// The copiers' node a `migrate-buffer` spec names, None for a spec its parser refuses (which
/// building the workload then reports): the default thread count is one copier per CPU of it.
pub fn copier_node_of(spec: &str) -> Option<u16> {
    let (_, pairs) = crate::spec::split(spec).ok()?;
    copier_node(&Params::new(NAME, KEYS, pairs).ok()?).ok()
}

#[derive(Clone, Debug, PartialEq)]
pub struct MigrateBuffer {
    pub size: u64,
    pub from: u16,
    pub to: u16,
    /// One `move_pages` call a copier instead of one touch a page.
    pub move_pages: bool,
    pub threads: usize,
}

impl MigrateBuffer {
    pub fn from_params(p: &Params, threads: usize) -> Result<MigrateBuffer, WorkloadError> {
        if threads < 2 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "migrate-buffer runs one filler thread and at least one copier (--threads 2 or more)".into(),
            });
        }
        let size = p.size("size", 16 << 20)?;
        if size < PAGE_BYTES || size % PAGE_BYTES != 0 || size > 1 << 40 {
            return Err(WorkloadError::BadValue {
                workload: p.workload(),
                key: "size",
                value: p.get("size").unwrap_or("").to_string(),
                expected: "a whole number of 4 KiB pages, from 4K to 1T".into(),
            });
        }
        let from = p.node("from")?.unwrap_or(0);
        let to = copier_node(p)?;
        if from == to {
            return Err(WorkloadError::Invalid {
                workload: NAME,
                why: format!("from={from} and to={to} are the same node: nothing would migrate"),
            });
        }
        Ok(MigrateBuffer {
            size,
            from,
            to,
            move_pages: p.choice("how", &["touch", "move_pages"], 0)? == 1,
            threads,
        })
    }

    fn pages(&self) -> u64 {
        self.size / PAGE_BYTES
    }

    fn copiers(&self) -> u64 {
        self.threads as u64 - 1
    }

    /// Copier `c`'s pages [lo, hi): equal shares, the first `pages mod copiers` one page more.
    pub fn share(&self, c: u64) -> (u64, u64) {
        let (n, k) = (self.pages(), self.copiers());
        let (q, r) = (n / k, n % k);
        let lo = c * q + c.min(r);
        (lo, lo + q + u64::from(c < r))
    }
}

impl Workload for MigrateBuffer {
    fn name(&self) -> String {
        format!(
            "{NAME}:size={},from={},to={},how={}",
            format_size(self.size),
            self.from,
            self.to,
            if self.move_pages {
                "move_pages"
            } else {
                "touch"
            }
        )
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let base = mem.mmap(
            TaskId(0),
            "migrate-buffer.buffer",
            self.size,
            MapOptions::default(),
        );
        (0..self.threads)
            .map(|t| {
                let mut s = Script::new(PHASES);
                s.phase(PHASE_FILL);
                if t == 0 {
                    s.streams_chunked(
                        &[Span {
                            addr: base,
                            lines: self.size / LINE_BYTES,
                            kind: AccessKind::Write,
                        }],
                        0,
                        0,
                        FILL_CHUNK_LINES,
                    );
                }
                s.barrier();
                s.phase(PHASE_MARK);
                // the filler ends here, as GF09's main thread sleeps in pthread_join while the
                // copiers run: no CPU of its own to flush, whatever the epoch's turn order
                if t > 0 {
                    s.barrier();
                    s.phase(PHASE_MIGRATE);
                    // a share fits one op: size is at most 1T, 2^28 pages
                    let (lo, hi) = self.share(t as u64 - 1);
                    let (start, pages) = (base + lo * PAGE_BYTES, (hi - lo) as u32);
                    if pages > 0 {
                        s.op(if self.move_pages {
                            Op::MovePages {
                                base: start,
                                pages,
                                node: self.to,
                            }
                        } else {
                            // one write at the start of each page
                            Op::Run {
                                base: start,
                                lines: pages,
                                stride_bytes: PAGE_BYTES as u16,
                                kind: AccessKind::Write,
                            }
                        });
                    }
                }
                ThreadSpec {
                    task: TaskId(0),
                    program: Box::new(s),
                }
            })
            .collect()
    }

    fn placements(&self) -> Placements {
        let mut thread_cpus = vec![(0, format!("node:{}", self.from), 0)];
        thread_cpus.extend((1..self.threads).map(|t| (t, format!("node:{}", self.to), t - 1)));
        Placements {
            thread_cpus,
            ..Placements::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(spec: &str) -> Result<MigrateBuffer, WorkloadError> {
        params_threads(spec, 2)
    }

    fn params_threads(spec: &str, threads: usize) -> Result<MigrateBuffer, WorkloadError> {
        let (_, pairs) = crate::spec::split(spec)?;
        MigrateBuffer::from_params(&Params::new(NAME, KEYS, pairs)?, threads)
    }

    fn bench(size: &str, threads: usize) -> MigrateBuffer {
        params_threads(&format!("{NAME}:size={size}"), threads).unwrap()
    }

    #[test]
    fn shares_cover_every_page_once() {
        for threads in [2, 3, 4, 5, 9] {
            let b = bench("1M", threads); // 256 pages
            let mut next = 0;
            for c in 0..b.copiers() {
                let (lo, hi) = b.share(c);
                assert_eq!(lo, next, "copier {c} of {}", b.copiers());
                assert!(hi - lo >= 256 / b.copiers(), "copier {c}: {lo}..{hi}");
                next = hi;
            }
            assert_eq!(next, 256);
        }
    }

    #[test]
    fn threads_are_placed_on_the_two_nodes() {
        let b = bench("16M", 4);
        let p = b.placements();
        assert_eq!(
            p.thread_cpus,
            vec![
                (0, "node:0".to_string(), 0),
                (1, "node:1".to_string(), 0),
                (2, "node:1".to_string(), 1),
                (3, "node:1".to_string(), 2),
            ]
        );
    }

    #[test]
    fn bad_inputs_are_refused() {
        assert!(params_threads(NAME, 1).is_err());
        assert!(params(NAME).is_ok());
        for spec in [
            "size=100",
            "size=0",
            "from=1,to=1",
            "to=x",
            "pages=3",
            "how=copy",
        ] {
            let e = params(&format!("{NAME}:{spec}"));
            assert!(e.is_err(), "{spec} accepted");
        }
    }
}
