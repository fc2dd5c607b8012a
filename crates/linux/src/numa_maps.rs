//! `/proc/PID/numa_maps`: per-VMA policy and per-node page counts (fs/proc/task_mmu.c,
//! `show_numa_map`). One line per VMA:
//!
//! ```text
//! 7f62691b2000 bind=static:0-1 file=/usr/lib/libc.so.6 mapped=206 mapmax=13 N0=150 N1=56 kernelpagesize_kB=4
//! ```
//!
//! The policy is `mpol_to_str()`'s text; two modes contain a space (`prefer (many)`,
//! `weighted interleave`). Paths are printed by `seq_path` with space, tab, newline and `=`
//! escaped as `\ooo`.

use crate::error::{Error, ParseError};
use crate::parse::parse_u64;
use crate::policy::{KernelMode, ModeFlags};
use crate::sysroot::{Pid, SysRoot};
use numalab_core::nodemask::MAX_NODES;
use numalab_core::{MemPolicy, NodeId, NodeMask};
use serde::Serialize;
use std::collections::BTreeMap;

/// A VMA's policy as numa_maps prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NumaMapsPolicy {
    /// None for a mode name this parser does not know (kept in `mode_name`).
    pub mode: Option<KernelMode>,
    /// The mode as printed (`default`, `prefer`, `bind`, `interleave`, `local`,
    /// `prefer (many)`, `weighted interleave`).
    pub mode_name: String,
    /// Mode flags printed after `=`.
    pub flags: ModeFlags,
    /// Nodes printed after `:` (empty when none).
    pub nodes: NodeMask,
}

impl NumaMapsPolicy {
    /// In numalab's vocabulary (None for an unknown mode).
    pub fn to_mempolicy(&self) -> Option<MemPolicy> {
        let k = crate::policy::KernelPolicy {
            mode: self.mode?,
            flags: self.flags,
            nodes: self.nodes,
        };
        Some(k.to_mempolicy())
    }
}

/// One numa_maps line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NumaMapsEntry {
    /// Start address of the VMA.
    pub start: u64,
    /// The VMA policy (the task policy where the VMA has none).
    pub policy: NumaMapsPolicy,
    /// `file=`, unescaped.
    pub file: Option<String>,
    /// The initial heap (brk area).
    pub heap: bool,
    /// The initial stack (`stack`; old kernels also printed `stack:TID` for thread stacks).
    pub stack: bool,
    /// A hugetlbfs mapping (page counts are then in huge pages of `kernel_page_size_kb`).
    pub huge: bool,
    /// `anon=`: anonymous pages.
    pub anon: Option<u64>,
    /// `dirty=`: dirty pages.
    pub dirty: Option<u64>,
    /// `mapped=`: mapped pages (printed when not all anon or dirty).
    pub mapped: Option<u64>,
    /// `mapmax=`: highest map count of a page.
    pub mapmax: Option<u64>,
    /// `swapcache=`: pages in the swap cache.
    pub swapcache: Option<u64>,
    /// `active=`: pages on the active list.
    pub active: Option<u64>,
    /// `writeback=`: pages under writeback.
    pub writeback: Option<u64>,
    /// `Nn=count`: pages (of `kernel_page_size_kb`) on each node.
    pub pages_per_node: BTreeMap<NodeId, u64>,
    /// `kernelpagesize_kB=`: the unit of the counts.
    pub kernel_page_size_kb: Option<u64>,
    /// Tokens this parser does not know, by key (value empty for a bare word).
    pub other: BTreeMap<String, String>,
}

