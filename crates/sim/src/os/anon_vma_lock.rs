//! Before Linux 3.8, the migrations of one process's pages serialise on its anon_vma lock
//! (docs/model.md, "OS model", Migration; issue "Trustworthy simulation II", item 10).
//!
//! Migrating an anonymous page (`migrate_pages` → `unmap_and_move`, the path of `move_pages`,
//! `migrate_pages(2)` and a policy's calls) walks its reverse map twice under the lock of the
//! page's `anon_vma`, the structure every page of a VMA (and of the VMAs merged with it)
//! shares: `try_to_unmap` → `try_to_unmap_anon` takes it (`page_lock_anon_vma`), and
//! `try_to_unmap_one` clears the PTE with `ptep_clear_flush`, so the TLB shootdown and the wait
//! for the other CPUs' acknowledgements happen inside it; `remove_migration_ptes` takes it
//! again to map the new page. Up to Linux 3.7 it is a lock that excludes (a spinlock, a mutex
//! from 3.0); from 3.8 it is an rwsem that rmap walks take for reading
//! (`page_lock_anon_vma_read`), and walks no longer exclude each other. So on the older
//! kernels, threads that migrate pages of one buffer at once (GF09's threaded `move_pages`)
//! pass the lock one page after another, each holding it for its shootdown.
//!
//! The model: a thread's migration call (its own `move_pages`, a hook's call, user-space
//! next-touch's `move_pages` from its SIGSEGV handler) holds the lock for the time it spends
//! raising the shootdowns of the folios it moves (`Shootdowns::initiator_ns` per flush), offered to its process's lock
//! as its copies run (spread over the call's copy window like its bytes). Like a memory
//! controller (memsys.rs) and the mmap_lock line (mmap_lock.rs), the lock serves one
//! nanosecond of hold per nanosecond; what the epoch's holds offer beyond that joins a
//! backlog, and the processes' migrating threads wait for it at the epoch's end, each in
//! proportion to its holds (the one holding most the whole backlog): a copier's clock and
//! remaining copies move later by its share less the interrupts it took during its calls,
//! which moved them already (`spin_lock` leaves interrupts on: the holders' flush IPIs fall
//! in the spinning), as migration time, or fault time for a hold inside a fault.
//!
//! Left out: the rmap walks' own work besides the flush (no figure for it was found, so a hold
//! is the flush alone, a lower bound); the kernel next-touch and lazy-migration fault paths
//! (the former's rmap use in GF09's patch is not published); a call on another process's
//! pages; a policy daemon's calls (one daemon's calls never overlap each
//! other); one lock per process rather than per `anon_vma` (a process's
//! anonymous mappings that never merged have locks of their own); hinting-fault migrations,
//! which exist from 3.8 only.

/// Each process's anon_vma lock: holds offered in the current epoch and the backlog.
pub struct AnonVmaLock {
    /// Whether rmap walks exclude each other (Linux before 3.8).
    exclusive: bool,
    offered_ns: Vec<f64>,
    backlog_ns: Vec<f64>,
}

impl AnonVmaLock {
    /// The locks of `processes` processes on a kernel whose rmap walks exclude each other
    /// (`exclusive`: Linux before 3.8) or not.
    pub fn new(exclusive: bool, processes: usize) -> AnonVmaLock {
        AnonVmaLock {
            exclusive,
            offered_ns: vec![0.0; processes],
            backlog_ns: vec![0.0; processes],
        }
    }

    /// Whether migrations hold the lock at all (the engine then tracks their holds).
    pub fn exclusive(&self) -> bool {
        self.exclusive
    }

    /// `ns` of hold by a migration of process `p` in the current epoch.
    pub fn offer(&mut self, p: usize, ns: f64) {
        if self.exclusive && ns > 0.0 {
            self.offered_ns[p] += ns;
        }
    }

    /// Closes an epoch of `epoch_ns`: each process's backlog `Q ← max(0, Q + offered − epoch)`,
    /// the time the lock stays busy after the epoch's end.
    pub fn end_epoch(&mut self, epoch_ns: f64) -> &[f64] {
        for (q, o) in self.backlog_ns.iter_mut().zip(&mut self.offered_ns) {
            *q = (*q + std::mem::take(o) - epoch_ns).max(0.0);
        }
        &self.backlog_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_beyond_the_epoch_queue_and_drain() {
        let mut l = AnonVmaLock::new(true, 2);
        l.offer(0, 30.0);
        l.offer(1, 5.0);
        assert_eq!(l.end_epoch(20.0), &[10.0, 0.0]);
        // the backlog drains as the lock serves it
        l.offer(0, 15.0);
        assert_eq!(l.end_epoch(20.0), &[5.0, 0.0]);
        assert_eq!(l.end_epoch(20.0), &[0.0, 0.0]);
    }

    #[test]
    fn shared_rmap_walks_never_queue() {
        let mut l = AnonVmaLock::new(false, 1);
        l.offer(0, 1e9);
        assert_eq!(l.end_epoch(20.0), &[0.0]);
        assert!(!l.exclusive());
    }
}
