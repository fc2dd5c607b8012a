//! Memory controllers and links: the contention model (docs/model.md, "Memory system").
//!
//! Traffic of one epoch sets the latencies of the next (DESIGN.md). A controller's latency
//! follows its bandwidth-latency curve at the utilisation its demand settles at; a link adds
//! `hop_ns × shape(u)` (reference/machines.md §5.3). The curves end at the resource's
//! capacity: load offered above it is not served faster, it waits. Every resource keeps a
//! **backlog** of bytes offered beyond what it could serve (a fluid queue): it serves at most
//! its capacity in an epoch, and exactly its capacity while a backlog is left. The requesters
//! whose traffic went into a backlog cannot have their data before it is served, so
//! [`MemSys::end_epoch`] returns each resource's backlog wait ([`EpochEnd`]) and
//! [`MemSys::requester_waits`] how long after the epoch's end each requesting thread must
//! wait, by its share of the lines; the engine holds those threads back.
//! Nothing feeds on its own output: the backlog grows by at most one epoch's excess and its
//! requesters stop issuing until it is served, so the wait cannot grow geometrically, and an
//! epoch of any length delivers the same bytes per unit of time.

use numalab_core::NodeId;
use numalab_machine::{Curve, Machine, Routes};

/// Time constant of the smoothed demand that the utilisations settle from, ns. An epoch
/// weighs `1 − exp(−epoch / τ)`, the same smoothing in simulated time whatever the epoch
/// length: a few microseconds of traffic (a few hundred lines per controller) are too few to
/// set a latency from, and a fraction of the 20 µs default epoch follows phase changes (E).
const DEMAND_TAU_NS: f64 = 10_000.0;

/// What closing an epoch gives the engine.
pub struct EpochEnd {
    /// Controller bytes offered in the epoch, per node (for timelines).
    pub ctrl_bytes: Vec<f64>,
    /// How long after the epoch's end each controller's backlog takes to serve (0: none).
    pub ctrl_wait_ns: Vec<f64>,
    /// The same per link slot.
    pub link_wait_ns: Vec<f64>,
}

impl EpochEnd {
    /// Whether any resource was left with a backlog.
    pub fn any_wait(&self) -> bool {
        self.ctrl_wait_ns
            .iter()
            .chain(&self.link_wait_ns)
            .any(|w| *w > 0.0)
    }
}

/// The memory lines one requester (a thread) put on the memory system in an epoch, per
/// memory node `d`: reads (load misses, RFOs) `[d]`, writes (write-backs, zeroing) `[n + d]`,
/// directory writes its reads caused `[2n + d]`.
pub fn requester_lines(n: usize) -> Vec<u64> {
    vec![0; 3 * n]
}

pub struct MemSys {
    n: usize,
    line_bytes: f64,
    /// Per node: curve, capacity in bytes per ns.
    curves: Vec<Curve>,
    ctrl_bytes_per_ns: Vec<f64>,
    /// Per link direction slot: capacity in bytes per ns, hop latency, normalised shape.
    link_bytes_per_ns: Vec<f64>,
    link_hop_ns: Vec<f64>,
    link_shape: Curve,
    /// Link bytes per payload byte of a bulk transfer on its route (copies, zeroing).
    bulk_wire_factor: f64,
    /// Slots crossed by data of a read from CPU node s to memory node d (direction d -> s),
    /// and by a write / write-back (direction s -> d): `read_slots[s * n + d]`.
    read_slots: Vec<Vec<u16>>,
    write_slots: Vec<Vec<u16>>,
    /// The link bytes per slot of one line read from CPU node s of memory node d, and of one
    /// line written back: the coherence protocol's messages (numalab_machine::coherence).
    /// Empty for a pair whose transfers cross no link (a local one, unless the protocol
    /// broadcasts probes or snoops: `ht-broadcast`, `qpi-snoop`).
    read_wire: Vec<Vec<(u16, f64)>>,
    write_wire: Vec<Vec<(u16, f64)>>,
    /// The slots of `read_wire[i]` and `write_wire[i]`, each once.
    pair_slots: Vec<Vec<u16>>,
    /// Idle latency each link of `read_slots` adds at its position on the route (a link may
    /// add less as a second hop, e.g. Barcelona's +30 then +25 ns).
    read_hop_ns: Vec<Vec<f64>>,
    /// Per link slot: the node pairs `s * n + d` whose read or write route crosses it,
    /// ascending (whose latencies make up the path a slot's requesters see).
    slot_pairs: Vec<Vec<usize>>,

