//! Test helpers: an anonymous mapping whose pages can be touched, checked and listed.

#![allow(dead_code)] // each test binary uses a different subset

use std::ptr::NonNull;

/// Base page size of the running kernel.
pub fn page_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// A private anonymous mapping, unmapped on drop. THP is switched off for it
/// (MADV_NOHUGEPAGE) so every page is a base page whatever the system's THP mode.
pub struct Region {
    ptr: NonNull<u8>,
    pub pages: usize,
}

impl Region {
    pub fn new(pages: usize) -> Region {
        let len = pages * page_bytes();
        // SAFETY: a fresh anonymous mapping; the result is checked.
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
        assert_ne!(p, libc::MAP_FAILED, "mmap of {len} bytes");
        // SAFETY: the range was just mapped.
        let r = unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
        assert_eq!(r, 0, "madvise(MADV_NOHUGEPAGE)");
        Region {
            ptr: NonNull::new(p as *mut u8).unwrap(),
            pages,
        }
    }

    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    pub fn len_bytes(&self) -> usize {
        self.pages * page_bytes()
    }

    pub fn page_addr(&self, i: usize) -> usize {
        self.addr() + i * page_bytes()
    }

    pub fn page_addrs(&self) -> Vec<usize> {
        (0..self.pages).map(|i| self.page_addr(i)).collect()
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is readable and writable for len_bytes and owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len_bytes()) }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: as above, shared.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len_bytes()) }
    }

    /// Write to page `i` (first touch allocates it under the governing policy).
    pub fn touch(&mut self, i: usize) {
        let off = i * page_bytes();
        self.bytes_mut()[off] = 1;
    }

    pub fn touch_all(&mut self) {
        for i in 0..self.pages {
            self.touch(i);
        }
    }

    /// Fill every byte with a pattern derived from its offset and `seed`.
    pub fn fill(&mut self, seed: u64) {
        for (i, b) in self.bytes_mut().iter_mut().enumerate() {
            *b = ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed).rotate_left(17) as u8;
        }
    }

    /// FNV-1a over the whole region.
    pub fn checksum(&self) -> u64 {
        self.bytes().iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3)
        })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len_bytes()) };
    }
}

/// Run `f` in a fresh thread: memory policies are per thread, so a test that sets one cannot
/// leak it into the harness's other tests.
pub fn in_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().expect("test thread panicked")
}

/// A pid that has just exited (reaped), so the kernel answers ESRCH for it.
pub fn dead_pid() -> libc::pid_t {
    let mut c = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    let pid = c.id() as libc::pid_t;
    c.wait().unwrap();
    pid
}

/// Whether the NUMA syscalls can run here. Container seccomp profiles (Docker's default) refuse
/// them with EPERM without CAP_SYS_NICE, and a kernel without CONFIG_NUMA answers ENOSYS; the
/// syscall tests then say so and skip rather than fail on the environment.
pub fn numa_syscalls_available() -> bool {
    match numalab_linux::get_mempolicy() {
        Ok(_) => true,
        Err(e) if matches!(e.errno(), Some(libc::EPERM) | Some(libc::ENOSYS)) => {
            eprintln!("NUMA syscalls unavailable here, test skipped: {e}");
            false
        }
        Err(e) => panic!("get_mempolicy probe: {e}"),
    }
}
