//! The recording loop: start the command under ptrace (or find the threads of a running
//! process), open the sampling events, read the rings every 10 ms into a spool file, query
//! page placement every `snapshot_interval`, and at the end write the sample file with every
//! sample's page node filled in, plus the placement stream.
//!
//! Why ptrace for `-- CMD`: the child stops itself before exec so that the events exist
//! before its first instruction (`enable_on_exec`), and PTRACE_O_TRACEEXIT stops it once more
//! while it exits with its memory still mapped, which gives a last placement snapshot even for
//! a program shorter than one snapshot interval. Nothing else of the child is traced.
//!
//! Nothing is left behind on failure: samples go to `OUTPUT.spool-PID`, the result to
//! `OUTPUT.tmp-PID`, renamed over OUTPUT only at the very end; a guard removes them on any
//! error.

use crate::mechanism::{self, Candidate, EventChoice, EventSettings, Mechanism};
use crate::perf_event::{
    open_error, Counter, EventSpec, PerfRecord, RawSample, Ring, RING_DATA_PAGES,
};
use crate::snapshot::{QueryCounts, Snapshotter};
use crate::uncore::{Uncore, UncoreReport};
use crate::Error;
use numalab_analyze::format::{placement_path_for, WriterOptions};
use numalab_analyze::{
    FileMeta, Known, Mapping, MappingKind, PlacementWriter, Record, SampleReader, SampleSource,
    SampleWriter, ThreadName,
};
use numalab_core::{AccessSample, CpuId, DataSource, NodeId, PageSize, TaskId, ThreadId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to record.
#[derive(Clone, Debug)]
pub enum Target {
    /// Start this command (program and arguments) and record it until it exits.
    Command(Vec<OsString>),
    /// Attach to every thread of a running process.
    Pid(i32),
}

/// How to record.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub target: Target,
    pub event: EventChoice,
    /// Sample period (None: the mechanism's default).
    pub period: Option<u64>,
    /// PEBS load-latency threshold, cycles.
    pub ldlat: u32,
    pub output: PathBuf,
    /// Stop after this long (a running process: until it exits or this elapses; a command is
    /// then killed).
    pub duration: Option<Duration>,
    pub snapshot_interval: Duration,
    /// Pages queried per process and snapshot at most.
    pub max_pages_per_snapshot: usize,
    /// Set from outside (Ctrl-C) to end a `--pid` recording early.
    pub stop: Option<Arc<AtomicBool>>,
    /// `/sys/bus/event_source/devices`, or a recorded tree in tests.
    pub event_source_dir: PathBuf,
    /// Extra environment variables for the command (on top of numalab's own environment).
    pub env: Vec<(OsString, OsString)>,
}

impl RecordOptions {
    pub fn new(target: Target, output: impl Into<PathBuf>) -> RecordOptions {
        RecordOptions {
            target,
            event: EventChoice::Auto,
            period: None,
            ldlat: 30,
            output: output.into(),
            duration: None,
            snapshot_interval: Duration::from_millis(100),
            max_pages_per_snapshot: 1 << 20,
            stop: None,
            event_source_dir: PathBuf::from(mechanism::EVENT_SOURCE_DIR),
            env: Vec::new(),
        }
    }
}

/// Progress of a running recording.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    pub elapsed: Duration,
    pub samples: u64,
    pub lost: u64,
    pub pages: usize,
    pub snapshots: u64,
}

/// What the recording hands to its caller while it runs.
#[derive(Clone, Debug)]
pub enum Event {
    /// A line for the user (the mechanism chosen and why, notes).
    Message(String),
    Progress(Progress),
}

/// The outcome of a recording.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RecordSummary {
    pub mechanism: Mechanism,
    pub events: Vec<String>,
    /// Why each better mechanism was not used.
    pub unavailable: Vec<String>,
    pub notes: Vec<String>,
    pub samples: u64,
    pub samples_with_page_node: u64,
    /// Samples the kernel dropped (ring full).
    pub lost: u64,
    pub throttled: u64,
    pub malformed: u64,
    /// Samples without a user-space data address (IBS non-memory ops, kernel addresses).
    pub skipped: u64,
    pub processes: usize,
    pub threads: usize,
    pub pages: usize,
    pub duration_s: f64,
    pub output: PathBuf,
    pub placement_output: PathBuf,
    pub placement_rows: u64,
    pub queries: QueryCounts,
    /// Bytes per node of the recorded processes, from the last numa_maps read.
    pub numa_maps_bytes: BTreeMap<u16, u64>,
    pub uncore: UncoreReport,
    /// The command's exit status (128 + signal when killed), None for `--pid`.
    pub exit_code: Option<i32>,
    /// The recorded process (the command's pid, or the one given).
    pub pid: i32,
}

/// Removes the temporary files unless the recording completed.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |err| Error::Io { what, err }
}

