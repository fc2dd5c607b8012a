//! Where the sampled pages are: periodic `move_pages` queries of every page a sample touched,
//! the per-page history they give (so each sample gets its page's node), placement snapshots
//! for the placement stream, and `/proc/PID/numa_maps` totals.
//!
//! A sample at time t takes the node its page had at the latest query at or before t, else the
//! first query after t. For page-fault samples (taken before the page exists) that is the
//! first query after the fault: where the fault put the page.

use numalab_analyze::{Mapping, MappingKind, PlacementEntry};
use numalab_core::{NodeId, PageSize, TaskId};
use numalab_linux::{MovePagesOptions, PageStatus, Pid, SysRoot};
use std::collections::{BTreeMap, HashMap, HashSet};

const PAGE: u64 = 4096;

/// One process's sampled pages.
#[derive(Default)]
struct Task {
    /// Page address → node changes `(time_ns, node)`, oldest first (only changes are kept).
    history: HashMap<u64, Vec<(u64, u16)>>,
    /// Pages in the order they were first sampled (the query order).
    order: Vec<u64>,
    /// Pages sampled since the last query.
    fresh: Vec<u64>,
    /// Where the round-robin over old pages goes on.
    cursor: usize,
    /// The process is gone (ESRCH): no more queries.
    gone: bool,
    /// Bytes per node from the last numa_maps read.
    numa_maps_bytes: BTreeMap<NodeId, u64>,
    /// Mappings from /proc/PID/maps, deduplicated.
    mappings: Vec<Mapping>,
    mapping_keys: HashSet<(u64, u64, String)>,
}

/// Outcome counts of the queries.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct QueryCounts {
    pub snapshots: u64,
    pub pages_queried: u64,
    pub on_node: u64,
    pub not_present: u64,
    pub other: u64,
}

/// The placement tracker of a recording.
pub struct Snapshotter {
    tasks: HashMap<u32, Task>,
    /// At most this many pages queried per process per snapshot: new pages first, then old
    /// pages round robin (so a process with millions of sampled pages is still followed).
    pub max_pages: usize,
    pub counts: QueryCounts,
    /// Some page changed since the last placement snapshot written.
    dirty: bool,
    /// Some page changed since the last `query` returned.
    changed: bool,
    /// Pages still to query in the snapshot begun, per process, and its time.
    pending: Vec<(u32, Vec<u64>)>,
    pending_at: u64,
}

impl Snapshotter {
    pub fn new(max_pages: usize) -> Snapshotter {
        Snapshotter {
            tasks: HashMap::new(),
            max_pages: max_pages.max(1),
            counts: QueryCounts::default(),
            dirty: false,
            changed: false,
            pending: Vec::new(),
            pending_at: 0,
        }
    }

    /// A sample touched `addr` of process `pid`.
    pub fn note(&mut self, pid: u32, addr: u64) {
        let page = addr & !(PAGE - 1);
        let t = self.tasks.entry(pid).or_default();
        if let std::collections::hash_map::Entry::Vacant(e) = t.history.entry(page) {
            e.insert(Vec::new());
            t.order.push(page);
            t.fresh.push(page);
        }
    }

    /// Processes seen so far.
    pub fn pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.tasks.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Adds `pid` so that its mappings and numa_maps are read even before any sample.
    pub fn track(&mut self, pid: u32) {
        self.tasks.entry(pid).or_default();
    }

    /// Distinct pages sampled.
    pub fn pages(&self) -> usize {
        self.tasks.values().map(|t| t.history.len()).sum()
    }

    /// Queries the nodes of sampled pages of every live process (CLOCK_MONOTONIC, the
    /// samples' clock); also reads numa_maps and maps. Returns whether anything changed.
    pub fn query(&mut self, now_ns: u64) -> bool {
        self.begin(now_ns, None);
        while self.step(usize::MAX) {}
        std::mem::take(&mut self.changed)
    }

    /// [`query`](Self::query) for one process (at its exit: the others are not due).
    pub fn query_pid(&mut self, now_ns: u64, pid: u32) -> bool {
        self.track(pid);
        self.begin(now_ns, Some(pid));
        while self.step(usize::MAX) {}
        std::mem::take(&mut self.changed)
    }

