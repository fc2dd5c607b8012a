//! The NUMA memory-policy and migration syscalls, typed.
//!
//! glibc has no wrappers for these (numaif.h's `mbind`, `move_pages`... come from libnuma, which
//! numalab does not link), so each one is `libc::syscall(SYS_..., ...)`; the `libc` crate supplies
//! the SYS_ numbers for every architecture. Errors are diagnosed after the fact (EINVAL is looked
//! into: unknown node, node without memory, node outside the cpuset, mode too new for the running
//! kernel) so the message says which argument was wrong and what to do.

use crate::error::{errno_name, Error};
use crate::policy::{
    KernelMode, KernelNodemask, KernelPolicy, MbindFlags, ModeFlags, MPOL_MODE_FLAGS,
};
use crate::sysroot::{Pid, SysRoot};
use numalab_core::{MemPolicy, NodeId, NodeMask};
use std::ffi::c_void;

// get_mempolicy flags (include/uapi/linux/mempolicy.h).
const MPOL_F_NODE: libc::c_ulong = 1 << 0;
const MPOL_F_ADDR: libc::c_ulong = 1 << 1;
const MPOL_F_MEMS_ALLOWED: libc::c_ulong = 1 << 2;

/// Default pages per `move_pages` call. The kernel's cost is a fixed part per call plus a part
/// per page (reference/policies.md section 4, linear since 2.6.29), so big batches amortise the
/// fixed part; 4096 pages (16 MiB of base pages) keeps the three per-call arrays at 80 KiB.
pub const DEFAULT_MOVE_BATCH_PAGES: usize = 4096;

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// What `EINVAL` and friends are checked against.
#[derive(Default)]
struct Ctx<'a> {
    policy: Option<&'a KernelPolicy>,
    /// Nodes the call names (policy mask, migrate_pages' masks, move_pages' targets).
    nodes: NodeMask,
    pid: Option<Pid>,
    mbind_flags: MbindFlags,
    /// Extra words for the problem, e.g. "after 4096 of 8192 pages".
    detail: String,
}

/// The running kernel's release as (major, minor) and the full string, from uname(2).
pub fn kernel_release() -> Option<(u32, u32, String)> {
    // SAFETY: utsname is plain old data; uname fills it and NUL-terminates every field.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let rel: String = u
        .release
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8 as char)
        .collect();
    let mut it = rel.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor, rel))
}

fn older_than(since: &str) -> Option<String> {
    let (maj, min, rel) = kernel_release()?;
    let mut it = since.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (smaj, smin) = (it.next()?, it.next()?);
    ((maj, min) < (smaj, smin)).then_some(rel)
}

fn plural_nodes(m: &NodeMask) -> String {
    if m.weight() == 1 {
        format!("node {m} does not exist")
    } else {
        format!("nodes {m} do not exist")
    }
}