/// Finds `program` as a shell would: a path with a slash as is, else the first executable
/// file of that name in PATH.
pub fn resolve_command(program: &std::ffi::OsStr) -> Result<PathBuf, Error> {
    use std::os::unix::fs::PermissionsExt;
    let is_exe = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let name = program.to_string_lossy().into_owned();
    if name.is_empty() {
        return Err(Error::Usage("no command given".into()));
    }
    if program.as_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        return if is_exe(&p) {
            Ok(p)
        } else if p.exists() {
            Err(Error::Exec {
                program: name,
                err: std::io::Error::from_raw_os_error(libc::EACCES),
            })
        } else {
            Err(Error::CommandNotFound {
                program: name,
                where_: String::new(),
            })
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let p = dir.join(program);
        if is_exe(&p) {
            return Ok(p);
        }
    }
    Err(Error::CommandNotFound {
        program: name,
        where_: format!(" (searched PATH={})", path.to_string_lossy()),
    })
}

/// A child started stopped under ptrace, before its exec.
struct Child {
    pid: i32,
    /// Read end of the exec-error pipe (CLOEXEC in the child: EOF means exec worked).
    err_fd: i32,
    program: String,
}

impl Child {
    fn spawn(path: &Path, args: &[OsString], env: &[(OsString, OsString)]) -> Result<Child, Error> {
        let program = path.display().to_string();
        let cpath = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| Error::Usage(format!("{program}: NUL in the command")))?;
        let cargs: Vec<CString> = args
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| Error::Usage("NUL in an argument".into()))?;
        let mut argv: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| !env.iter().any(|(e, _)| e == k))
            .collect();
        vars.extend(env.iter().cloned());
        let cenv: Vec<CString> = vars
            .iter()
            .filter_map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                CString::new(kv).ok()
            })
            .collect();
        let mut envp: Vec<*const libc::c_char> = cenv.iter().map(|c| c.as_ptr()).collect();
        envp.push(std::ptr::null());
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two fds into our array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io("pipe2")(std::io::Error::last_os_error()));
        }
        // SAFETY: after fork the child only makes async-signal-safe calls (ptrace, raise,
        // execve, write, _exit) on data prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io("fork")(std::io::Error::last_os_error()));
        }
        if pid == 0 {
            unsafe {
                libc::close(fds[0]);
                libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
                libc::raise(libc::SIGSTOP);
                libc::execve(cpath.as_ptr(), argv.as_ptr(), envp.as_ptr());
                let e = *libc::__errno_location();
                libc::write(fds[1], &e as *const i32 as *const libc::c_void, 4);
                libc::_exit(127);
            }
        }
        // SAFETY: closing our copy of the write end.
        unsafe { libc::close(fds[1]) };
        let child = Child {
            pid,
            err_fd: fds[0],
            program,
        };
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r != pid || !libc::WIFSTOPPED(status) {
            return Err(Error::Other(format!(
                "{}: the child did not stop before exec (status {status:#x})",
                child.program
            )));
        }
        let opts = libc::PTRACE_O_TRACEEXEC
            | libc::PTRACE_O_TRACEEXIT
            | libc::PTRACE_O_TRACEFORK
            | libc::PTRACE_O_TRACEVFORK
            | libc::PTRACE_O_EXITKILL;
        // SAFETY: our traced, stopped child.
        if unsafe { libc::ptrace(libc::PTRACE_SETOPTIONS, pid, 0, opts as libc::c_long) } != 0 {
            return Err(io("ptrace(PTRACE_SETOPTIONS)")(
                std::io::Error::last_os_error(),
            ));
        }
        Ok(child)
    }

    fn cont(&self, sig: i32) {
        // SAFETY: resuming our traced child; failure (already gone) is harmless.
        unsafe { libc::ptrace(libc::PTRACE_CONT, self.pid, 0, sig as libc::c_long) };
    }

    fn kill(&self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }

    /// The errno the child wrote if its exec failed.
    fn exec_error(&self) -> Option<i32> {
        let mut e = 0i32;
        // SAFETY: reading 4 bytes from our pipe into an i32.
        let n = unsafe { libc::read(self.err_fd, &mut e as *mut i32 as *mut libc::c_void, 4) };
        (n == 4).then_some(e)
    }

    /// Reaps the child after killing it (error paths).
    fn reap(&self) {
        self.kill();
        loop {
            let mut st = 0;
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut st, libc::__WALL) };
            if r != self.pid || libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                break;
            }
            self.cont(0);
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // SAFETY: closing our pipe end once.
        unsafe { libc::close(self.err_fd) };
    }
}

/// Threads of a process, from /proc/PID/task.
fn list_tids(pid: i32) -> Vec<i32> {
    let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// Alive and not a zombie.
fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            // The state follows the command name in parentheses, which may contain spaces.
            let state = s
                .rsplit_once(')')
                .and_then(|(_, r)| r.trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X') | None)
        }
        Err(_) => false,
    }
}

/// Variants tried when the first open is refused, for all events of a mechanism alike (they
/// share one ring per CPU, so one sample layout): as asked, without physical addresses, then
/// without kernel-mode events (what an unprivileged user may have).
fn variants(specs: &[EventSpec]) -> Vec<Vec<EventSpec>> {
    let mut v = vec![specs.to_vec()];
    if specs.iter().any(|s| s.phys_addr) {
        let last: Vec<EventSpec> = v.last().unwrap().clone();
        v.push(
            last.into_iter()
                .map(|s| EventSpec {
                    phys_addr: false,
                    ..s
                })
                .collect(),
        );
    }
    // IBS cannot filter by privilege level on older kernels; the others can.
    if specs
        .iter()
        .any(|s| !s.exclude_kernel && s.name != "ibs_op//")
    {
        let last: Vec<EventSpec> = v.last().unwrap().clone();
        v.push(
            last.into_iter()
                .map(|s| EventSpec {
                    exclude_kernel: true,
                    ..s
                })
                .collect(),
        );
    }
    v
}

