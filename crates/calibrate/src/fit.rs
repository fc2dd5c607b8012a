//! From measurements to machine-file figures (docs/calibrate.md, "What is measured, and
//! how"). Each figure carries how it was measured, which the override file prints above
//! it. A figure that could not be measured is left out, so the base description's value stays.

use crate::loaded::LoadedPoint;
use crate::Measurements;
use numalab_machine::Machine;

/// One calibrated value and how it was obtained.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    pub value: f64,
    pub how: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFit {
    pub idle_local_ns: Option<Figure>,
    pub ctrl_peak_gbps: Option<Figure>,
    /// (utilisation %, latency ns) points, and how they were measured.
    pub curve: Option<(Vec<(f64, f64)>, String)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LinkFit {
    pub a: usize,
    pub b: usize,
    pub hop_ns: Option<Figure>,
    pub gbps_per_dir: Option<Figure>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fit {
    pub concurrency_lines: Option<Figure>,
    /// `[os]` keys.
    pub os: Vec<(&'static str, Figure)>,
    pub nodes: Vec<NodeFit>,
    pub links: Vec<LinkFit>,
    /// What the reader should know about the whole calibration (figures not measured, hints).
    pub notes: Vec<String>,
}

/// A link is taken as the bottleneck of a remote stream when the stream gets less than this
/// share of the target controller's peak; above it the controller may be what limits, and
/// the stream only bounds the link from below.
const LINK_LIMITED_BELOW: f64 = 0.9;

/// The figures the measurements give, for a machine whose topology (nodes, links, routes) is
/// `base`'s.
pub fn fit(base: &Machine, m: &Measurements) -> Result<Fit, String> {
    let n = base.topology.num_nodes();
    if m.latency_ns.len() != n || m.bandwidth_gbps.len() != n {
        return Err(format!(
            "the measurements cover {} nodes, the machine has {n}",
            m.latency_ns.len()
        ));
    }
    let mut f = Fit {
        nodes: vec![NodeFit::default(); n],
        ..Fit::default()
    };
    let idle = idle_latencies(base, m, &mut f);
    let peak = controller_peaks(m, &mut f);
    curves(m, &idle, &peak, &mut f);
    links(base, m, &idle, &peak, &mut f)?;
    concurrency(m, &idle, &mut f);
    os_figures(m, &mut f);
    Ok(f)
}

fn lat(m: &Measurements, s: usize, d: usize) -> Option<f64> {
    m.latency_ns[s][d]
}

fn bw(m: &Measurements, s: usize, d: usize) -> Option<f64> {
    m.bandwidth_gbps[s][d]
}

/// Idle latency: a node's own CPUs chasing its memory; a CPU-less node takes its nearest
/// CPU node's, so that the link to it carries the difference (as the hwloc import does).
/// Returns every node's idle latency, where known.
fn idle_latencies(base: &Machine, m: &Measurements, f: &mut Fit) -> Vec<Option<f64>> {
    let n = m.latency_ns.len();
    let lat = |s, d| lat(m, s, d);
    let o = &m.options;
    for d in 0..n {
        let pages = match m.chase_huge_fraction[d] {
            Some(h) => format!("{:.0} % in 2 MiB pages", h * 100.0),
            None => "page size unknown".into(),
        };
        let chase = format!(
            "pointer chase over a random cyclic chain of {} MiB on node {d} ({pages}), {} loads × {} runs, median",
            o.buffer_bytes >> 20,
            o.chase_loads,
            o.runs
        );
        if let Some(v) = lat(d, d) {
            let cpu = m.nodes[d].cpus.first().copied().unwrap_or(0);
            f.nodes[d].idle_local_ns = Some(Figure {
                value: v,
                how: format!("{chase}, from CPU {cpu} of node {d}"),
            });
        } else if let Some(c) = (0..n)
            .filter(|&c| lat(c, c).is_some() && lat(c, d).is_some())
            .min_by(|&x, &y| lat(x, d).unwrap().total_cmp(&lat(y, d).unwrap()))
        {
            let v = lat(c, c).unwrap();
            f.nodes[d].idle_local_ns = Some(Figure {
                value: v,
                how: format!(
                    "node {d} has no CPU: the idle latency of node {c}, the CPU node nearest to it ({:.1} ns to node {d}); the link to node {d} carries the rest",
                    lat(c, d).unwrap()
                ),
            });
        }
        if let (Some(h), Some(_)) = (m.chase_huge_fraction[d], lat(d, d)) {
            if h < 0.9 {
                f.notes.push(format!(
                    "node {d}: only {:.0} % of the chase buffer was in 2 MiB pages, so its latencies include page walks; enable THP (madvise) for pure DRAM latencies",
                    h * 100.0
                ));
            }
        }
        if let Some(v) = lat(d, d) {
            if v <= base.core.llc_hit_ns * 1.5 {
                f.notes.push(format!(
                    "node {d}: the measured local latency ({v:.1} ns) is close to an LLC hit ({:.1} ns in the base): the {} MiB buffer may fit in a cache; give a larger --buffer-mib",
                    base.core.llc_hit_ns,
                    o.buffer_bytes >> 20
                ));
            }
        }
    }
    f.nodes
        .iter()
        .map(|nf| nf.idle_local_ns.as_ref().map(|x| x.value))
        .collect()
}

/// Controller peaks: a node's CPUs streaming its memory; a CPU-less node's is the best any
/// CPU node gets from it.
fn controller_peaks(m: &Measurements, f: &mut Fit) -> Vec<Option<f64>> {
    let n = m.latency_ns.len();
    let bw = |s, d| bw(m, s, d);
    let o = &m.options;
    for d in 0..n {
        let best = (0..n)
            .filter_map(|s| bw(s, d).map(|v| (s, v)))
            .max_by(|x, y| x.1.total_cmp(&y.1));
        let (s, v) = match (bw(d, d), best) {
            (Some(v), _) => (d, v),
            (None, Some(sv)) => sv,
            (None, None) => continue,
        };
        let threads = m.nodes[s].cpus.len();
        f.nodes[d].ctrl_peak_gbps = Some(Figure {
            value: v,
            how: format!(
                "{threads} thread{} on node {s}'s CPUs streaming reads through {} MiB on node {d}, {:.1} GB read{}",
                if threads == 1 { "" } else { "s" },
                o.buffer_bytes >> 20,
                o.stream_bytes as f64 / 1e9,
                if s == d { "" } else { " (node has no CPU: the best CPU node's figure)" }
            ),
        });
    }
    f.nodes
        .iter()
        .map(|nf| nf.ctrl_peak_gbps.as_ref().map(|x| x.value))
        .collect()
}

/// Curves from the loaded-latency sweeps.
fn curves(m: &Measurements, idle: &[Option<f64>], peak: &[Option<f64>], f: &mut Fit) {
    let n = m.latency_ns.len();
    for d in 0..n {
        let (Some(sweep), Some(i), Some(p)) = (&m.loaded[d], idle[d], peak[d]) else {
            continue;
        };
        let points = curve_points(i, p, &sweep.points);
        if points.len() < 2 {
            f.notes.push(format!(
                "node {d}: the loaded-latency sweep reached no measurable load; its curve keeps the base's shape"
            ));
            continue;
        }
        let top = points.last().map_or(0.0, |q| q.0);
        let mut how = format!(
            "loaded latency, as MLC's: a chaser on CPU {} and {} injector thread{} ({}) reading node {d} with {} delays; utilisation = served ÷ the peak above; latencies made non-decreasing",
            sweep.chaser_cpu,
            sweep.injector_cpus.len(),
            if sweep.injector_cpus.len() == 1 { "" } else { "s" },
            if sweep.injectors_local { "on the node's own CPUs" } else { "on other nodes' CPUs, so links were loaded too" },
            sweep.points.len()
        );
        if top < 90.0 {
            how +=
                &format!("; measured up to {top:.0} %, above which the model holds the last point");
        }
        f.nodes[d].curve = Some((points, how));
    }
}

/// Links: hop latency from the pairs routed over the link alone, bandwidth from their streams.
fn links(
    base: &Machine,
    m: &Measurements,
    idle: &[Option<f64>],
    peak: &[Option<f64>],
    f: &mut Fit,
) -> Result<(), String> {
    let routes = base.routes().map_err(|e| e.to_string())?;
    let lat = |s, d| lat(m, s, d);
    let bw = |s, d| bw(m, s, d);
    for (k, l) in base.links.iter().enumerate() {
        let (a, b) = (l.a.index(), l.b.index());
        let direct = |s: usize, d: usize| {
            let r = routes.route(
                numalab_core::NodeId(s as u16),
                numalab_core::NodeId(d as u16),
            );
            r.len() == 1 && r[0].link == k
        };
        // (reader node, memory node) pairs routed over this link alone.
        let pairs: Vec<(usize, usize)> = [(a, b), (b, a)]
            .into_iter()
            .filter(|&(s, d)| direct(s, d))
            .collect();
        // link bytes per payload byte of a read over this link: the coherence protocol's
        // messages (numalab_machine::coherence)
        let factor = pairs.first().map_or(base.bulk_wire_factor(), |&(s, d)| {
            base.read_wire_factor(
                &routes,
                numalab_core::NodeId(s as u16),
                numalab_core::NodeId(d as u16),
            )
        });
        let hops: Vec<(usize, usize, f64)> = pairs
            .iter()
            .filter_map(|&(s, d)| Some((s, d, lat(s, d)? - idle[d]?)))
            .collect();
        let hop_ns = (!hops.is_empty()).then(|| {
            let mean = hops.iter().map(|h| h.2).sum::<f64>() / hops.len() as f64;
            let parts: Vec<String> = hops
                .iter()
                .map(|(s, d, v)| {
                    format!(
                        "node {s} → {d}: {:.1} − {:.1} = {v:.1} ns",
                        lat(*s, *d).unwrap(),
                        idle[*d].unwrap()
                    )
                })
                .collect();
            let mut how = format!(
                "measured remote − local latency over this link: {}",
                parts.join("; ")
            );
            if mean < 0.0 {
                how += "; below zero (noise, or nodes without a real distance, as in a VM): 0 kept";
            } else if hops.len() == 2 {
                how += "; the mean of both directions";
            }
            Figure {
                value: mean.max(0.0),
                how,
            }
        });
        let streams: Vec<(usize, usize, f64, bool)> = pairs
            .iter()
            .filter_map(|&(s, d)| {
                let v = bw(s, d)?;
                let limited = peak[d].is_some_and(|p| v < LINK_LIMITED_BELOW * p);
                Some((s, d, v, limited))
            })
            .collect();
        let gbps = (!streams.is_empty()).then(|| {
            let parts: Vec<String> = streams
                .iter()
                .map(|(s, d, v, lim)| {
                    format!(
                        "node {s} reading node {d}: {v:.2} GB/s{}",
                        if *lim { " (below the controller's peak: the link limits)" } else { " (the controller limits)" }
                    )
                })
                .collect();
            let limited: Vec<f64> = streams.iter().filter(|x| x.3).map(|x| x.2).collect();
            let (payload, what) = if limited.is_empty() {
                let lower = streams.iter().map(|x| x.2).fold(0.0, f64::max);
                if l.gbps_per_dir >= lower * factor {
                    return Figure {
                        value: l.gbps_per_dir,
                        how: format!(
                            "{}; the streams bound the link from below only, and the base's {:.1} GB/s is above that: kept",
                            parts.join("; "),
                            l.gbps_per_dir
                        ),
                    };
                }
                (lower, "a lower bound (the controller limits)")
            } else {
                (limited.iter().copied().fold(f64::INFINITY, f64::min), "the narrower direction")
            };
            Figure {
                value: payload * factor,
                how: format!(
                    "{}; {what} × {factor:.3}, the link bytes per payload byte of a read (coherence \"{}\"), since the model counts coherence traffic on the link",
                    parts.join("; "),
                    base.coherence.name()
                ),
            }
        });
        if hop_ns.is_some() || gbps.is_some() {
            f.links.push(LinkFit {
                a,
                b,
                hop_ns,
                gbps_per_dir: gbps,
            });
        }
    }
    Ok(())
}

/// Per-core concurrency (§5.4, §7.5): single-thread bandwidth × idle latency ÷ 64 B.
fn concurrency(m: &Measurements, idle: &[Option<f64>], f: &mut Fit) {
    if let (Some(g), Some(s)) = (m.single_thread_gbps, m.single_thread_node) {
        if let Some(i) = idle[s] {
            f.concurrency_lines = Some(Figure {
                value: (g * i / 64.0).max(1.0),
                how: format!(
                    "one thread on CPU {} streaming reads from node {s}: {g:.2} GB/s × {i:.1} ns ÷ 64 B (reference/machines.md §7.5); the hardware prefetchers were on, so this counts their lines in flight too",
                    m.nodes[s].cpus.first().copied().unwrap_or(0)
                ),
            });
        }
    }
}

/// `[os]` keys from the fault and move_pages measurements.
fn os_figures(m: &Measurements, f: &mut Fit) {
    let mut skipped = Vec::new();
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let mut fault = |key: &'static str,
                     r: &crate::oscosts::Measured<crate::oscosts::FaultCost>,
                     how: &dyn Fn(&crate::oscosts::FaultCost) -> String| match r
    {
        crate::oscosts::Measured::Value(c) => f.os.push((
            key,
            Figure {
                value: c.ns,
                how: how(c),
            },
        )),
        crate::oscosts::Measured::Skipped { skipped: why } => skipped.push(format!("{key}: {why}")),
    };
    let first_touch = |what: &'static str| {
        move |c: &crate::oscosts::FaultCost| {
            format!(
                "first touch of {} fresh {what} page{} bound to one node, median of {} run{}: trap, allocation, zeroing and mapping",
                c.pages,
                plural(c.pages),
                c.runs,
                plural(c.runs)
            )
        }
    };
    fault("fault_4k_ns", &m.fault_4k, &first_touch("4 KiB"));
    fault("fault_2m_ns", &m.fault_2m, &first_touch("2 MiB"));
    fault("fault_1g_ns", &m.fault_1g, &first_touch("1 GiB"));
    fault("fault_file_4k_ns", &m.fault_file_4k, &|c| {
        format!(
            "read faults on a cached file mapped MAP_PRIVATE, one read per 64 KiB ({} faults), median of {} run{}: trap, page-cache lookup and mapping (the 16-page fault-around window from Linux 3.15)",
            c.pages,
            c.runs,
            plural(c.runs)
        )
    });
    match &m.move_pages {
        crate::oscosts::Measured::Value(c) => {
            // Two points, t(1 page) and t(n pages), give the cost per page and per call.
            let per_page_ns =
                ((c.batch_call_ns - c.one_page_call_ns) / (c.pages.max(2) - 1) as f64).max(1e-3);
            f.os.push((
                "move_pages_base_ns",
                Figure {
                    value: (c.one_page_call_ns - per_page_ns).max(0.0),
                    how: format!(
                        "move_pages of one 4 KiB page per call, node {} ↔ {}, median {:.0} ns, less one page's copy at the rate below",
                        c.from_node, c.to_node, c.one_page_call_ns
                    ),
                },
            ));
            f.os.push((
                "move_pages_mbps",
                Figure {
                    value: 4096.0 / per_page_ns * 1e3,
                    how: format!(
                        "one move_pages call moving {} pages of 4 KiB from node {} to {} in {:.0} µs: (pages − 1) × 4 KiB ÷ (that − one page's call)",
                        c.pages,
                        c.from_node,
                        c.to_node,
                        c.batch_call_ns / 1e3
                    ),
                },
            ));
            match &c.thp {
                crate::oscosts::Measured::Value(t) if t.huge_after >= 0.9 => f.os.push((
                    "thp_migrate_mbps",
                    Figure {
                        value: t.mbps,
                        how: format!(
                            "one move_pages call naming the head of each of {} 2 MiB THPs: {:.0} µs, and they arrived whole ({:.0} % still huge)",
                            t.huge_pages,
                            t.call_ns / 1e3,
                            t.huge_after * 100.0
                        ),
                    },
                )),
                crate::oscosts::Measured::Value(t) => f.os.push((
                    "thp_migrate_mbps",
                    Figure {
                        value: 0.0,
                        how: format!(
                            "this kernel split the THPs move_pages moved ({:.0} % huge afterwards), so huge folios move at the base-page rates (0)",
                            t.huge_after * 100.0
                        ),
                    },
                )),
                crate::oscosts::Measured::Skipped { skipped: why } => skipped.push(format!("thp_migrate_mbps: {why}")),
            }
        }
        crate::oscosts::Measured::Skipped { skipped: why } => skipped.push(format!(
            "move_pages_base_ns, move_pages_mbps, thp_migrate_mbps: {why}"
        )),
    }
    for s in skipped {
        f.notes
            .push(format!("not measured, the base's value kept: {s}"));
    }
}

/// A node's curve from its sweep: utilisation = served ÷ `peak_gbps` (capped at 100 %),
/// starting at (0, `idle_ns`), points less than half a point of utilisation apart merged,
/// latencies raised to be non-decreasing (a queue never gets faster under more load; what
/// looks so is noise), and never below the idle latency.
pub fn curve_points(idle_ns: f64, peak_gbps: f64, sweep: &[LoadedPoint]) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = sweep
        .iter()
        .filter(|p| p.served_gbps.is_finite() && p.latency_ns.is_finite())
        .map(|p| {
            let u = (p.served_gbps / peak_gbps * 100.0).clamp(0.0, 100.0);
            ((u * 10.0).round() / 10.0, p.latency_ns.max(idle_ns))
        })
        .collect();
    v.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut out = vec![(0.0, idle_ns)];
    for (u, l) in v {
        let last = out.len() - 1;
        if u < out[last].0 + 0.5 {
            if last > 0 {
                out[last].1 = out[last].1.max(l);
            }
        } else {
            out.push((u, l.max(out[last].1)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(served_gbps: f64, latency_ns: f64) -> LoadedPoint {
        LoadedPoint {
            delay_iters: 0,
            served_gbps,
            latency_ns,
        }
    }

    #[test]
    fn curves_start_idle_rise_and_stop_at_the_peak() {
        let c = curve_points(
            90.0,
            20.0,
            &[
                pt(19.0, 200.0),
                pt(0.01, 85.0),
                pt(10.0, 120.0),
                pt(15.0, 110.0),
                pt(25.0, 260.0),
                pt(10.05, 130.0),
            ],
        );
        assert_eq!(c[0], (0.0, 90.0), "starts at the idle latency");
        // 10.0 and 10.05 GB/s are 50 and 50.3 %: merged, the higher latency kept; 0.01 GB/s is
        // 0.05 %, merged into the idle point without changing it.
        assert_eq!(c[1], (50.0, 130.0));
        assert_eq!(
            c[2],
            (75.0, 130.0),
            "a lower latency at a higher load is raised"
        );
        assert_eq!(c[3], (95.0, 200.0));
        assert_eq!(c[4], (100.0, 260.0), "above the peak is capped at 100 %");
        assert_eq!(c.len(), 5);
        numalab_machine::Curve::new(c).expect("a valid curve");
    }

    #[test]
    fn no_load_gives_no_curve_points() {
        assert_eq!(
            curve_points(80.0, 10.0, &[pt(0.0, 81.0)]),
            vec![(0.0, 80.0)]
        );
        assert_eq!(
            curve_points(80.0, 10.0, &[pt(f64::NAN, 81.0)]),
            vec![(0.0, 80.0)]
        );
    }
}