fn diagnose(syscall: &'static str, errno: i32, ctx: &Ctx) -> Error {
    let strerror = std::io::Error::from_raw_os_error(errno).to_string();
    let strerror = strerror
        .split(" (os error")
        .next()
        .unwrap_or("")
        .to_string();
    let other_pid = ctx
        .pid
        .filter(|p| p.0 != 0 && p.0 != std::process::id() as libc::pid_t);
    let mut problem;
    let remedy: String;
    match errno {
        libc::ENOSYS => {
            problem = format!("the kernel does not implement {syscall}");
            remedy = if syscall == "set_mempolicy_home_node" {
                "needs Linux 5.17+ built with NUMA support (CONFIG_NUMA)".into()
            } else {
                "the kernel was built without NUMA support (CONFIG_NUMA=n); use a NUMA-enabled kernel".into()
            };
        }
        libc::EPERM => {
            if let Some(p) = other_pid {
                problem = format!("not allowed to act on {p}");
                remedy = "acting on another user's process (or on nodes outside its cpuset) needs CAP_SYS_NICE: run as root or grant cap_sys_nice".into();
            } else if ctx.mbind_flags.contains(MbindFlags::MOVE_ALL) {
                problem = "MPOL_MF_MOVE_ALL is privileged".into();
                remedy = "MPOL_MF_MOVE_ALL needs CAP_SYS_NICE; use MPOL_MF_MOVE or run with cap_sys_nice".into();
            } else {
                problem = "operation not permitted".into();
                remedy = "a seccomp filter may block NUMA syscalls (container runtimes do unless CAP_SYS_NICE is granted), or the nodes are outside the cpuset (needs CAP_SYS_NICE)".into();
            }
        }
        libc::ESRCH => {
            problem = format!("no process with {}", ctx.pid.unwrap_or(Pid::SELF));
            remedy = "check the pid: the process may have exited".into();
        }
        libc::EINVAL => {
            let (p, r) = diagnose_einval(syscall, ctx);
            problem = p;
            remedy = r;
        }
        libc::EFAULT => {
            problem = "an address range or buffer is not mapped".into();
            remedy = "pass addresses of mapped memory of the target process".into();
        }
        libc::EIO => {
            problem =
                "MPOL_MF_STRICT: existing pages do not follow the policy or could not be moved"
                    .into();
            remedy = "add MPOL_MF_MOVE to migrate them, or drop MPOL_MF_STRICT".into();
        }
        libc::ENOMEM => {
            problem = "the kernel ran out of memory".into();
            remedy = "free memory on the target nodes, or move fewer pages per call".into();
        }
        libc::ENODEV => {
            problem = format!("a target node is offline or has no memory ({})", ctx.nodes);
            remedy =
                "move pages only to nodes listed in /sys/devices/system/node/has_memory".into();
        }
        libc::EACCES => {
            problem = "a target node is not allowed by the target process's cpuset".into();
            remedy = "pick nodes in the process's mems_allowed (or change its cpuset)".into();
        }
        libc::E2BIG => {
            problem = "too many pages in one call".into();
            remedy = "use a smaller MovePagesOptions::batch_pages".into();
        }
        libc::EOPNOTSUPP if syscall == "set_mempolicy_home_node" => {
            problem = "the range's policy is neither MPOL_BIND nor MPOL_PREFERRED_MANY".into();
            remedy = "mbind the range with MPOL_BIND or MPOL_PREFERRED_MANY first".into();
        }
        _ => {
            problem = strerror.clone();
            remedy = format!("see man 2 {syscall}");
        }
    }
    if !ctx.detail.is_empty() {
        problem = format!("{problem} ({})", ctx.detail);
    }
    Error::Syscall {
        syscall,
        problem,
        errno,
        errname: errno_name(errno),
        remedy,
    }
}

