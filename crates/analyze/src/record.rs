//! What readers hand to the analysis: samples with explicit "unknown" marks, mappings, file
//! metadata and optional placement ground truth.

use crate::error::Error;
use numalab_core::{AccessSample, CpuId, DataSource, NodeId, PageSize, TaskId, Topology};
use serde::{Deserialize, Serialize};

/// Which fields of a [`Record`]'s `sample` were measured. `AccessSample` has no way to say
/// "unknown" (perf records no page node; software events have no data source), so the fields
/// not flagged here hold placeholders (node 0, `Base4K`, `LocalDram`, 0 ns, read) that the
/// analysis never uses. See docs/analyze.md for the proposed change to `AccessSample`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Known(pub u8);

impl Known {
    pub const CPU_NODE: Known = Known(1);
    pub const PAGE_NODE: Known = Known(2);
    pub const PAGE_SIZE: Known = Known(4);
    pub const SOURCE: Known = Known(8);
    pub const LATENCY: Known = Known(16);
    pub const WRITE: Known = Known(32);
    /// The sample's CPU (`AccessSample::cpu`): perf records it only with `PERF_SAMPLE_CPU`,
    /// which `perf record` leaves out of per-thread software events.
    pub const CPU: Known = Known(64);
    /// Everything: what the simulator's sampler delivers.
    pub const ALL: Known = Known(127);
    /// Not a field but what the sample is: its event does not sample memory accesses (a
    /// software event such as `page-faults`, or a tracepoint), so its address is where the
    /// event happened and nothing was served from any cache or DRAM; the analysis never
    /// counts it as a DRAM access. Not part of [`Known::ALL`].
    pub const NOT_ACCESS: Known = Known(128);
    pub const NONE: Known = Known(0);

    #[inline]
    pub fn has(self, k: Known) -> bool {
        self.0 & k.0 == k.0
    }
    #[inline]
    pub fn with(self, k: Known) -> Known {
        Known(self.0 | k.0)
    }
    #[inline]
    pub fn without(self, k: Known) -> Known {
        Known(self.0 & !k.0)
    }
}

/// One sample: the core format plus what is known of it and the raw perf fields kept for
/// reference (all `None` for simulated samples).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Record {
    pub sample: AccessSample,
    pub known: Known,
    /// Index of the event in the file's event list (perf files with several events).
    pub event: u16,
    pub ip: Option<u64>,
    pub phys_addr: Option<u64>,
    /// perf's sample weight (cycles of latency on Intel PEBS; raw, not nanoseconds).
    pub weight: Option<u64>,
    /// perf's raw `perf_mem_data_src` word.
    pub data_src: Option<u64>,
    /// The events this sample stands for (perf's `period`: it varies per sample when perf
    /// samples at a frequency, and `perf report` weighs samples by it); `None`: the file's
    /// `sample_period`.
    pub period: Option<u64>,
}

impl Record {
    /// A fully known sample, as the simulator delivers it.
    pub fn from_sample(sample: AccessSample) -> Record {
        Record {
            sample,
            known: Known::ALL,
            event: 0,
            ip: None,
            phys_addr: None,
            weight: None,
            data_src: None,
            period: None,
        }
    }

    pub fn cpu(&self) -> Option<CpuId> {
        self.known.has(Known::CPU).then_some(self.sample.cpu)
    }
    /// Whether the sample is a memory access (see [`Known::NOT_ACCESS`]).
    pub fn is_access(&self) -> bool {
        !self.known.has(Known::NOT_ACCESS)
    }
    pub fn cpu_node(&self) -> Option<NodeId> {
        self.known
            .has(Known::CPU_NODE)
            .then_some(self.sample.cpu_node)
    }
    pub fn page_node(&self) -> Option<NodeId> {
        self.known
            .has(Known::PAGE_NODE)
            .then_some(self.sample.page_node)
    }
    pub fn page_size(&self) -> Option<PageSize> {
        self.known
            .has(Known::PAGE_SIZE)
            .then_some(self.sample.page_size)
    }
    pub fn source(&self) -> Option<DataSource> {
        self.known.has(Known::SOURCE).then_some(self.sample.source)
    }
    pub fn latency_ns(&self) -> Option<f32> {
        self.known
            .has(Known::LATENCY)
            .then_some(self.sample.latency_ns)
    }
    pub fn write(&self) -> Option<bool> {
        self.known.has(Known::WRITE).then_some(self.sample.write)
    }
}

