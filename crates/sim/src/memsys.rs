//! Memory controllers and links: the contention model (docs/model.md, "Memory system").
//!
//! Traffic of one epoch sets the latencies of the next (DESIGN.md). A controller's latency
//! follows its bandwidth-latency curve at the smoothed utilisation; a link adds `hop_ns` plus
//! `hop_ns × (shape(u) − 1)` (reference/machines.md §5.3). Offered load above a resource's
//! capacity cannot be served, so it turns into an overload penalty that grows until the
//! concurrency-limited threads slow down to the capacity: a thread's throughput is inversely
//! proportional to its latency, so scaling the latency by the utilisation brings it to 1.

use numalab_core::NodeId;
use numalab_machine::{Curve, Machine, Routes};

/// Weight of the newest epoch in the smoothed utilisation (damps the feedback loop).
const SMOOTHING: f64 = 0.5;

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
    link_overhead: f64,
    /// Slots crossed by data of a read from CPU node s to memory node d (direction d -> s),
    /// and by a write / write-back (direction s -> d): `read_slots[s * n + d]`.
    read_slots: Vec<Vec<u16>>,
    write_slots: Vec<Vec<u16>>,
    /// Idle latency each link of `read_slots` adds at its position on the route (a link may
    /// add less as a second hop, e.g. Barcelona's +30 then +25 ns).
    read_hop_ns: Vec<Vec<f64>>,

    // state carried across epochs
    ctrl_util: Vec<f64>,
    ctrl_penalty_ns: Vec<f64>,
    link_util: Vec<f64>,
    link_penalty_ns: Vec<f64>,
    /// Latency of a DRAM access from CPU node s to memory on node d this epoch: `lat[s*n+d]`.
    lat_ns: Vec<f64>,
    /// Same, without the controller overload penalty (what a posted write waits for).
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

    // cumulative counters (reads of the current epoch are added by `end_epoch`; the
    // accessors below include them)
    ctrl_read_bytes: Vec<u64>,
    pub ctrl_write_bytes: Vec<u64>,
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
        for s in 0..n {
            for d in 0..n {
                let (sn, dn) = (NodeId(s as u16), NodeId(d as u16));
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
        let mut ms = MemSys {
            n,
            line_bytes: 64.0,
            curves: m.nodes.iter().map(|h| h.curve.clone()).collect(),
            ctrl_bytes_per_ns: m.nodes.iter().map(|h| h.ctrl_peak_gbps).collect(),
            link_bytes_per_ns,
            link_hop_ns,
            link_shape: m.link_shape.clone(),
            link_overhead: m.link_coherence_overhead,
            read_slots,
            write_slots,
            read_hop_ns,
            ctrl_util: vec![0.0; n],
            ctrl_penalty_ns: vec![0.0; n],
            link_util: vec![0.0; slots],
            link_penalty_ns: vec![0.0; slots],
            lat_ns: vec![0.0; n * n],
            idle_lat_ns: vec![0.0; n * n],
            epoch_reads: vec![0; n * n],
            epoch_ctrl_bytes: vec![0; n],
            epoch_link_bytes: vec![0.0; slots],
            ctrl_read_bytes: vec![0; n],
            ctrl_write_bytes: vec![0; n],
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
                    links += hop * shape[l as usize] + self.link_penalty_ns[l as usize];
                    idle_links += hop;
                }
                self.lat_ns[i] = ctrl + self.ctrl_penalty_ns[d] + links;
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
        if s != d {
            // the links' bytes stay a running f64 sum in access order (as before, so that
            // results do not change); a local read crosses no link
            self.read_links(i);
        }
    }

    #[inline(never)]
    fn read_links(&mut self, i: usize) {
        let wire = self.line_bytes * (1.0 + self.link_overhead);
        for &l in &self.read_slots[i] {
            self.epoch_link_bytes[l as usize] += wire;
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
        let wire = b * (1.0 + self.link_overhead);
        for &l in &self.write_slots[s * self.n + d] {
            self.epoch_link_bytes[l as usize] += wire;
        }
    }

    /// Account bulk copy traffic (page migration): `bytes` read on `from`, written on `to`.
    pub fn copy(&mut self, from: usize, to: usize, bytes: u64) {
        let b = bytes as f64;
        self.epoch_ctrl_bytes[from] += bytes;
        self.epoch_ctrl_bytes[to] += bytes;
        self.ctrl_read_bytes[from] += bytes;
        self.ctrl_write_bytes[to] += bytes;
        let wire = b * (1.0 + self.link_overhead);
        for &l in &self.write_slots[from * self.n + to] {
            self.epoch_link_bytes[l as usize] += wire;
        }
    }

    /// Close an epoch of `epoch_ns`: turn its traffic into utilisations and the latencies of
    /// the next epoch. Returns the controller bytes of the epoch (for timelines).
    pub fn end_epoch(&mut self, epoch_ns: f64) -> Vec<f64> {
        let n = self.n;
        // Typical latency of the accesses crossing each link, for its overload law.
        let mut link_ref = vec![0.0f64; self.link_hop_ns.len()];
        let mut link_cnt = vec![0usize; self.link_hop_ns.len()];
        for s in 0..n {
            for d in 0..n {
                for &l in &self.read_slots[s * n + d] {
                    link_ref[l as usize] += self.lat_ns[s * n + d];
                    link_cnt[l as usize] += 1;
                }
            }
        }
        let line = self.line_bytes as u64;
        let ctrl_bytes: Vec<f64> = (0..n)
            .map(|d| {
                let mut reads = 0;
                for s in 0..n {
                    let r = std::mem::take(&mut self.epoch_reads[s * n + d]);
                    self.served[d][s] += r;
                    reads += r;
                }
                self.ctrl_read_bytes[d] += reads * line;
                // whole bytes below 2^53: the same f64 as adding them one by one
                (std::mem::take(&mut self.epoch_ctrl_bytes[d]) + reads * line) as f64
            })
            .collect();
        for (d, &bytes) in ctrl_bytes.iter().enumerate() {
            let u = bytes / (self.ctrl_bytes_per_ns[d] * epoch_ns);
            let total = self.curves[d].at(self.ctrl_util[d].min(1.0)) + self.ctrl_penalty_ns[d];
            self.ctrl_util[d] = SMOOTHING * u + (1.0 - SMOOTHING) * self.ctrl_util[d];
            self.ctrl_penalty_ns[d] = overload_penalty(
                self.ctrl_penalty_ns[d],
                total,
                u,
                self.curves[d].at(self.ctrl_util[d].min(1.0)),
            );
            self.ctrl_util_max[d] = self.ctrl_util_max[d].max(self.ctrl_util[d]);
        }
        for l in 0..self.link_hop_ns.len() {
            self.link_bytes[l] += self.epoch_link_bytes[l];
            let u = self.epoch_link_bytes[l] / (self.link_bytes_per_ns[l] * epoch_ns);
            let path = if link_cnt[l] > 0 {
                link_ref[l] / link_cnt[l] as f64
            } else {
                self.link_hop_ns[l]
            };
            let own_old = self.link_hop_ns[l] * self.link_shape.at(self.link_util[l].min(1.0));
            self.link_util[l] = SMOOTHING * u + (1.0 - SMOOTHING) * self.link_util[l];
            let own_new = self.link_hop_ns[l] * self.link_shape.at(self.link_util[l].min(1.0));
            // the rest of the path (controller, other hops) stays as it was
            let unpenalised = path - self.link_penalty_ns[l] - own_old + own_new;
            self.link_penalty_ns[l] =
                overload_penalty(self.link_penalty_ns[l], path, u, unpenalised);
            self.link_util_max[l] = self.link_util_max[l].max(self.link_util[l]);
            self.epoch_link_bytes[l] = 0.0;
        }
        self.recompute_latencies();
        ctrl_bytes
    }

    /// Current smoothed utilisation of each controller (0..1+).
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

/// The overload law. `total_ns` is the latency the traffic of the epoch saw, `u` its offered
/// utilisation, `unpenalised_ns` the latency without a penalty at the new utilisation. A
/// concurrency-limited stream's throughput is ∝ 1/latency, so serving `u > 1` at capacity
/// needs `total × u`; below capacity the same law relaxes the penalty back towards zero.
fn overload_penalty(old: f64, total_ns: f64, u: f64, unpenalised_ns: f64) -> f64 {
    if u <= 1.0 && old <= 0.0 {
        return 0.0;
    }
    let target = (total_ns * u - unpenalised_ns).max(0.0);
    SMOOTHING * target + (1.0 - SMOOTHING) * old
}
