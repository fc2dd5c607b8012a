//! The recorded child: this test binary run again with `NUMALAB_RECORD_CHILD` set, through
//! its ignored `child_entry` test. It maps one region per thread (4 KiB pages, huge pages
//! disabled so that each page faults once), optionally binds it to a node and pins itself to a
//! CPU, touches every page with a write and writes `region START END TID` lines to a file.
//!
//! `NUMALAB_RECORD_CHILD` is `key=value,...`: `pages` per region, `threads`, `info` (file),
//! `bind` (node), `cpu`, `go` (a file to wait for before touching), `hold_ms` (stay alive
//! after touching).

#![allow(dead_code)]

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const CHILD_ENV: &str = "NUMALAB_RECORD_CHILD";

/// One touched region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub tid: u32,
}

impl Region {
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end
    }
}

/// The command line that runs this binary as the child.
pub fn child_argv() -> Vec<OsString> {
    let exe = std::env::current_exe().expect("test executable");
    [
        exe.into_os_string(),
        "child_entry".into(),
        "--exact".into(),
        "--ignored".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ]
    .into()
}

/// A scratch directory of this test.
pub fn scratch(name: &str) -> PathBuf {
    let base = if Path::new("/tmp").is_dir() {
        PathBuf::from("/tmp")
    } else {
        std::env::temp_dir()
    };
    let d = base.join(format!("numalab-record-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Reads the regions the child wrote.
pub fn read_regions(info: &Path) -> Vec<Region> {
    let text = std::fs::read_to_string(info).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[0] == "region").then(|| Region {
                start: u64::from_str_radix(f[1], 16).unwrap(),
                end: u64::from_str_radix(f[2], 16).unwrap(),
                tid: f[3].parse().unwrap(),
            })
        })
        .collect()
}

/// Waits until `p` exists (the child has written it), at most `max`.
pub fn wait_for(p: &Path, max: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < max {
        if p.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn param(spec: &str, key: &str) -> Option<String> {
    spec.split(',')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The child's work; called by `child_entry` when `NUMALAB_RECORD_CHILD` is set.
pub fn child_main(spec: &str) {
    let pages: usize = param(spec, "pages").map_or(256, |v| v.parse().unwrap());
    let threads: usize = param(spec, "threads").map_or(1, |v| v.parse().unwrap());
    let info = PathBuf::from(param(spec, "info").expect("info=FILE"));
    let bind = param(spec, "bind").map(|v| v.parse::<u16>().unwrap());
    let cpu = param(spec, "cpu").map(|v| v.parse::<usize>().unwrap());
    let go = param(spec, "go").map(PathBuf::from);
    let hold = Duration::from_millis(param(spec, "hold_ms").map_or(0, |v| v.parse().unwrap()));
    let page = 4096usize;
    let len = pages * page;
    let mut regions = Vec::new();
    for _ in 0..threads {
        // SAFETY: a private anonymous mapping, ours alone.
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
        // One fault per 4 KiB page: no THP, no mTHP.
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
        if let Some(n) = bind {
            numalab_linux::mbind(
                p as usize,
                len,
                &numalab_core::MemPolicy::Bind {
                    nodes: numalab_core::NodeMask::single(numalab_core::NodeId(n)),
                    numa_balancing: false,
                },
                numalab_linux::ModeFlags::empty(),
                numalab_linux::MbindFlags::empty(),
            )
            .expect("mbind");
        }
        regions.push(p as usize);
    }
    if let Some(c) = cpu {
        // SAFETY: setting our own affinity to one CPU.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(c, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
                0
            );
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let touch = move |base: usize| {
        for i in 0..pages {
            // SAFETY: inside our mapping; a volatile write so that each page really faults.
            unsafe { std::ptr::write_volatile((base + i * page) as *mut u8, 1) };
        }
    };
    let mut handles = Vec::new();
    for (i, &base) in regions.iter().enumerate() {
        let tx = tx.clone();
        let go = go.clone();
        let work = move || {
            if let Some(g) = &go {
                assert!(wait_for(g, Duration::from_secs(60)), "no go file");
            }
            touch(base);
            tx.send((i, base, gettid())).unwrap();
        };
        if i == 0 {
            handles.push(None);
            work();
        } else {
            // Threads inherit the affinity set above.
            handles.push(Some(std::thread::spawn(work)));
        }
    }
    for h in handles.into_iter().flatten() {
        h.join().unwrap();
    }
    drop(tx);
    let mut got: Vec<(usize, usize, u32)> = rx.iter().collect();
    got.sort();
    let mut text = String::new();
    for (_, base, tid) in got {
        text.push_str(&format!("region {:x} {:x} {tid}\n", base, base + len));
    }
    // Written under another name and renamed, so a reader never sees half a file.
    let tmp = info.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    drop(f);
    std::fs::rename(&tmp, &info).unwrap();
    std::thread::sleep(hold);
}
