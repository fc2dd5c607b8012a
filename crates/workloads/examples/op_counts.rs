//! Print what each thread of a workload emits, without simulating it.
//!
//! `cargo run --release -p numalab-workloads --example op_counts -- 'npb-cg:class=B,niter=1' 16`
//! (add `--build-only` to time the build alone).

use numalab_workloads::inspect::{summarize, BumpSpace};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let spec = args
        .next()
        .unwrap_or_else(|| "npb-cg:class=B,niter=1".into());
    let threads: usize = args
        .next()
        .map(|t| t.parse().expect("threads must be a number"))
        .unwrap_or(16);
    let w = numalab_workloads::by_spec(&spec, threads).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let mut space = BumpSpace::new();
    let started = Instant::now();
    let mut specs = w.build(&mut space);
    let build_s = started.elapsed().as_secs_f64();
    println!(
        "workload {} ({} threads), build {:.3} s",
        w.name(),
        w.threads(),
        build_s
    );
    for m in &space.mappings {
        println!("  map {:<14} {:>14} B", m.name, m.bytes);
    }
    if args.next().as_deref() == Some("--build-only") {
        return;
    }
    // raw generation speed: drain a fresh copy of thread 0's program, doing nothing with the ops
    {
        let mut fresh = w.build(&mut BumpSpace::new());
        let mut buf = Vec::with_capacity(8192);
        let (mut n, started) = (0u64, Instant::now());
        loop {
            buf.clear();
            let more = fresh[0].program.fill(&mut buf);
            n += buf.len() as u64;
            if !more {
                break;
            }
        }
        let s = started.elapsed().as_secs_f64();
        println!(
            "thread 0 alone: {n} ops generated in {s:.2} s ({:.0} M ops/s)",
            n as f64 / s / 1e6
        );
    }
    println!(
        "{:>6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>8} {:>14}",
        "thread", "ops", "line refs", "reads", "writes", "rmw", "barriers", "compute cyc"
    );
    let started = Instant::now();
    let (mut ops, mut lines) = (0u64, 0u64);
    let mut per_phase = std::collections::BTreeMap::<u16, u64>::new();
    let mut phase_names: &[&str] = &[];
    for (t, s) in specs.iter_mut().enumerate() {
        phase_names = s.program.phase_names();
        let r = summarize(s, &space, None);
        println!(
            "{t:>6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>8} {:>14}",
            r.ops,
            r.lines,
            r.reads + r.dependent_reads,
            r.writes,
            r.rmws,
            r.barriers,
            r.compute_cycles
        );
        assert_eq!(r.out_of_range, 0, "thread {t} touched unmapped memory");
        ops += r.ops;
        lines += r.lines;
        for (p, l) in r.lines_per_phase {
            *per_phase.entry(p).or_default() += l;
        }
    }
    let drain_s = started.elapsed().as_secs_f64();
    println!(
        "total: {ops} ops, {lines} line references, drained in {drain_s:.2} s ({:.0} M ops/s)",
        ops as f64 / drain_s / 1e6
    );
    for (p, l) in per_phase {
        println!(
            "  phase {:<12} {l:>14} line references",
            phase_names.get(p as usize).copied().unwrap_or("?")
        );
    }
}