/// Online CPUs.
fn online_cpus() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| numalab_linux::parse::parse_cpu_list(t.trim(), "cpu/online").ok())
        .map(|v| v.into_iter().map(|c| c.0).collect())
        .unwrap_or_else(|| {
            // SAFETY: sysconf has no preconditions.
            let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u32;
            (0..n).collect()
        })
}

/// The open events of a recording: one counter per (task, CPU, event), one ring per CPU, and
/// the identifiers that tell the events apart inside a ring.
pub struct Sampling {
    counters: Vec<Counter>,
    rings: Vec<(i32, Ring)>,
    ids: HashMap<u64, u16>,
    ring_pages: usize,
    sample_type: u64,
    cpus: Vec<u32>,
}

impl Sampling {
    fn new(sample_type: u64) -> Sampling {
        let cpus = online_cpus();
        // Keep the mapped rings under ~64 MiB whatever the CPU count.
        let fit = (64usize << 20) / (4096 * cpus.len().max(1));
        // 2 MiB per CPU where allowed: at ~200 000 faults/s a 512 KiB ring holds ~40 ms, less
        // than a busy machine may keep the reader off its CPU (measured: samples lost).
        let ring_pages = if fit >= RING_PAGES_PREFERRED {
            RING_PAGES_PREFERRED
        } else if fit >= RING_DATA_PAGES {
            RING_DATA_PAGES
        } else {
            (fit.max(8) + 1).next_power_of_two() / 2
        };
        Sampling {
            counters: Vec::new(),
            rings: Vec::new(),
            ids: HashMap::new(),
            ring_pages,
            sample_type,
            cpus,
        }
    }

    fn add(&mut self, c: Counter) -> Result<(), i32> {
        match self.rings.iter().find(|(cpu, _)| *cpu == c.cpu) {
            Some((_, r)) => r.redirect(&c)?,
            None => {
                let r = match Ring::map(&c, self.ring_pages, self.sample_type) {
                    // Over the locked-memory allowance (perf_event_mlock_kb, RLIMIT_MEMLOCK)
                    // of an unprivileged user: perf's default size fits it.
                    Err(libc::EPERM) if self.ring_pages > RING_DATA_PAGES => {
                        self.ring_pages = RING_DATA_PAGES;
                        Ring::map(&c, self.ring_pages, self.sample_type)?
                    }
                    r => r?,
                };
                self.rings.push((c.cpu, r));
            }
        }
        self.ids.insert(c.id, c.event);
        self.counters.push(c);
        Ok(())
    }

    /// Opens `specs` on every CPU for each of `pids`. A pid other than the first that has
    /// gone (ESRCH) is skipped; any other refusal is the error of that event.
    fn open(
        &mut self,
        specs: &[EventSpec],
        pids: &[i32],
        enable_on_exec: bool,
    ) -> Result<(), (usize, i32, i32)> {
        'pids: for (k, &pid) in pids.iter().enumerate() {
            for (i, spec) in specs.iter().enumerate() {
                for &cpu in &self.cpus.clone() {
                    if spec.cpus.as_ref().is_some_and(|c| !c.contains(&cpu)) {
                        continue;
                    }
                    let r = Counter::open(spec, i as u16, pid, cpu as i32, enable_on_exec)
                        .and_then(|c| self.add(c));
                    match r {
                        Ok(()) => {}
                        Err(libc::ESRCH) if k > 0 => continue 'pids,
                        Err(e) => return Err((i, pid, e)),
                    }
                }
            }
        }
        Ok(())
    }

    fn enable(&self) -> Result<(), i32> {
        self.counters.iter().try_for_each(|c| c.enable())
    }

    fn drain(&mut self, f: &mut impl FnMut(PerfRecord<'_>)) {
        for (_, r) in self.rings.iter_mut() {
            r.drain(&self.ids, &mut *f);
        }
    }
}

/// Opens every event of `cand` on `pids`, trying the variants in turn.
fn open_candidate(
    cand: &Candidate,
    pids: &[i32],
    enable_on_exec: bool,
    target: &str,
) -> Result<(Sampling, Vec<EventSpec>), Error> {
    let mut first_err = None;
    for specs in variants(&cand.events) {
        let mut s = Sampling::new(specs[0].sample_type());
        match s.open(&specs, pids, enable_on_exec) {
            Ok(()) => return Ok((s, specs)),
            Err((i, pid, errno)) => {
                let who = if pid == pids[0] {
                    target.to_string()
                } else {
                    format!("thread {pid}")
                };
                first_err.get_or_insert_with(|| open_error(&specs[i], &who, errno));
            }
        }
    }
    Err(first_err.unwrap_or_else(|| Error::Other("no event to open".into())))
}

