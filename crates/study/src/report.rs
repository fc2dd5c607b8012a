//! `numalab study report DIR -o report.html`: one self-contained HTML page of a study's
//! results: the grid as a sortable table, per-metric bar charts relative to a baseline with
//! error bars (± one standard deviation over the repeats), per-configuration timelines of the
//! controllers' traffic and imbalance, each metric's Pearson correlation with run time across
//! the runs, and the environment. A real-run study's page has the same parts over its wall,
//! user and system times, without timelines (a real run records none).
//!
//! The charts are SVG written here rather than with plotters: plotters lays out axis labels
//! through a font engine, which numalab does not build (analyze's plots draw no tick labels for
//! that reason), and a report's charts need labelled axes. Nothing is loaded from outside the
//! file: the page works offline and can be mailed.

use crate::grid::Grid;
use crate::run::load_records;
use crate::table::{metric_values, Row, METRIC_COLUMNS, REAL_COLUMNS};
use crate::{StudyFile, StudyKind};
use anyhow::{bail, Context, Result};
use numalab_sim::SimResult;
use std::fmt::Write as _;
use std::path::Path;

/// The metrics charted (a subset of the table's columns: the ones the literature compares).
const CHARTED: &[&str] = &[
    "sim_time_ms",
    "lar_percent",
    "imbalance_percent",
    "maptu",
    "mpki",
    "max_link_utilisation_percent",
    "pagewalk_l2_miss_share_percent",
    "max_page_fault_time_share_percent",
];

/// Mean and sample standard deviation (None for no values; 0 for one).
pub fn mean_sd(v: &[f64]) -> Option<(f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let sd = if v.len() > 1 {
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    Some((m, sd))
}

/// Pearson's r of two equally long series (None when either is constant or too short).
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() || x.len() < 3 {
        return None;
    }
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx).powi(2);
        syy += (b - my).powi(2);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// What a study's runs measured: the table's columns, the charted ones, and the run time the
/// others are correlated with.
struct Columns {
    kind: StudyKind,
    names: &'static [&'static str],
    charted: &'static [&'static str],
    time: &'static str,
    time_words: &'static str,
}

const SIM_COLUMNS: Columns = Columns {
    kind: StudyKind::Sim,
    names: &METRIC_COLUMNS,
    charted: CHARTED,
    time: "sim_time_ms",
    time_words: "the simulated time",
};

const REAL_RUN_COLUMNS: Columns = Columns {
    kind: StudyKind::Real,
    names: &REAL_COLUMNS,
    charted: &REAL_COLUMNS,
    time: "wall_ms",
    time_words: "the wall time",
};

impl Columns {
    /// A run's value of column `name` (the table's own order of values: `metric_values`).
    fn value(&self, r: &Row, name: &str) -> Option<f64> {
        let i = self.names.iter().position(|c| *c == name)?;
        metric_values(r, self.kind)[i]
    }
}

/// One configuration's runs.
struct ConfigRuns<'a> {
    label: String,
    rows: Vec<&'a Row>,
    /// The first successful run's full result (for its timeline).
    first: Option<&'a SimResult>,
}

