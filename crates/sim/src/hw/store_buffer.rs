//! The store buffer (docs/model.md, "Stores").
//!
//! A store retires into the core's store buffer and the core goes on; the buffer gets the
//! line for ownership (the read-for-ownership) and writes the store into the cache behind
//! the core's back. A store that misses therefore costs the thread nothing while the buffer
//! has a free entry, so a remote store costs what a local one does (M13 measured a random-
//! write NUMA factor of 1.018 on Westmere against 1.42 for reads); a thread that stores
//! faster than the buffer drains waits for its oldest entry, and then stores cost their
//! bandwidth share as before. The RFO and the later write-back load the controllers and links
//! as before: only who waits changes.
//!
//! The drain is one queue: each store takes its share of the core's miss concurrency (the
//! time the engine would have charged it as an independent reference), after the stores ahead
//! of it. Loads share the same line-fill buffers and go first: a load issued while stores are
//! draining pushes the drain back by its own share.

use std::collections::VecDeque;

/// One thread's store buffer.
#[derive(Clone, Debug, Default)]
pub struct StoreBuffer {
    /// When each store in the buffer drains, oldest first (non-decreasing), less `shift_ns`.
    done_ns: VecDeque<f64>,
    /// How far the loads issued since have pushed every store in the buffer back.
    shift_ns: f64,
    /// When the last store drains (the drain is free after it).
    drain_ns: f64,
}

impl StoreBuffer {
    /// Forget the stores drained by `now_ns`.
    #[inline(always)]
    fn retire(&mut self, now_ns: f64) {
        while self
            .done_ns
            .front()
            .is_some_and(|&d| d + self.shift_ns <= now_ns)
        {
            self.done_ns.pop_front();
        }
    }

    /// A store issued at `now_ns` that needs `cost_ns` of drain (its share of the core's
    /// miss concurrency; a hit in the private cache costs that hit's share), into a buffer of
    /// `entries`. Returns how long the thread waits for a free entry (0 while one is free).
    #[inline]
    pub fn post(&mut self, now_ns: f64, cost_ns: f64, entries: usize) -> f64 {
        self.retire(now_ns);
        let mut t = now_ns;
        while self.done_ns.len() >= entries.max(1) {
            if let Some(d) = self.done_ns.pop_front() {
                t = t.max(d + self.shift_ns);
            }
        }
        self.drain_ns = self.drain_ns.max(t) + cost_ns;
        self.done_ns.push_back(self.drain_ns - self.shift_ns);
        t - now_ns
    }

    /// A load issued at `now_ns` whose miss takes `cost_ns` of the fill buffers: the stores
    /// still draining then drain that much later.
    #[inline(always)]
    pub fn load(&mut self, now_ns: f64, cost_ns: f64) {
        if self.drain_ns > now_ns {
            self.retire(now_ns);
            self.shift_ns += cost_ns;
            self.drain_ns += cost_ns;
        }
    }

    /// A fence at `now_ns` (a locked instruction, as in a barrier or a lock; a trap): the
    /// thread waits until every store has drained. Returns the wait.
    pub fn fence(&mut self, now_ns: f64) -> f64 {
        self.done_ns.clear();
        self.shift_ns = 0.0;
        (self.drain_ns - now_ns).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_slower_than_the_drain_never_wait() {
        let mut sb = StoreBuffer::default();
        // one store every 10 ns, each draining in 8
        let waits: f64 = (0..1000).map(|i| sb.post(i as f64 * 10.0, 8.0, 32)).sum();
        assert_eq!(waits, 0.0);
        assert!(sb.fence(10_000.0) == 0.0);
    }

    #[test]
    fn a_stream_of_stores_waits_at_the_drain_rate_once_the_buffer_is_full() {
        let mut sb = StoreBuffer::default();
        let mut t = 0.0;
        for _ in 0..1000 {
            t += sb.post(t, 8.0, 32);
        }
        // 1000 stores of 8 ns: the thread is 32 stores behind the drain at the end
        assert!((t - (1000.0 - 32.0) * 8.0).abs() <= 8.0, "{t}");
        t += sb.fence(t);
        assert!((t - 8000.0).abs() < 1e-9, "{t}");
    }

    #[test]
    fn loads_share_the_drain() {
        let mut sb = StoreBuffer::default();
        sb.post(0.0, 10.0, 4);
        sb.load(0.0, 5.0);
        // the load went first: the store drains at 15
        assert_eq!(sb.fence(0.0), 15.0);
        // a full buffer waits for its oldest store as the loads pushed it back
        let mut sb = StoreBuffer::default();
        sb.post(0.0, 10.0, 1);
        sb.load(0.0, 5.0);
        assert_eq!(sb.post(0.0, 10.0, 1), 15.0);
        // nothing draining: a load does not start a drain
        sb.load(100.0, 5.0);
        assert_eq!(sb.fence(100.0), 0.0);
    }
}