    // state carried across epochs
    /// Settled utilisation (0..1) per controller and link slot: where the curves are read
    /// (`settle`), and what the results report as average and peak utilisation.
    ctrl_util: Vec<f64>,
    link_util: Vec<f64>,
    /// Bytes offered beyond capacity and not yet served, per controller and link slot.
    ctrl_backlog_bytes: Vec<f64>,
    link_backlog_bytes: Vec<f64>,
    /// Bytes offered but not yet arrived at the queue (`spread`), per controller and link slot.
    ctrl_arriving_bytes: Vec<f64>,
    link_arriving_bytes: Vec<f64>,
    /// Smoothed demand (utilisation × latency, ns) per controller and link slot.
    ctrl_demand: Vec<f64>,
    link_demand: Vec<f64>,
    /// Latency of a DRAM access from CPU node s to memory on node d this epoch: `lat[s*n+d]`.
    lat_ns: Vec<f64>,
    /// Same, without queueing (idle controller and links).
    idle_lat_ns: Vec<f64>,

    // counters of the current epoch
    /// Line reads from CPU node s to memory node d: `epoch_reads[s * n + d]`. The hot path
    /// only counts; `end_epoch` turns the counts into controller bytes and `served` (a read
    /// was three counters and a loop before: ~50 instructions per LLC miss, about 4 % of the
    /// simulator's instructions on CG class B).
    epoch_reads: Vec<u64>,
    /// Controller bytes of the epoch other than the reads above (write-backs, copies).
    /// Integers: every amount is whole bytes, so the total is exact in any order.
    epoch_ctrl_bytes: Vec<u64>,
    epoch_link_bytes: Vec<f64>,
    /// The part of the two above that zeroed huge pages (`zero_fill`): it joins the queues
    /// at once rather than spread, as the faulting thread waits for it as it goes.
    epoch_zero_ctrl_bytes: Vec<u64>,
    epoch_zero_link_bytes: Vec<f64>,
    /// Write-backs (and zeroing, and copies' lines) from CPU node s to memory node d this
    /// epoch: `epoch_writes[s * n + d]` (which requesters a backlog holds back).
    epoch_writes: Vec<u64>,
    // cumulative counters (reads of the current epoch are added by `end_epoch`; the
    // accessors below include them)
    ctrl_read_bytes: Vec<u64>,
    pub ctrl_write_bytes: Vec<u64>,
    /// Of `ctrl_write_bytes`, the lines written to update the memory directory.
    pub directory_write_bytes: Vec<u64>,
    /// DRAM requests served by controller `to` for CPU node `from`: `served[to][from]`.
    served: Vec<Vec<u64>>,
    pub link_bytes: Vec<f64>,
    /// Peak smoothed utilisation seen per controller and per link slot.
    pub ctrl_util_max: Vec<f64>,
    pub link_util_max: Vec<f64>,
}

