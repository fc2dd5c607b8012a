//! `numalab calibrate`: measure the memory system of the Linux host it runs on and write a
//! machine file for the simulator (reference/machines.md §7, docs/calibrate.md).
//!
//! | module | measures / does |
//! |---|---|
//! | [`memory`] | buffers bound to one node in a chosen page size; pinned threads |
//! | [`chase`] | idle latency: pointer chase over a random cyclic chain (§7.2) |
//! | [`stream`] | read bandwidth of a node's CPUs from a node's memory (§7.3) |
//! | [`loaded`] | loaded latency: injectors plus a chaser, MLC-style (§7.4) |
//! | [`oscosts`] | first-touch faults per page size, move_pages per call and per byte (§7.8) |
//! | [`fit`] | from the measurements to machine-file figures, each saying how it was measured |
//! | [`write`] | the override file (`base =` the host's topology) and the summary tables |
//!
//! [`measure`] runs every measurement in order; [`fit::fit`] and [`write::override_text`] are
//! pure, so the model side is tested without a machine.

pub mod chase;
pub mod fit;
pub mod loaded;
pub mod memory;
pub mod oscosts;
pub mod stream;
pub mod write;

use memory::{NodeBuffer, Pages};
use numalab_machine::Machine;
use oscosts::{FaultCost, Measured, MovePagesCost};
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CalibrateError {
    #[error("{what}: {err}")]
    Os { what: String, err: std::io::Error },
    #[error("{what}: {err}")]
    Linux {
        what: String,
        err: numalab_linux::Error,
    },
    #[error("{0}")]
    Refused(String),
}

/// How much to measure.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    /// Bytes of each buffer (the chase's and the streams'): several times the LLC, so that
    /// the measurements see DRAM.
    pub buffer_bytes: usize,
    /// Loads per chase run, and runs (the median is kept).
    pub chase_loads: u64,
    pub runs: usize,
    /// Bytes read per bandwidth measurement, all threads together.
    pub stream_bytes: u64,
    /// Injector delays of the loaded-latency sweep (delay-loop iterations between lines).
    pub delays: Vec<u32>,
    /// Bytes faulted per fault-cost run, and bytes moved by the batched move_pages call.
    pub fault_bytes: usize,
    pub move_bytes: usize,
    /// Single-page move_pages calls timed.
    pub move_calls: usize,
}

pub const MIB: usize = 1 << 20;

impl Options {
    /// A calibration worth its name: buffers of 4 × the machine's total LLC and at least 256
    /// MiB (§7.2: "at least 4 × the total LLC"), 2 M loads × 5 runs per latency, 2 GB per
    /// bandwidth figure, 8 load levels per curve.
    pub fn full(total_llc_bytes: u64) -> Options {
        Options {
            buffer_bytes: (4 * total_llc_bytes as usize).max(256 * MIB),
            chase_loads: 2_000_000,
            runs: 5,
            stream_bytes: 2_000_000_000,
            delays: loaded::DELAYS_FULL.to_vec(),
            fault_bytes: 64 * MIB,
            move_bytes: 16 * MIB,
            move_calls: 256,
        }
    }

    /// A quick check that everything works (seconds, figures rough): 2 × the total LLC, at
    /// least 16 and at most 256 MiB, 100 k loads × 3 runs, 3 load levels.
    pub fn quick(total_llc_bytes: u64) -> Options {
        Options {
            buffer_bytes: (2 * total_llc_bytes as usize).clamp(16 * MIB, 256 * MIB),
            chase_loads: 100_000,
            runs: 3,
            stream_bytes: 64 * MIB as u64,
            delays: loaded::DELAYS_QUICK.to_vec(),
            fault_bytes: 8 * MIB,
            move_bytes: 4 * MIB,
            move_calls: 64,
        }
    }
}

