//! perf.data ingestion (`perf mem record`, `perf record -d`, `perf c2c record`).
//!
//! `linux-perf-data` parses the file (header, attributes, feature sections, time-ordered
//! records); it skips several sample fields numalab needs (weight, data_src) and mis-orders
//! the READ group layout, so samples are decoded here from the raw record, following the
//! kernel's field order for `PERF_SAMPLE_*` bits (include/uapi/linux/perf_event.h,
//! `PERF_RECORD_SAMPLE`).
//!
//! perf records no page node: a sample's page node comes from its `phys_addr` through the
//! file's `HEADER_MEM_TOPOLOGY` section (physical memory blocks per node) where both exist
//! (numalab's exports, `perf mem record --phys-data`); a [`Placement`] snapshot, when given,
//! overrides it for the pages it knows. Otherwise it stays unknown. The CPU's node comes from a topology (given, or the file's own
//! `HEADER_NUMA_TOPOLOGY` section, or none).

use crate::error::Error;
use crate::record::{
    cpu_nodes, Batch, BuildId, FileMeta, Known, Mapping, MappingKind, Placement, Record, Row,
    SampleSource, ThreadName,
};
use linux_perf_data::linux_perf_event_reader::{
    EventRecord, PerfEventAttr, PerfEventType, RecordType, SamplingPolicy,
};
use linux_perf_data::{
    DsoKey, Endianness, Feature, PerfFile, PerfFileReader, PerfFileRecord, PerfRecordIter,
};
use numalab_core::{
    AccessSample, CpuId, DataSource, NodeId, NodeInfo, PageSize, TaskId, ThreadId, Topology,
};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

// PERF_SAMPLE_* bits, include/uapi/linux/perf_event.h.
pub const SAMPLE_IP: u64 = 1 << 0;
pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_ADDR: u64 = 1 << 3;
pub const SAMPLE_READ: u64 = 1 << 4;
pub const SAMPLE_CALLCHAIN: u64 = 1 << 5;
pub const SAMPLE_ID: u64 = 1 << 6;
pub const SAMPLE_CPU: u64 = 1 << 7;
pub const SAMPLE_PERIOD: u64 = 1 << 8;
pub const SAMPLE_STREAM_ID: u64 = 1 << 9;
pub const SAMPLE_RAW: u64 = 1 << 10;
pub const SAMPLE_BRANCH_STACK: u64 = 1 << 11;
pub const SAMPLE_REGS_USER: u64 = 1 << 12;
pub const SAMPLE_STACK_USER: u64 = 1 << 13;
pub const SAMPLE_WEIGHT: u64 = 1 << 14;
pub const SAMPLE_DATA_SRC: u64 = 1 << 15;
pub const SAMPLE_IDENTIFIER: u64 = 1 << 16;
pub const SAMPLE_TRANSACTION: u64 = 1 << 17;
pub const SAMPLE_REGS_INTR: u64 = 1 << 18;
pub const SAMPLE_PHYS_ADDR: u64 = 1 << 19;
pub const SAMPLE_AUX: u64 = 1 << 20;
pub const SAMPLE_CGROUP: u64 = 1 << 21;
pub const SAMPLE_DATA_PAGE_SIZE: u64 = 1 << 22;
pub const SAMPLE_CODE_PAGE_SIZE: u64 = 1 << 23;
pub const SAMPLE_WEIGHT_STRUCT: u64 = 1 << 24;

// PERF_FORMAT_* (read_format) bits.
const FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
const FORMAT_ID: u64 = 1 << 2;
const FORMAT_GROUP: u64 = 1 << 3;
const FORMAT_LOST: u64 = 1 << 4;

// Branch sample type bits that change the BRANCH_STACK layout.
const BRANCH_HW_INDEX: u64 = 1 << 17;
const BRANCH_COUNTERS: u64 = 1 << 19;

/// A decoded `PERF_RECORD_SAMPLE`: every field numalab uses, `None` when not recorded.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RawSample {
    pub ip: Option<u64>,
    pub pid: Option<i32>,
    pub tid: Option<i32>,
    pub time: Option<u64>,
    pub addr: Option<u64>,
    pub id: Option<u64>,
    pub cpu: Option<u32>,
    pub period: Option<u64>,
    /// `PERF_SAMPLE_WEIGHT` (full u64) or the `var1_dw` of `PERF_SAMPLE_WEIGHT_STRUCT`, as
    /// `perf script -F weight` prints it.
    pub weight: Option<u64>,
    /// `var2_w` of `PERF_SAMPLE_WEIGHT_STRUCT` (instruction latency on Intel).
    pub ins_lat: Option<u16>,
    pub data_src: Option<u64>,
    pub transaction: Option<u64>,
    pub phys_addr: Option<u64>,
    pub cgroup: Option<u64>,
    pub data_page_size: Option<u64>,
    pub code_page_size: Option<u64>,
}

/// The attribute fields that shape a sample record.
#[derive(Copy, Clone, Debug, Default)]
pub struct SampleLayout {
    pub sample_type: u64,
    pub read_format: u64,
    pub branch_sample_type: u64,
    pub regs_user_mask: u64,
    pub regs_intr_mask: u64,
    pub big_endian: bool,
}

impl SampleLayout {
    pub fn from_attr(attr: &PerfEventAttr, endian: Endianness) -> SampleLayout {
        SampleLayout {
            sample_type: attr.sample_format.bits(),
            read_format: attr.read_format.bits(),
            branch_sample_type: attr.branch_sample_format.bits(),
            regs_user_mask: attr.sample_regs_user,
            regs_intr_mask: attr.sample_regs_intr,
            big_endian: endian == Endianness::BigEndian,
        }
    }
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
    big: bool,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.data.len());
        match end {
            Some(end) => {
                let s = &self.data[self.at..end];
                self.at = end;
                Ok(s)
            }
            None => Err(format!(
                "sample record of {} bytes ends inside field '{what}' (at byte {}, {n} bytes wanted)",
                self.data.len(),
                self.at
            )),
        }
    }
    fn u64(&mut self, what: &str) -> Result<u64, String> {
        let b: [u8; 8] = self.take(8, what)?.try_into().expect("8 bytes");
        Ok(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }
    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let b: [u8; 4] = self.take(4, what)?.try_into().expect("4 bytes");
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }
    fn skip_u64s(&mut self, n: u64, what: &str) -> Result<(), String> {
        let bytes = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(8))
            .ok_or_else(|| format!("field '{what}' claims {n} entries"))?;
        self.take(bytes, what).map(|_| ())
    }
}

/// Decodes the body of a `PERF_RECORD_SAMPLE` (after the 8-byte header) in the kernel's
/// field order. Errors say which field ran past the record's end.
pub fn decode_sample(data: &[u8], l: &SampleLayout) -> Result<RawSample, String> {
    let t = l.sample_type;
    let mut c = Cursor {
        data,
        at: 0,
        big: l.big_endian,
    };
    let mut s = RawSample::default();
    if t & SAMPLE_IDENTIFIER != 0 {
        s.id = Some(c.u64("identifier")?);
    }
    if t & SAMPLE_IP != 0 {
        s.ip = Some(c.u64("ip")?);
    }
    if t & SAMPLE_TID != 0 {
        s.pid = Some(c.u32("pid")? as i32);
        s.tid = Some(c.u32("tid")? as i32);
    }
    if t & SAMPLE_TIME != 0 {
        s.time = Some(c.u64("time")?);
    }
    if t & SAMPLE_ADDR != 0 {
        s.addr = Some(c.u64("addr")?);
    }
    if t & SAMPLE_ID != 0 {
        s.id = Some(c.u64("id")?);
    }
    if t & SAMPLE_STREAM_ID != 0 {
        c.u64("stream_id")?;
    }
    if t & SAMPLE_CPU != 0 {
        s.cpu = Some(c.u32("cpu")?);
        c.u32("cpu reserved")?;
    }
    if t & SAMPLE_PERIOD != 0 {
        s.period = Some(c.u64("period")?);
    }
    if t & SAMPLE_READ != 0 {
        let rf = l.read_format;
        // Per value: the value, then its id and lost count where requested.
        let per_value = 1 + (rf & FORMAT_ID != 0) as u64 + (rf & FORMAT_LOST != 0) as u64;
        let times = (rf & FORMAT_TOTAL_TIME_ENABLED != 0) as u64
            + (rf & FORMAT_TOTAL_TIME_RUNNING != 0) as u64;
        if rf & FORMAT_GROUP != 0 {
            let nr = c.u64("read nr")?;
            c.skip_u64s(times, "read times")?;
            c.skip_u64s(nr.saturating_mul(per_value), "read values")?;
        } else {
            c.u64("read value")?;
            c.skip_u64s(times, "read times")?;
            c.skip_u64s(per_value - 1, "read id/lost")?;
        }
    }
    if t & SAMPLE_CALLCHAIN != 0 {
        let nr = c.u64("callchain nr")?;
        c.skip_u64s(nr, "callchain")?;
    }
    if t & SAMPLE_RAW != 0 {
        let size = c.u32("raw size")?;
        c.take(size as usize, "raw data")?;
    }
    if t & SAMPLE_BRANCH_STACK != 0 {
        let nr = c.u64("branch nr")?;
        if l.branch_sample_type & BRANCH_HW_INDEX != 0 {
            c.u64("branch hw_idx")?;
        }
        c.skip_u64s(nr.saturating_mul(3), "branch entries")?;
        if l.branch_sample_type & BRANCH_COUNTERS != 0 {
            c.skip_u64s(nr, "branch counters")?;
        }
    }
    if t & SAMPLE_REGS_USER != 0 {
        // abi 0 (PERF_SAMPLE_REGS_ABI_NONE): no registers follow.
        if c.u64("user regs abi")? != 0 {
            c.skip_u64s(l.regs_user_mask.count_ones() as u64, "user regs")?;
        }
    }
    if t & SAMPLE_STACK_USER != 0 {
        let size = c.u64("user stack size")?;
        let n = usize::try_from(size).map_err(|_| "user stack size too large".to_string())?;
        c.take(n, "user stack")?;
        if size != 0 {
            c.u64("user stack dyn_size")?;
        }
    }
    if t & (SAMPLE_WEIGHT | SAMPLE_WEIGHT_STRUCT) != 0 {
        let w = c.u64("weight")?;
        if t & SAMPLE_WEIGHT_STRUCT != 0 {
            // Little-endian layout {u32 var1_dw; u16 var2_w; u16 var3_w}; the big-endian
            // kernel lays the struct out reversed, so the same shifts apply to the u64.
            s.weight = Some(w & 0xffff_ffff);
            s.ins_lat = Some((w >> 32) as u16);
        } else {
            s.weight = Some(w);
        }
    }
    if t & SAMPLE_DATA_SRC != 0 {
        s.data_src = Some(c.u64("data_src")?);
    }
    if t & SAMPLE_TRANSACTION != 0 {
        s.transaction = Some(c.u64("transaction")?);
    }
    if t & SAMPLE_REGS_INTR != 0 && c.u64("intr regs abi")? != 0 {
        c.skip_u64s(l.regs_intr_mask.count_ones() as u64, "intr regs")?;
    }
    if t & SAMPLE_PHYS_ADDR != 0 {
        s.phys_addr = Some(c.u64("phys_addr")?);
    }
    if t & SAMPLE_CGROUP != 0 {
        s.cgroup = Some(c.u64("cgroup")?);
    }
    if t & SAMPLE_DATA_PAGE_SIZE != 0 {
        s.data_page_size = Some(c.u64("data_page_size")?);
    }
    if t & SAMPLE_CODE_PAGE_SIZE != 0 {
        s.code_page_size = Some(c.u64("code_page_size")?);
    }
    // PERF_SAMPLE_AUX comes last and is not needed.
    Ok(s)
}

