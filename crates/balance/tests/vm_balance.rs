//! `numalab balance` on the multi-node VM (4 CPU nodes with one CPU each, CPU-less node 4;
//! docs/testing.md): a child binds a buffer to node 0 and keeps reading it; a sample file says
//! threads on node 2 read pages A and threads on nodes 1 and 3 read pages B. Carrefour
//! migrates A to node 2 and interleaves B; afterwards every page is where the policy said
//! (move_pages query) and the child's data is intact (it checks every word).

mod common;

use common::{sample, write_samples, Child, PAGE};
use numalab_linux::{move_pages_query, MovePagesOptions, PageStatus, Pid};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output};

const CHILD: &str = "child_process_body";
const PAGES: u64 = 64;
const A: std::ops::Range<u64> = 0..32;
const B: std::ops::Range<u64> = 32..63; // page 63 is never touched

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn child_process_body() {
    common::child_body();
}

fn numalab() -> PathBuf {
    PathBuf::from(std::env::var_os("NUMALAB_BIN").expect("NUMALAB_BIN (set in the VM)"))
}

fn run(args: &[&str]) -> Output {
    let out = Command::new(numalab()).args(args).output().unwrap();
    eprintln!(
        "numalab {}\n  -> {:?}\n  stdout: {}\n  stderr: {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The sample file of the scenario: per page of A, 4 samples from CPU 2 (node 2); per page
/// of B, 2 from CPU 1 (node 1) and 2 from CPU 3 (node 3); all within the first 200 ms, one
/// sample per 100 000 events (MAPTU ≈ 126 per µs: above Carrefour's gate of 50).
fn scenario_samples(c: &Child, name: &str) -> PathBuf {
    let mut recs = Vec::new();
    let mut t = 0u64;
    for round in 0..4u64 {
        for p in A {
            recs.push(sample(c.pid, t, c.page(p) + 64 * round, 2, 2));
            t += 100_000;
        }
        for p in B {
            let (cpu, node) = if round % 2 == 0 { (1, 1) } else { (3, 3) };
            recs.push(sample(c.pid, t, c.page(p) + 64 * round, cpu, node));
            t += 100_000;
        }
    }
    assert!(t < 200_000_000);
    let path = std::env::temp_dir().join(name);
    write_samples(&path, &recs, 100_000, 5);
    path
}

fn placement(c: &Child) -> Vec<PageStatus> {
    let addrs: Vec<usize> = (0..PAGES).map(|i| c.page(i) as usize).collect();
    move_pages_query(Pid(c.pid), &addrs, &MovePagesOptions::default()).unwrap()
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn carrefour_migrates_single_node_pages_and_interleaves_shared_ones() {
    let c = Child::spawn(CHILD, (PAGES * PAGE) as usize, Some(0));
    let before = placement(&c);
    for i in A.chain(B) {
        assert_eq!(
            before[i as usize],
            PageStatus::OnNode(numalab_core::NodeId(0))
        );
    }
    let samples = scenario_samples(&c, "balance-carrefour.arrows");
    let json = std::env::temp_dir().join("balance-carrefour.json");
    let pid = c.pid.to_string();
    let out = run(&[
        "balance",
        "--pid",
        &pid,
        "--policy",
        "carrefour",
        "--samples",
        samples.to_str().unwrap(),
        "--period-ms",
        "200",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("tick   1"), "{stdout}");
    assert!(stdout.contains("the samples are exhausted"), "{stdout}");

    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let ticks = r["ticks"].as_array().unwrap();
    assert_eq!(ticks.len(), 1, "{r}");
    let t = &ticks[0];
    assert_eq!(t["samples"], 252);
    assert_eq!(t["lar_percent"].as_f64(), Some(0.0));
    // where the policy sent each page
    let mut decided: HashMap<u64, u64> = HashMap::new();
    for a in t["actions"].as_array().unwrap() {
        assert_eq!(a["result"], "applied", "{a}");
        for p in a["targets"].as_array().into_iter().flatten() {
            decided.insert(p[0].as_u64().unwrap(), p[1].as_u64().unwrap());
        }
    }
    let after = placement(&c);
    // A: one accessing node, 4 samples each: migrated to node 2
    for i in A {
        assert_eq!(decided.get(&c.page(i)), Some(&2), "page {i}");
        assert_eq!(after[i as usize].node().map(|n| n.0), Some(2), "page {i}");
    }
    // B: shared by nodes 1 and 3, on node 0 which carries all the traffic: Carrefour draws a
    // less loaded node for each; every page is where it was sent
    let mut spread = [0u32; 5];
    for i in B {
        let to = *decided
            .get(&c.page(i))
            .expect("every shared page is interleaved");
        assert_ne!(to, 0);
        assert_eq!(
            after[i as usize].node().map(|n| n.0 as u64),
            Some(to),
            "page {i}"
        );
        spread[to as usize] += 1;
    }
    assert!(
        spread.iter().filter(|n| **n > 0).count() >= 2,
        "interleaved over several nodes: {spread:?}"
    );
    // never touched: -ENOENT, or -EFAULT on older kernels such as 6.1 (no page table yet)
    assert!(
        matches!(after[63], PageStatus::NotPresent | PageStatus::Fault),
        "{:?}",
        after[63]
    );
    assert_eq!(t["pages_moved"], A.end + B.end - B.start);
    assert_eq!(r["pages_moved"], t["pages_moved"]);
    let verdict = c.finish();
    assert!(verdict.starts_with("CHECK ok"), "{verdict}");
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn dry_run_prints_the_actions_and_moves_nothing() {
    let c = Child::spawn(CHILD, (PAGES * PAGE) as usize, Some(0));
    let samples = scenario_samples(&c, "balance-dry.arrows");
    let pid = c.pid.to_string();
    let out = run(&[
        "balance",
        "--pid",
        &pid,
        "--policy",
        "carrefour",
        "--samples",
        samples.to_str().unwrap(),
        "--period-ms",
        "200",
        "--dry-run",
        "--fast",
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("DryRun move"), "{stdout}");
    assert!(stdout.contains("pages moved 0"), "{stdout}");
    for (i, st) in placement(&c).iter().enumerate().take(63) {
        assert_eq!(st.node().map(|n| n.0), Some(0), "page {i}");
    }
    let verdict = c.finish();
    assert!(verdict.starts_with("CHECK ok"), "{verdict}");
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn bad_input_fails_before_anything_moves() {
    let c = Child::spawn(CHILD, (PAGES * PAGE) as usize, Some(0));
    let samples = scenario_samples(&c, "balance-bad.arrows");
    let pid = c.pid.to_string();
    let s = samples.to_str().unwrap();
    for (args, expect) in [
        (
            vec!["--policy", "carefour", "--samples", s],
            "unknown policy",
        ),
        (
            vec!["--policy", "carrefour", "--samples", "/nonexistent.arrows"],
            "cannot read",
        ),
    ] {
        let mut all = vec!["balance", "--pid", &pid];
        all.extend(args);
        let out = run(&all);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains(expect));
    }
    let out = run(&[
        "balance",
        "--pid",
        "999999",
        "--policy",
        "carrefour",
        "--samples",
        s,
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    for (i, st) in placement(&c).iter().enumerate().take(63) {
        assert_eq!(st.node().map(|n| n.0), Some(0), "page {i}");
    }
    let verdict = c.finish();
    assert!(verdict.starts_with("CHECK ok"), "{verdict}");
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn huge_pages_are_seen_split_in_place_and_threads_moved() {
    use numalab_balance::{Executor, LinuxView, OutcomeKind};
    use numalab_core::{Action, CpuId, MemoryView, NodeId, PageSize, TaskId, ThreadId};
    let huge = 2u64 << 20;
    let c = Child::spawn_with(CHILD, (2 * huge) as usize, Some(0), true);
    let task = TaskId(c.pid as u32);
    let sub = c.addr + 5 * PAGE;
    let v = LinuxView::new(c.pid, numalab_linux::SysRoot::host()).unwrap();
    let p = v.page(task, sub).expect("present");
    if p.size != PageSize::Huge2M {
        eprintln!("the child's buffer got no huge page (THP mode?): nothing to check");
        c.finish();
        return;
    }
    // pagemap + kpageflags (root) tell the view it is a huge page
    assert_eq!((p.start, p.node), (c.addr, NodeId(0)));
    let ex = Executor::new(c.pid, v.topology().has_memory, false);
    let o = ex.apply(&Action::SplitHuge { task, addr: sub });
    if !std::path::Path::new("/sys/kernel/debug/split_huge_pages").exists() {
        assert_eq!(o.result, OutcomeKind::Skipped);
        eprintln!(
            "no debugfs split_huge_pages: split skipped ({:?})",
            o.reason
        );
    } else {
        assert_eq!(o.result, OutcomeKind::Applied, "{o:?}");
        let v = LinuxView::new(c.pid, numalab_linux::SysRoot::host()).unwrap();
        let p = v.page(task, sub).unwrap();
        assert_eq!((p.start, p.size), (c.addr + 5 * PAGE, PageSize::Base4K));
        // only the huge page holding the address was split
        assert_eq!(v.page(task, c.addr + huge).unwrap().size, PageSize::Huge2M);
        // one 4 KiB subpage now moves alone
        let o = ex.apply(&Action::MovePages {
            task,
            pages: vec![(sub, NodeId(1))],
        });
        assert_eq!(o.pages_moved, 1, "{o:?}");
        let st = move_pages_query(
            Pid(c.pid),
            &[sub as usize, (sub - PAGE) as usize],
            &MovePagesOptions::default(),
        )
        .unwrap();
        assert_eq!(st[0].node(), Some(NodeId(1)));
        assert_eq!(st[1].node(), Some(NodeId(0)));
    }
    // MoveThread: the child's main thread pinned to CPU 3
    let o = ex.apply(&Action::MoveThread {
        thread: ThreadId(c.pid as u32),
        cpu: CpuId(3),
    });
    assert_eq!(o.result, OutcomeKind::Applied, "{o:?}");
    let status = std::fs::read_to_string(format!("/proc/{}/task/{}/status", c.pid, c.pid)).unwrap();
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(allowed, "3");
    let verdict = c.finish();
    assert!(verdict.starts_with("CHECK ok"), "{verdict}");
}

/// A progress line, shown with a failing test's output (where a slow VM run got to).
fn progress(what: &str) {
    eprintln!("[progress] {what}");
}

/// Confines every thread of `pid` to `cpu`.
fn pin_all(pid: i32, cpu: u32) {
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let tid: i32 = e.file_name().to_str().unwrap().parse().unwrap();
        // SAFETY: cpu_set_t is plain data; cpu < CPU_SETSIZE.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

/// Whether a runnable thread of `pid` last ran on `cpu` (the busy reader does, once the
/// scheduler has moved it).
fn runs_on(pid: i32, cpu: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .any(|st| {
            let rest = &st[st.rfind(')').unwrap() + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            f[0] == "R" && numalab_balance::view::stat_processor(&st) == Some(cpu)
        })
}

fn wait_runs_on(pid: i32, cpu: u32) {
    for _ in 0..1000 {
        if runs_on(pid, cpu) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("no thread of {pid} ran on CPU {cpu}");
}

/// Every page of the buffer but the last (never touched) is on `node`.
fn assert_all_on(c: &Child, node: u16) {
    let addrs: Vec<usize> = (0..c.pages() - 1).map(|i| c.page(i) as usize).collect();
    let st = move_pages_query(Pid(c.pid), &addrs, &MovePagesOptions::default()).unwrap();
    for (i, s) in st.iter().enumerate() {
        assert_eq!(s.node().map(|n| n.0), Some(node), "page {i}: {s:?}");
    }
}

/// A sample file of `n` reads of the buffer from CPU `cpu` (node `cpu`), within 100 ms.
fn reads_from(c: &Child, cpu: u32, n: u64, name: &str) -> PathBuf {
    let recs: Vec<_> = (0..n)
        .map(|i| {
            sample(
                c.pid,
                i * 100_000,
                c.page(i % (c.pages() - 1)),
                cpu,
                cpu as u16,
            )
        })
        .collect();
    let path = std::env::temp_dir().join(name);
    write_samples(&path, &recs, 1000, 5);
    path
}

/// Lazy migration after a thread move (`next-touch:mechanism=lazy,trigger=thread-move`): the
/// child runs on CPU 0 with its buffer bound to node 0; its threads are moved to CPU 2
/// between two ticks; the policy's `on_thread_moved` asks for a `LazyMigrate` of the buffer
/// to node 2, done eagerly: every populated page ends on node 2, the data intact.
#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn lazy_migration_after_a_thread_move_is_done_eagerly() {
    use numalab_balance::balance::Step;
    use numalab_balance::{BalanceOptions, Balancer, OutcomeKind};
    progress("lazy: starting the child");
    let c = Child::spawn_on(CHILD, 4 << 20, Some(0), false, Some(0));
    progress("lazy: child started");
    wait_runs_on(c.pid, 0);
    progress("lazy: child on CPU 0");
    assert_all_on(&c, 0);
    let samples = reads_from(&c, 0, 100, "balance-lazy.arrows");
    let mut b = Balancer::new(BalanceOptions {
        pid: c.pid,
        policy: "next-touch:mechanism=lazy,trigger=thread-move,regions=all".into(),
        samples,
        period_ns: Some(200_000_000),
        ticks: Some(1),
        dry_run: false,
        pace: false,
    })
    .unwrap();
    // the VM has no PMU: said once, counters estimated
    progress(&format!(
        "lazy: balancer ready; counters: {:?}",
        b.counters_note
    ));
    // the thread move (a MoveThread of another policy, or the scheduler)
    pin_all(c.pid, 2);
    wait_runs_on(c.pid, 2);
    progress("lazy: thread moved, ticking");
    let Step::Tick(t) = b.step().unwrap() else {
        panic!("no tick")
    };
    progress("lazy: ticked");
    assert!(t.threads_moved >= 1, "{t:?}");
    // one LazyMigrate per region of the task and moved thread; none failed
    let lazy: Vec<_> = t
        .actions
        .iter()
        .filter(|a| a.action == "lazy-migrate")
        .collect();
    assert!(!lazy.is_empty(), "{:?}", t.actions);
    for o in &lazy {
        assert_eq!(o.result, OutcomeKind::Applied, "{o:?}");
        assert!(o.what.ends_with("to node2"), "{}", o.what);
        assert!(
            o.reason.as_deref().unwrap().contains("done eagerly"),
            "{o:?}"
        );
    }
    // the buffer: every touched page moved once (a second moved thread finds them there);
    // the last one was never touched
    let buf: Vec<_> = lazy
        .iter()
        .filter(|o| o.what.starts_with(&format!("lazy-migrate {:#x}-", c.addr)))
        .collect();
    assert!(!buf.is_empty(), "{lazy:?}");
    assert!(buf.iter().all(|o| o.pages_asked == c.pages()), "{buf:?}");
    let moved: u64 = buf.iter().map(|o| o.pages_moved).sum();
    assert_eq!(moved, c.pages() - 1, "{buf:?}");
    assert_all_on(&c, 2);
    let verdict = c.finish();
    assert!(verdict.starts_with("CHECK ok"), "{verdict}");
}

/// Müller's Auto (`numa-manager:threads=auto`) from the command line: the child's threads run
/// on node 2 (its home), its buffer is bound to node 0, the samples say it reads remotely:
/// Algorithm 4.2 lazily migrates its regions home, done eagerly by `numalab balance`.
#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn numa_manager_auto_migrates_remote_regions_home() {
    let c = Child::spawn_on(CHILD, (PAGES * PAGE) as usize, Some(0), false, Some(2));
    progress("auto: child started");
    let (out, r) = auto_on_a_remote_reader(&c, "balance-auto", "");
    let stdout = String::from_utf8_lossy(&out.stdout);
    progress("auto: numalab balance done");
    assert!(stdout.contains("lazy migration done eagerly"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // no PMU in the VM: the counters are the samples' estimate, said once and in the report
    if r["counters"]["source"] == "samples" {
        assert_eq!(stderr.matches("no per-thread hardware counters").count(), 1);
        assert!(r["counters"]["zero"]
            .as_array()
            .unwrap()
            .contains(&Value::from("instructions")));
    }
    let t = &r["ticks"][0];
    let actions = t["actions"].as_array().unwrap();
    let buf = actions
        .iter()
        .find(|a| {
            a["action"] == "lazy-migrate"
                && a["what"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("lazy-migrate {:#x}-", c.addr))
        })
        .unwrap_or_else(|| panic!("the buffer is migrated: {t}"));
    assert_eq!(buf["result"], "applied", "{buf}");
    assert_eq!(buf["pages_moved"], PAGES - 1, "{buf}");
    // the range policy for later faults cannot be set from outside: skipped, said why
    assert!(actions
        .iter()
        .any(|a| a["action"] == "set-range-policy" && a["result"] == "skipped"));
    assert!(actions.iter().all(|a| a["result"] != "failed"), "{t}");
    assert_all_on(&c, 2);
    let verdict = c.finish();
    assert!(verdict.starts_with("CHECK ok"), "{verdict}");
}

/// Auto with `migrate=process`: the same child as above (threads on node 2, its home; buffer
/// bound to node 0; samples say it reads remotely), but the memory step is one real
/// migrate_pages(2) of the whole process from every other node to node 2: every page of the
/// buffer ends on node 2 and the child's data is intact.
#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn numa_manager_auto_migrate_process_moves_the_whole_process_home() {
    let c = Child::spawn_on(CHILD, (PAGES * PAGE) as usize, Some(0), false, Some(2));
    progress("migrate_pages: child started");
    let (_, r) = auto_on_a_remote_reader(&c, "balance-auto-process", ",migrate=process");
    progress("migrate_pages: numalab balance done");
    let t = &r["ticks"][0];
    let actions = t["actions"].as_array().unwrap();
    let calls: Vec<&Value> = actions
        .iter()
        .filter(|a| a["action"] == "migrate-process")
        .collect();
    assert_eq!(calls.len(), 1, "{t}");
    let call = calls[0];
    assert_eq!(call["result"], "applied", "{call}");
    assert_eq!(
        call["what"], "migrate_pages from nodes 0-1,3-4 to nodes 2",
        "{call}"
    );
    // the buffer's touched pages and whatever else of the child lay off node 2
    let moved = call["pages_moved"].as_u64().unwrap();
    assert!(moved >= PAGES - 1, "{call}");
    assert!(call["pages_asked"].as_u64().unwrap() >= moved, "{call}");
    assert!(actions.iter().all(|a| a["result"] != "failed"), "{t}");
    assert!(actions.iter().all(|a| a["action"] != "lazy-migrate"), "{t}");
    assert_all_on(&c, 2);
    let verdict = c.finish();
    assert!(verdict.starts_with("CHECK ok"), "{verdict}");
}

/// `numalab balance` with Müller's Auto (`numa-manager:threads=auto`, a 200 ms period,
/// THRESH_RLR 0.5, plus `extra` keys) on child `c`, which runs on node 2 with its buffer on
/// node 0; its samples say it reads the buffer remotely. Returns the command's output and its
/// JSON report (files named after `name`).
fn auto_on_a_remote_reader(c: &Child, name: &str, extra: &str) -> (Output, Value) {
    wait_runs_on(c.pid, 2);
    progress(&format!("{name}: running numalab balance"));
    assert_all_on(c, 0);
    let samples = reads_from(c, 2, 200, &format!("{name}.arrows"));
    let json = std::env::temp_dir().join(format!("{name}.json"));
    let pid = c.pid.to_string();
    let policy = format!("numa-manager:threads=auto,period_ms=200,thresh_rlr=0.5{extra}");
    let out = run(&[
        "balance",
        "--pid",
        &pid,
        "--policy",
        &policy,
        "--samples",
        samples.to_str().unwrap(),
        "--fast",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let r = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (out, r)
}
