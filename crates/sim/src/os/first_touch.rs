//! First-touch races decided by simulated time (docs/model.md, "First touch").
//!
//! Threads run one after another inside an epoch, so the thread that runs first in an epoch
//! takes the first-touch fault of every page it touches, even where another thread, run
//! later, touched the same page earlier in simulated time. Which node gets a page that
//! several threads start on at once (a huge page holding several threads' rows, a JVM's
//! interleaved PLABs) then depended on the run order and the epoch length (CG.D with THP:
//! 137 to 208 ms for epochs of 100 to 20 µs).
//!
//! So a folio placed by a first touch under a local policy (default, local) is *fresh* while
//! the epoch lasts, or its owner's fault where that ends later, and a thread touching it in
//! that time settles the race as Linux does:
//!
//! - **Anonymous memory** (4 KiB and THP): a fault allocates a page on its own node and clears
//!   it *before* it takes the page-table lock, then maps it only if the entry is still empty
//!   (`__do_huge_pmd_anonymous_page`: `clear_huge_page`, then `pmd_lock` and `pmd_none`;
//!   `do_anonymous_page` likewise with `pte_none`). Every thread touching the folio while the
//!   owner's fault is in flight takes a fault of its own; the first to *finish* clearing
//!   (touch + its fault time) maps its page, and the others free theirs, having paid their
//!   whole clearing. A thread finishing first takes the folio over: it moves to its node.
//! - **hugetlbfs**: faults on one page serialise on the fault mutex
//!   (`hugetlb_fault_mutex_hash`; one global `hugetlb_instantiation_mutex` before Linux
//!   3.15), and the holder maps its page before it lets go: the earliest touch gets the page,
//!   a later toucher waits for the fault in flight, and a thread that touched earlier in
//!   simulated time but runs later takes it over, the previous owner keeping
//!   `min(F, t_new + F − t_old)` of the fault it paid (it waited for the mutex).
//!
//! The accesses made before a takeover keep the node they found.

use numalab_core::PageSize;
use std::collections::HashMap;

/// One fresh folio: who touched it first so far.
#[derive(Copy, Clone, Debug)]
struct Fresh {
    size: PageSize,
    /// Earliest touch so far: (simulated ns, thread id).
    first: (f64, u32),
    /// When that toucher's fault ends.
    done_ns: f64,
    /// Faults on it serialise (hugetlbfs' fault mutex); else every toucher clears a page of
    /// its own and the first to finish maps it (anonymous memory).
    serialised: bool,
}

/// What a touch of a fresh folio means for the thread.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Touch {
    /// It touched the folio first: the folio and its fault are its.
    Takeover(Takeover),
    /// The owner's fault is in flight and holds the fault mutex (hugetlbfs): the thread
    /// waits until then.
    WaitUntil(f64),
    /// The owner's fault is in flight and the thread's own, clearing a page on its node,
    /// ends later (anonymous memory): it pays that fault, frees its page and finds the
    /// owner's mapped.
    Lost,
}

/// A thread touched a fresh folio before its owner so far.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Takeover {
    pub size: PageSize,
    /// The owner so far, which paid the fault, and when it touched the folio.
    pub previous: u32,
    pub previous_ns: f64,
    /// The folio's faults serialise (hugetlbfs): the previous owner only waited.
    pub serialised: bool,
}

impl Takeover {
    /// What the previous owner gets back of the fault `fault_ns` it paid, the new owner
    /// having touched at `now_ns`: it waited for the new owner's fault in flight, from its
    /// own touch to the end of that fault. Nothing where faults race (anonymous memory): the
    /// previous owner cleared a page of its own, for nothing.
    pub fn refund_ns(&self, now_ns: f64, fault_ns: f64) -> f64 {
        if !self.serialised {
            return 0.0;
        }
        (self.previous_ns - now_ns).clamp(0.0, fault_ns)
    }
}

/// The folios first touched in the current epoch.
#[derive(Debug, Default)]
pub struct FirstTouch {
    by_start: HashMap<u64, Fresh>,
}