/// Field offsets of a layout without variable-length fields (no READ, CALLCHAIN, RAW,
/// BRANCH_STACK, register or stack dumps, AUX): decoded by direct reads after one length check
/// instead of field by field (the direct reader's inner loop).
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct FixedLayout {
    size: usize,
    identifier: Option<usize>,
    ip: Option<usize>,
    tid: Option<usize>,
    time: Option<usize>,
    addr: Option<usize>,
    id: Option<usize>,
    cpu: Option<usize>,
    period: Option<usize>,
    weight: Option<usize>,
    weight_struct: bool,
    data_src: Option<usize>,
    transaction: Option<usize>,
    phys_addr: Option<usize>,
    cgroup: Option<usize>,
    data_page_size: Option<usize>,
    code_page_size: Option<usize>,
}

impl FixedLayout {
    pub(crate) fn of(l: &SampleLayout) -> Option<FixedLayout> {
        let t = l.sample_type;
        let variable = SAMPLE_READ
            | SAMPLE_CALLCHAIN
            | SAMPLE_RAW
            | SAMPLE_BRANCH_STACK
            | SAMPLE_REGS_USER
            | SAMPLE_STACK_USER
            | SAMPLE_REGS_INTR
            | SAMPLE_AUX;
        if t & variable != 0 || l.big_endian {
            return None;
        }
        let mut f = FixedLayout::default();
        let mut at = 0;
        let mut field = |bit: u64| {
            (t & bit != 0).then(|| {
                at += 8;
                at - 8
            })
        };
        // The kernel's order (see decode_sample); STREAM_ID is skipped.
        f.identifier = field(SAMPLE_IDENTIFIER);
        f.ip = field(SAMPLE_IP);
        f.tid = field(SAMPLE_TID);
        f.time = field(SAMPLE_TIME);
        f.addr = field(SAMPLE_ADDR);
        f.id = field(SAMPLE_ID);
        field(SAMPLE_STREAM_ID);
        f.cpu = field(SAMPLE_CPU);
        f.period = field(SAMPLE_PERIOD);
        f.weight = field(SAMPLE_WEIGHT | SAMPLE_WEIGHT_STRUCT);
        f.weight_struct = t & SAMPLE_WEIGHT_STRUCT != 0;
        f.data_src = field(SAMPLE_DATA_SRC);
        f.transaction = field(SAMPLE_TRANSACTION);
        f.phys_addr = field(SAMPLE_PHYS_ADDR);
        f.cgroup = field(SAMPLE_CGROUP);
        f.data_page_size = field(SAMPLE_DATA_PAGE_SIZE);
        f.code_page_size = field(SAMPLE_CODE_PAGE_SIZE);
        f.size = at;
        Some(f)
    }

    /// The same as [`decode_sample`] on a record at least `size` bytes long (`None` if shorter:
    /// the caller decodes field by field for the error).
    #[inline]
    pub(crate) fn decode(&self, b: &[u8]) -> Option<RawSample> {
        let b = b.get(..self.size)?;
        let u = |at: Option<usize>| {
            at.map(|a| u64::from_le_bytes(b[a..a + 8].try_into().expect("8 bytes")))
        };
        let tid = u(self.tid);
        let w = u(self.weight);
        let (weight, ins_lat) = match w {
            Some(w) if self.weight_struct => (Some(w & 0xffff_ffff), Some((w >> 32) as u16)),
            w => (w, None),
        };
        Some(RawSample {
            ip: u(self.ip),
            pid: tid.map(|v| v as u32 as i32),
            tid: tid.map(|v| (v >> 32) as u32 as i32),
            time: u(self.time),
            addr: u(self.addr),
            id: u(self.id).or(u(self.identifier)),
            cpu: u(self.cpu).map(|v| v as u32),
            period: u(self.period),
            weight,
            ins_lat,
            data_src: u(self.data_src),
            transaction: u(self.transaction),
            phys_addr: u(self.phys_addr),
            cgroup: u(self.cgroup),
            data_page_size: u(self.data_page_size),
            code_page_size: u(self.code_page_size),
        })
    }
}

// perf_mem_data_src bit fields (little-endian bitfield order, perf_event.h).
const MEM_OP_SHIFT: u32 = 0;
const MEM_LVL_SHIFT: u32 = 5;
const MEM_SNOOP_SHIFT: u32 = 19;
const MEM_LVLNUM_SHIFT: u32 = 33;
const MEM_REMOTE_SHIFT: u32 = 37;
const MEM_OP_LOAD: u64 = 0x02;
const MEM_OP_STORE: u64 = 0x04;
const MEM_LVL_HIT: u64 = 0x02;
const MEM_LVL_L1: u64 = 0x08;
const MEM_LVL_LFB: u64 = 0x10;
const MEM_LVL_L2: u64 = 0x20;
const MEM_LVL_L3: u64 = 0x40;
const MEM_LVL_LOC_RAM: u64 = 0x80;
const MEM_LVL_REM_RAM1: u64 = 0x100;
const MEM_LVL_REM_RAM2: u64 = 0x200;
const MEM_LVL_REM_CCE1: u64 = 0x400;
const MEM_LVL_REM_CCE2: u64 = 0x800;
const MEM_SNOOP_HITM: u64 = 0x10;
const LVLNUM_L1: u64 = 0x01;
const LVLNUM_L2: u64 = 0x02;
const LVLNUM_L3: u64 = 0x03;
const LVLNUM_L4: u64 = 0x04;
const LVLNUM_CXL: u64 = 0x09;
const LVLNUM_ANY_CACHE: u64 = 0x0b;
const LVLNUM_LFB: u64 = 0x0c;
const LVLNUM_RAM: u64 = 0x0d;
const LVLNUM_PMEM: u64 = 0x0e;

/// Where a `data_src` says the access was served, coarsened to [`DataSource`]; `None` when
/// it does not say (`N/A`, I/O, uncached, or a miss without the level that hit).
///
/// `mem_lvl_num` + `mem_remote` (kernel ≥ 4.14) win over the older `mem_lvl` bits: L1, L2 and
/// the line fill buffer are the core's private caches; L3/L4/any cache are the local LLC, or a
/// remote cache when `mem_remote` is set or the snoop was a HITM with `remote`; RAM, PMEM and
/// CXL are DRAM, local or remote by `mem_remote`.
pub fn data_source(data_src: u64) -> Option<DataSource> {
    let lvl = (data_src >> MEM_LVL_SHIFT) & 0x3fff;
    let snoop = (data_src >> MEM_SNOOP_SHIFT) & 0x1f;
    let lvl_num = (data_src >> MEM_LVLNUM_SHIFT) & 0xf;
    let remote = (data_src >> MEM_REMOTE_SHIFT) & 1 == 1;
    let by_num = match lvl_num {
        LVLNUM_L1 | LVLNUM_L2 | LVLNUM_LFB => Some(DataSource::PrivateCache),
        LVLNUM_L3 | LVLNUM_L4 | LVLNUM_ANY_CACHE => Some(if remote {
            DataSource::RemoteCache
        } else {
            DataSource::LocalLlc
        }),
        LVLNUM_RAM | LVLNUM_PMEM | LVLNUM_CXL => Some(if remote {
            DataSource::RemoteDram
        } else {
            DataSource::LocalDram
        }),
        _ => None,
    };
    if by_num.is_some() {
        return by_num;
    }
    if lvl & MEM_LVL_HIT == 0 {
        return None;
    }
    if lvl & (MEM_LVL_REM_CCE1 | MEM_LVL_REM_CCE2) != 0 {
        Some(DataSource::RemoteCache)
    } else if lvl & (MEM_LVL_REM_RAM1 | MEM_LVL_REM_RAM2) != 0 {
        Some(DataSource::RemoteDram)
    } else if lvl & MEM_LVL_LOC_RAM != 0 {
        Some(DataSource::LocalDram)
    } else if lvl & MEM_LVL_L3 != 0 {
        Some(if snoop & MEM_SNOOP_HITM != 0 && remote {
            DataSource::RemoteCache
        } else {
            DataSource::LocalLlc
        })
    } else if lvl & (MEM_LVL_L1 | MEM_LVL_LFB | MEM_LVL_L2) != 0 {
        Some(DataSource::PrivateCache)
    } else {
        None
    }
}

/// Whether `data_src` says store (`Some(true)`), load (`Some(false)`) or neither.
pub fn data_src_is_write(data_src: u64) -> Option<bool> {
    let op = (data_src >> MEM_OP_SHIFT) & 0x1f;
    if op & MEM_OP_STORE != 0 {
        Some(true)
    } else if op & MEM_OP_LOAD != 0 {
        Some(false)
    } else {
        None
    }
}

fn page_size_of_bytes(bytes: u64) -> Option<PageSize> {
    match bytes {
        0x1000 => Some(PageSize::Base4K),
        0x20_0000 => Some(PageSize::Huge2M),
        0x4000_0000 => Some(PageSize::Giant1G),
        _ => PageSize::ALL.into_iter().find(|p| p.bytes() == bytes),
    }
}

/// Options of a [`PerfReader`].
#[derive(Clone, Debug, Default)]
pub struct PerfOptions {
    /// CPU → node; `None` uses the file's NUMA topology section, if any.
    pub topology: Option<Topology>,
    /// Page placement snapshots; without one, page nodes stay unknown.
    pub placement: Option<Placement>,
    /// Samples per batch (default 65 536).
    pub batch_rows: usize,
}

