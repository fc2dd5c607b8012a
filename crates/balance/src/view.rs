//! [`LinuxView`]: the `MemoryView` of one live process, rebuilt every policy period.
//!
//! | view | Linux source |
//! |---|---|
//! | nodes, distances, node CPUs | `/sys/devices/system/node` (numalab-linux's node tree) |
//! | free bytes | `nodeN/meminfo` MemFree, read every period |
//! | controller peak | HMAT `access0` read bandwidth, where the firmware gives one |
//! | page | `move_pages` query (batched for the period's samples, cached until the next period or the next move) |
//! | page size | hugetlb VMAs: their page size; THP: `/proc/PID/pagemap` + `/proc/kpageflags` (root); else 4 KiB |
//! | regions | `/proc/PID/smaps`, kernel-special mappings left out |
//! | threads | `/proc/PID/task/*/stat` (processor field) |
//! | samples, node traffic | the period's samples of the file (see `replay`) |
//! | thread counters | per-thread perf counting events (`counters`), read every period; loads, stores, remote loads (and LLC misses without a PMU) from the samples |

use crate::counters::{CounterReport, Field, ThreadPerf};
use crate::Error;
use numalab_analyze::Record;
use numalab_core::view::{MemoryView, NodeTraffic, ThreadCounters};
use numalab_core::{
    AccessSample, CpuId, DataSource, NodeId, NodeMask, PageInfo, PageSize, RegionInfo, TaskId,
    ThreadId, ThreadInfo,
};
use numalab_linux::node::read_node_tree;
use numalab_linux::smaps::read_smaps;
use numalab_linux::{move_pages_query, MovePagesOptions, PageStatus, Pid, SysRoot};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

const BASE: u64 = 4096;
/// Pages queried together when a policy asks about a page the samples did not name.
const READ_AHEAD: u64 = 512;

/// The host's nodes as the kernel shows them.
#[derive(Clone, Debug)]
pub struct HostTopology {
    /// Highest online node id + 1 (node ids index every per-node vector).
    pub num_nodes: usize,
    pub online: NodeMask,
    /// Nodes that can hold pages (`has_memory`; all online nodes when the file is missing).
    pub has_memory: NodeMask,
    pub cpus: Vec<Vec<CpuId>>,
    pub cpu_node: HashMap<u32, NodeId>,
    /// SLIT distances, `distance[from][to]` (10 local, 20 remote where sysfs says nothing).
    pub distance: Vec<Vec<u32>>,
    /// HMAT access0 read bandwidth, bytes/s.
    pub peak_bytes_per_s: Vec<Option<f64>>,
}

impl HostTopology {
    pub fn read(root: &SysRoot) -> Result<HostTopology, Error> {
        let tree = read_node_tree(root)?;
        let num_nodes = tree
            .nodes
            .iter()
            .map(|n| n.id.index() + 1)
            .max()
            .unwrap_or(0);
        if num_nodes == 0 {
            return Err(Error(
                "no NUMA node online in /sys/devices/system/node".into(),
            ));
        }
        let mut cpus = vec![Vec::new(); num_nodes];
        let mut cpu_node = HashMap::new();
        let mut distance = vec![vec![20; num_nodes]; num_nodes];
        let mut peak = vec![None; num_nodes];
        for (i, row) in distance.iter_mut().enumerate() {
            row[i] = 10;
        }
        for n in &tree.nodes {
            let i = n.id.index();
            cpus[i] = n.cpus.clone();
            for c in &n.cpus {
                cpu_node.insert(c.0, n.id);
            }
            for (to, d) in &n.distances {
                if to.index() < num_nodes {
                    distance[i][to.index()] = *d;
                }
            }
            peak[i] = n.access[0]
                .as_ref()
                .and_then(|a| a.read_bandwidth_mb_per_s)
                .map(|mb| mb as f64 * 1e6);
        }
        Ok(HostTopology {
            num_nodes,
            online: tree.online,
            has_memory: tree.has_memory.unwrap_or(tree.online),
            cpus,
            cpu_node,
            distance,
            peak_bytes_per_s: peak,
        })
    }

