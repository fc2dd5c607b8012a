//! Compute overlaps memory: the out-of-order core's instruction window (docs/model.md,
//! "Compute and memory overlap").
//!
//! An out-of-order core keeps executing instructions behind an outstanding miss until its
//! reorder buffer (ROB) fills, so independent misses and compute overlap instead of adding
//! in series; a load whose address depends on the previous load (a pointer chase, a page
//! walk) cannot issue early and stays serial. This is the interval model's first-order
//! view (Karkhanis & Smith, "A first-order superscalar processor model", ISCA 2004; Eyerman
//! et al., "A mechanistic performance model for superscalar out-of-order processors", TOCS
//! 2009): a miss costs its latency less the compute that the ROB holds behind it.
//!
//! The engine charges each reference its latency as it goes (independent misses already
//! divided by the concurrency of the line-fill buffers) and calls [`Window::compute`] at each
//! compute op with the independent memory time since the previous one. Of that compute:
//! - the tail of the previous compute op, up to one ROB of its instructions, ran while the
//!   misses that followed it were outstanding (they issued early, out of order);
//! - this op's compute runs under the remaining memory time, at most one ROB of its
//!   instructions per memory reference in between (each outstanding miss holds one window).
//!
//! Page faults are traps that drain the pipeline: nothing overlaps across one.

/// One thread's window state.
#[derive(Clone, Debug, Default)]
pub struct Window {
    /// Independent memory time at the last compute op (or fault, or barrier), ns.
    mark_ns: f64,
    /// Memory references at the last compute op.
    mark_refs: u64,
    /// Compute at the end of the last compute op that later misses can still hide under,
    /// ns (at most one ROB of its instructions).
    tail_ns: f64,
}

impl Window {
    /// A compute op of `ns` retiring `instructions`, after `indep_ns` of independent memory
    /// time and `refs` memory references in all (both counted from the thread's start).
    /// Returns the time hidden, never more than the memory time since the last op (the
    /// part taken back from misses already charged may exceed `ns`: the engine keeps the
    /// clock from running back past the start of the thread's turn).
    pub fn compute(
        &mut self,
        ns: f64,
        instructions: u32,
        rob_entries: f64,
        indep_ns: f64,
        refs: u64,
    ) -> f64 {
        let mem = (indep_ns - self.mark_ns).max(0.0);
        let windows = (refs - self.mark_refs) as f64;
        // the time one ROB of this op's instructions takes (cycles-only ops: all of it)
        let rob_ns = if instructions == 0 {
            ns
        } else {
            ns * (rob_entries / instructions as f64).min(1.0)
        };
        // the misses since the last op issued under its tail
        let early = mem.min(self.tail_ns);
        // this op runs under what is left, one window per reference
        let under = ns.min(mem - early).min(windows * rob_ns);
        self.tail_ns = (ns - under).min(rob_ns);
        self.mark_ns = indep_ns;
        self.mark_refs = refs;
        early + under
    }

    /// A fault (a trap), a barrier, an atomic (a locked instruction's fence) or a system
    /// call: nothing before it overlaps anything after it.
    /// `indep_ns` is the independent memory time that will have been counted when the
    /// serialising event's own cost is in (the fault's cost is added with its reference).
    pub fn serialise(&mut self, indep_ns: f64, refs: u64) {
        self.mark_ns = indep_ns;
        self.mark_refs = refs;
        self.tail_ns = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROB: f64 = 192.0;

    #[test]
    fn compute_hides_under_independent_misses_up_to_their_time() {
        let mut w = Window::default();
        // 64 misses, 640 ns of memory; 300 ns of compute in 600 instructions: all hidden
        assert_eq!(w.compute(300.0, 600, ROB, 640.0, 64), 300.0);
        // 64 more misses of 100 ns in all, then 300 ns of compute: 100 ns hidden
        let h = w.compute(300.0, 600, ROB, 740.0, 128);
        assert!((h - 100.0).abs() < 1e-9, "{h}");
    }

    #[test]
    fn one_miss_hides_at_most_one_rob_of_compute() {
        let mut w = Window::default();
        // one 100 ns miss, then 1000 instructions in 1000 ns: 192 instructions = 192 ns
        // could run under it, but the miss lasts 100 ns
        assert_eq!(w.compute(1000.0, 1000, ROB, 100.0, 1), 100.0);
        // one 500 ns miss (a remote, loaded access): only the ROB's 192 ns hide
        let mut w = Window::default();
        let h = w.compute(1000.0, 1000, ROB, 500.0, 1);
        assert!((h - 192.0).abs() < 1e-9, "{h}");
    }

    #[test]
    fn misses_after_compute_issue_under_its_tail() {
        let mut w = Window::default();
        // compute with no memory before it hides nothing, and leaves a tail of one ROB
        assert_eq!(w.compute(400.0, 400, ROB, 0.0, 0), 0.0);
        // 150 ns of misses follow; they issued under the 192 ns tail: all 150 ns hidden,
        // and this op has no memory left to run under
        let h = w.compute(50.0, 50, ROB, 150.0, 10);
        assert!((h - 150.0).abs() < 1e-9, "{h}");
        // 300 ns more: the tail is this op's 50 ns, then this op's 300 ns run under the rest
        let h = w.compute(300.0, 300, ROB, 450.0, 20);
        assert!((h - 300.0).abs() < 1e-9, "{h}");
    }

    #[test]
    fn dependent_memory_and_serialising_events_hide_nothing() {
        let mut w = Window::default();
        // dependent references do not count as independent time: nothing to hide under
        assert_eq!(w.compute(300.0, 300, ROB, 0.0, 50), 0.0);
        let mut w = Window::default();
        w.compute(300.0, 300, ROB, 0.0, 0);
        // a fault after the compute: its tail cannot hide the misses after the fault
        w.serialise(200.0, 10);
        assert_eq!(w.compute(10.0, 10, ROB, 200.0, 10), 0.0);
    }
}