/// Opens `cand` on every thread of running process `pid`; threads may start meanwhile, so
/// the list is read again until no new one appears (later ones are covered by `inherit`).
fn open_threads(
    cand: &Candidate,
    pid: i32,
    target: &str,
) -> Result<(Sampling, Vec<EventSpec>), Error> {
    let mut tids = list_tids(pid);
    if tids.is_empty() {
        return Err(Error::NoSuchProcess(pid));
    }
    // The process itself first: its refusal is the error that matters.
    tids.sort_by_key(|&t| t != pid);
    let (mut s, used) = open_candidate(cand, &tids, false, target)?;
    for _ in 0..10 {
        let now = list_tids(pid);
        let new: Vec<i32> = now.iter().filter(|t| !tids.contains(t)).copied().collect();
        if new.is_empty() {
            break;
        }
        if let Err((i, t, errno)) = s.open(&used, &new, false) {
            if errno != libc::ESRCH {
                return Err(open_error(&used[i], &format!("thread {t}"), errno));
            }
        }
        tids = now;
    }
    Ok((s, used))
}

/// CPU → node, from sysfs.
struct Nodes {
    cpu_node: Vec<Option<u16>>,
    topology: Option<numalab_core::Topology>,
    count: u16,
}

fn read_nodes() -> Nodes {
    let tree = numalab_linux::node::read_node_tree(&numalab_linux::SysRoot::host()).ok();
    let mut cpu_node = Vec::new();
    let mut count = 0;
    if let Some(t) = &tree {
        for n in &t.nodes {
            count = count.max(n.id.0 + 1);
            for c in &n.cpus {
                if cpu_node.len() <= c.index() {
                    cpu_node.resize(c.index() + 1, None);
                }
                cpu_node[c.index()] = Some(n.id.0);
            }
        }
    }
    Nodes {
        cpu_node,
        topology: tree.and_then(|t| t.to_topology(1)),
        count,
    }
}

/// The state the loop accumulates.
struct Collector {
    /// Samples as they come (None once finished).
    spool: Option<SampleWriter<std::io::BufWriter<std::fs::File>>>,
    placement: Option<PlacementWriter<std::io::BufWriter<std::fs::File>>>,
    placement_rows: u64,
    snap: Snapshotter,
    nodes: Nodes,
    specs: Vec<EventSpec>,
    samples: u64,
    lost: u64,
    throttled: u64,
    malformed: u64,
    skipped: u64,
    threads: HashSet<u32>,
    mappings: Vec<Mapping>,
    mapping_keys: HashSet<(u32, u64, u64, String)>,
    /// Thread names from COMM records (the latest per thread: an exec renames it).
    thread_names: BTreeMap<(u32, u32), String>,
    error: Option<Error>,
    /// Samples read but not yet in time order (see `drain`).
    held: Vec<RawSample>,
}

/// User-space addresses end below the canonical hole on x86-64 and at 2^48/2^52 elsewhere.
const USER_ADDR_LIMIT: u64 = 1 << 56;

impl Collector {
    fn sample(&mut self, s: &RawSample) {
        if s.addr == 0 || s.addr >= USER_ADDR_LIMIT {
            self.skipped += 1;
            return;
        }
        let spec = &self.specs[s.event as usize];
        let mut known = Known::NONE;
        let cpu_node = self.nodes.cpu_node.get(s.cpu as usize).copied().flatten();
        // numalab's sampling events always record the CPU (PERF_SAMPLE_CPU)
        known = known.with(Known::CPU);
        if cpu_node.is_some() {
            known = known.with(Known::CPU_NODE);
        }
        let source = s.data_src.and_then(numalab_analyze::perf::data_source);
        if source.is_some() {
            known = known.with(Known::SOURCE);
        }
        let write = spec.is_store.or_else(|| {
            s.data_src
                .and_then(numalab_analyze::perf::data_src_is_write)
        });
        if write.is_some() {
            known = known.with(Known::WRITE);
        }
        let rec = Record {
            sample: AccessSample {
                time_ns: s.time_ns,
                task: TaskId(s.pid),
                thread: ThreadId(s.tid),
                cpu: CpuId(s.cpu),
                cpu_node: NodeId(cpu_node.unwrap_or(0)),
                addr: s.addr,
                page_node: NodeId(0),
                page_size: PageSize::Base4K,
                source: source.unwrap_or(DataSource::LocalDram),
                latency_ns: 0.0,
                write: write.unwrap_or(false),
            },
            known,
            event: s.event,
            ip: Some(s.ip),
            phys_addr: s.phys_addr.filter(|&p| p != 0),
            weight: s.weight,
            data_src: s.data_src,
            period: None,
        };
        if let Some(Err(e)) = self.spool.as_mut().map(|w| w.push(&rec)) {
            self.error.get_or_insert(e.into());
        }
        self.samples += 1;
        self.threads.insert(s.tid);
        self.snap.note(s.pid, s.addr);
    }