    fn free_bytes(root: &SysRoot, num_nodes: usize) -> Vec<u64> {
        let mut free = vec![0; num_nodes];
        if let Ok(tree) = read_node_tree(root) {
            for n in tree.nodes {
                if let (Some(m), true) = (n.meminfo, n.id.index() < num_nodes) {
                    free[n.id.index()] = m.mem_free_kb.saturating_mul(1024);
                }
            }
        }
        free
    }
}

/// One mapping of the process, as the view needs it.
#[derive(Clone, Debug)]
struct Vma {
    start: u64,
    end: u64,
    /// Some of it is transparent huge pages now (AnonHugePages > 0).
    thp: bool,
    /// hugetlbfs page size, for hugetlb mappings.
    hugetlb: Option<PageSize>,
}

/// What one period's samples were, after the view filled in what the file did not know.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WindowStats {
    pub samples: u64,
    /// DRAM-served samples (and samples of unknown source, counted as DRAM as
    /// `numalab analyze` does) with both nodes known: what node traffic counts.
    pub dram_samples: u64,
    /// Samples whose page is not present now and whose file gives no page node: no traffic.
    pub unplaced_samples: u64,
    /// `served[page node][cpu node]` of this period, in events (samples × sample period).
    pub served: Vec<Vec<u64>>,
}

/// Counters of page queries, for reports.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryStats {
    pub syscalls: u64,
    pub pages: u64,
}

pub struct LinuxView {
    pid: Pid,
    root: SysRoot,
    topo: HostTopology,
    now_ns: u64,
    vmas: Vec<Vma>,
    regions: Vec<RegionInfo>,
    threads: Vec<ThreadInfo>,
    counters: HashMap<ThreadId, ThreadCounters>,
    /// Per-thread hardware counters (none opened where the PMU or perf refuses).
    perf: ThreadPerf,
    /// This period's perf counts per thread, read once in `refresh` so that every
    /// `thread_counters` call of a tick sees the same values.
    hw: HashMap<ThreadId, Vec<(Field, u64)>>,
    traffic: NodeTraffic,
    samples: Vec<AccessSample>,
    free: Vec<u64>,
    /// Placement by 4 KiB page (None: not present), valid until `forget_pages`.
    pages: RefCell<HashMap<u64, Option<PageInfo>>>,
    queries: Cell<QueryStats>,
    pagemap: Option<File>,
    kpageflags: Option<File>,
}

impl LinuxView {
    /// The view of `pid` (its mappings and threads read once now; `refresh` reads them again).
    pub fn new(pid: i32, root: SysRoot) -> Result<LinuxView, Error> {
        let topo = HostTopology::read(&root)?;
        let n = topo.num_nodes;
        let mut v = LinuxView {
            pid: Pid(pid),
            root,
            now_ns: 0,
            vmas: Vec::new(),
            regions: Vec::new(),
            threads: Vec::new(),
            counters: HashMap::new(),
            perf: ThreadPerf::new(pid, pid as u32),
            hw: HashMap::new(),
            traffic: NodeTraffic {
                served: vec![vec![0; n]; n],
            },
            samples: Vec::new(),
            free: Vec::new(),
            pages: RefCell::new(HashMap::new()),
            queries: Cell::new(QueryStats::default()),
            pagemap: None,
            kpageflags: None,
            topo,
        };
        v.read_process()?;
        v.read_perf();
        Ok(v)
    }

    /// Opens the counters of new threads and reads every thread's.
    fn read_perf(&mut self) {
        let tids: Vec<u32> = self.threads.iter().map(|t| t.thread.0).collect();
        self.perf.track(&tids);
        self.hw = tids
            .iter()
            .map(|t| (ThreadId(*t), self.perf.read(*t)))
            .collect();
    }

    /// Which thread counters are measured, estimated from the samples, or zero.
    pub fn counter_report(&self) -> CounterReport {
        self.perf.report()
    }

    pub fn pid(&self) -> i32 {
        self.pid.0
    }