impl MemSys {
    pub fn new(m: &Machine, routes: &Routes) -> MemSys {
        let n = m.topology.num_nodes();
        let slots = m.links.len() * 2;
        let mut read_slots = vec![Vec::new(); n * n];
        let mut write_slots = vec![Vec::new(); n * n];
        let mut read_hop_ns = vec![Vec::new(); n * n];
        let mut read_wire = vec![Vec::new(); n * n];
        let mut write_wire = vec![Vec::new(); n * n];
        let as_slots = |w: Vec<(usize, f64)>| -> Vec<(u16, f64)> {
            w.into_iter().map(|(l, b)| (l as u16, b)).collect()
        };
        for s in 0..n {
            for d in 0..n {
                let (sn, dn) = (NodeId(s as u16), NodeId(d as u16));
                read_wire[s * n + d] = as_slots(m.read_wire(routes, sn, dn));
                write_wire[s * n + d] = as_slots(m.write_back_wire(routes, sn, dn));
                // data of a read travels from the owner d to the requester s
                read_slots[s * n + d] = routes
                    .route(dn, sn)
                    .iter()
                    .map(|l| l.slot() as u16)
                    .collect();
                read_hop_ns[s * n + d] = routes
                    .route(dn, sn)
                    .iter()
                    .enumerate()
                    .map(|(pos, l)| m.links[l.link].hop_ns_at(pos))
                    .collect();
                write_slots[s * n + d] = routes
                    .route(sn, dn)
                    .iter()
                    .map(|l| l.slot() as u16)
                    .collect();
            }
        }
        let mut link_bytes_per_ns = vec![0.0; slots];
        let mut link_hop_ns = vec![0.0; slots];
        for (i, l) in m.links.iter().enumerate() {
            for dir in 0..2 {
                link_bytes_per_ns[i * 2 + dir] = l.gbps_per_dir; // GB/s == bytes/ns
                link_hop_ns[i * 2 + dir] = l.hop_ns;
            }
        }
        let pair_slots: Vec<Vec<u16>> = read_wire
            .iter()
            .zip(&write_wire)
            .map(|(r, w)| {
                let mut v: Vec<u16> = Vec::new();
                for &(l, _) in r.iter().chain(w) {
                    if !v.contains(&l) {
                        v.push(l);
                    }
                }
                v
            })
            .collect();
        let mut slot_pairs = vec![Vec::new(); slots];
        for (i, on) in pair_slots.iter().enumerate() {
            for (l, pairs) in slot_pairs.iter_mut().enumerate() {
                if on.contains(&(l as u16)) {
                    pairs.push(i);
                }
            }
        }
        let mut ms = MemSys {
            n,
            line_bytes: 64.0,
            curves: m.nodes.iter().map(|h| h.curve.clone()).collect(),
            ctrl_bytes_per_ns: m.nodes.iter().map(|h| h.ctrl_peak_gbps).collect(),
            link_bytes_per_ns,
            link_hop_ns,
            link_shape: m.link_shape.clone(),
            bulk_wire_factor: m.bulk_wire_factor(),
            read_slots,
            write_slots,
            read_wire,
            write_wire,
            pair_slots,
            read_hop_ns,
            slot_pairs,
            ctrl_util: vec![0.0; n],
            link_util: vec![0.0; slots],
            ctrl_backlog_bytes: vec![0.0; n],
            link_backlog_bytes: vec![0.0; slots],
            ctrl_arriving_bytes: vec![0.0; n],
            link_arriving_bytes: vec![0.0; slots],
            ctrl_demand: vec![0.0; n],
            link_demand: vec![0.0; slots],
            lat_ns: vec![0.0; n * n],
            idle_lat_ns: vec![0.0; n * n],
            epoch_reads: vec![0; n * n],
            epoch_ctrl_bytes: vec![0; n],
            epoch_link_bytes: vec![0.0; slots],
            epoch_zero_ctrl_bytes: vec![0; n],
            epoch_zero_link_bytes: vec![0.0; slots],
            epoch_writes: vec![0; n * n],
            ctrl_read_bytes: vec![0; n],
            ctrl_write_bytes: vec![0; n],
            directory_write_bytes: vec![0; n],
            served: vec![vec![0; n]; n],
            link_bytes: vec![0.0; slots],
            ctrl_util_max: vec![0.0; n],
            link_util_max: vec![0.0; slots],
        };
        ms.recompute_latencies();
        ms
    }

    fn recompute_latencies(&mut self) {
        let n = self.n;
        let shape: Vec<f64> = self
            .link_util
            .iter()
            .map(|u| self.link_shape.at(u.min(1.0)))
            .collect();
        for s in 0..n {
            for d in 0..n {
                let i = s * n + d;
                let ctrl = self.curves[d].at(self.ctrl_util[d].min(1.0));
                let (mut links, mut idle_links) = (0.0, 0.0);
                for (&l, &hop) in self.read_slots[i].iter().zip(&self.read_hop_ns[i]) {
                    // hop_ns × shape(u) = hop_ns + queue_l(u) (reference/machines.md §5.3)
                    links += hop * shape[l as usize];
                    idle_links += hop;
                }
                self.lat_ns[i] = ctrl + links;
                self.idle_lat_ns[i] = self.curves[d].idle() + idle_links;
            }
        }
    }

    /// Latency of a DRAM read from CPU node `s` to memory on node `d` in this epoch.
    #[inline]
    pub fn read_latency_ns(&self, s: usize, d: usize) -> f64 {
        self.lat_ns[s * self.n + d]
    }

    /// Idle latency (no queueing) from `s` to `d`.
    #[inline]
    pub fn idle_latency_ns(&self, s: usize, d: usize) -> f64 {
        self.idle_lat_ns[s * self.n + d]
    }

    /// Account one line read from memory node `d` by CPU node `s` (a load miss or an RFO).
    #[inline(always)]
    pub fn read(&mut self, s: usize, d: usize) {
        let i = s * self.n + d;
        self.epoch_reads[i] += 1;
        if !self.read_wire[i].is_empty() {
            // the links' bytes stay a running f64 sum in access order (as before, so that
            // results do not change); a local read crosses no link unless probes or snoops
            // are broadcast
            self.read_links(i);
        }
    }

    #[inline(never)]
    fn read_links(&mut self, i: usize) {
        for &(l, bytes) in &self.read_wire[i] {
            self.epoch_link_bytes[l as usize] += bytes;
        }
    }

    /// Line reads served by each controller `to` for each CPU node `from`, so far:
    /// `[to][from]`.
    pub fn served(&self) -> Vec<Vec<u64>> {
        let n = self.n;
        (0..n)
            .map(|d| {
                (0..n)
                    .map(|s| self.served[d][s] + self.epoch_reads[s * n + d])
                    .collect()
            })
            .collect()
    }

