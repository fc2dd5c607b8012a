//! numactl's `--show` and `--hardware` output, line for line as numactl 2.0.16 (Debian 12's)
//! prints it through libnuma: `show()` and `hardware()` of numactl.c, with libnuma's readings
//! (the run node mask from the affinity and Mems_allowed, membind as the cpuset's nodes unless
//! the policy binds, "preferred" as the policy's nodemask whatever its mode).
//! `crates/cli/tests/vm_numactl_show.rs` compares both with the real numactl on the test VM.

use numalab_core::{CpuId, NodeId, NodeMask};
use numalab_linux::node::NodeTree;
use numalab_linux::KernelMode;

/// numactl's `policy_names` (2.0.16: MPOL_WEIGHTED_INTERLEAVE, 6, came later and prints as
/// `[6]`).
const POLICY_NAMES: [&str; 6] = [
    "default",
    "preferred",
    "bind",
    "interleave",
    "local",
    "preferred-many",
];

/// What `--show` reads from the kernel, gathered by the caller.
#[derive(Clone, Debug, Default)]
pub struct ShowState {
    /// get_mempolicy's mode, mode flags included (numactl prints `[N]` for a value with flags).
    pub raw_mode: i32,
    /// The policy's nodemask.
    pub nodes: Vec<NodeId>,
    /// The next interleave node (get_mempolicy MPOL_F_NODE); 0 where the kernel gives none.
    pub interleave_next: u16,
    /// sched_getaffinity's CPUs.
    pub cpus: Vec<CpuId>,
    /// Mems_allowed.
    pub mems_allowed: Vec<NodeId>,
}

/// numactl's `policy_name`: the mode's name, `[N]` for a mode with flags or one numactl
/// 2.0.16 does not know.
pub(crate) fn policy_name(raw: i32) -> String {
    usize::try_from(raw)
        .ok()
        .and_then(|m| POLICY_NAMES.get(m))
        .map_or_else(|| format!("[{raw}]"), |n| n.to_string())
}

/// libnuma's `printmask`: `name: ` then every member followed by a space.
pub(crate) fn mask_line(name: &str, ids: impl IntoIterator<Item = u32>) -> String {
    let mut s = format!("{name}: ");
    for i in ids {
        s += &format!("{i} ");
    }
    s + "\n"
}

/// `numactl --show`.
pub fn show(st: &ShowState, tree: &NodeTree) -> String {
    let mode = st.raw_mode;
    let is = |m: KernelMode| mode == m as i32;
    let mut o = format!("policy: {}\n", policy_name(mode));
    let nodes: Vec<u32> = st.nodes.iter().map(|n| n.0 as u32).collect();
    let allowed: Vec<u32> = st.mems_allowed.iter().map(|n| n.0 as u32).collect();
    let membind = if is(KernelMode::Bind) {
        nodes.clone()
    } else {
        allowed.clone()
    };
    // libnuma's numa_preferred_many() hands back the policy's nodemask whatever the mode
    let preferred = nodes.clone();
    let cur = st.interleave_next;
    o += "preferred node: ";
    // numactl's switch: a mode it has no case for (MPOL_LOCAL, flags) prints nothing, not
    // even the newline, so physcpubind follows on the same line
    if is(KernelMode::Preferred) {
        o += &format!("{}\n", preferred.first().copied().unwrap_or(0));
    } else if is(KernelMode::Default) {
        o += "current\n";
    } else if is(KernelMode::Interleave) {
        o += &format!("{cur} (interleave next)\n");
    } else if is(KernelMode::Bind) {
        o += &format!("{}\n", membind.first().map_or(-1, |&n| n as i64));
    } else if is(KernelMode::PreferredMany) {
        o += &format!("{cur} (preferred-many)\n");
    }
    if is(KernelMode::Interleave) {
        o += &mask_line("interleavemask", nodes.iter().copied());
        o += &format!("interleavenode: {cur}\n");
    }
    let mut cpus: Vec<u32> = st.cpus.iter().map(|c| c.0).collect();
    cpus.sort_unstable();
    o += &mask_line("physcpubind", cpus.iter().copied());
    // libnuma's run node mask: allowed nodes with a CPU in the affinity
    let run: Vec<u32> = tree
        .nodes
        .iter()
        .filter(|n| allowed.contains(&(n.id.0 as u32)))
        .filter(|n| n.cpus.iter().any(|c| cpus.contains(&c.0)))
        .map(|n| n.id.0 as u32)
        .collect();
    o += &mask_line("cpubind", run.iter().copied());
    o += &mask_line("nodebind", run.iter().copied());
    o += &mask_line("membind", membind);
    o += &mask_line("preferred", preferred);
    o
}

/// C's `% 3d`: a space for the sign, the whole at least 3 wide.
fn sp3(n: i64) -> String {
    let s = if n < 0 {
        n.to_string()
    } else {
        format!(" {n}")
    };
    format!("{s:>3}")
}

/// A node's CPUs as numactl 2.0.19's `--cpu-compress` prints them: runs `a-b` joined by
/// ", " (numactl prints "," before each run's " a-b"), then the count: ` 0-3, 8-11 (8)`.
fn compressed_cpus(cpus: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &c in cpus {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == c => *end = c,
            _ => runs.push((c, c)),
        }
    }
    let parts: Vec<String> = runs
        .iter()
        .map(|&(a, b)| {
            if a == b {
                format!(" {a}")
            } else {
                format!(" {a}-{b}")
            }
        })
        .collect();
    format!("{} ({})", parts.join(","), cpus.len())
}