/// What a mapping holds, from its name (perf MMAP/MMAP2 records, /proc/PID/maps).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MappingKind {
    /// An executable file mapping (the program or a shared library).
    Binary,
    Heap,
    Stack,
    /// Anonymous memory (`//anon`, `[anon:...]`, no name, huge-page or shared-memory anon).
    Anonymous,
    /// A non-executable file mapping.
    File,
    /// Other pseudo-mappings (`[vdso]`, `[vvar]`, kernel).
    Other,
}

impl MappingKind {
    /// Classifies a mapping by its name as the kernel reports it.
    pub fn classify(name: &str, executable: bool) -> MappingKind {
        if name == "[heap]" {
            MappingKind::Heap
        } else if name.starts_with("[stack") {
            MappingKind::Stack
        } else if name.is_empty()
            || name == "//anon"
            || name.starts_with("[anon")
            || name.starts_with("/anon_hugepage")
            || name.starts_with("/dev/zero")
            || name.starts_with("/SYSV")
            || name.starts_with("/memfd:")
        {
            MappingKind::Anonymous
        } else if name.starts_with('[') {
            MappingKind::Other
        } else if executable {
            MappingKind::Binary
        } else {
            MappingKind::File
        }
    }
}

/// A virtual memory mapping of a task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub task: u32,
    pub start: u64,
    pub len_bytes: u64,
    pub name: String,
    pub kind: MappingKind,
    /// Offset in the file of the mapping's first byte (perf's `pgoff`, bytes): with it `perf
    /// report` finds the symbol of an address in a binary; 0 for anonymous memory.
    #[serde(default)]
    pub pgoff: u64,
}

/// A thread's command name, as perf's COMM records give it (at most 15 bytes, `comm` in
/// /proc/PID/task/TID/stat).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadName {
    pub task: u32,
    pub thread: u32,
    pub comm: String,
}

/// What a sample file says about where its samples come from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FileMeta {
    /// Machine name (a numalab preset, or the host name of a perf recording).
    pub machine: String,
    pub workload: String,
    /// "sim", "perf" or "numalab-sampler".
    pub origin: String,
    /// One sample every this many events (memory references, misses, faults); 0 = unknown.
    pub sample_period: u64,
    /// Base page size of the recording.
    pub page_size: Option<PageSize>,
    /// Number of NUMA nodes; 0 = unknown (the analysis then uses the largest node seen + 1).
    pub nodes: u16,
    /// Full topology where known (CPU → node, distances).
    pub topology: Option<Topology>,
    /// Event names, indexed by `Record::event`.
    pub events: Vec<String>,
    /// Mappings known before the samples (perf conversion collects them first).
    pub mappings: Vec<Mapping>,
    /// Samples taken but not in the file: the simulator keeps at most
    /// `SimConfig::max_samples` in memory and counts the rest (0: none dropped).
    #[serde(default)]
    pub samples_dropped: u64,
    /// Thread names known before the samples (perf conversion collects them first).
    #[serde(default)]
    pub thread_names: Vec<ThreadName>,
    /// The samples carry no CPU: a perf.data file whose events were recorded without
    /// `PERF_SAMPLE_CPU`. perf.data written from such a file has no CPU field either, rather
    /// than CPU 0 in every sample.
    #[serde(default)]
    pub samples_without_cpu: bool,
    /// The build ids of the binaries the samples ran in, as a perf recording lists them
    /// (`HEADER_BUILD_ID`); kept so that perf.data written from this file lets perf find the
    /// very versions of those binaries (its build-id cache, or the running kernel's
    /// /proc/kallsyms when the kernel's id matches) and resolve their symbols.
    #[serde(default)]
    pub build_ids: Vec<BuildId>,
}

/// One binary's build id (perf's `struct perf_record_header_build_id`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildId {
    /// The binary as perf names it: a path, `[kernel.kallsyms]`, `[vdso]`, a module.
    pub path: String,
    /// The id's bytes in hex (20 for a GNU build id).
    pub id_hex: String,
    /// The kernel or one of its modules (perf files those among the kernel's binaries).
    pub kernel: bool,
}

/// A chunk of a sample stream. Mappings are handed out as they appear so that a perf file is
/// read in one pass; they apply to the samples that follow and the analysis keeps the latest
/// mapping covering an address.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub records: Vec<Record>,
    pub mappings: Vec<Mapping>,
    /// Thread names (perf COMM records) as they appear, like mappings.
    pub thread_names: Vec<ThreadName>,
}

/// A streaming source of samples: a numalab sample file, a perf.data file, or samples in
/// memory. Each call returns the next batch, `None` at the end.
pub trait SampleSource {
    fn meta(&self) -> &FileMeta;
    fn next_batch(&mut self) -> Result<Option<Batch>, Error>;

