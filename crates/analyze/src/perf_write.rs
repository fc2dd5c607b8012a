//! perf.data out: any [`SampleSource`] (numalab's Arrow files, the simulator's samples, a
//! perf.data file) written as a perf.data file that `perf script`, `perf report --mem-mode`
//! and `perf mem report` read, and that [`PerfReader`](crate::perf::PerfReader) reads back to
//! the same samples.
//!
//! Hand-written because no maintained crate writes perf.data: `linux-perf-data` (used by the
//! reader) only parses, and the kernel/perf write it from C. The layout follows perf's
//! `tools/perf/util/header.c` and `include/uapi/linux/perf_event.h`:
//!
//! ```text
//! perf_file_header (104 bytes)         magic PERFILE2, section table, feature bitmap
//! ids                                  u64 sample id per event
//! attrs                                { perf_event_attr (128 bytes, VER7); ids section }[events]
//! data                                 COMM, MMAP2, SAMPLE records; FINISHED_ROUND every round
//! feature section table + sections     BUILD_ID (when the source has build ids), HOSTNAME,
//!                                      OSRELEASE, VERSION, ARCH, NRCPUS, CMDLINE, EVENT_DESC,
//!                                      NUMA_TOPOLOGY, MEM_TOPOLOGY (when written)
//! ```
//!
//! What perf.data cannot say directly is carried in fields perf has:
//! - data source and load/store → `data_src` (see [`encode_data_src`]), so `perf script` and
//!   `perf mem report` print "L1 hit", "L3 hit", "Remote Cache (1 hop) hit", "Local RAM hit",
//!   "Remote RAM (1 hop) hit";
//! - latency → `weight`, in whole nanoseconds; the file's `HEADER_VERSION` then names numalab
//!   and says so, and the reader takes weights as latencies only then;
//! - page node → `phys_addr` in a synthetic physical layout (node n owns
//!   [(n+1)·2^40, (n+2)·2^40), the page's offset within it its virtual address's low 40
//!   bits, so page alignment is kept) described by `HEADER_MEM_TOPOLOGY`, the section in
//!   which perf records which memory blocks belong to which node. The reader maps any
//!   `phys_addr` through that section, so real `perf mem record --phys-data` files recorded
//!   with it get page nodes too;
//! - page size → `data_page_size`; CPU node → `HEADER_NUMA_TOPOLOGY`.