/// Streams a perf.data file as [`Batch`]es.
pub struct PerfReader {
    path: PathBuf,
    file: PerfFile,
    iter: PerfRecordIter<BufReader<HeaderPatched>>,
    /// The file is shorter than its header says: its length (the records read are counted
    /// as they come).
    cut_at: Option<u64>,
    rows_read: u64,
    /// The direct reader of the data section, where the file allows it (else `iter`).
    fast: Option<FastRecords>,
    layouts: Vec<SampleLayout>,
    meta: FileMeta,
    cpu_node: Vec<Option<NodeId>>,
    /// `cpu_node` with `Row::NO_NODE` for unknown (the row decoder's table).
    cpu_node16: Vec<u16>,
    /// data_src word → (source, write) codes of `Row` (see `source_of`).
    ds_cache: Box<[(u64, u8, u8); 64]>,
    /// numalab's exports write pid = task + offset, tid = thread + offset (`HEADER_VERSION`
    /// says so), because perf takes pid/tid 0 for the idle task; subtracted when reading.
    id_offset: u32,
    /// Physical memory blocks → node, from `HEADER_MEM_TOPOLOGY` (with `phys_addr` samples).
    mem_nodes: Option<MemNodes>,
    /// The file says its weights are latencies in ns (numalab's perf.data export).
    weight_is_latency: bool,
    /// Per event: it does not sample memory accesses ([`Known::NOT_ACCESS`]); None when
    /// every event does (then the direct reader need not find each sample's event).
    not_access: Option<Vec<bool>>,
    placement: Option<Placement>,
    batch_rows: usize,
    /// Samples whose record could not be decoded (reported, not fatal: one bad record should
    /// not hide a recording of millions).
    pub malformed_samples: u64,
    pub first_error: Option<String>,
}

impl PerfReader {
    pub fn open(path: impl AsRef<Path>, opts: PerfOptions) -> Result<PerfReader, Error> {
        let path = path.as_ref().to_path_buf();
        let open = || File::open(&path).map_err(|e| Error::new(&path, format!("cannot open: {e}")));
        let f = open()?;
        let file_len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if file_len == 0 {
            return Err(Error::new(
                &path,
                "the file is empty (0 bytes): perf record wrote nothing to it",
            ));
        }
        // shorter than perf's file header: nothing to read, and the parser would only say
        // that a read came up short
        if file_len < HEADER_BYTES as u64 {
            let magic = {
                let mut m = [0u8; 8];
                let mut f = open()?;
                f.read_exact(&mut m).ok().map(|_| m)
            };
            let what = if matches!(magic, Some(m) if &m == b"PERFILE2" || &m == b"2ELIFREP") {
                "a perf.data file cut short inside its header"
            } else {
                "not a perf.data file (no PERFILE2 magic)"
            };
            return Err(Error::new(
                &path,
                format!(
                    "{what}: {file_len} bytes, less than the {HEADER_BYTES}-byte perf.data header"
                ),
            ));
        }
        if let Some(why) = implausible_feature_section(&mut open()?, file_len) {
            return Err(Error::new(
                &path,
                format!("not a readable perf.data file: {why}"),
            ));
        }
        let (parsed, cut) = match PerfFileReader::parse_file(BufReader::new(HeaderPatched::plain(
            f,
        ))) {
            Ok(p) => (p, None),
            Err(e) => {
                // a file cut short: parse it with the header of what is left, else the error
                let mut header = [0u8; HEADER_BYTES];
                let mut file = open()?;
                let patch = file
                    .read_exact(&mut header)
                    .ok()
                    .and_then(|_| truncation_patch(&header, &mut file, file_len));
                let Some(patch) = patch else {
                    return Err(Error::new(
                        &path,
                        format!("not a readable perf.data file: {e}"),
                    ));
                };
                let patched = HeaderPatched {
                    file: open()?,
                    patch: Some(patch),
                    pos: 0,
                };
                let p = PerfFileReader::parse_file(BufReader::new(patched)).map_err(|e2| {
                    Error::new(
                        &path,
                        format!("not a readable perf.data file: {e} (and cut short at byte {file_len}: {e2})"),
                    )
                })?;
                let whole = u64::from_le_bytes(
                    patch[HEADER_DATA_SIZE..HEADER_DATA_SIZE + 8]
                        .try_into()
                        .expect("8 bytes"),
                );
                (p, Some((file_len, whole)))
            }
        };
        let PerfFileReader {
            perf_file,
            record_iter,
        } = parsed;
        let endian = perf_file.endian();
        let attrs = perf_file.event_attributes();
        let fast = FastRecords::open(&path, &perf_file, cut.map(|(_, whole)| whole))?;
        let layouts = attrs
            .iter()
            .map(|a| SampleLayout::from_attr(&a.attr, endian))
            .collect();
        let events: Vec<String> = attrs
            .iter()
            .enumerate()
            .map(|(i, a)| a.name().map_or_else(|| format!("event{i}"), str::to_string))
            .collect();
        let sample_period = attrs.first().map_or(0, |a| match a.attr.sampling_policy {
            SamplingPolicy::Period(p) => p.get(),
            _ => 0,
        });
        let topology = match opts.topology {
            Some(t) => Some(t),
            None => numa_topology_section(&perf_file)
                .map_err(|e| Error::new(&path, format!("NUMA topology section: {e}")))?,
        };
        let cpu_node = topology.as_ref().map(cpu_nodes).unwrap_or_default();
        let mem_nodes = mem_topology_section(&perf_file)
            .map_err(|e| Error::new(&path, format!("memory topology section: {e}")))?;
        // A build-id section that does not parse costs only the ids (perf itself reads on
        // with "Failed to read buildids, continuing..."); files read before it was read stay
        // readable.
        let build_ids = build_id_section(&perf_file).unwrap_or_default();
        let weight_is_latency = perf_file
            .perf_version()
            .ok()
            .flatten()
            .is_some_and(|v| v.starts_with(crate::perf_write::VERSION_LATENCY_NS));
        let id_offset = perf_file
            .perf_version()
            .ok()
            .flatten()
            .and_then(crate::perf_write::id_offset_of_version)
            .unwrap_or(0);
        let not_access: Vec<bool> = attrs.iter().map(|a| !samples_accesses(&a.attr)).collect();
        let not_access = not_access.contains(&true).then_some(not_access);
        let samples_without_cpu = attrs
            .iter()
            .any(|a| a.attr.sample_format.bits() & SAMPLE_CPU == 0);
        let cpu_node16 = cpu_node
            .iter()
            .map(|n| n.map_or(Row::NO_NODE, |n| n.0))
            .collect();
        let ds0 = (
            0,
            data_source(0).map_or(Row::UNKNOWN, Row::source_index),
            data_src_is_write(0).map_or(Row::UNKNOWN, u8::from),
        );
        let meta = FileMeta {
            machine: perf_file
                .hostname()
                .ok()
                .flatten()
                .unwrap_or("")
                .to_string(),
            workload: cmdline(&perf_file),
            origin: "perf".into(),
            sample_period,
            page_size: Some(PageSize::Base4K),
            nodes: topology.as_ref().map_or(0, |t| t.num_nodes() as u16),
            topology,
            events,
            mappings: Vec::new(),
            samples_dropped: 0,
            thread_names: Vec::new(),
            samples_without_cpu,
            build_ids,
        };
        Ok(PerfReader {
            path,
            file: perf_file,
            iter: record_iter,
            cut_at: cut.map(|(len, _)| len),
            rows_read: 0,
            fast,
            layouts,
            meta,
            cpu_node,
            cpu_node16,
            ds_cache: Box::new([ds0; 64]),
            id_offset,
            mem_nodes,
            weight_is_latency,
            not_access,
            placement: opts.placement,
            batch_rows: if opts.batch_rows == 0 {
                65_536
            } else {
                opts.batch_rows
            },
            malformed_samples: 0,
            first_error: None,
        })
    }

    /// Reads through linux-perf-data's record iterator instead of the direct reader (same
    /// records in the same order; for tests that compare the two). Call before reading.
    pub fn with_library_reader(mut self) -> Self {
        self.fast = None;
        self
    }

    /// Whether the direct data-section reader is in use (see [`PerfReader::with_library_reader`]).
    pub fn direct_reader(&self) -> bool {
        self.fast.is_some()
    }

    /// Decodes every sample of the file (for tests and small files).
    pub fn raw_samples(path: impl AsRef<Path>) -> Result<Vec<(usize, RawSample)>, Error> {
        let mut r = PerfReader::open(path, PerfOptions::default())?;
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            let rec = r
                .iter
                .next_record(&mut r.file)
                .map_err(|e| Error::new(&r.path, format!("corrupt record stream: {e}")))?;
            let Some(PerfFileRecord::EventRecord { attr_index, record }) = rec else {
                if rec.is_none() {
                    break;
                }
                continue;
            };
            if record.record_type != RecordType::SAMPLE {
                continue;
            }
            buf.clear();
            buf.extend_from_slice(&record.data.as_slice());
            let layout = r.layouts.get(attr_index).copied().unwrap_or_default();
            let s = decode_sample(&buf, &layout).map_err(|e| Error::new(&r.path, e))?;
            out.push((attr_index, s));
        }
        Ok(out)
    }

    fn to_record(&self, event: usize, s: &RawSample) -> Record {
        // (u32)-1: a sample without a CPU in a file whose samples have one (numalab's export)
        let known_cpu = s.cpu.filter(|&c| c != u32::MAX);
        let cpu = known_cpu.unwrap_or(0);
        let cpu_node = self.cpu_node.get(cpu as usize).copied().flatten();
        let source = s.data_src.and_then(data_source);
        let write = s.data_src.and_then(data_src_is_write);
        let page_size = s.data_page_size.and_then(page_size_of_bytes);
        let mut known = Known::NONE;
        if known_cpu.is_some() {
            known = known.with(Known::CPU);
            if cpu_node.is_some() {
                known = known.with(Known::CPU_NODE);
            }
        }
        if self.is_not_access(event) {
            known = known.with(Known::NOT_ACCESS);
        }
        if source.is_some() {
            known = known.with(Known::SOURCE);
        }
        if write.is_some() {
            known = known.with(Known::WRITE);
        }
        if page_size.is_some() {
            known = known.with(Known::PAGE_SIZE);
        }
        let page_node = match (&self.mem_nodes, s.phys_addr) {
            (Some(m), Some(p)) if p != 0 => m.node_of(p),
            _ => None,
        };
        if page_node.is_some() {
            known = known.with(Known::PAGE_NODE);
        }
        let latency = match s.weight {
            Some(w) if self.weight_is_latency => {
                known = known.with(Known::LATENCY);
                w as f32
            }
            _ => 0.0,
        };
        let mut r = Record {
            sample: AccessSample {
                time_ns: s.time.unwrap_or(0),
                task: TaskId(
                    s.pid
                        .map_or(u32::MAX, |p| (p as u32).wrapping_sub(self.id_offset)),
                ),
                thread: ThreadId(
                    s.tid
                        .map_or(u32::MAX, |t| (t as u32).wrapping_sub(self.id_offset)),
                ),
                cpu: CpuId(cpu),
                cpu_node: cpu_node.unwrap_or(NodeId(0)),
                addr: s.addr.unwrap_or(0),
                page_node: page_node.unwrap_or(NodeId(0)),
                page_size: page_size.unwrap_or(PageSize::Base4K),
                source: source.unwrap_or(DataSource::LocalDram),
                latency_ns: latency,
                write: write.unwrap_or(false),
            },
            known,
            event: event as u16,
            ip: s.ip,
            phys_addr: s.phys_addr,
            weight: s.weight,
            data_src: s.data_src,
            period: s.period,
        };
        if let Some(p) = &self.placement {
            p.annotate(&mut r);
        }
        r
    }
}

