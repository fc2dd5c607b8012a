//! `numastat` (numactl's tool, version 20130723 as in numactl 2.0.x), table for table: the
//! kernel's per-node allocation counters (`nodeN/numastat`), per-node meminfo (`-m`) and the
//! per-node memory of processes from `/proc/PID/numa_maps` (`-p`), with numastat's units,
//! rows, column widths, sorting and line folding. Without any option it prints the
//! compatible form of the old Perl numastat (raw page counts, `nodeN` headers).
//!
//! What it reads, all under a [`SysRoot`]: `sys/devices/system/node/node<N>/{numastat,meminfo}`
//! (nodes found by listing the directory, as numastat does, not from `online`),
//! `proc/meminfo` (Hugepagesize), `proc/PID/{status,cmdline,numa_maps}`.

pub mod table;

use crate::error::{Error, ParseError};
use crate::sysroot::SysRoot;
use table::{Cell, Justify, Table};

/// numastat's version string (numastat.c's `version_string`).
pub const VERSION: &str = "20130723";

/// Rows of the process tables: numa_maps keywords whose lines are counted apart (a line
/// with none of them is "Private"), in numastat's order.
const PROCESS_ROWS: [(&str, &str); 4] = [
    ("huge", "Huge"),
    ("heap", "Heap"),
    ("stack", "Stack"),
    ("N", "Private"),
];
const HUGE_ROW: usize = 0;
const PRIVATE_ROW: usize = 3;

/// `nodeN/numastat` lines and their labels (numastat -n's), in numastat's row order.
pub const NUMASTAT_ROWS: [(&str, &str); 6] = [
    ("numa_hit", "Numa_Hit"),
    ("numa_miss", "Numa_Miss"),
    ("numa_foreign", "Numa_Foreign"),
    ("interleave_hit", "Interleave_Hit"),
    ("local_node", "Local_Node"),
    ("other_node", "Other_Node"),
];

/// `nodeN/meminfo` fields numastat shows with `-m`, in its row order (label = token). A
/// field the kernel has and this list lacks is reported as numastat reports it ("Token X not
/// in hash table.") and left out.
const MEMINFO_ROWS: [&str; 36] = [
    "MemTotal",
    "MemFree",
    "MemUsed",
    "HighTotal",
    "HighFree",
    "LowTotal",
    "LowFree",
    "Active",
    "Inactive",
    "Active(anon)",
    "Inactive(anon)",
    "Active(file)",
    "Inactive(file)",
    "Unevictable",
    "Mlocked",
    "Dirty",
    "Writeback",
    "FilePages",
    "Mapped",
    "AnonPages",
    "Shmem",
    "KernelStack",
    "PageTables",
    "NFS_Unstable",
    "Bounce",
    "WritebackTmp",
    "Slab",
    "SReclaimable",
    "SUnreclaim",
    "AnonHugePages",
    "ShmemHugePages",
    "ShmemPmdMapped",
    "HugePages_Total",
    "HugePages_Free",
    "HugePages_Surp",
    "KReclaimable",
];

const MB: f64 = 1024.0 * 1024.0;

/// A `-p` argument or a positional one: a PID (all digits) or a pattern matched against
/// every process's name and command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One process.
    Pid(u32),
    /// Every process whose name or command line contains it.
    Pattern(String),
}

impl Target {
    /// numastat's reading: all digits is a PID, anything else a pattern.
    pub fn parse(arg: &str) -> Target {
        if !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_digit()) {
            // numastat's atoi: digits beyond an int wrap; no real PID is that long
            Target::Pid(arg.parse().unwrap_or(u32::MAX))
        } else {
            Target::Pattern(arg.to_string())
        }
    }
}

