//! The calibrated machine file (an override of the host's topology file, docs/machine-format.md)
//! and the summary `numalab calibrate` prints.

use crate::fit::{Figure, Fit};
use crate::Measurements;
use numalab_core::NodeId;
use numalab_machine::Machine;
use std::fmt::Write as _;

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn figure(o: &mut String, key: &str, f: &Figure) {
    let _ = writeln!(o, "# {}", f.how);
    let _ = writeln!(o, "{key} = {}", number(f.value));
}

/// A TOML float with a precision that keeps what was measured (always with a decimal point).
fn number(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn matrix_comment(o: &mut String, title: &str, m: &[Vec<Option<f64>>]) {
    let _ = writeln!(
        o,
        "# {title} (row: CPU node, column: memory node; - = not measured):"
    );
    for (s, row) in m.iter().enumerate() {
        if row.iter().all(Option::is_none) {
            continue;
        }
        let cells: Vec<String> = row
            .iter()
            .map(|v| v.map_or("-".to_string(), |v| format!("{v:.1}")))
            .collect();
        let _ = writeln!(o, "#   node {s}: {}", cells.join("  "));
    }
}

/// The override file: a header (when and how it was measured, the raw matrices, the notes),
/// then `base`, `id` and every calibrated figure with how it was measured above it.
pub fn override_text(
    base_ref: &str,
    id: &str,
    base: &Machine,
    m: &Measurements,
    f: &Fit,
) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Machine description of this host calibrated by `numalab calibrate` on {}{}.",
        m.date,
        m.kernel
            .as_deref()
            .map(|k| format!(", Linux {k}"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        o,
        "# Simulate on it: numalab sim --machine THIS-FILE --workload ..."
    );
    let _ = writeln!(
        o,
        "# Each figure below says how it was measured; every other figure comes from {base_ref}"
    );
    let _ = writeln!(
        o,
        "# (the host's topology and documented defaults; docs/calibrate.md lists them)."
    );
    let _ = writeln!(o, "#");
    matrix_comment(&mut o, "Idle latency measured, ns", &m.latency_ns);
    matrix_comment(&mut o, "Read bandwidth measured, GB/s", &m.bandwidth_gbps);
    if !f.notes.is_empty() {
        let _ = writeln!(o, "#\n# Notes:");
        for n in &f.notes {
            let _ = writeln!(o, "#   - {n}");
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "base = {}", quoted(base_ref));
    let _ = writeln!(o, "id = {}", quoted(id));
    let _ = writeln!(
        o,
        "description = {}",
        quoted(&format!(
            "{} (calibrated by numalab calibrate on {})",
            base.description, m.date
        ))
    );
    let _ = writeln!(
        o,
        "source = {}",
        quoted(&format!("numalab calibrate {}", m.date))
    );
    if let Some(c) = &f.concurrency_lines {
        let _ = writeln!(o, "\n[core]");
        figure(&mut o, "concurrency_lines", c);
    }
    if !f.os.is_empty() {
        let _ = writeln!(o, "\n[os]");
        for (k, v) in &f.os {
            figure(&mut o, k, v);
        }
    }
    for (d, nf) in f.nodes.iter().enumerate() {
        if nf.idle_local_ns.is_none() && nf.ctrl_peak_gbps.is_none() && nf.curve.is_none() {
            continue;
        }
        let _ = writeln!(o, "\n[[node]]\nid = {d}");
        if let Some(v) = &nf.idle_local_ns {
            figure(&mut o, "idle_local_ns", v);
        }
        if let Some(v) = &nf.ctrl_peak_gbps {
            figure(&mut o, "ctrl_peak_gbps", v);
        }
        if let Some((points, how)) = &nf.curve {
            let pts: Vec<String> = points
                .iter()
                .map(|(u, l)| format!("[{u:.1}, {l:.1}]"))
                .collect();
            let _ = writeln!(o, "# {how}");
            let _ = writeln!(o, "curve = [{}]", pts.join(", "));
        }
    }
    for l in &f.links {
        let _ = writeln!(o, "\n[[link]]\na = {}\nb = {}", l.a, l.b);
        if let Some(v) = &l.hop_ns {
            figure(&mut o, "hop_ns", v);
        }
        if let Some(v) = &l.gbps_per_dir {
            figure(&mut o, "gbps_per_dir", v);
        }
    }
    o
}

/// Payload bandwidth the model gives CPUs on `s` streaming from `d`: the controller peak, or
/// the rate at which the reads' coherence traffic fills a link direction.
fn model_gbps(c: &Machine, routes: &numalab_machine::Routes, s: usize, d: usize) -> f64 {
    let (s, d) = (NodeId(s as u16), NodeId(d as u16));
    c.read_payload_gbps(routes, s, d)
        .min(c.nodes[d.index()].ctrl_peak_gbps)
}

/// What was measured beside what the calibrated machine `c` models, as tables.
pub fn summary(m: &Measurements, c: &Machine, f: &Fit) -> String {
    let mut o = String::new();
    let n = m.latency_ns.len();
    let routes = c.routes().ok();
    let header = |o: &mut String| {
        let _ = write!(o, "{:>8}", "");
        for d in 0..n {
            let _ = write!(o, "{:>16}", format!("node{d}"));
        }
        let _ = writeln!(o);
    };
    let mut worst: Option<(f64, usize, usize)> = None;
    let _ = writeln!(
        o,
        "idle latency, ns: measured / model (row: CPU node, column: memory node)"
    );
    header(&mut o);
    for s in (0..n).filter(|&s| m.latency_ns[s].iter().any(Option::is_some)) {
        let _ = write!(o, "{:>8}", format!("node{s}"));
        for d in 0..n {
            let cell = match (m.latency_ns[s][d], &routes) {
                (Some(v), Some(r)) => {
                    let model = c.idle_latency_ns(r, NodeId(s as u16), NodeId(d as u16));
                    let err = (model - v).abs() / v;
                    if worst.is_none_or(|w| err > w.0) {
                        worst = Some((err, s, d));
                    }
                    format!("{v:.1} / {model:.1}")
                }
                (Some(v), None) => format!("{v:.1}"),
                (None, _) => "-".into(),
            };
            let _ = write!(o, "{cell:>16}");
        }
        let _ = writeln!(o);
    }
    if let Some((e, s, d)) = worst {
        let _ = writeln!(
            o,
            "  largest difference: {:.1} % (node {s} to node {d}); pairs more than one link apart follow from the links' hops",
            e * 100.0
        );
    }
    let _ = writeln!(o, "\nread bandwidth, GB/s: measured / model");
    header(&mut o);
    for s in (0..n).filter(|&s| m.bandwidth_gbps[s].iter().any(Option::is_some)) {
        let _ = write!(o, "{:>8}", format!("node{s}"));
        for d in 0..n {
            let cell = match (m.bandwidth_gbps[s][d], &routes) {
                (Some(v), Some(r)) => format!("{v:.2} / {:.2}", model_gbps(c, r, s, d)),
                (Some(v), None) => format!("{v:.2}"),
                (None, _) => "-".into(),
            };
            let _ = write!(o, "{cell:>16}");
        }
        let _ = writeln!(o);
    }
    for (d, nf) in f.nodes.iter().enumerate() {
        if let Some((pts, _)) = &nf.curve {
            let p: Vec<String> = pts
                .iter()
                .map(|(u, l)| format!("{u:.0} %: {l:.0} ns"))
                .collect();
            let _ = writeln!(o, "\nloaded latency of node {d}: {}", p.join(", "));
        }
    }
    if let Some(c) = &f.concurrency_lines {
        let _ = writeln!(o, "\nconcurrency: {:.1} lines in flight per core", c.value);
    }
    if !f.os.is_empty() {
        let _ = writeln!(o, "\nOS costs:");
        for (k, v) in &f.os {
            let _ = writeln!(o, "  {k:<20} {}", number(v.value));
        }
    }
    if !f.notes.is_empty() {
        let _ = writeln!(o, "\nnotes:");
        for n in &f.notes {
            let _ = writeln!(o, "  - {n}");
        }
    }
    o
}