    fn handle(&mut self, r: PerfRecord<'_>) {
        match r {
            PerfRecord::Sample(s) => self.sample(&s),
            PerfRecord::Mmap {
                pid,
                addr,
                len,
                pgoff,
                prot_exec,
                filename,
                ..
            } => {
                let key = (pid, addr, len, filename.to_string());
                if self.mapping_keys.insert(key) {
                    self.mappings.push(Mapping {
                        task: pid,
                        start: addr,
                        len_bytes: len,
                        name: filename.to_string(),
                        kind: MappingKind::classify(filename, prot_exec),
                        pgoff,
                    });
                }
                self.snap.track(pid);
            }
            PerfRecord::Comm { pid, tid, comm } => {
                self.thread_names.insert((pid, tid), comm.to_string());
                self.snap.track(pid)
            }
            PerfRecord::Fork { pid, .. } => self.snap.track(pid),
            PerfRecord::Exit { .. } => {}
            PerfRecord::Lost(n) => self.lost += n,
            PerfRecord::Other(5) => self.throttled += 1, // PERF_RECORD_THROTTLE
            PerfRecord::Other(_) => {}
            PerfRecord::Malformed(_) => self.malformed += 1,
        }
    }
}

/// Reads every ring. Samples are handed on in time order: those stamped before this read
/// began are all in the rings by now, the later ones wait for the next read.
fn drain(sampling: &mut Sampling, c: &mut Collector, last: bool) {
    let cut = now_ns();
    let mut held = std::mem::take(&mut c.held);
    sampling.drain(&mut |r| match r {
        PerfRecord::Sample(s) => held.push(s),
        other => c.handle(other),
    });
    held.sort_by_key(|s| s.time_ns);
    let n = if last {
        held.len()
    } else {
        held.partition_point(|s| s.time_ns <= cut)
    };
    for s in held.drain(..n) {
        c.sample(&s);
    }
    c.held = held;
}

