//! `perf_event_open(2)` for sampling, its mmap'ed ring buffer and the records in it.
//!
//! The attribute struct and ioctls come from the `perf-event-open-sys` crate (bindgen output of
//! the kernel's uapi `linux/perf_event.h`); everything else (the ring protocol, record
//! decoding) is here, small enough not to need a perf library.

use crate::Error;
use perf_event_open_sys as sys;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};
use sys::bindings::{self as b, perf_event_attr, perf_event_mmap_page};

/// What to sample and how: one event of the chosen mechanism.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// Name as perf writes it (`cpu/mem-loads,ldlat=30/P`, `page-faults`).
    pub name: String,
    /// `perf_event_attr.type` (PERF_TYPE_SOFTWARE, or a PMU's dynamic type from sysfs).
    pub type_: u32,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    /// One sample every `period` events.
    pub period: u64,
    /// `precise_ip` (PEBS needs 1 or more; 0 elsewhere).
    pub precise_ip: u8,
    /// The event's samples carry weight and data_src (PEBS, IBS).
    pub memory_fields: bool,
    /// Ask for PHYS_ADDR (needs CAP_PERFMON / perf_event_paranoid <= 0 on most kernels).
    pub phys_addr: bool,
    /// Leave out kernel-mode events (needed by unprivileged users at perf_event_paranoid 2).
    pub exclude_kernel: bool,
    /// Samples of this event are stores (mem-stores), loads (mem-loads), or either.
    pub is_store: Option<bool>,
    /// The CPUs its PMU covers (hybrid CPUs: `cpu_core/cpus`); None = all.
    pub cpus: Option<Vec<u32>>,
}

impl EventSpec {
    /// `PERF_SAMPLE_*` bits for this event. The decoder follows the same bits.
    pub fn sample_type(&self) -> u64 {
        // IDENTIFIER first: several events share one ring per CPU and it tells them apart.
        let mut t = b::PERF_SAMPLE_IDENTIFIER
            | b::PERF_SAMPLE_IP
            | b::PERF_SAMPLE_TID
            | b::PERF_SAMPLE_TIME
            | b::PERF_SAMPLE_ADDR
            | b::PERF_SAMPLE_CPU
            | b::PERF_SAMPLE_PERIOD;
        if self.memory_fields {
            t |= b::PERF_SAMPLE_WEIGHT | b::PERF_SAMPLE_DATA_SRC;
        }
        if self.phys_addr {
            t |= b::PERF_SAMPLE_PHYS_ADDR;
        }
        t as u64
    }

    /// The attribute: sampling every `period`, CLOCK_MONOTONIC timestamps (so that samples
    /// and placement snapshots share one clock), mmap/comm/task records, inherited by threads
    /// and children created later.
    pub fn attr(&self, enable_on_exec: bool) -> perf_event_attr {
        // SAFETY: perf_event_attr is plain data; all-zero is its documented default.
        let mut a: perf_event_attr = unsafe { std::mem::zeroed() };
        a.type_ = self.type_;
        a.size = std::mem::size_of::<perf_event_attr>() as u32;
        a.config = self.config;
        a.config1 = self.config1;
        a.config2 = self.config2;
        a.sample_period = self.period.max(1);
        a.sample_type = self.sample_type();
        a.set_disabled(1);
        a.set_inherit(1);
        a.set_enable_on_exec(enable_on_exec as u64);
        a.set_exclude_kernel(self.exclude_kernel as u64);
        a.set_exclude_hv(1);
        a.set_exclude_guest(1);
        a.set_precise_ip(self.precise_ip as u64);
        a.set_mmap(1);
        a.set_mmap2(1);
        a.set_comm(1);
        a.set_task(1);
        a.set_sample_id_all(1);
        a.set_use_clockid(1);
        a.clockid = libc::CLOCK_MONOTONIC;
        a
    }
}

