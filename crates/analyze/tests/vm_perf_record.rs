//! Records real perf.data files inside the multi-node VM, as fixtures for tests/perf_script.rs
//! (tests/data/README.md). `perf record` runs this test binary again as its child (the
//! NUMALAB_PERF_CHILD switch): two threads pinned to the CPUs of nodes 0 and 2 write memory
//! bound to node 2 and to node 1, then a THP region in halves. The child writes where that
//! memory is (a layout file) so the host tests know what the analyzer must find. The files are
//! printed on the console as base64 between VMPERF-BEGIN/VMPERF-END markers;
//! tests/data/extract-vm-perf.sh turns the harness log back into fixture files.
//!
//! perf is only in the VM when the harness runs with --with-perf; without it the test says so
//! and returns.

use numalab_core::{MemPolicy, NodeId, NodeMask};
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::process::Command;

const CHILD_ENV: &str = "NUMALAB_PERF_CHILD";
const PERF: &str = "/usr/bin/perf";
const PAGE: usize = 4096;
const HUGE: usize = 2 << 20;

/// The first CPU of a node, from sysfs.
fn cpu_of_node(node: u16) -> Option<usize> {
    let list =
        std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist")).ok()?;
    let first = list.trim().split([',', '-']).next()?;
    first.parse().ok()
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let rc = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(rc, 0, "sched_setaffinity to CPU {cpu}");
    }
}

fn map(len: usize, advice: libc::c_int) -> usize {
    // SAFETY: a fresh anonymous private mapping; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: advice on the mapping just made.
    assert_eq!(unsafe { libc::madvise(p, len, advice) }, 0);
    p as usize
}

fn bind(addr: usize, len: usize, node: u16) {
    let policy = MemPolicy::Bind {
        nodes: NodeMask::single(NodeId(node)),
        numa_balancing: false,
    };
    numalab_linux::mbind(
        addr,
        len,
        &policy,
        numalab_linux::ModeFlags::empty(),
        numalab_linux::MbindFlags::empty(),
    )
    .unwrap();
}

/// Writes one byte per 4 KiB page, so every page faults once (a huge page once in all).
fn touch(addr: usize, len: usize) {
    for off in (0..len).step_by(PAGE) {
        // SAFETY: within a mapping of this process that nothing else uses.
        unsafe { std::ptr::write_volatile((addr + off) as *mut u8, 1) };
    }
}

/// Makes every private page of this process write-protected: a fork write-protects the
/// parent's anonymous page tables; the child exits at once. The next write to each page then
/// faults on a *present* page, and those page-fault samples carry the page's physical address
/// (a first-touch fault has no page yet: phys_addr 0).
fn write_protect_all() {
    // SAFETY: the child only calls _exit, which is async-signal-safe.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: leaving the child without running anything of the parent's.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
}

/// The recorded program: thread A on node 0's CPU writes 64 pages bound to node 2 and the first
/// half of a 2 MiB THP region; then thread B on node 2's CPU writes 32 pages bound to node 1 and
/// the second half. That is done twice, with a fork in between (write_protect_all) so that the
/// second round's faults have physical addresses. The regions get distinct sizes so they also
/// stand out in the mmap events.
/// Layout lines: `name start len cpu writer_node page_node` (page node as the kernel reports it).
fn child_workload(layout_path: &str) {
    let (cpu_a, cpu_b) = (cpu_of_node(0).unwrap(), cpu_of_node(2).unwrap());
    let a_len = 64 * PAGE;
    let b_len = 32 * PAGE;
    let a = map(a_len, libc::MADV_NOHUGEPAGE);
    let b = map(b_len, libc::MADV_NOHUGEPAGE);
    bind(a, a_len, 2);
    bind(b, b_len, 1);
    // 4 MiB mapping, THP region at its first 2 MiB boundary.
    let raw = map(2 * HUGE, libc::MADV_HUGEPAGE);
    let thp = (raw + HUGE - 1) & !(HUGE - 1);
    for round in 0..2 {
        if round == 1 {
            write_protect_all();
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                pin(cpu_a);
                touch(a, a_len);
                touch(thp, HUGE / 2);
            });
        });
        std::thread::scope(|s| {
            s.spawn(|| {
                pin(cpu_b);
                touch(b, b_len);
                touch(thp + HUGE / 2, HUGE / 2);
            });
        });
    }
    let node = |addr: usize| numalab_linux::node_of_address(addr).unwrap().0;
    let mut out = String::new();
    for (name, start, len, cpu, wnode) in [
        ("bind2", a, a_len, cpu_a, 0),
        ("bind1", b, b_len, cpu_b, 2),
        ("thp_a", thp, HUGE / 2, cpu_a, 0),
        ("thp_b", thp + HUGE / 2, HUGE / 2, cpu_b, 2),
    ] {
        writeln!(out, "{name} {start:#x} {len} {cpu} {wnode} {}", node(start)).unwrap();
    }
    std::fs::write(layout_path, out).unwrap();
}

