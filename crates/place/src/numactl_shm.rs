//! numactl's shared-memory policies: `--shm`, `--file`, `--length`, `--offset`, `--shmmode`,
//! `--shmid`, `--huge`, `--strict`, `--touch`, `--dump`, `--dump-nodes` and `--verify`, with
//! numactl 2.0.16's meaning (Debian 12's; its numactl.c and shm.c). These options act in the
//! order they are given: `--length` and `--offset` before `--shm`/`--file` size the region,
//! a policy after it is set on the region with mbind(2) (`--strict`: MPOL_MF_STRICT), and
//! `--dump` prints the region's policies at that point. numactl prints its messages and quirks
//! (`crates/cli/tests/vm_numactl_shm.rs` compares every line with the real numactl in the
//! VM); where numactl's behaviour is odd the comment says so, as users' scripts depend on it.
//!
//! Written against libc directly (System V shm, ftok, mmap): no maintained crate wraps
//! `shmget`/`shmat` with the flags numactl uses (SHM_HUGETLB, a key from `ftok`).

use crate::nodespec::{parse_nodes, SpecContext};
use crate::numactl_show::policy_name;
use numalab_core::{MemPolicy, NodeId, NodeMask};
use numalab_linux::{syscalls, KernelMode, KernelPolicy, MbindFlags, ModeFlags};
use std::ffi::CString;
use std::io::Write;

/// One numactl option, in the order given on the command line.
#[derive(Clone, Debug, PartialEq)]
pub enum Opt {
    Interleave(String),
    Membind(String),
    Preferred(String),
    PreferredMany(String),
    WeightedInterleave(String),
    Localalloc,
    CpuNodeBind(String),
    PhysCpuBind(String),
    Balancing,
    All,
    Strict,
    Shm(String),
    File(String),
    Offset(String),
    Length(String),
    ShmMode(String),
    ShmId(String),
    Huge,
    Touch,
    Dump,
    DumpNodes,
    Verify,
}

impl Opt {
    /// Whether the option is a node or CPU spec (what `--all` must come before).
    pub fn is_spec(&self) -> bool {
        matches!(
            self,
            Opt::Interleave(_)
                | Opt::Membind(_)
                | Opt::Preferred(_)
                | Opt::PreferredMany(_)
                | Opt::WeightedInterleave(_)
                | Opt::CpuNodeBind(_)
                | Opt::PhysCpuBind(_)
        )
    }

    /// Whether the option concerns shared memory only (numalab then reads the options in
    /// order as numactl does; without any of them the launch path applies the rest).
    pub fn is_shm(&self) -> bool {
        matches!(
            self,
            Opt::Shm(_)
                | Opt::File(_)
                | Opt::Offset(_)
                | Opt::Length(_)
                | Opt::ShmMode(_)
                | Opt::ShmId(_)
                | Opt::Huge
                | Opt::Touch
                | Opt::Dump
                | Opt::DumpNodes
                | Opt::Verify
        )
    }
}

/// How numactl's option pass ended.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// A segment was attached: numactl exits with this status (1 where `--verify` found a
    /// page off its policy) and runs no command.
    Exit(i32),
    /// No segment: the options place a process, which the launch path does.
    Process,
}

/// numactl stopped with exit status 1 after printing its message. `usage`: it then prints
/// its usage text (numactl's `usage_msg` and `usage`).
#[derive(Debug, PartialEq)]
pub struct Stop {
    pub usage: bool,
}

/// Where numactl writes: its messages to `err`, dumps and verify reports to `out`.
pub struct Io<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
}

impl Io<'_> {
    /// numactl's `complain`: "numactl: MSG" on stderr, and its newline on stdout (numactl
    /// ends the message with `putchar`), then exit 1.
    fn complain(&mut self, msg: &str) -> Stop {
        let _ = write!(self.err, "numactl: {msg}");
        let _ = writeln!(self.out);
        Stop { usage: false }
    }

    /// numactl's `usage_msg`: as `complain`, then the usage text.
    fn usage_msg(&mut self, msg: &str) -> Stop {
        self.complain(msg);
        Stop { usage: true }
    }

    /// numactl's `nerror`: "numactl: MSG: strerror(errno)", exit 1.
    fn nerror(&mut self, msg: &str, errno: i32) -> Stop {
        let _ = write!(self.err, "numactl: {msg}");
        if errno != 0 {
            let _ = writeln!(self.err, ": {}", strerror(errno));
        } else {
            let _ = writeln!(self.err);
        }
        Stop { usage: false }
    }

    /// `perror(what)`.
    fn perror(&mut self, what: &str, errno: i32) {
        let _ = writeln!(self.err, "{what}: {}", strerror(errno));
    }

    /// numactl's `err(x)`: perror("numactl: x"), exit 1.
    fn err(&mut self, what: &str, errno: i32) -> Stop {
        self.perror(&format!("numactl: {what}"), errno);
        Stop { usage: false }
    }
}