/// Data pages of each CPU's ring buffer by default (a power of two): 512 KiB holds ~8000
/// page-fault samples (64 bytes each), read every 10 ms.
pub const RING_DATA_PAGES: usize = 128;

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// `/proc/sys/kernel/perf_event_paranoid`, if readable.
pub fn paranoid_level() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The error of a failed `perf_event_open`, with what to do about it.
pub fn open_error(spec: &EventSpec, target: &str, errno: i32) -> Error {
    let paranoid = paranoid_level();
    let p = paranoid.map_or("unknown".to_string(), |p| p.to_string());
    let what = match errno {
        libc::EACCES | libc::EPERM => format!(
            "permission denied (perf_event_paranoid is {p}; sampling another user's process or \
             kernel-mode events needs CAP_PERFMON or root, and a level of at most 2 for your own \
             processes' user-space events, at most 1 for kernel events, at most 0 for physical \
             addresses): run as root, or `sudo sysctl kernel.perf_event_paranoid=1`"
        ),
        libc::ENOENT | libc::EOPNOTSUPP | libc::EINVAL => {
            "the kernel or the CPU does not support this event with these settings".to_string()
        }
        libc::ESRCH => "no such process (it has exited?)".to_string(),
        libc::EMFILE | libc::ENFILE => {
            "too many open files: raise `ulimit -n` (one file per thread and event)".to_string()
        }
        libc::ENODEV => "no such PMU on this CPU".to_string(),
        _ => "refused".to_string(),
    };
    Error::PerfOpen {
        event: spec.name.clone(),
        target: target.to_string(),
        errno,
        what,
        paranoid,
    }
}

/// One sampling event: a (process, CPU) pair of one event of the mechanism.
///
/// Per CPU, not per task with cpu = -1: the kernel refuses to mmap an inherited per-task
/// event (`perf_mmap`: "Don't allow mmap() of inherited per-task counters"), and `inherit` is
/// what makes threads and children started later be sampled. perf record does the same.
pub struct Counter {
    fd: OwnedFd,
    /// The kernel's id of this event (PERF_EVENT_IOC_ID), the IDENTIFIER of its samples.
    pub id: u64,
    /// Index of the event in the file's event list.
    pub event: u16,
    pub cpu: i32,
}

impl Counter {
    /// Opens `spec` on process/thread `pid`, on `cpu` only.
    pub fn open(
        spec: &EventSpec,
        event: u16,
        pid: libc::pid_t,
        cpu: i32,
        enable_on_exec: bool,
    ) -> Result<Counter, i32> {
        let mut attr = spec.attr(enable_on_exec);
        // SAFETY: attr is a valid, fully initialised perf_event_attr.
        let fd =
            unsafe { sys::perf_event_open(&mut attr, pid, cpu, -1, b::PERF_FLAG_FD_CLOEXEC as _) };
        if fd < 0 {
            return Err(last_errno());
        }
        // SAFETY: fd was just returned by the kernel and is ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut id = 0u64;
        // SAFETY: PERF_EVENT_IOC_ID writes one u64.
        if unsafe { sys::ioctls::ID(fd.as_raw_fd(), &mut id) } < 0 {
            return Err(last_errno());
        }
        Ok(Counter { fd, id, event, cpu })
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    pub fn enable(&self) -> Result<(), i32> {
        // SAFETY: ioctl on our own perf fd.
        if unsafe { sys::ioctls::ENABLE(self.fd.as_raw_fd(), 0) } < 0 {
            return Err(last_errno());
        }
        Ok(())
    }

    pub fn disable(&self) {
        // SAFETY: ioctl on our own perf fd.
        unsafe { sys::ioctls::DISABLE(self.fd.as_raw_fd(), 0) };
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The ring buffer of one CPU: mapped on its first counter, the others of that CPU send their
/// records to it (PERF_EVENT_IOC_SET_OUTPUT).
pub struct Ring {
    base: *mut u8,
    mmap_len: usize,
    data_size: u64,
    leader_fd: i32,
    sample_type: u64,
    /// Scratch for records that wrap around the end of the ring.
    scratch: Vec<u8>,
}

// The mapping is owned by this value alone.
unsafe impl Send for Ring {}

impl Ring {
    /// Maps `pages` data pages (rounded to a power of two) of `leader`'s buffer. The counter
    /// must outlive the ring's use.
    pub fn map(leader: &Counter, pages: usize, sample_type: u64) -> Result<Ring, i32> {
        let pages = pages.max(1).next_power_of_two();
        let ps = page_size();
        let mmap_len = (1 + pages) * ps;
        // SAFETY: mapping a perf fd as the kernel documents: 1 + 2^n pages, shared, writable
        // (so that we move data_tail and the kernel never overwrites unread data).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mmap_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                leader.raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(last_errno());
        }
        Ok(Ring {
            base: base as *mut u8,
            mmap_len,
            data_size: (pages * ps) as u64,
            leader_fd: leader.raw_fd(),
            sample_type,
            scratch: Vec::new(),
        })
    }

    /// Sends `c`'s records to this ring (same CPU).
    pub fn redirect(&self, c: &Counter) -> Result<(), i32> {
        // SAFETY: both fds are ours and alive.
        if unsafe { sys::ioctls::SET_OUTPUT(c.raw_fd(), self.leader_fd) } < 0 {
            return Err(last_errno());
        }
        Ok(())
    }

    fn header(&self) -> *mut perf_event_mmap_page {
        self.base as *mut perf_event_mmap_page
    }

    /// Hands every complete record to `f` and frees its space; `ids` maps sample
    /// identifiers to event indexes.
    pub fn drain(&mut self, ids: &HashMap<u64, u16>, mut f: impl FnMut(PerfRecord<'_>)) {
        let h = self.header();
        // SAFETY: the header page is mapped for our lifetime; data_head is written by the
        // kernel, so it is read volatile and followed by an acquire fence (the documented
        // protocol: read head, rmb, read data, mb, write tail).
        let head = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*h).data_head)) };
        fence(Ordering::Acquire);
        // SAFETY: as above; only we write data_tail.
        let mut tail = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*h).data_tail)) };
        let ps = page_size();
        // SAFETY: the data area starts one page after the header, data_size bytes long.
        let data =
            unsafe { std::slice::from_raw_parts(self.base.add(ps), self.data_size as usize) };
        let mask = self.data_size - 1;
        while head.wrapping_sub(tail) >= 8 {
            let off = (tail & mask) as usize;
            let mut hdr = [0u8; 8];
            copy_wrapped(data, off, &mut hdr);
            let ty = u32::from_ne_bytes(hdr[0..4].try_into().unwrap());
            let misc = u16::from_ne_bytes(hdr[4..6].try_into().unwrap());
            let size = u16::from_ne_bytes(hdr[6..8].try_into().unwrap()) as usize;
            if size < 8 || head.wrapping_sub(tail) < size as u64 {
                break;
            }
            self.scratch.resize(size, 0);
            copy_wrapped(data, off, &mut self.scratch);
            let body = &self.scratch[8..size];
            f(decode(ty, misc, body, self.sample_type, ids));
            tail = tail.wrapping_add(size as u64);
        }
        fence(Ordering::SeqCst);
        // SAFETY: publishing how far we read, as the protocol says.
        unsafe { std::ptr::write_volatile(std::ptr::addr_of_mut!((*h).data_tail), tail) };
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.mmap_len) };
    }
}