/// Only does something as perf record's child (see the file comment).
#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn perf_child_workload() {
    match std::env::var(CHILD_ENV) {
        Ok(layout) => child_workload(&layout),
        Err(_) => eprintln!("only runs as the child of record_perf_data_for_fixtures"),
    }
}

/// Straight to stderr: libtest captures the print macros of passing tests, and a skip or the
/// layout should show on the console.
fn say(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

/// Runs `perf record ARGS -o DIR/NAME.data -- <this binary as child>`, layout in DIR/NAME.layout.txt.
fn record(dir: &str, name: &str, args: &[&str]) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(PERF)
        .arg("record")
        // -q: no summary; -N: no build-id cache (there is no home to keep one in).
        .args(["-q", "-N"])
        .args(args)
        .arg("-o")
        .arg(format!("{dir}/{name}.data"))
        .arg("--")
        .arg(&exe)
        .args([
            "--ignored",
            "--exact",
            "perf_child_workload",
            "--test-threads=1",
            "-q",
        ])
        .env(CHILD_ENV, format!("{dir}/{name}.layout.txt"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "perf record {name}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let layout = std::fs::read_to_string(format!("{dir}/{name}.layout.txt")).unwrap();
    say(&format!("{name} layout:\n{layout}"));
    // The kernel put the bound memory where it was told, the THP region on the first writer's node.
    let page_nodes: Vec<&str> = layout
        .lines()
        .map(|l| l.split_whitespace().last().unwrap())
        .collect();
    assert_eq!(page_nodes[..2], ["2", "1"], "{layout}");
    assert_eq!(
        page_nodes[2], "0",
        "THP region first touched on node 0: {layout}"
    );
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn record_perf_data_for_fixtures() {
    if !Path::new(PERF).exists() {
        say(&format!(
            "SKIP: {PERF} is not in the VM (run the harness with --with-perf)"
        ));
        return;
    }
    if cpu_of_node(0).is_none() || cpu_of_node(2).is_none() {
        say("SKIP: nodes 0 and 2 need CPUs (the 5-node VM)");
        return;
    }
    let dir = "/tmp/numalab-perf";
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    // The same options as the host recordings (tests/data/README.md).
    record(
        dir,
        "vm-faults-full",
        &[
            "-e",
            "page-faults",
            "-c",
            "1",
            "-d",
            "-W",
            "--phys-data",
            "--data-page-size",
            "--code-page-size",
            "--sample-cpu",
            "-T",
        ],
    );
    record(
        dir,
        "vm-faults-callchain",
        &[
            "-e",
            "page-faults,minor-faults",
            "-c",
            "1",
            "-d",
            "-g",
            "--sample-cpu",
        ],
    );
    let tar = Command::new("sh")
        .args(["-c", &format!("cd {dir} && tar cf - . | gzip -9 | base64")])
        .output()
        .unwrap();
    assert!(tar.status.success());
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    // Direct writes: libtest captures only the print macros.
    let mut err = std::io::stderr().lock();
    writeln!(err, "VMPERF-BEGIN release={}", release.trim()).unwrap();
    err.write_all(&tar.stdout).unwrap();
    writeln!(err, "VMPERF-END").unwrap();
}