impl NumaMapsEntry {
    /// Pages present, over all nodes.
    pub fn pages(&self) -> u64 {
        self.pages_per_node
            .values()
            .fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Bytes on `node` (pages × kernel page size, 4 KiB if not printed).
    pub fn bytes_on(&self, node: NodeId) -> u64 {
        let pages = self.pages_per_node.get(&node).copied().unwrap_or(0);
        pages.saturating_mul(self.kernel_page_size_kb.unwrap_or(4).saturating_mul(1024))
    }
}

/// Bytes per node over all entries.
pub fn bytes_per_node(entries: &[NumaMapsEntry]) -> BTreeMap<NodeId, u64> {
    let mut out: BTreeMap<NodeId, u64> = BTreeMap::new();
    for e in entries {
        for n in e.pages_per_node.keys() {
            let b = out.entry(*n).or_default();
            *b = b.saturating_add(e.bytes_on(*n));
        }
    }
    out
}

/// Mode names as `mpol_to_str` prints them, longest first so `prefer (many)` wins over `prefer`.
const MODES: [(&str, KernelMode); 7] = [
    ("weighted interleave", KernelMode::WeightedInterleave),
    ("prefer (many)", KernelMode::PreferredMany),
    ("interleave", KernelMode::Interleave),
    ("default", KernelMode::Default),
    ("prefer", KernelMode::Preferred),
    ("bind", KernelMode::Bind),
    ("local", KernelMode::Local),
];

/// Parse a policy string (`bind=static|balancing:0-1`). Returns the policy and the rest of
/// the line after it.
fn parse_policy<'a>(
    s: &'a str,
    file: &str,
    ln: usize,
) -> Result<(NumaMapsPolicy, &'a str), ParseError> {
    let (mode, mode_name, after) = match MODES.iter().find(|(name, _)| {
        // The mode name must end there: `prefer` is not a prefix match of `preferred`.
        s.starts_with(name)
            && !s[name.len()..].starts_with(|c: char| !(c == '=' || c == ':' || c.is_whitespace()))
    }) {
        Some((name, m)) => (Some(*m), name.to_string(), &s[name.len()..]),
        None => {
            let end = s
                .find(|c: char| c == '=' || c == ':' || c.is_whitespace())
                .unwrap_or(s.len());
            if end == 0 {
                return Err(ParseError::new(file, ln, "a policy after the address", s));
            }
            (None, s[..end].to_string(), &s[end..])
        }
    };
    let tok_end = after.find(char::is_whitespace).unwrap_or(after.len());
    let (tail, rest) = after.split_at(tok_end);
    let (flag_part, node_part) = match tail.split_once(':') {
        Some((f, n)) => (f, Some(n)),
        None => (tail, None),
    };
    let mut flags = ModeFlags::empty();
    if let Some(fl) = flag_part.strip_prefix('=') {
        for f in fl.split('|') {
            flags = flags
                | match f {
                    "static" => ModeFlags::STATIC_NODES,
                    "relative" => ModeFlags::RELATIVE_NODES,
                    "balancing" => ModeFlags::NUMA_BALANCING,
                    _ => {
                        return Err(ParseError::new(
                            file,
                            ln,
                            "policy flags static, relative or balancing",
                            f,
                        ))
                    }
                };
        }
    } else if !flag_part.is_empty() {
        return Err(ParseError::new(
            file,
            ln,
            "'=flags' or ':nodes' after the policy mode",
            flag_part,
        ));
    }
    let nodes = match node_part {
        Some(n) => {
            crate::parse::parse_node_list(n, file).map_err(|e| ParseError { line: ln, ..e })?
        }
        None => NodeMask::empty(),
    };
    Ok((
        NumaMapsPolicy {
            mode,
            mode_name,
            flags,
            nodes,
        },
        rest,
    ))
}

/// Undo `seq_path`'s `\ooo` escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if v <= 0xff {
                out.push(v as u8);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse the whole file.
pub fn parse_numa_maps(text: &str, file: &str) -> Result<Vec<NumaMapsEntry>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let (addr, rest) = line.split_once(' ').unwrap_or((line, ""));
        let start = u64::from_str_radix(addr, 16)
            .map_err(|_| ParseError::new(file, ln, "a hexadecimal start address", addr))?;
        let (policy, rest) = parse_policy(rest, file, ln)?;
        let mut e = NumaMapsEntry {
            start,
            policy,
            file: None,
            heap: false,
            stack: false,
            huge: false,
            anon: None,
            dirty: None,
            mapped: None,
            mapmax: None,
            swapcache: None,
            active: None,
            writeback: None,
            pages_per_node: BTreeMap::new(),
            kernel_page_size_kb: None,
            other: BTreeMap::new(),
        };
        for tok in rest.split_whitespace() {
            let Some((k, v)) = tok.split_once('=') else {
                match tok {
                    "heap" => e.heap = true,
                    "huge" => e.huge = true,
                    t if t == "stack" || t.starts_with("stack:") => e.stack = true,
                    t => {
                        e.other.insert(t.to_string(), String::new());
                    }
                }
                continue;
            };
            let num = |what: &str| parse_u64(v, file, ln, what);
            match k {
                "file" => e.file = Some(unescape(v)),
                "anon" => e.anon = Some(num(k)?),
                "dirty" => e.dirty = Some(num(k)?),
                "mapped" => e.mapped = Some(num(k)?),
                "mapmax" => e.mapmax = Some(num(k)?),
                "swapcache" => e.swapcache = Some(num(k)?),
                "active" => e.active = Some(num(k)?),
                "writeback" => e.writeback = Some(num(k)?),
                "kernelpagesize_kB" => e.kernel_page_size_kb = Some(num(k)?),
                _ => {
                    if let Some(n) = k
                        .strip_prefix('N')
                        .filter(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
                    {
                        let node: u16 = n
                            .parse()
                            .ok()
                            .filter(|n| (*n as usize) < MAX_NODES)
                            .ok_or_else(|| {
                                ParseError::new(
                                    file,
                                    ln,
                                    format!("a node number below {MAX_NODES}"),
                                    k,
                                )
                            })?;
                        let count = num(&format!("the page count of node {node}"))?;
                        if e.pages_per_node.insert(NodeId(node), count).is_some() {
                            return Err(ParseError::new(
                                file,
                                ln,
                                format!("node {node} once"),
                                tok,
                            ));
                        }
                    } else {
                        e.other.insert(k.to_string(), v.to_string());
                    }
                }
            }
        }
        out.push(e);
    }
    Ok(out)
}

