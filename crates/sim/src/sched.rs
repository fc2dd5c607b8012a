//! Time-sharing: several threads placed on one CPU take turns on it (docs/model.md,
//! "Time-sharing"; issue "Trustworthy simulation I", item 3: more tasks than CPUs).
//!
//! Each CPU with more than one thread has a run queue. The thread holding the CPU runs until
//! its slice ends, it waits (at a barrier) or it ends; the CPU then goes to the next runnable
//! thread of the queue in turn (round robin: threads of equal weight get equal shares, as
//! CFS and EEVDF give them), which starts after a context switch. What the switch costs
//! beyond its direct time the model gives by itself: the threads share the core's private
//! cache and TLBs (they take turns with the same core state), and a switch to another
//! process flushes the TLB (x86 without PCID tagging, E: the presets' kernels before 4.14
//! did not use PCIDs).
//!
//! Slices follow the kernel given by `[os] linux`:
//! - CFS (before 6.6): with `n` runnable threads a slice is `max(latency / n, min_granularity)`,
//!   `sysctl_sched_latency` 6 ms and `sysctl_sched_min_granularity` 0.75 ms, each times
//!   `1 + log2(min(CPUs, 8))` (`SCHED_TUNABLESCALING_LOG`: ×4 from 8 CPUs);
//! - EEVDF (6.6 and later): `sysctl_sched_base_slice`, 0.75 ms times the same factor.
//!
//! A thread a policy moves joins its new CPU's queue (the engine rebuilds the queues). Not
//! modelled: wake-up preemption, weights (nice levels), the load balancer moving threads
//! between CPUs.

use numalab_core::CpuId;

/// The queue of one shared CPU.
#[derive(Clone, Debug)]
struct RunQueue {
    /// Its threads, in turn order.
    threads: Vec<usize>,
    /// Position of the thread holding the CPU in `threads`.
    curr: usize,
    /// When the holder's slice ends, ns.
    slice_end: f64,
    /// When the CPU was last given up (the holder waited or ended), ns.
    free_at: f64,
    /// The holder stopped and nobody else could run: it gets a new slice when it resumes.
    idle: bool,
}

/// A CPU handed to another thread: `to` starts at `at` (before the switch's own cost).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Switch {
    pub from: usize,
    pub to: usize,
    pub at: f64,
}

/// The run queues of a run whose threads share CPUs.
#[derive(Clone, Debug)]
pub struct Scheduler {
    rqs: Vec<RunQueue>,
    /// Per thread: its run queue, when its CPU is shared.
    rq_of: Vec<Option<u32>>,
    /// CFS's latency and minimum granularity, or EEVDF's base slice (as `min_gran_ns`, with
    /// `latency_ns` 0), ns.
    latency_ns: f64,
    min_gran_ns: f64,
}

impl Scheduler {
    /// The run queues for threads placed on `cpus` whose clocks are `clocks` (one entry per
    /// thread) on a machine of `ncpus` CPUs, with the slices of `eevdf` (Linux 6.6 and later)
    /// or CFS. Each queue's earliest thread holds its CPU first, for a slice from its clock.
    /// None when no CPU has two threads: the run is not time-shared.
    pub fn new(cpus: &[CpuId], clocks: &[f64], ncpus: usize, eevdf: bool) -> Option<Scheduler> {
        let mut by_cpu: std::collections::BTreeMap<CpuId, Vec<usize>> = Default::default();
        for (t, c) in cpus.iter().enumerate() {
            by_cpu.entry(*c).or_default().push(t);
        }
        let mut rq_of = vec![None; cpus.len()];
        let mut rqs = Vec::new();
        for threads in by_cpu.into_values().filter(|v| v.len() > 1) {
            for &t in &threads {
                rq_of[t] = Some(rqs.len() as u32);
            }
            let curr = (0..threads.len())
                .min_by(|&a, &b| clocks[threads[a]].total_cmp(&clocks[threads[b]]))
                .unwrap_or(0);
            rqs.push(RunQueue {
                threads,
                curr,
                slice_end: f64::NEG_INFINITY,
                free_at: 0.0,
                idle: false,
            });
        }
        if rqs.is_empty() {
            return None;
        }
        // SCHED_TUNABLESCALING_LOG: 1 + ilog2(min(CPUs, 8))
        let factor = 1.0 + (ncpus.clamp(1, 8) as f64).log2().floor();
        let (latency_ns, min_gran_ns) = if eevdf {
            (0.0, 750_000.0 * factor)
        } else {
            (6_000_000.0 * factor, 750_000.0 * factor)
        };
        let mut s = Scheduler {
            rqs,
            rq_of,
            latency_ns,
            min_gran_ns,
        };
        // every queue's first holder starts with a slice, from its clock
        for q in 0..s.rqs.len() {
            let rq = &s.rqs[q];
            let start = clocks[rq.threads[rq.curr]];
            s.rqs[q].slice_end = start + s.slice_ns(rq.threads.len());
        }
        Some(s)
    }