/// A bar chart of each configuration's change against the baseline, with error bars:
/// `(label, Some((change, sd)))` per configuration, in `unit` ("%" of the baseline's mean, or
/// "points" for metrics that are percentages already).
fn bar_chart(title: &str, unit: &str, bars: &[(String, Option<(f64, f64)>)]) -> String {
    let (w, left, right, top, bottom) = (760.0, 260.0, 110.0, 30.0, 40.0);
    let h = top + bottom + 26.0 * bars.len() as f64;
    let plot_w = w - left - right;
    let vals: Vec<f64> = bars
        .iter()
        .filter_map(|(_, v)| v.map(|(m, sd)| [m - sd, m + sd]))
        .flatten()
        .collect();
    let lo = vals.iter().copied().fold(0.0f64, f64::min);
    let hi = vals.iter().copied().fold(0.0f64, f64::max);
    let (lo, hi) = if hi - lo < 1e-9 {
        (lo - 1.0, hi + 1.0)
    } else {
        (lo, hi)
    };
    let x = |v: f64| left + (v - lo) / (hi - lo) * plot_w;
    let unit_sfx = if unit == "%" { " %" } else { " pt" };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{t}"><text x="10" y="18" class="title">{t}</text>"#,
        t = esc(title)
    );
    let zero = x(0.0);
    let _ = write!(
        s,
        r##"<line x1="{zero:.1}" y1="{top}" x2="{zero:.1}" y2="{}" stroke="#444"/>"##,
        h - bottom
    );
    for (i, (label, v)) in bars.iter().enumerate() {
        let y = top + 26.0 * i as f64;
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end" class="label">{}</text>"#,
            left - 6.0,
            y + 15.0,
            esc(label)
        );
        let text = match v {
            Some((m, sd)) => {
                let (a, b) = (zero.min(x(*m)), zero.max(x(*m)));
                let _ = write!(
                    s,
                    r##"<rect x="{a:.1}" y="{:.1}" width="{:.1}" height="18" fill="#4e79a7"><title>{}: {m:+.2}{unit_sfx} ± {sd:.2}</title></rect>"##,
                    y + 2.0,
                    (b - a).max(0.5),
                    esc(label)
                );
                if *sd > 0.0 {
                    let _ = write!(
                        s,
                        r##"<line class="errorbar" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#000"/>"##,
                        x(m - sd),
                        y + 11.0,
                        x(m + sd),
                        y + 11.0
                    );
                }
                if *sd > 0.0 {
                    format!("{m:+.1} ± {sd:.1}{unit_sfx}")
                } else {
                    format!("{m:+.1}{unit_sfx}")
                }
            }
            None => "n/a".to_string(),
        };
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" class="value">{text}</text>"#,
            left + plot_w + 8.0,
            y + 15.0
        );
    }
    // the axis: its ends and zero, where they do not overlap
    let mut ticks: Vec<f64> = vec![0.0];
    for v in [lo, hi] {
        if (x(v) - zero).abs() > 40.0 {
            ticks.push(v);
        }
    }
    for v in ticks {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="tick">{v:+.2}{unit_sfx}</text>"#,
            x(v),
            h - bottom + 16.0
        );
    }
    let what = if unit == "%" {
        "change against the baseline, % of its mean"
    } else {
        "change against the baseline, percentage points"
    };
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="axis">{what} (bars: mean; whiskers: ± 1 sd over repeats)</text></svg>"#,
        left + plot_w / 2.0,
        h - 6.0
    );
    s
}

