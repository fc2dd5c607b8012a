//! A synthetic but realistic sample stream for `numalab bench analyze`: it measures reading
//! and analysis speed, so the samples only need the shape of a real recording, not a run.
//!
//! 4 nodes × 8 CPUs, 16 threads (4 per node) of one task, 400 MiB of address space:
//! - per-thread arrays (16 × 16 MiB, THP-backed, first-touched locally, every 8th huge page
//!   on the next node), 60 % of the accesses;
//! - a shared table (64 MiB, 4 KiB pages interleaved over the nodes), 30 %;
//! - 32 falsely shared 2 MiB THPs (threads of two nodes write disjoint halves; the page on
//!   the first node), 10 %: the report finds them falsely shared.
//!
//! Sources: 35 % private cache, 15 % local LLC, then DRAM local or remote by page and CPU node
//! (a few remote-cache hits on shared pages); latencies by source. Time advances ~50 ns a
//! sample. The generator is seeded (xorshift): the same `n` and seed give the same stream.

use crate::error::Error;
use crate::record::{Batch, FileMeta, Known, Mapping, MappingKind, Record, SampleSource};
use numalab_core::{
    AccessSample, CpuId, DataSource, NodeId, NodeInfo, PageSize, TaskId, ThreadId, Topology,
};

pub const NODES: u16 = 4;
pub const CPUS_PER_NODE: u32 = 8;
pub const THREADS: u32 = 16;
const MB: u64 = 1 << 20;
const PRIVATE_BASE: u64 = 0x7f10_0000_0000;
const PRIVATE_BYTES: u64 = 16 * MB;
const SHARED_BASE: u64 = 0x7f20_0000_0000;
const SHARED_BYTES: u64 = 64 * MB;
const FS_BASE: u64 = 0x7f30_0000_0000;
const FS_REGIONS: u64 = 32;
/// The task id of every sample (a plausible pid: perf treats pid 0 as the idle task).
pub const TASK: u32 = 4242;

/// The generator's topology: 4 nodes of 8 CPUs, 32 GiB each.
pub fn topology() -> Topology {
    Topology {
        nodes: (0..NODES)
            .map(|n| NodeInfo {
                id: NodeId(n),
                cpus: (0..CPUS_PER_NODE)
                    .map(|c| CpuId(n as u32 * CPUS_PER_NODE + c))
                    .collect(),
                mem_bytes: 32 << 30,
            })
            .collect(),
        distances: (0..NODES as usize)
            .map(|i| {
                (0..NODES as usize)
                    .map(|j| if i == j { 10 } else { 21 })
                    .collect()
            })
            .collect(),
        smt: 1,
    }
}

/// The generator's file metadata (machine, workload, topology, mappings).
pub fn meta() -> FileMeta {
    let anon = |start, len| Mapping {
        task: TASK,
        start,
        len_bytes: len,
        name: String::new(),
        kind: MappingKind::Anonymous,
        pgoff: 0,
    };
    FileMeta {
        machine: "synthetic-4n".into(),
        workload: "bench-analyze".into(),
        origin: "numalab-sampler".into(),
        sample_period: 1009,
        page_size: Some(PageSize::Base4K),
        nodes: NODES,
        topology: Some(topology()),
        events: vec!["cpu/mem-loads,ldlat=30/P".into()],
        mappings: vec![
            anon(PRIVATE_BASE, THREADS as u64 * PRIVATE_BYTES),
            anon(SHARED_BASE, SHARED_BYTES),
            anon(FS_BASE, FS_REGIONS * 2 * MB),
            Mapping {
                task: TASK,
                start: 0x40_0000,
                len_bytes: 2 * MB,
                name: "/usr/bin/bench-analyze".into(),
                kind: MappingKind::Binary,
                pgoff: 0,
            },
        ],
        samples_dropped: 0,
        ..Default::default()
    }
}

/// The synthetic stream as a [`SampleSource`].
pub struct Synthetic {
    meta: FileMeta,
    left: u64,
    state: u64,
    time_ns: u64,
    batch_rows: usize,
}

impl Synthetic {
    pub fn new(samples: u64, seed: u64) -> Synthetic {
        Synthetic {
            meta: meta(),
            left: samples,
            state: seed | 1,
            time_ns: 1_000_000_000,
            batch_rows: 65_536,
        }
    }