/// Records `opts.target`; see the module docs. `on_event` gets messages and progress.
pub fn record(
    opts: &RecordOptions,
    on_event: &mut dyn FnMut(Event),
) -> Result<RecordSummary, Error> {
    // Everything that can fail without side effects is checked first, so that a bad command,
    // pid or event leaves no file behind.
    let (resolved, pid0) = match &opts.target {
        Target::Command(argv) => {
            let Some(prog) = argv.first() else {
                return Err(Error::Usage("no command given after --".into()));
            };
            (Some(resolve_command(prog)?), 0)
        }
        Target::Pid(p) => {
            if *p <= 0 || !process_alive(*p) {
                return Err(Error::NoSuchProcess(*p));
            }
            (None, *p)
        }
    };
    let settings = EventSettings::for_current_user(opts.period, opts.ldlat);
    let detection = mechanism::detect(&opts.event_source_dir, opts.event, &settings)?;
    let mut unavailable: Vec<String> = detection
        .unavailable
        .iter()
        .map(|(m, why)| format!("{}: {why}", m.name()))
        .collect();
    if let Some(parent) = opts.output.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.is_dir() {
            return Err(Error::Usage(format!(
                "--output {}: directory {} does not exist",
                opts.output.display(),
                parent.display()
            )));
        }
    }
    let me = std::process::id();
    let spool_path = with_suffix(&opts.output, &format!(".spool-{me}"));
    let tmp_path = with_suffix(&opts.output, &format!(".tmp-{me}"));
    let placement_path = placement_path_for(&opts.output);
    let placement_tmp = with_suffix(&placement_path, &format!(".tmp-{me}"));
    let mut cleanup = Cleanup(vec![
        spool_path.clone(),
        tmp_path.clone(),
        placement_tmp.clone(),
    ]);

    // Start the command (stopped) or list the process's threads; then open the events.
    let child = match (&opts.target, &resolved) {
        (Target::Command(argv), Some(path)) => Some(Child::spawn(path, argv, &opts.env)?),
        _ => None,
    };
    let (target_desc, workload) = match (&opts.target, &child) {
        (Target::Command(argv), Some(c)) => (
            format!("command {} (pid {})", c.program, c.pid),
            argv.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => {
            let comm = std::fs::read_to_string(format!("/proc/{pid0}/comm")).unwrap_or_default();
            (
                format!("process {pid0}"),
                format!("pid {pid0} ({})", comm.trim()),
            )
        }
    };
    let mut failures = Vec::new();
    let mut opened = None;
    for cand in &detection.candidates {
        let r = match &child {
            Some(c) => open_candidate(cand, &[c.pid], true, &target_desc),
            None => open_threads(cand, pid0, &target_desc),
        };
        match r {
            Ok((s, used)) => {
                opened = Some((cand.clone(), s, used));
                break;
            }
            Err(e) => {
                // A forced mechanism's own error; in auto mode the next one may still open
                // (page faults need fewer privileges than IBS, which cannot leave out the
                // kernel on older kernels).
                if matches!(opts.event, EventChoice::Only(_)) {
                    failures.clear();
                    failures.push(e);
                    break;
                }
                failures.push(e);
            }
        }
    }
    let Some((cand, mut sampling, used)) = opened else {
        if let Some(c) = &child {
            c.reap();
        }
        if failures.len() == 1 {
            return Err(failures.pop().unwrap());
        }
        return Err(Error::NothingWorks(
            failures
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        ));
    };
    // Mechanisms that looked available but could not be opened are reasons too.
    for (c, e) in detection.candidates.iter().zip(&failures) {
        unavailable.push(format!("{}: {e}", c.mechanism.name()));
    }
    let mut notes = Vec::new();
    if used.iter().any(|s| s.exclude_kernel) {
        notes.push("kernel-mode events left out (perf_event_paranoid >= 2 and not root): faults taken by system calls on user buffers are not seen".to_string());
    }
    if cand.mechanism == Mechanism::PageFaults {
        let nb = std::fs::read_to_string("/proc/sys/kernel/numa_balancing")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "absent".into());
        notes.push(if nb != "0" && nb != "absent" {
            format!("automatic NUMA balancing is on (numa_balancing={nb}): its NUMA hinting faults are sampled too, so pages touched after first use keep being seen")
        } else {
            format!("automatic NUMA balancing is off (numa_balancing={nb}): only first touches, copy-on-write and other real faults are seen")
        });
    }
    on_event(Event::Message(format!(
        "mechanism: {} ({}; events {})",
        cand.mechanism.name(),
        cand.mechanism.describe(),
        used.iter()
            .map(|s| format!("{} period {}", s.name, s.period))
            .collect::<Vec<_>>()
            .join(", ")
    )));
    for u in &unavailable {
        on_event(Event::Message(format!("  not used: {u}")));
    }
    for n in &notes {
        on_event(Event::Message(format!("  note: {n}")));
    }

    let result = run_loop(
        opts,
        child.as_ref(),
        pid0,
        &mut sampling,
        &used,
        &spool_path,
        &placement_tmp,
        on_event,
    );
    let (mut col, exit_code, elapsed, uncore) = match result {
        Ok(x) => x,
        Err(e) => {
            if let Some(c) = &child {
                c.reap();
            }
            return Err(e);
        }
    };
    drop(sampling);
    if let Some(e) = col.error.take() {
        return Err(e);
    }

    // The final file: the spool again, with page nodes and the complete metadata.
    if let Some(w) = col.spool.take() {
        w.finish()?;
    }
    if let Some(w) = col.placement.take() {
        w.finish()?;
    }
    let mut mappings = col.snap.mappings();
    mappings.extend(col.mappings.iter().cloned());
    // read from the binaries now, as perf record does when it ends (the kernel's mmap records
    // carry none unless asked, perf's --buildid-mmap); the kernel's where kernel code could be
    // sampled
    let build_ids = crate::build_id::of_mappings(&mappings, used.iter().any(|s| !s.exclude_kernel));
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let meta = FileMeta {
        machine: hostname,
        workload,
        origin: "numalab-record".into(),
        sample_period: used[0].period,
        page_size: Some(PageSize::Base4K),
        nodes: col.nodes.count,
        topology: col.nodes.topology.clone(),
        events: used.iter().map(|s| s.name.clone()).collect(),
        mappings,
        samples_dropped: 0,
        thread_names: col
            .thread_names
            .iter()
            .map(|(&(task, thread), comm)| ThreadName {
                task,
                thread,
                comm: comm.clone(),
            })
            .collect(),
        samples_without_cpu: false,
        build_ids,
    };
    let mut reader = SampleReader::open(&spool_path)?;
    let mut out = SampleWriter::create(
        &tmp_path,
        &meta,
        WriterOptions {
            perf_columns: true,
            ..Default::default()
        },
    )?;
    let mut with_node = 0u64;
    while let Some(b) = reader.next_batch()? {
        for mut r in b.records {
            let s = &mut r.sample;
            if let Some(n) = col.snap.node_at(s.task.0, s.addr, s.time_ns) {
                s.page_node = n;
                r.known = r.known.with(Known::PAGE_NODE);
                with_node += 1;
            }
            out.push(&r)?;
        }
    }
    out.finish()?;
    drop(reader);
    std::fs::rename(&tmp_path, &opts.output)
        .map_err(io(format!("renaming to {}", opts.output.display())))?;
    std::fs::rename(&placement_tmp, &placement_path)
        .map_err(io(format!("renaming to {}", placement_path.display())))?;
    let _ = std::fs::remove_file(&spool_path);
    cleanup.0.clear();

    let pids = col.snap.pids();
    Ok(RecordSummary {
        mechanism: cand.mechanism,
        events: meta.events.clone(),
        unavailable,
        notes,
        samples: col.samples,
        samples_with_page_node: with_node,
        lost: col.lost,
        throttled: col.throttled,
        malformed: col.malformed,
        skipped: col.skipped,
        processes: pids.len(),
        threads: col.threads.len(),
        pages: col.snap.pages(),
        duration_s: elapsed.as_secs_f64(),
        output: opts.output.clone(),
        placement_output: placement_path,
        placement_rows: col.placement_rows,
        queries: col.snap.counts.clone(),
        numa_maps_bytes: col
            .snap
            .numa_maps_bytes()
            .into_iter()
            .map(|(n, b)| (n.0, b))
            .collect(),
        uncore,
        exit_code,
        pid: child.as_ref().map_or(pid0, |c| c.pid),
    })
}

/// Writes the placement snapshot if any page changed.
fn write_placement(col: &mut Collector, t: u64) {
    if let Some(p) = col.snap.placement_if_changed(t) {
        col.placement_rows += p.len() as u64;
        if let Some(Err(e)) = col.placement.as_mut().map(|w| w.write(&p)) {
            col.error.get_or_insert(e.into());
        }
    }
}

