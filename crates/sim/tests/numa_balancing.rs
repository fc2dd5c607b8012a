//! Automatic NUMA balancing (reference/policies.md §2) and the THP split extension (§3) on
//! small hand-built scenarios with the real simulator. Time runs at `time_scale=0.001`: one
//! kernel second is one simulated millisecond, so scan delay and minimum period are 1 ms.

use numalab_core::{AccessKind, CpuId, MapOptions, MemPolicy, NodeId, NodeMask, Op, Workload};
use numalab_machine::Machine;
use numalab_sim::{simulate, NumaBalancingParams, Pinning, SimConfig, SimResult, ThpMode};

use numalab_workloads::script::Script;

type OpsFn = Box<dyn Fn(&[u64], usize) -> Vec<Op> + Send + Sync>;

/// 4 nodes of 4 CPUs: CPUs 0-3 node 0, 4-7 node 1, 8-11 node 2, 12-15 node 3.
fn machine() -> Machine {
    numalab_machine::preset("opteron8347he-4n").expect("preset exists")
}

const GHZ: f64 = 1.9;

fn compute_ms(ms: f64) -> Op {
    Op::Compute {
        cycles: (ms * GHZ * 1e6) as u32,
        instructions: 0,
    }
}

fn lines(start: u64, len: u64, kind: AccessKind) -> Op {
    Op::Run {
        base: start,
        lines: (len / 64) as u32,
        stride_bytes: 64,
        kind,
    }
}

const SCALED: &str = "numa-balancing:time_scale=0.001";

fn run(w: &dyn Workload, cpus: &[u32], thp: ThpMode, nb: Option<&str>) -> SimResult {
    run_cfg(w, cpus, thp, nb, SimConfig::default())
}

fn run_cfg(
    w: &dyn Workload,
    cpus: &[u32],
    thp: ThpMode,
    nb: Option<&str>,
    base: SimConfig,
) -> SimResult {
    let m = machine();
    assert_eq!(m.core.ghz, GHZ);
    let cfg = SimConfig {
        pinning: Pinning::Cpus(cpus.iter().map(|&c| CpuId(c)).collect()),
        thp,
        numa_balancing: nb.map(|s| NumaBalancingParams::parse(s).unwrap()),
        ..base
    };
    simulate(&m, w, cfg).unwrap()
}

/// khugepaged would collapse a split range again (all 512 base pages present): off, to
/// watch the subpages.
fn no_khugepaged() -> SimConfig {
    SimConfig {
        khugepaged_interval_ns: f64::INFINITY,
        ..Default::default()
    }
}

fn resident(r: &SimResult) -> Vec<u64> {
    r.per_node.iter().map(|n| n.resident_bytes).collect()
}

/// The counters agree with each other and with the per-task report.
fn check_counters(r: &SimResult) {
    let v = &r.vmstat;
    assert!(v.numa_hint_faults >= v.numa_hint_faults_local, "{v:?}");
    assert!(v.numa_pte_updates >= v.numa_hint_faults, "{v:?}");
    assert!(v.numa_pte_updates >= 512 * v.numa_huge_pte_updates, "{v:?}");
    // balancing is the only migrator in these runs
    assert_eq!(v.numa_pages_migrated, v.pgmigrate_success, "{v:?}");
    let rep = r.numa_balancing.as_ref().expect("balancing was on");
    let per_task: u64 = rep.tasks.iter().map(|t| t.numa_pages_migrated).sum();
    assert_eq!(per_task, v.numa_pages_migrated);
}

#[test]
fn parse_defaults_and_errors() {
    let p = NumaBalancingParams::parse("numa-balancing").unwrap();
    assert_eq!(p, NumaBalancingParams::default());
    assert_eq!(
        (p.scan_delay_ms, p.scan_period_min_ms, p.scan_period_max_ms),
        (1000.0, 1000.0, 60000.0)
    );
    assert_eq!(
        (p.scan_size_mb, p.period_slots, p.period_threshold),
        (256, 10, 7)
    );
    assert_eq!((p.active_node_fraction, p.smallimp, p.mode), (3, 30, 1));
    let q = NumaBalancingParams::parse("autonuma:mode=3,scan_size_mb=64,thp_split=1").unwrap();
    assert_eq!((q.mode, q.scan_size_mb), (3, 64));
    assert!(q.thp_split.unwrap().split);
    let e = NumaBalancingParams::parse("numa-balancing:scan_sise_mb=64").unwrap_err();
    assert!(e.contains("scan_sise_mb") && e.contains("scan_size_mb") && e.contains("thp_reset"));
    let e =
        NumaBalancingParams::parse("numa-balancing:scan_period_min_ms=5000,scan_period_max_ms=10")
            .unwrap_err();
    assert!(e.contains("scan_period_min_ms"), "{e}");
    assert!(NumaBalancingParams::parse("numa-balancing:mode=4").is_err());
}