    /// A slice with `runnable` threads on the CPU, ns.
    pub fn slice_ns(&self, runnable: usize) -> f64 {
        (self.latency_ns / runnable.max(1) as f64).max(self.min_gran_ns)
    }

    /// Whether thread `t` holds its CPU (always, when the CPU is its alone).
    pub fn holds_cpu(&self, t: usize) -> bool {
        self.holder_for(t) == t
    }

    /// The thread holding the CPU `t` is placed on: `t` itself when the CPU is its alone.
    pub fn holder_for(&self, t: usize) -> usize {
        match self.rq_of[t] {
            None => t,
            Some(q) => {
                let rq = &self.rqs[q as usize];
                rq.threads[rq.curr]
            }
        }
    }

    /// A holder that stopped with nobody to take its CPU, and runs again at `clock`, gets a
    /// new slice from then.
    pub fn resume(&mut self, t: usize, clock: f64, runnable: impl Fn(usize) -> bool) {
        let Some(q) = self.rq_of[t] else { return };
        if std::mem::take(&mut self.rqs[q as usize].idle) {
            let n = self.runnable_count(q as usize, &runnable);
            self.rqs[q as usize].slice_end = clock + self.slice_ns(n);
        }
    }

    /// Where thread `t`'s turn must stop: the epoch's `end`, or its slice's end before it.
    pub fn turn_end(&self, t: usize, end: f64) -> f64 {
        match self.rq_of[t] {
            None => end,
            Some(q) => end.min(self.rqs[q as usize].slice_end),
        }
    }

    /// After thread `t` ran up to `clock` (or stopped: waiting or ended, `!runnable(t)`),
    /// whether its CPU goes to another thread: when its slice is over or it stopped, to the
    /// next runnable thread of the queue after it. A holder whose slice is over and that is
    /// alone runnable gets a new slice.
    pub fn after_turn(
        &mut self,
        t: usize,
        clock: f64,
        runnable: impl Fn(usize) -> bool,
    ) -> Option<Switch> {
        let q = self.rq_of[t]? as usize;
        let stopped = !runnable(t);
        if !stopped && clock < self.rqs[q].slice_end {
            return None;
        }
        if stopped {
            self.rqs[q].free_at = clock;
        }
        match self.hand_over(q, clock, &runnable) {
            Some(s) => Some(s),
            None => {
                if stopped {
                    self.rqs[q].idle = true;
                } else {
                    let n = self.runnable_count(q, &runnable);
                    self.rqs[q].slice_end = clock + self.slice_ns(n);
                }
                None
            }
        }
    }

    /// CPUs whose holder cannot run (it waits or ended) go to a runnable thread of their
    /// queue, from when the CPU was given up or the thread became runnable.
    pub fn idle_handovers(&mut self, runnable: impl Fn(usize) -> bool) -> Vec<Switch> {
        let mut out = Vec::new();
        for q in 0..self.rqs.len() {
            let rq = &self.rqs[q];
            if runnable(rq.threads[rq.curr]) {
                continue;
            }
            if let Some(s) = self.hand_over(q, rq.free_at, &runnable) {
                out.push(s);
            }
        }
        out
    }

    /// After the switch's cost, the new holder starts its slice at `start`.
    pub fn started(&mut self, to: usize, start: f64, runnable: impl Fn(usize) -> bool) {
        if let Some(q) = self.rq_of[to] {
            let n = self.runnable_count(q as usize, &runnable);
            self.rqs[q as usize].slice_end = start + self.slice_ns(n);
        }
    }