/// numastat's options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `-c`: columns as narrow as their contents, no decimals.
    pub compress: bool,
    /// `-m`: per-node meminfo.
    pub meminfo: bool,
    /// `-n`: the allocation counters in MB.
    pub numastat: bool,
    /// `-p` and positional arguments.
    pub targets: Vec<Target>,
    /// `-s[NODE]`: sort rows by the Total column (`Some(None)`) or by a node's.
    pub sort: Option<Option<u32>>,
    /// `-v`: one table per process even for several.
    pub verbose: bool,
    /// `-z`: hide rows and columns of zeros.
    pub skip_zeros: bool,
    /// No option and no argument at all: the old Perl numastat's output.
    pub compatible: bool,
    /// Line width for folding (numastat: `NUMASTAT_WIDTH`, the terminal's, or unlimited).
    pub screen_width: usize,
    /// The process running numastat, never matched by a pattern.
    pub own_pid: u32,
    /// The system's base page size in bytes.
    pub page_size: u64,
}

/// What numastat prints: its standard output, its standard error (`perror` lines), and
/// whether a process named by PID could not be read (numastat exits 0 then; numalab exits 1,
/// docs/numastat.md).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// The tables and notes numastat prints on standard output.
    pub stdout: String,
    /// What numastat's `perror` calls print.
    pub stderr: String,
    /// Some process's numa_maps could not be read.
    pub unreadable_pid: bool,
}

/// The node numbers, ascending, from the `node<N>` entries of the node directory.
fn nodes(root: &SysRoot) -> Result<Vec<u32>, Error> {
    let dir = crate::node::NODE_DIR;
    let names = root.list_dir(dir)?.unwrap_or_default();
    let mut ids: Vec<u32> = names
        .iter()
        .filter_map(|n| n.strip_prefix("node"))
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|d| d.parse().ok())
        .collect();
    ids.sort_unstable();
    if ids.is_empty() {
        return Err(Error::Argument {
            syscall: "numastat",
            problem: format!("{}: no node<N> directories", root.path(dir).display()),
            remedy: "mount sysfs, or run on a kernel built with CONFIG_NUMA".into(),
        });
    }
    Ok(ids)
}

/// Runs numastat with `opts` against `root`.
pub fn numastat(root: &SysRoot, opts: &Options) -> Result<Output, Error> {
    let nodes = nodes(root)?;
    let mut out = Output::default();
    if opts.compatible {
        // raw page counts: no unit to convert, so no huge page size to read
        system_table(root, opts, &nodes, SystemFile::Numastat, 0.0, &mut out)?;
        return Ok(out);
    }
    let mut pids = Vec::new();
    for t in &opts.targets {
        match t {
            Target::Pid(p) => pids.push(*p),
            Target::Pattern(p) => {
                let found = matching_pids(root, p, opts.own_pid)?;
                if found.is_empty() {
                    out.stdout
                        .push_str(&format!("Found no processes containing pattern: \"{p}\"\n"));
                }
                pids.extend(found);
            }
        }
    }
    pids.sort_unstable();
    pids.dedup();
    let huge = huge_page_bytes(root)?;
    if !pids.is_empty() {
        process_tables(root, opts, &nodes, &pids, huge, &mut out)?;
    }
    if opts.meminfo {
        out.stdout
            .push_str("\nPer-node system memory usage (in MBs):\n");
        system_table(root, opts, &nodes, SystemFile::Meminfo, huge, &mut out)?;
    }
    if opts.numastat || (pids.is_empty() && !opts.meminfo) {
        out.stdout.push_str("\nPer-node numastat info (in MBs):\n");
        system_table(root, opts, &nodes, SystemFile::Numastat, huge, &mut out)?;
    }
    Ok(out)
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum SystemFile {
    Numastat,
    Meminfo,
}

/// `Hugepagesize` from /proc/meminfo, bytes (0 when absent, as numastat takes it).
pub fn huge_page_bytes(root: &SysRoot) -> Result<f64, Error> {
    let text = root.read_optional("proc/meminfo")?.unwrap_or_default();
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("Hugepagesize"))
        .and_then(|rest| {
            let digits: String = rest
                .trim_start_matches(|c: char| !c.is_ascii_digit())
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            digits.parse::<f64>().ok()
        })
        .unwrap_or(0.0)
        * 1024.0)
}

/// The "Node N"/"nodeN" and "Total" column headers.
fn node_header(opts: &Options, node: u32) -> String {
    if opts.compatible {
        format!("node{node}")
    } else {
        format!("Node {node}")
    }
}