    /// Bytes read from controller `d` so far (line reads and copies).
    pub fn ctrl_read_bytes(&self, d: usize) -> u64 {
        let n = self.n;
        let pending: u64 = (0..n).map(|s| self.epoch_reads[s * n + d]).sum();
        self.ctrl_read_bytes[d] + pending * self.line_bytes as u64
    }

    /// Account one dirty line written back from node `s`'s caches to memory node `d`.
    #[inline]
    pub fn write_back(&mut self, s: usize, d: usize) {
        let b = self.line_bytes;
        self.epoch_ctrl_bytes[d] += b as u64;
        self.ctrl_write_bytes[d] += b as u64;
        self.epoch_writes[s * self.n + d] += 1;
        for &(l, bytes) in &self.write_wire[s * self.n + d] {
            self.epoch_link_bytes[l as usize] += bytes;
        }
    }

    /// Account the write with which memory node `d` updates a line's directory state after a
    /// remote read (hw/memory_directory.rs): a line written to `d`'s controller by its own
    /// home agent, on no link. The engine counts it as the reading thread's line, the
    /// reader that caused it (`requester_lines`).
    #[inline]
    pub fn directory_write(&mut self, d: usize) {
        let b = self.line_bytes as u64;
        self.epoch_ctrl_bytes[d] += b;
        self.ctrl_write_bytes[d] += b;
        self.directory_write_bytes[d] += b;
    }

    /// Account the zeroing of a freshly allocated folio of `bytes` on memory node `d` by a
    /// thread of CPU node `s` (docs/model.md, "OS model", fault cost): the clearing stores
    /// stream through the caches, which cannot hold a huge page, so its lines are written back
    /// as it is cleared: write traffic to `d` (and on the route s → d). The engine hands each
    /// epoch the bytes the fault wrote in it (`engine::write_zeroing`, an even rate over the
    /// fault's time). Its lines count as the requester's, so a node whose threads zero faster
    /// than the controller writes waits for it as for any backlog. The bytes join the queues
    /// as written, not spread again over the next epochs (`spread`): the fault's rate already
    /// evens them out, and its thread waits only for the backlogs of epochs it wrote in.
    pub fn zero_fill(&mut self, s: usize, d: usize, bytes: u64) {
        self.epoch_ctrl_bytes[d] += bytes;
        self.epoch_zero_ctrl_bytes[d] += bytes;
        self.ctrl_write_bytes[d] += bytes;
        self.epoch_writes[s * self.n + d] += bytes / self.line_bytes as u64;
        let wire = bytes as f64 * self.bulk_wire_factor;
        for &l in &self.write_slots[s * self.n + d] {
            self.epoch_link_bytes[l as usize] += wire;
            self.epoch_zero_link_bytes[l as usize] += wire;
        }
    }

    /// Account `bytes` of a migration copy run by a CPU of node `s`, in the current epoch:
    /// read from memory node `from` and written to `to`, with the wires of that many line
    /// reads and write-backs (the protocol's requests, probes and responses, as
    /// `read`/`write_back` put them). The engine hands each epoch the part of a copy its
    /// copier ran in it (`engine::write_copies`: a folio's copy at an even rate over the
    /// copier's time), so several copies at once add up and a copy that outruns a controller
    /// or a link waits for it like any traffic. The lines weigh the requesters' path latencies
    /// like write-backs (`epoch_writes`), and do not count as DRAM requests served (`served`):
    /// the LAR and the samples see the program's accesses only.
    pub fn copy(&mut self, s: usize, from: usize, to: usize, bytes: u64) {
        let n = self.n;
        let lines = bytes.div_ceil(self.line_bytes as u64);
        self.ctrl_read_bytes[from] += bytes;
        self.ctrl_write_bytes[to] += bytes;
        self.epoch_ctrl_bytes[from] += bytes;
        self.epoch_ctrl_bytes[to] += bytes;
        self.epoch_writes[s * n + from] += lines;
        self.epoch_writes[s * n + to] += lines;
        let k = lines as f64;
        for &(l, b) in &self.read_wire[s * n + from] {
            self.epoch_link_bytes[l as usize] += b * k;
        }
        for &(l, b) in &self.write_wire[s * n + to] {
            self.epoch_link_bytes[l as usize] += b * k;
        }
    }