/// Which CPUs of a node took part, and the node's number in the OS.
#[derive(Clone, Debug, Serialize)]
pub struct NodeUsed {
    pub id: usize,
    pub os_node: u32,
    /// The node's CPUs this process may run on (its affinity mask), which the measurements use.
    pub cpus: Vec<u32>,
    /// Whether this process may allocate on the node (its cpuset's mems).
    pub memory_allowed: bool,
}

/// A node's loaded-latency sweep.
#[derive(Clone, Debug, Serialize)]
pub struct LoadedSweep {
    pub chaser_cpu: u32,
    pub injector_cpus: Vec<u32>,
    /// Whether the injectors run on the node's own CPUs (else on other nodes', so the links
    /// are loaded too).
    pub injectors_local: bool,
    pub points: Vec<loaded::LoadedPoint>,
}

/// Everything measured, as `--json` writes it. Matrices are `[CPU node][memory node]` over
/// all nodes; `null` where not measured (a CPU-less node's row, a node this process may not
/// use).
#[derive(Clone, Debug, Serialize)]
pub struct Measurements {
    pub date: String,
    pub kernel: Option<String>,
    pub options: Options,
    pub nodes: Vec<NodeUsed>,
    /// Share of each node's chase buffer in 2 MiB pages (1 = the latencies are free of page
    /// walks).
    pub chase_huge_fraction: Vec<Option<f64>>,
    pub latency_ns: Vec<Vec<Option<f64>>>,
    pub bandwidth_gbps: Vec<Vec<Option<f64>>>,
    /// One thread on the first CPU node reading its own memory (`concurrency_lines`).
    pub single_thread_gbps: Option<f64>,
    pub single_thread_node: Option<usize>,
    pub loaded: Vec<Option<LoadedSweep>>,
    pub fault_4k: Measured<FaultCost>,
    pub fault_2m: Measured<FaultCost>,
    pub fault_1g: Measured<FaultCost>,
    /// Read faults on a cached file, one per 64 KiB window (`fault_file_4k_ns`).
    pub fault_file_4k: Measured<FaultCost>,
    pub move_pages: Measured<MovePagesCost>,
}

/// What the progress display is told: a step finished, and what the next one is.
pub trait Progress {
    fn total(&mut self, steps: u64);
    fn step(&mut self, what: &str);
}

/// The nodes as this process may use them: the machine's CPUs within the affinity mask, and
/// whether the cpuset allows the node's memory.
pub fn usable_nodes(m: &Machine) -> Result<Vec<NodeUsed>, CalibrateError> {
    let allowed = memory::allowed_cpus()?;
    let mems = numalab_linux::syscalls::mems_allowed().ok();
    Ok(m.topology
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let os_node = m.nodes[i].os_index.unwrap_or(i as u32);
            NodeUsed {
                id: i,
                os_node,
                cpus: n
                    .cpus
                    .iter()
                    .map(|c| c.0)
                    .filter(|c| allowed.contains(c))
                    .collect(),
                memory_allowed: mems
                    .as_ref()
                    .is_none_or(|mask| mask.contains(numalab_core::NodeId(os_node as u16))),
            }
        })
        .collect())
}

/// Refuse before measuring anything when a node lacks the free memory the buffers need
/// (binding to a full node would wake the OOM killer, not fail).
pub fn check_free_memory(nodes: &[NodeUsed], opts: &Options) -> Result<(), CalibrateError> {
    let need = 2 * opts.buffer_bytes.div_ceil(memory::HUGE_PAGE_BYTES) * memory::HUGE_PAGE_BYTES
        + 32 * MIB;
    // Without a readable node tree the kernel judges (a bind to a full node then fails late).
    let Ok(tree) = numalab_linux::node::read_node_tree(&numalab_linux::SysRoot::host()) else {
        return Ok(());
    };
    for n in nodes.iter().filter(|n| n.memory_allowed) {
        let Some(info) = tree
            .node(numalab_core::NodeId(n.os_node as u16))
            .and_then(|e| e.meminfo.as_ref())
        else {
            continue;
        };
        let free = info.mem_free_kb as usize * 1024;
        if free < need {
            return Err(CalibrateError::Refused(format!(
                "node {} has {} MiB free, and calibrating it needs {} MiB (two buffers of {} MiB and some room): \
                 free memory there, or give a smaller --buffer-mib (the buffers should still be several times the LLC)",
                n.os_node,
                free / MIB,
                need / MIB,
                opts.buffer_bytes / MIB
            )));
        }
    }
    Ok(())
}

