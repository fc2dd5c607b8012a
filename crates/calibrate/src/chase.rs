//! Idle latency by pointer chase (reference/machines.md §7.2): one random cyclic chain over
//! every cache line of a buffer, each line holding the address of the next, followed by one
//! thread. Every load depends on the one before, so the time per load is the load-to-use
//! latency; the order is random over the whole buffer, so neither the caches (the buffer is
//! several times the LLC) nor the prefetchers help.

use crate::memory::NodeBuffer;
use std::time::Instant;

pub const LINE_BYTES: usize = 64;

/// Lay the chain: a random permutation of the lines, each pointing at the next in the
/// permutation and the last at the first, so one cycle visits every line. Returns the first
/// line's address.
pub fn lay_chain(buf: &NodeBuffer, seed: u64) -> usize {
    let lines = buf.len() / LINE_BYTES;
    let mut order: Vec<u32> = (0..lines as u32).collect();
    fastrand::Rng::with_seed(seed).shuffle(&mut order);
    let base = buf.addr();
    for (i, &line) in order.iter().enumerate() {
        let next = order[(i + 1) % lines];
        let at = base + line as usize * LINE_BYTES;
        // SAFETY: both lines lie inside the buffer; nothing reads it while it is laid.
        unsafe { std::ptr::write_volatile(at as *mut usize, base + next as usize * LINE_BYTES) };
    }
    base + order[0] as usize * LINE_BYTES
}

/// Follow the chain for `loads` loads from `start` (an address `lay_chain` returned, or one
/// this function returned): (nanoseconds per load, where it stopped).
pub fn chase(start: usize, loads: u64) -> (f64, usize) {
    let t = Instant::now();
    let mut p = start;
    // Unrolled by 8 so that the loop's own branch is a small share of the time; every load
    // still waits for the one before.
    for _ in 0..loads / 8 {
        // SAFETY: every address in the chain is a line of the buffer, which outlives the chase.
        unsafe {
            p = std::ptr::read_volatile(p as *const usize);
            p = std::ptr::read_volatile(p as *const usize);
            p = std::ptr::read_volatile(p as *const usize);
            p = std::ptr::read_volatile(p as *const usize);
            p = std::ptr::read_volatile(p as *const usize);
            p = std::ptr::read_volatile(p as *const usize);
            p = std::ptr::read_volatile(p as *const usize);
            p = std::ptr::read_volatile(p as *const usize);
        }
    }
    let ns = t.elapsed().as_nanos() as f64;
    (ns / (loads / 8 * 8).max(1) as f64, p)
}

/// The median of `runs` chases of `loads` loads each after a warm-up of a tenth as many
/// (which brings the buffer's translations into the TLBs), ns per load.
pub fn median_latency_ns(start: usize, loads: u64, runs: usize) -> f64 {
    let (_, mut p) = chase(start, (loads / 10).max(8));
    let mut v: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let (ns, next) = chase(p, loads);
            p = next;
            ns
        })
        .collect();
    median(&mut v)
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Pages;

    #[test]
    fn the_chain_is_one_cycle_through_every_line() {
        // Node 0 exists on every Linux machine with CONFIG_NUMA, as on this host and in CI.
        let buf = match NodeBuffer::new(2 << 20, 0, Pages::Base, true) {
            Ok(b) => b,
            Err(e) => panic!("a 2 MiB buffer on node 0: {e}"),
        };
        let start = lay_chain(&buf, 7);
        let lines = buf.len() / LINE_BYTES;
        let mut seen = vec![false; lines];
        let mut p = start;
        for _ in 0..lines {
            let line = (p - buf.addr()) / LINE_BYTES;
            assert!(
                !seen[line],
                "line {line} visited twice before the cycle closed"
            );
            seen[line] = true;
            p = unsafe { std::ptr::read_volatile(p as *const usize) };
        }
        assert_eq!(p, start, "the chain closes after every line");
        assert!(seen.iter().all(|&s| s));
        let (ns, _) = chase(start, 1000);
        assert!(ns.is_finite() && ns > 0.0);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }
}