use crate::error::Error;
use crate::perf::{
    SAMPLE_ADDR, SAMPLE_CPU, SAMPLE_DATA_PAGE_SIZE, SAMPLE_DATA_SRC, SAMPLE_IDENTIFIER, SAMPLE_IP,
    SAMPLE_PERIOD, SAMPLE_PHYS_ADDR, SAMPLE_TID, SAMPLE_TIME, SAMPLE_WEIGHT,
};
use crate::record::{BuildId, FileMeta, Mapping, MappingKind, Record, SampleSource, ThreadName};
use numalab_core::{DataSource, NodeId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Every sample carries these fields, in the kernel's order.
pub const SAMPLE_TYPE: u64 = SAMPLE_IDENTIFIER
    | SAMPLE_IP
    | SAMPLE_TID
    | SAMPLE_TIME
    | SAMPLE_ADDR
    | SAMPLE_CPU
    | SAMPLE_PERIOD
    | SAMPLE_WEIGHT
    | SAMPLE_DATA_SRC
    | SAMPLE_PHYS_ADDR
    | SAMPLE_DATA_PAGE_SIZE;

/// Origins whose task and thread ids are a real kernel's pids and tids, written as they are
/// (perf's own files, `numalab record`); the simulator's are offset by [`ID_OFFSET`].
const REAL_ID_ORIGINS: [&str; 2] = ["perf", "numalab-record"];

/// Event names written as perf's software page-fault events (`PERF_TYPE_SOFTWARE` and its
/// config), so that a page-fault recording read back stays one ([`crate::perf`] takes
/// software events as not sampling memory accesses); every other name is declared as
/// Intel's load-latency raw event.
const SOFTWARE_FAULT_EVENTS: [(&str, u64); 4] = [
    ("page-faults", 2), // PERF_COUNT_SW_PAGE_FAULTS
    ("faults", 2),
    ("minor-faults", 5), // PERF_COUNT_SW_PAGE_FAULTS_MIN
    ("major-faults", 6), // PERF_COUNT_SW_PAGE_FAULTS_MAJ
];

/// `HEADER_VERSION` prefix by which the reader knows `weight` holds latency in ns.
pub const VERSION_LATENCY_NS: &str = "numalab (weight = latency ns)";
/// Added to task and thread ids for perf's pid/tid: perf takes pid/tid 0 for the idle task
/// ("swapper"), and the simulator numbers tasks and threads from 0. `HEADER_VERSION` ends with
/// `ids+1000` so that the reader subtracts it again (exact round trip).
pub const ID_OFFSET: u32 = 1000;
const ID_MARKER: &str = " ids+";

/// The id offset a `HEADER_VERSION` string declares (`None`: none, ids as recorded).
pub fn id_offset_of_version(v: &str) -> Option<u32> {
    let at = v.rfind(ID_MARKER)? + ID_MARKER.len();
    v[at..].split_whitespace().next()?.parse().ok()
}
/// Event name when the source names none: Intel's load-latency event as `perf mem record`
/// names it, which is also the raw event (type 4, config 0x1cd) the attribute declares.
pub const DEFAULT_EVENT: &str = "cpu/mem-loads,ldlat=30/P";

/// Synthetic physical layout: node n's memory is [(n+1) << PHYS_NODE_SHIFT, ...); 0 stays
/// "no physical address" as perf prints it.
pub const PHYS_NODE_SHIFT: u32 = 40;
/// Memory block size declared in `HEADER_MEM_TOPOLOGY` (the kernel's usual 128 MiB would
/// make each node's bitmap 1 KiB; 1 GiB keeps it at 128 bytes).
const MEM_BLOCK: u64 = 1 << 30;

// Record types and misc bits (perf_event.h, perf's util/event.h).
const RECORD_COMM: u32 = 3;
const RECORD_SAMPLE: u32 = 9;
const RECORD_MMAP2: u32 = 10;
const RECORD_FINISHED_ROUND: u32 = 68;
const MISC_KERNEL: u16 = 1;
const MISC_USER: u16 = 2;
/// Lowest kernel address on x86-64 (the canonical upper half).
const KERNEL_START: u64 = 0xffff_8000_0000_0000;
const MISC_MMAP_DATA: u16 = 1 << 13;

// Feature bits (perf's util/header.h, enum HEADER_*).
const FEAT_BUILD_ID: u32 = 2;
const FEAT_HOSTNAME: u32 = 3;
const FEAT_OSRELEASE: u32 = 4;
const FEAT_VERSION: u32 = 5;
const FEAT_ARCH: u32 = 6;
const FEAT_NRCPUS: u32 = 7;
const FEAT_CMDLINE: u32 = 11;
const FEAT_EVENT_DESC: u32 = 12;
const FEAT_NUMA_TOPOLOGY: u32 = 14;
const FEAT_MEM_TOPOLOGY: u32 = 22;

const HEADER_BYTES: u64 = 104;
const ATTR_BYTES: usize = 128; // PERF_ATTR_SIZE_VER7

// perf_mem_data_src fields (perf_event.h): op bits 0-4, lvl 5-18, snoop 19-23, lock 24-25,
// dtlb 26-32.
const OP_NA: u64 = 0x01;
const OP_LOAD: u64 = 0x02;
const OP_STORE: u64 = 0x04;
const LVL_NA: u64 = 0x01 << 5;
const LVL_HIT: u64 = 0x02 << 5;
const LVL_L1: u64 = 0x08 << 5;
const LVL_L3: u64 = 0x40 << 5;
const LVL_LOC_RAM: u64 = 0x80 << 5;
const LVL_REM_RAM1: u64 = 0x100 << 5;
const LVL_REM_CCE1: u64 = 0x400 << 5;
const SNOOP_NA: u64 = 0x01 << 19;
const SNOOP_NONE: u64 = 0x02 << 19;
const SNOOP_MISS: u64 = 0x08 << 19;
const SNOOP_HITM: u64 = 0x10 << 19;
const LOCK_NA: u64 = 0x01 << 24;
const TLB_NA: u64 = 0x01 << 26;

/// perf's `data_src` word for a sample served from `source` (unknown: N/A), load or store
/// (unknown: N/A). The level goes in the original `mem_lvl` bits with the kernel's PEBS snoop
/// bits (`pebs_data_source` entries 0x01 L1, 0x04 L3, 0x09 remote cache HITM, 0x0c local RAM,
/// 0x0d remote RAM) but without `mem_lvl_num`/`mem_remote`: perf 6.1 prints both namespaces
/// ("Remote Remote RAM (1 hop) or RAM hit"), while `mem_lvl` alone reads "Remote RAM (1 hop)
/// hit" in every perf version, and `perf c2c` classifies by `mem_lvl`.
pub fn encode_data_src(source: Option<DataSource>, write: Option<bool>) -> u64 {
    let op = match write {
        Some(true) => OP_STORE,
        Some(false) => OP_LOAD,
        None => OP_NA,
    };
    let where_ = match source {
        None => LVL_NA | SNOOP_NA,
        Some(DataSource::PrivateCache) => LVL_HIT | LVL_L1 | SNOOP_NONE,
        Some(DataSource::LocalLlc) => LVL_HIT | LVL_L3 | SNOOP_NONE,
        Some(DataSource::RemoteCache) => LVL_HIT | LVL_REM_CCE1 | SNOOP_HITM,
        Some(DataSource::LocalDram) => LVL_HIT | LVL_LOC_RAM | SNOOP_NONE | SNOOP_MISS,
        Some(DataSource::RemoteDram) => LVL_HIT | LVL_REM_RAM1 | SNOOP_NONE | SNOOP_MISS,
    };
    op | where_ | LOCK_NA | TLB_NA
}

/// The synthetic physical address of `addr` on `node` (see the module comment).
pub fn synthetic_phys_addr(node: NodeId, addr: u64) -> u64 {
    ((node.0 as u64 + 1) << PHYS_NODE_SHIFT) | (addr & ((1 << PHYS_NODE_SHIFT) - 1))
}

/// What an export wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    pub samples: u64,
    pub mappings: u64,
    pub threads: u64,
    pub bytes: u64,
    /// Whether page nodes were written (synthetic phys_addr + HEADER_MEM_TOPOLOGY); false when
    /// none was known, or when some samples carried a real phys_addr (the two would clash).
    pub page_nodes: bool,
    /// Whether weights are latencies in ns (every sample with a weight had a known latency).
    pub latency_weights: bool,
}

