//! A process's page faults pass its mmap_lock's cache line one after another (os/mmap_lock.rs,
//! docs/model.md "OS model"): a first-touch storm of many threads faults no faster than the
//! line moves, the wait counted as fault time; a lone thread never waits. Faults on present
//! pages (kernel next-touch here; hinting faults take the same path) pass it too.

use numalab_core::view::{MemoryView, NextTouchMechanism};
use numalab_core::{AccessKind, Action, CpuId, MapOptions, Op, Policy, TaskId, ThreadId};
use numalab_machine::Machine;
use numalab_sim::os::mmap_lock::MmapLock;
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_workloads::script::Script;

const PAGES: u64 = 400;

fn machine() -> Machine {
    numalab_machine::preset("opteron6272-8n").unwrap()
}

/// `threads` threads of one process on CPUs 0..threads, each first-touching `PAGES` 4 KiB
/// pages of its own mapping (one write per page).
fn storm(threads: usize, epoch_us: f64) -> SimResult {
    let w = Script {
        maps: (0..threads)
            .map(|_| (PAGES * 4096, MapOptions::default()))
            .collect(),
        threads,
        ops: move |bases: &[u64], t: usize| {
            (0..PAGES)
                .map(|p| Op::Access {
                    addr: bases[t] + p * 4096,
                    kind: AccessKind::Write,
                })
                .collect()
        },
    };
    let cfg = SimConfig {
        pinning: Pinning::Cpus((0..threads as u32).map(CpuId).collect()),
        sample_period: 0,
        epoch_ns: epoch_us * 1000.0,
        ..Default::default()
    };
    simulate(&machine(), &w, cfg).unwrap()
}

/// The mean hold per fault of the storm's threads, from the model's own rule.
fn mean_hold_ns(threads: usize) -> f64 {
    let m = machine();
    let routes = numalab_machine::Routes::compute(m.topology.num_nodes(), &m.links).unwrap();
    let node = |cpu: usize| m.topology.node_of_cpu(CpuId(cpu as u32)).unwrap().index();
    let nodes: Vec<usize> = (0..threads).map(node).collect();
    let lock = MmapLock::for_machine(std::slice::from_ref(&nodes), &m, &routes);
    nodes.iter().map(|&n| lock.hold_ns(0, n)).sum::<f64>() / threads as f64
}

#[test]
fn a_lone_thread_never_waits_for_its_own_faults() {
    let r = storm(1, 20.0);
    let t = &r.per_thread[0];
    assert_eq!(t.faults, PAGES);
    let fault_4k_ns = machine().os.fault_4k_ns;
    assert!(
        (t.fault_ns - PAGES as f64 * fault_4k_ns).abs() < 1e-6,
        "{} ns in faults",
        t.fault_ns
    );
}

#[test]
fn a_first_touch_storm_faults_no_faster_than_the_lock_line_moves() {
    let threads = 64;
    let r = storm(threads, 20.0);
    let faults: u64 = r.per_thread.iter().map(|t| t.faults).sum();
    assert_eq!(faults, threads as u64 * PAGES);
    // 64 threads could fault 64 × faster than one; the line lets one fault through per hold
    let hold = mean_hold_ns(threads);
    assert!(hold > 200.0, "two remote transfers: {hold} ns");
    let rate = faults as f64 / r.sim_time_ns;
    assert!(
        rate <= 1.02 / hold && rate > 0.85 / hold,
        "{rate} faults per ns against a line that passes {} per ns",
        1.0 / hold
    );
    // the wait is time in the fault handler
    let alone = machine().os.fault_4k_ns * PAGES as f64;
    let most = r.per_thread.iter().map(|t| t.fault_ns).fold(0.0, f64::max);
    assert!(most > 10.0 * alone, "{most} ns in faults, {alone} ns alone");
}

