//! `numalab topo` (and `numalab run --hardware`): the host's NUMA topology as the kernel shows
//! it, like `numactl --hardware`, plus memory tiers, HMAT access attributes, THP and balancing.

use anyhow::Result;
use numalab_linux::sysroot::SysRoot;
use serde::Serialize;

#[derive(Serialize)]
pub struct HostTopo {
    pub kernel: Option<String>,
    pub nodes: numalab_linux::node::NodeTree,
    pub memory_tiers: Option<Vec<numalab_linux::tiers::MemoryTier>>,
    pub weighted_interleave: Option<numalab_linux::weighted_interleave::Weights>,
    pub thp: Option<numalab_linux::thp::ThpSettings>,
    pub numa_balancing: Option<numalab_linux::balancing::NumaBalancing>,
}

pub fn collect(root: &SysRoot) -> Result<HostTopo> {
    Ok(HostTopo {
        kernel: numalab_linux::syscalls::kernel_release().map(|(_, _, r)| r),
        nodes: numalab_linux::node::read_node_tree(root)?,
        memory_tiers: numalab_linux::tiers::read_memory_tiers(root)?,
        weighted_interleave: numalab_linux::weighted_interleave::read_weights(root)?,
        thp: numalab_linux::thp::read_thp(root)?,
        numa_balancing: numalab_linux::balancing::read_numa_balancing(root)?,
    })
}

/// The nodes' `numastat` counters as `numastat` prints them (pages; one column per node, the
/// kernel's order of rows); empty when no node has them.
fn numastat(tree: &numalab_linux::node::NodeTree) -> String {
    let rows = numalab_linux::numastat::NUMASTAT_ROWS.map(|(row, _)| row);
    if tree.nodes.iter().all(|n| n.numastat.is_none()) {
        return String::new();
    }
    let cell = |n: &numalab_linux::node::NodeEntry, row: &str| {
        n.numastat
            .as_ref()
            .and_then(|m| m.get(row))
            .map_or("-".to_string(), |v| v.to_string())
    };
    let width = tree
        .nodes
        .iter()
        .flat_map(|n| rows.iter().map(move |r| cell(n, r).len()))
        .chain(tree.nodes.iter().map(|n| format!("node{}", n.id.0).len()))
        .max()
        .unwrap_or(8)
        + 1;
    let mut o = format!("{:<17}", "numastat (pages)");
    for n in &tree.nodes {
        o += &format!("{:>width$}", format!("node{}", n.id.0));
    }
    o += "\n";
    for row in rows {
        o += &format!("{row:<17}");
        for n in &tree.nodes {
            o += &format!("{:>width$}", cell(n, row));
        }
        o += "\n";
    }
    o
}

/// numactl --hardware's lines first, exactly (numalab_place::numactl_show, so scripts that read
/// them keep working), then the rest.
pub fn render(t: &HostTopo) -> String {
    let tree = &t.nodes;
    let mut o = numalab_place::numactl_show::hardware(tree, false);
    o += &numastat(tree);
    let cpuless = tree.cpuless();
    if !cpuless.is_empty() {
        o += &format!("memory-only (CPU-less) nodes: {cpuless}\n");
    }
    let mut access = String::new();
    for n in &tree.nodes {
        for (class, a) in n.access.iter().enumerate() {
            let Some(a) = a else { continue };
            let f =
                |v: Option<u64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v} {unit}"));
            access += &format!(
                "  node {} access{class} (initiators {}): read {} / {}, write {} / {}\n",
                n.id.0,
                a.initiators,
                f(a.read_latency_ns, "ns"),
                f(a.read_bandwidth_mb_per_s, "MB/s"),
                f(a.write_latency_ns, "ns"),
                f(a.write_bandwidth_mb_per_s, "MB/s"),
            );
        }
    }
    if access.is_empty() {
        o += "access attributes: none (the firmware gives no HMAT)\n";
    } else {
        o += "access attributes (HMAT, latency / bandwidth):\n";
        o += &access;
    }
    match &t.memory_tiers {
        Some(tiers) if !tiers.is_empty() => {
            o += "memory tiers:";
            for tier in tiers {
                o += &format!(" tier {} = nodes {};", tier.id, tier.nodes);
            }
            o.pop();
            o += "\n";
        }
        _ => o += "memory tiers: not exposed by this kernel\n",
    }
    match &t.weighted_interleave {
        Some(w) => {
            let ws: Vec<String> = w
                .weights
                .iter()
                .map(|(n, w)| format!("{}={w}", n.0))
                .collect();
            o += &format!("weighted interleave weights: {}\n", ws.join(" "));
        }
        None => o += "weighted interleave: not available (Linux 6.9+)\n",
    }
    match &t.thp {
        Some(s) => {
            o += &format!(
                "transparent hugepages: enabled={} defrag={}\n",
                s.enabled.as_str(),
                s.defrag.as_str()
            )
        }
        None => o += "transparent hugepages: not available\n",
    }
    match t.numa_balancing {
        Some(b) => o += &format!("numa_balancing: {} ({b:?})\n", b.value()),
        None => o += "numa_balancing: not available (kernel without CONFIG_NUMA_BALANCING)\n",
    }
    if let Some(k) = &t.kernel {
        o += &format!("kernel: {k}\n");
    }
    o
}