/// The nearest node with usable CPUs to `node` (itself first), by the distance matrix.
fn nearest_cpu_node(m: &Machine, nodes: &[NodeUsed], node: usize) -> Option<usize> {
    (0..nodes.len())
        .filter(|&c| !nodes[c].cpus.is_empty())
        .min_by_key(|&c| (m.topology.distances[c][node], c != node, c))
}

/// Steps [`measure`] takes, for the progress display.
fn plan_steps(nodes: &[NodeUsed], opts: &Options) -> u64 {
    let cpu_nodes = nodes.iter().filter(|n| !n.cpus.is_empty()).count() as u64;
    let mem_nodes = nodes.iter().filter(|n| n.memory_allowed).count() as u64;
    mem_nodes * (1 + 2 * cpu_nodes + opts.delays.len() as u64) + 1 + 5
}

/// Run every measurement on this host, whose topology `m` describes (nodes, CPUs, distances;
/// the figures are not used).
pub fn measure(
    m: &Machine,
    opts: &Options,
    progress: &mut dyn Progress,
) -> Result<Measurements, CalibrateError> {
    let nodes = usable_nodes(m)?;
    let n = nodes.len();
    if nodes.iter().all(|x| x.cpus.is_empty()) {
        return Err(CalibrateError::Refused(
            "this process may run on none of the machine's CPUs (its affinity mask names none of the nodes' CPUs)".into(),
        ));
    }
    check_free_memory(&nodes, opts)?;
    progress.total(plan_steps(&nodes, opts));
    let mut latency = vec![vec![None; n]; n];
    let mut bandwidth = vec![vec![None; n]; n];
    let mut huge = vec![None; n];
    let mut loaded = vec![None; n];
    let mut single = None;
    let mut single_node = None;
    for d in (0..n).filter(|&d| nodes[d].memory_allowed) {
        progress.step(&format!(
            "laying a {} MiB chain on node {d}",
            opts.buffer_bytes / MIB
        ));
        let chain_buf = NodeBuffer::new(opts.buffer_bytes, nodes[d].os_node, Pages::Huge, true)?;
        huge[d] = chain_buf.huge_fraction();
        let start = chase::lay_chain(&chain_buf, 0x5eed + d as u64);
        let stream_buf = NodeBuffer::new(opts.buffer_bytes, nodes[d].os_node, Pages::Huge, true)?;
        for s in (0..n).filter(|&s| !nodes[s].cpus.is_empty()) {
            progress.step(&format!("latency from node {s} to node {d}"));
            let cpu = nodes[s].cpus[0];
            latency[s][d] = Some(memory::on_cpu(cpu, || {
                Ok(chase::median_latency_ns(start, opts.chase_loads, opts.runs))
            })?);
            progress.step(&format!("bandwidth from node {s} to node {d}"));
            bandwidth[s][d] = Some(stream::read_gbps(
                &nodes[s].cpus,
                &stream_buf,
                opts.stream_bytes,
            )?);
        }
        if single.is_none() && !nodes[d].cpus.is_empty() {
            single = Some(stream::read_gbps(
                &nodes[d].cpus[..1],
                &stream_buf,
                opts.stream_bytes / 4,
            )?);
            single_node = Some(d);
        }
        loaded[d] = sweep(m, &nodes, d, start, &stream_buf, opts, progress)?;
    }
    progress.step("first-touch faults");
    let home = nearest_cpu_node(m, &nodes, 0).expect("checked above: some node has CPUs");
    let (cpu, os_node) = (nodes[home].cpus[0], nodes[home].os_node);
    let faults =
        |measure: fn(u32, u32, usize, usize) -> Result<Measured<FaultCost>, CalibrateError>| {
            if nodes[home].memory_allowed {
                measure(cpu, os_node, opts.fault_bytes, opts.runs)
            } else {
                Ok(Measured::skipped(format!(
                    "this process may not allocate on node {home}"
                )))
            }
        };
    let fault_4k = faults(oscosts::fault_4k)?;
    progress.step("first-touch faults of 2 MiB pages");
    let fault_2m = faults(oscosts::fault_2m)?;
    progress.step("first-touch fault of a 1 GiB page");
    let fault_1g = oscosts::fault_1g(cpu, os_node)?;
    progress.step("read faults on a cached file");
    let fault_file_4k = oscosts::fault_file_4k(cpu, opts.fault_bytes, opts.runs)?;
    progress.step("move_pages");
    let target = (0..n)
        .filter(|&t| t != home && nodes[t].memory_allowed && m.topology.nodes[t].mem_bytes > 0)
        .min_by_key(|&t| (m.topology.distances[home][t], t));
    let move_pages = match target {
        Some(t) if nodes[home].memory_allowed => Measured::Value(oscosts::move_pages_cost(
            cpu,
            os_node,
            nodes[t].os_node,
            opts.move_bytes,
            opts.move_calls,
        )?),
        _ => Measured::skipped("moving pages needs two nodes with memory this process may use"),
    };
    progress.step("done");
    Ok(Measurements {
        date: numalab_place::machine_file::utc_date(std::time::SystemTime::now()),
        kernel: numalab_linux::syscalls::kernel_release().map(|(_, _, r)| r),
        options: opts.clone(),
        nodes,
        chase_huge_fraction: huge,
        latency_ns: latency,
        bandwidth_gbps: bandwidth,
        single_thread_gbps: single,
        single_thread_node: single_node,
        loaded,
        fault_4k,
        fault_2m,
        fault_1g,
        fault_file_4k,
        move_pages,
    })
}