impl FirstTouch {
    /// A first-touch fault placed the folio at `start` for `thread` at `now_ns`; the fault
    /// ends at `done_ns`; `serialised`: its faults take hugetlbfs' fault mutex.
    pub fn placed(
        &mut self,
        start: u64,
        size: PageSize,
        thread: u32,
        (now_ns, done_ns): (f64, f64),
        serialised: bool,
    ) {
        self.by_start.insert(
            start,
            Fresh {
                size,
                first: (now_ns, thread),
                done_ns,
                serialised,
            },
        );
    }

    /// The fault of the thread that took the fresh folio at `start` over ends at `done_ns`.
    pub fn fault_ends(&mut self, start: u64, done_ns: f64) {
        if let Some(f) = self.by_start.get_mut(&start) {
            f.done_ns = done_ns;
        }
    }

    /// `thread` touched the fresh folio at `start` at `now_ns`; `fault_ns(size)` is how long
    /// a fault of its own would take. Where faults serialise (hugetlbfs) the earliest touch
    /// (ties: the lower thread id) gets the folio and a later one waits for the owner's
    /// fault in flight. Where they race (anonymous memory) a touch while the owner's fault is
    /// in flight is a fault of the thread's own, and the earliest end (ties: the lower thread
    /// id) gets the folio. On a takeover the caller tells when the thread's fault ends
    /// (`fault_ends`).
    pub fn touched(
        &mut self,
        start: u64,
        thread: u32,
        now_ns: f64,
        fault_ns: impl FnOnce(PageSize) -> f64,
    ) -> Option<Touch> {
        let f = self.by_start.get_mut(&start)?;
        let (t, id) = f.first;
        let takeover = Touch::Takeover(Takeover {
            size: f.size,
            previous: id,
            previous_ns: t,
            serialised: f.serialised,
        });
        if f.serialised {
            if now_ns < t || (now_ns == t && thread < id) {
                f.first = (now_ns, thread);
                return Some(takeover);
            }
            let done = f.done_ns;
            return (thread != id && done > now_ns).then_some(Touch::WaitUntil(done));
        }
        if thread == id || now_ns >= f.done_ns {
            return None;
        }
        let done = now_ns + fault_ns(f.size);
        if done < f.done_ns || (done == f.done_ns && thread < id) {
            f.first = (now_ns, thread);
            f.done_ns = done;
            return Some(takeover);
        }
        Some(Touch::Lost)
    }

    /// The epoch ended at `end_ns`: the folios whose owner's fault has ended by then stop
    /// being fresh and are returned, in address order; a folio whose fault is still in flight
    /// (a huge page being zeroed for longer than an epoch) stays fresh, so that its other
    /// touchers wait for it whatever the epoch length.
    pub fn end_epoch(&mut self, end_ns: f64) -> Vec<(u64, PageSize)> {
        let mut done = Vec::new();
        self.by_start.retain(|&s, f| {
            let in_flight = f.done_ns > end_ns;
            if !in_flight {
                done.push((s, f.size));
            }
            in_flight
        });
        done.sort_unstable_by_key(|a| a.0);
        done
    }

    pub fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(t: Option<Touch>) -> Takeover {
        match t {
            Some(Touch::Takeover(t)) => t,
            other => panic!("{other:?}"),
        }
    }

