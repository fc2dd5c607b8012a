//! Next-touch on this machine (one NUMA node is enough: moves to the current node are real
//! move_pages calls that succeed). Multi-node placement checks are in vm_nexttouch.rs.

mod common;
use common::*;
use numalab_nexttouch::{self as nt, Error, Granularity};
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

/// Every page of `buf` is on the current node (what a move to this node leaves).
fn assert_on_current_node(buf: &Buf) {
    let node = nt::current_node().expect("getcpu").0 as u32;
    let pages: Vec<usize> = (0..buf.pages()).map(|i| buf.page_addr(i)).collect();
    for (i, s) in nt::page_nodes(&pages).unwrap().into_iter().enumerate() {
        assert_eq!(s, Ok(node), "page {i}");
    }
}

#[test]
fn page_granularity_moves_each_touched_page_once() {
    let buf = Buf::new(64);
    buf.fill(1);
    let id = nt::mark(buf.ptr(), buf.len, Granularity::Page).unwrap();
    assert!(perms_over(buf.addr, buf.addr + buf.len)
        .iter()
        .all(|p| p == "---p"));
    let touched = [0usize, 3, 7, 8, 20, 33, 40, 41, 62, 63];
    for &i in &touched {
        buf.touch_read(i);
        buf.touch_read(i); // a second touch of the same page does not fault
    }
    let s = nt::area_stats(id).unwrap();
    assert_eq!(s.touches, touched.len() as u64);
    assert_eq!(s.pages_moved, touched.len() as u64);
    assert_eq!(s.pages_not_present, 0);
    assert_eq!(s.move_failures, 0);
    assert_eq!(s.pages_still_marked, 64 - touched.len() as u64);
    // Reading everything touches the rest once each; the data survived the moves.
    assert!(buf.check(1));
    let s = nt::area_stats(id).unwrap();
    assert_eq!(s.pages_moved, 64);
    assert_eq!(s.touches, 64);
    assert_eq!(s.pages_still_marked, 0);
    assert!(perms_over(buf.addr, buf.addr + buf.len)
        .iter()
        .all(|p| p == "rw-p"));
    assert_on_current_node(&buf);
    nt::unmark(id).unwrap();
}

#[test]
fn writes_are_touches_and_keep_data() {
    let buf = Buf::new(16);
    buf.fill(2);
    let id = nt::mark(buf.ptr(), buf.len, Granularity::Page).unwrap();
    // SAFETY: in bounds; a write to a marked page.
    unsafe { *(buf.page_addr(5) as *mut u64) = 0xdead_beef };
    let s = nt::area_stats(id).unwrap();
    assert_eq!((s.touches, s.pages_moved), (1, 1));
    assert_eq!(unsafe { *(buf.page_addr(5) as *const u64) }, 0xdead_beef);
    unsafe { *(buf.page_addr(5) as *mut u64) = pattern(2, 5 * page() / 8) };
    assert!(buf.check(2));
    nt::unmark(id).unwrap();
}

#[test]
fn never_touched_pages_are_reported_not_present() {
    let buf = Buf::new(8); // not filled: no page exists yet
    let id = nt::mark(buf.ptr(), buf.len, Granularity::Page).unwrap();
    assert_eq!(buf.touch_read(2), 0);
    let s = nt::area_stats(id).unwrap();
    assert_eq!((s.touches, s.pages_moved, s.pages_not_present), (1, 0, 1));
    nt::unmark(id).unwrap();
}

#[test]
fn area_granularity_moves_the_whole_area_on_first_touch() {
    let buf = Buf::new(32);
    buf.fill(3);
    let id = nt::mark(buf.ptr(), buf.len, Granularity::Area).unwrap();
    buf.touch_read(17);
    let s = nt::area_stats(id).unwrap();
    assert_eq!((s.touches, s.pages_moved, s.pages_still_marked), (1, 32, 0));
    assert!(buf.check(3));
    // The whole area is accessible again: no further touches were needed.
    assert_eq!(nt::area_stats(id).unwrap().touches, 1);
    assert_on_current_node(&buf);
    nt::unmark(id).unwrap();
}