/// `numactl --hardware`; `cpu_compress`: numactl 2.0.19's `--cpu-compress` CPU lists.
pub fn hardware(tree: &NodeTree, cpu_compress: bool) -> String {
    let ids: Vec<u16> = tree.nodes.iter().map(|n| n.id.0).collect();
    // numactl's `available:` list is the kernel's list format (runs as a-b, commas)
    let listed = NodeMask::from_nodes(tree.nodes.iter().map(|n| n.id));
    let mut o = format!("available: {} nodes ({listed})\n", ids.len());
    for n in &tree.nodes {
        let id = n.id.0;
        o += &format!("node {id} cpus:");
        let mut cpus: Vec<u32> = n.cpus.iter().map(|c| c.0).collect();
        cpus.sort_unstable();
        if cpu_compress {
            o += &compressed_cpus(&cpus);
        } else {
            for c in cpus {
                o += &format!(" {c}");
            }
        }
        o += "\n";
        let mb = |kb: Option<u64>| {
            kb.map_or("<not available>".to_string(), |k| {
                format!("{} MB", (k << 10) >> 20)
            })
        };
        o += &format!(
            "node {id} size: {}\n",
            mb(n.meminfo.as_ref().map(|m| m.mem_total_kb))
        );
        o += &format!(
            "node {id} free: {}\n",
            mb(n.meminfo.as_ref().map(|m| m.mem_free_kb))
        );
    }
    let (Some(first), Some(last)) = (tree.nodes.first(), tree.nodes.last()) else {
        return o;
    };
    if tree.distance(last.id, first.id).unwrap_or(0) == 0 {
        return o + "No distance information available.\n";
    }
    o += "node distances:\nnode ";
    for &i in &ids {
        o += &format!("{} ", sp3(i as i64));
    }
    o += "\n";
    for from in &tree.nodes {
        o += &format!("{}: ", sp3(from.id.0 as i64));
        for to in &tree.nodes {
            let d = tree.distance(from.id, to.id).unwrap_or(0);
            o += &format!("{} ", sp3(d as i64));
        }
        o += "\n";
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_compress_prints_runs_and_the_count() {
        assert_eq!(
            compressed_cpus(&[0, 1, 2, 3, 8, 9, 10, 11]),
            " 0-3, 8-11 (8)"
        );
        assert_eq!(compressed_cpus(&[5]), " 5 (1)");
        assert_eq!(compressed_cpus(&[0, 2, 3]), " 0, 2-3 (3)");
        assert_eq!(compressed_cpus(&[]), " (0)");
    }

    #[test]
    fn numbers_and_ranges_as_printf_and_numactl_write_them() {
        assert_eq!(sp3(0), "  0");
        assert_eq!(sp3(10), " 10");
        assert_eq!(sp3(255), " 255");
        let list = |ids: &[u16]| NodeMask::from_nodes(ids.iter().map(|&n| NodeId(n))).to_string();
        assert_eq!(list(&[0, 1, 2, 3, 4]), "0-4");
        assert_eq!(list(&[0, 2, 3]), "0,2-3");
        assert_eq!(list(&[0, 1, 2, 4]), "0-2,4");
    }

    fn state(mode: KernelMode, nodes: &[u16]) -> ShowState {
        ShowState {
            raw_mode: mode as i32,
            nodes: nodes.iter().map(|&n| NodeId(n)).collect(),
            interleave_next: 2,
            cpus: vec![CpuId(1), CpuId(0)],
            mems_allowed: vec![NodeId(0), NodeId(1), NodeId(2)],
        }
    }

    #[test]
    fn show_prints_numactls_lines_for_each_mode() {
        let tree = NodeTree::default();
        let o = show(&state(KernelMode::Default, &[]), &tree);
        assert_eq!(
            o,
            "policy: default\npreferred node: current\nphyscpubind: 0 1 \ncpubind: \n\
             nodebind: \nmembind: 0 1 2 \npreferred: \n"
        );
        let o = show(&state(KernelMode::Interleave, &[0, 2]), &tree);
        assert!(
            o.contains(
                "preferred node: 2 (interleave next)\ninterleavemask: 0 2 \ninterleavenode: 2\n"
            ),
            "{o}"
        );
        assert!(o.ends_with("preferred: 0 2 \n"), "{o}");
        let o = show(&state(KernelMode::Bind, &[1, 2]), &tree);
        assert!(
            o.contains("preferred node: 1\n") && o.contains("membind: 1 2 \npreferred: 1 2 \n"),
            "{o}"
        );
        // MPOL_LOCAL has no case in numactl's switch: no newline after "preferred node: "
        let o = show(&state(KernelMode::Local, &[]), &tree);
        assert!(o.contains("preferred node: physcpubind: 0 1 \n"), "{o}");
        let mut st = state(KernelMode::Bind, &[1]);
        st.raw_mode |= 1 << 13; // MPOL_F_NUMA_BALANCING
        assert!(show(&st, &tree).starts_with("policy: [8194]\npreferred node: physcpubind"));
    }
}