/// The command's processes under ptrace: the command and every process it forks (their
/// threads are not traced: `inherit` samples them, and a process's memory outlives its
/// threads until the process exits).
struct Tracer {
    main: i32,
    tracees: Vec<i32>,
    /// Forked tracees whose first stop (the kernel's SIGSTOP of auto-attach) is to come.
    fresh: HashSet<i32>,
    /// Tracees in their exit stop, to be resumed after a last snapshot.
    pub exiting: Vec<i32>,
}

fn ptrace_cont(pid: i32, sig: i32) {
    // SAFETY: resuming a tracee of ours; failure (already gone) is harmless.
    unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, sig as libc::c_long) };
}

impl Tracer {
    fn new(main: i32) -> Tracer {
        Tracer {
            main,
            tracees: vec![main],
            fresh: HashSet::new(),
            exiting: Vec::new(),
        }
    }

    /// Answers every pending stop, except exit stops (kept in `exiting`). Returns the
    /// command's exit status once it has ended (128 + signal when killed).
    fn poll(&mut self, exec_seen: &mut bool) -> Option<i32> {
        let mut ended = None;
        let mut i = 0;
        while i < self.tracees.len() {
            let t = self.tracees[i];
            if self.exiting.contains(&t) {
                i += 1;
                continue;
            }
            let mut st = 0;
            // SAFETY: waiting for a tracee of ours, without blocking.
            let r = unsafe { libc::waitpid(t, &mut st, libc::WNOHANG | libc::__WALL) };
            if r == 0 {
                i += 1;
                continue;
            }
            if r < 0 || libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                if t == self.main {
                    ended = Some(if r < 0 {
                        0
                    } else if libc::WIFEXITED(st) {
                        libc::WEXITSTATUS(st)
                    } else {
                        128 + libc::WTERMSIG(st)
                    });
                }
                self.tracees.remove(i);
                self.fresh.remove(&t);
                continue;
            }
            i += 1;
            if !libc::WIFSTOPPED(st) {
                continue;
            }
            let event = (st >> 16) & 0xff;
            let sig = libc::WSTOPSIG(st);
            match event {
                libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => {
                    let mut msg: libc::c_ulong = 0;
                    // SAFETY: the tracee is in a fork event stop; msg is ours.
                    unsafe { libc::ptrace(libc::PTRACE_GETEVENTMSG, t, 0, &mut msg as *mut _) };
                    let new = msg as i32;
                    if new > 0 && !self.tracees.contains(&new) {
                        self.tracees.push(new);
                        self.fresh.insert(new);
                    }
                    ptrace_cont(t, 0);
                }
                libc::PTRACE_EVENT_EXEC => {
                    if t == self.main {
                        *exec_seen = true;
                    }
                    ptrace_cont(t, 0);
                }
                libc::PTRACE_EVENT_EXIT => self.exiting.push(t),
                0 if sig == libc::SIGSTOP && self.fresh.remove(&t) => ptrace_cont(t, 0),
                0 => {
                    // A signal for the tracee: pass it on, except group stops (reported
                    // again after delivery; GETSIGINFO fails on them), which just resume.
                    // SAFETY: zeroed siginfo is valid storage for the kernel to fill.
                    let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
                    // SAFETY: the tracee is in a signal stop; si is ours.
                    let r =
                        unsafe { libc::ptrace(libc::PTRACE_GETSIGINFO, t, 0, &mut si as *mut _) };
                    ptrace_cont(t, if r == 0 { sig } else { 0 });
                }
                _ => ptrace_cont(t, 0),
            }
        }
        ended
    }

    fn resume_exiting(&mut self) {
        for t in self.exiting.drain(..) {
            ptrace_cont(t, 0);
        }
    }

    /// Lets the processes still running go (background children of the command): stop each,
    /// detach, and continue it.
    fn detach_rest(&mut self) {
        self.resume_exiting();
        for &t in &self.tracees {
            if t == self.main {
                continue;
            }
            // SAFETY: signalling and waiting for a tracee of ours, then detaching it.
            unsafe {
                libc::kill(t, libc::SIGSTOP);
                loop {
                    let mut st = 0;
                    let r = libc::waitpid(t, &mut st, libc::__WALL);
                    if r != t || libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                        break;
                    }
                    if libc::WIFSTOPPED(st) && (st >> 16) & 0xff == 0 {
                        // Our SIGSTOP is dropped; another signal is handed back.
                        let sig = libc::WSTOPSIG(st);
                        let give = if sig == libc::SIGSTOP { 0 } else { sig };
                        libc::ptrace(libc::PTRACE_DETACH, t, 0, give as libc::c_long);
                        // A stop signal still pending from another stop would freeze it.
                        libc::kill(t, libc::SIGCONT);
                        break;
                    }
                    libc::ptrace(libc::PTRACE_CONT, t, 0, 0);
                }
            }
        }
        self.tracees.clear();
    }
}

/// Data pages per CPU ring when the user may lock that much (2 MiB).
const RING_PAGES_PREFERRED: usize = 512;

/// Pages per move_pages query batch of a snapshot; the rings are read between batches.
const SNAPSHOT_BATCH_PAGES: usize = 8192;

type LoopOutcome = (Collector, Option<i32>, Duration, UncoreReport);