fn diagnose_einval(syscall: &'static str, ctx: &Ctx) -> (String, String) {
    let host = SysRoot::host();
    let online = host
        .read_optional(crate::node::ONLINE)
        .ok()
        .flatten()
        .and_then(|s| crate::parse::parse_node_list(&s, "online").ok());
    let memory = host
        .read_optional(crate::node::HAS_MEMORY)
        .ok()
        .flatten()
        .and_then(|s| crate::parse::parse_node_list(&s, "has_memory").ok());
    if let Some(online) = online {
        let missing = ctx.nodes.and_not(&online);
        if !missing.is_empty() {
            return (
                format!("{}: online nodes are {online}", plural_nodes(&missing)),
                "name nodes from /sys/devices/system/node/online".into(),
            );
        }
    }
    if let Some(memory) = memory {
        let no_mem = ctx.nodes.and_not(&memory);
        if !no_mem.is_empty() && syscall != "set_mempolicy_home_node" {
            return (
                format!("node(s) {no_mem} have no memory: memory nodes are {memory}"),
                "policies and migrations can only target nodes listed in /sys/devices/system/node/has_memory".into(),
            );
        }
    }
    if let Some(k) = ctx.policy {
        if let Some(rel) = older_than(k.mode.since_linux()) {
            return (
                format!("{} is unknown to this kernel (Linux {rel})", k.mode),
                format!("{} needs Linux {}+", k.mode, k.mode.since_linux()),
            );
        }
        if k.mode == KernelMode::WeightedInterleave
            && !host.path(crate::weighted_interleave::DIR).exists()
        {
            return (
                "MPOL_WEIGHTED_INTERLEAVE is unknown to this kernel".into(),
                "MPOL_WEIGHTED_INTERLEAVE needs Linux 6.9+".into(),
            );
        }
        if k.flags.contains(ModeFlags::NUMA_BALANCING) {
            if let Some(rel) = older_than("5.12") {
                return (
                    format!("MPOL_F_NUMA_BALANCING is unknown to this kernel (Linux {rel})"),
                    "MPOL_F_NUMA_BALANCING needs Linux 5.12+ (with MPOL_PREFERRED_MANY: a newer kernel still)".into(),
                );
            }
        }
    }
    if syscall == "set_mempolicy_home_node" {
        if let Some(rel) = older_than("5.17") {
            return (
                format!("unknown syscall on Linux {rel}"),
                "set_mempolicy_home_node needs Linux 5.17+".into(),
            );
        }
    }
    if !ctx.nodes.is_empty() {
        if let Ok(allowed) = mems_allowed() {
            let outside = ctx.nodes.and_not(&allowed);
            if !outside.is_empty() && (outside == ctx.nodes || syscall == "migrate_pages") {
                return (
                    format!(
                        "nodes {outside} are outside this task's cpuset (mems_allowed = {allowed})"
                    ),
                    "use nodes of the cpuset, or widen it (cgroup cpuset.mems)".into(),
                );
            }
        }
    }
    let what = match ctx.policy {
        Some(k) => format!("invalid argument for {k}"),
        None => "invalid argument".into(),
    };
    (
        what,
        format!("check the mode, flags, nodemask and alignment against man 2 {syscall}"),
    )
}

fn mask_ptr(k: &Option<KernelNodemask>) -> *const libc::c_ulong {
    k.as_ref().map_or(std::ptr::null(), |k| k.words.as_ptr())
}

fn maxnode_of(k: &Option<KernelNodemask>) -> libc::c_ulong {
    if k.is_some() {
        KernelNodemask::maxnode()
    } else {
        0
    }
}

/// The nodemask argument: NULL for MPOL_DEFAULT/MPOL_LOCAL (the kernel wants an empty mask
/// there), the mask otherwise.
fn policy_mask(k: &KernelPolicy) -> Option<KernelNodemask> {
    match k.mode {
        KernelMode::Default | KernelMode::Local => None,
        _ => Some(KernelNodemask::from_mask(&k.nodes)),
    }
}

/// Weighted-interleave weights are system-wide sysfs settings, not a syscall argument: check
/// that the ones asked for are the ones in force rather than silently ignoring them.
fn check_weights(p: &MemPolicy, syscall: &'static str) -> Result<(), Error> {
    let MemPolicy::WeightedInterleave { nodes, weights } = p else {
        return Ok(());
    };
    if weights.is_empty() {
        return Ok(());
    }
    let Some(sys) = crate::weighted_interleave::read_weights(&SysRoot::host())? else {
        return Err(Error::Argument {
            syscall,
            problem: "weighted-interleave weights were given but this kernel has no /sys/kernel/mm/mempolicy/weighted_interleave".into(),
            remedy: "MPOL_WEIGHTED_INTERLEAVE needs Linux 6.9+".into(),
        });
    };
    for n in nodes.iter() {
        let want = MemPolicy::weight_of(weights, n);
        let have = sys.weight(n);
        if have != Some(want as u8) {
            return Err(Error::Argument {
                syscall,
                problem: format!(
                    "weight {want} asked for node {} but the system-wide weight is {}",
                    n.0,
                    have.map_or("unset".to_string(), |w| w.to_string())
                ),
                remedy: "weights are system-wide sysfs settings, not a syscall argument: write them first with numalab_linux::weighted_interleave::write_weight (needs root), or pass empty weights to use the current ones".into(),
            });
        }
    }
    Ok(())
}

