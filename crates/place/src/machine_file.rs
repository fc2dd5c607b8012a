//! `numalab topo --machine-file FILE`: a machine description (docs/machine-format.md) of the
//! host, from the kernel's view, so that `numalab sim --machine FILE` simulates the machine one
//! is on.
//!
//! The kernel's figures are read through `numalab-linux` under a [`SysRoot`] (the real `/` or a
//! recorded tree): the node tree (CPUs, `MemTotal`, SLIT distances, HMAT access classes),
//! `/sys/devices/system/cpu/cpuN/{topology,cache}` and the CPU model in `/proc/cpuinfo`. They
//! become a [`ParsedTopology`], which the hwloc importer's builder
//! ([`numalab_machine::hwloc::import_parsed`]) turns into a validated machine exactly as it does
//! for an `lstopo --of xml` file: same link derivation from distances, same CPU-less node
//! handling, same [`HwlocDefaults`] for every figure the kernel does not give. The description
//! says so, listing those defaults.

use numalab_linux::node::{read_node_tree, AccessClass, NodeTree};
use numalab_linux::parse::parse_cpu_list;
use numalab_linux::{ParseError, SysRoot};
use numalab_machine::hwloc::{
    import_parsed, HwlocDefaults, ParsedCache, ParsedDistances, ParsedMemAttr, ParsedMemAttrValue,
    ParsedNode, ParsedTopology,
};
use numalab_machine::{Machine, MachineError};
use std::collections::BTreeSet;
use thiserror::Error;

/// The CPU directory, relative to a [`SysRoot`].
pub const CPU_DIR: &str = "sys/devices/system/cpu";

/// Why no machine could be made of the host.
#[derive(Debug, Error)]
pub enum MachineFileError {
    /// A sysfs/procfs file could not be read or parsed.
    #[error(transparent)]
    Linux(#[from] numalab_linux::Error),
    /// The figures read do not make a valid machine.
    #[error(transparent)]
    Machine(#[from] MachineError),
}

/// One CPU cache as `cpuN/cache/indexM/` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuCache {
    /// `level`: 1, 2, 3, ...
    pub level: u32,
    /// `type`: `Data`, `Instruction` or `Unified`.
    pub kind: String,
    /// `size` in bytes (the kernel writes `48K`); None when the file is absent (some Arm
    /// firmware gives no cache sizes).
    pub size_bytes: Option<u64>,
    /// `ways_of_associativity`; None when absent. 0 is the kernel's "not known".
    pub ways: Option<u32>,
    /// `shared_cpu_list`: the CPUs sharing this cache.
    pub shared_cpus: BTreeSet<u32>,
}

/// What `cpuN/topology/` and `cpuN/cache/` say about one online CPU. Each part is None (or
/// empty) where the kernel has no such files (or a recorded tree lacks them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuFacts {
    pub cpu: u32,
    /// `core_cpus_list` (else the older `thread_siblings_list`): the SMT siblings, itself included.
    pub core_cpus: Option<BTreeSet<u32>>,
    /// `package_cpus_list` (else the older `core_siblings_list`).
    pub package_cpus: Option<BTreeSet<u32>>,
    pub caches: Vec<CpuCache>,
}

/// Everything the machine description is made of, as read from the kernel: the input of the
/// pure [`machine_from_facts`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// The node tree (online nodes, CPUs, meminfo, distances, HMAT access classes).
    pub nodes: NodeTree,
    /// Every CPU of every online node, in increasing order.
    pub cpus: Vec<CpuFacts>,
    /// `model name` of `/proc/cpuinfo`, if any.
    pub cpu_model: Option<String>,
    /// `/proc/sys/kernel/hostname`, if any: names the machine.
    pub hostname: Option<String>,
    /// Where it was read: `/` for the running kernel, else a recorded tree.
    pub root: String,
    /// When it was read, `YYYY-MM-DD` (UTC).
    pub date: String,
}

/// Read the host's description under `root` and make a validated machine of it.
pub fn machine_from_host(root: &SysRoot) -> Result<Machine, MachineFileError> {
    machine_from_facts(&read_host_facts(root)?, &HwlocDefaults::default())
}