/// Off by default: the prot_none path is never taken and no balancing state is reported.
#[test]
fn off_by_default_changes_nothing() {
    let w = Script {
        maps: vec![(1 << 20, MapOptions::default())],
        threads: 2,
        ops: Box::new(|b: &[u64], t: usize| {
            (0..20)
                .flat_map(|_| [lines(b[0], 1 << 20, AccessKind::Read), compute_ms(0.2)])
                .filter(|_| t == 1)
                .chain([Op::Barrier])
                .collect()
        }),
    };
    let r = run(&w, &[0, 8], ThpMode::Never, None);
    assert!(r.numa_balancing.is_none());
    assert_eq!(r.vmstat.numa_hint_faults, 0);
    assert_eq!(r.vmstat.numa_pte_updates, 0);
}

/// A single page: thread A (node 1) touches it; then, one access per round with a scan in
/// between, `who(round)` accesses it (0 = A on node 1, 1 = B on node 2).
fn one_page_rounds(rounds: &'static [usize]) -> Script<OpsFn> {
    Script {
        maps: vec![(2 << 20, MapOptions::default())],
        threads: 2,
        ops: Box::new(move |b: &[u64], t: usize| {
            let mut v = Vec::new();
            for &who in rounds {
                if who == t {
                    v.push(Op::Access {
                        addr: b[0],
                        kind: AccessKind::Write,
                    });
                }
                // several scan periods (at most 2 ms here) between two accesses
                v.push(compute_ms(5.0));
                v.push(Op::Barrier);
            }
            v
        }),
    }
}

const FILTER_NB: &str = "numa-balancing:time_scale=0.001,scan_period_max_ms=1000,task_placement=0";

#[test]
fn two_stage_filter_refuses_alternating_nodes_and_allows_two_in_a_row() {
    // A first-touches (node 1), A hint-faults (records A), then B and A alternate
    static ALTERNATING: [usize; 10] = [0, 0, 1, 0, 1, 0, 1, 0, 1, 0];
    let r = run(
        &one_page_rounds(&ALTERNATING),
        &[4, 8],
        ThpMode::Never,
        Some(FILTER_NB),
    );
    check_counters(&r);
    assert!(
        r.vmstat.numa_hint_faults >= 9,
        "every access after the first touch hint-faults: {:?}",
        r.vmstat
    );
    assert_eq!(
        r.vmstat.numa_pages_migrated, 0,
        "faults from alternating nodes never pass the filter"
    );
    assert_eq!(resident(&r), vec![0, 4096, 0, 0]);

    // the same, then B twice in a row: the second fault from node 2 migrates the page
    static THEN_TWICE: [usize; 12] = [0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1];
    let r = run(
        &one_page_rounds(&THEN_TWICE),
        &[4, 8],
        ThpMode::Never,
        Some(FILTER_NB),
    );
    check_counters(&r);
    assert_eq!(r.vmstat.numa_pages_migrated, 1, "{:?}", r.vmstat);
    assert_eq!(resident(&r), vec![0, 0, 4096, 0]);
    let b = &r.numa_balancing.as_ref().unwrap().tasks[1];
    assert_eq!(b.numa_pages_migrated, 1);
}

/// Thread 0 first-touches 4 MiB (twice the LLC), thread 1 then uses them alone, 20 times.
const PRIVATE_BYTES: u64 = 4 << 20;