    /// Close an epoch of `epoch_ns`: serve its traffic and the backlogs up to capacity, set
    /// the latencies of the next epoch, and say how long each requesting node's threads wait
    /// for the backlogs their traffic joined.
    pub fn end_epoch(&mut self, epoch_ns: f64) -> EpochEnd {
        let n = self.n;
        let line = self.line_bytes as u64;
        let weight = 1.0 - (-epoch_ns / DEMAND_TAU_NS).exp();
        // Lines each requesting node s put on each controller d (reads and write-backs):
        // `from[s * n + d]`, to weigh each resource's requesters' path latencies.
        let mut from = vec![0u64; n * n];
        let ctrl_bytes: Vec<f64> = (0..n)
            .map(|d| {
                let mut reads = 0;
                for s in 0..n {
                    let r = std::mem::take(&mut self.epoch_reads[s * n + d]);
                    let w = std::mem::take(&mut self.epoch_writes[s * n + d]);
                    from[s * n + d] = r + w;
                    self.served[d][s] += r;
                    reads += r;
                }
                self.ctrl_read_bytes[d] += reads * line;
                // whole bytes below 2^53: the same f64 as adding them one by one
                (std::mem::take(&mut self.epoch_ctrl_bytes[d]) + reads * line) as f64
            })
            .collect();
        // The same per link slot: the slots a pair's reads and write-backs load (the route
        // d → s, s → d, and the protocol's other messages).
        let slots = self.link_hop_ns.len();
        let mut link_from = vec![0u64; slots * n];
        for s in 0..n {
            for d in 0..n {
                let i = s * n + d;
                let w = from[i];
                if w == 0 {
                    continue;
                }
                for &l in &self.pair_slots[i] {
                    link_from[l as usize * n + s] += w;
                }
            }
        }
        // Serve: a resource serves at most capacity × epoch; the rest waits in its backlog.
        // The curves are then read at the utilisation the epoch's demand settles at (see
        // `settle`): the latency that the next epoch's threads will see.
        let mut ctrl_wait_ns = vec![0.0; n];
        for (d, &bytes) in ctrl_bytes.iter().enumerate() {
            let cap = self.ctrl_bytes_per_ns[d];
            let zero = std::mem::take(&mut self.epoch_zero_ctrl_bytes[d]) as f64;
            let arriving = spread(&mut self.ctrl_arriving_bytes[d], bytes - zero, weight) + zero;
            let (_, wait) = serve(&mut self.ctrl_backlog_bytes[d], arriving, cap, epoch_ns);
            ctrl_wait_ns[d] = wait;
            let offered = bytes / (cap * epoch_ns);
            let old = self.ctrl_util[d];
            let own = self.curves[d].at(old);
            // the rest of the requesters' path (links), weighted by their traffic
            let (mut rest, mut lines) = (0.0, 0u64);
            for s in 0..n {
                let i = s * n + d;
                rest += from[i] as f64 * (self.lat_ns[i] - own);
                lines += from[i];
            }
            let rest = if lines > 0 { rest / lines as f64 } else { 0.0 };
            let curve = &self.curves[d];
            let demand = smooth(&mut self.ctrl_demand[d], offered * (own + rest), weight);
            self.ctrl_util[d] = settle(demand, |v| curve.at(v) + rest);
            self.ctrl_util_max[d] = self.ctrl_util_max[d].max(self.ctrl_util[d]);
        }
        let mut link_wait_ns = vec![0.0; slots];
        for l in 0..slots {
            let bytes = std::mem::take(&mut self.epoch_link_bytes[l]);
            self.link_bytes[l] += bytes;
            let cap = self.link_bytes_per_ns[l];
            let zero = std::mem::take(&mut self.epoch_zero_link_bytes[l]);
            let arriving = spread(&mut self.link_arriving_bytes[l], bytes - zero, weight) + zero;
            let (_, wait) = serve(&mut self.link_backlog_bytes[l], arriving, cap, epoch_ns);
            link_wait_ns[l] = wait;
            let offered = bytes / (cap * epoch_ns);
            let hop = self.link_hop_ns[l];
            let own = hop * self.link_shape.at(self.link_util[l]);
            // each requesting node's mean path latency over its pairs routed across this
            // slot, weighted by its lines on the slot
            let (mut path, mut lines) = (0.0, 0u64);
            for pairs in self.slot_pairs[l].chunk_by(|a, b| a / n == b / n) {
                let by_s = link_from[l * n + pairs[0] / n];
                if by_s == 0 {
                    continue;
                }
                let sum: f64 = pairs.iter().map(|&i| self.lat_ns[i]).sum();
                path += by_s as f64 * sum / pairs.len() as f64;
                lines += by_s;
            }
            let path = if lines > 0 { path / lines as f64 } else { own };
            let rest = (path - own).max(0.0);
            let shape = &self.link_shape;
            let demand = smooth(&mut self.link_demand[l], offered * path, weight);
            self.link_util[l] = settle(demand, |v| rest + hop * shape.at(v));
            self.link_util_max[l] = self.link_util_max[l].max(self.link_util[l]);
        }
        self.recompute_latencies();
        EpochEnd {
            ctrl_bytes,
            ctrl_wait_ns,
            link_wait_ns,
        }
    }