fn copy_wrapped(data: &[u8], off: usize, out: &mut [u8]) {
    let first = out.len().min(data.len() - off);
    out[..first].copy_from_slice(&data[off..off + first]);
    let rest = out.len() - first;
    out[first..].copy_from_slice(&data[..rest]);
}

/// A memory-access sample as the kernel gave it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RawSample {
    pub event: u16,
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time_ns: u64,
    pub addr: u64,
    pub cpu: u32,
    pub period: u64,
    pub weight: Option<u64>,
    pub data_src: Option<u64>,
    pub phys_addr: Option<u64>,
    /// PERF_RECORD_MISC_USER (vs kernel) in the header.
    pub user: bool,
}

/// The records numalab uses; the others are `Other`.
#[derive(Debug, PartialEq, Eq)]
pub enum PerfRecord<'a> {
    Sample(RawSample),
    /// PERF_RECORD_MMAP / MMAP2.
    Mmap {
        pid: u32,
        tid: u32,
        addr: u64,
        len: u64,
        /// File offset of the mapping's start (bytes).
        pgoff: u64,
        prot_exec: bool,
        filename: &'a str,
    },
    Comm {
        pid: u32,
        tid: u32,
        comm: &'a str,
    },
    Fork {
        pid: u32,
        tid: u32,
    },
    Exit {
        pid: u32,
        tid: u32,
    },
    /// Records the kernel dropped because the ring was full.
    Lost(u64),
    Other(u32),
    /// A record shorter than its fields.
    Malformed(u32),
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn u64(&mut self) -> Option<u64> {
        let v = self.b.get(self.at..self.at + 8)?;
        self.at += 8;
        Some(u64::from_ne_bytes(v.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        let v = self.b.get(self.at..self.at + 4)?;
        self.at += 4;
        Some(u32::from_ne_bytes(v.try_into().ok()?))
    }
    /// A NUL-terminated string padded to 8 bytes, taking the rest of the fixed part.
    fn cstr(&mut self) -> &'a str {
        let rest = self.b.get(self.at..).unwrap_or(&[]);
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }
}