    fn rand(&mut self) -> u64 {
        // xorshift64*: enough for a benchmark's address stream, and reproducible.
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn sample(&mut self) -> Record {
        let r = self.rand();
        let thread = (r % THREADS as u64) as u32;
        let node = (thread / (THREADS / NODES as u32)) as u16;
        let cpu = node as u32 * CPUS_PER_NODE + thread % (THREADS / NODES as u32) * 2;
        let which = (r >> 8) % 100;
        let off = self.rand();
        let (addr, page_node, page_size) = if which < 60 {
            let o = (off % PRIVATE_BYTES) & !7;
            let huge = o / (2 * MB);
            let home = if huge % 8 == 7 {
                (node + 1) % NODES
            } else {
                node
            };
            (
                PRIVATE_BASE + thread as u64 * PRIVATE_BYTES + o,
                home,
                PageSize::Huge2M,
            )
        } else if which < 90 {
            let o = (off % SHARED_BYTES) & !7;
            (
                SHARED_BASE + o,
                ((o >> 12) % NODES as u64) as u16,
                PageSize::Base4K,
            )
        } else {
            // Region k is written by the threads of node k % 4 (first half) and of the next
            // node (second half); the THP sits on node k % 4.
            let pick = off % (FS_REGIONS / NODES as u64);
            let second = (off >> 40) & 1;
            let first = if second == 0 {
                node
            } else {
                (node + NODES - 1) % NODES
            };
            let k = pick * NODES as u64 + first as u64;
            let o = ((off >> 8) % MB) & !63;
            (
                FS_BASE + k * 2 * MB + second * MB + o,
                first,
                PageSize::Huge2M,
            )
        };
        let s = (r >> 20) % 100;
        let (source, latency) = if s < 35 {
            (DataSource::PrivateCache, 4 + (r >> 40) % 10)
        } else if s < 50 {
            (DataSource::LocalLlc, 30 + (r >> 40) % 20)
        } else if page_node == node {
            (DataSource::LocalDram, 80 + (r >> 40) % 60)
        } else if s < 53 && page_size == PageSize::Base4K {
            (DataSource::RemoteCache, 120 + (r >> 40) % 60)
        } else {
            (DataSource::RemoteDram, 140 + (r >> 40) % 120)
        };
        self.time_ns += 30 + (r >> 50) % 40;
        Record {
            sample: AccessSample {
                time_ns: self.time_ns,
                task: TaskId(TASK),
                thread: ThreadId(TASK + thread),
                cpu: CpuId(cpu),
                cpu_node: NodeId(node),
                addr,
                page_node: NodeId(page_node),
                page_size,
                source,
                latency_ns: latency as f32,
                write: (r >> 60) & 3 == 0,
            },
            known: Known::ALL,
            event: 0,
            ip: Some(0x40_1000 + (r >> 32) % 0x1000),
            phys_addr: None,
            weight: None,
            data_src: None,
            period: None,
        }
    }
}

impl SampleSource for Synthetic {
    fn meta(&self) -> &FileMeta {
        &self.meta
    }
    fn next_batch(&mut self) -> Result<Option<Batch>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        let n = self.left.min(self.batch_rows as u64);
        self.left -= n;
        let records = (0..n).map(|_| self.sample()).collect();
        Ok(Some(Batch {
            records,
            mappings: Vec::new(),
            thread_names: Vec::new(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_is_deterministic_and_mixed() {
        let collect = |seed| {
            let mut s = Synthetic::new(20_000, seed);
            let mut v = Vec::new();
            while let Some(b) = s.next_batch().unwrap() {
                v.extend(b.records);
            }
            v
        };
        let a = collect(7);
        assert_eq!(a, collect(7));
        assert_ne!(a, collect(8));
        assert_eq!(a.len(), 20_000);
        let count = |src| a.iter().filter(|r| r.sample.source == src).count();
        assert!(count(DataSource::LocalDram) > 1000);
        assert!(count(DataSource::RemoteDram) > 1000);
        assert!(count(DataSource::RemoteCache) > 100);
        assert!(a
            .windows(2)
            .all(|w| w[0].sample.time_ns < w[1].sample.time_ns));
        // Every sample sits inside a mapping of the metadata.
        let m = meta();
        assert!(a.iter().all(|r| m
            .mappings
            .iter()
            .any(|mp| r.sample.addr >= mp.start && r.sample.addr < mp.start + mp.len_bytes)));
        // The false-sharing regions come out as such, THPs used by two nodes (the sparsely
        // sampled shared table may look disjoint too at this sample count).
        let samples: Vec<_> = a.iter().map(|r| r.sample).collect();
        let rep = crate::analyze(
            &mut crate::record::MemorySource::new(m, &samples),
            &crate::Options {
                top: 100,
                ..Default::default()
            },
        )
        .unwrap();
        let fs: Vec<_> = rep
            .false_sharing
            .regions
            .iter()
            .filter(|g| g.start >= FS_BASE && g.start < FS_BASE + FS_REGIONS * 2 * MB)
            .collect();
        assert_eq!(fs.len(), FS_REGIONS as usize);
        for g in fs {
            assert_eq!(g.sharing, crate::analyze::Sharing::FalselyShared, "{g:?}");
            assert!(g.mapped_huge);
            assert_eq!(g.samples_by_node.iter().filter(|c| **c > 0).count(), 2);
        }
    }
}