/// Writes a perf.data file record by record; the header and feature sections are written by
/// [`finish`](PerfWriter::finish), so the sink must be seekable.
pub struct PerfWriter<W: Write + Seek> {
    path: PathBuf,
    out: W,
    meta: FileMeta,
    events: Vec<String>,
    data_offset: u64,
    at: u64,
    buf: Vec<u8>,
    round_rows: usize,
    in_round: usize,
    threads: HashSet<(u32, u32)>,
    /// CPU → node pairs seen, for the NUMA section when the metadata has no topology.
    cpu_nodes: BTreeMap<u32, u16>,
    max_cpu: u32,
    max_node: u16,
    synthetic_phys: bool,
    real_phys: bool,
    raw_weights: bool,
    summary: ExportSummary,
    /// Added to task and thread ids (0 for real pids; see [`REAL_ID_ORIGINS`]).
    id_offset: u32,
    /// [`SAMPLE_TYPE`], without `SAMPLE_CPU` when the samples carry no CPU.
    sample_type: u64,
    /// Thread names by (task, thread), for the COMM records.
    names: HashMap<(u32, u32), String>,
}

impl PerfWriter<BufWriter<File>> {
    pub fn create(path: impl AsRef<Path>, meta: &FileMeta) -> Result<Self, Error> {
        let path = path.as_ref();
        let f = File::create(path).map_err(|e| Error::new(path, format!("cannot create: {e}")))?;
        PerfWriter::new(BufWriter::with_capacity(1 << 20, f), path, meta)
    }
}

fn pad8(n: usize) -> usize {
    (n + 7) & !7
}