    /// Starts a snapshot: reads numa_maps and maps, and lists the pages to query (new ones
    /// first, then old ones round robin, `max_pages` per process). [`step`](Self::step) then
    /// queries them a batch at a time, so that the caller can read the rings in between.
    pub fn begin(&mut self, now_ns: u64, only: Option<u32>) {
        self.counts.snapshots += 1;
        self.pending.clear();
        self.pending_at = now_ns;
        let root = SysRoot::host();
        for (&pid, t) in self.tasks.iter_mut() {
            if t.gone || only.is_some_and(|o| o != pid) {
                continue;
            }
            let mut pages: Vec<u64> = std::mem::take(&mut t.fresh);
            pages.truncate(self.max_pages);
            let room = self.max_pages.saturating_sub(pages.len());
            let old = t.order.len().saturating_sub(pages.len());
            if room > 0 && old > 0 {
                let fresh: HashSet<u64> = pages.iter().copied().collect();
                let n = room.min(old);
                let mut taken = 0;
                let mut steps = 0;
                while taken < n && steps < t.order.len() {
                    let p = t.order[t.cursor % t.order.len()];
                    t.cursor = (t.cursor + 1) % t.order.len();
                    steps += 1;
                    if !fresh.contains(&p) {
                        pages.push(p);
                        taken += 1;
                    }
                }
            }
            if let Ok(entries) = numalab_linux::numa_maps::read_numa_maps(&root, Pid(pid as i32)) {
                t.numa_maps_bytes = numalab_linux::numa_maps::bytes_per_node(&entries);
            }
            read_maps(pid, t);
            if !pages.is_empty() {
                self.pending.push((pid, pages));
            }
        }
    }

    /// Queries up to `budget` pages of the snapshot begun; true while pages remain.
    pub fn step(&mut self, budget: usize) -> bool {
        let Some((pid, mut pages)) = self.pending.pop() else {
            return false;
        };
        if pages.len() > budget {
            let rest = pages.split_off(budget);
            self.pending.push((pid, rest));
        }
        let now_ns = self.pending_at;
        let t = self
            .tasks
            .get_mut(&pid)
            .expect("pending pages of a known task");
        let addrs: Vec<usize> = pages.iter().map(|&p| p as usize).collect();
        let status = match numalab_linux::move_pages_query(
            Pid(pid as i32),
            &addrs,
            &MovePagesOptions::default(),
        ) {
            Ok(s) => s,
            Err(_) => {
                // ESRCH (exited) or EPERM: nothing more to learn about this process.
                if std::fs::metadata(format!("/proc/{pid}")).is_err() {
                    t.gone = true;
                    self.pending.retain(|(p, _)| *p != pid);
                }
                return !self.pending.is_empty();
            }
        };
        self.counts.pages_queried += pages.len() as u64;
        for (&p, s) in pages.iter().zip(&status) {
            match s {
                PageStatus::OnNode(n) => {
                    self.counts.on_node += 1;
                    let h = t.history.get_mut(&p).expect("queried pages are known");
                    if h.last().map(|x| x.1) != Some(n.0) {
                        h.push((now_ns, n.0));
                        self.changed = true;
                        self.dirty = true;
                    }
                }
                PageStatus::NotPresent => self.counts.not_present += 1,
                _ => self.counts.other += 1,
            }
        }
        !self.pending.is_empty()
    }

    /// The node of `pid`'s page holding `addr` at `time_ns` (see the module docs).
    pub fn node_at(&self, pid: u32, addr: u64, time_ns: u64) -> Option<NodeId> {
        let h = self.tasks.get(&pid)?.history.get(&(addr & !(PAGE - 1)))?;
        let i = h.partition_point(|x| x.0 <= time_ns);
        let (_, n) = if i == 0 { *h.first()? } else { h[i - 1] };
        Some(NodeId(n))
    }

    /// The current placement of every page with a known node, as runs of consecutive 4 KiB
    /// pages on one node, stamped `time_ns`; None when nothing changed since the last call.
    pub fn placement_if_changed(&mut self, time_ns: u64) -> Option<Vec<PlacementEntry>> {
        if !std::mem::take(&mut self.dirty) {
            return None;
        }
        let mut out = Vec::new();
        for pid in self.pids() {
            let t = &self.tasks[&pid];
            let mut pages: Vec<(u64, u16)> = t
                .history
                .iter()
                .filter_map(|(&p, h)| h.last().map(|x| (p, x.1)))
                .collect();
            pages.sort_unstable();
            for (p, n) in pages {
                match out.last_mut() {
                    Some(e @ PlacementEntry { .. })
                        if e.task == TaskId(pid)
                            && e.node == NodeId(n)
                            && e.end() == p
                            && e.pages < u32::MAX =>
                    {
                        e.pages += 1
                    }
                    _ => out.push(PlacementEntry {
                        time_ns,
                        task: TaskId(pid),
                        start: p,
                        page_size: PageSize::Base4K,
                        pages: 1,
                        node: NodeId(n),
                    }),
                }
            }
        }
        Some(out)
    }

