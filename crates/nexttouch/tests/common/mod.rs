//! Shared test helpers: an mmap'd buffer with a known pattern, checksums, /proc/self/maps
//! permissions, and re-running one test of the current binary in a child process.
#![allow(dead_code)]

use std::process::{Command, Output};

pub fn page() -> usize {
    numalab_nexttouch::page_bytes()
}

/// A private anonymous read-write mapping, unmapped on drop.
pub struct Buf {
    pub addr: usize,
    pub len: usize,
}

impl Buf {
    pub fn new(pages: usize) -> Buf {
        let len = pages * page();
        // SAFETY: a fresh anonymous mapping.
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
        assert_ne!(p, libc::MAP_FAILED, "mmap failed");
        Buf {
            addr: p as usize,
            len,
        }
    }
    pub fn ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }
    pub fn pages(&self) -> usize {
        self.len / page()
    }
    pub fn page_addr(&self, i: usize) -> usize {
        self.addr + i * page()
    }
    /// Write a pattern that differs per page and per word (and so populates every page).
    pub fn fill(&self, seed: u64) {
        let words = self.len / 8;
        for i in 0..words {
            // SAFETY: in bounds of the mapping.
            unsafe { *(self.addr as *mut u64).add(i) = pattern(seed, i) };
        }
    }
    /// Read every word (touching every page) and check the pattern.
    pub fn check(&self, seed: u64) -> bool {
        (0..self.len / 8).all(|i| unsafe { std::ptr::read_volatile((self.addr as *const u64).add(i)) } == pattern(seed, i))
    }
    /// Read one word of page `i` (a touch).
    pub fn touch_read(&self, i: usize) -> u64 {
        // SAFETY: in bounds.
        unsafe { std::ptr::read_volatile((self.page_addr(i) + 8) as *const u64) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

pub fn pattern(seed: u64, i: usize) -> u64 {
    (i as u64 ^ seed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
}

/// The permission strings of the mappings overlapping [a, b), from /proc/self/maps.
pub fn perms_over(a: usize, b: usize) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap();
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (r, perms) = (it.next()?, it.next()?);
            let (s, e) = r.split_once('-')?;
            let (s, e) = (
                usize::from_str_radix(s, 16).ok()?,
                usize::from_str_radix(e, 16).ok()?,
            );
            (s < b && a < e).then(|| perms.to_string())
        })
        .collect()
}

/// Env var telling a re-executed test binary which child scenario to run.
pub const CHILD_ENV: &str = "NUMALAB_NT_TEST_CHILD";

/// Run test `name` of this binary again in a child process with `CHILD_ENV=name` (and `envs`),
/// alone, so it can install handlers, crash, or mark the whole process without disturbing the
/// other tests.
pub fn run_child(name: &str, envs: &[(&str, &str)]) -> Output {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        name,
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "--include-ignored",
    ])
    .env(CHILD_ENV, name);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// True in the child run of test `name`.
pub fn is_child(name: &str) -> bool {
    std::env::var(CHILD_ENV).is_ok_and(|v| v == name)
}