/// `set_mempolicy(2)`: set the calling **thread's** policy (inherited by threads and processes it
/// creates later; only later allocations follow it). See [`KernelPolicy::from_mempolicy`] for
/// the mapping and for what happens to weights and to `RemotePercent`.
pub fn set_mempolicy(policy: &MemPolicy) -> Result<(), Error> {
    set_mempolicy_flags(policy, ModeFlags::empty())
}

/// `set_mempolicy(2)` with extra mode flags (MPOL_F_STATIC_NODES / MPOL_F_RELATIVE_NODES).
pub fn set_mempolicy_flags(policy: &MemPolicy, flags: ModeFlags) -> Result<(), Error> {
    const SYSCALL: &str = "set_mempolicy";
    let k = KernelPolicy::from_mempolicy(policy, flags, SYSCALL)?;
    check_weights(policy, SYSCALL)?;
    set_kernel_mempolicy(&k)
}

/// `set_mempolicy(2)` with a policy already in kernel terms.
pub fn set_kernel_mempolicy(k: &KernelPolicy) -> Result<(), Error> {
    const SYSCALL: &str = "set_mempolicy";
    let mask = policy_mask(k);
    // SAFETY: the mask buffer outlives the call and holds maxnode - 1 bits.
    let r = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            k.raw_mode(),
            mask_ptr(&mask),
            maxnode_of(&mask),
        )
    };
    if r != 0 {
        let e = last_errno();
        return Err(diagnose(
            SYSCALL,
            e,
            &Ctx {
                policy: Some(k),
                nodes: k.nodes,
                ..Default::default()
            },
        ));
    }
    Ok(())
}

fn raw_get_mempolicy(
    addr: usize,
    flags: libc::c_ulong,
    want_mask: bool,
) -> Result<(i32, NodeMask), Error> {
    let mut mode: libc::c_int = 0;
    let mut mask = KernelNodemask::empty();
    let (ptr, maxnode) = if want_mask {
        (mask.words.as_mut_ptr(), KernelNodemask::maxnode())
    } else {
        (std::ptr::null_mut(), 0)
    };
    // SAFETY: `mode` and the mask buffer (maxnode - 1 bits) are valid for writes during the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            ptr,
            maxnode,
            addr,
            flags,
        )
    };
    if r != 0 {
        let e = last_errno();
        let detail = if flags & MPOL_F_ADDR != 0 {
            format!("address {addr:#x}")
        } else {
            String::new()
        };
        return Err(diagnose(
            "get_mempolicy",
            e,
            &Ctx {
                detail,
                ..Default::default()
            },
        ));
    }
    Ok((mode, mask.to_mask()))
}

fn decode(mode_raw: i32, nodes: NodeMask) -> Result<KernelPolicy, Error> {
    let mode = KernelMode::from_raw(mode_raw & !MPOL_MODE_FLAGS).ok_or_else(|| Error::Syscall {
        syscall: "get_mempolicy",
        problem: format!("the kernel reported mode {mode_raw:#x}, unknown to numalab"),
        errno: 0,
        errname: "no errno",
        remedy: "a kernel newer than numalab added a mode: extend numalab_linux::KernelMode".into(),
    })?;
    Ok(KernelPolicy {
        mode,
        flags: ModeFlags::from_bits_truncate((mode_raw & MPOL_MODE_FLAGS) as u32),
        nodes,
    })
}

/// `get_mempolicy(2)`: the calling thread's policy.
pub fn get_mempolicy() -> Result<KernelPolicy, Error> {
    let (m, nodes) = raw_get_mempolicy(0, 0, true)?;
    decode(m, nodes)
}

/// `get_mempolicy(2)` with MPOL_F_ADDR: the policy governing `addr` (the VMA policy set by
/// `mbind`, or the thread policy where the range has none).
pub fn get_range_policy(addr: usize) -> Result<KernelPolicy, Error> {
    let (m, nodes) = raw_get_mempolicy(addr, MPOL_F_ADDR, true)?;
    decode(m, nodes)
}