/// Read what [`machine_from_facts`] needs under `root`, dated today (UTC).
pub fn read_host_facts(root: &SysRoot) -> Result<HostFacts, MachineFileError> {
    let nodes = read_node_tree(root)?;
    let mut cpus = Vec::new();
    let all: BTreeSet<u32> = nodes
        .nodes
        .iter()
        .flat_map(|n| n.cpus.iter().map(|c| c.0))
        .collect();
    for cpu in all {
        cpus.push(read_cpu_facts(root, cpu)?);
    }
    let cpu_model = root
        .read_optional("proc/cpuinfo")?
        .and_then(|t| parse_cpu_model(&t));
    let hostname = root
        .read_optional("proc/sys/kernel/hostname")?
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty());
    Ok(HostFacts {
        nodes,
        cpus,
        cpu_model,
        hostname,
        root: root.root().display().to_string(),
        date: utc_date(std::time::SystemTime::now()),
    })
}

/// Read `cpuN/topology` and `cpuN/cache` of one CPU (every file optional).
pub fn read_cpu_facts(root: &SysRoot, cpu: u32) -> Result<CpuFacts, MachineFileError> {
    let dir = format!("{CPU_DIR}/cpu{cpu}");
    let list = |names: &[&str]| -> Result<Option<BTreeSet<u32>>, MachineFileError> {
        for name in names {
            let rel = format!("{dir}/topology/{name}");
            if let Some(t) = root.read_optional(&rel)? {
                return Ok(Some(cpu_set(&t, root, &rel)?));
            }
        }
        Ok(None)
    };
    let core_cpus = list(&["core_cpus_list", "thread_siblings_list"])?;
    let package_cpus = list(&["package_cpus_list", "core_siblings_list"])?;
    let mut caches = Vec::new();
    let cache_dir = format!("{dir}/cache");
    for name in root.list_dir(&cache_dir)?.unwrap_or_default() {
        if !name.starts_with("index") {
            continue;
        }
        let d = format!("{cache_dir}/{name}");
        let (Some(level), Some(kind), Some(shared)) = (
            root.read_optional(&format!("{d}/level"))?,
            root.read_optional(&format!("{d}/type"))?,
            root.read_optional(&format!("{d}/shared_cpu_list"))?,
        ) else {
            // A cache the kernel describes only partly cannot be placed in the hierarchy.
            continue;
        };
        let rel = format!("{d}/level");
        let level = parse_u32(&level, root, &rel, "a cache level (1, 2, 3, ...)")?;
        let size_bytes = match root.read_optional(&format!("{d}/size"))? {
            Some(t) => Some(parse_cache_size(&t).ok_or_else(|| {
                parse_error(
                    root,
                    &format!("{d}/size"),
                    "a size like 48K, 2048K or 1M",
                    &t,
                )
            })?),
            None => None,
        };
        let ways = match root.read_optional(&format!("{d}/ways_of_associativity"))? {
            Some(t) => Some(parse_u32(
                &t,
                root,
                &format!("{d}/ways_of_associativity"),
                "a number of ways",
            )?),
            None => None,
        };
        caches.push(CpuCache {
            level,
            kind: kind.trim().to_string(),
            size_bytes,
            ways,
            shared_cpus: cpu_set(&shared, root, &format!("{d}/shared_cpu_list"))?,
        });
    }
    Ok(CpuFacts {
        cpu,
        core_cpus,
        package_cpus,
        caches,
    })
}

/// A cache `size` file: `48K`, `2048K`, `1M` (a plain number is bytes).
pub fn parse_cache_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" => 1,
        "K" | "k" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// The first `model name` of `/proc/cpuinfo` (x86; other architectures may have none).
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name")
            .then(|| v.trim().to_string())
            .filter(|v| !v.is_empty())
    })
}

fn parse_error(root: &SysRoot, rel: &str, expected: &str, found: &str) -> MachineFileError {
    let found: String = found.trim().chars().take(80).collect();
    numalab_linux::Error::Parse(ParseError {
        file: root.path(rel).display().to_string(),
        line: 1,
        expected: expected.to_string(),
        found,
    })
    .into()
}

fn parse_u32(
    text: &str,
    root: &SysRoot,
    rel: &str,
    expected: &str,
) -> Result<u32, MachineFileError> {
    text.trim()
        .parse()
        .map_err(|_| parse_error(root, rel, expected, text))
}