fn private_pages() -> Script<OpsFn> {
    Script {
        maps: vec![(PRIVATE_BYTES, MapOptions::default())],
        threads: 2,
        ops: Box::new(|b: &[u64], t: usize| {
            let mut v = vec![];
            if t == 0 {
                v.push(lines(b[0], PRIVATE_BYTES, AccessKind::Write));
            }
            v.push(Op::Barrier);
            if t == 1 {
                for _ in 0..20 {
                    v.push(lines(b[0], PRIVATE_BYTES, AccessKind::Read));
                    v.push(compute_ms(0.5));
                }
            }
            v
        }),
    }
}

#[test]
fn private_page_follows_its_only_user() {
    // thread 0 on node 0, thread 1 on node 2
    const BYTES: u64 = PRIVATE_BYTES;
    let w = private_pages();
    let off = run(&w, &[0, 8], ThpMode::Never, None);
    assert_eq!(resident(&off), vec![BYTES, 0, 0, 0]);
    let on = run(&w, &[0, 8], ThpMode::Never, Some(SCALED));
    check_counters(&on);
    assert_eq!(resident(&on), vec![0, 0, BYTES, 0], "{:?}", on.vmstat);
    assert_eq!(on.vmstat.numa_pages_migrated, BYTES >> 12);
    let t1 = &on.numa_balancing.as_ref().unwrap().tasks[1];
    assert_eq!(t1.numa_pages_migrated, BYTES >> 12);
    // its pages became local after the first pass; a single-threaded mm does not protect
    // pages on its own node, so no later placement pass ran to set a preferred node
    let (lar_off, lar_on) = (
        off.metrics.lar_percent.unwrap(),
        on.metrics.lar_percent.unwrap(),
    );
    eprintln!("private page: LAR off {lar_off:.1} % on {lar_on:.1} %");
    assert!(
        lar_on > lar_off + 30.0,
        "LAR off {lar_off:.1} on {lar_on:.1}"
    );
}

/// Two threads on nodes 0 and 1 write their own half of each of `HUGE` 2 MiB pages
/// (4 MiB per thread, twice a node's LLC, so that accesses keep reaching DRAM).
const HUGE: u64 = 4;

fn shared_huge_pages(rounds: usize) -> Script<OpsFn> {
    Script {
        maps: vec![(HUGE << 21, MapOptions::default())],
        threads: 2,
        ops: Box::new(move |b: &[u64], t: usize| {
            let half = 1u64 << 20;
            let mut v = Vec::new();
            for _ in 0..rounds {
                for h in 0..HUGE {
                    v.push(lines(
                        b[0] + (h << 21) + t as u64 * half,
                        half,
                        AccessKind::Write,
                    ));
                }
                // different pauses: either thread may be first to touch a protected page
                // after a scan (threads run in turn within an epoch)
                v.push(compute_ms(0.3 + 0.17 * t as f64));
            }
            v
        }),
    }
}

#[test]
fn shared_huge_page_migrates_whole_and_is_never_split() {
    let r = run(
        &shared_huge_pages(30),
        &[0, 4],
        ThpMode::Always,
        Some(SCALED),
    );
    check_counters(&r);
    let v = &r.vmstat;
    assert_eq!(v.pgfault_2m, HUGE);
    assert_eq!(v.thp_split_page, 0, "balancing never splits a THP");
    assert!(
        v.numa_huge_pte_updates > 0 && v.numa_hint_faults > 0,
        "{v:?}"
    );
    assert_eq!(
        v.numa_pte_updates,
        512 * v.numa_huge_pte_updates,
        "a THP is one PMD, 512 PTEs"
    );
    assert_eq!(
        v.numa_pages_migrated,
        512 * v.thp_migration_success,
        "{v:?}"
    );
    // whole: every node holds whole huge pages, wherever they ended
    let res = resident(&r);
    assert!(res.iter().all(|b| b % (2 << 20) == 0), "{res:?}");
    assert_eq!(res.iter().sum::<u64>(), HUGE << 21);
    // stays or ping-pongs: half the accesses remain remote (THP false sharing)
    let lar = r.metrics.lar_percent.unwrap();
    eprintln!(
        "shared THPs: LAR {lar:.1} %, {} THP migrations, resident {res:?}",
        v.thp_migration_success
    );
    assert!((30.0..70.0).contains(&lar), "LAR {lar:.1}");
}

