//! Text renderings for `numalab machine show` and `numalab machine list`.

use crate::{cpulist, Machine, Routes};
use numalab_core::{NodeId, PageSize, Topology};
use std::fmt::Write as _;

const GIB: f64 = (1u64 << 30) as f64;

/// A text table: a header row and rows of cells, columns padded to their widest cell. Cells
/// that look like numbers are right-aligned, so digits line up.
struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|s| s.to_string()).collect()],
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn render(&self, indent: &str) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let width = |c: usize| {
            self.rows
                .iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..cols).map(width).collect();
        // A column other than the first (the row labels) is right-aligned, header included,
        // when every data cell starts with a number ("15.5", "8.0 GiB"); CPU lists ("0-7")
        // and names stay left-aligned.
        let numeric = |s: &str| {
            s.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<f64>().is_ok())
        };
        let right: Vec<bool> = (0..cols)
            .map(|c| {
                c > 0
                    && self.rows.len() > 1
                    && self.rows[1..].iter().all(|r| match r.get(c) {
                        Some(s) => numeric(s),
                        None => true,
                    })
            })
            .collect();
        let mut out = String::new();
        for r in &self.rows {
            let mut line = String::from(indent);
            for (c, cell) in r.iter().enumerate() {
                let pad = " ".repeat(widths[c].saturating_sub(cell.chars().count()));
                if right[c] {
                    line.push_str(&pad);
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&pad);
                }
                line.push_str("  ");
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

fn bytes_h(b: u64) -> String {
    let b = b as f64;
    if b >= GIB {
        format!("{:.1} GiB", b / GIB)
    } else if b >= (1 << 20) as f64 {
        format!("{:.2} MiB", b / (1 << 20) as f64)
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
}

fn trim(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// "8 × 8" (nodes × cores per node) when the CPU nodes are alike, else "N nodes, C cores";
/// CPU-less nodes are counted apart.
fn shape(t: &Topology) -> String {
    let smt = t.smt.max(1) as usize;
    let cpu_nodes: Vec<usize> = t
        .nodes
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .map(|n| n.cpus.len())
        .collect();
    let mem_only = t.nodes.len() - cpu_nodes.len();
    let mut s = if cpu_nodes.windows(2).all(|w| w[0] == w[1]) && !cpu_nodes.is_empty() {
        format!("{} × {}", cpu_nodes.len(), cpu_nodes[0].div_ceil(smt))
    } else {
        format!(
            "{} nodes, {} cores",
            cpu_nodes.len(),
            cpu_nodes.iter().map(|c| c.div_ceil(smt)).sum::<usize>()
        )
    };
    if smt > 1 {
        let _ = write!(s, ", SMT {smt}");
    }
    if mem_only > 0 {
        let _ = write!(s, " + {mem_only} mem-only");
    }
    s
}

/// One line per machine: id, nodes × cores, total memory, description.
pub fn list_table(machines: &[Machine]) -> String {
    let mut t = Table::new(&["ID", "NODES × CORES", "MEMORY", "DESCRIPTION"]);
    for m in machines {
        t.row(vec![
            m.id.clone(),
            shape(&m.topology),
            format!("{:.0} GiB", m.topology.total_mem_bytes() as f64 / GIB),
            m.description.clone(),
        ]);
    }
    t.render("")
}

fn node_matrix(m: &Machine, title: &str, cell: impl Fn(NodeId, NodeId) -> String) -> String {
    let n = m.topology.num_nodes();
    let mut header = vec!["from \\ to".to_string()];
    header.extend((0..n).map(|j| j.to_string()));
    let mut t = Table { rows: vec![header] };
    for i in 0..n {
        let mut row = vec![i.to_string()];
        row.extend((0..n).map(|j| cell(NodeId(i as u16), NodeId(j as u16))));
        t.row(row);
    }
    format!("{title}\n{}", t.render("  "))
}

fn tlb_text(pools: &[crate::TlbPool]) -> String {
    if pools.is_empty() {
        return "none".to_string();
    }
    pools
        .iter()
        .map(|p| {
            let sizes: Vec<String> = p.sizes.iter().map(PageSize::to_string).collect();
            let assoc = if p.ways == p.entries {
                "full".to_string()
            } else {
                format!("{}-way", p.ways)
            };
            format!("{} × {} ({assoc})", p.entries, sizes.join("/"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A readable description of a machine: identity, nodes, core parameters, the distance,
/// idle-latency and peak-bandwidth matrices, and the links.
pub fn summary(m: &Machine) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "machine      {}", m.id);
    let _ = writeln!(s, "description  {}", m.description);
    let _ = writeln!(s, "source       {}", m.source);
    let _ = writeln!(
        s,
        "shape        {} ({} CPUs, {:.1} GiB)",
        shape(&m.topology),
        m.topology.num_cpus(),
        m.topology.total_mem_bytes() as f64 / GIB
    );

    let mut t = Table::new(&[
        "node",
        "os",
        "CPUs",
        "#CPUs",
        "memory",
        "LLC",
        "ctrl peak GB/s",
        "idle ns",
    ]);
    for (info, hw) in m.topology.nodes.iter().zip(&m.nodes) {
        t.row(vec![
            info.id.0.to_string(),
            hw.os_index
                .map_or_else(|| info.id.0.to_string(), |o| o.to_string()),
            if info.cpus.is_empty() {
                "(none)".to_string()
            } else {
                cpulist::format(&info.cpus)
            },
            info.cpus.len().to_string(),
            format!("{:.1} GiB", info.mem_bytes as f64 / GIB),
            hw.llc.as_ref().map_or_else(
                || "none".to_string(),
                |g| format!("{} {}-way", bytes_h(g.bytes), g.ways),
            ),
            trim(hw.ctrl_peak_gbps, 2),
            trim(hw.idle_local_ns, 1),
        ]);
    }
    let _ = write!(s, "\nnodes\n{}", t.render("  "));

    let c = &m.core;
    let _ = writeln!(s, "\ncore");
    let siblings = if m.topology.smt > 1 {
        format!(" (siblings numbered {})", c.siblings.name())
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "  clock            {} GHz, {} thread(s) per core{siblings}",
        trim(c.ghz, 3),
        m.topology.smt
    );
    let _ = writeln!(
        s,
        "  concurrency      {} lines in flight, {}-entry reorder buffer, {}-entry store buffer, locked op {} cycles",
        trim(c.concurrency_lines, 2),
        c.rob_entries,
        c.store_buffer_entries,
        c.locked_op_cycles
    );
    let _ = writeln!(
        s,
        "  private cache    {} {}-way{}, hit {} ns; LLC hit {} ns",
        bytes_h(c.private_cache.bytes),
        c.private_cache.ways,
        if c.private_cache_cores > 1 {
            format!(", one per {} cores", c.private_cache_cores)
        } else {
            String::new()
        },
        trim(c.private_hit_ns, 2),
        trim(c.llc_hit_ns, 2)
    );
    let _ = writeln!(s, "  L1 DTLB          {}", tlb_text(&c.tlb.l1));
    let _ = writeln!(
        s,
        "  L2 TLB           {} (hit +{} ns)",
        tlb_text(&c.tlb.l2),
        trim(c.tlb.l2_hit_ns, 2)
    );
    let _ = writeln!(
        s,
        "  page walk        +{} ns besides its memory references, {} at a time; {}",
        trim(c.tlb.walk_base_ns, 2),
        c.tlb.page_walkers,
        match c.tlb.psc {
            crate::PscConfig::Split {
                pde_entries,
                pdpte_entries,
            } =>
                format!("paging-structure caches: {pde_entries} PDE, {pdpte_entries} PDPTE entries"),
            crate::PscConfig::Unified { entries } =>
                format!("page walk cache: {entries} entries, all levels"),
        }
    );

    let _ = write!(
        s,
        "\n{}",
        node_matrix(m, "distances (SLIT)", |a, b| m
            .topology
            .distance(a, b)
            .to_string())
    );
    match m.routes() {
        Ok(routes) => {
            let _ = write!(s, "\n{}", latency_and_bandwidth(m, &routes));
        }
        Err(e) => {
            let _ = writeln!(s, "\nroutes: {e}");
        }
    }

    let coherence = match m.coherence {
        crate::Coherence::Flat => format!(
            "coherence overhead +{} %",
            trim(m.link_coherence_overhead * 100.0, 1)
        ),
        crate::Coherence::HtBroadcast => "HyperTransport, broadcast probes".to_string(),
        crate::Coherence::HtProbeFilter => "HyperTransport, probe filter (HT Assist)".to_string(),
        crate::Coherence::QpiSnoop => "QPI/UPI, every read snoops the other sockets".to_string(),
        crate::Coherence::QpiDirectory => {
            "QPI/UPI, directory protocol (no snoops modelled)".to_string()
        }
    };
    let _ = writeln!(
        s,
        "\nlinks (shape {}, {coherence}{})",
        if m.link_shape == crate::Curve::intel_shape() {
            "Intel"
        } else if m.link_shape == crate::Curve::amd_shape() {
            "AMD"
        } else {
            "custom"
        },
        if m.memory_directory {
            ", memory directory"
        } else {
            ""
        }
    );
    if m.links.is_empty() {
        let _ = writeln!(s, "  none");
    } else {
        let mut t = Table::new(&["link", "GB/s per dir", "hop ns", "next hop ns"]);
        for l in &m.links {
            t.row(vec![
                format!("{}-{}", l.a.0, l.b.0),
                trim(l.gbps_per_dir, 2),
                trim(l.hop_ns, 1),
                l.next_hop_ns
                    .map_or_else(|| "-".to_string(), |v| trim(v, 1)),
            ]);
        }
        s.push_str(&t.render("  "));
    }
    s
}

fn latency_and_bandwidth(m: &Machine, routes: &Routes) -> String {
    let lat = node_matrix(m, "idle latency ns (CPU node → memory node)", |a, b| {
        trim(m.idle_latency_ns(routes, a, b), 1)
    });
    let bw = node_matrix(
        m,
        "peak read bandwidth GB/s (min of owner's controller and the lines the route's links carry beside their coherence messages)",
        |a, b| {
            let links = m.read_payload_gbps(routes, a, b);
            trim(links.min(m.nodes[b.index()].ctrl_peak_gbps), 2)
        },
    );
    format!("{lat}\n{bw}")
}
