//! Shared by the balance tests: a child process (this test binary re-executed with
//! NUMALAB_BALANCE_CHILD set) that maps a buffer, fills it with a known pattern, keeps reading
//! it until its stdin closes, then checks every word; and a sample-file writer.
#![allow(dead_code)]

use numalab_analyze::format::WriterOptions;
use numalab_analyze::{FileMeta, Known, Record, SampleWriter};
use numalab_core::{AccessSample, CpuId, DataSource, NodeId, PageSize, TaskId, ThreadId};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child as Proc, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub const PAGE: u64 = 4096;
const ENV: &str = "NUMALAB_BALANCE_CHILD";
const ENV_BIND: &str = "NUMALAB_BALANCE_CHILD_BIND";
const ENV_THP: &str = "NUMALAB_BALANCE_CHILD_THP";
const HUGE: usize = 2 << 20;

fn word(i: usize) -> u64 {
    (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5a5a
}

/// The child's body, when this binary was started as the child; a no-op otherwise.
/// The buffer's last page is never touched (the view must report it absent).
pub fn child_body() {
    let Some(bytes) = std::env::var(ENV)
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
    else {
        return;
    };
    let thp = std::env::var_os(ENV_THP).is_some();
    // with THP, a 2 MiB-aligned buffer in a larger mapping, so that it is made of huge pages
    let map_bytes = if thp { bytes + HUGE } else { bytes };
    // SAFETY: a fresh private anonymous mapping, used only by this process.
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(m, libc::MAP_FAILED);
    let p = if thp {
        ((m as usize).div_ceil(HUGE) * HUGE) as *mut libc::c_void
    } else {
        m
    };
    // 4 KiB pages (placement counted in the unit the samples name) unless THP is asked for
    let advice = if thp {
        libc::MADV_HUGEPAGE
    } else {
        libc::MADV_NOHUGEPAGE
    };
    // SAFETY: the range lies within the mapping just made.
    unsafe { libc::madvise(p, bytes, advice) };
    if let Some(node) = std::env::var(ENV_BIND)
        .ok()
        .and_then(|s| s.parse::<u16>().ok())
    {
        numalab_linux::mbind(
            p as usize,
            bytes,
            &numalab_core::MemPolicy::Bind {
                nodes: numalab_core::NodeMask::single(NodeId(node)),
                numa_balancing: false,
            },
            numalab_linux::ModeFlags::empty(),
            numalab_linux::MbindFlags::empty(),
        )
        .expect("mbind");
    }
    let words = (bytes - PAGE as usize) / 8;
    // SAFETY: `words` u64s fit in the mapping (its last page excluded) and nothing else
    // refers to it.
    let buf: &mut [u64] = unsafe { std::slice::from_raw_parts_mut(p as *mut u64, words) };
    for (i, w) in buf.iter_mut().enumerate() {
        *w = word(i);
    }
    println!("BUF {:x} {} {}", p as usize, bytes, std::process::id());
    std::io::stdout().flush().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        d.store(true, Ordering::SeqCst);
    });
    let mut sum = 0u64;
    while !done.load(Ordering::SeqCst) {
        for w in buf.iter().step_by(8) {
            // SAFETY: a read of a live element; volatile so the loop really reads memory
            sum = sum.wrapping_add(unsafe { std::ptr::read_volatile(w) });
        }
    }
    let bad = buf
        .iter()
        .enumerate()
        .filter(|(i, w)| **w != word(*i))
        .count();
    // the parent may be gone (a failed test): a closed pipe is no reason to panic
    let mut out = std::io::stdout();
    let _ = if bad == 0 {
        writeln!(out, "CHECK ok {sum}")
    } else {
        writeln!(out, "CHECK bad {bad} words")
    };
    let _ = out.flush();
    std::process::exit(0);
}

pub struct Child {
    proc: Proc,
    out: BufReader<ChildStdout>,
    pub pid: i32,
    pub addr: u64,
    pub len: u64,
}