#[test]
fn thp_split_extension_splits_on_sharing_and_places_subpages() {
    let w = shared_huge_pages(30);
    let stock = run(&w, &[0, 4], ThpMode::Always, Some(SCALED));
    let split = run_cfg(
        &w,
        &[0, 4],
        ThpMode::Always,
        Some("numa-balancing:time_scale=0.001,thp_split=1"),
        no_khugepaged(),
    );
    check_counters(&split);
    assert_eq!(stock.vmstat.thp_split_page, 0);
    assert!(
        stock.vmstat.thp_migration_success >= 1,
        "{:?}",
        stock.vmstat
    );
    assert_eq!(split.vmstat.thp_split_page, HUGE, "{:?}", split.vmstat);
    // after the split each half moves to its user page by page
    let res = resident(&split);
    assert_eq!(
        res,
        vec![HUGE << 20, HUGE << 20, 0, 0],
        "{:?}",
        split.vmstat
    );
    let (lar_stock, lar_split) = (
        stock.metrics.lar_percent.unwrap(),
        split.metrics.lar_percent.unwrap(),
    );
    assert!(
        lar_split > lar_stock + 20.0,
        "LAR stock {lar_stock:.1} split {lar_split:.1}"
    );

    // all four toggles: the same end state
    let all = run_cfg(
        &w,
        &[0, 4],
        ThpMode::Always,
        Some("numa-balancing:time_scale=0.001,thp_split_all=1"),
        no_khugepaged(),
    );
    check_counters(&all);
    assert_eq!(all.vmstat.thp_split_page, HUGE);
    assert_eq!(resident(&all), vec![HUGE << 20, HUGE << 20, 0, 0]);
    let lar_all = all.metrics.lar_percent.unwrap();
    eprintln!(
        "THP halves: LAR stock {lar_stock:.1} % split {lar_split:.1} % all {lar_all:.1} %; \
         hint faults split {} all {}",
        split.vmstat.numa_hint_faults, all.vmstat.numa_hint_faults
    );
    assert!(lar_all > lar_stock + 20.0);
}

#[test]
fn scan_period_grows_when_local_and_shrinks_when_private_and_remote() {
    // thread 0 (node 0): phase 1 reads region A (local); phase 2 reads A and B, B bound to
    // node 1 with MPOL_F_NUMA_BALANCING (scanned, never migrated to node 0) and twice A's
    // size: private faults, 1/3 local. Thread 1 (node 0) only computes, so the mm has two
    // users and local pages are scanned too.
    let bind1 = MemPolicy::Bind {
        nodes: NodeMask::single(NodeId(1)),
        numa_balancing: true,
    };
    let w = Script {
        maps: vec![
            (1 << 20, MapOptions::default()),
            (
                2 << 20,
                MapOptions {
                    policy: Some(bind1),
                    ..Default::default()
                },
            ),
        ],
        threads: 2,
        ops: Box::new(|b: &[u64], t: usize| {
            let mut v = Vec::new();
            for round in 0..160 {
                if t == 0 {
                    v.push(lines(b[0], 1 << 20, AccessKind::Read));
                    if round >= 80 {
                        v.push(lines(b[1], 2 << 20, AccessKind::Read));
                    }
                } else if round == 0 {
                    // B is first-touched (on node 1, its policy) by the other thread
                    v.push(lines(b[1], 2 << 20, AccessKind::Write));
                }
                v.push(compute_ms(0.5));
                v.push(Op::Barrier);
            }
            v
        }),
    };
    let r = run(
        &w,
        &[0, 1],
        ThpMode::Never,
        Some("numa-balancing:time_scale=0.001,scan_period_max_ms=10000,task_placement=0"),
    );
    check_counters(&r);
    assert_eq!(r.vmstat.numa_pages_migrated, 0);
    let trace = &r.numa_balancing.as_ref().unwrap().tasks[0].scan_period_trace;
    assert!(trace.len() >= 6, "{trace:?}");
    let phase2 = r.per_thread[0].time_ns * 1e-6 / 2.0; // roughly where phase 2 begins, ms
    let peak = trace
        .iter()
        .filter(|(t, _)| *t < phase2)
        .map(|e| e.1)
        .fold(0.0, f64::max);
    let min_ms = 1.0; // scan_period_min 1000 ms scaled, one window
    assert!(
        peak >= 3.0 * min_ms,
        "local faults slow scanning down: {trace:?}"
    );
    let last = trace.last().unwrap().1;
    eprintln!(
        "scan period: start {:.2} ms, peak {peak:.2} ms, last {last:.2} ms",
        trace[0].1
    );
    // private remote faults speed it up again to the minimum and keep it there: a window
    // that catches more of A's local faults than of B's remote ones may double it once
    let tail = &trace[trace.len() - 10..];
    let at_min = tail.iter().filter(|e| e.1 <= min_ms + 1e-9).count();
    assert!(
        at_min >= 6 && tail.iter().all(|e| e.1 <= 2.0 * min_ms + 1e-9),
        "private remote faults speed it up again to the minimum: {trace:?}"
    );
}