fn strerror(errno: i32) -> String {
    // SAFETY: strerror returns a valid NUL-terminated string; numalab reads it at once, on
    // the one thread that runs this pass.
    unsafe { std::ffi::CStr::from_ptr(libc::strerror(errno)) }
        .to_string_lossy()
        .into_owned()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The errno of a numalab_linux error (0 where it refused before calling the kernel).
fn errno_of(e: &numalab_linux::Error) -> i32 {
    match e {
        numalab_linux::Error::Syscall { errno, .. } => *errno,
        _ => libc::EINVAL,
    }
}

/// C's `strtoul(s, &end, base)`: the value and the bytes read (0: no digits). Leading blanks
/// and a sign are accepted, base 0 reads `0x` as hexadecimal and a leading `0` as octal, a
/// value beyond 64 bits saturates, and a minus sign negates modulo 2^64.
fn c_strtoul(s: &str, base: u32) -> (u64, usize) {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && (b[i] as char).is_ascii_whitespace() {
        i += 1;
    }
    let neg = i < b.len() && b[i] == b'-';
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let hex_prefix = |i: usize| {
        b.get(i) == Some(&b'0')
            && matches!(b.get(i + 1), Some(b'x' | b'X'))
            && b.get(i + 2).is_some_and(|c| c.is_ascii_hexdigit())
    };
    let base = match base {
        0 if hex_prefix(i) => {
            i += 2;
            16
        }
        0 if b.get(i) == Some(&b'0') => 8,
        0 => 10,
        16 if hex_prefix(i) => {
            i += 2;
            16
        }
        b => b,
    };
    let start = i;
    let mut v: u64 = 0;
    let mut overflow = false;
    while let Some(d) = b.get(i).and_then(|c| (*c as char).to_digit(base)) {
        match v
            .checked_mul(base as u64)
            .and_then(|x| x.checked_add(d as u64))
        {
            Some(x) => v = x,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start {
        return (0, 0);
    }
    if overflow {
        return (u64::MAX, i);
    }
    (if neg { v.wrapping_neg() } else { v }, i)
}

/// numactl's `memsize`: a number (C's base 0) with an optional k, m or g suffix (binary
/// units, either case); anything after it is ignored, as in numactl.
pub fn memsize(s: &str) -> u64 {
    let (v, end) = c_strtoul(s, 0);
    let shift = match s.as_bytes().get(end).map(|c| c.to_ascii_uppercase()) {
        Some(b'G') => 30,
        Some(b'M') => 20,
        Some(b'K') => 10,
        _ => 0,
    };
    v.wrapping_mul(1 << shift)
}

/// A number the whole of `s` must be (numactl's `--shmmode` in octal, `--shmid` in C's base
/// 0), else None (numactl then prints its usage).
fn whole_number(s: &str, base: u32) -> Option<u64> {
    let (v, end) = c_strtoul(s, base);
    (end > 0 && end == s.len()).then_some(v)
}

/// libnuma's `printmask` of a node mask.
fn mask_line(name: &str, mask: &NodeMask) -> String {
    crate::numactl_show::mask_line(name, mask.iter().map(|n| n.0 as u32))
}

/// An attached segment or mapped file: numactl's `shmptr`, `shmlen` and page size.
#[derive(Copy, Clone)]
struct Region {
    /// Start of the policy region (the attach address plus `--offset` for System V shm; the
    /// mapping of the file at `--offset` for `--file`).
    ptr: usize,
    len: u64,
    page: u64,
}

/// The mode libnuma's `numa_set_bind_policy(0)` binds with: MPOL_PREFERRED_MANY where the
/// kernel has it (Linux 5.15), else MPOL_PREFERRED.
fn libnuma_preferred_mode() -> KernelMode {
    match syscalls::kernel_release() {
        Some((major, minor, _)) if (major, minor) < (5, 15) => KernelMode::Preferred,
        _ => KernelMode::PreferredMany,
    }
}

/// The huge page size from /proc/meminfo (numactl's `huge_page_size`), else the base page.
fn huge_page_size() -> u64 {
    let root = numalab_linux::sysroot::SysRoot::host();
    match numalab_linux::numastat::huge_page_bytes(&root) {
        Ok(bytes) if bytes > 0.0 => bytes as u64,
        _ => base_page(),
    }
}

fn base_page() -> u64 {
    syscalls::page_size_bytes() as u64
}

/// The state of numactl's option pass (numactl.c's globals and `main`'s locals).
pub struct Numactl<'a> {
    ctx: &'a SpecContext,
    all_ctx: SpecContext,
    io: Io<'a>,
    /// `set_policy`: the process or region policy given so far (a raw kernel mode).
    set_policy: Option<i32>,
    /// The last node mask parsed (what `--verify` checks against).
    mask: Option<NodeMask>,
    /// The last node spec, for `same`.
    last_spec: Option<String>,
    region: Option<Region>,
    /// The first shm option that must come before `--shm` (`shmoption`), for the errors.
    shm_option: Option<&'static str>,
    did_cpubind: bool,
    did_node_cpu_parse: bool,
    parse_all: bool,
    strict: bool,
    exitcode: i32,
    length: u64,
    offset: u64,
    mode: u32,
    id: u64,
    huge: bool,
}

impl<'a> Numactl<'a> {
    /// `ctx`: the nodes and CPUs this process may use; `all`: every online one (--all).
    pub fn new(ctx: &'a SpecContext, io: Io<'a>) -> Self {
        let all_ctx = SpecContext {
            online_nodes: ctx.online_nodes,
            allowed_nodes: ctx.online_nodes,
            online_cpus: ctx.online_cpus.clone(),
            allowed_cpus: ctx.online_cpus.clone(),
            devices: ctx.devices.clone(),
        };
        Numactl {
            ctx,
            all_ctx,
            io,
            set_policy: None,
            mask: None,
            last_spec: None,
            region: None,
            shm_option: None,
            did_cpubind: false,
            did_node_cpu_parse: false,
            parse_all: false,
            strict: false,
            exitcode: 0,
            length: 0,
            offset: 0,
            mode: 0o600,
            id: 0,
            huge: false,
        }
    }

    /// Apply `opts` in order as numactl does. `has_command`: a command follows them (an
    /// error once a segment is attached).
    pub fn run(mut self, opts: &[Opt], has_command: bool) -> Result<Outcome, Stop> {
        for o in opts {
            self.apply(o)?;
        }
        if self.region.is_some() {
            if has_command {
                return Err(Stop { usage: true });
            }
            return Ok(Outcome::Exit(self.exitcode));
        }
        if let Some(opt) = self.shm_option {
            return Err(self
                .io
                .usage_msg(&format!("shm related option {opt} for process")));
        }
        Ok(Outcome::Process)
    }

    fn apply(&mut self, o: &Opt) -> Result<(), Stop> {
        match o {
            Opt::Interleave(s) => {
                let mask = self.nodes(s)?;
                self.did_node_cpu_parse = true;
                self.set(KernelMode::Interleave)?;
                if self.region.is_some() {
                    let p = MemPolicy::Interleave { nodes: mask };
                    self.mbind(&p, "setting interleave mask")?;
                }
            }
            Opt::Membind(s) => {
                self.set(KernelMode::Bind)?;
                let mask = self.nodes(s)?;
                self.did_node_cpu_parse = true;
                if self.region.is_some() {
                    let p = MemPolicy::Bind {
                        nodes: mask,
                        numa_balancing: false,
                    };
                    self.mbind(&p, "setting membind")?;
                }
            }
            Opt::Preferred(s) | Opt::PreferredMany(s) => {
                let mask = self.nodes(s)?;
                self.did_node_cpu_parse = true;
                if self.region.is_some() {
                    // numactl 2.0.16 calls numa_tonode_memory(shmptr, shmlen, node) with its
                    // `node` still -1: no bit set, so libnuma's mbind gets its "preferred"
                    // mode with an empty mask (MPOL_PREFERRED_MANY, which the kernel refuses,
                    // where the kernel has it; MPOL_PREFERRED, kept as local allocation, on
                    // older ones); and numactl records no policy for --verify
                    let k = KernelPolicy {
                        mode: libnuma_preferred_mode(),
                        flags: ModeFlags::empty(),
                        nodes: NodeMask::empty(),
                    };
                    self.mbind_kernel(&k, "setting preferred node")?;
                } else if matches!(o, Opt::Preferred(_)) {
                    if mask.iter().count() != 1 {
                        return Err(Stop { usage: true });
                    }
                    self.set(KernelMode::Preferred)?;
                } else {
                    self.set(KernelMode::PreferredMany)?;
                }
            }
            Opt::WeightedInterleave(s) => {
                let mask = self.nodes(s)?;
                self.did_node_cpu_parse = true;
                self.set(KernelMode::WeightedInterleave)?;
                if self.region.is_some() {
                    let p = MemPolicy::WeightedInterleave {
                        nodes: mask,
                        weights: Vec::new(),
                    };
                    self.mbind(&p, "setting weighted interleave mask")?;
                }
            }
            Opt::Localalloc => {
                self.set(KernelMode::Local)?;
                if self.region.is_some() {
                    self.mbind(&MemPolicy::Local, "local allocation")?;
                }
            }
            Opt::CpuNodeBind(s) => {
                self.dont_shm("-c/--cpubind/--cpunodebind")?;
                self.nodes(s)?;
                self.did_cpubind = true;
                self.did_node_cpu_parse = true;
            }
            Opt::PhysCpuBind(s) => {
                self.dont_shm("-C/--physcpubind")?;
                let ctx = if self.parse_all {
                    &self.all_ctx
                } else {
                    self.ctx
                };
                if let Err(e) = crate::nodespec::parse_cpus(s, ctx) {
                    let _ = writeln!(self.io.out, "<{s}> is invalid");
                    let _ = writeln!(self.io.err, "numalab: {e}");
                    return Err(Stop { usage: true });
                }
                self.did_cpubind = true;
                self.did_node_cpu_parse = true;
            }
            Opt::Balancing => self.no_policy()?,
            Opt::All => {
                if self.did_node_cpu_parse {
                    return Err(self
                        .io
                        .usage_msg("--all/-a option must be before all cpu/node specifications"));
                }
                self.parse_all = true;
            }
            Opt::Strict => self.strict = true,
            Opt::Shm(name) => {
                self.check_cpubind()?;
                self.no_policy()?;
                self.attach_sysv(name)?;
            }
            Opt::File(name) => {
                self.check_cpubind()?;
                self.no_policy()?;
                self.attach_file(name)?;
            }
            Opt::Length(s) => {
                self.no_shm("--length")?;
                self.length = memsize(s);
            }
            Opt::Offset(s) => {
                self.no_shm("--offset")?;
                self.offset = memsize(s);
            }
            Opt::ShmMode(s) => {
                self.no_shm("--shmmode")?;
                self.mode = whole_number(s, 8).ok_or(Stop { usage: true })? as u32;
            }
            Opt::ShmId(s) => self.id = whole_number(s, 0).ok_or(Stop { usage: true })?,
            Opt::Huge => {
                self.no_shm("--huge")?;
                self.huge = true;
            }
            Opt::Dump => {
                let r = self.attached("Cannot do --dump without shared memory.\n")?;
                self.dump(&r)?;
            }
            Opt::DumpNodes => {
                let r = self.attached("Cannot do --dump-nodes without shared memory.\n")?;
                self.dump_nodes(&r)?;
            }
            Opt::Touch => {
                self.need_shm("--touch")?;
                self.check_beyond("--touch")?;
                self.police();
            }
            Opt::Verify => {
                self.need_shm("--verify")?;
                let Some(policy) = self.set_policy else {
                    return Err(self.io.complain("Need a policy first to verify"));
                };
                self.check_beyond("--verify")?;
                self.police();
                let Some(mask) = self.mask else {
                    return Err(self.io.complain("Need a mask to verify"));
                };
                self.verify(policy, &mask)?;
            }
        }
        Ok(())
    }

    /// numactl_parse_nodestring: `same` is the previous node spec; an invalid spec prints
    /// numactl's `<SPEC> is invalid` and its usage (numalab's reason on stderr).
    fn nodes(&mut self, s: &str) -> Result<NodeMask, Stop> {
        let spec = if s == "same" {
            match &self.last_spec {
                Some(l) => l.clone(),
                None => return Err(self.io.usage_msg("same needs previous node specification")),
            }
        } else {
            self.last_spec = Some(s.to_string());
            s.to_string()
        };
        let ctx = if self.parse_all {
            &self.all_ctx
        } else {
            self.ctx
        };
        match parse_nodes(&spec, ctx) {
            Ok(m) => {
                self.mask = Some(m);
                Ok(m)
            }
            Err(e) => {
                let _ = writeln!(self.io.out, "<{s}> is invalid");
                let _ = writeln!(self.io.err, "numalab: {e}");
                Err(Stop { usage: true })
            }
        }
    }

    fn set(&mut self, mode: KernelMode) -> Result<(), Stop> {
        if self.set_policy.is_some() {
            return Err(self.io.usage_msg("Conflicting policies"));
        }
        self.set_policy = Some(mode as i32);
        Ok(())
    }

    fn no_policy(&mut self) -> Result<(), Stop> {
        if self.set_policy.is_some() {
            return Err(self.io.usage_msg("specify policy after --shm/--file"));
        }
        Ok(())
    }

    fn check_cpubind(&mut self) -> Result<(), Stop> {
        if self.did_cpubind {
            return Err(self.io.usage_msg("cannot do --cpubind on shared memory\n"));
        }
        Ok(())
    }

    fn no_shm(&mut self, opt: &'static str) -> Result<(), Stop> {
        if self.region.is_some() {
            return Err(self
                .io
                .usage_msg(&format!("{opt} must be before shared memory specification")));
        }
        self.shm_option = Some(opt);
        Ok(())
    }

    fn dont_shm(&mut self, opt: &str) -> Result<(), Stop> {
        if let Some(s) = self.shm_option {
            return Err(self
                .io
                .usage_msg(&format!("{s} shm option is not allowed before {opt}")));
        }
        Ok(())
    }

    fn need_shm(&mut self, opt: &str) -> Result<(), Stop> {
        if self.region.is_none() {
            return Err(self
                .io
                .usage_msg(&format!("{opt} must be after shared memory specification")));
        }
        Ok(())
    }

    /// The attached region, or numactl's complaint where none is.
    fn attached(&mut self, complaint: &str) -> Result<Region, Stop> {
        self.region.ok_or_else(|| self.io.complain(complaint))
    }

    fn check_beyond(&mut self, opt: &str) -> Result<(), Stop> {
        if self.offset >= self.length {
            // printf's %#llx: no 0x for zero
            let hex = |v: u64| {
                if v == 0 {
                    "0".to_string()
                } else {
                    format!("{v:#x}")
                }
            };
            let _ = writeln!(
                self.io.err,
                "numactl: region offset {} beyond its length {} at {opt}",
                hex(self.offset),
                hex(self.length)
            );
            return Err(Stop { usage: false });
        }
        Ok(())
    }

    /// numactl's `check_region`, after an attach.
    fn check_region(&mut self, ptr: usize, page: u64, opt: &str) -> Result<(), Stop> {
        if !(ptr as u64).is_multiple_of(page) || !self.length.is_multiple_of(page) {
            let _ = writeln!(self.io.err, "numactl: policy region not page aligned");
            return Err(Stop { usage: false });
        }
        if self.length == 0 {
            let _ = writeln!(
                self.io.err,
                "numactl: policy region length not specified before {opt}"
            );
            return Err(Stop { usage: false });
        }
        Ok(())
    }

    /// numactl's `attach_sysvshm`: the segment keyed by `ftok(NAME, --shmid)` (NAME created
    /// if missing), created with `--length + --offset` bytes if it does not exist.
    fn attach_sysv(&mut self, name: &str) -> Result<(), Stop> {
        let path = CString::new(name).map_err(|_| Stop { usage: true })?;
        let id = self.id as libc::c_int;
        // SAFETY: `path` is NUL-terminated.
        let mut key = unsafe { libc::ftok(path.as_ptr(), id) };
        if key < 0 {
            let _ = writeln!(
                self.io.err,
                "numactl: Creating shm key file {name} mode {:04o}",
                self.mode
            );
            // SAFETY: as above; the descriptor is left open, as numactl leaves it.
            let fd = unsafe { libc::creat(path.as_ptr(), self.mode as libc::mode_t) };
            if fd < 0 {
                return Err(self
                    .io
                    .nerror(&format!("cannot create key for shm {name}\n"), errno()));
            }
            // SAFETY: as above.
            key = unsafe { libc::ftok(path.as_ptr(), id) };
            if key < 0 {
                return Err(self.io.nerror(
                    &format!("cannot get key for newly created shm key file {name}"),
                    errno(),
                ));
            }
        }
        let flags = if self.huge { libc::SHM_HUGETLB } else { 0 };
        // SAFETY: shmget takes plain values.
        let mut shmid = unsafe { libc::shmget(key, self.length as usize, flags) };
        // The key file and the segment stay when a later step fails, as numactl leaves them:
        // it says so ("Creating shm key file", "Creating shared memory segment"), and the next
        // command on the same name finds them (vm_numactl_shm.rs compares such sequences)
        if shmid < 0 && errno() == libc::ENOENT {
            if self.length == 0 {
                return Err(self
                    .io
                    .complain("need a --length to create a sysv shared memory segment"));
            }
            let total = self.length.wrapping_add(self.offset);
            let _ = writeln!(
                self.io.err,
                "numactl: Creating shared memory segment {name} id {} mode {:04o} length {:.0}MB",
                self.id as i64,
                self.mode,
                total as f64 / (1024.0 * 1024.0)
            );
            let create = libc::IPC_CREAT | self.mode as libc::c_int | flags;
            // SAFETY: as above.
            shmid = unsafe { libc::shmget(key, total as usize, create) };
            if shmid < 0 {
                return Err(self
                    .io
                    .nerror("cannot create shared memory segment", errno()));
            }
        }
        if self.length == 0 {
            // SAFETY: shmid_ds is plain data that IPC_STAT fills.
            let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
            // SAFETY: `ds` is valid for writes.
            if unsafe { libc::shmctl(shmid, libc::IPC_STAT, &mut ds) } < 0 {
                return Err(self.io.err("shmctl IPC_STAT", errno()));
            }
            self.length = ds.shm_segsz as u64;
        }
        // SAFETY: the kernel chooses the address; a failure is (void *)-1.
        let at = unsafe { libc::shmat(shmid, std::ptr::null(), 0) };
        if at as isize == -1 {
            return Err(self.io.err("shmat", errno()));
        }
        let ptr = (at as usize).wrapping_add(self.offset as usize);
        let page = if self.huge {
            huge_page_size()
        } else {
            base_page()
        };
        self.check_region(ptr, page, "--shm")?;
        self.region = Some(Region {
            ptr,
            len: self.length,
            page,
        });
        Ok(())
    }

    /// numactl's `attach_shared`: NAME opened (created with `--length` if missing), grown to
    /// `--length + --offset` if shorter, and mapped shared from `--offset`.
    fn attach_file(&mut self, name: &str) -> Result<(), Stop> {
        let path = CString::new(name).map_err(|_| Stop { usage: true })?;
        // SAFETY: `path` is NUL-terminated; the descriptor stays open for the mapping.
        let mut fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR) };
        let mut created = false;
        if fd < 0 {
            if self.length == 0 {
                return Err(self.io.complain("need a --length to create a shared file"));
            }
            // O_EXCL: only a file made here is removed again below; one that appeared
            // meanwhile is opened as it is
            // SAFETY: as above.
            fd = unsafe {
                libc::open(
                    path.as_ptr(),
                    libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
                    self.mode as libc::c_uint,
                )
            };
            created = fd >= 0;
            if fd < 0 && errno() == libc::EEXIST {
                // SAFETY: as above.
                fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR) };
            }
            if fd < 0 {
                return Err(self
                    .io
                    .nerror(&format!("cannot create file {name}"), errno()));
            }
        }
        // SAFETY: stat is plain data that fstat fills.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is valid for writes.
        if unsafe { libc::fstat(fd, &mut st) } < 0 {
            let e = errno();
            if created {
                // SAFETY: `path` is NUL-terminated.
                unsafe { libc::unlink(path.as_ptr()) };
            }
            return Err(self.io.err("shm stat", e));
        }
        // numactl leaves a file it created, or lengthened, behind when a later check fails;
        // numalab undoes that, so a refused command changes nothing (same messages)
        let old_size = st.st_size;
        let undo = |fd: libc::c_int, lengthened: bool| {
            if created {
                // SAFETY: `path` is NUL-terminated.
                unsafe { libc::unlink(path.as_ptr()) };
            } else if lengthened {
                // SAFETY: plain values; back to the size the file had.
                unsafe { libc::ftruncate(fd, old_size) };
            }
        };
        // numactl checks the previous region's address here (its shmptr, null at first),
        // after lengthening the file; checked first, a refused region leaves the file alone
        let page = st.st_blksize as u64;
        let prev = self.region.as_ref().map_or(0, |r| r.ptr);
        if let Err(stop) = self.check_region(prev, page, "--file") {
            undo(fd, false);
            return Err(stop);
        }
        let end = self.length.wrapping_add(self.offset);
        let lengthened = end > st.st_size as u64;
        if lengthened {
            // SAFETY: plain values.
            if unsafe { libc::ftruncate(fd, end as libc::off_t) } < 0 {
                self.io.perror("ftruncate", errno());
                undo(fd, false);
                return Err(Stop { usage: false });
            }
        }
        // SAFETY: a new shared mapping of the file; a failure is MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                self.length as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                self.offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            let e = errno();
            undo(fd, lengthened);
            return Err(self.io.err("shm mmap", e));
        }
        self.region = Some(Region {
            ptr: p as usize,
            len: self.length,
            page,
        });
        Ok(())
    }

    /// libnuma's `dombind`, then numactl's `checkerror(what)`: both perror on failure.
    fn mbind(&mut self, p: &MemPolicy, what: &str) -> Result<(), Stop> {
        match KernelPolicy::from_mempolicy(p, ModeFlags::empty(), "mbind") {
            Ok(k) => self.mbind_kernel(&k, what),
            Err(e) => {
                let _ = writeln!(self.io.err, "numalab: {e}");
                Err(Stop { usage: false })
            }
        }
    }

    fn mbind_kernel(&mut self, k: &KernelPolicy, what: &str) -> Result<(), Stop> {
        let r = self.region.as_ref().expect("called with a region attached");
        let flags = if self.strict {
            MbindFlags::STRICT
        } else {
            MbindFlags::empty()
        };
        if let Err(e) = syscalls::mbind_kernel(r.ptr, r.len as usize, k, flags) {
            let errno = errno_of(&e);
            self.io.perror("mbind", errno);
            self.io.perror(what, errno);
            return Err(Stop { usage: false });
        }
        Ok(())
    }

    /// libnuma's `numa_police_memory`: each base page of the region read and written back
    /// (an atomic AND with 0xff), which faults it in by its policy.
    fn police(&mut self) {
        let r = self.region.as_ref().expect("called with a region attached");
        let step = base_page() as usize;
        let mut off = 0usize;
        while (off as u64) < r.len {
            // SAFETY: the byte lies inside the attached segment or mapped file, writable, and
            // numalab holds no reference to it.
            unsafe {
                let b = &*((r.ptr + off) as *const std::sync::atomic::AtomicU8);
                b.fetch_and(0xff, std::sync::atomic::Ordering::Relaxed);
            }
            off += step;
        }
    }

    /// numactl's `dump_shm`: each run of pages with the same policy mode, as
    /// `START-END: MODE : NODES`. numactl prints with each run the node mask read last (the
    /// first page of the next run: its `prevnodes` aliases `nodes`), and skips default runs.
    fn dump(&mut self, r: &Region) -> Result<(), Stop> {
        let mut nodes = NodeMask::empty();
        let (mut prev, mut start, mut c) = (None::<i32>, 0u64, 0u64);
        while c < r.len {
            let k = match syscalls::get_range_policy(r.ptr + c as usize) {
                Ok(k) => k,
                Err(e) => return Err(self.io.err("get_mempolicy on shm", errno_of(&e))),
            };
            nodes = k.nodes;
            let pol = k.raw_mode();
            if prev != Some(pol) {
                if let Some(p) = prev {
                    self.dump_run(start, c, p, &nodes);
                }
                prev = Some(pol);
                start = c;
            }
            c += r.page;
        }
        if let Some(p) = prev {
            self.dump_run(start, c, p, &nodes);
        }
        Ok(())
    }

    fn dump_run(&mut self, start: u64, end: u64, pol: i32, nodes: &NodeMask) {
        if pol == KernelMode::Default as i32 {
            return;
        }
        let _ = write!(
            self.io.out,
            "{:016x}-{:016x}: {} {}",
            self.offset + start,
            self.offset + end,
            policy_name(pol),
            mask_line("", nodes)
        );
    }

    /// numactl's `dump_shm_nodes`: each run of pages on the same node (get_mempolicy with
    /// MPOL_F_NODE | MPOL_F_ADDR, which faults absent pages in).
    fn dump_nodes(&mut self, r: &Region) -> Result<(), Stop> {
        let (mut prev, mut start, mut c) = (None::<u16>, 0u64, 0u64);
        let mut runs = Vec::new();
        while c < r.len {
            let node = match syscalls::node_of_address(r.ptr + c as usize) {
                Ok(n) => n.0,
                Err(e) => return Err(self.io.err("get_mempolicy on shm", errno_of(&e))),
            };
            if prev != Some(node) {
                if let Some(p) = prev {
                    runs.push((start, c, p));
                }
                prev = Some(node);
                start = c;
            }
            c += r.page;
        }
        if let Some(p) = prev {
            runs.push((start, c, p));
        }
        for (s, e, n) in runs {
            let _ = writeln!(
                self.io.out,
                "{:016x}-{:016x}: {n}",
                self.offset + s,
                self.offset + e
            );
        }
        Ok(())
    }

    /// numactl's `vwarn`: a verify report line, and exit status 1.
    fn vwarn(&mut self, page: usize, msg: &str) {
        let r = self.region.as_ref().expect("called with a region attached");
        let _ = write!(
            self.io.out,
            "numactl verify {page:x}({:x}): {msg}",
            page - r.ptr
        );
        self.exitcode = 1;
    }

    /// numactl's `verify_shm`: every page of the region has `policy` with `mask`, and lies
    /// on a node the policy allows (for interleave, on the next node of the round).
    fn verify(&mut self, policy: i32, mask: &NodeMask) -> Result<(), Stop> {
        let Region { ptr, len, page } = self.region.expect("called with a region attached");
        let interleave = policy == KernelMode::Interleave as i32;
        let mut ilnode = if interleave {
            match syscalls::node_of_address(ptr) {
                Ok(n) => n,
                Err(e) => return Err(self.io.err("get_mempolicy", errno_of(&e))),
            }
        } else {
            NodeId(0)
        };
        let mut off = 0u64;
        while off < len {
            let p = ptr + off as usize;
            off += page;
            let k = match syscalls::get_range_policy(p) {
                Ok(k) => k,
                Err(e) => return Err(self.io.err("get_mempolicy", errno_of(&e))),
            };
            let pol2 = k.raw_mode();
            if pol2 != policy {
                let msg = format!(
                    "wrong policy {}, expected {}\n",
                    policy_name(pol2),
                    policy_name(policy)
                );
                self.vwarn(p, &msg);
                return Ok(());
            }
            if k.nodes != *mask {
                self.vwarn(p, "mismatched node mask\n");
                let _ = write!(self.io.out, "{}", mask_line("expected", mask));
                let _ = write!(self.io.out, "{}", mask_line("real", &k.nodes));
            }
            let node = match syscalls::node_of_address(p) {
                Ok(n) => n,
                Err(e) => return Err(self.io.err("get_mempolicy", errno_of(&e))),
            };
            if interleave {
                if !k.nodes.contains(node) {
                    self.vwarn(p, &format!("interleave node out of range {}\n", node.0));
                }
                if node != ilnode {
                    let msg = format!("expected interleave node {}, got {}\n", ilnode.0, node.0);
                    self.vwarn(p, &msg);
                    return Ok(());
                }
                // the next node of the mask after ilnode, round the mask
                ilnode = k
                    .nodes
                    .iter()
                    .find(|n| n.0 > ilnode.0)
                    .or_else(|| k.nodes.first())
                    .unwrap_or(ilnode);
            } else if policy != KernelMode::Default as i32 && !k.nodes.contains(node) {
                self.vwarn(p, &format!("unexpected node {}\n", node.0));
                let _ = write!(self.io.out, "{}", mask_line("expected", &k.nodes));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memsize_reads_c_numbers_with_binary_suffixes() {
        assert_eq!(memsize("20m"), 20 << 20);
        assert_eq!(memsize("2M"), 2 << 20);
        assert_eq!(memsize("1g"), 1 << 30);
        assert_eq!(memsize("4k"), 4096);
        assert_eq!(memsize("0x1000"), 4096);
        // a leading 0 is octal, as strtoul's base 0 reads it
        assert_eq!(memsize("010"), 8);
        // what follows the suffix is ignored; no digits is 0
        assert_eq!(memsize("3mb"), 3 << 20);
        assert_eq!(memsize("lots"), 0);
    }

    #[test]
    fn whole_numbers_refuse_trailing_text() {
        assert_eq!(whole_number("644", 8), Some(0o644));
        assert_eq!(whole_number("648", 8), None);
        assert_eq!(whole_number("0x10", 0), Some(16));
        assert_eq!(whole_number("", 0), None);
    }

    #[test]
    fn policy_names_are_numactls() {
        assert_eq!(policy_name(3), "interleave");
        assert_eq!(policy_name(4), "local");
        assert_eq!(policy_name(6), "[6]");
        assert_eq!(policy_name(0x8003), "[32771]");
    }
}