/// A line chart of per-node controller traffic (GB/s) over simulated time, and the imbalance
/// (coefficient of variation over the nodes, %) as a dashed line on its own scale.
fn timeline_chart(title: &str, r: &SimResult) -> String {
    let pts = &r.timeline;
    let (w, h, left, right, top, bottom) = (720.0, 260.0, 60.0, 60.0, 30.0, 40.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart timeline" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{t}"><text x="10" y="18" class="title">{t}</text>"#,
        t = esc(title)
    );
    if pts.len() < 2 {
        let _ = write!(
            s,
            r#"<text x="{left}" y="60" class="label">no timeline recorded</text></svg>"#
        );
        return s;
    }
    // rates per interval: bytes over the interval's length
    let mut rates: Vec<(f64, Vec<f64>)> = Vec::new();
    for pair in pts.windows(2) {
        let dt = (pair[1].t_ns - pair[0].t_ns).max(1e-9);
        rates.push((
            pair[1].t_ns,
            pair[1].ctrl_bytes.iter().map(|b| b / dt).collect(),
        ));
    }
    let t_end = rates.last().map_or(1.0, |r| r.0).max(1e-9);
    let peak = rates
        .iter()
        .flat_map(|r| r.1.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let x = |t: f64| left + t / t_end * pw;
    let y = |v: f64| top + ph - v / peak * ph;
    let colours = [
        "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    ];
    let nodes = rates.first().map_or(0, |r| r.1.len());
    for n in 0..nodes {
        let path: Vec<String> = rates
            .iter()
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(v[n])))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"><title>node {n}</title></polyline>"#,
            colours[n % colours.len()],
            path.join(" ")
        );
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" class="legend" fill="{}">node {n}</text>"#,
            left + 70.0 * n as f64,
            h - 4.0,
            colours[n % colours.len()]
        );
    }
    // imbalance over time: the coefficient of variation of the nodes' traffic, in %
    let imb: Vec<(f64, f64)> = rates
        .iter()
        .map(|(t, v)| {
            let m = v.iter().sum::<f64>() / v.len().max(1) as f64;
            let sd =
                (v.iter().map(|a| (a - m).powi(2)).sum::<f64>() / v.len().max(1) as f64).sqrt();
            (*t, if m > 0.0 { 100.0 * sd / m } else { 0.0 })
        })
        .collect();
    let imb_peak = imb.iter().map(|p| p.1).fold(0.0f64, f64::max).max(1.0);
    let yi = |v: f64| top + ph - v / imb_peak * ph;
    let path: Vec<String> = imb
        .iter()
        .map(|(t, v)| format!("{:.1},{:.1}", x(*t), yi(*v)))
        .collect();
    let _ = write!(
        s,
        r##"<polyline class="imbalance" fill="none" stroke="#333" stroke-dasharray="4 3" points="{}"><title>imbalance</title></polyline>"##,
        path.join(" ")
    );
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{b}" stroke="#444"/><line x1="{left}" y1="{b}" x2="{r}" y2="{b}" stroke="#444"/><line x1="{r}" y1="{top}" x2="{r}" y2="{b}" stroke="#444"/>"##,
        b = top + ph,
        r = left + pw
    );
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">{:.1}</text><text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">0</text><text x="{:.1}" y="{:.1}" class="tick">{imb_peak:.0} %</text><text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">{:.2} ms</text><text x="14" y="{:.1}" text-anchor="middle" class="axis" transform="rotate(-90 14 {:.1})">GB/s per controller</text><text x="{:.1}" y="{:.1}" class="axis">imbalance (dashed)</text></svg>"#,
        left - 4.0,
        top + 10.0,
        peak,
        left - 4.0,
        top + ph,
        left + pw + 4.0,
        top + 10.0,
        left + pw,
        top + ph + 16.0,
        t_end / 1e6,
        top + ph / 2.0,
        top + ph / 2.0,
        left + pw - 110.0,
        top - 6.0
    );
    s
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ccc;padding:3px 6px;text-align:right}th{background:#eee;cursor:pointer}td.l,th.l{text-align:left}.title{font-size:14px;font-weight:bold}.label,.value,.tick,.legend{font-size:12px}.axis{font-size:12px;fill:#555}svg.chart{display:block;margin:12px 0;border:1px solid #ddd}pre{background:#f6f6f6;padding:8px}";

/// Clicking a header sorts the table by that column (numbers as numbers, empty cells last).
const SORT_JS: &str = "document.querySelectorAll('table.sortable th').forEach(function(th,i){th.addEventListener('click',function(){var t=th.closest('table'),b=t.tBodies[0],r=Array.from(b.rows),asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';r.sort(function(a,c){var x=a.cells[i].textContent,y=c.cells[i].textContent,nx=parseFloat(x),ny=parseFloat(y);if(x===''&&y!=='')return 1;if(y===''&&x!=='')return -1;var d=(isNaN(nx)||isNaN(ny))?x.localeCompare(y):nx-ny;return asc?d:-d;});r.forEach(function(e){b.appendChild(e);});});});";

/// Write the report of the study in `dir` to `out`; `baseline` names a configuration (its
/// label), default the first of the grid.
pub fn write_report(dir: &Path, out: &Path, baseline: Option<&str>) -> Result<usize> {
    let study_path = dir.join("study.toml");
    if !study_path.is_file() {
        bail!(
            "{} is not a study folder: it has no study.toml (run `numalab study run FILE -o {}` first)",
            dir.display(),
            dir.display()
        );
    }
    let study = StudyFile::load(&study_path)?;
    let real = study.kind == StudyKind::Real;
    let cols = if real {
        &REAL_RUN_COLUMNS
    } else {
        &SIM_COLUMNS
    };
    let grid = Grid::new(&study)?;
    let records = load_records(&study, &grid, dir)?;
    let done = records.iter().filter(|r| r.is_some()).count();
    if done == 0 {
        bail!("{}: no run of the study has finished yet", dir.display());
    }
    let configs: Vec<ConfigRuns> = grid
        .configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mine = &records[i * study.repeats..(i + 1) * study.repeats];
            ConfigRuns {
                label: c.label.clone(),
                rows: mine.iter().flatten().map(|(row, _)| row).collect(),
                first: mine.iter().flatten().find_map(|(_, r)| r.as_ref()),
            }
        })
        .collect();
    let base_idx =
        match baseline {
            None => 0,
            Some(b) => {
                configs.iter().position(|c| c.label == b).with_context(|| {
                    format!(
                "--baseline '{b}': no configuration of the study has that label; labels: {}",
                configs.iter().map(|c| c.label.as_str()).collect::<Vec<_>>().join(", ")
            )
                })?
            }
        };
    let stats = |c: &ConfigRuns, name: &str| -> Option<(f64, f64)> {
        let v: Vec<f64> = c.rows.iter().filter_map(|r| cols.value(r, name)).collect();
        mean_sd(&v)
    };

    let mut h = String::new();
    let name = study.name.clone().unwrap_or_else(|| "study".into());
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>numalab study: {n}</title><style>{STYLE}</style></head><body><h1>numalab study: {n}</h1><p>{runs} runs of {cfgs} configurations ({rep} per configuration); baseline <b>{b}</b>. {how} numalab {v}.</p>",
        n = esc(&name),
        runs = done,
        cfgs = configs.len(),
        rep = study.repeats,
        b = esc(&configs[base_idx].label),
        v = env!("CARGO_PKG_VERSION"),
        how = if real {
            "Real runs, timed as hyperfine does (warm-ups, then repeats), by"
        } else {
            "Simulated by"
        },
    );
    // the grid
    h.push_str("<h2>Runs</h2><table class=\"sortable\" id=\"runs\"><thead><tr><th class=\"l\">config</th><th>repeat</th><th class=\"l\">status</th>");
    for c in cols.names {
        let _ = write!(h, "<th>{c}</th>");
    }
    h.push_str("</tr></thead><tbody>");
    for c in &configs {
        for r in &c.rows {
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td>",
                esc(&r.config),
                r.repeat,
                esc(&r.status)
            );
            for name in cols.names {
                let v = cols.value(r, name);
                let _ = write!(
                    h,
                    "<td>{}</td>",
                    v.map_or(String::new(), |v| format!("{v:.4}"))
                );
            }
            h.push_str("</tr>");
        }
    }
    h.push_str("</tbody></table>");
    // bar charts against the baseline
    h.push_str("<h2>Against the baseline</h2>");
    for name in cols.charted {
        // a percentage's change in points (a relative change of a near-zero share explodes),
        // anything else relative to the baseline's mean
        let points = name.ends_with("_percent");
        let base = stats(&configs[base_idx], name).map(|(m, _)| m);
        let bars: Vec<(String, Option<(f64, f64)>)> = configs
            .iter()
            .map(|c| {
                let v = match (stats(c, name), base) {
                    (Some((m, sd)), Some(b)) if points => Some((m - b, sd)),
                    (Some((m, sd)), Some(b)) if b.abs() > 1e-12 => {
                        Some((100.0 * (m / b - 1.0), 100.0 * sd / b.abs()))
                    }
                    _ => None,
                };
                (c.label.clone(), v)
            })
            .collect();
        h.push_str(&bar_chart(name, if points { "points" } else { "%" }, &bars));
    }
    // timelines
    if real {
        h.push_str("<h2>Timelines</h2><p>Real runs record no timeline; `numalab record` samples a running program's memory accesses over time (docs/record.md).</p>");
    } else {
        h.push_str("<h2>Timelines (first run of each configuration)</h2>");
        for c in &configs {
            if let Some(r) = c.first {
                h.push_str(&timeline_chart(&c.label, r));
            }
        }
    }
    // correlation with run time
    let _ = write!(h, "<h2>Correlation with run time</h2><p>Pearson's r of each metric with {}, over every successful run that has both.</p><table class=\"sortable\" id=\"correlation\"><thead><tr><th class=\"l\">metric</th><th>r</th><th>runs</th></tr></thead><tbody>", cols.time_words);
    let all: Vec<&Row> = configs
        .iter()
        .flat_map(|c| c.rows.iter().copied())
        .collect();
    for name in cols.names.iter().filter(|n| **n != cols.time) {
        let pairs: Vec<(f64, f64)> = all
            .iter()
            .filter_map(|r| Some((cols.value(r, name)?, cols.value(r, cols.time)?)))
            .collect();
        let (x, y): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
        let r = pearson(&x, &y);
        let _ = write!(
            h,
            "<tr><td class=\"l\">{name}</td><td>{}</td><td>{}</td></tr>",
            r.map_or(String::new(), |r| format!("{r:.3}")),
            pairs.len()
        );
    }
    h.push_str("</tbody></table>");
    // environment
    let env = std::fs::read_to_string(dir.join("environment.json")).unwrap_or_default();
    let _ = writeln!(
        h,
        "<h2>Environment</h2><pre id=\"environment\">{}</pre><h2>Study file</h2><pre>{}</pre><script>{SORT_JS}</script></body></html>",
        esc(&env),
        esc(&study.source)
    );
    numalab_core::atomic_file::write_atomic(out, h.as_bytes())
        .with_context(|| format!("writing the report {}", out.display()))?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::pearson;

    #[test]
    fn pearson_of_lines_and_of_noise() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert!((pearson(&x, &[2.0, 4.0, 6.0, 8.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((pearson(&x, &[8.0, 6.0, 4.0, 2.0]).unwrap() + 1.0).abs() < 1e-12);
        assert_eq!(pearson(&x, &[1.0, 1.0, 1.0, 1.0]), None);
        assert_eq!(pearson(&x[..2], &[1.0, 2.0]), None);
    }
}