impl PerfReader {
    fn next_batch_fast(&mut self) -> Result<Option<Batch>, Error> {
        let mut fast = self.fast.take().expect("fast reader");
        let r = self.fill_fast(&mut fast);
        self.fast = Some(fast);
        r
    }

    fn fill_fast(&mut self, f: &mut FastRecords) -> Result<Option<Batch>, Error> {
        let mut batch = Batch {
            records: Vec::with_capacity(self.batch_rows),
            mappings: Vec::new(),
            thread_names: Vec::new(),
        };
        let mut any = false;
        let mut q = std::mem::take(&mut f.records);
        let r = (|| {
            while batch.records.len() < self.batch_rows {
                if q.ready == 0 && !f.read_round(&mut q, self)? {
                    break;
                }
                let Some((_, item)) = q.incoming.pop_front() else {
                    break;
                };
                q.ready -= 1;
                any = true;
                match item {
                    Item::Sample(r) => batch.records.push(r),
                    Item::Map(m) => batch.mappings.push(m),
                    Item::Comm(c) => batch.thread_names.push(c),
                }
            }
            Ok(())
        })();
        f.records = q;
        r.map(|()| any.then_some(batch))
    }

    fn fill_rows(
        &mut self,
        f: &mut FastRecords,
        rows: &mut Vec<Row>,
        mappings: &mut Vec<Mapping>,
    ) -> Result<bool, Error> {
        let mut q = std::mem::take(&mut f.rows);
        rows.reserve(self.batch_rows);
        let r = (|| {
            let (start, mut any) = (rows.len(), false);
            while rows.len() - start < self.batch_rows {
                if q.ready == 0 && !f.read_round(&mut q, self)? {
                    break;
                }
                let take = q.ready.min(self.batch_rows - (rows.len() - start));
                q.ready -= take;
                any |= take > 0;
                for QRow { row, .. } in q.incoming.drain(..take) {
                    if row.pad & QRow::MAP == 0 {
                        rows.push(Row { pad: 0, ..row });
                    } else if let Some(m) = f.row_maps.get_mut(row.task as usize) {
                        mappings.extend(m.take());
                    }
                }
                if q.incoming.is_empty() {
                    f.row_maps.clear();
                }
            }
            Ok(any)
        })();
        f.rows = q;
        r
    }

    /// A sample straight into a [`Row`] (the same values as `Row::from_record(to_record(..))`)
    /// from a fixed layout with an address; `None` when the record is too short.
    #[inline]
    fn row_fast(&mut self, fl: &FixedLayout, b: &[u8], attr: usize) -> Option<Row> {
        let b = b.get(..fl.size)?;
        let u = |at: Option<usize>| {
            at.map(|a| u64::from_le_bytes(b[a..a + 8].try_into().expect("8 bytes")))
        };
        let addr = u(fl.addr)?;
        let time_ns = u(fl.time).unwrap_or(0);
        let off = self.id_offset;
        let (task, thread) = match u(fl.tid) {
            Some(v) => (
                (v as u32).wrapping_sub(off),
                ((v >> 32) as u32).wrapping_sub(off),
            ),
            None => (u32::MAX, u32::MAX),
        };
        let cpu_node = match u(fl.cpu) {
            Some(c) => self
                .cpu_node16
                .get(c as u32 as usize)
                .copied()
                .unwrap_or(Row::NO_NODE),
            None => Row::NO_NODE,
        };
        let (source, write) = match u(fl.data_src) {
            _ if self.is_not_access(attr) => (Row::NOT_ACCESS, Row::UNKNOWN),
            Some(ds) => self.source_of(ds),
            None => (Row::UNKNOWN, Row::UNKNOWN),
        };
        let mut page_node = match (&self.mem_nodes, u(fl.phys_addr)) {
            (Some(m), Some(p)) if p != 0 => m.node_of(p).map_or(Row::NO_NODE, |n| n.0),
            _ => Row::NO_NODE,
        };
        let mut page_shift = match u(fl.data_page_size) {
            Some(0x1000) => 12,
            Some(0x20_0000) => 21,
            Some(bytes) => page_size_of_bytes(bytes).map_or(0, |p| p.shift() as u8),
            None => 0,
        };
        if let Some(p) = &self.placement {
            if let Some((n, size)) = p.lookup(TaskId(task), addr, time_ns) {
                page_node = n.0;
                page_shift = size.shift() as u8;
            }
        }
        Some(Row {
            time_ns,
            addr,
            task,
            thread,
            cpu_node,
            page_node,
            page_shift,
            source,
            write,
            pad: 0,
        })
    }

    /// `data_source` and `data_src_is_write` as `Row` codes, through a small cache: a file
    /// has few distinct data_src words, and decoding one is a chain of branches.
    #[inline]
    fn source_of(&mut self, ds: u64) -> (u8, u8) {
        let slot = (ds.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize;
        let e = &mut self.ds_cache[slot];
        if e.0 != ds {
            *e = (
                ds,
                data_source(ds).map_or(Row::UNKNOWN, Row::source_index),
                data_src_is_write(ds).map_or(Row::UNKNOWN, u8::from),
            );
        }
        (e.1, e.2)
    }

    /// A mapping's pid back in numalab's task numbering.
    fn map_task(&self, mut m: Mapping) -> Mapping {
        m.task = m.task.wrapping_sub(self.id_offset);
        m
    }

    /// Whether event `event` does not sample memory accesses.
    #[inline]
    fn is_not_access(&self, event: usize) -> bool {
        self.not_access
            .as_ref()
            .is_some_and(|v| v.get(event).copied().unwrap_or(false))
    }

    /// A thread name's pid and tid back in numalab's numbering.
    fn map_thread(&self, mut t: ThreadName) -> ThreadName {
        t.task = t.task.wrapping_sub(self.id_offset);
        t.thread = t.thread.wrapping_sub(self.id_offset);
        t
    }
}

/// Records read and not handed out yet, in key order up to `ready` (those released).
struct Queue<T> {
    incoming: VecDeque<T>,
    ready: usize,
    /// Some record came in with a key below the one before it: sort before releasing.
    unsorted: bool,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Queue {
            incoming: VecDeque::new(),
            ready: 0,
            unsorted: false,
        }
    }
}

impl<T: Queued> Queue<T> {
    /// Releases the records with a key up to `upto` (all: `None`), in key order; whether any
    /// were released. Sorts only when the records came out of order.
    fn release(&mut self, upto: Option<Key>) -> bool {
        if self.unsorted {
            self.incoming
                .make_contiguous()
                .sort_unstable_by_key(|k| k.key());
            self.unsorted = false;
        }
        let n = match upto {
            None => self.incoming.len(),
            Some(m) => self.incoming.partition_point(|k| k.key() <= m),
        };
        self.ready = n;
        n > 0
    }
}

/// What the direct reader queues for a sample or a mapping: `Record`s for `next_batch`,
/// `Row`s for `next_rows`.
trait Queued: Sized {
    fn sample(r: &mut PerfReader, f: &FastRecords, body: &[u8], key: Key) -> Option<Self>;
    fn map(m: Mapping, key: Key, row_maps: &mut Vec<Option<Mapping>>) -> Self;
    /// A thread name, where the queue keeps them (the analysis' rows do not).
    fn comm(c: ThreadName, key: Key) -> Option<Self>;
    fn key(&self) -> Key;
}

impl Queued for (Key, Item) {
    fn sample(r: &mut PerfReader, f: &FastRecords, body: &[u8], key: Key) -> Option<Self> {
        let fixed = f.fixed.and_then(|fl| fl.decode(body));
        match fixed.map_or_else(|| decode_sample(body, &f.layout), Ok) {
            Ok(s) if s.addr.is_some() => {
                let attr = f.attr_of_id(s.id);
                Some((key, Item::Sample(r.to_record(attr, &s))))
            }
            // A sample without a data address says nothing about memory placement.
            Ok(_) => None,
            Err(e) => {
                r.malformed_samples += 1;
                r.first_error.get_or_insert(e);
                None
            }
        }
    }
    fn map(m: Mapping, key: Key, _: &mut Vec<Option<Mapping>>) -> Self {
        (key, Item::Map(m))
    }
    fn comm(c: ThreadName, key: Key) -> Option<Self> {
        Some((key, Item::Comm(c)))
    }
    #[inline]
    fn key(&self) -> Key {
        self.0
    }
}

/// A queued row (40 bytes: the queue holds a whole round, and its traffic counts): the key's
/// time is the row's (`HAS_TIME` in `pad`), a mapping is a row marked `MAP` whose `task`
/// indexes `FastRecords::row_maps`.
#[derive(Copy, Clone)]
struct QRow {
    offset: u64,
    row: Row,
}

impl QRow {
    const HAS_TIME: u8 = 1;
    const MAP: u8 = 2;
}

impl Queued for QRow {
    #[inline]
    fn sample(r: &mut PerfReader, f: &FastRecords, body: &[u8], key: Key) -> Option<Self> {
        // which event a sample belongs to matters only where some event is not an access
        let attr = if r.not_access.is_some() {
            f.attr_of(body)
        } else {
            0
        };
        let row = match f
            .row_layout
            .as_ref()
            .and_then(|fl| r.row_fast(fl, body, attr))
        {
            Some(row) => row,
            None => match <(Key, Item)>::sample(r, f, body, key)?.1 {
                Item::Sample(rec) => Row::from_record(&rec),
                Item::Map(_) | Item::Comm(_) => return None,
            },
        };
        // A sample's key time is its TIME field, as the row's (0 when absent, then no key time).
        debug_assert!(key.0.is_none_or(|t| t == row.time_ns));
        Some(QRow {
            offset: key.1,
            row: Row {
                pad: if key.0.is_some() { QRow::HAS_TIME } else { 0 },
                ..row
            },
        })
    }
    fn comm(_: ThreadName, _: Key) -> Option<Self> {
        None
    }
    fn map(m: Mapping, key: Key, row_maps: &mut Vec<Option<Mapping>>) -> Self {
        row_maps.push(Some(m));
        QRow {
            offset: key.1,
            row: Row {
                time_ns: key.0.unwrap_or(0),
                task: (row_maps.len() - 1) as u32,
                pad: QRow::MAP | if key.0.is_some() { QRow::HAS_TIME } else { 0 },
                ..Row::default()
            },
        }
    }
    #[inline]
    fn key(&self) -> Key {
        let t = (self.row.pad & QRow::HAS_TIME != 0).then_some(self.row.time_ns);
        (t, self.offset)
    }
}

/// Offset of the data section's (offset, size) in perf_file_header.
const HEADER_DATA_OFFSET: u64 = 40;
/// perf_file_header: magic, size, attr_size, attrs, data and event_types sections, then the
/// 256-bit feature bitmap (`adds_features`) at 72..104.
const HEADER_BYTES: usize = 104;
const HEADER_DATA_SIZE: usize = HEADER_DATA_OFFSET as usize + 8;
const HEADER_FEATURES_OFFSET: usize = 72;