    pub fn topology(&self) -> &HostTopology {
        &self.topo
    }

    pub fn query_stats(&self) -> QueryStats {
        self.queries.get()
    }

    fn task(&self) -> TaskId {
        TaskId(self.pid.0 as u32)
    }

    /// Mappings, threads, free memory; the pagemap files for page sizes.
    fn read_process(&mut self) -> Result<(), Error> {
        let smaps = read_smaps(&self.root, self.pid)?;
        let task = self.task();
        self.vmas.clear();
        self.regions.clear();
        for v in smaps.iter().filter(|v| !v.is_kernel_special()) {
            let hugetlb = v.vm_flags.iter().any(|f| f == "ht").then(|| {
                match v.kernel_page_size_kb.unwrap_or(2048) {
                    1_048_576 => PageSize::Giant1G,
                    _ => PageSize::Huge2M,
                }
            });
            self.vmas.push(Vma {
                start: v.start,
                end: v.end,
                thp: v.anon_huge_pages_kb.unwrap_or(0) > 0,
                hugetlb,
            });
            let advice = if v.vm_flags.iter().any(|f| f == "hg") {
                Some(true)
            } else if v.vm_flags.iter().any(|f| f == "nh") {
                Some(false)
            } else {
                None
            };
            self.regions.push(RegionInfo {
                task,
                start: v.start,
                len_bytes: v.len_bytes(),
                name: v.path.clone().unwrap_or_else(|| "[anon]".into()),
                // range policies are in numa_maps; no policy of this crate reads them
                policy: None,
                thp_advice: advice,
            });
        }
        self.threads = read_threads(self.pid.0, &self.topo)?;
        self.free = HostTopology::free_bytes(&self.root, self.topo.num_nodes);
        let proc_dir = self.root.path(&format!("proc/{}", self.pid.0));
        self.pagemap = File::open(proc_dir.join("pagemap")).ok();
        self.kpageflags = File::open(self.root.path("proc/kpageflags")).ok();
        Ok(())
    }

    /// Page placement changed (pages were moved): query again.
    pub fn forget_pages(&self) {
        self.pages.borrow_mut().clear();
    }

    /// Rebuilds the view for the period ending at `now_ns` from its samples: mappings,
    /// threads and free memory read again, the samples' pages queried in one batch, unknown
    /// page nodes, CPU nodes and sources filled in, node traffic and thread counters
    /// accumulated (each sample counts `period` events).
    pub fn refresh(
        &mut self,
        now_ns: u64,
        records: &[Record],
        period: u64,
    ) -> Result<WindowStats, Error> {
        self.read_process()?;
        self.read_perf();
        self.forget_pages();
        self.now_ns = now_ns;
        let task = self.task();
        let addrs: Vec<u64> = records.iter().map(|r| r.sample.addr).collect();
        self.prefetch(&addrs)?;
        let n = self.topo.num_nodes;
        let mut stats = WindowStats {
            served: vec![vec![0; n]; n],
            ..Default::default()
        };
        self.samples.clear();
        for r in records {
            stats.samples += 1;
            let mut s = r.sample;
            s.task = task;
            let cpu_node = r
                .cpu_node()
                .or_else(|| self.topo.cpu_node.get(&s.cpu.0).copied());
            let page = self.lookup(s.addr);
            let page_node = r.page_node().or(page.map(|p| p.node));
            let (Some(cpu_node), Some(page_node)) = (cpu_node, page_node) else {
                stats.unplaced_samples += 1;
                continue;
            };
            if cpu_node.index() >= n || page_node.index() >= n {
                stats.unplaced_samples += 1;
                continue;
            }
            s.cpu_node = cpu_node;
            s.page_node = page_node;
            if r.page_size().is_none() {
                s.page_size = page.map_or(PageSize::Base4K, |p| p.size);
            }
            let local = cpu_node == page_node;
            s.source = match r.source() {
                Some(src) => src,
                // no data source (software events, plain perf record -d): counted as DRAM
                None if local => DataSource::LocalDram,
                None => DataSource::RemoteDram,
            };
            let c = self.counters.entry(s.thread).or_default();
            if s.write {
                c.stores += period;
            } else {
                c.loads += period;
            }
            if s.source.is_dram() {
                stats.dram_samples += 1;
                stats.served[page_node.index()][cpu_node.index()] += period;
                self.traffic.served[page_node.index()][cpu_node.index()] += period;
                c.llc_misses += period;
                if !local && !s.write {
                    c.remote_loads += period;
                }
            }
            self.samples.push(s);
        }
        Ok(stats)
    }

