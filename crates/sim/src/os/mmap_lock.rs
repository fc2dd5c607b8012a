//! The page faults of one process serialise on its `mmap_lock` (docs/model.md, "OS model",
//! fault contention).
//!
//! Every page fault takes the faulting process's `mm->mmap_lock` (`mmap_sem` before Linux
//! 5.8) for reading (`do_user_addr_fault` → `lock_mm_and_find_vma`, or `down_read` in the
//! kernels of the publications) and releases it at the end. Readers do not exclude each other,
//! but both operations are atomic updates of the semaphore's count, one cache line: the core
//! that takes or releases the lock must own that line, so the process's faults pass it one
//! after another, each holding it for two cache-line transfers from the previous owner. With
//! a process's threads on several sockets, most transfers cross them (a remote cache-to-cache
//! transfer costs about a remote memory access on these machines, E), and a first-touch storm
//! of many threads queues on the line: the process faults at most `1 / hold` times per
//! nanosecond, however many threads fault. (G14 names this contention for Metis's
//! fault-heavy start, reference/workloads.md §4.4.)
//!
//! The model: per process, each fault (a first touch, a next-touch or lazy-migration fault, a
//! hinting fault, a sleep on a migration entry) adds `hold` = 2 × the expected transfer to
//! its epoch's busy time, the expectation over the process's other threads' nodes (an on-chip
//! transfer, `llc_hit_ns`, from a thread of the same node; the idle latency between the nodes
//! otherwise). Like a memory controller (memsys.rs), the line serves one nanosecond of hold
//! per nanosecond; what is offered beyond joins a backlog, and the process's faulting threads
//! wait for it at the epoch's end, each in proportion to its faults (the most faulting one the
//! whole backlog), in the fault handler. A single-threaded process keeps the line in its own
//! cache: no hold.
//!
//! Left out: the page allocator's zone lock and the LRU lock (batched per CPU for 4 KiB
//! pages), the page-table locks (split per page-table page), the lock's writers (mmap,
//! munmap, mprotect exclude faults), Linux 6.4's per-VMA locks (anonymous faults no longer
//! take the mmap_lock there); the expected transfer is computed from the threads' nodes at
//! the start of the run.

/// Each process's mmap_lock line: hold time per fault and the queue of faults on it.
pub struct MmapLock {
    /// Per process, per node of the faulting thread: the line's hold time per fault, ns.
    hold_ns: Vec<Vec<f64>>,
    /// Per process: hold time offered in the current epoch, and not yet served, ns.
    busy_ns: Vec<f64>,
    backlog_ns: Vec<f64>,
}

impl MmapLock {
    /// `thread_nodes[p]`: the nodes of process `p`'s threads (one entry per thread);
    /// `transfer_ns(from, to)`: a cache-line transfer to a core of node `to` from one of
    /// node `from`.
    pub fn new(
        thread_nodes: &[Vec<usize>],
        nodes: usize,
        transfer_ns: impl Fn(usize, usize) -> f64,
    ) -> MmapLock {
        let hold_ns = thread_nodes
            .iter()
            .map(|own| {
                (0..nodes)
                    .map(|n| {
                        if own.len() < 2 {
                            return 0.0;
                        }
                        // the previous owner: any other thread of the process, equally likely
                        // (the faulting thread, left out, is one of node n's if it has one)
                        let all: f64 = own.iter().map(|&m| transfer_ns(m, n)).sum();
                        let (sum, others) = if own.contains(&n) {
                            (all - transfer_ns(n, n), own.len() - 1)
                        } else {
                            (all, own.len())
                        };
                        2.0 * sum / others as f64
                    })
                    .collect()
            })
            .collect();
        let p = thread_nodes.len();
        MmapLock {
            hold_ns,
            busy_ns: vec![0.0; p],
            backlog_ns: vec![0.0; p],
        }
    }

    /// The lock lines of a run on `m`, moved as [`crate::hw::line_transfer_ns`] moves lines.
    pub fn for_machine(
        thread_nodes: &[Vec<usize>],
        m: &numalab_machine::Machine,
        routes: &numalab_machine::Routes,
    ) -> MmapLock {
        MmapLock::new(thread_nodes, m.topology.num_nodes(), |from, to| {
            crate::hw::line_transfer_ns(m, routes, from, to)
        })
    }

    /// A fault of process `task` by a thread of node `node`.
    #[inline]
    pub fn fault(&mut self, task: usize, node: usize) {
        if let Some(h) = self.hold_ns.get(task) {
            self.busy_ns[task] += h[node];
        }
    }

    /// The hold per fault of `task`'s threads on `node`, ns.
    pub fn hold_ns(&self, task: usize, node: usize) -> f64 {
        self.hold_ns.get(task).map_or(0.0, |h| h[node])
    }

    /// Close an epoch of `epoch_ns`: each process's line serves at most the epoch's length of
    /// hold time; returns, per process, the backlog its faulting threads wait for (ns).
    pub fn end_epoch(&mut self, epoch_ns: f64) -> &[f64] {
        for (q, busy) in self.backlog_ns.iter_mut().zip(self.busy_ns.iter_mut()) {
            *q = (*q + std::mem::take(busy) - epoch_ns).max(0.0);
        }
        &self.backlog_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_is_two_transfers_from_the_other_threads_nodes() {
        // process 0: two threads on node 0, two on node 1; process 1: one thread
        let x = |from: usize, to: usize| if from == to { 20.0 } else { 100.0 };
        let l = MmapLock::new(&[vec![0, 0, 1, 1], vec![1]], 2, x);
        // a fault on node 0: the previous owner is the other node-0 thread (20) or one of
        // the two node-1 threads (100): mean 220 / 3
        assert!((l.hold_ns(0, 0) - 2.0 * 220.0 / 3.0).abs() < 1e-9);
        assert_eq!(l.hold_ns(0, 0), l.hold_ns(0, 1));
        assert_eq!(l.hold_ns(1, 1), 0.0, "a single thread keeps the line");
        // a thread moved to node 2, where the process had none: all four are others
        let l = MmapLock::new(&[vec![0, 0, 1, 1]], 3, x);
        assert!((l.hold_ns(0, 2) - 200.0).abs() < 1e-9);
    }

    #[test]
    fn the_line_serves_one_ns_of_hold_per_ns_and_queues_the_rest() {
        let x = |_from: usize, _to: usize| 50.0;
        let mut l = MmapLock::new(&[vec![0, 0]], 1, x);
        for _ in 0..300 {
            l.fault(0, 0); // 300 × 100 ns = 30 µs offered
        }
        assert_eq!(l.end_epoch(20_000.0), &[10_000.0]);
        assert_eq!(l.end_epoch(20_000.0), &[0.0], "an idle epoch drains it");
    }
}