/// The perf.data file as the parser reads it: the file itself, or, for a file cut short, the
/// file with its header patched (the feature bitmap cleared, since the feature sections
/// follow the data and are what a cut loses first, and the data size clamped to what is
/// there). linux-perf-data reads every feature section before any record and has no way to
/// skip them; this lets it read the records a cut file still holds, as `perf script` does.
struct HeaderPatched {
    file: File,
    patch: Option<[u8; HEADER_BYTES]>,
    pos: u64,
}

impl HeaderPatched {
    fn plain(file: File) -> HeaderPatched {
        HeaderPatched {
            file,
            patch: None,
            pos: 0,
        }
    }
}

impl Read for HeaderPatched {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let (Some(h), true) = (&self.patch, self.pos < HEADER_BYTES as u64) {
            let from = self.pos as usize;
            let n = buf.len().min(HEADER_BYTES - from);
            buf[..n].copy_from_slice(&h[from..from + n]);
            self.pos += n as u64;
            self.file.seek(SeekFrom::Start(self.pos))?;
            return Ok(n);
        }
        let n = self.file.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for HeaderPatched {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = self.file.seek(to)?;
        Ok(self.pos)
    }
}

/// The recorded command line (`HEADER_CMDLINE`), empty when absent or malformed.
/// linux-perf-data reserves room for as many strings as the section's count says before
/// reading them (a count of a billion in a few bytes asked for 32 GB: found by
/// fuzz/perf_data), so the count is checked against the section's size first: every string
/// takes at least its 4-byte length.
fn cmdline(perf_file: &PerfFile) -> String {
    let Some(data) = perf_file.feature_section_data(Feature::CMDLINE) else {
        return String::new();
    };
    let mut c = Cursor {
        data,
        at: 0,
        big: perf_file.endian() == Endianness::BigEndian,
    };
    let Ok(count) = c.u32("string count") else {
        return String::new();
    };
    if count as usize > (data.len() - 4) / 4 {
        return String::new();
    }
    perf_file
        .cmdline()
        .ok()
        .flatten()
        .map(|v| v.join(" "))
        .unwrap_or_default()
}

/// Feature sections past this many bytes beyond the file's end are corruption, not a cut
/// (after the data, feature sections are kilobytes).
const FEATURES_MAX: u64 = 64 << 20;

/// Why the file's feature-section table is corrupt, if it is: an entry ending far beyond
/// the file. linux-perf-data allocates every feature section's claimed size before reading
/// it (a 10 TB claim aborted the process: found by fuzz/perf_data), so such a file is
/// refused first. A table that is not there (a cut file) is left to the truncation path.
fn implausible_feature_section(file: &mut File, file_len: u64) -> Option<String> {
    let mut header = [0u8; HEADER_BYTES];
    file.read_exact(&mut header).ok()?;
    let big = match &header[..8] {
        b"PERFILE2" => false,
        b"2ELIFREP" => true,
        _ => return None,
    };
    let word = |b: &[u8], at: usize| {
        let w: [u8; 8] = b[at..at + 8].try_into().expect("8 bytes");
        if big {
            u64::from_be_bytes(w)
        } else {
            u64::from_le_bytes(w)
        }
    };
    let data_offset = word(&header, HEADER_DATA_OFFSET as usize);
    let data_size = word(&header, HEADER_DATA_SIZE);
    // A data section running past the end is a cut recording, read to its last record (the
    // truncation path); one starting past the end, or whose end overflows, is corruption (the
    // parser said only "failed to fill whole buffer", or "Invalid argument" from a seek
    // beyond 2^63).
    let Some(data_end) = data_offset.checked_add(data_size) else {
        return Some(format!(
            "its header's data section (data.offset {data_offset} + data.size {data_size} bytes) overflows a 64-bit file offset"
        ));
    };
    if data_offset > file_len {
        return Some(format!(
            "its header's data section starts at data.offset {data_offset}, beyond the file's end ({file_len} bytes)"
        ));
    }
    if let Some(why) = attr_sections_overrun(file, &header, file_len, &word) {
        return Some(why);
    }
    let features: u32 = header[HEADER_FEATURES_OFFSET..]
        .iter()
        .map(|b| b.count_ones())
        .sum();
    let mut table = vec![0u8; features as usize * 16];
    file.seek(SeekFrom::Start(data_end)).ok()?;
    file.read_exact(&mut table).ok()?;
    let limit = file_len.saturating_add(FEATURES_MAX);
    let far = table.chunks_exact(16).enumerate().find_map(|(i, e)| {
        let (at, len) = (word(e, 0), word(e, 8));
        (len > limit || at.saturating_add(len) > limit).then(|| {
            format!(
                "feature section {i} claims {len} bytes at offset {at}, far beyond the file's end ({file_len} bytes)"
            )
        })
    });
    if far.is_some() {
        return far;
    }
    // HEADER_EVENT_DESC (feature bit 12): its entry is the one after those of the lower bits
    const EVENT_DESC: usize = 12;
    let bit = |i: usize| header[HEADER_FEATURES_OFFSET + i / 8] >> (i % 8) & 1 == 1;
    if !bit(EVENT_DESC) {
        return None;
    }
    let k = (0..EVENT_DESC).filter(|&i| bit(i)).count();
    let e = &table[k * 16..k * 16 + 16];
    let (at, len) = (word(e, 0), word(e, 8));
    if at.saturating_add(len) > file_len {
        return None; // cut: the truncation path drops the feature sections
    }
    let mut section = vec![0u8; len as usize];
    file.seek(SeekFrom::Start(at)).ok()?;
    file.read_exact(&mut section).ok()?;
    event_desc_overrun(&section, big)
        .map(|why| format!("its event descriptions (HEADER_EVENT_DESC) {why}"))
}

/// Why the event attribute sections (`attrs`, the legacy `event_types`) do not fit the file,
/// if they do not: each entry holds an attribute and the (offset, size) of its event ids, and
/// linux-perf-data reserves room for every id a size claims before reading (2^43 bytes of
/// ids: found by fuzz/perf_data).
fn attr_sections_overrun(
    file: &mut File,
    header: &[u8; HEADER_BYTES],
    file_len: u64,
    word: &dyn Fn(&[u8], usize) -> u64,
) -> Option<String> {
    // perf_event_attr is 64 bytes in its first version and a few hundred today
    let attr_size = word(header, 16);
    if !(64..=4096).contains(&attr_size) {
        return Some(format!(
            "its attribute size ({attr_size} bytes) is not a perf_event_attr's"
        ));
    }
    for (name, at) in [("attrs", 24), ("event_types", 56)] {
        let (offset, size) = (word(header, at), word(header, at + 8));
        if offset.checked_add(size).is_none_or(|end| end > file_len) {
            return Some(format!(
                "its {name} section ({size} bytes at offset {offset}) lies beyond the file's end ({file_len} bytes)"
            ));
        }
        let mut section = vec![0u8; size as usize];
        file.seek(SeekFrom::Start(offset)).ok()?;
        file.read_exact(&mut section).ok()?;
        // an attrs entry is attr_size bytes ending with its ids' section (perf_file_attr); an
        // event_types entry is the attribute, then that section
        let entry = attr_size as usize + if name == "attrs" { 0 } else { 16 };
        for (i, entry) in section.chunks_exact(entry).enumerate() {
            let ids = &entry[entry.len() - 16..];
            let (ids_at, ids_len) = (word(ids, 0), word(ids, 8));
            if ids_at.checked_add(ids_len).is_none_or(|end| end > file_len) {
                return Some(format!(
                    "its {name} entry {i} claims {ids_len} bytes of event ids at offset {ids_at}, beyond the file's end ({file_len} bytes)"
                ));
            }
        }
    }
    None
}

/// Why a `HEADER_EVENT_DESC` section does not hold what its counts say, if it does not:
/// linux-perf-data reserves room for every count before reading (a count of 14 GB worth of
/// events: found by fuzz/perf_data). Layout: nr, attr_size (u32 each), then per event the
/// attr, nr_ids (u32), a string (u32 length, bytes), nr_ids u64 ids.
fn event_desc_overrun(d: &[u8], big: bool) -> Option<String> {
    let mut c = Cursor {
        data: d,
        at: 0,
        big,
    };
    let (Ok(nr), Ok(attr_size)) = (c.u32("nr"), c.u32("attr_size")) else {
        return Some(format!("end inside their own {} bytes", d.len()));
    };
    let event = |c: &mut Cursor| -> Result<(), String> {
        c.take(attr_size as usize, "attr")?;
        let nr_ids = c.u32("nr_ids")?;
        let name_len = c.u32("event string length")?;
        c.take(name_len as usize, "event string")?;
        c.skip_u64s(u64::from(nr_ids), "ids")
    };
    (0..nr).find_map(|i| {
        event(&mut c).err().map(|_| {
            format!(
                "claim more than their {} bytes hold (event {i} of {nr})",
                d.len()
            )
        })
    })
}

/// A perf.data header patched for `file` of `file_len` bytes when the file is shorter than
/// its header says: its data section, or the feature sections that follow the data (their
/// table of offsets and sizes sits right after the data). None when nothing is cut (the
/// failure was something else) or the file is not a little-endian perf.data file.
fn truncation_patch(
    header: &[u8; HEADER_BYTES],
    file: &mut File,
    file_len: u64,
) -> Option<[u8; HEADER_BYTES]> {
    if &header[..8] != b"PERFILE2" {
        return None;
    }
    let le = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let (data_offset, data_size) = (
        le(header, HEADER_DATA_OFFSET as usize),
        le(header, HEADER_DATA_SIZE),
    );
    if data_offset > file_len {
        return None;
    }
    let data_end = data_offset.checked_add(data_size)?;
    let features: u32 = header[HEADER_FEATURES_OFFSET..]
        .iter()
        .map(|b| b.count_ones())
        .sum();
    let cut = data_end > file_len || {
        // the feature table: one (offset, size) pair per feature, right after the data
        let mut table = vec![0u8; features as usize * 16];
        let read = file
            .seek(SeekFrom::Start(data_end))
            .and_then(|_| file.read_exact(&mut table));
        // a cut leaves plausible entries (after the data, feature sections are kilobytes)
        // that end past the file; an entry pointing far beyond it is corruption instead
        let plausible = table.chunks_exact(16).all(|e| {
            let (at, len) = (le(e, 0), le(e, 8));
            at >= data_end && at.saturating_add(len) <= file_len.saturating_add(FEATURES_MAX)
        });
        read.is_err()
            || (plausible
                && table
                    .chunks_exact(16)
                    .any(|e| le(e, 0).saturating_add(le(e, 8)) > file_len))
    };
    if !cut {
        return None;
    }
    let mut h = *header;
    let whole = whole_records(file, data_offset, data_size.min(file_len - data_offset));
    h[HEADER_DATA_SIZE..HEADER_DATA_SIZE + 8].copy_from_slice(&whole.to_le_bytes());
    h[HEADER_FEATURES_OFFSET..].fill(0);
    Some(h)
}