#[test]
fn the_queue_does_not_depend_on_the_epoch_length() {
    let times: Vec<f64> = [5.0, 20.0, 100.0]
        .iter()
        .map(|&e| storm(64, e).sim_time_ns)
        .collect();
    let (lo, hi) = (
        times.iter().cloned().fold(f64::INFINITY, f64::min),
        times.iter().cloned().fold(0.0, f64::max),
    );
    assert!(hi / lo < 1.02, "{times:?}");
}

/// Marks the whole of mapping 0 for kernel next-touch from thread 0's hook at phase 1.
struct MarkAtPhase1;

impl Policy for MarkAtPhase1 {
    fn name(&self) -> &str {
        "mark-at-phase-1"
    }
    fn period_ns(&self) -> u64 {
        u64::MAX
    }
    fn tick(&mut self, _view: &dyn MemoryView) -> Vec<Action> {
        Vec::new()
    }
    fn on_phase(&mut self, view: &dyn MemoryView, thread: ThreadId, phase: u16) -> Vec<Action> {
        if thread.0 != 0 || phase != 1 {
            return Vec::new();
        }
        let r = &view.regions()[0];
        vec![Action::MarkNextTouch {
            task: TaskId(0),
            start: r.start,
            len_bytes: r.len_bytes,
            mechanism: NextTouchMechanism::Kernel,
        }]
    }
}

/// `threads` threads each first-touch their `PAGES` pages of one shared mapping (phase 0);
/// the mapping is then marked for kernel next-touch and each touches its pages again
/// (phase 2): a next-touch fault a page, each finding its page local already.
fn next_touch_storm(threads: usize) -> SimResult {
    let w = Script {
        maps: vec![(threads as u64 * PAGES * 4096, MapOptions::default())],
        threads,
        ops: move |bases: &[u64], t: usize| {
            let touch = |v: &mut Vec<Op>| {
                v.extend((0..PAGES).map(|p| Op::Access {
                    addr: bases[0] + (t as u64 * PAGES + p) * 4096,
                    kind: AccessKind::Write,
                }))
            };
            let mut v = vec![Op::Phase { id: 0 }];
            touch(&mut v);
            v.extend([
                Op::Barrier,
                Op::Phase { id: 1 },
                Op::Barrier,
                Op::Phase { id: 2 },
            ]);
            touch(&mut v);
            v
        },
    };
    let cfg = SimConfig {
        pinning: Pinning::Cpus((0..threads as u32).map(CpuId).collect()),
        sample_period: 0,
        policies: vec![Box::new(MarkAtPhase1)],
        ..Default::default()
    };
    simulate(&machine(), &w, cfg).unwrap()
}

#[test]
fn next_touch_faults_queue_on_the_lock_line_like_first_touches() {
    let threads = 64;
    let r = next_touch_storm(threads);
    let faults = threads as u64 * PAGES;
    assert_eq!(r.next_touch.kernel_faults, faults, "{:?}", r.next_touch);
    let p = r.phases.iter().find(|p| p.id == 2).expect("phase 2 ran");
    // each fault alone costs fault_4k_ns (the page is local: no copy), so 64 threads could
    // take 64 of them per fault_4k_ns; the line passes one per hold
    let hold = mean_hold_ns(threads);
    let fault_4k_ns = machine().os.fault_4k_ns;
    assert!(
        threads as f64 * hold > 4.0 * fault_4k_ns,
        "the storm offers the line {} times what it passes",
        threads as f64 * hold / fault_4k_ns
    );
    let rate = faults as f64 / (p.end_ns - p.start_ns);
    assert!(
        rate <= 1.02 / hold && rate > 0.8 / hold,
        "{rate} next-touch faults per ns against a line that passes {} per ns",
        1.0 / hold
    );
    // a lone thread's next-touch faults do not wait
    let alone = next_touch_storm(1);
    let p = alone.phases.iter().find(|p| p.id == 2).unwrap();
    let span = p.end_ns - p.start_ns;
    assert!(
        span < PAGES as f64 * fault_4k_ns * 1.2,
        "{span} ns for {PAGES} next-touch faults alone"
    );
}