/// The table of a per-node system file: `numastat` (`-n`, or the compatible form) or
/// `meminfo` (`-m`); `huge` is Hugepagesize in bytes (HugePages_* lines count huge pages).
fn system_table(
    root: &SysRoot,
    opts: &Options,
    nodes: &[u32],
    file: SystemFile,
    huge: f64,
    out: &mut Output,
) -> Result<(), Error> {
    let rows: Vec<(&str, &str)> = match file {
        SystemFile::Numastat => NUMASTAT_ROWS.to_vec(),
        SystemFile::Meminfo => MEMINFO_ROWS.iter().map(|t| (*t, *t)).collect(),
    };
    let (name, token_at) = match file {
        SystemFile::Numastat => ("numastat", 0),
        // "Node 3 Inactive:  210680 kB"
        SystemFile::Meminfo => ("meminfo", 2),
    };
    let header_rows = if opts.compatible { 1 } else { 2 };
    let total = 1 + nodes.len();
    let mut t = Table::new(header_rows, 1, rows.len(), nodes.len() + 1);
    for (i, (token, label)) in rows.iter().enumerate() {
        let shown = if opts.compatible { token } else { label };
        t.set(header_rows + i, 0, Cell::Text(shown.to_string()));
    }
    t.column(0, 16, 0, Justify::Left);
    let decimals = if opts.compress { 0 } else { 2 };
    let page = opts.page_size as f64;
    for (i, &node) in nodes.iter().enumerate() {
        let col = 1 + i;
        t.set(0, col, Cell::Text(node_header(opts, node)));
        if !opts.compatible {
            t.set(1, col, Cell::Rule('-'));
        }
        t.column(
            col,
            16,
            if opts.compatible { 0 } else { decimals },
            Justify::Right,
        );
        let rel = format!("{}/node{node}/{name}", crate::node::NODE_DIR);
        let text = root.read(&rel)?;
        for line in text.lines() {
            let tok: Vec<&str> = line
                .split([' ', '\t', '\r', ':'])
                .filter(|s| !s.is_empty())
                .collect();
            let Some(token) = tok.get(token_at) else {
                continue;
            };
            let Some(row) = rows.iter().position(|(k, _)| k == token) else {
                out.stdout
                    .push_str(&format!("Token {token} not in hash table.\n"));
                continue;
            };
            let mut value = tok.get(token_at + 1).map_or(0.0, |v| atol(v) as f64);
            if !opts.compatible {
                let multiplier = if tok.len() < 4 {
                    page
                } else if tok[2].starts_with("HugePages") {
                    huge
                } else if tok.get(4).is_some_and(|u| u.starts_with("kB")) {
                    1024.0
                } else {
                    1.0
                };
                value = value * multiplier / MB;
            }
            t.set(header_rows + row, col, Cell::Num(value));
            t.add(header_rows + row, total, value);
        }
    }
    if !opts.compatible {
        t.set(0, total, Cell::Text("Total".into()));
        t.set(1, total, Cell::Rule('-'));
        t.column(total, 16, decimals, Justify::Right);
    }
    if opts.compress {
        for col in 0..t.cols() {
            t.fit_width(col, 4, 16);
        }
    }
    if let Some(node) = opts.sort {
        let col = sort_column(nodes, node);
        t.sort_descending(header_rows, header_rows + rows.len() - 1, col);
    }
    out.stdout
        .push_str(&t.render(opts.screen_width, !opts.skip_zeros));
    Ok(())
}

/// The column `-s[NODE]` sorts by: Total, or (NODE among the node count) the column numastat
/// computes from the node's number (which is the node's own column where nodes are numbered
/// from 0 without gaps).
fn sort_column(nodes: &[u32], node: Option<u32>) -> usize {
    match node {
        Some(n) if (n as usize) < nodes.len() => {
            (1 + nodes[n as usize] as usize).min(1 + nodes.len())
        }
        _ => 1 + nodes.len(),
    }
}