/// Read `/proc/PID/numa_maps` under `root`.
pub fn read_numa_maps(root: &SysRoot, pid: Pid) -> Result<Vec<NumaMapsEntry>, Error> {
    let rel = format!("proc/{}/numa_maps", pid.proc_dir());
    let t = root.read(&rel)?;
    parse_numa_maps(&t, &rel).map_err(|e| e.in_file(root.path(&rel).display()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiword_modes_and_flags() {
        let t = "\
7f0000000000 weighted interleave:0-3 anon=64 dirty=64 N0=16 N1=16 N2=16 N3=16 kernelpagesize_kB=4
7f0000100000 prefer (many):1-2 anon=1 dirty=1 N1=1 kernelpagesize_kB=4
7f0000200000 bind=static|balancing:2 file=/tmp/a\\040b mapped=3 N2=3 kernelpagesize_kB=4
7f0000300000 prefer:1 huge anon=2 N1=2 kernelpagesize_kB=2048
7f0000400000 local
55d000000000 default heap anon=4 dirty=4 active=0 N0=4 kernelpagesize_kB=4
7ffd00000000 default stack:1234 anon=3 N0=3 kernelpagesize_kB=4
";
        let v = parse_numa_maps(t, "numa_maps").unwrap();
        assert_eq!(v.len(), 7);
        assert_eq!(v[0].policy.mode, Some(KernelMode::WeightedInterleave));
        assert_eq!(v[0].pages(), 64);
        assert_eq!(v[1].policy.mode, Some(KernelMode::PreferredMany));
        assert_eq!(v[1].policy.nodes.to_string(), "1-2");
        assert_eq!(
            v[2].policy.flags,
            ModeFlags::STATIC_NODES | ModeFlags::NUMA_BALANCING
        );
        assert_eq!(v[2].file.as_deref(), Some("/tmp/a b"));
        assert_eq!(
            v[3].policy.to_mempolicy(),
            Some(MemPolicy::Preferred { node: NodeId(1) })
        );
        assert!(v[3].huge);
        assert_eq!(v[3].bytes_on(NodeId(1)), 2 * 2048 * 1024);
        assert_eq!(v[4].policy.mode, Some(KernelMode::Local));
        assert!(v[5].heap && v[6].stack);
        assert_eq!(bytes_per_node(&v)[&NodeId(0)], 23 * 4096);
    }

    #[test]
    fn malformed_lines_name_line_and_expectation() {
        let e = parse_numa_maps("7f00 default N0=1\nzz default\n", "numa_maps").unwrap_err();
        assert_eq!((e.line, e.found.as_str()), (2, "zz"));
        let e = parse_numa_maps("7f00 default N0=x\n", "numa_maps").unwrap_err();
        assert!(e.expected.contains("node 0"), "{e}");
        assert!(parse_numa_maps("7f00 bind:0-999\n", "numa_maps").is_err());
        assert!(parse_numa_maps("7f00 bind=sticky:0\n", "numa_maps").is_err());
        assert!(parse_numa_maps("7f00 default N999=1\n", "numa_maps").is_err());
        assert!(parse_numa_maps("7f00\n", "numa_maps").is_err());
        assert!(parse_numa_maps("7f00 default N0=1 N0=2\n", "numa_maps").is_err());
        // A future mode is kept by name, not rejected.
        let v = parse_numa_maps("7f00 spread:0-1 N0=1\n", "numa_maps").unwrap();
        assert_eq!(v[0].policy.mode, None);
        assert_eq!(v[0].policy.mode_name, "spread");
    }
}