/// `get_mempolicy(2)` with MPOL_F_NODE | MPOL_F_ADDR: the node of the page holding `addr`.
///
/// The kernel faults the page in (for reading) if it is absent, so an untouched anonymous page
/// reports the shared zero page's node; [`move_pages_query`] reports such a page as
/// [`PageStatus::NotPresent`] without touching it.
pub fn node_of_address(addr: usize) -> Result<NodeId, Error> {
    let (node, _) = raw_get_mempolicy(addr, MPOL_F_NODE | MPOL_F_ADDR, false)?;
    Ok(NodeId(node as u16))
}

/// `get_mempolicy(2)` with MPOL_F_NODE alone: the node the calling thread's next interleaved
/// allocation goes to; `None` when its policy is not MPOL_INTERLEAVE (the kernel's EINVAL).
pub fn interleave_next_node() -> Option<u16> {
    raw_get_mempolicy(0, MPOL_F_NODE, false)
        .ok()
        .map(|(n, _)| n as u16)
}

/// `get_mempolicy(2)` with MPOL_F_MEMS_ALLOWED: the nodes the calling thread's cpuset allows.
pub fn mems_allowed() -> Result<NodeMask, Error> {
    let (_, nodes) = raw_get_mempolicy(0, MPOL_F_MEMS_ALLOWED, true)?;
    Ok(nodes)
}

/// `sched_getaffinity(2)` of the calling thread: the CPUs it may run on.
pub fn cpu_affinity() -> std::io::Result<Vec<numalab_core::CpuId>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it, and CPU_ISSET reads within
    // it for indices below CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .map(|i| numalab_core::CpuId(i as u32))
        .collect())
}

/// `sched_setaffinity(2)`: thread `tid` (0: the calling thread) may run on `cpus` only. A CPU
/// beyond what a `cpu_set_t` holds (`CPU_SETSIZE`) is EINVAL, as the kernel says of a CPU it
/// does not have.
pub fn set_cpu_affinity(tid: libc::pid_t, cpus: &[numalab_core::CpuId]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes within it for CPUs below CPU_SETSIZE,
    // checked first.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in cpus {
        if c.0 as usize >= libc::CPU_SETSIZE as usize {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        unsafe { libc::CPU_SET(c.0 as usize, &mut set) };
    }
    if unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The base page size (a power of two).
pub fn page_size_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let s = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if s > 0 {
        s as usize
    } else {
        4096
    }
}

/// `mbind(2)`: set the policy of `[addr, addr + len_bytes)` of the calling process (`addr`
/// page-aligned). With `MbindFlags::MOVE` existing pages are migrated to follow the policy.
pub fn mbind(
    addr: usize,
    len_bytes: usize,
    policy: &MemPolicy,
    mode_flags: ModeFlags,
    flags: MbindFlags,
) -> Result<(), Error> {
    let k = KernelPolicy::from_mempolicy(policy, mode_flags, "mbind")?;
    check_weights(policy, "mbind")?;
    mbind_kernel(addr, len_bytes, &k, flags)
}

/// `mbind(2)` with a policy in the kernel's terms, passed as it is: a mode other than
/// MPOL_DEFAULT and MPOL_LOCAL gets its mask even when empty (what libnuma passes, e.g.
/// numactl's MPOL_PREFERRED with no node, which kernels take differently), and the kernel
/// judges it.
pub fn mbind_kernel(
    addr: usize,
    len_bytes: usize,
    k: &KernelPolicy,
    flags: MbindFlags,
) -> Result<(), Error> {
    const SYSCALL: &str = "mbind";
    let page = page_size_bytes();
    if addr & (page - 1) != 0 {
        return Err(Error::Argument {
            syscall: SYSCALL,
            problem: format!("address {addr:#x} is not aligned to the {page}-byte page size"),
            remedy: "round the start down to a page boundary (mmap returns aligned memory)".into(),
        });
    }
    let mask = policy_mask(k);
    // SAFETY: the kernel only reads the mask (maxnode - 1 bits); the range is checked by the kernel.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len_bytes as libc::c_ulong,
            k.raw_mode() as libc::c_ulong,
            mask_ptr(&mask),
            maxnode_of(&mask),
            flags.bits() as libc::c_uint,
        )
    };
    if r != 0 {
        let e = last_errno();
        return Err(diagnose(
            SYSCALL,
            e,
            &Ctx {
                policy: Some(k),
                nodes: k.nodes,
                mbind_flags: flags,
                detail: format!("range {addr:#x}+{len_bytes:#x}"),
                ..Default::default()
            },
        ));
    }
    Ok(())
}