    fn runnable_count(&self, q: usize, runnable: &impl Fn(usize) -> bool) -> usize {
        self.rqs[q].threads.iter().filter(|&&t| runnable(t)).count()
    }

    /// Give queue `q`'s CPU to the next runnable thread after its holder, at `at`.
    fn hand_over(
        &mut self,
        q: usize,
        at: f64,
        runnable: &impl Fn(usize) -> bool,
    ) -> Option<Switch> {
        let rq = &mut self.rqs[q];
        let n = rq.threads.len();
        let from = rq.threads[rq.curr];
        let k = (1..n).find(|k| runnable(rq.threads[(rq.curr + k) % n]))?;
        rq.curr = (rq.curr + k) % n;
        rq.idle = false;
        Some(Switch {
            from,
            to: rq.threads[rq.curr],
            at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_without_shared_cpus_has_no_scheduler() {
        assert!(Scheduler::new(&[CpuId(0), CpuId(1)], &[0.0; 2], 2, false).is_none());
    }

    #[test]
    fn slices_follow_cfs_and_eevdf() {
        let cpus = [CpuId(0), CpuId(0), CpuId(0)];
        let cfs = Scheduler::new(&cpus, &[0.0; 3], 16, false).unwrap();
        // ×4 from 8 CPUs: latency 24 ms, min granularity 3 ms
        assert_eq!(cfs.slice_ns(2), 12_000_000.0);
        assert_eq!(cfs.slice_ns(16), 3_000_000.0);
        let eevdf = Scheduler::new(&cpus, &[0.0; 3], 16, true).unwrap();
        assert_eq!(eevdf.slice_ns(2), 3_000_000.0);
        // 2 CPUs: × (1 + log2 2) = 2
        let two = Scheduler::new(&cpus, &[0.0; 3], 2, false).unwrap();
        assert_eq!(two.slice_ns(2), 6_000_000.0);
    }

    #[test]
    fn the_cpu_goes_round_robin_to_runnable_threads() {
        // threads 0, 2, 3 on CPU 0; thread 1 alone on CPU 1
        let cpus = [CpuId(0), CpuId(1), CpuId(0), CpuId(0)];
        let mut s = Scheduler::new(&cpus, &[0.0; 4], 4, false).unwrap();
        assert!(s.holds_cpu(0) && s.holds_cpu(1) && !s.holds_cpu(2));
        let all = |_t: usize| true;
        s.started(0, 0.0, all);
        assert_eq!(s.turn_end(0, 1e9), s.slice_ns(3));
        assert_eq!(s.after_turn(0, 1.0, all), None, "slice not over");
        let sw = s.after_turn(0, s.slice_ns(3), all).unwrap();
        assert_eq!((sw.from, sw.to), (0, 2));
        // thread 3 waits: the CPU skips it
        let not3 = |t: usize| t != 3;
        s.started(2, 0.0, not3);
        let sw = s.after_turn(2, 1e9, not3).unwrap();
        assert_eq!(sw.to, 0);
        // the holder stops and nobody else can run: the CPU stays idle until one can
        let none = |_t: usize| false;
        assert_eq!(s.after_turn(0, 5.0, none), None);
        assert!(s.idle_handovers(none).is_empty());
        let only3 = |t: usize| t == 3;
        let sw = s.idle_handovers(only3);
        assert_eq!((sw[0].to, sw[0].at), (3, 5.0));
    }

    #[test]
    fn the_earliest_thread_holds_first_and_a_resumed_holder_gets_a_new_slice() {
        // thread 0 starts 1 s late (a start skew): thread 1 holds CPU 0 from its own start
        let cpus = [CpuId(0), CpuId(0)];
        let mut s = Scheduler::new(&cpus, &[1e9, 2.0], 16, false).unwrap();
        assert!(s.holds_cpu(1) && !s.holds_cpu(0));
        assert_eq!(s.turn_end(1, f64::MAX), 2.0 + s.slice_ns(2));
        // thread 1 waits and thread 0 cannot run yet: the CPU idles with thread 1, which
        // resumes with a whole slice
        let none = |_t: usize| false;
        assert_eq!(s.after_turn(1, 10.0, none), None);
        let all = |_t: usize| true;
        s.resume(1, 1e8, all);
        assert_eq!(s.turn_end(1, f64::MAX), 1e8 + s.slice_ns(2));
    }
}
