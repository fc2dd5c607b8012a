//! numactl's node and CPU specifications, with numactl's meaning (numactl(8), "nodes may be
//! specified as ..."): `all`, lists and ranges `0-3,5`, inversion `!1`, and `+N` numbers
//! relative to the caller's cpuset (`Mems_allowed` / `Cpus_allowed`), and devices
//! (`netdev:eth0`, `block:`, `pci:`, `file:`, `ip:`; device_node.rs). Absolute numbers must be
//! online and inside the cpuset; the errors say which set a number missed.

use numalab_core::ids::MAX_CPU_ID;
use numalab_core::{CpuId, NodeId, NodeMask};
use numalab_linux::sysroot::SysRoot;
use thiserror::Error;

/// What a spec is resolved against: the nodes and CPUs that exist and the caller's cpuset.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecContext {
    pub online_nodes: NodeMask,
    /// `Mems_allowed` of the calling process.
    pub allowed_nodes: NodeMask,
    pub online_cpus: Vec<CpuId>,
    /// `Cpus_allowed` of the calling process.
    pub allowed_cpus: Vec<CpuId>,
    /// Where device specs (`netdev:eth0`, `pci:0000:40:01.2`, ...) read sysfs; None: device
    /// specs are refused (a context that must not look at the host, as the fuzz target's).
    pub devices: Option<SysRoot>,
}

#[derive(Debug, Error, PartialEq)]
pub enum SpecError {
    #[error("'{spec}': {why}")]
    Malformed { spec: String, why: String },
    /// A device spec (`netdev:`, `block:`, `pci:`, `file:`, `ip:`) that gave no node.
    #[error("'{spec}': {why}")]
    Device { spec: String, why: String },
    #[error("'{spec}': node {node} does not exist (online nodes: {online})")]
    UnknownNode {
        spec: String,
        node: usize,
        online: String,
    },
    #[error("'{spec}': node {node} is outside this process's cpuset (allowed nodes: {allowed})")]
    NodeNotAllowed {
        spec: String,
        node: usize,
        allowed: String,
    },
    #[error("'{spec}': relative node +{index} does not exist: the cpuset allows {count} node(s) ({allowed})")]
    RelativeNode {
        spec: String,
        index: usize,
        count: usize,
        allowed: String,
    },
    #[error("'{spec}': CPU {cpu} does not exist (online CPUs: {online})")]
    UnknownCpu {
        spec: String,
        cpu: u32,
        online: String,
    },
    #[error("'{spec}': CPU {cpu} is outside this process's cpuset (allowed CPUs: {allowed})")]
    CpuNotAllowed {
        spec: String,
        cpu: u32,
        allowed: String,
    },
    #[error("'{spec}': relative CPU +{index} does not exist: the cpuset allows {count} CPU(s)")]
    RelativeCpu {
        spec: String,
        index: usize,
        count: usize,
    },
    #[error("'{spec}' selects no {what}")]
    Empty { spec: String, what: &'static str },
}

/// Split `!+0-2` into (inverted, relative, body).
fn prefixes(spec: &str) -> (bool, bool, &str) {
    let s = spec.trim();
    let (invert, s) = match s.strip_prefix('!') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let (relative, s) = match s.strip_prefix('+') {
        Some(r) => (true, r),
        None => (false, s),
    };
    (invert, relative, s.trim())
}

/// Set bits `lo..=hi` of `words`, a whole word at a time inside the range.
fn set_bits(words: &mut [u64], lo: usize, hi: usize) {
    let mut i = lo;
    while i <= hi {
        if i.is_multiple_of(64) && hi - i >= 63 {
            words[i / 64] = u64::MAX;
            i += 64;
        } else {
            words[i / 64] |= 1 << (i % 64);
            i += 1;
        }
    }
}

/// Numbers of a list body `0-3,5` in ascending order, duplicates kept out.
fn list_numbers(spec: &str, body: &str) -> Result<Vec<usize>, SpecError> {
    let malformed = |why: String| SpecError::Malformed {
        spec: spec.to_string(),
        why,
    };
    if body.is_empty() {
        return Err(malformed("empty list".into()));
    }
    // a set of bits, not a list: a spec repeating a wide range many times stays small
    let limit = MAX_CPU_ID as usize;
    let mut seen = vec![0u64; limit / 64];
    // only the span the ranges cover is read back (not all `limit` bits: a fuzzer's million
    // short specs a second)
    let (mut first, mut last) = (usize::MAX, 0);
    for part in body.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| malformed(format!("'{part}' is not a number or a range a-b")))
        };
        let (lo, hi) = (num(lo)?, num(hi)?);
        if lo > hi {
            return Err(malformed(format!("range '{part}' is reversed")));
        }
        if hi >= limit {
            return Err(malformed(format!(
                "{hi} in '{part}' is beyond the largest node or CPU id accepted ({})",
                limit - 1
            )));
        }
        set_bits(&mut seen, lo, hi);
        (first, last) = (first.min(lo), last.max(hi));
    }
    Ok((first..=last)
        .filter(|&i| seen[i / 64] & (1 << (i % 64)) != 0)
        .collect())
}