impl Child {
    /// Starts `test` (the child-body test of this binary) as a child with `bytes` of buffer,
    /// bound to `bind` when given; returns once the buffer is filled.
    // the process is waited for by `finish` or `kill`; a child left behind by a failed test
    // ends by itself when its stdin (our pipe) closes
    #[allow(clippy::zombie_processes)]
    pub fn spawn(test: &str, bytes: usize, bind: Option<u16>) -> Child {
        Child::spawn_with(test, bytes, bind, false)
    }

    /// [`Child::spawn`], the buffer 2 MiB-aligned with MADV_HUGEPAGE when `thp`.
    #[allow(clippy::zombie_processes)]
    pub fn spawn_with(test: &str, bytes: usize, bind: Option<u16>, thp: bool) -> Child {
        Child::spawn_on(test, bytes, bind, thp, None)
    }

    /// [`Child::spawn_with`], every thread of the child confined to `cpu` from its start (so
    /// that even threads that never wake up show that CPU in their stat).
    #[allow(clippy::zombie_processes)]
    pub fn spawn_on(
        test: &str,
        bytes: usize,
        bind: Option<u16>,
        thp: bool,
        cpu: Option<u32>,
    ) -> Child {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        if let Some(cpu) = cpu {
            use std::os::unix::process::CommandExt;
            // SAFETY: only sched_setaffinity, a plain syscall, runs between fork and exec;
            // the mask is inherited across exec and by every thread the child starts.
            unsafe {
                cmd.pre_exec(move || {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu as usize, &mut set);
                    if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd.args([test, "--exact", "--nocapture", "--include-ignored"])
            .env(ENV, bytes.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(n) = bind {
            cmd.env(ENV_BIND, n.to_string());
        }
        if thp {
            cmd.env(ENV_THP, "1");
        }
        let mut proc = cmd.spawn().expect("starting the child");
        let mut out = BufReader::new(proc.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
            // a child confined to one CPU runs libtest with one test thread, which prints
            // "test child_process_body ... " before the test: BUF may follow on that line
            if let Some(rest) = line.find("BUF ").map(|i| &line[i + 4..]) {
                let f: Vec<&str> = rest.split_whitespace().collect();
                return Child {
                    addr: u64::from_str_radix(f[0], 16).unwrap(),
                    len: f[1].parse().unwrap(),
                    pid: f[2].parse().unwrap(),
                    proc,
                    out,
                };
            }
        }
    }

    /// Page `i` of the buffer.
    pub fn page(&self, i: u64) -> u64 {
        self.addr + i * PAGE
    }

    pub fn pages(&self) -> u64 {
        self.len / PAGE
    }

    /// Closes the child's stdin and returns its verdict line ("CHECK ok ...").
    pub fn finish(mut self) -> String {
        drop(self.proc.stdin.take());
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        self.proc.wait().unwrap();
        rest.lines()
            .find_map(|l| l.find("CHECK").map(|i| &l[i..]))
            .unwrap_or("no verdict")
            .to_string()
    }

    pub fn kill(mut self) {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }
}

/// One sample: an access to `addr` at `time_ns` from `cpu` on `cpu_node`; the page's node
/// and the data source are left unknown, as in a perf recording.
pub fn sample(pid: i32, time_ns: u64, addr: u64, cpu: u32, cpu_node: u16) -> Record {
    let s = AccessSample {
        time_ns,
        task: TaskId(pid as u32),
        thread: ThreadId(pid as u32),
        cpu: CpuId(cpu),
        cpu_node: NodeId(cpu_node),
        addr,
        page_node: NodeId(0),
        page_size: PageSize::Base4K,
        source: DataSource::LocalDram,
        latency_ns: 0.0,
        write: false,
    };
    Record {
        known: Known::CPU_NODE.with(Known::WRITE),
        ..Record::from_sample(s)
    }
}

pub fn write_samples(path: &Path, records: &[Record], period: u64, nodes: u16) {
    let meta = FileMeta {
        machine: "test".into(),
        workload: "balance-child".into(),
        origin: "perf".into(),
        sample_period: period,
        nodes,
        ..Default::default()
    };
    let mut w = SampleWriter::create(path, &meta, WriterOptions::default()).unwrap();
    for r in records {
        w.push(r).unwrap();
    }
    w.finish().unwrap();
}
