//! `numalab memhog`: allocate and touch memory under whatever policy the process has, report
//! which nodes its pages landed on, and optionally keep rewriting it while someone migrates
//! it, then verify every word (numactl ships `memhog` for the same purpose; this one also
//! reports placement and checks data, which is what numalab's in-VM tests need).

use numalab_core::NodeId;
use numalab_linux::syscalls::{move_pages_query, MovePagesOptions, PageStatus};
use numalab_linux::sysroot::Pid;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PAGE_BYTES: usize = 4096;

#[derive(Clone, Debug)]
pub struct MemhogOptions {
    pub size_bytes: usize,
    /// Threads rewriting disjoint slices of the buffer until the hold time ends.
    pub writers: usize,
    pub hold: Duration,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemhogReport {
    pub start: u64,
    pub end: u64,
    pub pages: u64,
    /// Pages per node right after the first touch and at the end.
    pub nodes_after_touch: BTreeMap<u16, u64>,
    pub nodes_at_end: BTreeMap<u16, u64>,
    pub not_present_at_end: u64,
    /// Completed rewrite passes over all slices.
    pub passes: u64,
    /// Words that did not hold the value last written: must be 0.
    pub corrupt_words: u64,
}

/// The value word `i` holds after pass `pass`: distinct per word and per pass, so a write
/// lost by a migration shows up as a stale value.
fn word(i: usize, pass: u64) -> u64 {
    (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ pass
}

fn placement(pages: &[usize]) -> Result<(BTreeMap<u16, u64>, u64), numalab_linux::Error> {
    let st = move_pages_query(Pid::SELF, pages, &MovePagesOptions::default())?;
    let mut h = BTreeMap::new();
    let mut absent = 0;
    for s in st {
        match s {
            PageStatus::OnNode(NodeId(n)) => *h.entry(n).or_insert(0) += 1,
            _ => absent += 1,
        }
    }
    Ok((h, absent))
}

/// Announce the buffer on stdout before holding, so a test or a user can target it with
/// `numalab migrate --pid PID --range START-END`.
pub fn run(
    opts: &MemhogOptions,
    announce: impl FnOnce(u64, u64),
) -> Result<MemhogReport, numalab_linux::Error> {
    let words = opts.size_bytes.div_ceil(8).max(PAGE_BYTES / 8);
    // try_reserve: a size the host cannot back is an error naming it, not an abort
    let mut buf: Vec<u64> = Vec::new();
    buf.try_reserve_exact(words)
        .map_err(|e| numalab_linux::Error::Argument {
            syscall: "memhog",
            problem: format!("cannot allocate {} bytes ({e})", words * 8),
            remedy: "give a smaller size, or free memory first".into(),
        })?;
    buf.extend((0..words).map(|i| word(i, 0)));
    let start = buf.as_ptr() as u64;
    let end = start + (words * 8) as u64;
    let pages: Vec<usize> = (0..words * 8)
        .step_by(PAGE_BYTES)
        .map(|o| start as usize + o)
        .collect();
    let (after_touch, _) = placement(&pages)?;
    announce(start, end);

    let writers = opts.writers.max(1);
    let stop = Arc::new(AtomicBool::new(false));
    let passes = Arc::new(AtomicU64::new(u64::MAX));
    let chunk = words.div_ceil(writers);
    let deadline = Instant::now() + opts.hold;
    let mut last_pass = vec![0u64; writers];
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (t, slice) in buf.chunks_mut(chunk).enumerate() {
            let stop = stop.clone();
            let passes = passes.clone();
            handles.push(s.spawn(move || {
                let base = t * chunk;
                let mut pass = 0u64;
                // At least one full pass, then until the hold time is over.
                loop {
                    pass += 1;
                    for (k, w) in slice.iter_mut().enumerate() {
                        // Volatile: the compiler must not fold passes together.
                        unsafe { std::ptr::write_volatile(w, word(base + k, pass)) };
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                passes.fetch_min(pass, Ordering::Relaxed);
                (t, pass)
            }));
        }
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let (t, p) = h.join().expect("writer thread");
            last_pass[t] = p;
        }
    });
    let mut corrupt = 0u64;
    for (i, w) in buf.iter().enumerate() {
        if *w != word(i, last_pass[i / chunk]) {
            corrupt += 1;
        }
    }
    let (at_end, absent) = placement(&pages)?;
    Ok(MemhogReport {
        start,
        end,
        pages: pages.len() as u64,
        nodes_after_touch: after_touch,
        nodes_at_end: at_end,
        not_present_at_end: absent,
        passes: passes.load(Ordering::Relaxed),
        corrupt_words: corrupt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touches_reports_and_verifies() {
        let opts = MemhogOptions {
            size_bytes: 4 << 20,
            writers: 2,
            hold: Duration::from_millis(50),
        };
        let mut announced = None;
        let r = run(&opts, |s, e| announced = Some((s, e))).unwrap();
        assert_eq!(announced, Some((r.start, r.end)));
        assert_eq!(r.pages, 1024);
        assert_eq!(
            r.nodes_after_touch.values().sum::<u64>(),
            1024,
            "every page present after the touch"
        );
        assert_eq!(
            r.nodes_at_end.values().sum::<u64>() + r.not_present_at_end,
            1024
        );
        assert!(r.passes >= 1);
        assert_eq!(r.corrupt_words, 0);
    }
}