#[allow(clippy::too_many_arguments)]
fn run_loop(
    opts: &RecordOptions,
    child: Option<&Child>,
    pid0: i32,
    sampling: &mut Sampling,
    used: &[EventSpec],
    spool_path: &Path,
    placement_path: &Path,
    on_event: &mut dyn FnMut(Event),
) -> Result<LoopOutcome, Error> {
    let spool = SampleWriter::create(
        spool_path,
        &FileMeta::default(),
        WriterOptions {
            perf_columns: true,
            batch_rows: 16 * 1024,
        },
    )?;
    let mut col = Collector {
        spool: Some(spool),
        placement: Some(PlacementWriter::create(placement_path)?),
        placement_rows: 0,
        snap: Snapshotter::new(opts.max_pages_per_snapshot),
        nodes: read_nodes(),
        specs: used.to_vec(),
        samples: 0,
        lost: 0,
        throttled: 0,
        malformed: 0,
        skipped: 0,
        threads: HashSet::new(),
        mappings: Vec::new(),
        mapping_keys: HashSet::new(),
        thread_names: BTreeMap::new(),
        error: None,
        held: Vec::new(),
    };
    let target_pid = child.map_or(pid0, |c| c.pid);
    col.snap.track(target_pid as u32);
    let uncore = Uncore::start(Path::new(&opts.event_source_dir));
    let uncore_start = uncore.snapshot();
    let start = Instant::now();
    match child {
        Some(c) => c.cont(0), // enable_on_exec turns the events on at exec
        None => {
            if let Err(e) = sampling.enable() {
                return Err(Error::Other(format!(
                    "cannot enable the sampling events: {}",
                    std::io::Error::from_raw_os_error(e)
                )));
            }
        }
    }
    let mut next_snapshot = start + opts.snapshot_interval;
    let mut next_progress = start;
    let mut exit_code = None;
    let mut exec_seen = false;
    let tick = Duration::from_millis(10);
    let stop_requested = || {
        opts.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    };
    // Queries go in batches with ring reads in between: a query of many pages takes long
    // enough for a busy ring to overflow.
    let snapshot = |col: &mut Collector, sampling: &mut Sampling, only: Option<u32>| {
        let t = now_ns();
        col.snap.begin(t, only);
        while col.snap.step(SNAPSHOT_BATCH_PAGES) {
            drain(sampling, col, only.is_some());
        }
        write_placement(col, t);
    };
    let mut tracer = child.map(|c| Tracer::new(c.pid));
    let mut term_sent = false;
    let mut next_drain = start;
    loop {
        // Ptrace stops are answered every 2 ms (a forking shell waits that long at most per
        // fork); the rings are read every 10 ms.
        std::thread::sleep(Duration::from_millis(2));
        let now = Instant::now();
        let timed_out = opts.duration.is_some_and(|d| now - start >= d);
        if let (Some(tracer), Some(c)) = (tracer.as_mut(), child) {
            if timed_out && !term_sent {
                // SAFETY: ending our own child at the deadline; its exit stop still gives
                // the last snapshot.
                unsafe { libc::kill(c.pid, libc::SIGTERM) };
                term_sent = true;
            }
            let ended = tracer.poll(&mut exec_seen);
            // Processes waiting in their exit stop still have their memory mapped: read
            // what is left and take their last look before letting them go.
            if !tracer.exiting.is_empty() {
                drain(sampling, &mut col, true);
                for &pid in &tracer.exiting {
                    col.snap.track(pid as u32);
                    snapshot(&mut col, sampling, Some(pid as u32));
                }
                tracer.resume_exiting();
            }
            if let Some(code) = ended {
                exit_code = Some(code);
                drain(sampling, &mut col, true);
                tracer.detach_rest();
                if !exec_seen {
                    if let Some(errno) = c.exec_error() {
                        return Err(Error::Exec {
                            program: c.program.clone(),
                            err: std::io::Error::from_raw_os_error(errno),
                        });
                    }
                }
                break;
            }
        }
        if now < next_drain {
            continue;
        }
        next_drain = now + tick;
        drain(sampling, &mut col, false);
        if now >= next_snapshot {
            snapshot(&mut col, sampling, None);
            next_snapshot = now + opts.snapshot_interval;
        }
        if now >= next_progress {
            on_event(Event::Progress(Progress {
                elapsed: now - start,
                samples: col.samples,
                lost: col.lost,
                pages: col.snap.pages(),
                snapshots: col.snap.counts.snapshots,
            }));
            next_progress = now + Duration::from_millis(250);
        }
        if child.is_none() {
            if timed_out || stop_requested() {
                drain(sampling, &mut col, true);
                snapshot(&mut col, sampling, None);
                break;
            }
            if !process_alive(pid0) {
                // Gone: its pages went with it, the last snapshot stands.
                drain(sampling, &mut col, true);
                break;
            }
        }
    }
    let elapsed = start.elapsed();
    on_event(Event::Progress(Progress {
        elapsed,
        samples: col.samples,
        lost: col.lost,
        pages: col.snap.pages(),
        snapshots: col.snap.counts.snapshots,
    }));
    let uncore = uncore.finish(&uncore_start, col.nodes.topology.as_ref());
    Ok((col, exit_code, elapsed, uncore))
}