/// Bytes of complete records from `data_offset` within `avail` bytes: the data section of a
/// cut file ends at its last whole record, so that both readers (which buffer records until
/// a round ends) see a clean end rather than an error.
fn whole_records(file: &mut File, data_offset: u64, avail: u64) -> u64 {
    let Ok(_) = file.seek(SeekFrom::Start(data_offset)) else {
        return 0;
    };
    let mut rd = BufReader::with_capacity(1 << 20, file);
    let mut at = 0u64;
    let mut head = [0u8; 8];
    while at + 8 <= avail && rd.read_exact(&mut head).is_ok() {
        let size = u16::from_le_bytes([head[6], head[7]]) as u64;
        if size < 8 || at + size > avail || rd.seek_relative(size as i64 - 8).is_err() {
            break;
        }
        at += size;
    }
    at
}

enum Item {
    Sample(Record),
    Map(Mapping),
    Comm(ThreadName),
}

/// Sort key of a record, as linux-perf-data orders them: time (none first), then offset.
type Key = (Option<u64>, u64);

/// Reads the data section directly, in the same order as linux-perf-data's `PerfRecordIter`
/// (records sorted by time within the window that `FINISHED_ROUND` records allow), decoding
/// samples and mappings as they are read. Why: the library copies every record into a buffer
/// of its own and sorts the buffers; on 10 M samples that was half of `numalab analyze`'s
/// time. Used for little-endian files whose events all share one sample layout (one event,
/// or several told apart by ID/IDENTIFIER) without compression or AUX data; others take the
/// library.
struct FastRecords {
    rd: BufReader<File>,
    path: PathBuf,
    /// Bytes of the data section left, and the file offset of the next record.
    left: u64,
    offset: u64,
    layout: SampleLayout,
    fixed: Option<FixedLayout>,
    id_to_attr: Option<HashMap<u64, usize>>,
    /// Offset of the time from the end of non-sample records (sample_id_all), bytes.
    nonsample_time_from_end: Option<usize>,
    sample_time_from_start: Option<usize>,
    /// The fixed layout when samples carry an address (then decoded straight into rows).
    row_layout: Option<FixedLayout>,
    records: Queue<(Key, Item)>,
    rows: Queue<QRow>,
    /// Mappings of queued rows (`QRow::MAP` rows hold their index).
    row_maps: Vec<Option<Mapping>>,
    prev_max: Key,
    cur_max: Key,
    body: Vec<u8>,
}

impl FastRecords {
    /// `data_size`: the data section's size when the file was cut short (whole records only,
    /// from the patched header), else the header's.
    fn open(
        path: &Path,
        f: &PerfFile,
        data_size: Option<u64>,
    ) -> Result<Option<FastRecords>, Error> {
        let attrs = f.event_attributes();
        let Some(first) = attrs.first() else {
            return Ok(None);
        };
        let a0 = &first.attr;
        let same = attrs.iter().all(|a| {
            a.attr.sample_format == a0.sample_format
                && a.attr.read_format == a0.read_format
                && a.attr.branch_sample_format == a0.branch_sample_format
                && a.attr.sample_regs_user == a0.sample_regs_user
                && a.attr.sample_regs_intr == a0.sample_regs_intr
                && a.attr.flags.bits() & (1 << 18) == a0.flags.bits() & (1 << 18)
        });
        let t = a0.sample_format.bits();
        let feats = f.features();
        if f.endian() != Endianness::LittleEndian
            || !same
            || (attrs.len() > 1 && t & (SAMPLE_IDENTIFIER | SAMPLE_ID) == 0)
            || feats.has_feature(Feature::COMPRESSED)
            || feats.has_feature(Feature::AUXTRACE)
        {
            return Ok(None);
        }
        let io = |e: std::io::Error| Error::new(path, format!("cannot read: {e}"));
        let mut file = File::open(path).map_err(io)?;
        let mut h = [0u8; 16];
        file.seek(SeekFrom::Start(HEADER_DATA_OFFSET))
            .and_then(|_| file.read_exact(&mut h))
            .map_err(io)?;
        let data_offset = u64::from_le_bytes(h[..8].try_into().expect("8"));
        let data_size =
            data_size.unwrap_or_else(|| u64::from_le_bytes(h[8..].try_into().expect("8")));
        file.seek(SeekFrom::Start(data_offset)).map_err(io)?;
        let sample_id_all = a0.flags.bits() & (1 << 18) != 0;
        let nonsample_time_from_end = (sample_id_all && t & SAMPLE_TIME != 0).then(|| {
            (t & (SAMPLE_TIME | SAMPLE_ID | SAMPLE_STREAM_ID | SAMPLE_CPU | SAMPLE_IDENTIFIER))
                .count_ones() as usize
                * 8
        });
        let sample_time_from_start = (t & SAMPLE_TIME != 0)
            .then(|| (t & (SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID)).count_ones() as usize * 8);
        let id_to_attr = (attrs.len() > 1).then(|| {
            let mut m = HashMap::new();
            for (i, a) in attrs.iter().enumerate() {
                for id in &a.event_ids {
                    m.insert(*id, i);
                }
            }
            m
        });
        Ok(Some(FastRecords {
            rd: BufReader::with_capacity(1 << 20, file),
            path: path.to_path_buf(),
            left: data_size,
            offset: data_offset,
            layout: SampleLayout::from_attr(a0, Endianness::LittleEndian),
            fixed: FixedLayout::of(&SampleLayout::from_attr(a0, Endianness::LittleEndian)),
            id_to_attr,
            nonsample_time_from_end,
            sample_time_from_start,
            row_layout: FixedLayout::of(&SampleLayout::from_attr(a0, Endianness::LittleEndian))
                .filter(|f| f.addr.is_some()),
            records: Queue::default(),
            rows: Queue::default(),
            row_maps: Vec::new(),
            prev_max: (None, 0),
            cur_max: (None, 0),
            body: Vec::new(),
        }))
    }

    /// The event (index in the file's attributes) of a sample with sample id `id`.
    fn attr_of_id(&self, id: Option<u64>) -> usize {
        match (&self.id_to_attr, id) {
            (Some(m), Some(id)) => m.get(&id).copied().unwrap_or(0),
            _ => 0,
        }
    }

    /// The event of a sample's body, read from its fixed layout (0 with one event).
    fn attr_of(&self, body: &[u8]) -> usize {
        if self.id_to_attr.is_none() {
            return 0;
        }
        let id = self
            .fixed
            .as_ref()
            .and_then(|fl| fl.id.or(fl.identifier))
            .and_then(|at| Self::le64(body, at));
        self.attr_of_id(id)
    }

    fn le64(b: &[u8], at: usize) -> Option<u64> {
        b.get(at..at + 8)
            .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
    }

    /// Reads records up to the next FINISHED_ROUND that releases some, or to the end; false
    /// when nothing is left.
    fn read_round<T: Queued>(
        &mut self,
        q: &mut Queue<T>,
        r: &mut PerfReader,
    ) -> Result<bool, Error> {
        loop {
            if self.left < 8 {
                // The end: everything in order.
                return Ok(q.release(None));
            }
            let (ty, misc, size) = {
                let buf = self
                    .rd
                    .fill_buf()
                    .map_err(|e| Error::new(&self.path, format!("cannot read: {e}")))?;
                if buf.len() >= 8 {
                    let ty = u32::from_le_bytes(buf[0..4].try_into().expect("4"));
                    let misc = u16::from_le_bytes(buf[4..6].try_into().expect("2"));
                    let size = u16::from_le_bytes(buf[6..8].try_into().expect("2"));
                    self.rd.consume(8);
                    (ty, misc, size)
                } else {
                    let mut h = [0u8; 8];
                    self.rd.read_exact(&mut h).map_err(|e| {
                        Error::new(&self.path, format!("corrupt record stream: {e}"))
                    })?;
                    (
                        u32::from_le_bytes(h[0..4].try_into().expect("4")),
                        u16::from_le_bytes(h[4..6].try_into().expect("2")),
                        u16::from_le_bytes(h[6..8].try_into().expect("2")),
                    )
                }
            };
            let offset = self.offset;
            let size = size as u64;
            if size < 8 || size > self.left {
                return Err(Error::new(
                    &self.path,
                    format!("corrupt record stream: record of {size} bytes at offset {offset}"),
                ));
            }
            self.offset += size;
            self.left -= size;
            let n = size as usize - 8;
            if ty == 68 {
                // FINISHED_ROUND: release what the next round cannot precede.
                if q.release(Some(self.prev_max)) {
                    self.prev_max = self.cur_max;
                    return Ok(true);
                }
                self.prev_max = self.cur_max;
                continue;
            }
            // The body, in place when the buffer holds it.
            let in_buf = self.rd.buffer().len() >= n;
            if !in_buf {
                self.body.resize(n, 0);
                self.rd
                    .read_exact(&mut self.body)
                    .map_err(|e| Error::new(&self.path, format!("corrupt record stream: {e}")))?;
            }
            let body: &[u8] = if in_buf {
                &self.rd.buffer()[..n]
            } else {
                &self.body
            };
            let key_time = if ty >= 64 {
                None
            } else if ty == RECORD_SAMPLE {
                self.sample_time_from_start
                    .and_then(|at| Self::le64(body, at))
            } else {
                self.nonsample_time_from_end
                    .and_then(|e| n.checked_sub(e))
                    .and_then(|at| Self::le64(body, at))
            };
            let key = (key_time, offset);
            let item = if ty == RECORD_SAMPLE {
                T::sample(r, self, body, key)
            } else if ty == RECORD_MMAP || ty == RECORD_MMAP2 {
                parse_mmap(ty, misc, body).map(|m| T::map(r.map_task(m), key, &mut self.row_maps))
            } else if ty == RECORD_COMM {
                parse_comm(body).and_then(|c| T::comm(r.map_thread(c), key))
            } else {
                None
            };
            if in_buf {
                self.rd.consume(n);
            }
            if key > self.cur_max {
                self.cur_max = key;
            }
            if let Some(item) = item {
                if q.incoming.back().is_some_and(|k| k.key() > key) {
                    q.unsorted = true;
                }
                q.incoming.push_back(item);
            }
        }
    }
}

const RECORD_MMAP: u32 = 1;
const RECORD_COMM: u32 = 3;
const RECORD_SAMPLE: u32 = 9;
const RECORD_MMAP2: u32 = 10;
const MISC_MMAP_DATA: u16 = 1 << 13;