/// Node `d`'s loaded-latency sweep. The chaser runs on the node's first CPU and the
/// injectors on its others; a node with one CPU or none borrows the nearest CPU node's, and a
/// machine with a single usable CPU has no sweep (nothing can inject while it chases).
#[allow(clippy::too_many_arguments)]
fn sweep(
    m: &Machine,
    nodes: &[NodeUsed],
    d: usize,
    chain_start: usize,
    stream_buf: &NodeBuffer,
    opts: &Options,
    progress: &mut dyn Progress,
) -> Result<Option<LoadedSweep>, CalibrateError> {
    let home = nearest_cpu_node(m, nodes, d).expect("checked by measure: some node has CPUs");
    let chaser_cpu = nodes[home].cpus[0];
    let mut injectors: Vec<u32> = nodes[home].cpus[1..].to_vec();
    let injectors_local = home == d && !injectors.is_empty();
    if injectors.is_empty() {
        // Borrow the other CPUs, nearest nodes first.
        let mut others: Vec<usize> = (0..nodes.len()).filter(|&c| c != home).collect();
        others.sort_by_key(|&c| (m.topology.distances[c][d], c));
        injectors = others
            .iter()
            .flat_map(|&c| nodes[c].cpus.iter().copied())
            .collect();
    }
    if injectors.is_empty() {
        for _ in &opts.delays {
            progress.step(&format!(
                "loaded latency of node {d}: no CPU to inject from"
            ));
        }
        return Ok(None);
    }
    let mut points = Vec::new();
    for &delay in &opts.delays {
        progress.step(&format!("loaded latency of node {d}, delay {delay}"));
        points.push(loaded::point(
            chaser_cpu,
            &injectors,
            chain_start,
            stream_buf,
            delay,
            opts.chase_loads / 2,
        )?);
    }
    Ok(Some(LoadedSweep {
        chaser_cpu,
        injector_cpus: injectors,
        injectors_local,
        points,
    }))
}