/// C's atol: leading digits (with a sign), 0 when none.
fn atol(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, digits) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let n: i64 = digits
        .bytes()
        .take_while(|b| b.is_ascii_digit())
        .fold(0i64, |a, b| {
            a.wrapping_mul(10).wrapping_add((b - b'0') as i64)
        });
    if neg {
        -n
    } else {
        n
    }
}

/// `Name:` of /proc/PID/status (None for a process that is gone).
fn command_name(root: &SysRoot, pid: u32) -> Option<String> {
    let text = root.read_optional(&format!("proc/{pid}/status")).ok()??;
    text.lines()
        .find_map(|l| l.strip_prefix("Name:"))
        .map(|n| n.trim().to_string())
}

/// Processes whose name followed by their command line (NULs as spaces) contains `pattern`,
/// except `own_pid`.
fn matching_pids(root: &SysRoot, pattern: &str, own_pid: u32) -> Result<Vec<u32>, Error> {
    let mut found = Vec::new();
    for entry in root.list_dir("proc")?.unwrap_or_default() {
        if !entry.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let pid = atol(&entry) as u32;
        let mut text = command_name(root, pid).unwrap_or_default();
        if let Ok(Some(cmd)) = root.read_optional(&format!("proc/{entry}/cmdline")) {
            text.push(' ');
            text.push_str(&cmd.replace('\0', " "));
        }
        if text.contains(pattern) && pid != own_pid {
            found.push(pid);
        }
    }
    Ok(found)
}

/// Per-node pages of one numa_maps line, by process row; the token that is not `N<node>=<pages>`
/// where one starts with N.
fn numa_maps_line(line: &str) -> Result<(usize, Vec<(u32, u64)>), String> {
    let mut row = PRIVATE_ROW;
    let mut pages = Vec::new();
    for tok in line.split([' ', '\t', '\r']).filter(|s| !s.is_empty()) {
        if row == PRIVATE_ROW {
            if let Some(r) = PROCESS_ROWS[..PRIVATE_ROW]
                .iter()
                .position(|(k, _)| tok.starts_with(k))
            {
                row = r;
            }
        }
        if let Some(rest) = tok.strip_prefix('N') {
            let parsed = rest
                .split_once('=')
                .and_then(|(n, v)| Some((n.parse().ok()?, atol(v).max(0) as u64)));
            match parsed {
                Some(np) => pages.push(np),
                None => return Err(tok.to_string()),
            }
        }
    }
    Ok((row, pages))
}

