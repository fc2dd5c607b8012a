//! hwloc's own XML test corpus (hwloc 2.9.0's `tests/hwloc/xml/`, 36 files) imported by numalab
//! and compared, file by file, with what Debian's hwloc tools report for the same file: the
//! NUMA node count, the nodes' OS indexes, each node's CPUs (PU OS indexes), each node's
//! memory and the NUMA latency matrix. Where numalab differs on purpose (a NUMA node whose CPUs
//! belong to a closer node is modelled CPU-less, a file without NUMA nodes is one node without
//! an OS number, ...) the file's line says so; any other difference fails the test.
//!
//! Run it with the corpus and the tools (`scripts/hwloc-corpus.sh` fetches both, as root):
//!
//! ```sh
//! NUMALAB_HWLOC_CORPUS=$(bash scripts/hwloc-corpus.sh) cargo test --release -p numalab-machine --test hwloc_corpus -- --nocapture
//! ```
//!
//! Without `NUMALAB_HWLOC_CORPUS` the test says it was skipped and passes; with it, the folder
//! must hold XML files and the tools must run.
//!
//! The hwloc invocations, each with `-i FILE`:
//! - `hwloc-calc --nodeset --number-of numanode all`: the node count (a nodeset, so that
//!   CPU-less nodes count: `all` as a cpuset misses them);
//! - `hwloc-info numanode:all`: each node's `os index` and `local memory`;
//! - `hwloc-calc --physical numanode:N --intersect pu --physical-output`: node N's PUs;
//! - `lstopo-no-graphics --distances --physical`: the matrices, rows and columns by OS index.
//!
//! Disallowed PUs and nodes are left out by both (the tools load without `--disallowed`).

use numalab_core::{CpuId, NodeId};
use numalab_machine::hwloc::{import_file, HwlocDefaults};
use numalab_machine::Machine;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const ENV: &str = "NUMALAB_HWLOC_CORPUS";

/// What hwloc's tools say about one file.
#[derive(Debug, Default)]
struct HwlocView {
    count: usize,
    /// OS index → (PUs, local memory in bytes if given).
    nodes: BTreeMap<u32, (BTreeSet<u32>, Option<u64>)>,
    /// NUMA node latency matrices.
    matrices: Vec<Matrix>,
}

/// One matrix `lstopo --distances` lists.
#[derive(Debug)]
struct Matrix {
    name: String,
    kind: u64,
    /// The nodes' OS indexes, in the order of rows and columns.
    os: Vec<u32>,
    values: Vec<Vec<u64>>,
}

