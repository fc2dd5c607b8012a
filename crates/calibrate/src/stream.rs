//! Read bandwidth (reference/machines.md §7.3): threads pinned one per CPU, each streaming
//! through its own slice of a buffer on one node, as MLC's `--bandwidth_matrix` does with its
//! default all-reads traffic. The diagonal (a node's CPUs reading their own node) is the
//! controller's sustained peak; off the diagonal, the route's bottleneck.

use crate::memory::{pin_to, NodeBuffer};
use crate::CalibrateError;
use std::sync::Barrier;
use std::time::Instant;

/// Sum a slice of words with eight independent accumulators, so the loop is bound by memory,
/// not by one addition chain (the compiler vectorises it).
pub fn sum_words(s: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = s.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            acc[i] = acc[i].wrapping_add(c[i]);
        }
    }
    acc.iter().chain(rest).fold(0u64, |a, &x| a.wrapping_add(x))
}

/// GB/s (10^9 B/s) that `cpus`, one thread each, read from `buf` together, each reading its
/// own slice until the threads have read about `total_bytes` between them. The clock runs
/// from the first reader's start, once every thread is pinned and ready, to the last one's
/// end. Each reader takes its own times: a coordinating thread's clock read after the start
/// barrier could come after the readers had finished, when it waits for a busy CPU.
pub fn read_gbps(cpus: &[u32], buf: &NodeBuffer, total_bytes: u64) -> Result<f64, CalibrateError> {
    let k = cpus.len().max(1);
    let words = buf.words();
    let slice_words = (words.len() / k).max(8);
    let share = total_bytes / k as u64;
    let passes = share.div_ceil((slice_words * 8) as u64).max(1);
    let ready = Barrier::new(k);
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = cpus
            .iter()
            .enumerate()
            .map(|(i, &cpu)| {
                let slice = &words
                    [(i * slice_words).min(words.len())..((i + 1) * slice_words).min(words.len())];
                let ready = &ready;
                s.spawn(move || {
                    let pinned = pin_to(cpu);
                    ready.wait();
                    let start = Instant::now();
                    let mut sum = 0u64;
                    if pinned.is_ok() {
                        for _ in 0..passes {
                            sum = sum.wrapping_add(sum_words(std::hint::black_box(slice)));
                        }
                    }
                    std::hint::black_box(sum);
                    let end = Instant::now();
                    pinned.map(|_| (slice.len() as u64 * 8 * passes, start, end))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a reader thread"))
            .collect::<Vec<_>>()
    });
    let mut bytes = 0u64;
    let mut span: Option<(Instant, Instant)> = None;
    for r in results {
        let (b, start, end) = r?;
        bytes += b;
        span = Some(span.map_or((start, end), |(s, e)| (s.min(start), e.max(end))));
    }
    let ns = span.map_or(1, |(s, e)| e.duration_since(s).as_nanos().max(1));
    Ok(bytes as f64 / ns as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_word() {
        let v: Vec<u64> = (1..=21).collect();
        assert_eq!(sum_words(&v), 21 * 22 / 2);
        assert_eq!(sum_words(&[]), 0);
        assert_eq!(sum_words(&[u64::MAX, 2]), 1);
    }
}
