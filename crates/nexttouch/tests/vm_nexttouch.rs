//! Next-touch placement on several NUMA nodes. Run by the multi-node VM harness (4 nodes with one
//! CPU each, CPU i on node i, plus CPU-less node 4; see docs/testing.md) with `--ignored`, as a
//! statically linked binary: nothing here compiles C or needs the cdylib. Preload mode is
//! exercised through the library's constructor (NUMALAB_NEXT_TOUCH=1 in a child's environment),
//! which runs in this static binary as it does under LD_PRELOAD; the LD_PRELOAD path itself is
//! tested on the host (tests/c_abi.rs).

mod common;
use common::*;
use numalab_nexttouch::bench::{node_cpus, pin_to_cpu};
use numalab_nexttouch::{self as nt, Granularity};
use std::sync::Barrier;

/// (node, first CPU) of every node with CPUs; the VM has at least 4.
fn nodes() -> Vec<(u32, usize)> {
    let n: Vec<(u32, usize)> = node_cpus().into_iter().map(|(n, c)| (n, c[0])).collect();
    assert!(
        n.len() >= 4,
        "needs 4 nodes with CPUs (the VM of docs/testing.md), found {n:?}"
    );
    n
}

fn node_of(addr: usize) -> Result<u32, i32> {
    nt::page_nodes(&[addr]).unwrap()[0]
}

/// A buffer populated from a CPU of `node`, checked to be there.
fn buf_on(node: (u32, usize), pages: usize, seed: u64) -> Buf {
    assert!(pin_to_cpu(node.1));
    let b = Buf::new(pages);
    b.fill(seed);
    for i in 0..pages {
        assert_eq!(
            node_of(b.page_addr(i)),
            Ok(node.0),
            "page {i} after populating"
        );
    }
    b
}

/// Unmarks on drop, so a failing test does not leave its area marked after its buffer is unmapped
/// (the next test's buffer would then overlap it and every later `mark` fail with `Overlap`).
/// Declare it after the buffer: it is dropped first.
struct Marked(nt::AreaId);
impl Marked {
    fn new(buf: &Buf, g: Granularity) -> Marked {
        Marked(nt::mark(buf.ptr(), buf.len, g).unwrap())
    }
    fn stats(&self) -> nt::AreaStats {
        nt::area_stats(self.0).unwrap()
    }
    fn unmark(self) {
        nt::unmark(self.0).unwrap();
        std::mem::forget(self);
    }
}
impl Drop for Marked {
    fn drop(&mut self) {
        let _ = nt::unmark(self.0);
    }
}

/// (major, minor) of the running kernel.
fn kernel() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut it = r.trim().split(|c: char| !c.is_ascii_digit());
    let major = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    let minor = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    (major, minor)
}