    /// Set once the source met the end of a truncated file: what was read stops at the last
    /// complete record, and this says where the file ends and how many records were read
    /// (`truncated at byte N: K records read`). None for a complete file.
    fn truncated(&self) -> Option<String> {
        None
    }

    /// The next batch as [`Row`]s (the analysis' input), appended to `rows` and `mappings`;
    /// false at the end. The default converts [`SampleSource::next_batch`]; readers that can
    /// decode straight into rows override it (perf.data: a 32-byte row per sample instead of
    /// a 120-byte `Record`). Do not mix with `next_batch` on one source.
    fn next_rows(
        &mut self,
        rows: &mut Vec<Row>,
        mappings: &mut Vec<Mapping>,
    ) -> Result<bool, Error> {
        match self.next_batch()? {
            None => Ok(false),
            Some(b) => {
                rows.extend(b.records.iter().map(Row::from_record));
                mappings.extend(b.mappings);
                Ok(true)
            }
        }
    }
}

/// One sample as the analysis uses it, in 32 bytes: unknown fields hold sentinels instead of
/// `Known` marks (fewer branches and bytes per sample than [`Record`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Row {
    pub time_ns: u64,
    pub addr: u64,
    pub task: u32,
    pub thread: u32,
    /// [`Row::NO_NODE`] when unknown.
    pub cpu_node: u16,
    /// [`Row::NO_NODE`] when unknown.
    pub page_node: u16,
    /// 12 / 21 / 30; 0 when unknown.
    pub page_shift: u8,
    /// Index in [`Row::SOURCES`]; [`Row::UNKNOWN`] when unknown, [`Row::NOT_ACCESS`] when
    /// the sample is not a memory access.
    pub source: u8,
    /// 0 load, 1 store, [`Row::UNKNOWN`] neither.
    pub write: u8,
    pub pad: u8,
}

impl Row {
    pub const NO_NODE: u16 = u16::MAX;
    pub const UNKNOWN: u8 = u8::MAX;
    /// `source` of a sample that is not a memory access ([`Known::NOT_ACCESS`]).
    pub const NOT_ACCESS: u8 = u8::MAX - 1;
    /// The sources by index (`Row::source`).
    pub const SOURCES: [DataSource; 5] = [
        DataSource::PrivateCache,
        DataSource::LocalLlc,
        DataSource::RemoteCache,
        DataSource::LocalDram,
        DataSource::RemoteDram,
    ];

    pub fn source_index(s: DataSource) -> u8 {
        match s {
            DataSource::PrivateCache => 0,
            DataSource::LocalLlc => 1,
            DataSource::RemoteCache => 2,
            DataSource::LocalDram => 3,
            DataSource::RemoteDram => 4,
        }
    }

    pub fn from_record(r: &Record) -> Row {
        let s = &r.sample;
        Row {
            time_ns: s.time_ns,
            addr: s.addr,
            task: s.task.0,
            thread: s.thread.0,
            cpu_node: r.cpu_node().map_or(Row::NO_NODE, |n| n.0),
            page_node: r.page_node().map_or(Row::NO_NODE, |n| n.0),
            page_shift: r.page_size().map_or(0, |p| p.shift() as u8),
            source: if r.is_access() {
                r.source().map_or(Row::UNKNOWN, Row::source_index)
            } else {
                Row::NOT_ACCESS
            },
            write: r.write().map_or(Row::UNKNOWN, u8::from),
            pad: 0,
        }
    }
}

/// Samples already in memory (e.g. `SimResult::samples`), handed out in batches.
pub struct MemorySource<'a> {
    meta: FileMeta,
    samples: &'a [AccessSample],
    at: usize,
    batch_rows: usize,
}

impl<'a> MemorySource<'a> {
    pub fn new(meta: FileMeta, samples: &'a [AccessSample]) -> Self {
        MemorySource {
            meta,
            samples,
            at: 0,
            batch_rows: 64 * 1024,
        }
    }
}

impl SampleSource for MemorySource<'_> {
    fn meta(&self) -> &FileMeta {
        &self.meta
    }
    fn next_batch(&mut self) -> Result<Option<Batch>, Error> {
        if self.at >= self.samples.len() {
            return Ok(None);
        }
        let end = (self.at + self.batch_rows).min(self.samples.len());
        let records = self.samples[self.at..end]
            .iter()
            .map(|s| Record::from_sample(*s))
            .collect();
        self.at = end;
        Ok(Some(Batch {
            records,
            mappings: Vec::new(),
            thread_names: Vec::new(),
        }))
    }
}

/// A run of `pages` consecutive pages of one size, all on `node`, at `time_ns`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementEntry {
    pub time_ns: u64,
    pub task: TaskId,
    pub start: u64,
    pub page_size: PageSize,
    pub pages: u32,
    pub node: NodeId,
}