/// The process tables: one per PID with its Huge / Heap / Stack / Private rows (one PID, or
/// `-v`), else one table of a total row per PID; `huge` is Hugepagesize in bytes.
fn process_tables(
    root: &SysRoot,
    opts: &Options,
    nodes: &[u32],
    pids: &[u32],
    huge: f64,
    out: &mut Output,
) -> Result<(), Error> {
    let per_pid = opts.verbose || pids.len() == 1;
    let data_rows = if per_pid {
        PROCESS_ROWS.len()
    } else {
        pids.len()
    };
    let total_col = 1 + nodes.len();
    let total_row = 2 + data_rows + 1;
    let mut t = Table::new(2, 1, data_rows + 2, nodes.len() + 1);
    if per_pid {
        for (i, (_, label)) in PROCESS_ROWS.iter().enumerate() {
            t.set(2 + i, 0, Cell::Text(label.to_string()));
        }
    } else {
        t.set(0, 0, Cell::Text("PID".into()));
        t.set(1, 0, Cell::Rule('-'));
        out.stdout
            .push_str("\nPer-node process memory usage (in MBs)\n");
    }
    t.column(0, 16, 0, Justify::Left);
    let decimals = if opts.compress { 0 } else { 2 };
    for (i, &node) in nodes.iter().chain(std::iter::once(&u32::MAX)).enumerate() {
        let header = if node == u32::MAX {
            "Total".to_string()
        } else {
            node_header(opts, node)
        };
        t.set(0, 1 + i, Cell::Text(header));
        t.set(1, 1 + i, Cell::Rule('-'));
        t.column(1 + i, 16, decimals, Justify::Right);
    }
    t.zero_data();
    t.set(total_row, 0, Cell::Text("Total".into()));
    let page = opts.page_size as f64;
    for (pid_ix, &pid) in pids.iter().enumerate() {
        // "(null)": glibc's printf of numastat's missing name
        let name = command_name(root, pid).unwrap_or_else(|| "(null)".into());
        if per_pid {
            out.stdout.push_str(&format!(
                "\nPer-node process memory usage (in MBs) for PID {pid} ({name})\n"
            ));
            if pid_ix > 0 {
                t.zero_data();
            }
        } else {
            t.set(2 + pid_ix, 0, Cell::Text(format!("{pid} ({name})")));
        }
        let file = format!("/proc/{pid}/numa_maps");
        let text = match std::fs::read(root.path(&file)) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => {
                // perror's wording: the message, then strerror
                let why = e.to_string();
                let why = why.split(" (os error").next().unwrap_or(&why);
                out.stderr.push_str(&format!("Can't read {file}: {why}\n"));
                out.unreadable_pid = true;
                continue;
            }
        };
        for (line_no, line) in text.lines().enumerate() {
            let (row, pages) = numa_maps_line(line)
                .map_err(|tok| ParseError::new(&file, line_no + 1, "N<node>=<pages>", &tok))?;
            let r = if per_pid { 2 + row } else { 2 + pid_ix };
            for (node, count) in pages {
                let Some(i) = nodes.iter().position(|&x| x == node) else {
                    return Err(ParseError::new(
                        &file,
                        line_no + 1,
                        "a node with a node directory",
                        &format!("N{node}"),
                    )
                    .into());
                };
                let bytes = if row == HUGE_ROW { huge } else { page };
                let mb = count as f64 * bytes / MB;
                t.add(r, 1 + i, mb);
                t.add(r, total_col, mb);
                t.add(total_row, 1 + i, mb);
                t.add(total_row, total_col, mb);
            }
        }
        if per_pid || pid_ix + 1 == pids.len() {
            if opts.compress {
                for col in 0..t.cols() {
                    t.fit_width(col, 4, 16);
                }
            } else {
                // a wider first column, so that "PID (name)" labels are not cut short
                t.fit_width(0, 16, 24);
            }
            t.always_show(total_row - 1);
            for col in 0..t.cols() {
                t.set(total_row - 1, col, Cell::Rule('-'));
            }
            if let Some(node) = opts.sort {
                let col = sort_column(nodes, node);
                t.sort_descending(2, 2 + data_rows - 1, col);
            }
            out.stdout
                .push_str(&t.render(opts.screen_width, !opts.skip_zeros));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numa_maps_lines_fall_in_numastats_rows() {
        let (row, pages) =
            numa_maps_line("7f00 default anon=3 dirty=3 N0=2 N1=1 kernelpagesize_kB=4").unwrap();
        assert_eq!((row, pages), (PRIVATE_ROW, vec![(0, 2), (1, 1)]));
        let (row, _) = numa_maps_line("5600 default heap anon=1 N0=1").unwrap();
        assert_eq!(row, 1);
        let (row, _) = numa_maps_line("7ffd default stack anon=3 N1=3").unwrap();
        assert_eq!(row, 2);
        let (row, _) =
            numa_maps_line("7f00 default file=/anon_hugepage\\040(deleted) huge dirty=1 N0=1")
                .unwrap();
        assert_eq!(row, HUGE_ROW);
        assert!(numa_maps_line("7f00 default N=3").is_err());
    }

    #[test]
    fn targets_are_pids_when_all_digits() {
        assert_eq!(Target::parse("123"), Target::Pid(123));
        assert_eq!(Target::parse("12a"), Target::Pattern("12a".into()));
        assert_eq!(Target::parse(""), Target::Pattern(String::new()));
    }

    #[test]
    fn atol_reads_leading_digits() {
        assert_eq!(atol("123 kB"), 123);
        assert_eq!(atol("-4"), -4);
        assert_eq!(atol("x"), 0);
    }
}