/// An absolute node number checked against the online nodes and the cpuset.
fn absolute_node(spec: &str, n: usize, ctx: &SpecContext) -> Result<NodeId, SpecError> {
    if n > u16::MAX as usize || !ctx.online_nodes.contains(NodeId(n as u16)) {
        return Err(SpecError::UnknownNode {
            spec: spec.to_string(),
            node: n,
            online: ctx.online_nodes.to_string(),
        });
    }
    if !ctx.allowed_nodes.contains(NodeId(n as u16)) {
        return Err(SpecError::NodeNotAllowed {
            spec: spec.to_string(),
            node: n,
            allowed: ctx.allowed_nodes.to_string(),
        });
    }
    Ok(NodeId(n as u16))
}

/// A list body split at its first device item (`0,netdev:eth0`): the numbers before it, and
/// the device spec, which runs to the end of the body as in libnuma (its id may hold commas).
fn split_device(body: &str) -> (&str, Option<(&'static str, &str)>) {
    let mut at = 0;
    for item in body.split(',') {
        let rest = body[at..].trim_start();
        if let Some(device) = crate::device_node::split_spec(rest) {
            return (body[..at].trim_end_matches(','), Some(device));
        }
        at += item.len() + 1;
    }
    (body, None)
}

/// Resolve a numactl node spec (`--membind`, `--interleave`, `--cpunodebind`, ...).
pub fn parse_nodes(spec: &str, ctx: &SpecContext) -> Result<NodeMask, SpecError> {
    let (invert, relative, body) = prefixes(spec);
    let mut mask = NodeMask::empty();
    if body == "all" {
        mask = ctx.allowed_nodes;
    } else {
        let (numbers, device) = split_device(body);
        let allowed: Vec<NodeId> = ctx.allowed_nodes.iter().collect();
        let numbers = match (numbers.is_empty(), device) {
            (true, Some(_)) => Vec::new(),
            _ => list_numbers(spec, numbers)?,
        };
        for n in numbers {
            let node = if relative {
                *allowed.get(n).ok_or_else(|| SpecError::RelativeNode {
                    spec: spec.to_string(),
                    index: n,
                    count: allowed.len(),
                    allowed: ctx.allowed_nodes.to_string(),
                })?
            } else {
                absolute_node(spec, n, ctx)?
            };
            mask.set(node);
        }
        if let Some((kind, id)) = device {
            let device_error = |why: String| SpecError::Device {
                spec: spec.to_string(),
                why,
            };
            let Some(sys) = &ctx.devices else {
                return Err(device_error(format!(
                    "device specs ({kind}...) are not resolved here"
                )));
            };
            let node = crate::device_node::node_of(kind, id, sys).map_err(device_error)?;
            mask.set(absolute_node(spec, node.0 as usize, ctx)?);
        }
    }
    if invert {
        mask = ctx.allowed_nodes.and_not(&mask);
    }
    if mask.is_empty() {
        return Err(SpecError::Empty {
            spec: spec.to_string(),
            what: "node",
        });
    }
    Ok(mask)
}

/// Resolve a numactl CPU spec (`--physcpubind`).
pub fn parse_cpus(spec: &str, ctx: &SpecContext) -> Result<Vec<CpuId>, SpecError> {
    let (invert, relative, body) = prefixes(spec);
    let mut cpus: Vec<CpuId> = Vec::new();
    if body == "all" {
        cpus = ctx.allowed_cpus.clone();
    } else {
        for n in list_numbers(spec, body)? {
            let cpu = if relative {
                *ctx.allowed_cpus
                    .get(n)
                    .ok_or_else(|| SpecError::RelativeCpu {
                        spec: spec.to_string(),
                        index: n,
                        count: ctx.allowed_cpus.len(),
                    })?
            } else {
                let c = CpuId(n as u32);
                if n > u32::MAX as usize || !ctx.online_cpus.contains(&c) {
                    return Err(SpecError::UnknownCpu {
                        spec: spec.to_string(),
                        cpu: n as u32,
                        online: numalab_machine::cpulist::format(&ctx.online_cpus),
                    });
                }
                if !ctx.allowed_cpus.contains(&c) {
                    return Err(SpecError::CpuNotAllowed {
                        spec: spec.to_string(),
                        cpu: n as u32,
                        allowed: numalab_machine::cpulist::format(&ctx.allowed_cpus),
                    });
                }
                c
            };
            cpus.push(cpu);
        }
    }
    if invert {
        cpus = ctx
            .allowed_cpus
            .iter()
            .copied()
            .filter(|c| !cpus.contains(c))
            .collect();
    }
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() {
        return Err(SpecError::Empty {
            spec: spec.to_string(),
            what: "CPU",
        });
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 online nodes, a cpuset allowing nodes 1-3 and CPUs 2-7 of 0-7.
    fn ctx() -> SpecContext {
        SpecContext {
            online_nodes: NodeMask::first_n(4),
            allowed_nodes: NodeMask::from_nodes([NodeId(1), NodeId(2), NodeId(3)]),
            online_cpus: (0..8).map(CpuId).collect(),
            allowed_cpus: (2..8).map(CpuId).collect(),
            devices: None,
        }
    }

    #[test]
    fn device_specs_name_the_devices_node() {
        let root = std::env::temp_dir().join(format!("numalab-nodespec-{}", std::process::id()));
        std::fs::remove_dir_all(&root).ok();
        let func = root.join("sys/devices/pci0000:00/0000:00:03.0");
        std::fs::create_dir_all(&func).unwrap();
        std::fs::write(func.join("numa_node"), "2\n").unwrap();
        std::fs::create_dir_all(root.join("sys/class/net")).unwrap();
        std::os::unix::fs::symlink(
            "../../devices/pci0000:00/0000:00:03.0/net/eth0",
            root.join("sys/class/net/eth0"),
        )
        .unwrap();
        let c = SpecContext {
            devices: Some(SysRoot::new(&root)),
            ..ctx()
        };
        let nodes = |s: &str| parse_nodes(s, &c).map(|m| m.to_string());
        assert_eq!(nodes("netdev:eth0"), Ok("2".to_string()));
        assert_eq!(nodes("1,netdev:eth0"), Ok("1-2".to_string()));
        assert_eq!(nodes("!netdev:eth0"), Ok("1,3".to_string()));
        assert_eq!(nodes("pci:0:3"), Ok("2".to_string()));
        assert!(matches!(
            nodes("netdev:eth9"),
            Err(SpecError::Device { .. })
        ));
        // a context without devices refuses them without looking
        assert!(matches!(
            parse_nodes("netdev:eth0", &ctx()),
            Err(SpecError::Device { .. })
        ));
        // node 0 exists but the cpuset leaves it out
        std::fs::write(func.join("numa_node"), "0\n").unwrap();
        assert!(matches!(
            nodes("netdev:eth0"),
            Err(SpecError::NodeNotAllowed { node: 0, .. })
        ));
        std::fs::remove_dir_all(&root).ok();
    }

    fn nodes(s: &str) -> String {
        parse_nodes(s, &ctx()).unwrap().to_string()
    }

    #[test]
    fn whole_words_and_their_edges() {
        for (lo, hi) in [(0, 0), (0, 63), (1, 64), (60, 200), (64, 127), (63, 128)] {
            let mut w = vec![0u64; 4];
            set_bits(&mut w, lo, hi);
            let got: Vec<usize> = (0..256)
                .filter(|&i| w[i / 64] & (1 << (i % 64)) != 0)
                .collect();
            assert_eq!(got, (lo..=hi).collect::<Vec<_>>(), "{lo}-{hi}");
        }
    }

    #[test]
    fn absolute_lists_all_and_inversion() {
        assert_eq!(nodes("1-2"), "1-2");
        assert_eq!(nodes("3,1"), "1,3");
        assert_eq!(
            nodes("all"),
            "1-3",
            "all means the cpuset's nodes, as in numactl"
        );
        assert_eq!(nodes("!2"), "1,3");
        assert_eq!(nodes("!1-2"), "3");
    }

    #[test]
    fn huge_and_repeated_ranges_stay_small() {
        let e = parse_cpus("0-4294967295", &ctx()).unwrap_err();
        assert!(e.to_string().contains("beyond the largest"), "{e}");
        // wide ranges repeated many times: a set, not a list of every repeat
        let spec = vec!["2-65535"; 512].join(",");
        let e = parse_cpus(&spec, &ctx()).unwrap_err();
        assert!(matches!(e, SpecError::UnknownCpu { cpu: 8, .. }), "{e}");
        assert_eq!(
            parse_cpus(&vec!["2-3"; 1000].join(","), &ctx()).unwrap(),
            vec![CpuId(2), CpuId(3)]
        );
    }

    #[test]
    fn relative_numbers_index_the_cpuset() {
        assert_eq!(nodes("+0"), "1");
        assert_eq!(nodes("+1-2"), "2-3");
        assert_eq!(nodes("!+0"), "2-3");
        let e = parse_nodes("+3", &ctx()).unwrap_err();
        assert!(
            matches!(
                e,
                SpecError::RelativeNode {
                    index: 3,
                    count: 3,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn node_errors_name_the_set_that_was_missed() {
        let e = parse_nodes("7", &ctx()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "'7': node 7 does not exist (online nodes: 0-3)"
        );
        let e = parse_nodes("0-1", &ctx()).unwrap_err();
        assert!(
            e.to_string()
                .contains("node 0 is outside this process's cpuset (allowed nodes: 1-3)"),
            "{e}"
        );
        assert!(matches!(
            parse_nodes("!all", &ctx()),
            Err(SpecError::Empty { .. })
        ));
        assert!(matches!(
            parse_nodes("1-x", &ctx()),
            Err(SpecError::Malformed { .. })
        ));
        assert!(matches!(
            parse_nodes("3-1", &ctx()),
            Err(SpecError::Malformed { .. })
        ));
        assert!(matches!(
            parse_nodes("", &ctx()),
            Err(SpecError::Malformed { .. })
        ));
    }

    #[test]
    fn cpu_specs() {
        let c = |s: &str| numalab_machine::cpulist::format(&parse_cpus(s, &ctx()).unwrap());
        assert_eq!(c("2-3,7"), "2-3,7");
        assert_eq!(c("all"), "2-7");
        assert_eq!(c("+0-1"), "2-3");
        assert_eq!(c("!2-5"), "6-7");
        assert!(matches!(
            parse_cpus("9", &ctx()),
            Err(SpecError::UnknownCpu { cpu: 9, .. })
        ));
        assert!(matches!(
            parse_cpus("0", &ctx()),
            Err(SpecError::CpuNotAllowed { cpu: 0, .. })
        ));
        assert!(matches!(
            parse_cpus("+6", &ctx()),
            Err(SpecError::RelativeCpu { index: 6, .. })
        ));
    }
}