    /// How long after the epoch's end each requester waits for the backlogs its lines joined
    /// (`requesters`: each one's CPU node and its lines, [`requester_lines`]). A backlog's
    /// wait falls on the requesters that made it, in proportion to their share of its lines:
    /// the largest requester waits it all (the resource is busy with its lines until then),
    /// one that sent a tenth as much a tenth of it; a requester waits for the longest such
    /// share of the controllers and links it used. Requesters are threads: a thread of a node
    /// whose other thread saturates a controller (zeroing a huge page at its fault, say)
    /// waits for its own lines' share only, not for the whole node's.
    pub fn requester_waits(&self, end: &EpochEnd, requesters: &[(usize, &[u64])]) -> Vec<f64> {
        let n = self.n;
        let slots = end.link_wait_ns.len();
        // each requester's lines on each controller, then on each link slot
        let per: Vec<Vec<u64>> = requesters
            .iter()
            .map(|&(s, lines)| {
                let mut v = vec![0u64; n + slots];
                for d in 0..n {
                    let (r, w, dir) = (lines[d], lines[n + d], lines[2 * n + d]);
                    v[d] = r + w + dir;
                    for &(l, _) in &self.read_wire[s * n + d] {
                        v[n + l as usize] += r;
                    }
                    for &(l, _) in &self.write_wire[s * n + d] {
                        v[n + l as usize] += w;
                    }
                }
                v
            })
            .collect();
        let waits: Vec<f64> = end
            .ctrl_wait_ns
            .iter()
            .chain(&end.link_wait_ns)
            .copied()
            .collect();
        let mut top = vec![0u64; n + slots];
        for v in &per {
            for (t, &x) in top.iter_mut().zip(v) {
                *t = (*t).max(x);
            }
        }
        per.iter()
            .map(|v| {
                v.iter()
                    .zip(&top)
                    .zip(&waits)
                    .filter(|((&x, &t), &w)| x > 0 && t > 0 && w > 0.0)
                    .map(|((&x, &t), &w)| w * x as f64 / t as f64)
                    .fold(0.0, f64::max)
            })
            .collect()
    }

    /// Current settled utilisation of each controller (0..1).
    pub fn ctrl_utilisation(&self) -> &[f64] {
        &self.ctrl_util
    }

    pub fn num_link_slots(&self) -> usize {
        self.link_hop_ns.len()
    }

    pub fn link_capacity_bytes_per_ns(&self, slot: usize) -> f64 {
        self.link_bytes_per_ns[slot]
    }
}