fn cpu_set(text: &str, root: &SysRoot, rel: &str) -> Result<BTreeSet<u32>, MachineFileError> {
    let cpus = parse_cpu_list(text, rel)
        .map_err(|e| numalab_linux::Error::from(e.in_file(root.path(rel).display())))?;
    Ok(cpus.into_iter().map(|c| c.0).collect())
}

/// `YYYY-MM-DD` (UTC) of a time (civil-from-days, proleptic Gregorian).
pub fn utc_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The machine id: `host-<hostname>` in the characters ids use, else `host`.
fn machine_id(hostname: Option<&str>) -> String {
    let name: String = hostname
        .unwrap_or("")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_matches('-');
    if name.is_empty() {
        "host".to_string()
    } else {
        format!("host-{name}")
    }
}

/// The access class that describes CPU initiators: `access1` (CPU initiators only), else
/// `access0` (any initiator).
fn cpu_access(n: &numalab_linux::node::NodeEntry) -> Option<&AccessClass> {
    n.access[1].as_ref().or(n.access[0].as_ref())
}

/// The kernel's view as the importer's input (pure).
pub fn parsed_topology(f: &HostFacts) -> ParsedTopology {
    let tree = &f.nodes;
    let mut notes = Vec::new();
    let numa: Vec<ParsedNode> = tree
        .nodes
        .iter()
        .map(|n| ParsedNode {
            os_index: u32::from(n.id.0),
            cpuset: n.cpus.iter().map(|c| c.0).collect(),
            mem_bytes: n.meminfo.as_ref().map(|m| m.mem_total_bytes()),
            subtype: None,
        })
        .collect();
    let pus: BTreeSet<u32> = numa.iter().flat_map(|n| n.cpuset.iter().copied()).collect();

    // Cores and packages: each distinct sibling list once.
    let distinct = |sets: Vec<&BTreeSet<u32>>| -> Vec<BTreeSet<u32>> {
        let mut v: Vec<BTreeSet<u32>> = Vec::new();
        for s in sets {
            if !v.contains(s) {
                v.push(s.clone());
            }
        }
        v
    };
    let cores = distinct(f.cpus.iter().filter_map(|c| c.core_cpus.as_ref()).collect());
    let packages = distinct(
        f.cpus
            .iter()
            .filter_map(|c| c.package_cpus.as_ref())
            .collect(),
    );
    if cores.is_empty() {
        notes.push("no cpuN/topology in sysfs: every CPU is taken for a core".to_string());
    }

    // Caches: each (level, type, sharing CPUs) once; instruction caches do not hold data.
    let mut caches: Vec<ParsedCache> = Vec::new();
    let mut sizeless = false;
    for c in f.cpus.iter().flat_map(|c| &c.caches) {
        if c.kind.eq_ignore_ascii_case("Instruction") {
            continue;
        }
        let Some(bytes) = c.size_bytes else {
            sizeless = true;
            continue;
        };
        let pc = ParsedCache {
            level: c.level,
            bytes,
            // The kernel's 0 is "not known", as hwloc's 0 is.
            associativity: i64::from(c.ways.unwrap_or(0)),
            cpuset: c.shared_cpus.clone(),
        };
        if !caches.contains(&pc) {
            caches.push(pc);
        }
    }
    if sizeless {
        notes.push("caches without a size in sysfs are left out".to_string());
    }
    if caches.is_empty() {
        notes.push("no CPU caches in sysfs (cpuN/cache)".to_string());
    }

    // SLIT distances: the node tree has one per online node in every row.
    let distances = (!numa.is_empty()).then(|| ParsedDistances {
        name: "SLIT (nodeN/distance)".to_string(),
        position: (0..numa.len()).map(Some).collect(),
        matrix: tree
            .nodes
            .iter()
            .map(|a| {
                tree.nodes
                    .iter()
                    .map(|b| tree.distance(a.id, b.id).unwrap_or(0))
                    .collect()
            })
            .collect(),
    });

    // HMAT access classes: the best performance of a target node, from the initiator nodes
    // listed; a value applies to those nodes' CPUs. Generic initiators (no CPUs) say nothing
    // about CPU accesses.
    let mut latency = ParsedMemAttr {
        name: "ReadLatency".to_string(),
        values: Vec::new(),
    };
    let mut bandwidth = ParsedMemAttr {
        name: "ReadBandwidth".to_string(),
        values: Vec::new(),
    };
    for (target, n) in tree.nodes.iter().enumerate() {
        let Some(a) = cpu_access(n) else { continue };
        let initiator: BTreeSet<u32> = a
            .initiators
            .iter()
            .filter_map(|i| tree.node(i))
            .flat_map(|i| i.cpus.iter().map(|c| c.0))
            .collect();
        if initiator.is_empty() {
            continue;
        }
        let push = |attr: &mut ParsedMemAttr, v: Option<u64>| {
            if let Some(v) = v.filter(|&v| v > 0) {
                attr.values.push(ParsedMemAttrValue {
                    initiator: Some(initiator.clone()),
                    target,
                    value: v as f64,
                });
            }
        };
        push(&mut latency, a.read_latency_ns);
        // The kernel documents these as MiB/s (Documentation/admin-guide/mm/numaperf.rst),
        // the unit hwloc's Bandwidth attributes use too.
        push(&mut bandwidth, a.read_bandwidth_mb_per_s);
    }
    if !latency.values.is_empty() || !bandwidth.values.is_empty() {
        notes.push(
            "latencies and bandwidths from the kernel's HMAT access classes (nodeN/access1, else access0: read_latency, read_bandwidth)"
                .to_string(),
        );
    }

    let root_words = if f.root == "/" {
        "the running kernel (/sys, /proc)".to_string()
    } else {
        format!("a recorded sysfs/procfs tree at {}", f.root)
    };
    ParsedTopology {
        imported_from: format!("{root_words} on {}", f.date),
        source: format!(
            "Linux sysfs/procfs read by `numalab topo --machine-file` on {}: nodes, CPUs, MemTotal, SLIT distances, HMAT access classes, CPU caches and siblings; every other figure is numalab::machine::HwlocDefaults (E, docs/machine-format.md)",
            f.date
        ),
        pus,
        cores,
        packages,
        numa,
        caches,
        // The whole machine: a cpuset or mems_allowed of the reading process is not applied.
        allowed_pus: None,
        allowed_nodes: None,
        machine_mem: None,
        cpu_model: f.cpu_model.clone(),
        distances,
        latency: (!latency.values.is_empty()).then_some(latency),
        bandwidth: (!bandwidth.values.is_empty()).then_some(bandwidth),
        memory_devices: Vec::new(),
        notes,
    }
}