impl PlacementEntry {
    pub fn end(&self) -> u64 {
        self.start + self.pages as u64 * self.page_size.bytes()
    }
}

/// Page placement ground truth: snapshots (entries sharing a `time_ns`), looked up by task,
/// address and time. A sample takes the latest snapshot at or before its time (the first
/// snapshot for samples before it): pages rarely move, and a snapshot after the run is the
/// usual case for perf recordings.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// Snapshots by time; entries of each sorted by (task, start).
    snapshots: Vec<(u64, Vec<PlacementEntry>)>,
}

impl Placement {
    pub fn from_entries(mut entries: Vec<PlacementEntry>) -> Placement {
        entries.sort_by_key(|e| (e.time_ns, e.task, e.start));
        let mut snapshots: Vec<(u64, Vec<PlacementEntry>)> = Vec::new();
        for e in entries {
            match snapshots.last_mut() {
                Some((t, v)) if *t == e.time_ns => v.push(e),
                _ => snapshots.push((e.time_ns, vec![e])),
            }
        }
        Placement { snapshots }
    }

    pub fn is_empty(&self) -> bool {
        self.snapshots.is_empty()
    }

    /// All entries, by time then task then start.
    pub fn entries(&self) -> impl Iterator<Item = &PlacementEntry> {
        self.snapshots.iter().flat_map(|(_, v)| v.iter())
    }

    /// The page holding `addr` of `task` at `time_ns`: its node and size.
    pub fn lookup(&self, task: TaskId, addr: u64, time_ns: u64) -> Option<(NodeId, PageSize)> {
        let i = self
            .snapshots
            .partition_point(|(t, _)| *t <= time_ns)
            .saturating_sub(1);
        let (_, v) = self.snapshots.get(i)?;
        let k = v.partition_point(|e| (e.task, e.start) <= (task, addr));
        let e = v.get(k.checked_sub(1)?)?;
        (e.task == task && addr < e.end()).then_some((e.node, e.page_size))
    }

    /// Fills in the page node (and size) of `r` where the placement knows its page.
    pub fn annotate(&self, r: &mut Record) {
        if let Some((node, size)) = self.lookup(r.sample.task, r.sample.addr, r.sample.time_ns) {
            r.sample.page_node = node;
            r.sample.page_size = size;
            r.known = r.known.with(Known::PAGE_NODE).with(Known::PAGE_SIZE);
        }
    }
}

/// CPU → node from a topology, dense for quick lookups.
pub(crate) fn cpu_nodes(topology: &Topology) -> Vec<Option<NodeId>> {
    let max = topology.cpus().last().map_or(0, |c: &CpuId| c.index() + 1);
    let mut v = vec![None; max];
    for n in &topology.nodes {
        for c in &n.cpus {
            v[c.index()] = Some(n.id);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_lookup_uses_latest_snapshot() {
        let e = |t, start, pages, node| PlacementEntry {
            time_ns: t,
            task: TaskId(1),
            start,
            page_size: PageSize::Base4K,
            pages,
            node: NodeId(node),
        };
        let p = Placement::from_entries(vec![e(100, 0x1000, 4, 0), e(200, 0x1000, 2, 1)]);
        // Before and at the first snapshot: node 0 over 4 pages [0x1000, 0x5000).
        assert_eq!(p.lookup(TaskId(1), 0x4fff, 0).map(|x| x.0), Some(NodeId(0)));
        assert_eq!(p.lookup(TaskId(1), 0x5000, 150), None);
        // From 200: node 1, only 2 pages [0x1000, 0x3000).
        assert_eq!(
            p.lookup(TaskId(1), 0x2000, 250).map(|x| x.0),
            Some(NodeId(1))
        );
        assert_eq!(p.lookup(TaskId(1), 0x3000, 250), None);
        assert_eq!(p.lookup(TaskId(2), 0x2000, 250), None);
        assert_eq!(p.lookup(TaskId(1), 0x0fff, 250), None);
    }

    #[test]
    fn mapping_kinds() {
        assert_eq!(MappingKind::classify("[heap]", false), MappingKind::Heap);
        assert_eq!(MappingKind::classify("[stack]", false), MappingKind::Stack);
        assert_eq!(
            MappingKind::classify("//anon", false),
            MappingKind::Anonymous
        );
        assert_eq!(
            MappingKind::classify("/usr/lib/libc.so.6", true),
            MappingKind::Binary
        );
        assert_eq!(
            MappingKind::classify("/etc/passwd", false),
            MappingKind::File
        );
        assert_eq!(MappingKind::classify("[vdso]", true), MappingKind::Other);
    }
}