/// A MMAP or MMAP2 record's mapping (linux-perf-event-reader's reading: the name runs to its
/// NUL, or to the end of the record).
fn parse_mmap(ty: u32, misc: u16, b: &[u8]) -> Option<Mapping> {
    let u32at = |at: usize| {
        b.get(at..at + 4)
            .map(|s| u32::from_le_bytes(s.try_into().expect("4")))
    };
    let pid = u32at(0)?;
    let start = FastRecords::le64(b, 8)?;
    let len = FastRecords::le64(b, 16)?;
    let pgoff = FastRecords::le64(b, 24)?;
    let (exec, name_at) = if ty == RECORD_MMAP {
        (misc & MISC_MMAP_DATA == 0, 32)
    } else {
        // pgoff, then maj/min/ino/ino_generation or (MISC_MMAP_BUILD_ID) the build id, 24
        // bytes either way, then prot and flags.
        (u32at(56)? & 4 != 0, 64)
    };
    let rest = b.get(name_at..)?;
    let name = match rest.iter().position(|c| *c == 0) {
        Some(e) => &rest[..e],
        None => rest,
    };
    let name = String::from_utf8_lossy(name).into_owned();
    Some(Mapping {
        task: pid,
        start,
        len_bytes: len,
        kind: MappingKind::classify(&name, exec),
        name,
        pgoff,
    })
}

/// Whether an event samples memory accesses: hardware, raw and cache events do (with
/// `perf mem record` or `-d` their address is the access's); software events (`page-faults`,
/// `minor-faults`, `major-faults`, ...) and tracepoints do not: their address is where a
/// fault or event happened, not a load or store served from a cache or DRAM.
fn samples_accesses(a: &PerfEventAttr) -> bool {
    !matches!(
        a.type_,
        PerfEventType::Software(_) | PerfEventType::Tracepoint(_)
    )
}

/// A COMM record's thread name: `u32 pid, u32 tid, char comm[]` (NUL-terminated).
fn parse_comm(b: &[u8]) -> Option<ThreadName> {
    let u32at = |at: usize| {
        b.get(at..at + 4)
            .map(|s| u32::from_le_bytes(s.try_into().expect("4")))
    };
    let (task, thread) = (u32at(0)?, u32at(4)?);
    let rest = b.get(8..)?;
    let name = &rest[..rest.iter().position(|c| *c == 0).unwrap_or(rest.len())];
    Some(ThreadName {
        task,
        thread,
        comm: String::from_utf8_lossy(name).into_owned(),
    })
}

impl SampleSource for PerfReader {
    fn meta(&self) -> &FileMeta {
        &self.meta
    }

    fn next_rows(
        &mut self,
        rows: &mut Vec<Row>,
        mappings: &mut Vec<Mapping>,
    ) -> Result<bool, Error> {
        let Some(mut f) = self.fast.take() else {
            return Ok(match self.next_batch()? {
                None => false,
                Some(b) => {
                    rows.extend(b.records.iter().map(Row::from_record));
                    mappings.extend(b.mappings);
                    true
                }
            });
        };
        let before = rows.len();
        let r = self.fill_rows(&mut f, rows, mappings);
        self.rows_read += (rows.len() - before) as u64;
        self.fast = Some(f);
        r
    }

    fn truncated(&self) -> Option<String> {
        self.cut_at.map(|n| {
            format!(
                "truncated at byte {n}: {} records read (the header sections after the data, host, command line and topology, are lost with the cut)",
                self.rows_read
            )
        })
    }

    fn next_batch(&mut self) -> Result<Option<Batch>, Error> {
        let b = self.next_batch_counted()?;
        if let Some(b) = &b {
            self.rows_read += b.records.len() as u64;
        }
        Ok(b)
    }
}

/// An MMAP2 record's build id is at most 20 bytes: linux-perf-event-reader asserts it (a
/// length byte of 200 panicked: found by fuzz/perf_data). Its length byte follows pid, tid,
/// address, length and page offset (32 bytes) when the record's misc says it has one.
fn mmap2_build_id_fits(record: &linux_perf_data::linux_perf_event_reader::RawEventRecord) -> bool {
    const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;
    if record.record_type != RecordType::MMAP2 || record.misc & PERF_RECORD_MISC_MMAP_BUILD_ID == 0
    {
        return true;
    }
    record
        .data
        .get(32..33)
        .is_none_or(|b| b.as_slice().first().is_none_or(|&len| len <= 20))
}

impl PerfReader {
    fn next_batch_counted(&mut self) -> Result<Option<Batch>, Error> {
        if self.fast.is_some() {
            return self.next_batch_fast();
        }
        let mut batch = Batch::default();
        let mut buf = Vec::new();
        let mut any = false;
        while batch.records.len() < self.batch_rows {
            let rec = self
                .iter
                .next_record(&mut self.file)
                .map_err(|e| Error::new(&self.path, format!("corrupt record stream: {e}")))?;
            let Some(rec) = rec else { break };
            any = true;
            let PerfFileRecord::EventRecord { attr_index, record } = rec else {
                continue;
            };
            if record.record_type == RecordType::SAMPLE {
                buf.clear();
                buf.extend_from_slice(&record.data.as_slice());
                let layout = self.layouts.get(attr_index).copied().unwrap_or_default();
                match decode_sample(&buf, &layout) {
                    Ok(s) if s.addr.is_some() => {
                        let r = self.to_record(attr_index, &s);
                        batch.records.push(r);
                    }
                    // A sample without a data address (perf record without -d) says nothing
                    // about memory placement.
                    Ok(_) => {}
                    Err(e) => {
                        self.malformed_samples += 1;
                        self.first_error.get_or_insert(e);
                    }
                }
                continue;
            }
            if !mmap2_build_id_fits(&record) {
                self.malformed_samples += 1;
                self.first_error
                    .get_or_insert_with(|| "an MMAP2 record with a build id over 20 bytes".into());
                continue;
            }
            let m = match record.parse() {
                Ok(EventRecord::Mmap(m)) => Some((
                    m.pid,
                    m.address,
                    m.length,
                    m.page_offset,
                    m.is_executable,
                    m.path.as_slice().into_owned(),
                )),
                Ok(EventRecord::Mmap2(m)) => Some((
                    m.pid,
                    m.address,
                    m.length,
                    m.page_offset,
                    m.protection & 4 != 0, // PROT_EXEC
                    m.path.as_slice().into_owned(),
                )),
                Ok(EventRecord::Comm(c)) => {
                    // (the record borrows the reader: map_thread's subtraction inline)
                    batch.thread_names.push(ThreadName {
                        task: (c.pid as u32).wrapping_sub(self.id_offset),
                        thread: (c.tid as u32).wrapping_sub(self.id_offset),
                        comm: String::from_utf8_lossy(&c.name.as_slice()).into_owned(),
                    });
                    None
                }
                _ => None,
            };
            if let Some((pid, start, len, pgoff, exec, name)) = m {
                let name = String::from_utf8_lossy(&name).into_owned();
                batch.mappings.push(Mapping {
                    task: (pid as u32).wrapping_sub(self.id_offset),
                    start,
                    len_bytes: len,
                    kind: MappingKind::classify(&name, exec),
                    name,
                    pgoff,
                });
            }
        }
        Ok(any.then_some(batch))
    }
}

/// `HEADER_BUILD_ID`: the binaries' build ids, sorted by path (the crate hands them out as a
/// hash map).
fn build_id_section(f: &PerfFile) -> Result<Vec<BuildId>, String> {
    let mut ids: Vec<BuildId> = f
        .build_ids()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(key, dso)| BuildId {
            path: String::from_utf8_lossy(&dso.path).into_owned(),
            id_hex: dso.build_id.iter().map(|b| format!("{b:02x}")).collect(),
            kernel: matches!(
                key,
                DsoKey::Kernel | DsoKey::GuestKernel | DsoKey::KernelModule { .. }
            ),
        })
        .collect();
    ids.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(ids)
}

/// The recording host's NUMA topology from perf's `HEADER_NUMA_TOPOLOGY` feature section:
/// `u32 nr; { u32 node; u64 mem_total_kb; u64 mem_free_kb; perf_string cpus; }[nr]`, where a
/// perf string is `u32 len` then `len` bytes (NUL-padded). Distances are not recorded: the
/// topology gets 10 local / 20 remote.
fn numa_topology_section(f: &PerfFile) -> Result<Option<Topology>, String> {
    let Some(data) = f.feature_section_data(Feature::NUMA_TOPOLOGY) else {
        return Ok(None);
    };
    let mut c = Cursor {
        data,
        at: 0,
        big: f.endian() == Endianness::BigEndian,
    };
    let nr = c.u32("nr nodes")?;
    let mut nodes = Vec::new();
    for _ in 0..nr {
        let id = c.u32("node id")?;
        let mem_kb = c.u64("mem_total")?;
        c.u64("mem_free")?;
        let len = c.u32("cpu list length")? as usize;
        let s = c.take(len, "cpu list")?;
        let s = String::from_utf8_lossy(s);
        let cpus = parse_cpu_list(s.trim_end_matches('\0'))?;
        nodes.push((id, mem_kb, cpus));
    }
    nodes.sort_by_key(|n| n.0);
    if nodes.iter().enumerate().any(|(i, n)| n.0 as usize != i) {
        // Sparse node ids cannot form a core Topology; leave CPU nodes unknown.
        return Ok(None);
    }
    if nodes.len() > numalab_core::nodemask::MAX_NODES {
        return Err(format!(
            "{} nodes, more than the {} a node mask holds",
            nodes.len(),
            numalab_core::nodemask::MAX_NODES
        ));
    }
    // a memory size past 2^64 bytes is corrupt (it overflowed: found by fuzz/perf_data)
    if let Some(bad) = nodes.iter().find(|n| n.1.checked_mul(1024).is_none()) {
        return Err(format!("node {} claims {} KiB of memory", bad.0, bad.1));
    }
    let n = nodes.len();
    Ok(Some(Topology {
        nodes: nodes
            .into_iter()
            .map(|(id, mem_kb, cpus)| NodeInfo {
                id: NodeId(id as u16),
                cpus,
                mem_bytes: mem_kb * 1024,
            })
            .collect(),
        distances: (0..n)
            .map(|i| (0..n).map(|j| if i == j { 10 } else { 20 }).collect())
            .collect(),
        smt: 1,
    }))
}

/// Which node each physical memory block belongs to (`HEADER_MEM_TOPOLOGY`).
#[derive(Clone, Debug)]
struct MemNodes {
    block_shift: u32,
    /// Node per block index; `u16::MAX` where no node claims it.
    block_node: Vec<u16>,
}

impl MemNodes {
    fn node_of(&self, phys: u64) -> Option<NodeId> {
        let b = usize::try_from(phys >> self.block_shift).ok()?;
        match self.block_node.get(b) {
            Some(&n) if n != u16::MAX => Some(NodeId(n)),
            _ => None,
        }
    }
}