/// Run `f` on a thread pinned to `cpu`.
fn on_cpu<R: Send>(cpu: usize, f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(move || {
            assert!(pin_to_cpu(cpu));
            f()
        })
        .join()
        .unwrap()
    })
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_page_touch_moves_the_page_to_the_touching_node() {
    let n = nodes();
    let buf = buf_on(n[0], 16, 1);
    let m = Marked::new(&buf, Granularity::Page);
    on_cpu(n[2].1, || {
        buf.touch_read(3);
        buf.touch_read(5);
    });
    assert_eq!(node_of(buf.page_addr(3)), Ok(n[2].0), "page 3");
    assert_eq!(node_of(buf.page_addr(5)), Ok(n[2].0), "page 5");
    // A page still marked is mapped PROT_NONE: Linux 6.1 to 6.4 move_pages cannot see it
    // (docs/nexttouch.md, "Kernel versions"); later kernels report its node.
    let marked = node_of(buf.page_addr(0));
    if kernel() < (6, 5) {
        assert_eq!(
            marked,
            Err(-libc::ENOENT),
            "marked page 0 on {:?}",
            kernel()
        );
    } else {
        assert_eq!(marked, Ok(n[0].0), "marked page 0");
    }
    let s = m.stats();
    assert_eq!(
        (
            s.touches,
            s.pages_moved,
            s.pages_not_present,
            s.pages_still_marked
        ),
        (2, 2, 0, 14)
    );
    m.unmark();
    // Unmarking does not move the untouched pages.
    for i in (0..16).filter(|&i| i != 3 && i != 5) {
        assert_eq!(node_of(buf.page_addr(i)), Ok(n[0].0), "page {i}");
    }
    assert!(buf.check(1));
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_area_touch_moves_the_whole_area() {
    let n = nodes();
    let buf = buf_on(n[0], 32, 2);
    let m = Marked::new(&buf, Granularity::Area);
    on_cpu(n[1].1, || buf.touch_read(30));
    for i in 0..32 {
        assert_eq!(node_of(buf.page_addr(i)), Ok(n[1].0), "page {i}");
    }
    assert_eq!(m.stats().pages_moved, 32);
    assert!(buf.check(2));
    m.unmark();
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_threads_on_each_node_take_their_own_pages() {
    let n = nodes();
    let buf = buf_on(n[0], 32, 3);
    let m = Marked::new(&buf, Granularity::Page);
    let barrier = Barrier::new(4);
    std::thread::scope(|s| {
        for (k, &(_, cpu)) in n.iter().take(4).enumerate() {
            let (buf, barrier) = (&buf, &barrier);
            s.spawn(move || {
                assert!(pin_to_cpu(cpu));
                barrier.wait();
                for i in (k..32).step_by(4) {
                    buf.touch_read(i);
                }
            });
        }
    });
    for i in 0..32 {
        assert_eq!(node_of(buf.page_addr(i)), Ok(n[i % 4].0), "page {i}");
    }
    assert_eq!(m.stats().pages_moved, 32);
    assert!(buf.check(3));
    m.unmark();
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_contended_page_moves_once_to_one_toucher() {
    let n = nodes();
    let buf = buf_on(n[0], 4, 4);
    let m = Marked::new(&buf, Granularity::Page);
    let barrier = Barrier::new(3);
    std::thread::scope(|s| {
        for &(_, cpu) in &n[1..4] {
            let (buf, barrier) = (&buf, &barrier);
            s.spawn(move || {
                assert!(pin_to_cpu(cpu));
                barrier.wait();
                buf.touch_read(2);
            });
        }
    });
    let s = m.stats();
    assert_eq!(s.pages_moved, 1, "{s:?}");
    let at = node_of(buf.page_addr(2)).unwrap();
    assert!(
        n[1..4].iter().any(|&(node, _)| node == at),
        "page 2 on node {at}"
    );
    assert!(buf.check(4));
    m.unmark();
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_phase_signal_marks_the_process_and_pages_follow_the_toucher() {
    const NAME: &str = "vm_phase_signal_marks_the_process_and_pages_follow_the_toucher";
    if is_child(NAME) {
        let n = nodes();
        let buf = buf_on(n[0], 32, 5);
        // The constructor started phase mode (NUMALAB_NEXT_TOUCH=1); SIGUSR2 is the default signal.
        unsafe { libc::raise(libc::SIGUSR2) };
        let mut waited = 0;
        while nt::stats().phases == 0 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            waited += 1;
            assert!(waited < 3000, "the helper thread never ran a phase");
        }
        on_cpu(n[3].1, || assert!(buf.check(5)));
        for i in 0..32 {
            assert_eq!(node_of(buf.page_addr(i)), Ok(n[3].0), "page {i}");
        }
        println!("child ok: {:?}", nt::stats());
        std::process::exit(0);
    }
    let out = run_child(
        NAME,
        &[
            ("NUMALAB_NEXT_TOUCH", "1"),
            ("NUMALAB_NEXT_TOUCH_GRANULARITY", "page"),
        ],
    );
    assert!(
        out.status.success(),
        "{:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_bench_prints_ratios() {
    // A measurement, not a check: prints next-touch per page against one synchronous move_pages.
    nodes();
    // 256 pages x 3 rounds (8 s on 6.12, 2 s on 6.1): in the emulated VM one move_pages call
    // costs about 8 ms on 6.12 (0.1 ms on 6.1), and the per-call variants make 2 x pages x rounds
    // calls; 2048 x 5 took 143 s on 6.12. Run the nt_bench example in the VM for bigger runs.
    let r = numalab_nexttouch::bench::run(256, 3);
    // On stderr directly: libtest captures println! of passing tests, and the VM log should keep
    // the numbers (docs/nexttouch.md records them).
    {
        use std::io::Write;
        let _ = write!(std::io::stderr(), "{}", r.render());
    }
    assert!(
        r.from_node != r.to_node,
        "the bench should move between nodes in the VM"
    );
}