/// `set_mempolicy_home_node(2)` (5.17): the first-choice node for the MPOL_BIND or
/// MPOL_PREFERRED_MANY ranges within `[addr, addr + len_bytes)`.
pub fn set_mempolicy_home_node(addr: usize, len_bytes: usize, home: NodeId) -> Result<(), Error> {
    const SYSCALL: &str = "set_mempolicy_home_node";
    // SAFETY: no user memory is passed; the flags argument must be 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy_home_node,
            addr as libc::c_ulong,
            len_bytes as libc::c_ulong,
            home.0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if r != 0 {
        let e = last_errno();
        return Err(diagnose(
            SYSCALL,
            e,
            &Ctx {
                nodes: NodeMask::single(home),
                detail: format!("range {addr:#x}+{len_bytes:#x}, home node {}", home.0),
                ..Default::default()
            },
        ));
    }
    Ok(())
}

/// `migrate_pages(2)`: move every page of `pid` on `from` to `to` (relative positions kept).
/// Returns the number of pages that could not be moved.
pub fn migrate_pages(pid: Pid, from: &NodeMask, to: &NodeMask) -> Result<u64, Error> {
    const SYSCALL: &str = "migrate_pages";
    let old = KernelNodemask::from_mask(from);
    let new = KernelNodemask::from_mask(to);
    // SAFETY: both masks hold maxnode - 1 bits and are only read.
    let r = unsafe {
        libc::syscall(
            libc::SYS_migrate_pages,
            pid.0,
            KernelNodemask::maxnode(),
            old.words.as_ptr(),
            new.words.as_ptr(),
        )
    };
    if r < 0 {
        let e = last_errno();
        return Err(diagnose(
            SYSCALL,
            e,
            &Ctx {
                nodes: from.or(to),
                pid: Some(pid),
                detail: format!("{pid}, from nodes {from} to nodes {to}"),
                ..Default::default()
            },
        ));
    }
    Ok(r as u64)
}

/// Where one page is, or why `move_pages` could not tell or move it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PageStatus {
    /// The page is on this node (after the move, in move mode).
    OnNode(NodeId),
    /// -ENOENT: not present (never touched, or swapped out).
    NotPresent,
    /// -EBUSY: locked or under I/O; retry later.
    Busy,
    /// -EACCES / -EPERM: shared with other processes (needs MPOL_MF_MOVE_ALL) or not permitted.
    Denied,
    /// -EFAULT: the zero page, or the address is not mapped.
    Fault,
    /// -ENOMEM: the target node is full.
    NoMemory,
    /// Any other negative errno (positive here), e.g. EIO.
    Other(i32),
}

impl PageStatus {
    /// Decode one `status[]` entry.
    pub fn from_raw(s: i32) -> PageStatus {
        match s {
            n if n >= 0 && n <= u16::MAX as i32 => PageStatus::OnNode(NodeId(n as u16)),
            n if n == -libc::ENOENT => PageStatus::NotPresent,
            n if n == -libc::EBUSY => PageStatus::Busy,
            n if n == -libc::EACCES || n == -libc::EPERM => PageStatus::Denied,
            n if n == -libc::EFAULT => PageStatus::Fault,
            n if n == -libc::ENOMEM => PageStatus::NoMemory,
            n => PageStatus::Other(n.saturating_neg()),
        }
    }

    /// The node, for `OnNode`.
    pub fn node(self) -> Option<NodeId> {
        match self {
            PageStatus::OnNode(n) => Some(n),
            _ => None,
        }
    }
}

/// How `move_pages` is called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovePagesOptions {
    /// Pages per syscall (at least 1).
    pub batch_pages: usize,
    /// MPOL_MF_MOVE_ALL instead of MPOL_MF_MOVE: also move pages shared with other processes
    /// (needs CAP_SYS_NICE). Ignored in query mode.
    pub move_all: bool,
}