    /// hugetlbfs: the fault mutex makes the earliest touch the owner and later touchers wait.
    #[test]
    fn serialised_faults_go_to_the_earliest_touch_and_later_touchers_wait() {
        let mut ft = FirstTouch::default();
        let f = [1_000.0, 80_000.0, 1e7];
        let no_fault =
            |_: PageSize| -> f64 { panic!("a serialised toucher takes no fault of its own") };
        // thread 0 ran first in the epoch and faulted at 15 µs; thread 5, run later,
        // touched the same huge page at 12 µs; thread 3 at 13 µs; thread 2 at 12 µs
        let at = (15_000.0, 15_000.0 + f[1]);
        ft.placed(0x20_0000, PageSize::Huge2M, 0, at, true);
        let t = take(ft.touched(0x20_0000, 5, 12_000.0, no_fault));
        ft.fault_ends(0x20_0000, 12_000.0 + f[1]);
        assert_eq!(
            (t.size, t.previous, t.previous_ns),
            (PageSize::Huge2M, 0, 15_000.0)
        );
        // thread 0 waited from 15 µs for thread 5's fault, to 12 µs + F
        assert_eq!(t.refund_ns(12_000.0, 80_000.0), 3_000.0);
        assert_eq!(t.refund_ns(12_000.0, 1_000.0), 1_000.0);
        // thread 3 at 13 µs waits for thread 5's fault: until 92 µs
        assert_eq!(
            ft.touched(0x20_0000, 3, 13_000.0, no_fault),
            Some(Touch::WaitUntil(92_000.0))
        );
        let t = take(ft.touched(0x20_0000, 2, 12_000.0, no_fault));
        ft.fault_ends(0x20_0000, 12_000.0 + f[1]);
        assert_eq!((t.previous, t.refund_ns(12_000.0, 80_000.0)), (5, 0.0));
        // the owner itself, and anyone after the fault, do not wait
        assert_eq!(ft.touched(0x20_0000, 2, 50_000.0, no_fault), None);
        assert_eq!(ft.touched(0x20_0000, 7, 95_000.0, no_fault), None);
        assert_eq!(ft.touched(0x40_0000, 3, 1.0, no_fault), None, "not fresh");
        // the epoch ends at 50 µs with thread 2's fault (12 µs + 80 µs) in flight: still fresh
        assert_eq!(ft.end_epoch(50_000.0), vec![]);
        assert_eq!(
            ft.touched(0x20_0000, 9, 60_000.0, no_fault),
            Some(Touch::WaitUntil(92_000.0))
        );
        assert_eq!(ft.end_epoch(100_000.0), vec![(0x20_0000, PageSize::Huge2M)]);
        assert!(ft.is_empty());
    }

    /// Anonymous memory: every toucher during the owner's fault clears a page of its own; the
    /// first to finish maps it, whoever touched first; nobody gets fault time back.
    #[test]
    fn racing_faults_go_to_the_first_to_finish_clearing() {
        let mut ft = FirstTouch::default();
        // thread 0 faulted at 15 µs and clears until 95 µs (80 µs)
        ft.placed(0x20_0000, PageSize::Huge2M, 0, (15_000.0, 95_000.0), false);
        // thread 1 touches at 20 µs and would clear for 80 µs: it ends later, it loses
        assert_eq!(
            ft.touched(0x20_0000, 1, 20_000.0, |_| 80_000.0),
            Some(Touch::Lost)
        );
        // thread 2 touches at 30 µs on a faster path (50 µs): it ends at 80 µs, first
        let t = take(ft.touched(0x20_0000, 2, 30_000.0, |s| {
            assert_eq!(s, PageSize::Huge2M);
            50_000.0
        }));
        assert_eq!(
            (t.previous, t.previous_ns, t.serialised),
            (0, 15_000.0, false)
        );
        assert_eq!(
            t.refund_ns(30_000.0, 50_000.0),
            0.0,
            "thread 0 cleared for nothing"
        );
        // thread 3 touched at 10 µs, earlier than all, but clears until 100 µs: it loses
        assert_eq!(
            ft.touched(0x20_0000, 3, 10_000.0, |_| 90_000.0),
            Some(Touch::Lost)
        );
        // a tie of ends goes to the lower id: thread 1 at 0 µs + 80 µs
        let t = take(ft.touched(0x20_0000, 1, 0.0, |_| 80_000.0));
        assert_eq!(t.previous, 2);
        // after the winner's end the page is mapped: no fault, whoever touches
        assert_eq!(ft.touched(0x20_0000, 4, 80_000.0, |_| 1.0), None);
        // the owner touching again takes no fault
        assert_eq!(ft.touched(0x20_0000, 1, 5_000.0, |_| 1.0), None);
        assert_eq!(ft.end_epoch(100_000.0), vec![(0x20_0000, PageSize::Huge2M)]);
    }
}
