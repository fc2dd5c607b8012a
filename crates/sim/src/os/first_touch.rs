//! First-touch races decided by simulated time (docs/model.md, "First touch").
//!
//! Threads run one after another inside an epoch, so the thread that runs first in an epoch
//! takes the first-touch fault of every page it touches, even where another thread, run
//! later, touched the same page earlier in simulated time. Which node gets a page that
//! several threads start on at once (a huge page holding several threads' rows, a JVM's
//! interleaved PLABs) then depended on the run order and the epoch length (CG.D with THP:
//! 137 to 208 ms for epochs of 100 to 20 µs).
//!
//! So a folio placed by a first touch under a local policy (default, local) is *fresh* for
//! the rest of the epoch: the fault places it on the faulting thread's node, and a thread
//! that touches it later in the run but earlier in simulated time takes it over at that touch:
//! the folio moves to its node and it pays the fault (the zeroing was its). The thread that
//! owned it before waited for that fault in flight instead of taking its own: of the fault it
//! paid it keeps `min(F, t_new + F − t_old)` and gets the rest back (`t` the two touches, `F`
//! the fault). The accesses made before the takeover keep the node they found. At the epoch's
//! end the folios stop being fresh. A thread that touches a fresh folio after its owner, while
//! the owner's fault is still in flight, waits for that fault to end (the page lock).

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
}

/// What a touch of a fresh folio means for the thread.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Touch {
    /// It touched the folio first: the folio and its fault are its.
    Takeover(Takeover),
    /// The owner's fault is in flight: the thread waits until then.
    WaitUntil(f64),
}

/// A thread touched a fresh folio before its owner so far.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Takeover {
    pub size: PageSize,
    /// The owner so far, which paid the fault, and when it touched the folio.
    pub previous: u32,
    pub previous_ns: f64,
}

impl Takeover {
    /// What the previous owner gets back of the fault `fault_ns` it paid, the new owner
    /// having touched at `now_ns`: it waited for the new owner's fault in flight, from its
    /// own touch to the end of that fault.
    pub fn refund_ns(&self, now_ns: f64, fault_ns: f64) -> f64 {
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
    /// ends at `done_ns`.
    pub fn placed(&mut self, start: u64, size: PageSize, thread: u32, now_ns: f64, done_ns: f64) {
        self.by_start.insert(
            start,
            Fresh {
                size,
                first: (now_ns, thread),
                done_ns,
            },
        );
    }

    /// The fault of the thread that took the fresh folio at `start` over ends at `done_ns`.
    pub fn fault_ends(&mut self, start: u64, done_ns: f64) {
        if let Some(f) = self.by_start.get_mut(&start) {
            f.done_ns = done_ns;
        }
    }

    /// `thread` touched the fresh folio at `start` at `now_ns`. When this is now its earliest
    /// touch (ties: the lower thread id) the folio is the thread's (the caller tells when its
    /// fault ends: `fault_ends`); else the thread waits for the owner's fault while it is in
    /// flight.
    pub fn touched(&mut self, start: u64, thread: u32, now_ns: f64) -> Option<Touch> {
        let f = self.by_start.get_mut(&start)?;
        let (t, id) = f.first;
        if now_ns < t || (now_ns == t && thread < id) {
            f.first = (now_ns, thread);
            return Some(Touch::Takeover(Takeover {
                size: f.size,
                previous: id,
                previous_ns: t,
            }));
        }
        let done = f.done_ns;
        (thread != id && done > now_ns).then_some(Touch::WaitUntil(done))
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

    #[test]
    fn the_earliest_touch_takes_the_folio_whoever_faulted() {
        let mut ft = FirstTouch::default();
        let f = [1_000.0, 80_000.0, 1e7];
        let take = |t: Option<Touch>| match t {
            Some(Touch::Takeover(t)) => t,
            other => panic!("{other:?}"),
        };
        // thread 0 ran first in the epoch and faulted at 15 µs; thread 5, run later,
        // touched the same huge page at 12 µs; thread 3 at 13 µs; thread 2 at 12 µs
        ft.placed(0x20_0000, PageSize::Huge2M, 0, 15_000.0, 15_000.0 + f[1]);
        let t = take(ft.touched(0x20_0000, 5, 12_000.0));
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
            ft.touched(0x20_0000, 3, 13_000.0),
            Some(Touch::WaitUntil(92_000.0))
        );
        let t = take(ft.touched(0x20_0000, 2, 12_000.0));
        ft.fault_ends(0x20_0000, 12_000.0 + f[1]);
        assert_eq!((t.previous, t.refund_ns(12_000.0, 80_000.0)), (5, 0.0));
        // the owner itself, and anyone after the fault, do not wait
        assert_eq!(ft.touched(0x20_0000, 2, 50_000.0), None);
        assert_eq!(ft.touched(0x20_0000, 7, 95_000.0), None);
        assert_eq!(ft.touched(0x40_0000, 3, 1.0), None, "not fresh");
        // the epoch ends at 50 µs with thread 2's fault (12 µs + 80 µs) in flight: still fresh
        assert_eq!(ft.end_epoch(50_000.0), vec![]);
        assert_eq!(
            ft.touched(0x20_0000, 9, 60_000.0),
            Some(Touch::WaitUntil(92_000.0))
        );
        assert_eq!(ft.end_epoch(100_000.0), vec![(0x20_0000, PageSize::Huge2M)]);
        assert!(ft.is_empty());
    }
}