/// The utilisation at which a resource's concurrency-limited demand settles. The epoch
/// offered `demand = u × L` (utilisation times the path latency it saw); its requesters keep
/// a bounded number of lines in flight, so their throughput is ∝ 1 / latency and the load
/// settles where `v × latency(v) = demand` (Little's law). `latency` is non-decreasing, so
/// `v × latency(v)` increases and bisection finds `v` in [0, 1]; demand beyond the curve's end
/// settles at 1 (the rest is the backlog's). Solving for the fixed point, instead of feeding
/// one epoch's utilisation into the next, settles in one step whatever the epoch length:
/// a demand that does not respond to latency (compute-bound threads) is approached by a
/// contraction, one that does (memory-bound threads) is met at once.
fn settle(demand: f64, latency: impl Fn(f64) -> f64) -> f64 {
    if demand <= 0.0 {
        return 0.0;
    }
    if latency(1.0) <= demand {
        return 1.0;
    }
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..30 {
        let mid = 0.5 * (lo + hi);
        if mid * latency(mid) < demand {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Exponential smoothing of `value` into `state` with the weight of the newest epoch.
fn smooth(state: &mut f64, value: f64, weight: f64) -> f64 {
    *state = weight * value + (1.0 - weight) * *state;
    *state
}

/// The bytes that reach a resource's queue this epoch: the epoch's `offered` bytes join those
/// still on their way (`pending`), of which the share `weight` arrives. Every byte arrives in
/// the end; bursts shorter than the smoothing time are evened out, as the controller's queue
/// and the cores' fill buffers even them out (their queueing is in the curve already), so
/// an epoch's fluctuation is not a backlog when the next epoch has room for it.
fn spread(pending: &mut f64, offered: f64, weight: f64) -> f64 {
    *pending += offered;
    let arriving = *pending * weight;
    *pending -= arriving;
    arriving
}

/// One resource for one epoch: `offered` bytes join the backlog; at most `capacity ×
/// epoch` of it is served. Returns the served utilisation (≤ 1, and 1 while a backlog is
/// left) and how long after the epoch's end the backlog that remains takes to serve.
fn serve(backlog: &mut f64, offered: f64, bytes_per_ns: f64, epoch_ns: f64) -> (f64, f64) {
    let can = bytes_per_ns * epoch_ns;
    let queued = *backlog + offered;
    let served = queued.min(can);
    *backlog = queued - served;
    (served / can, *backlog / bytes_per_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_serves_at_most_its_capacity_and_all_of_it_while_a_backlog_waits() {
        let (cap, epoch) = (10.0, 1000.0); // 10 bytes/ns, 10,000 bytes per epoch
        let mut backlog = 0.0;
        // 3 epochs offering twice the capacity, then nothing
        let mut served = Vec::new();
        for offered in [20_000.0, 20_000.0, 20_000.0, 0.0, 0.0, 0.0, 0.0] {
            let (u, wait) = serve(&mut backlog, offered, cap, epoch);
            assert!(u <= 1.0 + 1e-12, "served above capacity: {u}");
            assert!((wait - backlog / cap).abs() < 1e-9);
            served.push(u);
        }
        // full while anything waits, empty only once the 30,000 excess bytes are served
        assert_eq!(served, vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]);
        assert_eq!(backlog, 0.0);
    }

    #[test]
    fn spreading_conserves_every_byte() {
        let mut pending = 0.0;
        let mut arrived = 0.0;
        for offered in [5000.0, 0.0, 12_000.0, 0.0, 0.0] {
            arrived += spread(&mut pending, offered, 0.4);
        }
        for _ in 0..200 {
            arrived += spread(&mut pending, 0.0, 0.4);
        }
        assert!((arrived - 17_000.0).abs() < 1e-6, "{arrived}");
    }

    #[test]
    fn memory_bound_demand_settles_in_one_step_on_the_curve() {
        // latency 100 ns idle, 300 ns at full load, linear
        let lat = |v: f64| 100.0 + 200.0 * v;
        // demand that offered u = 0.8 at 100 ns: concurrency-limited threads keep 80 ns worth
        // of lines in flight; v × lat(v) = 80, i.e. 200 v² + 100 v − 80 = 0
        let v = settle(0.8 * 100.0, lat);
        let exact = (-100.0 + (100.0f64 * 100.0 + 4.0 * 200.0 * 80.0).sqrt()) / 400.0;
        assert!((v - exact).abs() < 1e-6, "{v} against {exact}");
        assert!(v < 0.8, "the load must fall as the latency rises");
        // demand beyond the curve's end settles at 1: the rest is the backlog's
        assert_eq!(settle(5.0 * 300.0, lat), 1.0);
        assert_eq!(settle(0.0, lat), 0.0);
    }

    #[test]
    fn demand_that_ignores_latency_converges_to_its_utilisation() {
        // compute-bound threads offer u = 0.6 whatever the latency: iterating the settle step
        // (each epoch's demand measured at the latency the previous one set) converges
        let lat = |v: f64| 100.0 + 400.0 * v * v;
        let mut v = 0.0;
        for _ in 0..50 {
            v = settle(0.6 * lat(v), lat);
        }
        assert!((v - 0.6).abs() < 1e-6, "{v}");
    }

    #[test]
    fn broadcast_probes_put_local_reads_on_the_links_and_hold_their_readers_back() {
        // the Barcelona square broadcasts a probe for every read (machine::coherence): local
        // reads of all four nodes at a controller's rate load every link, and a reader whose
        // probes join a saturated link waits for it; with HT Assist they load none
        let mut m = numalab_machine::preset("opteron8347he-4n").unwrap();
        let routes = Routes::compute(m.topology.num_nodes(), &m.links).unwrap();
        let epoch = 20_000.0;
        // 6 GB/s of local lines per node, a 1.5-fold overload of the links' share of probes
        let lines = (6.0 * epoch / 64.0) as u64;
        let run = |m: &Machine| {
            let mut ms = MemSys::new(m, &routes);
            let mut end = None;
            // a few epochs, for the arrivals to catch up with the offered load (`spread`)
            for _ in 0..5 {
                for _ in 0..lines {
                    for d in 0..4 {
                        ms.read(d, d);
                    }
                }
                end = Some(ms.end_epoch(epoch));
            }
            let end = end.unwrap();
            let mut own = requester_lines(4);
            own[0] = lines;
            let waits = ms.requester_waits(&end, &[(0, own.as_slice())]);
            let ctrl_idle = end.ctrl_wait_ns.iter().all(|&w| w == 0.0);
            (
                ms.link_bytes.iter().sum::<f64>(),
                end.link_wait_ns,
                waits[0],
                ctrl_idle,
            )
        };
        let (bytes, link_waits, reader_wait, ctrl_idle) = run(&m);
        assert!(ctrl_idle, "the controllers keep up: any wait is the links'");
        assert!(
            bytes > 0.0 && link_waits.iter().any(|&w| w > 0.0),
            "{link_waits:?}"
        );
        assert!(reader_wait > 0.0);
        m.coherence = numalab_machine::Coherence::HtProbeFilter;
        let (bytes, link_waits, reader_wait, _) = run(&m);
        assert_eq!(bytes, 0.0);
        assert!(link_waits.iter().all(|&w| w == 0.0) && reader_wait == 0.0);
    }

    #[test]
    fn a_copy_loads_both_controllers_and_the_wires_of_its_reads_and_writes() {
        // a copier on node 1 pulling a page from node 0 into node 1: node 0's controller
        // reads it, node 1's writes it, and the links carry what as many remote line reads
        // carry (the write-backs are local)
        let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
        let routes = Routes::compute(m.topology.num_nodes(), &m.links).unwrap();
        let (mut copy, mut reads) = (MemSys::new(&m, &routes), MemSys::new(&m, &routes));
        let bytes = 4096u64;
        copy.copy(1, 0, 1, bytes);
        for _ in 0..bytes / 64 {
            reads.read(1, 0);
        }
        assert_eq!(copy.ctrl_read_bytes(0), bytes);
        assert_eq!(copy.ctrl_write_bytes[1], bytes);
        let (c, r) = (copy.end_epoch(20_000.0), reads.end_epoch(20_000.0));
        assert_eq!(c.ctrl_bytes, vec![bytes as f64; 2]);
        assert_eq!(r.ctrl_bytes, vec![bytes as f64, 0.0]);
        assert!(
            (copy.link_bytes.iter().sum::<f64>() - reads.link_bytes.iter().sum::<f64>()).abs()
                < 1e-6
        );
        assert!(copy.link_bytes.iter().sum::<f64>() > bytes as f64);
        // a copy is not a program's DRAM request: the LAR does not see it
        assert!(copy.served().iter().flatten().all(|&x| x == 0));
    }

    #[test]
    fn a_backlog_wait_falls_on_each_thread_by_its_own_lines() {
        // two threads of node 0 load controller 0 beyond its capacity: one with ten times
        // the other's lines (a huge page's zeroing, say). The heavy one waits the whole
        // backlog, the light one a tenth of it, a thread of node 1 that used no backlogged
        // resource nothing: requesters are threads, not nodes
        let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
        let routes = Routes::compute(m.topology.num_nodes(), &m.links).unwrap();
        let mut ms = MemSys::new(&m, &routes);
        let n = m.topology.num_nodes();
        let epoch = 20_000.0;
        let cap_lines = (m.nodes[0].ctrl_peak_gbps * epoch / 64.0) as u64;
        let (heavy, light) = (2 * cap_lines, cap_lines / 5);
        for _ in 0..heavy + light {
            ms.read(0, 0);
        }
        let (mut a, mut b, c) = (requester_lines(n), requester_lines(n), requester_lines(n));
        a[0] = heavy;
        b[0] = light;
        let end = ms.end_epoch(epoch);
        assert!(end.any_wait());
        let w = ms.requester_waits(&end, &[(0, &a), (0, &b), (1, &c)]);
        assert!(w[0] > 0.0, "{w:?}");
        assert!(
            (w[1] - w[0] * light as f64 / heavy as f64).abs() < 1e-6,
            "{w:?}"
        );
        assert_eq!(w[2], 0.0);
    }

    #[test]
    fn sustained_overload_never_grows_the_wait_geometrically() {
        // one node streaming from its own controller at 4x its capacity every epoch it runs:
        // its threads are held back until the backlog they made is served, so the wait stays
        // one epoch's excess, and the bytes served per unit of time equal the capacity
        let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
        let routes = Routes::compute(m.topology.num_nodes(), &m.links).unwrap();
        let mut ms = MemSys::new(&m, &routes);
        let cap = m.nodes[0].ctrl_peak_gbps; // bytes per ns
        let epoch = 20_000.0;
        let lines_per_epoch = (4.0 * cap * epoch / 64.0) as u64;
        let (mut t, mut next_run, mut lines) = (0.0, 0.0, 0u64);
        let mut max_wait: f64 = 0.0;
        for _ in 0..2000 {
            let runs = t >= next_run;
            let mut mine = requester_lines(m.topology.num_nodes());
            if runs {
                for _ in 0..lines_per_epoch {
                    ms.read(0, 0);
                }
                mine[0] = lines_per_epoch;
                lines += lines_per_epoch;
            }
            let end = ms.end_epoch(epoch);
            t += epoch;
            if runs {
                let wait = ms.requester_waits(&end, &[(0, &mine)])[0];
                next_run = t + wait;
                max_wait = max_wait.max(wait);
            }
            assert!(ms.ctrl_util[0] <= 1.0);
        }
        let rate = lines as f64 * 64.0 / t;
        assert!(
            rate <= cap * 1.02 && rate >= cap * 0.9,
            "served {rate} bytes/ns against a capacity of {cap}"
        );
        assert!(max_wait < 4.0 * epoch, "wait grew to {max_wait} ns");
    }
}