    /// Queries the 4 KiB pages of `addrs` not known yet, in one batched move_pages call.
    fn prefetch(&self, addrs: &[u64]) -> Result<(), Error> {
        let mut want: Vec<u64> = {
            let cache = self.pages.borrow();
            addrs
                .iter()
                .map(|a| a & !(BASE - 1))
                .filter(|p| !cache.contains_key(p))
                .collect()
        };
        want.sort_unstable();
        want.dedup();
        if want.is_empty() {
            return Ok(());
        }
        let as_usize: Vec<usize> = want.iter().map(|a| *a as usize).collect();
        let status = move_pages_query(self.pid, &as_usize, &MovePagesOptions::default())?;
        let mut q = self.queries.get();
        q.syscalls += as_usize
            .len()
            .div_ceil(numalab_linux::syscalls::DEFAULT_MOVE_BATCH_PAGES)
            as u64;
        q.pages += as_usize.len() as u64;
        self.queries.set(q);
        let mut cache = self.pages.borrow_mut();
        for (addr, st) in want.iter().zip(status) {
            let info = match st {
                PageStatus::OnNode(node) => {
                    let size = self.page_size(*addr);
                    Some(PageInfo {
                        start: size.align_down(*addr),
                        size,
                        node,
                    })
                }
                _ => None,
            };
            cache.insert(*addr, info);
        }
        Ok(())
    }

    fn lookup(&self, addr: u64) -> Option<PageInfo> {
        let key = addr & !(BASE - 1);
        if let Some(v) = self.pages.borrow().get(&key) {
            return *v;
        }
        // a page the period's samples did not name: policies walk ranges page by page (the
        // NUMA manager's off-home scan), so the query reads ahead up to READ_AHEAD pages of
        // the same mapping in one call (an error, e.g. the process exited, reads as "not
        // present")
        let end = self
            .vmas
            .iter()
            .find(|v| v.start <= key && key < v.end)
            .map_or(key + BASE, |v| v.end.min(key + READ_AHEAD * BASE));
        let ahead: Vec<u64> = (key..end).step_by(BASE as usize).collect();
        if self.prefetch(&ahead).is_err() {
            return None;
        }
        self.pages.borrow().get(&key).copied().flatten()
    }

    /// The size of the page mapping `addr`: hugetlb mappings say it; a THP shows in
    /// kpageflags (needs root for the PFN in pagemap); anything else is taken as 4 KiB.
    fn page_size(&self, addr: u64) -> PageSize {
        let Some(vma) = self.vmas.iter().find(|v| v.start <= addr && addr < v.end) else {
            return PageSize::Base4K;
        };
        if let Some(h) = vma.hugetlb {
            return h;
        }
        if !vma.thp {
            return PageSize::Base4K;
        }
        let huge = PageSize::Huge2M;
        let aligned = huge.align_down(addr);
        if aligned < vma.start || aligned + huge.bytes() > vma.end {
            return PageSize::Base4K;
        }
        match kpage_is_thp(self.pagemap.as_ref(), self.kpageflags.as_ref(), addr) {
            Some(true) => huge,
            _ => PageSize::Base4K,
        }
    }
}