#[test]
fn stream_serial_init_gets_local_with_balancing() {
    // STREAM initialised by the master alone: every page on node 0, then 16 threads on 4 nodes
    let m = machine();
    let w = numalab_workloads::by_spec("stream:n=1000000,ntimes=6,init=serial", 16).unwrap();
    let mk = |nb: Option<&str>| SimConfig {
        pinning: Pinning::Sockorder,
        numa_balancing: nb.map(|s| NumaBalancingParams::parse(s).unwrap()),
        ..Default::default()
    };
    let off = simulate(&m, w.as_ref(), mk(None)).unwrap();
    let on = simulate(&m, w.as_ref(), mk(Some(SCALED))).unwrap();
    check_counters(&on);
    let (lar_off, lar_on) = (
        off.metrics.lar_percent.unwrap(),
        on.metrics.lar_percent.unwrap(),
    );
    eprintln!(
        "stream serial init: LAR off {lar_off:.1} % on {lar_on:.1} %, time off {:.2} ms on {:.2} ms, migrated {} pages, hint faults {} ({} local)",
        off.sim_time_ns * 1e-6,
        on.sim_time_ns * 1e-6,
        on.vmstat.numa_pages_migrated,
        on.vmstat.numa_hint_faults,
        on.vmstat.numa_hint_faults_local
    );
    assert!(
        lar_off < 40.0,
        "off: 3 of 4 nodes read node 0, LAR {lar_off:.1}"
    );
    assert!(
        lar_on > lar_off + 25.0,
        "LAR off {lar_off:.1} on {lar_on:.1}"
    );
    let res = resident(&on);
    assert!(
        res.iter().all(|&b| b > 0),
        "pages spread to every node: {res:?}"
    );
}

/// Moves one range to a node once, at a given time (a stand-in for demotion by reclaim).
struct MoveOnce {
    at_ns: u64,
    to: NodeId,
    done: bool,
}

impl numalab_core::Policy for MoveOnce {
    fn name(&self) -> &str {
        "move-once"
    }
    fn period_ns(&self) -> u64 {
        1_000_000
    }
    fn tick(&mut self, view: &dyn numalab_core::MemoryView) -> Vec<numalab_core::Action> {
        if self.done || view.now_ns() < self.at_ns {
            return vec![];
        }
        self.done = true;
        view.regions()
            .into_iter()
            .map(|r| numalab_core::Action::Migrate {
                task: r.task,
                start: r.start,
                len_bytes: r.len_bytes,
                to: self.to,
            })
            .collect()
    }
}