/// Which figures of the machine are [`HwlocDefaults`] rather than the kernel's, in words with
/// their values.
fn defaults_note(f: &HostFacts, d: &HwlocDefaults) -> String {
    let tree = &f.nodes;
    let mut parts = vec![format!(
        "core clock {} GHz, {} lines in flight per core, {}-entry reorder buffer, {}-cycle locked operations, private-cache hit {:.1} ns, LLC hit {:.1} ns, TLBs, curve and link shapes, link coherence overhead {}, OS costs",
        d.ghz, d.concurrency_lines, d.rob_entries, d.locked_op_cycles, d.private_hit_ns, d.llc_hit_ns, d.link_coherence_overhead
    )];
    // A CPU node's local figures come from an access class that names the node itself.
    let local = |n: &numalab_linux::node::NodeEntry, v: fn(&AccessClass) -> Option<u64>| {
        cpu_access(n).is_some_and(|a| a.initiators.contains(n.id) && v(a).is_some())
    };
    let ids = |pick: &dyn Fn(&numalab_linux::node::NodeEntry) -> bool| -> Vec<String> {
        tree.nodes
            .iter()
            .filter(|n| pick(n))
            .map(|n| n.id.0.to_string())
            .collect()
    };
    let nodes = |ids: &[String]| {
        format!(
            "node{} {}",
            if ids.len() == 1 { "" } else { "s" },
            ids.join(",")
        )
    };
    let no_lat = ids(&|n| !n.cpus.is_empty() && !local(n, |a| a.read_latency_ns));
    if !no_lat.is_empty() {
        parts.push(format!(
            "idle local latency {} ns of {}",
            d.idle_local_ns,
            nodes(&no_lat)
        ));
    }
    let no_bw = ids(&|n| !n.cpus.is_empty() && !local(n, |a| a.read_bandwidth_mb_per_s));
    if !no_bw.is_empty() {
        parts.push(format!(
            "controller peak {} GB/s of {}",
            d.ctrl_peak_gbps,
            nodes(&no_bw)
        ));
    }
    if tree.nodes.iter().filter(|n| !n.cpus.is_empty()).count() > 1 {
        // The access classes give only each node's best initiators, so never a remote CPU node.
        parts.push(format!(
            "links between CPU nodes ({} ns per hop, {} GB/s per direction)",
            d.hop_ns, d.link_gbps_per_dir
        ));
    }
    let bare_mem = ids(&|n| n.cpus.is_empty() && cpu_access(n).is_none());
    if !bare_mem.is_empty() {
        parts.push(format!(
            "links to CPU-less {} (+{} ns, {} GB/s per direction, controller peak {} GB/s)",
            nodes(&bare_mem),
            d.memory_only_hop_ns,
            d.memory_only_link_gbps_per_dir,
            d.memory_only_ctrl_peak_gbps
        ));
    }
    if f.cpus.iter().all(|c| c.caches.is_empty()) {
        parts.push(format!(
            "the private cache ({} KiB, {}-way)",
            d.private_cache.bytes >> 10,
            d.private_cache.ways
        ));
    }
    format!(
        "figures the kernel does not give are numalab::machine::HwlocDefaults estimates (docs/machine-format.md; calibrate and override them with a TOML file whose base is this one): {}",
        parts.join("; ")
    )
}