/// KPF_THP of the page mapping `addr`, when pagemap gives its PFN (root only).
fn kpage_is_thp(pagemap: Option<&File>, kpageflags: Option<&File>, addr: u64) -> Option<bool> {
    const PRESENT: u64 = 1 << 63;
    const PFN_MASK: u64 = (1 << 55) - 1;
    const KPF_THP: u64 = 1 << 22;
    let mut b = [0u8; 8];
    pagemap?.read_exact_at(&mut b, addr / BASE * 8).ok()?;
    let e = u64::from_le_bytes(b);
    let pfn = e & PFN_MASK;
    if e & PRESENT == 0 || pfn == 0 {
        return None;
    }
    kpageflags?.read_exact_at(&mut b, pfn * 8).ok()?;
    Some(u64::from_le_bytes(b) & KPF_THP != 0)
}

/// Threads of `pid` and the CPU each last ran on (`/proc/PID/task/TID/stat`, field 39).
pub fn read_threads(pid: i32, topo: &HostTopology) -> Result<Vec<ThreadInfo>, Error> {
    let dir = format!("/proc/{pid}/task");
    let rd = std::fs::read_dir(&dir).map_err(|e| Error(format!("{dir}: {e}")))?;
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // a thread may exit between the listing and the read
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some(cpu) = stat_processor(&stat) else {
            continue;
        };
        let node = topo.cpu_node.get(&cpu).copied().unwrap_or(NodeId(0));
        out.push(ThreadInfo {
            thread: ThreadId(tid),
            task: TaskId(pid as u32),
            cpu: CpuId(cpu),
            node,
        });
    }
    out.sort_by_key(|t| t.thread);
    Ok(out)
}

/// Field 39 (processor) of a stat line; the command name may hold spaces and parentheses,
/// so fields are counted after the last ')'.
pub fn stat_processor(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // field 3 (state) is the first after ')': processor is 36 further
    rest.split_whitespace().nth(36)?.parse().ok()
}

impl MemoryView for LinuxView {
    fn num_nodes(&self) -> usize {
        self.topo.num_nodes
    }

    fn distance(&self, from: NodeId, to: NodeId) -> u32 {
        self.topo
            .distance
            .get(from.index())
            .and_then(|r| r.get(to.index()))
            .copied()
            .unwrap_or(255)
    }

    fn now_ns(&self) -> u64 {
        self.now_ns
    }

    fn page(&self, task: TaskId, addr: u64) -> Option<PageInfo> {
        if task != self.task() {
            return None;
        }
        self.lookup(addr)
    }

    fn regions(&self) -> Vec<RegionInfo> {
        self.regions.clone()
    }

    fn threads(&self) -> Vec<ThreadInfo> {
        self.threads.clone()
    }

    fn thread_counters(&self, thread: ThreadId) -> ThreadCounters {
        let mut c = self.counters.get(&thread).copied().unwrap_or_default();
        // hardware counts replace the sample-derived estimate where perf counts them
        for (f, v) in self.hw.get(&thread).into_iter().flatten() {
            match f {
                Field::Instructions => c.instructions = *v,
                Field::Cycles => c.cycles = *v,
                Field::LlcMisses => c.llc_misses = *v,
                Field::PageWalks => c.page_walks = *v,
            }
        }
        c
    }

    fn node_traffic(&self) -> NodeTraffic {
        self.traffic.clone()
    }

    fn samples(&self) -> &[AccessSample] {
        &self.samples
    }

    fn free_bytes(&self, node: NodeId) -> u64 {
        // a node without memory (has_memory) can take nothing
        if !self.topo.has_memory.contains(node) {
            return 0;
        }
        self.free.get(node.index()).copied().unwrap_or(0)
    }

    fn node_cpus(&self, node: NodeId) -> Vec<CpuId> {
        self.topo
            .cpus
            .get(node.index())
            .cloned()
            .unwrap_or_default()
    }

    fn controller_peak_bytes_per_s(&self, node: NodeId) -> Option<f64> {
        self.topo
            .peak_bytes_per_s
            .get(node.index())
            .copied()
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processor_field_after_odd_command_names() {
        let mut fields: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        fields[0] = "S".into();
        let line = format!("123 (a b) c)) {}", fields.join(" "));
        assert_eq!(stat_processor(&line), Some(39));
        assert_eq!(stat_processor("1 (x) S 2"), None);
    }
}