    /// Bytes per node of every tracked process, from the last numa_maps read.
    pub fn numa_maps_bytes(&self) -> BTreeMap<NodeId, u64> {
        let mut m = BTreeMap::new();
        for t in self.tasks.values() {
            for (n, b) in &t.numa_maps_bytes {
                *m.entry(*n).or_insert(0) += b;
            }
        }
        m
    }

    /// Mappings read from /proc/PID/maps, every process.
    pub fn mappings(&self) -> Vec<Mapping> {
        let mut v = Vec::new();
        for pid in self.pids() {
            v.extend(self.tasks[&pid].mappings.iter().cloned());
        }
        v
    }
}

/// Reads /proc/PID/maps into the task's mapping list (the brk heap and the stacks have no
/// perf MMAP record, so this is where they come from).
fn read_maps(pid: u32, t: &mut Task) {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return;
    };
    for m in parse_maps(pid, &text) {
        let key = (m.start, m.len_bytes, m.name.clone());
        if t.mapping_keys.insert(key) {
            t.mappings.push(m);
        }
    }
}

/// `/proc/PID/maps` lines → mappings.
pub fn parse_maps(pid: u32, text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.splitn(6, ' ');
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let offset = f.next().and_then(|o| u64::from_str_radix(o, 16).ok());
        let _dev = f.next();
        let _inode = f.next();
        let name = f.next().unwrap_or("").trim().to_string();
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
            continue;
        };
        if b <= a {
            continue;
        }
        let exec = perms.as_bytes().get(2) == Some(&b'x');
        out.push(Mapping {
            task: pid,
            start: a,
            len_bytes: b - a,
            kind: MappingKind::classify(&name, exec),
            name,
            pgoff: offset.unwrap_or(0),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_lookup_prefers_latest_before_then_first_after() {
        let mut s = Snapshotter::new(10);
        s.note(1, 0x1234);
        let t = s.tasks.get_mut(&1).unwrap();
        t.history.insert(0x1000, vec![(100, 0), (200, 2)]);
        assert_eq!(s.node_at(1, 0x1fff, 50), Some(NodeId(0)));
        assert_eq!(s.node_at(1, 0x1000, 150), Some(NodeId(0)));
        assert_eq!(s.node_at(1, 0x1000, 200), Some(NodeId(2)));
        assert_eq!(s.node_at(1, 0x2000, 200), None);
        assert_eq!(s.node_at(2, 0x1000, 200), None);
    }

    #[test]
    fn placement_runs_merge_neighbours() {
        let mut s = Snapshotter::new(10);
        s.track(7);
        let t = s.tasks.get_mut(&7).unwrap();
        for (p, n) in [(0x1000, 1), (0x2000, 1), (0x3000, 2), (0x5000, 2)] {
            t.history.insert(p, vec![(5, n)]);
        }
        s.dirty = true;
        let e = s.placement_if_changed(9).unwrap();
        let runs: Vec<(u64, u32, u16)> = e.iter().map(|e| (e.start, e.pages, e.node.0)).collect();
        assert_eq!(runs, vec![(0x1000, 2, 1), (0x3000, 1, 2), (0x5000, 1, 2)]);
        assert!(s.placement_if_changed(10).is_none());
    }

    #[test]
    fn maps_lines() {
        let m = parse_maps(
            3,
            "55d0-55e0 r-xp 00000000 08:01 123 /usr/bin/x\n\
             7f00-7f10 rw-p 00000000 00:00 0 \n\
             7ffc-7ffd rw-p 00000000 00:00 0                          [stack]\n",
        );
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].kind, MappingKind::Binary);
        assert_eq!(m[1].kind, MappingKind::Anonymous);
        assert_eq!(m[2].kind, MappingKind::Stack);
        assert_eq!(m[2].len_bytes, 1);
    }
}