/// perf's `HEADER_MEM_TOPOLOGY`: `u64 version (1); u64 block_size; u64 nr; { u64 node;
/// u64 size; u64 bits; u64 words[(bits+63)/64]; }[nr]`, bit i set = memory block i (of
/// `block_size` bytes from physical address 0) is on the node.
fn mem_topology_section(f: &PerfFile) -> Result<Option<MemNodes>, String> {
    // Bit 22 is HEADER_MEM_TOPOLOGY in perf (linux-perf-data calls it SAMPLE_TOPOLOGY).
    let Some(data) = f.feature_section_data(Feature(22)) else {
        return Ok(None);
    };
    let mut c = Cursor {
        data,
        at: 0,
        big: f.endian() == Endianness::BigEndian,
    };
    let version = c.u64("version")?;
    if version != 1 {
        return Err(format!("version {version}, expected 1"));
    }
    let bsize = c.u64("block size")?;
    if !bsize.is_power_of_two() {
        return Err(format!("block size {bsize} is not a power of two"));
    }
    let nr = c.u64("nr nodes")?;
    // Bounded by the section's size: each node takes at least 24 bytes.
    if nr > data.len() as u64 / 24 {
        return Err(format!("{nr} nodes in a section of {} bytes", data.len()));
    }
    let mut block_node: Vec<u16> = Vec::new();
    for _ in 0..nr {
        let node = c.u64("node id")?;
        c.u64("node size")?;
        let bits = c.u64("bitmap size")?;
        let words = bits.div_ceil(64);
        if words > (data.len() - c.at) as u64 / 8 {
            return Err(format!(
                "node {node}: bitmap of {bits} bits runs past the section"
            ));
        }
        let node = u16::try_from(node).map_err(|_| format!("node id {node}"))?;
        for w in 0..words {
            let mut word = c.u64("bitmap")?;
            while word != 0 {
                let blk = (w * 64 + word.trailing_zeros() as u64) as usize;
                word &= word - 1;
                if blk >= block_node.len() {
                    block_node.resize(blk + 1, u16::MAX);
                }
                block_node[blk] = node;
            }
        }
    }
    Ok(Some(MemNodes {
        block_shift: bsize.trailing_zeros(),
        block_node,
    }))
}

/// Kernel CPU list syntax: `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<CpuId>, String> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("bad CPU list '{s}': expected e.g. 0-3,8");
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: u32 = a.trim().parse().map_err(|_| bad())?;
        let b: u32 = b.trim().parse().map_err(|_| bad())?;
        if b < a {
            return Err(bad());
        }
        if b >= numalab_core::ids::MAX_CPU_ID {
            return Err(format!(
                "bad CPU list '{s}': CPU {b} is beyond the largest CPU id accepted ({})",
                numalab_core::ids::MAX_CPU_ID - 1
            ));
        }
        v.extend((a..=b).map(CpuId));
    }
    Ok(v)
}

/// The host's topology from `/sys/devices/system/node` (or a copy of it under `root`):
/// `nodeN/cpulist`, `nodeN/distance`; memory is not read. Node ids must be dense.
pub fn topology_from_sysfs(root: impl AsRef<Path>) -> Result<Topology, Error> {
    let root = root.as_ref();
    let rd = std::fs::read_dir(root).map_err(|e| Error::new(root, format!("cannot list: {e}")))?;
    let mut ids: Vec<u16> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse::<u16>()
                .ok()
        })
        .collect();
    ids.sort();
    if ids.is_empty() {
        return Err(Error::new(root, "no nodeN directories"));
    }
    let mut nodes = Vec::new();
    let mut distances = Vec::new();
    for (pos, id) in ids.iter().enumerate() {
        if *id as usize != pos {
            return Err(Error::new(
                root,
                format!("node ids are not dense (node{id} at position {pos})"),
            ));
        }
        let dir = root.join(format!("node{id}"));
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .map_err(|e| Error::new(dir.join(f), format!("cannot read: {e}")))
        };
        let cpus =
            parse_cpu_list(&read("cpulist")?).map_err(|e| Error::new(dir.join("cpulist"), e))?;
        let dist: Vec<u32> = read("distance")?
            .split_whitespace()
            .map(|d| d.parse::<u32>())
            .collect::<Result<_, _>>()
            .map_err(|e| Error::new(dir.join("distance"), format!("not a list of numbers: {e}")))?;
        nodes.push(NodeInfo {
            id: NodeId(*id),
            cpus,
            mem_bytes: 0,
        });
        distances.push(dist);
    }
    let t = Topology {
        nodes,
        distances,
        smt: 1,
    };
    t.validate().map_err(|e| Error::new(root, e.to_string()))?;
    Ok(t)
}

/// Whether `path` starts with perf.data's magic (`PERFILE2`, either byte order).
pub fn is_perf_file(path: impl AsRef<Path>) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && (&magic == b"PERFILE2" || &magic == b"2ELIFREP")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_src_levels() {
        let lvl = |bits: u64| bits << MEM_LVL_SHIFT;
        let num =
            |n: u64, remote: bool| (n << MEM_LVLNUM_SHIFT) | ((remote as u64) << MEM_REMOTE_SHIFT);
        // The page-fault samples of tests/data: everything N/A.
        assert_eq!(data_source(0x1e05080021), None);
        assert_eq!(data_src_is_write(0x1e05080021), None);
        assert_eq!(
            data_source(lvl(MEM_LVL_HIT | MEM_LVL_LOC_RAM)),
            Some(DataSource::LocalDram)
        );
        assert_eq!(
            data_source(lvl(MEM_LVL_HIT | MEM_LVL_REM_RAM1)),
            Some(DataSource::RemoteDram)
        );
        assert_eq!(
            data_source(lvl(MEM_LVL_HIT | MEM_LVL_REM_CCE2)),
            Some(DataSource::RemoteCache)
        );
        assert_eq!(
            data_source(lvl(MEM_LVL_HIT | MEM_LVL_L1)),
            Some(DataSource::PrivateCache)
        );
        assert_eq!(
            data_source(lvl(MEM_LVL_HIT | MEM_LVL_L3)),
            Some(DataSource::LocalLlc)
        );
        // A miss without the level that served it says nothing.
        assert_eq!(data_source(lvl(0x04 | MEM_LVL_L3)), None);
        // lvl_num wins: RAM remote.
        assert_eq!(
            data_source(num(LVLNUM_RAM, true) | lvl(MEM_LVL_HIT | MEM_LVL_LOC_RAM)),
            Some(DataSource::RemoteDram)
        );
        assert_eq!(
            data_source(num(LVLNUM_L3, true)),
            Some(DataSource::RemoteCache)
        );
        assert_eq!(
            data_source(num(LVLNUM_ANY_CACHE, false)),
            Some(DataSource::LocalLlc)
        );
        assert_eq!(data_src_is_write(MEM_OP_STORE), Some(true));
        assert_eq!(data_src_is_write(MEM_OP_LOAD), Some(false));
    }

    #[test]
    fn decode_handles_every_layout_part() {
        // IP | TID | READ(group, id, lost) | CALLCHAIN | WEIGHT_STRUCT | DATA_SRC | PHYS_ADDR | DATA_PAGE_SIZE
        let l = SampleLayout {
            sample_type: SAMPLE_IP
                | SAMPLE_TID
                | SAMPLE_READ
                | SAMPLE_CALLCHAIN
                | SAMPLE_WEIGHT_STRUCT
                | SAMPLE_DATA_SRC
                | SAMPLE_PHYS_ADDR
                | SAMPLE_DATA_PAGE_SIZE,
            read_format: FORMAT_GROUP | FORMAT_ID | FORMAT_LOST,
            ..Default::default()
        };
        let mut b = Vec::new();
        let mut p = |v: u64| b.extend_from_slice(&v.to_le_bytes());
        p(0x1234); // ip
        p((7u64 << 32) | 5); // pid 5, tid 7
        p(2); // read nr
        for v in [10, 11, 12, 20, 21, 22] {
            p(v); // value, id, lost ×2
        }
        p(1); // callchain nr
        p(0xdead);
        p((3u64 << 32) | 250); // weight var1 250, ins_lat 3
        p(0x42); // data_src
        p(0x9000); // phys
        p(2 << 20); // data page size
        let s = decode_sample(&b, &l).unwrap();
        assert_eq!(s.ip, Some(0x1234));
        assert_eq!((s.pid, s.tid), (Some(5), Some(7)));
        assert_eq!((s.weight, s.ins_lat), (Some(250), Some(3)));
        assert_eq!(s.data_src, Some(0x42));
        assert_eq!(s.phys_addr, Some(0x9000));
        assert_eq!(s.data_page_size, Some(2 << 20));
        // Truncated: the error names the field.
        let e = decode_sample(&b[..b.len() - 4], &l).unwrap_err();
        assert!(e.contains("data_page_size"), "{e}");
    }

    #[test]
    fn fixed_layouts_decode_as_field_by_field() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for sample_type in [
            crate::perf_write::SAMPLE_TYPE,
            SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR | SAMPLE_ID | SAMPLE_CPU,
            SAMPLE_IDENTIFIER
                | SAMPLE_ID
                | SAMPLE_STREAM_ID
                | SAMPLE_WEIGHT_STRUCT
                | SAMPLE_DATA_SRC
                | SAMPLE_TRANSACTION
                | SAMPLE_CGROUP
                | SAMPLE_DATA_PAGE_SIZE
                | SAMPLE_CODE_PAGE_SIZE,
        ] {
            let l = SampleLayout {
                sample_type,
                ..Default::default()
            };
            let f = FixedLayout::of(&l).expect("fixed");
            let b: Vec<u8> = (0..f.size + 8)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            assert_eq!(f.decode(&b), Some(decode_sample(&b, &l).unwrap()));
            assert_eq!(f.decode(&b[..f.size - 1]), None);
        }
        let callchain = SampleLayout {
            sample_type: SAMPLE_IP | SAMPLE_CALLCHAIN,
            ..Default::default()
        };
        assert!(FixedLayout::of(&callchain).is_none());
    }

    #[test]
    fn event_descriptions_must_hold_what_their_counts_say() {
        // nr, attr_size, then one event: attr, nr_ids = 1, name "ab" (len 2), one id
        let mut d = Vec::new();
        for v in [1u32, 8] {
            d.extend(v.to_le_bytes());
        }
        d.extend([0u8; 8]);
        d.extend(1u32.to_le_bytes());
        d.extend(2u32.to_le_bytes());
        d.extend(*b"ab");
        d.extend(7u64.to_le_bytes());
        assert_eq!(event_desc_overrun(&d, false), None);
        // a billion events in the same bytes
        d[..4].copy_from_slice(&1_000_000_000u32.to_le_bytes());
        let why = event_desc_overrun(&d, false).unwrap();
        assert!(why.contains("event 1 of 1000000000"), "{why}");
        // an id count past the end
        d[..4].copy_from_slice(&1u32.to_le_bytes());
        d[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(event_desc_overrun(&d, false).is_some());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-2,5\n").unwrap(),
            vec![CpuId(0), CpuId(1), CpuId(2), CpuId(5)]
        );
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        // a perf.data header or sysfs copy naming absurd CPUs is refused, not allocated
        let e = parse_cpu_list("0-4000000000").unwrap_err();
        assert!(e.contains("beyond the largest CPU id"), "{e}");
    }
}