/// Make a validated machine of what was read (pure: no file is touched).
pub fn machine_from_facts(f: &HostFacts, d: &HwlocDefaults) -> Result<Machine, MachineFileError> {
    let mut t = parsed_topology(f);
    t.notes.push(defaults_note(f, d));
    let origin = format!("{} (sysfs)", f.root);
    // Ends the note on links derived from the SLIT, where it does not determine them.
    let advice = "To give the real links: record `lstopo --of xml`, then a TOML file with \
                  hwloc = \"<that file>\", replace_links = true and one [[link]] table per link \
                  (docs/machine-format.md)";
    let m = import_parsed(&t, &origin, &machine_id(f.hostname.as_deref()), d, advice)?;
    Ok(m)
}

/// The text of a machine file: a comment saying where it came from and how to use it, then
/// [`Machine::to_toml`] (which parses back to the same machine).
pub fn machine_file_text(m: &Machine, path_shown: &str) -> String {
    format!(
        "# Machine description of this host, written by `numalab topo --machine-file`.\n\
         # Simulate on it: numalab sim --machine {path_shown} --workload ...\n\
         # The description says what came from the kernel and which figures are defaults;\n\
         # override them with a TOML file that has base = \"{path_shown}\" (docs/machine-format.md).\n\n{}",
        m.to_toml()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn cache_sizes() {
        assert_eq!(parse_cache_size("48K\n"), Some(48 << 10));
        assert_eq!(parse_cache_size("107520K"), Some(107_520 << 10));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size("12X"), None);
    }

    #[test]
    fn cpu_model_line() {
        let t = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t: fpu\n";
        assert_eq!(
            parse_cpu_model(t).as_deref(),
            Some("Intel(R) Xeon(R) Processor")
        );
        assert_eq!(parse_cpu_model("processor : 0\nCPU part : 0xd0c\n"), None);
    }

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(utc_date(UNIX_EPOCH), "1970-01-01");
        // 2024-02-29 12:00 UTC (a leap day) and 2000-03-01.
        assert_eq!(
            utc_date(UNIX_EPOCH + Duration::from_secs(1_709_208_000)),
            "2024-02-29"
        );
        assert_eq!(
            utc_date(UNIX_EPOCH + Duration::from_secs(951_868_800)),
            "2000-03-01"
        );
    }

    #[test]
    fn ids_from_hostnames() {
        assert_eq!(machine_id(Some("vm")), "host-vm");
        assert_eq!(machine_id(Some("lab server#1")), "host-lab-server-1");
        assert_eq!(machine_id(Some("  ")), "host");
        assert_eq!(machine_id(None), "host");
    }
}
