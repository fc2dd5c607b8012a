//! How threads leave an OpenMP barrier (docs/model.md, "Time and threads", `Barrier`).
//!
//! libgomp's barrier (config/linux/bar.c) is centralised: the waiters spin reading one word,
//! `bar->generation`, and the last thread to arrive releases them by storing the next
//! generation into it. That store invalidates the spinning cores' copies of the line; each
//! waiter leaves when its re-read of the line comes back, and the reads of one line are served
//! one after another (by the owner's cache, through the home node's serialisation point), each
//! taking a cache-line transfer from the releasing core's node to the reader's. So the waiters
//! do not leave together: they leave one transfer apart, on the order of a microsecond for a
//! node's threads and several for a 64-thread team spread over 8 nodes (Mellor-Crummey and
//! Scott, TOCS 1991: a centralised barrier's release is O(P) serialised remote references).
//!
//! Which waiter's read is served first depends on timing far below what the model resolves
//! (where each core is in its spin loop), so the order is drawn: a permutation per barrier
//! release from the run's seed, the task and the release's number. The draw depends on neither
//! the epoch length nor the order the engine runs threads in, and different seeds sample the
//! run-to-run variation it causes (which thread reaches a shared page first after a barrier).

/// Per task, the number of barrier releases so far (the draw's counter), and the cost of a
/// cache-line transfer between nodes.
pub struct BarrierDepartures {
    /// transfer_ns[from][to]: a line moved to a core of node `to` from one of node `from`.
    transfer_ns: Vec<Vec<f64>>,
    releases: Vec<u64>,
    seed: u64,
}

/// splitmix64's step: the draw's stream (stable on every host and run).
fn splitmix64(z: &mut u64) -> u64 {
    *z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut x = *z;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl BarrierDepartures {
    pub fn new(
        nodes: usize,
        tasks: usize,
        seed: u64,
        transfer_ns: impl Fn(usize, usize) -> f64,
    ) -> BarrierDepartures {
        BarrierDepartures {
            transfer_ns: (0..nodes)
                .map(|from| (0..nodes).map(|to| transfer_ns(from, to)).collect())
                .collect(),
            releases: vec![0; tasks],
            seed,
        }
    }

    /// The departure delays after the release of a barrier of `task` whose last arriver runs
    /// on `releaser_node`: for each waiter (given as its node, in thread order), how long
    /// after the release it leaves. The waiters' reads are served in a drawn order, each one
    /// transfer after the previous one.
    pub fn delays(
        &mut self,
        task: usize,
        releaser_node: usize,
        waiter_nodes: &[usize],
    ) -> Vec<f64> {
        let n = waiter_nodes.len();
        let mut order: Vec<usize> = (0..n).collect();
        let count = self.releases.get_mut(task).map_or(0, |c| {
            *c += 1;
            *c
        });
        let mut z = self.seed.wrapping_mul(0xd6e8_feb8_6659_fd93)
            ^ (task as u64).wrapping_mul(0xa076_1d64_78bd_642f)
            ^ count.wrapping_mul(0xe703_7ed1_a0b4_28db);
        // Fisher-Yates
        for i in (1..n).rev() {
            let j = (splitmix64(&mut z) % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        let mut delays = vec![0.0; n];
        let mut t = 0.0;
        for &w in &order {
            t += self.transfer_ns[releaser_node][waiter_nodes[w]];
            delays[w] = t;
        }
        delays
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> BarrierDepartures {
        BarrierDepartures::new(2, 2, 7, |a, b| if a == b { 20.0 } else { 100.0 })
    }

    #[test]
    fn waiters_leave_one_transfer_apart_in_a_drawn_order() {
        let mut b = two_nodes();
        let nodes = [0, 0, 1, 1, 1];
        let d = b.delays(0, 0, &nodes);
        // every waiter leaves after the release, the last after all five transfers
        let mut sorted = d.clone();
        sorted.sort_by(f64::total_cmp);
        assert!(
            (sorted[4] - (2.0 * 20.0 + 3.0 * 100.0)).abs() < 1e-9,
            "{d:?}"
        );
        // consecutive departures are one transfer to the later waiter apart
        for w in 0..5 {
            let before = sorted
                .iter()
                .rev()
                .find(|&&x| x < d[w])
                .copied()
                .unwrap_or(0.0);
            let step = if nodes[w] == 0 { 20.0 } else { 100.0 };
            assert!((d[w] - before - step).abs() < 1e-9, "{d:?}");
        }
    }

    #[test]
    fn the_order_is_a_function_of_seed_task_and_release_only() {
        let nodes = [0, 1, 0, 1, 0, 1, 0, 1];
        let (mut a, mut b) = (two_nodes(), two_nodes());
        let first = a.delays(0, 0, &nodes);
        assert_eq!(
            first,
            b.delays(0, 0, &nodes),
            "the same draw on a second run"
        );
        // the next release of the same task draws again; another task has its own counter
        let second = a.delays(0, 0, &nodes);
        assert_ne!(first, second);
        assert_eq!(b.delays(1, 0, &nodes), a.delays(1, 0, &nodes));
        // another seed, another order (the run-to-run variation --repeats samples)
        let mut c = BarrierDepartures::new(2, 2, 8, |a, b| if a == b { 20.0 } else { 100.0 });
        assert_ne!(c.delays(0, 0, &nodes), first);
    }
}