const MISC_CPUMODE_MASK: u16 = 7;
const MISC_USER: u16 = 2;
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;

/// Decodes one record body (after the 8-byte header) in the kernel's field order.
pub fn decode<'a>(
    ty: u32,
    misc: u16,
    body: &'a [u8],
    sample_type: u64,
    ids: &HashMap<u64, u16>,
) -> PerfRecord<'a> {
    let mut c = Cursor { b: body, at: 0 };
    let st = sample_type;
    let has = |bit: u32| st & bit as u64 != 0;
    let r = (|| -> Option<PerfRecord<'_>> {
        Some(match ty {
            b::PERF_RECORD_SAMPLE => {
                let mut s = RawSample {
                    user: misc & MISC_CPUMODE_MASK == MISC_USER,
                    ..Default::default()
                };
                if has(b::PERF_SAMPLE_IDENTIFIER) {
                    s.event = ids.get(&c.u64()?).copied().unwrap_or(0);
                }
                if has(b::PERF_SAMPLE_IP) {
                    s.ip = c.u64()?;
                }
                if has(b::PERF_SAMPLE_TID) {
                    s.pid = c.u32()?;
                    s.tid = c.u32()?;
                }
                if has(b::PERF_SAMPLE_TIME) {
                    s.time_ns = c.u64()?;
                }
                if has(b::PERF_SAMPLE_ADDR) {
                    s.addr = c.u64()?;
                }
                if has(b::PERF_SAMPLE_ID) {
                    c.u64()?;
                }
                if has(b::PERF_SAMPLE_STREAM_ID) {
                    c.u64()?;
                }
                if has(b::PERF_SAMPLE_CPU) {
                    s.cpu = c.u32()?;
                    c.u32()?;
                }
                if has(b::PERF_SAMPLE_PERIOD) {
                    s.period = c.u64()?;
                }
                // READ, CALLCHAIN, RAW, BRANCH_STACK, REGS_USER, STACK_USER are never asked for.
                if has(b::PERF_SAMPLE_WEIGHT) {
                    s.weight = Some(c.u64()?);
                }
                if has(b::PERF_SAMPLE_DATA_SRC) {
                    s.data_src = Some(c.u64()?);
                }
                if has(b::PERF_SAMPLE_TRANSACTION) {
                    c.u64()?;
                }
                if has(b::PERF_SAMPLE_PHYS_ADDR) {
                    s.phys_addr = Some(c.u64()?);
                }
                PerfRecord::Sample(s)
            }
            b::PERF_RECORD_MMAP2 => {
                let pid = c.u32()?;
                let tid = c.u32()?;
                let addr = c.u64()?;
                let len = c.u64()?;
                let pgoff = c.u64()?;
                // maj, min, ino, ino_generation, or (with MISC_MMAP_BUILD_ID) a build id of the
                // same 24 bytes.
                let _ = misc & MISC_MMAP_BUILD_ID;
                c.u64()?;
                c.u64()?;
                c.u64()?;
                let prot = c.u32()?;
                let _flags = c.u32()?;
                PerfRecord::Mmap {
                    pid,
                    tid,
                    addr,
                    len,
                    pgoff,
                    prot_exec: prot & libc::PROT_EXEC as u32 != 0,
                    filename: c.cstr(),
                }
            }
            b::PERF_RECORD_MMAP => {
                let pid = c.u32()?;
                let tid = c.u32()?;
                let addr = c.u64()?;
                let len = c.u64()?;
                let pgoff = c.u64()?;
                PerfRecord::Mmap {
                    pid,
                    tid,
                    addr,
                    len,
                    pgoff,
                    // PERF_RECORD_MISC_MMAP_DATA (bit 13) marks non-executable mappings.
                    prot_exec: misc & (1 << 13) == 0,
                    filename: c.cstr(),
                }
            }
            b::PERF_RECORD_COMM => {
                let pid = c.u32()?;
                let tid = c.u32()?;
                PerfRecord::Comm {
                    pid,
                    tid,
                    comm: c.cstr(),
                }
            }
            b::PERF_RECORD_FORK | b::PERF_RECORD_EXIT => {
                let pid = c.u32()?;
                let _ppid = c.u32()?;
                let tid = c.u32()?;
                if ty == b::PERF_RECORD_FORK {
                    PerfRecord::Fork { pid, tid }
                } else {
                    PerfRecord::Exit { pid, tid }
                }
            }
            b::PERF_RECORD_LOST => {
                let _id = c.u64()?;
                PerfRecord::Lost(c.u64()?)
            }
            other => PerfRecord::Other(other),
        })
    })();
    r.unwrap_or(PerfRecord::Malformed(ty))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(memory: bool) -> EventSpec {
        EventSpec {
            name: "x".into(),
            type_: 1,
            config: 2,
            config1: 0,
            config2: 0,
            period: 1,
            precise_ip: 0,
            memory_fields: memory,
            phys_addr: memory,
            exclude_kernel: false,
            is_store: None,
            cpus: None,
        }
    }

    #[test]
    fn decodes_a_sample_in_kernel_order() {
        let s = spec(true);
        let mut body = Vec::new();
        body.extend(77u64.to_ne_bytes()); // identifier
        body.extend(0x401000u64.to_ne_bytes()); // ip
        body.extend(7u32.to_ne_bytes()); // pid
        body.extend(9u32.to_ne_bytes()); // tid
        body.extend(1234u64.to_ne_bytes()); // time
        body.extend(0x7f00_0000_1000u64.to_ne_bytes()); // addr
        body.extend(3u32.to_ne_bytes()); // cpu
        body.extend(0u32.to_ne_bytes()); // res
        body.extend(1u64.to_ne_bytes()); // period
        body.extend(55u64.to_ne_bytes()); // weight
        body.extend(0x42u64.to_ne_bytes()); // data_src
        body.extend(0x1234_5000u64.to_ne_bytes()); // phys
        let ids: HashMap<u64, u16> = [(77, 1)].into();
        let r = decode(
            b::PERF_RECORD_SAMPLE,
            MISC_USER,
            &body,
            s.sample_type(),
            &ids,
        );
        assert_eq!(
            r,
            PerfRecord::Sample(RawSample {
                event: 1,
                ip: 0x401000,
                pid: 7,
                tid: 9,
                time_ns: 1234,
                addr: 0x7f00_0000_1000,
                cpu: 3,
                period: 1,
                weight: Some(55),
                data_src: Some(0x42),
                phys_addr: Some(0x1234_5000),
                user: true,
            })
        );
        // One byte short: malformed, not a panic.
        let r = decode(
            b::PERF_RECORD_SAMPLE,
            0,
            &body[..body.len() - 1],
            s.sample_type(),
            &ids,
        );
        assert_eq!(r, PerfRecord::Malformed(b::PERF_RECORD_SAMPLE));
    }

    #[test]
    fn decodes_mmap2_and_lost() {
        let mut body = Vec::new();
        body.extend(5u32.to_ne_bytes());
        body.extend(6u32.to_ne_bytes());
        body.extend(0x1000u64.to_ne_bytes());
        body.extend(0x2000u64.to_ne_bytes());
        body.extend(0u64.to_ne_bytes());
        body.extend([0u8; 24]);
        body.extend((libc::PROT_READ | libc::PROT_EXEC).to_ne_bytes());
        body.extend(0u32.to_ne_bytes());
        body.extend(b"/bin/true\0\0\0\0\0\0\0");
        let r = decode(b::PERF_RECORD_MMAP2, 0, &body, 0, &HashMap::new());
        assert_eq!(
            r,
            PerfRecord::Mmap {
                pid: 5,
                tid: 6,
                addr: 0x1000,
                len: 0x2000,
                pgoff: 0,
                prot_exec: true,
                filename: "/bin/true"
            }
        );
        let mut body = Vec::new();
        body.extend(1u64.to_ne_bytes());
        body.extend(17u64.to_ne_bytes());
        assert_eq!(
            decode(b::PERF_RECORD_LOST, 0, &body, 0, &HashMap::new()),
            PerfRecord::Lost(17)
        );
    }

    #[test]
    fn wrapped_copy() {
        let data = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut out = [0u8; 4];
        copy_wrapped(&data, 6, &mut out);
        assert_eq!(out, [7, 8, 1, 2]);
    }
}