impl Default for MovePagesOptions {
    fn default() -> Self {
        MovePagesOptions {
            batch_pages: DEFAULT_MOVE_BATCH_PAGES,
            move_all: false,
        }
    }
}

/// The outcome of a move: per-page status and the kernel's count of pages left behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveReport {
    /// Per-page status, in the order of the pages given.
    pub status: Vec<PageStatus>,
    /// Sum of the syscall's return values: pages that could not be migrated.
    pub not_moved: u64,
}

impl MoveReport {
    /// Pages now on `node`.
    pub fn count_on(&self, node: NodeId) -> usize {
        self.status
            .iter()
            .filter(|s| **s == PageStatus::OnNode(node))
            .count()
    }
}

fn check_batch(opts: &MovePagesOptions) -> Result<(), Error> {
    if opts.batch_pages == 0 {
        return Err(Error::Argument {
            syscall: "move_pages",
            problem: "batch_pages is 0".into(),
            remedy: "use at least 1 page per call (default 4096)".into(),
        });
    }
    Ok(())
}

/// `move_pages(2)` in query mode (`nodes == NULL`): where each page of `pid` is. `pages` are
/// addresses in `pid`'s address space (any address within a page names that page).
pub fn move_pages_query(
    pid: Pid,
    pages: &[usize],
    opts: &MovePagesOptions,
) -> Result<Vec<PageStatus>, Error> {
    check_batch(opts)?;
    let mut out = Vec::with_capacity(pages.len());
    for chunk in pages.chunks(opts.batch_pages) {
        let (status, _) = raw_move_pages(pid, chunk, None, 0, out.len(), pages.len())?;
        out.extend(status);
    }
    Ok(out)
}

/// `move_pages(2)` in move mode: page `pages[i]` of `pid` goes to `nodes[i]`. Target nodes are
/// checked against `/sys/devices/system/node/has_memory` first, so a bad node fails before any
/// batch has moved anything. A later batch failing leaves earlier batches moved; the error then
/// says how far it got.
pub fn move_pages(
    pid: Pid,
    pages: &[usize],
    nodes: &[NodeId],
    opts: &MovePagesOptions,
) -> Result<MoveReport, Error> {
    const SYSCALL: &str = "move_pages";
    check_batch(opts)?;
    if pages.len() != nodes.len() {
        return Err(Error::Argument {
            syscall: SYSCALL,
            problem: format!("{} pages but {} target nodes", pages.len(), nodes.len()),
            remedy: "give one target node per page".into(),
        });
    }
    validate_targets(nodes)?;
    let flags = if opts.move_all {
        MbindFlags::MOVE_ALL.bits()
    } else {
        MbindFlags::MOVE.bits()
    };
    let mut report = MoveReport {
        status: Vec::with_capacity(pages.len()),
        not_moved: 0,
    };
    for (pc, nc) in pages
        .chunks(opts.batch_pages)
        .zip(nodes.chunks(opts.batch_pages))
    {
        let (status, left) =
            raw_move_pages(pid, pc, Some(nc), flags, report.status.len(), pages.len())?;
        report.status.extend(status);
        report.not_moved += left;
    }
    Ok(report)
}

/// [`move_pages`] with every page going to the same node.
pub fn move_pages_to(
    pid: Pid,
    pages: &[usize],
    node: NodeId,
    opts: &MovePagesOptions,
) -> Result<MoveReport, Error> {
    move_pages(pid, pages, &vec![node; pages.len()], opts)
}