fn tool(file: &Path, program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .arg("-i")
        .arg(file)
        .args(args)
        .output()
        .map_err(|e| {
            format!("cannot run {program} ({e}): install Debian's hwloc package (scripts/hwloc-corpus.sh does)")
        })?;
    if !out.status.success() {
        return Err(format!(
            "{program} -i {} {}: {}{}",
            file.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn numbers(list: &str) -> Result<BTreeSet<u32>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(|w| {
            w.parse()
                .map_err(|_| format!("'{w}' in '{list}' is not a number"))
        })
        .collect()
}

fn hwloc_view(file: &Path) -> Result<HwlocView, String> {
    let mut v = HwlocView::default();
    let count = tool(
        file,
        "hwloc-calc",
        &["--nodeset", "--number-of", "numanode", "all"],
    )?;
    v.count = count
        .trim()
        .parse()
        .map_err(|_| format!("hwloc-calc --number-of gave '{}'", count.trim()))?;
    // hwloc-info: "NUMANode L#i" blocks with " os index = N" and " local memory = B".
    let info = tool(file, "hwloc-info", &["numanode:all"])?;
    let mut current: Option<(Option<u32>, Option<u64>)> = None;
    let mut found: Vec<(Option<u32>, Option<u64>)> = Vec::new();
    for line in info.lines() {
        if line.starts_with("NUMANode ") {
            found.extend(current.take());
            current = Some((None, None));
        } else if let (Some(c), Some((k, val))) = (current.as_mut(), line.split_once(" = ")) {
            match k.trim() {
                "os index" => c.0 = val.trim().parse().ok(),
                "local memory" => c.1 = val.trim().parse().ok(),
                _ => {}
            }
        }
    }
    found.extend(current.take());
    for (os, mem) in found {
        let os = os.ok_or("hwloc-info: a NUMANode without an os index")?;
        let pus = tool(
            file,
            "hwloc-calc",
            &[
                "--physical",
                &format!("numanode:{os}"),
                "--intersect",
                "pu",
                "--physical-output",
            ],
        )?;
        v.nodes.insert(os, (numbers(pus.trim())?, mem));
    }
    // lstopo --distances --physical: "Relative latency matrix (name X kind K) between N
    // NUMANodes (depth -3) by physical indexes:", " index  a  b ...", then one row per node.
    let text = tool(file, "lstopo-no-graphics", &["--distances", "--physical"])?;
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        i += 1;
        let Some(rest) = l.split_once("matrix (name ").map(|(_, r)| r) else {
            continue;
        };
        if !l.contains(" NUMANodes ") || !l.contains("latency") {
            continue;
        }
        let (name, rest) = rest
            .split_once(" kind ")
            .ok_or("unexpected matrix heading")?;
        let kind: u64 = rest
            .split(')')
            .next()
            .and_then(|k| k.trim().parse().ok())
            .ok_or_else(|| format!("no kind in '{l}'"))?;
        let header = lines.get(i).ok_or("matrix without header")?;
        i += 1;
        let cols: Vec<u32> = header
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().map_err(|_| format!("header '{header}'")))
            .collect::<Result<_, _>>()?;
        let mut m = Vec::new();
        for _ in 0..cols.len() {
            let row = lines.get(i).ok_or("short matrix")?;
            i += 1;
            let vals: Vec<u64> = row
                .split_whitespace()
                .skip(1)
                .map(|w| w.parse().map_err(|_| format!("row '{row}'")))
                .collect::<Result<_, _>>()?;
            m.push(vals);
        }
        v.matrices.push(Matrix {
            name: name.to_string(),
            kind,
            os: cols,
            values: m,
        });
    }
    Ok(v)
}

/// The outcome for one file.
#[derive(Default)]
struct Outcome {
    imported: bool,
    /// attribute → matched (possibly with an explained difference)
    matched: BTreeMap<&'static str, bool>,
    /// (attribute, why numalab differs there on purpose); "links" for derived links.
    explained: Vec<(&'static str, String)>,
    failures: Vec<String>,
}

const ATTRS: [&str; 5] = ["node count", "OS indexes", "CPUs", "memory", "distances"];

fn compare(file: &Path, d: &HwlocDefaults) -> Outcome {
    let mut o = Outcome::default();
    let hw = match hwloc_view(file) {
        Ok(v) => v,
        Err(e) => {
            o.failures.push(format!("hwloc's tools: {e}"));
            return o;
        }
    };
    let m = match import_file(file, d) {
        Ok(m) => m,
        Err(e) => {
            o.failures.push(format!("numalab does not import it: {e}"));
            return o;
        }
    };
    o.imported = true;
    let n = m.topology.num_nodes();
    // Node count.
    let count_ok = n == hw.count && n == hw.nodes.len();
    if !count_ok {
        o.failures.push(format!(
            "node count: numalab {n}, hwloc-calc {}, hwloc-info {}",
            hw.count,
            hw.nodes.len()
        ));
    }
    o.matched.insert("node count", count_ok);
    // OS indexes (a file without NUMANode objects: hwloc makes node P#0, numalab one node
    // without an OS number).
    let no_numa = n == 1 && m.nodes[0].os_index.is_none();
    if no_numa {
        o.explained.push((
            "OS indexes",
            "no NUMANode objects in the file: hwloc makes node P#0, numalab one node without an OS number (taken as 0)".to_string(),
        ));
    }
    let os: Vec<u32> = m.nodes.iter().map(|h| h.os_index.unwrap_or(0)).collect();
    let hw_os: Vec<u32> = hw.nodes.keys().copied().collect();
    let os_ok = os == hw_os;
    if !os_ok {
        o.failures
            .push(format!("OS indexes: numalab {os:?}, hwloc {hw_os:?}"));
    }
    o.matched.insert("OS indexes", os_ok);
    // CPUs. numalab gives each PU to the most local node holding it: a node whose CPUs all
    // belong to a node with a smaller locality (KNL MCDRAM, a package's CXL/HBM node) is
    // CPU-less in the model.
    let mut cpus_ok = os_ok;
    if os_ok {
        for (i, (p, (hw_pus, _))) in hw.nodes.iter().enumerate() {
            let ours: BTreeSet<u32> = m.topology.nodes[i].cpus.iter().map(|c| c.0).collect();
            if &ours == hw_pus {
                continue;
            }
            let missing: Vec<u32> = hw_pus.difference(&ours).copied().collect();
            let extra: Vec<u32> = ours.difference(hw_pus).copied().collect();
            // Each missing PU must sit on a numalab node whose hwloc locality is within this
            // node's (a more local node).
            let mut homes = BTreeSet::new();
            let explained = extra.is_empty()
                && missing.iter().all(|&pu| {
                    match m.topology.node_of_cpu(CpuId(pu)).map(|k| k.index()) {
                        Some(k) if k != i && hw.nodes[&os[k]].0.is_subset(hw_pus) => {
                            homes.insert(os[k]);
                            true
                        }
                        _ => false,
                    }
                });
            if explained {
                o.explained.push((
                    "CPUs",
                    format!(
                    "node P#{p}: hwloc's locality has PUs {}, numalab gives {} to the more local node(s) P#{:?} (each PU goes to the node with the smallest locality holding it){}",
                    fmt_set(hw_pus),
                    fmt_set(&missing.iter().copied().collect()),
                    homes,
                    if ours.is_empty() { ", so this node is CPU-less" } else { "" }
                )));
            } else {
                cpus_ok = false;
                o.failures.push(format!(
                    "CPUs of node P#{p}: numalab {}, hwloc {}",
                    fmt_set(&ours),
                    fmt_set(hw_pus)
                ));
            }
        }
    }
    o.matched.insert("CPUs", cpus_ok);
    // Memory.
    let mut mem_ok = os_ok;
    if os_ok {
        for (i, (p, (_, mem))) in hw.nodes.iter().enumerate() {
            let ours = m.topology.nodes[i].mem_bytes;
            match mem {
                Some(b) if *b == ours => {}
                Some(0) | None if ours == d.mem_bytes_when_missing => o.explained.push((
                    "memory",
                    format!(
                    "node P#{p}: no memory size in the file (hwloc: {}), numalab assumes {ours} bytes",
                    mem.map_or("none".to_string(), |b| b.to_string())
                ))),
                _ => {
                    mem_ok = false;
                    o.failures.push(format!(
                        "memory of node P#{p}: numalab {ours}, hwloc {mem:?}"
                    ));
                }
            }
        }
    }
    o.matched.insert("memory", mem_ok);
    // Distances: the matrix named NUMALatency, else the only unnamed latency one, else (files
    // converted from hwloc 1.x) the one with 10 on its diagonal, as numalab picks.
    let latency: Vec<&Matrix> = hw
        .matrices
        .iter()
        .filter(|mx| mx.kind & 4 != 0 && mx.kind & 16 == 0)
        .collect();
    let chosen = hw
        .matrices
        .iter()
        .find(|mx| mx.name == "NUMALatency")
        .or_else(|| {
            if latency.len() > 1 {
                let slit = latency
                    .iter()
                    .copied()
                    .find(|mx| (0..mx.values.len()).all(|k| mx.values[k][k] == 10));
                o.explained.push((
                    "distances",
                    format!(
                    "hwloc lists {} unnamed NUMA latency matrices: compared with {}, numalab's choice",
                    latency.len(),
                    if slit.is_some() { "the one with 10 on its diagonal" } else { "the first" }
                )));
                slit.or(latency.first().copied())
            } else {
                latency.first().copied()
            }
        });
    let mut dist_ok = os_ok;
    if os_ok {
        match chosen {
            None => {
                let assumed = (0..n).all(|i| {
                    (0..n).all(|j| {
                        m.topology.distances[i][j]
                            == if i == j {
                                10
                            } else {
                                d.remote_distance_when_missing
                            }
                    })
                });
                if assumed {
                    if n > 1 {
                        o.explained.push((
                            "distances",
                            format!(
                                "no NUMA latency matrix in the file: numalab assumes 10 / {}",
                                d.remote_distance_when_missing
                            ),
                        ));
                    }
                } else {
                    dist_ok = false;
                    o.failures.push(
                        "no matrix in hwloc, numalab's is not the assumed 10/20 one".to_string(),
                    );
                }
            }
            Some(Matrix {
                name,
                os: cols,
                values: mx,
                ..
            }) => {
                for (i, &a) in os.iter().enumerate() {
                    for (j, &b) in os.iter().enumerate() {
                        let (Some(r), Some(c)) = (
                            cols.iter().position(|&x| x == a),
                            cols.iter().position(|&x| x == b),
                        ) else {
                            dist_ok = false;
                            o.failures
                                .push(format!("hwloc's matrix '{name}' lacks node P#{a} or P#{b}"));
                            continue;
                        };
                        if u64::from(m.topology.distances[i][j]) != mx[r][c] {
                            dist_ok = false;
                            o.failures.push(format!(
                                "distance P#{a}→P#{b}: numalab {}, hwloc {}",
                                m.topology.distances[i][j], mx[r][c]
                            ));
                        }
                    }
                }
            }
        }
    }
    o.matched.insert("distances", dist_ok);
    if m.description
        .contains("links derived from the distance matrix")
    {
        o.explained.push((
            "links",
            "links derived from the distance matrix (latency order checked)".to_string(),
        ));
        if let Err(e) = latency_order_kept(&m) {
            o.failures.push(e);
        }
    }
    o
}

/// Between CPU nodes of symmetric pairs, a smaller distance never gives a larger idle
/// latency (without memory attributes, which set latencies of their own).
fn latency_order_kept(m: &Machine) -> Result<(), String> {
    if m.description.contains("latencies from the") {
        return Ok(());
    }
    let r = m.routes().map_err(|e| format!("routes: {e}"))?;
    let d = &m.topology.distances;
    let cpu: Vec<usize> = (0..m.topology.num_nodes())
        .filter(|&i| !m.topology.nodes[i].cpus.is_empty())
        .collect();
    let idle = |a: usize, b: usize| m.idle_latency_ns(&r, NodeId(a as u16), NodeId(b as u16));
    for &i in &cpu {
        for &j in &cpu {
            for &k in &cpu {
                let sym = d[i][j] == d[j][i] && d[i][k] == d[k][i];
                if sym && i != j && i != k && d[i][j] < d[i][k] && idle(i, j) >= idle(i, k) {
                    return Err(format!(
                        "latency order: node {i} is nearer node {j} ({}) than node {k} ({}) by the matrix but {} ns vs {} ns",
                        d[i][j],
                        d[i][k],
                        idle(i, j),
                        idle(i, k)
                    ));
                }
            }
        }
    }
    Ok(())
}

fn fmt_set(s: &BTreeSet<u32>) -> String {
    if s.is_empty() {
        return "(none)".to_string();
    }
    s.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

#[test]
fn hwloc_corpus_matches_hwloc_tools() {
    let Some(dir) = std::env::var_os(ENV) else {
        println!(
            "hwloc corpus test skipped: {ENV} is not set. Run it with\n  \
             {ENV}=$(bash scripts/hwloc-corpus.sh) cargo test --release -p numalab-machine --test hwloc_corpus -- --nocapture\n\
             (the script, as root, fetches hwloc 2.9.0's XML corpus and Debian's hwloc tools)"
        );
        return;
    };
    let dir = PathBuf::from(dir);
    assert!(
        dir.is_dir(),
        "{ENV}={}: not a folder (expected the corpus folder scripts/hwloc-corpus.sh prints)",
        dir.display()
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "xml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "{ENV}={}: no .xml files in it",
        dir.display()
    );
    let d = HwlocDefaults::default();
    // One thread per file, a few at a time: each runs the tools a few times.
    let outcomes: Vec<(PathBuf, Outcome)> = std::thread::scope(|s| {
        let chunks: Vec<&[PathBuf]> = files.chunks(files.len().div_ceil(4)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let d = &d;
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|f| (f.clone(), compare(f, d)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a corpus thread panicked"))
            .collect()
    });
    let mut failed = Vec::new();
    for (f, o) in &outcomes {
        let name = f.file_name().unwrap().to_string_lossy();
        let state = if !o.failures.is_empty() {
            "FAIL"
        } else if o.explained.is_empty() {
            "ok"
        } else {
            "ok, differences explained"
        };
        println!("{name}: {state}");
        for (a, e) in &o.explained {
            println!("    {a}: {e}");
        }
        for e in &o.failures {
            println!("    FAILED: {e}");
            failed.push(format!("{name}: {e}"));
        }
    }
    let total = outcomes.len();
    let imported = outcomes.iter().filter(|(_, o)| o.imported).count();
    let derived = outcomes
        .iter()
        .filter(|(_, o)| o.explained.iter().any(|(x, _)| *x == "links"))
        .count();
    println!("\n{imported} of {total} hwloc corpus files import ({derived} with links derived from the distance matrix); they match hwloc's tools on:");
    for a in ATTRS {
        let k = outcomes
            .iter()
            .filter(|(_, o)| o.matched.get(a) == Some(&true))
            .count();
        let explained = outcomes
            .iter()
            .filter(|(_, o)| {
                o.matched.get(a) == Some(&true) && o.explained.iter().any(|(x, _)| *x == a)
            })
            .count();
        println!(
            "  {a}: {k} of {total} ({} exactly, {explained} with the differences explained above)",
            k - explained
        );
    }
    assert!(
        failed.is_empty(),
        "{} difference(s) with hwloc's tools:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