#[test]
fn tiering_mode_promotes_slow_pages_to_the_fast_node() {
    // node 3 without CPUs is the slow tier; 4 MiB written on node 0 are moved there, then read
    const BYTES: u64 = 4 << 20;
    let mut m = machine();
    m.topology.nodes[3].cpus.clear();
    let w = Script {
        maps: vec![(BYTES, MapOptions::default())],
        threads: 1,
        ops: Box::new(|b: &[u64], _: usize| {
            let mut v = vec![lines(b[0], BYTES, AccessKind::Write), compute_ms(6.0)];
            for _ in 0..20 {
                v.push(lines(b[0], BYTES, AccessKind::Read));
                v.push(compute_ms(0.5));
            }
            v
        }),
    };
    let cfg = |nb: Option<&str>| SimConfig {
        pinning: Pinning::Cpus(vec![CpuId(0)]),
        numa_balancing: nb.map(|s| NumaBalancingParams::parse(s).unwrap()),
        policies: vec![Box::new(MoveOnce {
            at_ns: 4_000_000,
            to: NodeId(3),
            done: false,
        })],
        ..Default::default()
    };
    let off = simulate(&m, &w, cfg(None)).unwrap();
    assert_eq!(resident(&off), vec![0, 0, 0, BYTES]);
    let on = simulate(&m, &w, cfg(Some("numa-balancing:mode=2,time_scale=0.001"))).unwrap();
    let v = &on.vmstat;
    assert_eq!(resident(&on), vec![BYTES, 0, 0, 0], "{v:?}");
    assert_eq!(v.pgpromote_success, BYTES >> 12, "{v:?}");
    assert_eq!(v.numa_pages_migrated, BYTES >> 12);
    // the fast node had ample free memory: promoted at once, no candidate accounting
    assert_eq!(v.pgpromote_candidate, 0);
    // without the normal bit pages on the fast node are never protected
    assert_eq!(v.numa_pte_updates, v.numa_hint_faults, "{v:?}");
    assert!(on.metrics.lar_percent.unwrap() > off.metrics.lar_percent.unwrap() + 30.0);
}

/// task_numa_migrate honours affinity (issue "Trustworthy simulation II", item 9): CG with
/// THP on two Skylake nodes (three iterations: since zeroing huge pages is memory traffic, one
/// iteration ends before placement acts, and since session 32's UPI messages two end before
/// it moves a thread) makes balancing move and swap unpinned threads; pinned one per
/// core (OMP_PLACES=cores, round robin over nodes) the same run moves none of them. The
/// per-operation costs stay at full size (`scale_costs=0`): the scenario only has to make
/// placement act on unpinned threads, and it does so in this short run with them.
#[test]
fn balancing_never_moves_a_pinned_thread() {
    let m = numalab_machine::preset("xeon-gold6130-2n").unwrap();
    let run = |pinning: Pinning| {
        let w = numalab_workloads::by_spec("npb-cg:class=C,niter=3,scale=0.25", 32).unwrap();
        let cfg = SimConfig {
            pinning,
            thp: ThpMode::Always,
            sample_period: 0,
            numa_balancing: Some(
                NumaBalancingParams::parse("autonuma:time_scale=0.01,scale_costs=0").unwrap(),
            ),
            ..Default::default()
        };
        simulate(&m, w.as_ref(), cfg)
            .unwrap()
            .numa_balancing
            .unwrap()
    };
    let free = run(Pinning::None);
    assert!(
        free.task_moves + free.task_swaps > 0,
        "the scenario must make balancing move unpinned threads"
    );
    let pinned = run(Pinning::Sequential);
    assert_eq!((pinned.task_moves, pinned.task_swaps), (0, 0));
}

/// `time_scale` scales the per-operation costs too (`scale_costs`, on by default): the same
/// run pays hint faults and copies `time_scale` times as much as with `scale_costs=0`, and
/// migrates the same pages.
#[test]
fn time_scale_scales_the_per_operation_costs() {
    let p = NumaBalancingParams::parse(SCALED).unwrap();
    assert!(p.scale_costs);
    assert_eq!(p.cost_scale(), p.time_scale);
    let full = format!("{SCALED},scale_costs=0");
    assert_eq!(NumaBalancingParams::parse(&full).unwrap().cost_scale(), 1.0);
    let w = private_pages();
    let scaled = run(&w, &[0, 8], ThpMode::Never, Some(SCALED));
    let unscaled = run(&w, &[0, 8], ThpMode::Never, Some(&full));
    assert_eq!(
        scaled.vmstat.numa_pages_migrated,
        unscaled.vmstat.numa_pages_migrated
    );
    assert!(scaled.vmstat.numa_pages_migrated > 0);
    // thread 1 takes the hint faults and copies: its migration time per hint fault
    let per_fault = |r: &SimResult| r.per_thread[1].migration_ns / r.vmstat.numa_hint_faults as f64;
    let ratio = per_fault(&scaled) / per_fault(&unscaled);
    assert!(
        (ratio - p.time_scale).abs() < 0.01 * p.time_scale,
        "per hint fault {ratio:.5} of the unscaled cost, time_scale {}",
        p.time_scale
    );
}