/// perf's `do_write_string`: u32 length (NUL included, padded to 64), then the bytes.
fn put_string(b: &mut Vec<u8>, s: &str) {
    let len = (s.len() + 1).div_ceil(64) * 64;
    b.extend_from_slice(&(len as u32).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
    b.resize(b.len() + len - s.len(), 0);
}

/// `HEADER_BUILD_ID` as perf's `write_buildid` (util/header.c) writes it: per binary a
/// `perf_record_header_build_id` (header with type 0, misc kernel or user and
/// `PERF_RECORD_MISC_BUILD_ID_SIZE`; pid -1, the host; the id in 20 bytes then its size in the
/// 21st of a 24-byte field), then the path NUL-padded to 64 bytes. An id that is not hex of at
/// most 20 bytes cannot come from perf and is left out rather than written truncated.
fn build_id_section(ids: &[BuildId]) -> Vec<u8> {
    const MISC_BUILD_ID_SIZE: u16 = 1 << 15;
    const HOST_PID: i32 = -1;
    let mut b = Vec::new();
    for id in ids {
        let Some(bytes) = hex_bytes(&id.id_hex).filter(|v| v.len() <= 20) else {
            continue;
        };
        let name_len = (id.path.len() + 1).div_ceil(64) * 64;
        let misc = if id.kernel { MISC_KERNEL } else { MISC_USER } | MISC_BUILD_ID_SIZE;
        u32le(&mut b, 0);
        b.extend_from_slice(&misc.to_le_bytes());
        b.extend_from_slice(&((8 + 4 + 24 + name_len) as u16).to_le_bytes());
        b.extend_from_slice(&HOST_PID.to_le_bytes());
        let mut field = [0u8; 24];
        field[..bytes.len()].copy_from_slice(&bytes);
        field[20] = bytes.len() as u8;
        b.extend_from_slice(&field);
        b.extend_from_slice(id.path.as_bytes());
        b.resize(b.len() + name_len - id.path.len(), 0);
    }
    b
}

fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn u32le(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn u64le(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

/// `0-3,8` from a sorted list.
fn cpu_list(cpus: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

impl<W: Write + Seek> PerfWriter<W> {
    /// A writer on a seekable sink; `path` names it in errors. The attributes come from
    /// `meta.events` (one per event; none: [`DEFAULT_EVENT`]) and `meta.sample_period`.
    pub fn new(mut out: W, path: impl AsRef<Path>, meta: &FileMeta) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        let mut events = meta.events.clone();
        if events.is_empty() {
            events.push(DEFAULT_EVENT.to_string());
        }
        if events.len() > u16::MAX as usize {
            return Err(Error::new(&path, "more than 65535 events"));
        }
        let sample_type = if meta.samples_without_cpu {
            SAMPLE_TYPE & !SAMPLE_CPU
        } else {
            SAMPLE_TYPE
        };
        // Header placeholder, then ids and attributes; the data follows.
        let mut b = vec![0u8; HEADER_BYTES as usize];
        let ids_at = b.len() as u64;
        for i in 0..events.len() {
            u64le(&mut b, i as u64 + 1);
        }
        for (i, name) in events.iter().enumerate() {
            b.extend_from_slice(&attr_bytes(meta.sample_period, sample_type, name));
            u64le(&mut b, ids_at + 8 * i as u64);
            u64le(&mut b, 8);
        }
        out.write_all(&b)
            .map_err(|e| Error::new(&path, format!("cannot write: {e}")))?;
        let data_offset = b.len() as u64;
        let mut w = PerfWriter {
            path,
            out,
            meta: meta.clone(),
            events,
            data_offset,
            at: data_offset,
            buf: Vec::with_capacity(1 << 16),
            round_rows: 65_536,
            in_round: 0,
            threads: HashSet::new(),
            cpu_nodes: BTreeMap::new(),
            max_cpu: 0,
            max_node: 0,
            synthetic_phys: false,
            real_phys: false,
            raw_weights: false,
            summary: ExportSummary::default(),
            id_offset: if REAL_ID_ORIGINS.contains(&meta.origin.as_str()) {
                0
            } else {
                ID_OFFSET
            },
            sample_type,
            names: HashMap::new(),
        };
        w.push_thread_names(&meta.thread_names);
        let maps = meta.mappings.clone();
        w.push_mappings(&maps, 0)?;
        Ok(w)
    }

    fn io(&self, e: std::io::Error) -> Error {
        Error::new(&self.path, format!("cannot write: {e}"))
    }

    fn flush_buf(&mut self) -> Result<(), Error> {
        if !self.buf.is_empty() {
            self.out.write_all(&self.buf).map_err(|e| self.io(e))?;
            self.at += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// Whether samples (and the sample_id trailers) carry a CPU field.
    fn with_cpu(&self) -> bool {
        self.sample_type & SAMPLE_CPU != 0
    }

    /// Bytes of the sample_id trailer of a non-sample record.
    fn sample_id_bytes(&self) -> usize {
        if self.with_cpu() {
            32
        } else {
            24
        }
    }

    /// The sample_id trailer of a non-sample record (sample_id_all): pid/tid, time, cpu
    /// (when samples have one), identifier.
    fn sample_id(&mut self, pid: u32, tid: u32, time: u64) {
        let with_cpu = self.with_cpu();
        let b = &mut self.buf;
        u32le(b, pid);
        u32le(b, tid);
        u64le(b, time);
        if with_cpu {
            u64le(b, 0);
        }
        u64le(b, 1);
    }

    /// Thread names for the COMM records of threads not written yet.
    pub fn push_thread_names(&mut self, names: &[ThreadName]) {
        for n in names {
            self.names.insert((n.task, n.thread), n.comm.clone());
        }
    }

    /// MMAP2 records for `maps`, effective from `time_ns`.
    pub fn push_mappings(&mut self, maps: &[Mapping], time_ns: u64) -> Result<(), Error> {
        for m in maps {
            let name = if m.name.is_empty() { "//anon" } else { &m.name };
            let name_bytes = pad8(name.len() + 1);
            let size = 8 + 8 + 3 * 8 + 8 + 16 + 8 + name_bytes + self.sample_id_bytes();
            let exec = m.kind == MappingKind::Binary;
            // perf's kernel maps ([kernel.kallsyms], modules) belong to pid -1
            let kernel = m.task == u32::MAX;
            let pid = if kernel {
                u32::MAX
            } else {
                m.task.wrapping_add(self.id_offset)
            };
            let b = &mut self.buf;
            u32le(b, RECORD_MMAP2);
            let misc = if kernel { MISC_KERNEL } else { MISC_USER }
                | if exec { 0 } else { MISC_MMAP_DATA };
            b.extend_from_slice(&misc.to_le_bytes());
            b.extend_from_slice(&(size as u16).to_le_bytes());
            u32le(b, pid);
            u32le(b, pid);
            u64le(b, m.start);
            u64le(b, m.len_bytes);
            u64le(b, m.pgoff);
            u32le(b, 0); // maj
            u32le(b, 0); // min
            u64le(b, 0); // ino
            u64le(b, 0); // ino_generation
            u32le(b, if exec { 5 } else { 3 }); // PROT_READ|EXEC or READ|WRITE
            u32le(b, 2); // MAP_PRIVATE
            b.extend_from_slice(name.as_bytes());
            b.resize(b.len() + name_bytes - name.len(), 0);
            self.sample_id(pid, pid, time_ns);
            self.summary.mappings += 1;
        }
        Ok(())
    }

    /// A thread's COMM record: its recorded name, else its process', else the workload's.
    fn comm(&mut self, task: u32, thread: u32, time: u64) {
        let known = self
            .names
            .get(&(task, thread))
            .or_else(|| self.names.get(&(task, task)));
        let mut name: String = known
            .unwrap_or(&self.meta.workload)
            .chars()
            .take(15)
            .collect();
        if name.is_empty() {
            name = "numalab".into();
        }
        let (pid, tid) = (
            task.wrapping_add(self.id_offset),
            thread.wrapping_add(self.id_offset),
        );
        // perf's comm is at most 16 bytes with its NUL: cut at a character boundary.
        while name.len() > 15 {
            name.pop();
        }
        let name_bytes = pad8(name.len() + 1);
        let size = 8 + 8 + name_bytes + self.sample_id_bytes();
        let b = &mut self.buf;
        u32le(b, RECORD_COMM);
        b.extend_from_slice(&MISC_USER.to_le_bytes());
        b.extend_from_slice(&(size as u16).to_le_bytes());
        u32le(b, pid);
        u32le(b, tid);
        b.extend_from_slice(name.as_bytes());
        b.resize(b.len() + name_bytes - name.len(), 0);
        self.sample_id(pid, tid, time);
    }

    /// One sample. A new thread gets a COMM record first.
    pub fn push(&mut self, r: &Record) -> Result<(), Error> {
        let s = &r.sample;
        if r.event as usize >= self.events.len() {
            return Err(Error::new(
                &self.path,
                format!(
                    "sample at {} ns names event {} but the file has {} event(s)",
                    s.time_ns,
                    r.event,
                    self.events.len()
                ),
            ));
        }
        if self.threads.insert((s.task.0, s.thread.0)) {
            self.comm(s.task.0, s.thread.0, s.time_ns);
            self.summary.threads += 1;
        }
        if let Some(cpu) = r.cpu() {
            self.max_cpu = self.max_cpu.max(cpu.0);
            if let Some(n) = r.cpu_node() {
                self.cpu_nodes.entry(cpu.0).or_insert(n.0);
                self.max_node = self.max_node.max(n.0);
            }
        }
        let phys = match (r.phys_addr, r.page_node()) {
            (Some(p), _) => {
                self.real_phys = true;
                p
            }
            (None, Some(n)) => {
                self.synthetic_phys = true;
                self.max_node = self.max_node.max(n.0);
                synthetic_phys_addr(n, s.addr)
            }
            (None, None) => 0,
        };
        let weight = match r.latency_ns() {
            Some(ns) => ns.max(0.0).round() as u64,
            None => {
                if r.weight.is_some() {
                    self.raw_weights = true;
                }
                r.weight.unwrap_or(0)
            }
        };
        let data_src = r
            .data_src
            .unwrap_or_else(|| encode_data_src(r.source(), r.write()));
        let page = r.page_size().map_or(0, |p| p.bytes());
        let with_cpu = self.with_cpu();
        let fields = if with_cpu { 11 } else { 10 };
        // a sample taken in the kernel (a page fault's ip in copy_to_user, say) says so, as
        // perf record writes it, so that perf resolves it against the kernel's maps
        let misc = match r.ip {
            Some(ip) if ip >= KERNEL_START => MISC_KERNEL,
            _ => MISC_USER,
        };
        let off = self.id_offset;
        let b = &mut self.buf;
        u32le(b, RECORD_SAMPLE);
        b.extend_from_slice(&misc.to_le_bytes());
        b.extend_from_slice(&((8 + fields * 8) as u16).to_le_bytes());
        let cpu = if with_cpu {
            // a sample without one where the file has them: -1, perf's "no CPU"
            Some(r.cpu().map_or(u32::MAX as u64, |c| c.0 as u64)) // cpu, reserved
        } else {
            None
        };
        for v in [
            Some(r.event as u64 + 1), // IDENTIFIER
            Some(r.ip.unwrap_or(0)),
            Some((s.thread.0.wrapping_add(off) as u64) << 32 | s.task.0.wrapping_add(off) as u64), // pid, tid
            Some(s.time_ns),
            Some(s.addr),
            cpu,
            Some(r.period.unwrap_or(self.meta.sample_period).max(1)),
            Some(weight),
            Some(data_src),
            Some(phys),
            Some(page),
        ]
        .into_iter()
        .flatten()
        {
            u64le(b, v);
        }
        self.summary.samples += 1;
        self.in_round += 1;
        if self.in_round >= self.round_rows {
            self.finish_round()?;
        }
        Ok(())
    }

    /// Ends a round: perf and linux-perf-data sort by time the records of two rounds at a
    /// time, so a round must not go back in time more than one round.
    fn finish_round(&mut self) -> Result<(), Error> {
        u32le(&mut self.buf, RECORD_FINISHED_ROUND);
        u32le(&mut self.buf, 8 << 16);
        self.in_round = 0;
        self.flush_buf()
    }

    /// Writes the feature sections and the header; returns what was written.
    pub fn finish(mut self) -> Result<ExportSummary, Error> {
        if self.in_round > 0 {
            self.finish_round()?;
        }
        self.flush_buf()?;
        let data_size = self.at - self.data_offset;
        let features = self.features();
        // Section table, then the sections.
        let mut table = Vec::new();
        let mut body = Vec::new();
        let body_at = self.at + 16 * features.len() as u64;
        let mut bitmap = [0u64; 4];
        for (bit, data) in &features {
            bitmap[*bit as usize / 64] |= 1 << (bit % 64);
            u64le(&mut table, body_at + body.len() as u64);
            u64le(&mut table, data.len() as u64);
            body.extend_from_slice(data);
        }
        self.out.write_all(&table).map_err(|e| self.io(e))?;
        self.out.write_all(&body).map_err(|e| self.io(e))?;
        let total = body_at + body.len() as u64;
        let n = self.events.len() as u64;
        let mut h = Vec::with_capacity(HEADER_BYTES as usize);
        h.extend_from_slice(b"PERFILE2");
        u64le(&mut h, HEADER_BYTES);
        u64le(&mut h, ATTR_BYTES as u64 + 16);
        u64le(&mut h, HEADER_BYTES + 8 * n); // attrs
        u64le(&mut h, (ATTR_BYTES as u64 + 16) * n);
        u64le(&mut h, self.data_offset);
        u64le(&mut h, data_size);
        u64le(&mut h, 0); // event_types (unused)
        u64le(&mut h, 0);
        for w in bitmap {
            u64le(&mut h, w);
        }
        self.out
            .seek(SeekFrom::Start(0))
            .and_then(|_| self.out.write_all(&h))
            .and_then(|_| self.out.flush())
            .map_err(|e| self.io(e))?;
        self.summary.bytes = total;
        self.summary.page_nodes = self.synthetic_phys && !self.real_phys;
        self.summary.latency_weights = !self.raw_weights;
        Ok(self.summary)
    }

    fn features(&self) -> Vec<(u32, Vec<u8>)> {
        let mut f = Vec::new();
        let string = |s: &str| {
            let mut b = Vec::new();
            put_string(&mut b, s);
            b
        };
        let host = if self.meta.machine.is_empty() {
            "numalab"
        } else {
            &self.meta.machine
        };
        if !self.meta.build_ids.is_empty() {
            f.push((FEAT_BUILD_ID, build_id_section(&self.meta.build_ids)));
        }
        f.push((FEAT_HOSTNAME, string(host)));
        f.push((
            FEAT_OSRELEASE,
            string(&format!("numalab-{}", self.meta.origin)),
        ));
        let ids = if self.id_offset > 0 {
            format!("{ID_MARKER}{}", self.id_offset)
        } else {
            String::new()
        };
        let version = if self.raw_weights {
            format!("numalab {}{ids}", env!("CARGO_PKG_VERSION"))
        } else {
            format!("{VERSION_LATENCY_NS} {}{ids}", env!("CARGO_PKG_VERSION"))
        };
        f.push((FEAT_VERSION, string(&version)));
        f.push((FEAT_ARCH, string(std::env::consts::ARCH)));
        // CPUs: the topology's, else those seen.
        let topo_cpus: Vec<(u16, Vec<u32>)> = match &self.meta.topology {
            Some(t) => t
                .nodes
                .iter()
                .map(|n| (n.id.0, n.cpus.iter().map(|c| c.0).collect()))
                .collect(),
            None if !self.cpu_nodes.is_empty() => (0..=self.max_node)
                .map(|n| {
                    let cpus = self
                        .cpu_nodes
                        .iter()
                        .filter(|(_, v)| **v == n)
                        .map(|(c, _)| *c)
                        .collect();
                    (n, cpus)
                })
                .collect(),
            None => Vec::new(),
        };
        let nr_cpus = topo_cpus
            .iter()
            .flat_map(|(_, c)| c.iter().copied())
            .max()
            .unwrap_or(0)
            .max(self.max_cpu)
            + 1;
        let mut b = Vec::new();
        u32le(&mut b, nr_cpus);
        u32le(&mut b, nr_cpus);
        f.push((FEAT_NRCPUS, b));
        let mut b = Vec::new();
        let cmdline = if self.meta.workload.is_empty() {
            "numalab"
        } else {
            &self.meta.workload
        };
        u32le(&mut b, 1);
        put_string(&mut b, cmdline);
        f.push((FEAT_CMDLINE, b));
        // EVENT_DESC: u32 nr, u32 attr size; per event: attr, u32 nr_ids, name, ids.
        let mut b = Vec::new();
        u32le(&mut b, self.events.len() as u32);
        u32le(&mut b, ATTR_BYTES as u32);
        for (i, name) in self.events.iter().enumerate() {
            b.extend_from_slice(&attr_bytes(self.meta.sample_period, self.sample_type, name));
            u32le(&mut b, 1);
            put_string(&mut b, name);
            u64le(&mut b, i as u64 + 1);
        }
        f.push((FEAT_EVENT_DESC, b));
        if !topo_cpus.is_empty() {
            // NUMA_TOPOLOGY: u32 nr; per node: u32 id, u64 total kB, u64 free kB, cpu list.
            let mut b = Vec::new();
            u32le(&mut b, topo_cpus.len() as u32);
            for (id, cpus) in &topo_cpus {
                let mem_kb = self
                    .meta
                    .topology
                    .as_ref()
                    .and_then(|t| t.nodes.iter().find(|n| n.id.0 == *id))
                    .map_or(0, |n| n.mem_bytes / 1024);
                u32le(&mut b, *id as u32);
                u64le(&mut b, mem_kb);
                u64le(&mut b, mem_kb);
                let mut cpus = cpus.clone();
                cpus.sort_unstable();
                put_string(&mut b, &cpu_list(&cpus));
            }
            f.push((FEAT_NUMA_TOPOLOGY, b));
        }
        if self.synthetic_phys && !self.real_phys {
            f.push((FEAT_MEM_TOPOLOGY, self.mem_topology()));
        }
        f
    }

    /// MEM_TOPOLOGY for the synthetic layout: u64 version 1, u64 block size, u64 nr; per
    /// node: u64 node, u64 blocks, then a bitmap (u64 bits, u64 words) of its blocks.
    fn mem_topology(&self) -> Vec<u8> {
        let nodes = self
            .meta
            .topology
            .as_ref()
            .map_or(0, |t| t.nodes.len() as u64)
            .max(self.max_node as u64 + 1);
        let per_node = (1u64 << PHYS_NODE_SHIFT) / MEM_BLOCK;
        let bits = (nodes + 1) * per_node;
        let words = bits.div_ceil(64);
        let mut b = Vec::new();
        u64le(&mut b, 1);
        u64le(&mut b, MEM_BLOCK);
        u64le(&mut b, nodes);
        for n in 0..nodes {
            u64le(&mut b, n);
            u64le(&mut b, bits);
            u64le(&mut b, bits);
            let (first, last) = ((n + 1) * per_node, (n + 2) * per_node);
            for w in 0..words {
                let mut word = 0u64;
                for bit in 0..64 {
                    let blk = w * 64 + bit;
                    if blk >= first && blk < last {
                        word |= 1 << bit;
                    }
                }
                u64le(&mut b, word);
            }
        }
        b
    }
}

/// perf_event_attr (VER7, 128 bytes) of the event named `name`: a software page-fault event
/// ([`SOFTWARE_FAULT_EVENTS`]), else raw event 0x1cd (Intel's mem-loads) with precise_ip 2;
/// sampling every `period`, `sample_type`, mmap/comm/mmap2 records with sample_id_all, user
/// space only (`exclude_kernel`, `exclude_hv`: the file carries no kernel map unless its
/// source did, and without them `perf report` looks for one and warns that kernel address
/// maps "were restricted").
fn attr_bytes(period: u64, sample_type: u64, name: &str) -> [u8; ATTR_BYTES] {
    let software = SOFTWARE_FAULT_EVENTS
        .iter()
        .find(|(n, _)| name.split(':').next() == Some(*n))
        .map(|(_, config)| *config);
    let (kind, config, precise) = match software {
        Some(c) => (1u32, c, 0u64), // PERF_TYPE_SOFTWARE
        None => (4, 0x1cd, 2),      // PERF_TYPE_RAW
    };
    let mut a = [0u8; ATTR_BYTES];
    a[0..4].copy_from_slice(&kind.to_le_bytes());
    a[4..8].copy_from_slice(&(ATTR_BYTES as u32).to_le_bytes());
    a[8..16].copy_from_slice(&config.to_le_bytes());
    a[16..24].copy_from_slice(&period.max(1).to_le_bytes());
    a[24..32].copy_from_slice(&sample_type.to_le_bytes());
    // disabled(0), exclude_kernel(5), exclude_hv(6), mmap(8), comm(9), precise_ip (bits
    // 15-16), mmap_data(17), sample_id_all(18), mmap2(23)
    let flags: u64 =
        1 | 1 << 5 | 1 << 6 | 1 << 8 | 1 << 9 | precise << 15 | 1 << 17 | 1 << 18 | 1 << 23;
    a[40..48].copy_from_slice(&flags.to_le_bytes());
    a
}

/// Writes every sample of `source` to `path` as perf.data.
pub fn export(
    source: &mut dyn SampleSource,
    path: impl AsRef<Path>,
) -> Result<ExportSummary, Error> {
    let mut w = PerfWriter::create(path, source.meta())?;
    let mut last = 0;
    while let Some(b) = source.next_batch()? {
        let t = b.records.first().map_or(last, |r| r.sample.time_ns);
        w.push_thread_names(&b.thread_names);
        w.push_mappings(&b.mappings, t)?;
        for r in &b.records {
            w.push(r)?;
        }
        last = b.records.last().map_or(last, |r| r.sample.time_ns);
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_offset_is_read_from_the_version() {
        assert_eq!(
            id_offset_of_version(&format!("{VERSION_LATENCY_NS} 0.1.0{ID_MARKER}{ID_OFFSET}")),
            Some(ID_OFFSET)
        );
        assert_eq!(id_offset_of_version("numalab 0.1.0 ids+7"), Some(7));
        // Files from before the offset, and perf's own.
        assert_eq!(
            id_offset_of_version("numalab (weight = latency ns) 0.1.0"),
            None
        );
        assert_eq!(id_offset_of_version("6.1.76"), None);
    }
}