/// Eight threads touch the same 64 pages at once, each incrementing a counter in every page:
/// each page moves exactly once and no increment is lost.
fn concurrent(granularity: Granularity) {
    const THREADS: usize = 8;
    let buf = Buf::new(64);
    buf.fill(4);
    let id = nt::mark(buf.ptr(), buf.len, granularity).unwrap();
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (buf, barrier) = (&buf, &barrier);
            sc.spawn(move || {
                barrier.wait();
                for k in 0..buf.pages() {
                    let i = (k * 7 + t * 13) % buf.pages();
                    // SAFETY: word 0 of each page is an aligned u64 only used atomically here.
                    let c = unsafe { &*(buf.page_addr(i) as *const AtomicU64) };
                    c.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let s = nt::area_stats(id).unwrap();
    assert_eq!(s.pages_moved, 64, "{s:?}");
    assert_eq!(s.move_failures, 0);
    assert_eq!(s.pages_still_marked, 0);
    match granularity {
        Granularity::Page => assert!(s.touches >= 64, "{s:?}"),
        Granularity::Area => assert!(s.touches >= 1, "{s:?}"),
    }
    for i in 0..buf.pages() {
        let w0 = unsafe { *(buf.page_addr(i) as *const u64) };
        assert_eq!(
            w0,
            pattern(4, i * page() / 8).wrapping_add(THREADS as u64),
            "page {i}"
        );
        unsafe { *(buf.page_addr(i) as *mut u64) = pattern(4, i * page() / 8) };
    }
    assert!(buf.check(4));
    nt::unmark(id).unwrap();
}

#[test]
fn concurrent_touches_page_granularity() {
    concurrent(Granularity::Page);
}

#[test]
fn concurrent_touches_area_granularity() {
    concurrent(Granularity::Area);
}

#[test]
fn unmark_restores_access_without_moving() {
    let buf = Buf::new(16);
    buf.fill(5);
    let id = nt::mark(buf.ptr(), buf.len, Granularity::Page).unwrap();
    buf.touch_read(0);
    let moved_before = nt::area_stats(id).unwrap().pages_moved;
    assert_eq!(moved_before, 1);
    nt::unmark(id).unwrap();
    assert!(perms_over(buf.addr, buf.addr + buf.len)
        .iter()
        .all(|p| p == "rw-p"));
    assert!(nt::area_stats(id).is_none());
    assert!(buf.check(5));
    assert_eq!(nt::unmark(id), Err(Error::UnknownArea { id }));
    // The range can be marked again, and unmarked by address.
    nt::mark(buf.ptr(), buf.len, Granularity::Area).unwrap();
    nt::unmark_at(unsafe { buf.ptr().add(3 * page()) }).unwrap();
    assert_eq!(
        nt::unmark_at(buf.ptr()),
        Err(Error::NoAreaAt { addr: buf.addr })
    );
    assert!(buf.check(5));
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let buf = Buf::new(8);
    buf.fill(6);
    let rw = || {
        perms_over(buf.addr, buf.addr + buf.len)
            .iter()
            .all(|p| p == "rw-p")
    };
    let e = nt::mark(unsafe { buf.ptr().add(8) }, page(), Granularity::Page).unwrap_err();
    assert_eq!(
        e,
        Error::Unaligned {
            addr: buf.addr + 8,
            page_bytes: page()
        }
    );
    assert_eq!(e.errno(), libc::EINVAL);
    let e = nt::mark(buf.ptr(), 0, Granularity::Page).unwrap_err();
    assert_eq!(e, Error::ZeroLength { addr: buf.addr });
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(nt::mark(
        (usize::MAX & !(page() - 1)) as *mut u8,
        2 * page(),
        Granularity::Page
    )
    .is_err());

    // A hole: the last two pages are unmapped; the first six must stay untouched.
    let hole = Buf::new(8);
    hole.fill(7);
    unsafe { libc::munmap((hole.addr + 6 * page()) as *mut libc::c_void, 2 * page()) };
    let e = nt::mark(hole.ptr(), hole.len, Granularity::Page).unwrap_err();
    assert_eq!(
        e,
        Error::NotMapped {
            addr: hole.addr,
            len_bytes: hole.len,
            hole: hole.addr + 6 * page()
        }
    );
    assert_eq!(e.errno(), libc::ENOMEM);
    assert!(perms_over(hole.addr, hole.addr + 6 * page())
        .iter()
        .all(|p| p == "rw-p"));
    assert_eq!(
        nt::unmark_at(hole.ptr()),
        Err(Error::NoAreaAt { addr: hole.addr })
    );

    // Read-only memory.
    let ro = Buf::new(2);
    unsafe { libc::mprotect(ro.ptr() as *mut libc::c_void, ro.len, libc::PROT_READ) };
    let e = nt::mark(ro.ptr(), ro.len, Granularity::Page).unwrap_err();
    assert!(matches!(e, Error::NotReadWrite { .. }), "{e}");
    assert_eq!(e.errno(), libc::EACCES);

    // Overlap with a marked area: refused, the first area unchanged.
    let id = nt::mark(buf.ptr(), 4 * page(), Granularity::Page).unwrap();
    let e = nt::mark(
        unsafe { buf.ptr().add(2 * page()) },
        4 * page(),
        Granularity::Page,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Overlap { .. }), "{e}");
    assert_eq!(e.errno(), libc::EEXIST);
    assert_eq!(
        perms_over(buf.addr + 4 * page(), buf.addr + 8 * page()),
        vec!["rw-p"]
    );
    assert_eq!(nt::area_stats(id).unwrap().pages_still_marked, 4);
    nt::unmark(id).unwrap();
    assert!(rw());
    assert!(buf.check(6));
    // The error messages say what was expected.
    assert!(Error::ZeroLength { addr: 0 }
        .to_string()
        .contains("at least one byte"));
}

// ---- child-process scenarios: handler chaining and whole-process phases ----

static CHAINED_ADDR: AtomicU64 = AtomicU64::new(0);

extern "C" fn prev_siginfo_handler(
    _sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    let addr = unsafe { (*info).si_addr() } as u64;
    let code = if addr == CHAINED_ADDR.load(Ordering::Relaxed) {
        42
    } else {
        41
    };
    unsafe { libc::_exit(code) };
}

extern "C" fn prev_plain_handler(_sig: libc::c_int) {
    unsafe { libc::_exit(43) };
}

/// In the child: install `prev` (or nothing), then numalab's handler, mark an area, touch it
/// (handled), then touch a PROT_NONE page outside every area (chained).
fn chaining_child(prev: Option<(usize, libc::c_int)>) -> ! {
    if let Some((h, flags)) = prev {
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = h;
            act.sa_flags = flags;
            libc::sigaction(libc::SIGSEGV, &act, std::ptr::null_mut());
        }
    }
    nt::install().unwrap();
    let ours = Buf::new(4);
    ours.fill(8);
    nt::mark(ours.ptr(), ours.len, Granularity::Page).unwrap();
    assert!(ours.check(8));
    assert_eq!(nt::stats().chained_signals, 0);
    let foreign = Buf::new(1);
    unsafe {
        libc::mprotect(
            foreign.ptr() as *mut libc::c_void,
            foreign.len,
            libc::PROT_NONE,
        )
    };
    CHAINED_ADDR.store(foreign.addr as u64 + 8, Ordering::Relaxed);
    eprintln!("child: touching a foreign PROT_NONE page");
    foreign.touch_read(0);
    eprintln!("child: survived a foreign fault");
    std::process::exit(0);
}

#[test]
fn fault_outside_areas_reaches_previous_siginfo_handler() {
    const NAME: &str = "fault_outside_areas_reaches_previous_siginfo_handler";
    if is_child(NAME) {
        chaining_child(Some((
            prev_siginfo_handler as extern "C" fn(_, _, _) as usize,
            libc::SA_SIGINFO,
        )));
    }
    let out = run_child(NAME, &[]);
    assert_eq!(
        out.status.code(),
        Some(42),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn fault_outside_areas_reaches_previous_plain_handler() {
    const NAME: &str = "fault_outside_areas_reaches_previous_plain_handler";
    if is_child(NAME) {
        chaining_child(Some((prev_plain_handler as extern "C" fn(_) as usize, 0)));
    }
    let out = run_child(NAME, &[]);
    assert_eq!(
        out.status.code(),
        Some(43),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn fault_outside_areas_with_default_action_kills_with_sigsegv() {
    const NAME: &str = "fault_outside_areas_with_default_action_kills_with_sigsegv";
    if is_child(NAME) {
        // Rust's runtime installed its guard-page reporter; start from SIG_DFL as a C program would.
        chaining_child(Some((libc::SIG_DFL, 0)));
    }
    let out = run_child(NAME, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{err}");
    assert!(
        err.contains("touching a foreign") && !err.contains("survived"),
        "{err}"
    );
}

#[test]
fn phase_marks_heap_and_anonymous_memory() {
    const NAME: &str = "phase_marks_heap_and_anonymous_memory";
    if is_child(NAME) {
        let small: Vec<u64> = (0..1000).map(|i| pattern(9, i)).collect(); // heap
        let big = Buf::new(256); // anonymous mmap
        big.fill(9);
        let before = nt::stats();
        let r = nt::phase(Granularity::Page).unwrap();
        assert!(r.areas_marked >= 1 && r.bytes_marked >= big.len, "{r:?}");
        assert!(perms_over(big.addr, big.addr + big.len)
            .iter()
            .all(|p| p == "---p"));
        assert!(big.check(9));
        assert!(small.iter().enumerate().all(|(i, &v)| v == pattern(9, i)));
        let after = nt::stats();
        assert!(
            after.touches - before.touches >= 256,
            "{before:?} {after:?}"
        );
        assert!(after.pages_moved - before.pages_moved >= 256);
        assert_eq!(after.phases, before.phases + 1);
        // The next phase unmarks this one's areas first.
        let r2 = nt::phase(Granularity::Area).unwrap();
        assert_eq!(r2.unmarked_previous, r.areas_marked);
        assert!(big.check(9));
        println!("child ok: {r:?} {r2:?}");
        std::process::exit(0);
    }
    let out = run_child(NAME, &[]);
    assert!(
        out.status.success(),
        "{:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn phase_signal_wakes_the_helper_thread() {
    // NUMALAB_NEXT_TOUCH=1 in the child's environment starts phase mode from the library's
    // constructor, as LD_PRELOAD does; SIGUSR1 is configured instead of SIGUSR2.
    const NAME: &str = "phase_signal_wakes_the_helper_thread";
    if is_child(NAME) {
        let big = Buf::new(128);
        big.fill(10);
        unsafe { libc::raise(libc::SIGUSR1) };
        let mut waited = 0;
        while nt::stats().phases == 0 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            waited += 1;
            assert!(waited < 3000, "helper thread never ran a phase");
        }
        assert!(big.check(10));
        let s = nt::stats();
        assert!(s.pages_moved >= 1, "{s:?}"); // area granularity: at least the one area moved
        println!("child ok: {s:?}");
        std::process::exit(0);
    }
    let out = run_child(
        NAME,
        &[
            ("NUMALAB_NEXT_TOUCH", "1"),
            ("NUMALAB_NEXT_TOUCH_SIGNAL", "USR1"),
            ("NUMALAB_NEXT_TOUCH_GRANULARITY", "area"),
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