fn validate_targets(nodes: &[NodeId]) -> Result<(), Error> {
    let host = SysRoot::host();
    let read = |rel| {
        host.read_optional(rel)
            .ok()
            .flatten()
            .and_then(|s| crate::parse::parse_node_list(&s, rel).ok())
    };
    let (Some(online), Some(memory)) = (read(crate::node::ONLINE), read(crate::node::HAS_MEMORY))
    else {
        // No readable sysfs (e.g. a sandbox): let the kernel judge.
        return Ok(());
    };
    let asked = NodeMask::from_nodes(
        nodes
            .iter()
            .copied()
            .filter(|n| n.index() < numalab_core::nodemask::MAX_NODES),
    );
    if let Some(big) = nodes
        .iter()
        .find(|n| n.index() >= numalab_core::nodemask::MAX_NODES)
    {
        return Err(Error::Argument {
            syscall: "move_pages",
            problem: format!("node {} does not exist: online nodes are {online}", big.0),
            remedy: "name nodes from /sys/devices/system/node/online".into(),
        });
    }
    let missing = asked.and_not(&online);
    if !missing.is_empty() {
        return Err(Error::Argument {
            syscall: "move_pages",
            problem: format!(
                "target {}: online nodes are {online}",
                plural_nodes(&missing)
            ),
            remedy: "name nodes from /sys/devices/system/node/online".into(),
        });
    }
    let no_mem = asked.and_not(&memory);
    if !no_mem.is_empty() {
        return Err(Error::Argument {
            syscall: "move_pages",
            problem: format!("target node(s) {no_mem} have no memory: memory nodes are {memory}"),
            remedy: "move pages only to nodes listed in /sys/devices/system/node/has_memory".into(),
        });
    }
    Ok(())
}

fn raw_move_pages(
    pid: Pid,
    pages: &[usize],
    nodes: Option<&[NodeId]>,
    flags: u32,
    done: usize,
    total: usize,
) -> Result<(Vec<PageStatus>, u64), Error> {
    let ptrs: Vec<*const c_void> = pages.iter().map(|a| *a as *const c_void).collect();
    let targets: Option<Vec<libc::c_int>> =
        nodes.map(|n| n.iter().map(|n| n.0 as libc::c_int).collect());
    // i32::MIN marks an entry the kernel did not write (it writes all of them on success).
    let mut status: Vec<libc::c_int> = vec![i32::MIN; pages.len()];
    // SAFETY: the three arrays have `count` entries and live across the call; the kernel reads
    // `pages`/`nodes` and writes `status`. The page addresses themselves are never dereferenced
    // by us.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid.0,
            pages.len() as libc::c_ulong,
            ptrs.as_ptr(),
            targets.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            status.as_mut_ptr(),
            flags as libc::c_int,
        )
    };
    if r < 0 {
        let e = last_errno();
        let detail = if done > 0 {
            format!("{pid}, after {done} of {total} pages")
        } else {
            format!("{pid}, {total} pages")
        };
        return Err(diagnose(
            "move_pages",
            e,
            &Ctx {
                nodes: nodes.map_or(NodeMask::empty(), |n| {
                    NodeMask::from_nodes(n.iter().copied())
                }),
                pid: Some(pid),
                detail,
                ..Default::default()
            },
        ));
    }
    Ok((
        status.into_iter().map(PageStatus::from_raw).collect(),
        r as u64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_status_decoding() {
        assert_eq!(PageStatus::from_raw(3), PageStatus::OnNode(NodeId(3)));
        assert_eq!(PageStatus::from_raw(-libc::ENOENT), PageStatus::NotPresent);
        assert_eq!(PageStatus::from_raw(-libc::EBUSY), PageStatus::Busy);
        assert_eq!(PageStatus::from_raw(-libc::EACCES), PageStatus::Denied);
        assert_eq!(PageStatus::from_raw(-libc::EPERM), PageStatus::Denied);
        assert_eq!(PageStatus::from_raw(-libc::EFAULT), PageStatus::Fault);
        assert_eq!(PageStatus::from_raw(-libc::ENOMEM), PageStatus::NoMemory);
        assert_eq!(
            PageStatus::from_raw(-libc::EIO),
            PageStatus::Other(libc::EIO)
        );
        assert_eq!(PageStatus::from_raw(i32::MIN), PageStatus::Other(i32::MAX));
    }

    #[test]
    fn kernel_release_parses() {
        let (major, _, rel) = kernel_release().unwrap();
        assert!(major >= 2, "{rel}");
    }
}
