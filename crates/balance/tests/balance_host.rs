//! numalab-balance on the host (one NUMA node is enough): the view of a live child process,
//! sample replay, the executor's per-page accounting (moves to node 0 are no-ops here), the
//! actions Linux cannot do on another process, and validation before anything is applied.

mod common;

use common::{sample, write_samples, Child, PAGE};
use numalab_balance::replay::PidFilter;
use numalab_balance::{
    BalanceOptions, Balancer, Executor, LinuxView, OutcomeKind, Replay, StopReason,
};
use numalab_core::view::MemoryView;
use numalab_core::{Action, CpuId, MemPolicy, NodeId, NodeMask, PageSize, TaskId, ThreadId};
use numalab_linux::SysRoot;
use std::path::PathBuf;

const CHILD: &str = "child_process_body";

#[test]
fn child_process_body() {
    common::child_body();
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("numalab-balance-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn opts(pid: i32, policy: &str, samples: PathBuf) -> BalanceOptions {
    BalanceOptions {
        pid,
        policy: policy.into(),
        samples,
        period_ns: Some(100_000_000),
        ticks: None,
        dry_run: false,
        pace: false,
    }
}

#[test]
fn view_shows_the_childs_regions_threads_and_pages() {
    let c = Child::spawn(CHILD, 64 * PAGE as usize, None);
    let mut v = LinuxView::new(c.pid, SysRoot::host()).unwrap();
    let regions = v.regions();
    let buf = regions
        .iter()
        .find(|r| r.start <= c.addr && c.addr < r.start + r.len_bytes)
        .expect("the buffer is a region");
    assert!(buf.start + buf.len_bytes >= c.addr + c.len);
    assert_eq!(buf.task, TaskId(c.pid as u32));
    assert_eq!(
        buf.thp_advice,
        Some(false),
        "the child gave MADV_NOHUGEPAGE"
    );
    assert!(!regions.iter().any(|r| r.name == "[vdso]"));
    // the main thread and the one waiting on stdin, on CPUs of this host's nodes
    let threads = v.threads();
    assert!(threads.len() >= 2, "{threads:?}");
    assert!(threads.iter().any(|t| t.thread == ThreadId(c.pid as u32)));
    for t in &threads {
        assert!(v.node_cpus(t.node).contains(&t.cpu), "{t:?}");
    }
    // touched pages are on a node with memory, as 4 KiB pages; the last one was never touched
    let task = TaskId(c.pid as u32);
    for i in [0, 1, 30, 62] {
        let p = v.page(task, c.page(i) + 123).expect("touched page present");
        assert_eq!(p.start, c.page(i));
        assert_eq!(p.size, PageSize::Base4K);
        assert!(v.free_bytes(p.node) > 0);
    }
    assert_eq!(v.page(task, c.page(63)), None);
    assert_eq!(v.page(TaskId(1), c.page(0)), None, "another task's page");
    assert!(v.num_nodes() >= 1);
    assert_eq!(v.distance(NodeId(0), NodeId(0)), 10);

    // a period's samples: node traffic counts `period` events per DRAM sample, page nodes
    // filled in from the query; a CPU node this host lacks cannot be placed
    let node = v.page(task, c.page(0)).unwrap().node;
    let far = v.num_nodes() as u16;
    let recs = vec![
        sample(c.pid, 0, c.page(0), 0, node.0),
        sample(c.pid, 10, c.page(1), 0, node.0),
        sample(c.pid, 20, c.page(63), 0, node.0), // absent page: no node to count
        sample(c.pid, 30, c.page(2), 0, far),
    ];
    let st = v.refresh(1_000, &recs, 1000).unwrap();
    assert_eq!(st.samples, 4);
    assert_eq!(st.dram_samples, 2);
    assert_eq!(st.unplaced_samples, 2);
    assert_eq!(st.served[node.index()][node.index()], 2000);
    assert_eq!(v.node_traffic().served[node.index()][node.index()], 2000);
    assert_eq!(v.samples().len(), 2);
    assert!(v
        .samples()
        .iter()
        .all(|s| s.page_node == node && s.is_local()));
    assert_eq!(v.now_ns(), 1_000);
    let tc = v.thread_counters(ThreadId(c.pid as u32));
    assert_eq!((tc.loads, tc.remote_loads), (2000, 0));
    if v.counter_report().source == "samples" {
        // no PMU: LLC misses are the DRAM samples × period
        assert_eq!(tc.llc_misses, 2000);
    }
    // cumulative, like hardware counters
    v.refresh(2_000, &recs[..1], 1000).unwrap();
    assert_eq!(v.node_traffic().served[node.index()][node.index()], 3000);
    assert_eq!(c.finish().split(' ').nth(1), Some("ok"));
}

#[test]
fn moves_to_the_current_node_are_no_ops_and_the_impossible_is_skipped() {
    let c = Child::spawn(CHILD, 32 * PAGE as usize, None);
    let v = LinuxView::new(c.pid, SysRoot::host()).unwrap();
    let task = TaskId(c.pid as u32);
    let node = v.page(task, c.page(0)).unwrap().node;
    let ex = Executor::new(c.pid, v.topology().has_memory, false);

    let o = ex.apply(&Action::MovePages {
        task,
        pages: (0..8).map(|i| (c.page(i), node)).collect(),
    });
    assert_eq!(o.result, OutcomeKind::Applied, "{o:?}");
    assert_eq!((o.pages_asked, o.already_there, o.pages_moved), (8, 8, 0));

    // the whole buffer: 31 touched pages already there, the last one not present
    let o = ex.apply(&Action::Migrate {
        task,
        start: c.addr,
        len_bytes: c.len,
        to: node,
    });
    assert_eq!((o.pages_asked, o.already_there, o.pages_moved), (32, 31, 0));
    assert_eq!(o.not_moved.get("not-present"), Some(&1), "{o:?}");

    let o = ex.apply(&Action::Interleave {
        task,
        start: c.addr,
        len_bytes: 4 * PAGE,
        nodes: NodeMask::single(node),
    });
    assert_eq!((o.already_there, o.pages_moved), (4, 0));

    // a node without memory (beyond the host's nodes) takes nothing and moves nothing
    let o = ex.apply(&Action::MovePages {
        task,
        pages: vec![(c.page(0), NodeId(200))],
    });
    assert_eq!(o.not_moved.get("no-memory-node"), Some(&1), "{o:?}");

    // another process's memory is not touched
    let o = ex.apply(&Action::Migrate {
        task: TaskId(1),
        start: 0,
        len_bytes: PAGE,
        to: node,
    });
    assert_eq!(o.result, OutcomeKind::Skipped);

    for a in [
        Action::SetRangePolicy {
            task,
            start: c.addr,
            len_bytes: c.len,
            policy: MemPolicy::Local,
        },
        Action::SetTaskPolicy {
            task,
            policy: MemPolicy::Local,
        },
        Action::MarkNextTouch {
            task,
            start: c.addr,
            len_bytes: c.len,
            mechanism: numalab_core::NextTouchMechanism::Kernel,
        },
        Action::SetThpAllocation {
            allocate: false,
            promote: false,
        },
        // the kernel's process_madvise refuses THP advice (or is missing)
        Action::SetThpAdvice {
            task,
            start: c.addr,
            len_bytes: c.len,
            allow: true,
        },
    ] {
        let o = ex.apply(&a);
        assert_eq!(o.result, OutcomeKind::Skipped, "{a:?}: {o:?}");
        assert!(o.reason.as_deref().is_some_and(|r| r.len() > 20), "{o:?}");
    }

    // lazy migration is done eagerly: the populated pages not on the target would move; here
    // they are all there already (one node), the never-touched page is left alone
    let o = ex.apply(&Action::LazyMigrate {
        task,
        start: c.addr,
        len_bytes: c.len,
        to: node,
    });
    assert_eq!(o.result, OutcomeKind::Applied, "{o:?}");
    assert_eq!((o.pages_asked, o.already_there, o.pages_moved), (32, 31, 0));
    assert_eq!(o.not_moved.get("not-present"), Some(&1), "{o:?}");
    assert_eq!(o.reason.as_deref(), Some(numalab_balance::exec::LAZY_EAGER));
    assert!(o.reason.unwrap().contains("cannot be intercepted"));

    // a percentage task policy without a MovePages says that only placed pages can move
    let pct = Action::SetTaskPolicy {
        task,
        policy: MemPolicy::RemotePercent {
            percent: 30,
            remote: NodeMask::single(node),
        },
    };
    let out = ex.apply_all(std::slice::from_ref(&pct));
    assert_eq!(out[0].result, OutcomeKind::Skipped);
    let why = out[0].reason.clone().unwrap();
    assert!(why.contains("set_mempolicy"), "{why}");
    assert!(why.contains("only pages already placed"), "{why}");
    assert!(why.contains("move=1"), "{why}");
    // with the pages moved in the same tick, the plain reason
    let out = ex.apply_all(&[
        pct,
        Action::MovePages {
            task,
            pages: vec![(c.page(0), node)],
        },
    ]);
    assert_eq!(out[0].result, OutcomeKind::Skipped);
    assert!(!out[0].reason.as_deref().unwrap().contains("move=1"));
    assert_eq!(out[1].already_there, 1);

    // a split without debugfs' split_huge_pages says why
    let mut ex2 = Executor::new(c.pid, v.topology().has_memory, false);
    ex2.split_file = tmp("no-such-split-file");
    let o = ex2.apply(&Action::SplitHuge { task, addr: c.addr });
    assert_eq!(o.result, OutcomeKind::Skipped);
    assert!(o.reason.unwrap().contains("debugfs"));

    // a thread moves to a CPU of its node; a thread of another process is refused
    let cpu = v.node_cpus(node)[0];
    let o = ex.apply(&Action::MoveThread {
        thread: ThreadId(c.pid as u32),
        cpu,
    });
    assert_eq!(o.result, OutcomeKind::Applied, "{o:?}");
    let o = ex.apply(&Action::MoveThread {
        thread: ThreadId(1),
        cpu: CpuId(0),
    });
    assert_eq!(o.result, OutcomeKind::Skipped);

    // a dry run queries but changes nothing
    let dry = Executor::new(c.pid, v.topology().has_memory, true);
    let o = dry.apply(&Action::MovePages {
        task,
        pages: vec![(c.page(0), node)],
    });
    assert_eq!(o.result, OutcomeKind::DryRun);

    // migrate_pages: from the node the buffer is on to itself moves nothing; to a node
    // without memory it is skipped, saying so; a dry run counts the pages it would move
    let here = NodeMask::single(node);
    let o = ex.apply(&Action::MigrateProcess {
        task,
        from: here,
        to: here,
    });
    assert_eq!(
        (o.result, o.pages_asked, o.pages_moved),
        (OutcomeKind::Applied, 0, 0)
    );
    let nowhere = NodeId(node.0 + 1);
    let o = ex.apply(&Action::MigrateProcess {
        task,
        from: here,
        to: NodeMask::single(nowhere),
    });
    assert_eq!(o.result, OutcomeKind::Skipped, "{o:?}");
    assert!(o.reason.unwrap().contains("have no memory"));
    let mut pretend = v.topology().has_memory;
    pretend.set(nowhere);
    let dry = Executor::new(c.pid, pretend, true);
    let o = dry.apply(&Action::MigrateProcess {
        task,
        from: here,
        to: NodeMask::single(nowhere),
    });
    assert_eq!(o.result, OutcomeKind::DryRun);
    assert!(o.pages_asked >= 31, "{o:?}");
    assert_eq!(c.finish().split(' ').nth(1), Some("ok"));
}

#[test]
fn replay_cuts_the_file_into_periods_and_filters_pids() {
    let path = tmp("replay.arrows");
    let t0 = 5_000_000_000u64; // times relative to the first sample
    let mut recs = Vec::new();
    for i in 0..10u64 {
        recs.push(sample(42, t0 + i * 30_000_000, 0x1000 * (i + 1), 0, 0));
    }
    recs.push(sample(7, t0 + 50_000_000, 0x9000, 0, 0));
    // out of order: an old sample is handed out with the current window
    recs.push(sample(42, t0 - 1, 0x1000, 0, 0));
    write_samples(&path, &recs, 100, 1);
    let mut r = Replay::open(&path).unwrap();
    let pids = r.probe().unwrap();
    assert_eq!(pids.get(&42), Some(&11));
    assert_eq!(pids.get(&7), Some(&1));
    assert_eq!(r.sample_period(), 100);
    r.set_filter(PidFilter::Only(42));
    // [0, 100 ms): times 0, 30, 60, 90
    assert_eq!(r.window(100_000_000).unwrap().len(), 4);
    // samples are taken in file order: pid 7's comes after 270 ms in the file
    assert_eq!(r.other_pid_samples, 0);
    // [100, 200 ms): 120, 150, 180
    assert_eq!(r.window(200_000_000).unwrap().len(), 3);
    // [200, 300): 210, 240, 270, then (late, so in this window) pid 7's, dropped, and the
    // old one of pid 42
    assert_eq!(r.window(300_000_000).unwrap().len(), 4);
    assert_eq!(r.other_pid_samples, 1);
    assert!(!r.exhausted() || r.window(400_000_000).unwrap().is_empty());
    assert!(r.window(10_000_000_000).unwrap().is_empty());
    assert!(r.exhausted());
}

#[test]
fn balance_runs_a_policy_on_a_live_process_until_the_samples_end() {
    let c = Child::spawn(CHILD, 64 * PAGE as usize, None);
    let node = {
        let v = LinuxView::new(c.pid, SysRoot::host()).unwrap();
        v.page(TaskId(c.pid as u32), c.page(0)).unwrap().node
    };
    let path = tmp("run.arrows");
    // 3 periods of 100 ms; local accesses only: LAR 100 %, nothing to migrate
    let recs: Vec<_> = (0..300u64)
        .map(|i| sample(c.pid, i * 1_000_000, c.page(i % 60), 0, node.0))
        .collect();
    write_samples(&path, &recs, 100_000, 1);
    let mut b = Balancer::new(opts(c.pid, "carrefour:maptu_min=0", path.clone())).unwrap();
    assert!(b.warnings.is_empty(), "{:?}", b.warnings);
    let mut lines = Vec::new();
    let (stop, ticks) = b.run(|t| lines.push(t.line())).unwrap();
    assert_eq!(stop, StopReason::SamplesExhausted);
    assert_eq!(ticks.len(), 3, "{lines:?}");
    for t in &ticks {
        assert_eq!(t.samples, 100);
        assert_eq!(t.dram_samples, 100);
        assert_eq!(t.lar_percent, Some(100.0));
        assert_eq!(t.pages_moved, 0);
        assert!(t.actions.is_empty(), "{:?}", t.actions);
    }
    assert!(lines[0].contains("LAR 100.0%"), "{}", lines[0]);

    // --ticks stops first; Carrefour-LP runs on the same view
    let mut o = opts(c.pid, "carrefour-lp", path.clone());
    o.ticks = Some(1);
    let (stop, ticks) = Balancer::new(o).unwrap().run(|_| {}).unwrap();
    assert_eq!((stop, ticks.len()), (StopReason::Ticks, 1));

    // samples of another pid: a warning, and they are replayed as the child's
    let other = tmp("other.arrows");
    let recs: Vec<_> = (0..10u64)
        .map(|i| sample(c.pid + 100_000, i, c.page(i), 0, node.0))
        .collect();
    write_samples(&other, &recs, 1, 1);
    let mut b = Balancer::new(opts(c.pid, "carrefour", other)).unwrap();
    assert_eq!(b.warnings.len(), 1);
    assert!(b.warnings[0].contains("replayed as"), "{:?}", b.warnings);
    let (_, ticks) = b.run(|_| {}).unwrap();
    assert_eq!(ticks[0].samples, 10);

    // the process exits mid-run: a clean stop
    let mut b = Balancer::new(opts(c.pid, "carrefour", path)).unwrap();
    assert!(matches!(
        b.step().unwrap(),
        numalab_balance::balance::Step::Tick(_)
    ));
    assert_eq!(c.finish().split(' ').nth(1), Some("ok"));
    match b.step().unwrap() {
        numalab_balance::balance::Step::Stop(why) => assert_eq!(why, StopReason::ProcessExited),
        s => panic!("{s:?}"),
    }
}

#[test]
fn bad_input_is_refused_before_anything_is_done() {
    let c = Child::spawn(CHILD, 8 * PAGE as usize, None);
    let path = tmp("ok.arrows");
    write_samples(&path, &[sample(c.pid, 0, c.page(0), 0, 0)], 1, 1);
    let err = |o: BalanceOptions| Balancer::new(o).err().expect("refused").to_string();

    let e = err(opts(c.pid, "carefour", path.clone()));
    assert!(e.contains("unknown policy 'carefour'"), "{e}");
    // a policy that cannot run on this host's view (no HMAT controller peaks here)
    let e = err(opts(c.pid, "adaptive-percent", path.clone()));
    assert!(e.contains("adaptive-percent"), "{e}");
    let e = err(opts(c.pid, "carrefour:period=5", path.clone()));
    assert!(e.contains("unknown key 'period'"), "{e}");
    let mut o = opts(c.pid, "carrefour", path.clone());
    o.period_ns = Some(0);
    assert!(err(o).contains("period"));

    let e = err(opts(c.pid, "carrefour", tmp("missing.arrows")));
    assert!(e.contains("cannot read the sample file"), "{e}");
    let junk = tmp("junk.arrows");
    std::fs::write(&junk, b"not samples").unwrap();
    let e = err(opts(c.pid, "carrefour", junk.clone()));
    assert!(e.contains("junk.arrows"), "{e}");
    let empty = tmp("empty.arrows");
    write_samples(&empty, &[], 1, 1);
    let e = err(opts(c.pid, "carrefour", empty));
    assert!(e.contains("no samples"), "{e}");

    // a process that has exited, and one that never was
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id() as i32;
    dead.wait().unwrap();
    let e = err(opts(dead_pid, "carrefour", path.clone()));
    assert!(e.contains("does not exist"), "{e}");
    assert!(err(opts(-5, "carrefour", path.clone())).contains("does not exist"));

    // none of it touched the child
    assert_eq!(c.finish().split(' ').nth(1), Some("ok"));
    let _ = std::fs::remove_file(junk);
}

#[test]
fn per_thread_counters_open_or_say_why_not() {
    let c = Child::spawn(CHILD, 16 * PAGE as usize, None);
    let mut v = LinuxView::new(c.pid, SysRoot::host()).unwrap();
    let r = v.counter_report();
    eprintln!("{}", r.line());
    assert!(r.estimated.contains(&"loads".to_string()), "{r:?}");
    assert!(r.zero.contains(&"fault_ns".to_string()), "{r:?}");
    if r.source == "samples" {
        // no PMU (this VM) or perf not allowed: nothing counted, the refusal said
        let note = r.note.clone().expect("why not");
        assert!(note.contains("perf_event_open of instructions"), "{note}");
        assert!(r.hardware.is_empty());
        for f in ["instructions", "cycles", "llc_misses"] {
            let listed = r.zero.iter().chain(&r.estimated).any(|z| z == f);
            assert!(listed, "{f}: {r:?}");
        }
        assert!(r.line().contains("no per-thread hardware counters"));
    } else {
        // counting: the child's main thread keeps reading its buffer
        assert!(r.note.is_none());
        assert!(r.hardware.iter().any(|h| h.starts_with("instructions=")));
        let mut seen = 0;
        // the child runs all along: a few refreshes see its count grow
        for k in 1..=50u64 {
            v.refresh(k, &[], 1).unwrap();
            seen = v.thread_counters(ThreadId(c.pid as u32)).instructions;
            if seen > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(seen > 0, "instructions counted");
    }
    assert_eq!(c.finish().split(' ').nth(1), Some("ok"));
}

#[test]
fn numa_manager_auto_runs_on_a_live_process() {
    let c = Child::spawn(CHILD, 64 * PAGE as usize, None);
    let node = {
        let v = LinuxView::new(c.pid, SysRoot::host()).unwrap();
        v.page(TaskId(c.pid as u32), c.page(0)).unwrap().node
    };
    let path = tmp("auto.arrows");
    let recs: Vec<_> = (0..300u64)
        .map(|i| sample(c.pid, i * 1_000_000, c.page(i % 60), 0, node.0))
        .collect();
    write_samples(&path, &recs, 1000, 1);
    let spec = "numa-manager:threads=auto,period_ms=100,thresh_mpki=0.001,thresh_rlr=0";
    let mut b = Balancer::new(opts(c.pid, spec, path)).unwrap();
    let r = b.view().counter_report();
    if r.source == "samples" {
        // said once, before the first tick, naming the estimated and the zero fields
        let w = b.counters_note.clone().expect("said once");
        assert!(w.contains("no per-thread hardware counters"), "{w}");
        assert!(w.contains("estimated from the samples: loads"), "{w}");
        assert!(w.contains("zero: instructions"), "{w}");
    }
    let (stop, ticks) = b.run(|_| {}).unwrap();
    assert_eq!(stop, StopReason::SamplesExhausted);
    assert_eq!(ticks.len(), 3);
    for t in &ticks {
        // one task on one node: no task to re-home; every access local: nothing to migrate
        // (a region found off its home would be migrated eagerly, never failed)
        for a in &t.actions {
            assert_ne!(a.result, OutcomeKind::Failed, "{a:?}");
        }
        assert_eq!(t.pages_moved, 0);
    }
    assert_eq!(c.finish().split(' ').nth(1), Some("ok"));
}
