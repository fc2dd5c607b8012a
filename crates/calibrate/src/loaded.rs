//! Loaded latency (reference/machines.md §7.4), as Intel MLC's `--loaded_latency` measures it:
//! injector threads stream reads through a node's memory with a delay between lines, while
//! one thread chases pointers through another buffer on the same node. Each delay gives one
//! point: (bandwidth the node served, latency the chaser saw). Shorter delays load the
//! controller more; the points trace the node's bandwidth-latency curve.

use crate::chase::{chase, LINE_BYTES};
use crate::memory::{pin_to, NodeBuffer};
use crate::CalibrateError;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::Instant;

/// One level of injected load.
#[derive(Clone, Debug, Serialize)]
pub struct LoadedPoint {
    /// Delay-loop iterations (about a cycle each) between two lines an injector reads (0 = as
    /// fast as it can).
    pub delay_iters: u32,
    /// What the injectors and the chaser read from the node together, GB/s.
    pub served_gbps: f64,
    /// The chaser's latency under that load, ns per load.
    pub latency_ns: f64,
}

/// The delays of a sweep, most to least spacing, as MLC's (0 ... 20 000 cycles of delay).
/// One injector streaming sequentially is prefetched, so it reads about a line per delay:
/// at 2-3 GHz, 1 000 iterations are 1-2 GB/s an injector, 20 are tens.
pub const DELAYS_FULL: [u32; 8] = [2000, 800, 400, 200, 100, 50, 20, 0];
pub const DELAYS_QUICK: [u32; 3] = [400, 50, 0];

/// Measure one point: injectors on `injector_cpus` read `inj_buf` with `delay_iters` between
/// lines while a thread on `chaser_cpu` follows `loads` links of the chain at `chain_start`.
pub fn point(
    chaser_cpu: u32,
    injector_cpus: &[u32],
    chain_start: usize,
    inj_buf: &NodeBuffer,
    delay_iters: u32,
    loads: u64,
) -> Result<LoadedPoint, CalibrateError> {
    let stop = AtomicBool::new(false);
    let k = injector_cpus.len();
    let ready = Barrier::new(k + 1);
    let words = inj_buf.words();
    let slice_words = (words.len() / k.max(1)).max(LINE_BYTES / 8);
    let (chased, injected) = std::thread::scope(|s| {
        let injectors: Vec<_> = injector_cpus
            .iter()
            .enumerate()
            .map(|(i, &cpu)| {
                let lo = (i * slice_words).min(words.len());
                let slice = &words[lo..(lo + slice_words).min(words.len())];
                let (ready, stop) = (&ready, &stop);
                s.spawn(move || inject(cpu, slice, delay_iters, ready, stop))
            })
            .collect();
        let chaser = s.spawn(|| {
            let pinned = pin_to(chaser_cpu);
            ready.wait();
            let r = pinned.map(|_| {
                // Let the injectors reach their pace, then measure.
                let (_, p) = chase(chain_start, (loads / 4).max(8));
                chase(p, loads).0
            });
            stop.store(true, Ordering::Relaxed);
            r
        });
        let chased = chaser.join().expect("the chaser thread");
        let injected: Vec<_> = injectors
            .into_iter()
            .map(|h| h.join().expect("an injector thread"))
            .collect();
        (chased, injected)
    });
    let latency_ns = chased?;
    let mut served_gbps = LINE_BYTES as f64 / latency_ns;
    for r in injected {
        served_gbps += r?;
    }
    Ok(LoadedPoint {
        delay_iters,
        served_gbps,
        latency_ns,
    })
}

/// One injector: read one word of every line of `slice`, round and round, looping
/// `delay_iters` times between lines, until told to stop; its bandwidth in GB/s.
fn inject(
    cpu: u32,
    slice: &[u64],
    delay_iters: u32,
    ready: &Barrier,
    stop: &AtomicBool,
) -> Result<f64, CalibrateError> {
    let pinned = pin_to(cpu);
    ready.wait();
    pinned?;
    let step = LINE_BYTES / 8;
    let t = Instant::now();
    let mut lines = 0u64;
    let mut sum = 0u64;
    'outer: loop {
        for chunk in slice.chunks(step * 64) {
            for line in chunk.iter().step_by(step) {
                sum = sum.wrapping_add(*std::hint::black_box(line));
                // A counted loop, about a cycle an iteration (black_box keeps it), rather
                // than the pause instruction, whose length varies 10-fold across cores.
                for i in 0..delay_iters {
                    std::hint::black_box(i);
                }
            }
            lines += chunk.len().div_ceil(step) as u64;
            if stop.load(Ordering::Relaxed) {
                break 'outer;
            }
        }
    }
    std::hint::black_box(sum);
    Ok((lines * LINE_BYTES as u64) as f64 / t.elapsed().as_nanos().max(1) as f64)
}
