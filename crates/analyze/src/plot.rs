//! Plots of a sample stream, drawn with `plotters` as PNG or SVG (chosen by the output file's
//! extension):
//!
//! - [`access_map`]: address versus time, one point per (reservoir-sampled) sample, coloured by
//!   the accessing node; limited to the most sampled 2 MiB regions or to an address range, so
//!   huge-page false sharing shows as a band whose halves have different colours;
//! - [`node_traffic`]: DRAM samples per node over time, one line per node;
//! - [`page_heat`]: the hottest pages as bars, stacked by accessing node.
//!
//! Every function streams its source once and keeps bounded state: per-bin counts, per-page or
//! per-region counters (as the analysis does), and a reservoir of at most
//! [`PlotOptions::max_points`] points.
//!
//! Text: plotters' bitmap backend needs a font engine (and fonts) to draw text, which this
//! crate does not build (`default-features = false`, no `ttf`/`ab_glyph`). PNG plots therefore
//! carry no text at all; SVG plots carry a title, a legend and axis ranges as `<text>`
//! elements (the viewer supplies the font).

use crate::error::Error;
use crate::record::SampleSource;
use numalab_core::DataSource;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::HashMap;
use std::path::Path;

const MB2: u64 = 2 << 20;

/// Colours of nodes 0, 1, 2, ... (cycled past the end); [`UNKNOWN_NODE_COLOUR`] for samples
/// whose node is unknown.
pub const NODE_COLOURS: [(u8, u8, u8); 8] = [
    (0x1f, 0x77, 0xb4), // blue
    (0xd6, 0x27, 0x28), // red
    (0x2c, 0xa0, 0x2c), // green
    (0xff, 0x7f, 0x0e), // orange
    (0x94, 0x67, 0xbd), // purple
    (0x8c, 0x56, 0x4b), // brown
    (0xe3, 0x77, 0xc2), // pink
    (0x17, 0xbe, 0xcf), // cyan
];
pub const UNKNOWN_NODE_COLOUR: (u8, u8, u8) = (0x7f, 0x7f, 0x7f);

/// The colour of a node (`None`: unknown node).
pub fn node_colour(node: Option<u16>) -> (u8, u8, u8) {
    match node {
        Some(n) => NODE_COLOURS[n as usize % NODE_COLOURS.len()],
        None => UNKNOWN_NODE_COLOUR,
    }
}

/// Options shared by the three plots; `Default` gives sensible values.
#[derive(Clone, Debug)]
pub struct PlotOptions {
    /// Image size in pixels.
    pub width: u32,
    pub height: u32,
    /// `access_map`: at most this many points are kept (uniform reservoir sample of the
    /// samples in the plotted regions or range).
    pub max_points: usize,
    /// `access_map`: plot the N most sampled 2 MiB regions, stacked one band per region
    /// (most sampled at the bottom), ignored when `addr_range` is set.
    pub top_regions: usize,
    /// `access_map`: plot the addresses in `[start, end)` instead of the top regions.
    pub addr_range: Option<(u64, u64)>,
    /// `node_traffic`: bin width in ns; 0 = automatic (about `max_bins` bins over the run).
    pub bin_ns: u64,
    /// `node_traffic`: the most bins kept; when the run needs more, bins are merged pairwise
    /// (the width doubles), so memory stays bounded whatever `bin_ns`.
    pub max_bins: usize,
    /// `page_heat`: the number of hottest pages drawn.
    pub top_pages: usize,
    /// `page_heat`: page granularity in bytes (a power of two); 0 = each sample's page size
    /// where known, else 4 KiB.
    pub page_bytes: u64,
    /// Seed of the reservoir sampling (plots are reproducible).
    pub seed: u64,
}

impl Default for PlotOptions {
    fn default() -> Self {
        PlotOptions {
            width: 1024,
            height: 640,
            max_points: 50_000,
            top_regions: 4,
            addr_range: None,
            bin_ns: 0,
            max_bins: 200,
            top_pages: 32,
            page_bytes: 4096,
            seed: 0x9e37_79b9_7f4a_7c15,
        }
    }
}

/// What a plot drew, for callers and tests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlotSummary {
    /// Samples read from the source.
    pub samples: u64,
    /// Samples that fell in the plot (the selected regions or range, DRAM samples, ...).
    pub selected: u64,
    /// Points, bins or bars drawn.
    pub drawn: usize,
    /// Series drawn: node ids (`None` for unknown node), in legend order.
    pub series: Vec<Option<u16>>,
    /// `node_traffic`: the bin width finally used; `page_heat`: the page size; else 0.
    pub unit: u64,
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Format {
    Png,
    Svg,
}

fn output_format(out: &Path) -> Result<Format, Error> {
    let ext = out
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("png") => Ok(Format::Png),
        Some("svg") => Ok(Format::Svg),
        Some(e) => Err(Error::new(
            out,
            format!("unknown plot format '.{e}': expected a .png or .svg file"),
        )),
        None => Err(Error::new(
            out,
            "no file extension: expected a .png or .svg file",
        )),
    }
}

/// Checks the output before reading the source: known extension, creatable file, sane size.
fn check_output(out: &Path, opts: &PlotOptions) -> Result<Format, Error> {
    let f = output_format(out)?;
    if opts.width < 16 || opts.height < 16 {
        return Err(Error::new(
            out,
            format!(
                "plot size {}x{} too small (16x16 at least)",
                opts.width, opts.height
            ),
        ));
    }
    std::fs::File::create(out).map_err(|e| Error::new(out, format!("cannot create: {e}")))?;
    Ok(f)
}

fn rgb(c: (u8, u8, u8)) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

type Rgb = (u8, u8, u8);
type Line = (Vec<(f64, f64)>, Rgb);
type Rect = ((f64, f64), (f64, f64), Rgb);
/// Per distinct page: (page start, samples, samples per accessing node).
type PageCounts = (u64, u64, Vec<(Option<u16>, u64)>);

/// A plot in data coordinates, painted on either backend.
struct Scene {
    title: String,
    x: (f64, f64),
    y: (f64, f64),
    /// Filled rectangles in data coordinates.
    rects: Vec<Rect>,
    /// Points: small squares of `point_px` pixels.
    points: Vec<(f64, f64, (u8, u8, u8))>,
    point_px: i32,
    /// Polylines.
    lines: Vec<Line>,
    /// Light separators (horizontal lines at these y).
    separators: Vec<f64>,
    legend: Vec<(String, (u8, u8, u8))>,
    x_label: String,
    y_label: String,
}

fn fix_range(r: (f64, f64)) -> (f64, f64) {
    if !(r.0.is_finite() && r.1.is_finite()) {
        (0.0, 1.0)
    } else if r.1 <= r.0 {
        (r.0 - 0.5, r.0 + 0.5)
    } else {
        r
    }
}

fn paint<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    s: &Scene,
    text: bool,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (w, h) = root.dim_in_pixel();
    let (top, left, bottom, right) = if text { (30, 10, 40, 10) } else { (8, 8, 8, 8) };
    let (x0, x1) = fix_range(s.x);
    let (y0, y1) = fix_range(s.y);
    let mut chart = ChartBuilder::on(&root)
        .margin_top(top)
        .margin_left(left)
        .margin_bottom(bottom)
        .margin_right(right)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    // Frame and separators, without labels (no font engine needed).
    let grey = RGBColor(0xc8, 0xc8, 0xc8);
    for &y in &s.separators {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x0, y), (x1, y)],
            grey,
        )))?;
    }
    chart.draw_series(
        s.rects
            .iter()
            .map(|&(a, b, c)| Rectangle::new([a, b], rgb(c).filled())),
    )?;
    let px = s.point_px.max(1);
    chart.draw_series(s.points.iter().map(|&(x, y, c)| {
        EmptyElement::at((x, y)) + Rectangle::new([(0, 0), (px, px)], rgb(c).filled())
    }))?;
    for (pts, c) in &s.lines {
        chart.draw_series(std::iter::once(PathElement::new(
            pts.clone(),
            rgb(*c).stroke_width(2),
        )))?;
    }
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)],
        BLACK,
    )))?;
    if text {
        let style = ("sans-serif", 14).into_font().color(&BLACK);
        root.draw(&Text::new(s.title.clone(), (10, 8), style.clone()))?;
        let small = ("sans-serif", 12).into_font().color(&BLACK);
        let bottom_y = h as i32 - 30;
        root.draw(&Text::new(
            format!("{}: {} .. {}", s.x_label, fmt_num(x0), fmt_num(x1)),
            (10, bottom_y),
            small.clone(),
        ))?;
        root.draw(&Text::new(
            format!("{}: {} .. {}", s.y_label, fmt_num(y0), fmt_num(y1)),
            (10, bottom_y + 15),
            small.clone(),
        ))?;
        let mut x = w as i32 / 2;
        for (name, c) in &s.legend {
            root.draw(&Rectangle::new(
                [(x, bottom_y + 2), (x + 10, bottom_y + 12)],
                rgb(*c).filled(),
            ))?;
            root.draw(&Text::new(name.clone(), (x + 14, bottom_y), small.clone()))?;
            x += 14 + 8 * name.len() as i32 + 12;
        }
    }
    root.present()
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 1e6 && v.fract() == 0.0 {
        format!("{:#x}", v as u64)
    } else {
        format!("{v:.0}")
    }
}

fn render(out: &Path, fmt: Format, opts: &PlotOptions, s: &Scene) -> Result<(), Error> {
    let size = (opts.width, opts.height);
    let r = match fmt {
        Format::Png => paint(BitMapBackend::new(out, size).into_drawing_area(), s, false)
            .map_err(|e| e.to_string()),
        Format::Svg => paint(SVGBackend::new(out, size).into_drawing_area(), s, true)
            .map_err(|e| e.to_string()),
    };
    r.map_err(|e| Error::new(out, format!("cannot draw plot: {e}")))
}

/// A small deterministic generator for reservoir sampling (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n.max(1)
    }
}

/// A uniform sample of at most `cap` items of a stream (algorithm R).
struct Reservoir<T> {
    cap: usize,
    seen: u64,
    items: Vec<T>,
    rng: Rng,
}

impl<T> Reservoir<T> {
    fn new(cap: usize, seed: u64) -> Self {
        Reservoir {
            cap,
            seen: 0,
            items: Vec::new(),
            rng: Rng(seed | 1),
        }
    }
    fn push(&mut self, t: T) {
        self.seen += 1;
        if self.items.len() < self.cap {
            self.items.push(t);
        } else if self.cap > 0 {
            let j = self.rng.below(self.seen) as usize;
            if j < self.cap {
                self.items[j] = t;
            }
        }
    }
}

fn series_of(mut nodes: Vec<Option<u16>>) -> Vec<Option<u16>> {
    nodes.sort_by_key(|n| n.map_or(u32::MAX, |v| v as u32));
    nodes.dedup();
    nodes
}

fn legend(series: &[Option<u16>]) -> Vec<(String, (u8, u8, u8))> {
    series
        .iter()
        .map(|n| {
            let name = n.map_or("node ?".to_string(), |v| format!("node {v}"));
            (name, node_colour(*n))
        })
        .collect()
}

/// Address versus time scatter, coloured by accessing node.
///
/// Without `addr_range`, the `top_regions` most sampled 2 MiB regions are stacked as bands
/// (y = band index + offset in the region / 2 MiB, most sampled at the bottom). The stream is
/// read once: per-region counts plus one reservoir of points, which are afterwards filtered
/// to the selected regions, so a region holding a small share of the samples gets
/// proportionally few points. With `addr_range`, only samples in the range enter the
/// reservoir and y is the address.
pub fn access_map(
    source: &mut dyn SampleSource,
    out: impl AsRef<Path>,
    opts: &PlotOptions,
) -> Result<PlotSummary, Error> {
    let out = out.as_ref();
    let fmt = check_output(out, opts)?;
    if let Some((a, b)) = opts.addr_range {
        if b <= a {
            return Err(Error::new(
                out,
                format!("empty address range {a:#x}..{b:#x}"),
            ));
        }
    }
    let mut sum = PlotSummary::default();
    let mut regions: HashMap<u64, u64> = HashMap::new();
    // (time, addr, node)
    let mut res: Reservoir<(u64, u64, Option<u16>)> = Reservoir::new(opts.max_points, opts.seed);
    while let Some(batch) = source.next_batch()? {
        for r in &batch.records {
            sum.samples += 1;
            let a = r.sample.addr;
            if let Some((lo, hi)) = opts.addr_range {
                if a < lo || a >= hi {
                    continue;
                }
            } else {
                *regions.entry(a / MB2).or_default() += 1;
            }
            res.push((r.sample.time_ns, a, r.cpu_node().map(|n| n.0)));
        }
    }
    let mut points = Vec::new();
    let mut separators = Vec::new();
    let (y_range, y_label);
    if let Some((lo, hi)) = opts.addr_range {
        sum.selected = res.seen;
        points = res.items;
        y_range = (lo as f64, hi as f64);
        y_label = "address".to_string();
    } else {
        let mut top: Vec<(u64, u64)> = regions.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        top.truncate(opts.top_regions.max(1));
        let band: HashMap<u64, usize> = top.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
        sum.selected = top.iter().map(|r| r.1).sum();
        for (t, a, n) in res.items {
            if let Some(&i) = band.get(&(a / MB2)) {
                // Encode the band position as a pseudo address: y computed below.
                points.push((t, ((i as u64) << 32) | (a % MB2), n));
            }
        }
        separators = (1..top.len()).map(|i| i as f64).collect();
        y_range = (0.0, top.len().max(1) as f64);
        y_label = format!(
            "2 MiB regions (bottom up): {}",
            top.iter()
                .map(|r| format!("{:#x}", r.0 * MB2))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let by_range = opts.addr_range.is_some();
    let y_of = |a: u64| -> f64 {
        if by_range {
            a as f64
        } else {
            (a >> 32) as f64 + (a & 0xffff_ffff) as f64 / MB2 as f64
        }
    };
    let (tmin, tmax) = points
        .iter()
        .fold((u64::MAX, 0), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    let series = series_of(points.iter().map(|p| p.2).collect());
    // Points are painted in reservoir order (random), so no node is systematically painted
    // over by another where they overlap.
    let scene = Scene {
        title: format!(
            "access map: {} of {} samples ({} drawn)",
            sum.selected,
            sum.samples,
            points.len()
        ),
        x: if points.is_empty() {
            (0.0, 1.0)
        } else {
            (tmin as f64, tmax as f64)
        },
        y: y_range,
        rects: Vec::new(),
        points: points
            .iter()
            .map(|&(t, a, n)| (t as f64, y_of(a), node_colour(n)))
            .collect(),
        point_px: 2,
        lines: Vec::new(),
        separators,
        legend: legend(&series),
        x_label: "time (ns)".into(),
        y_label,
    };
    sum.drawn = points.len();
    sum.series = series;
    render(out, fmt, opts, &scene)?;
    Ok(sum)
}

/// The node whose DRAM served a sample: `page_node`, or for a local DRAM access with unknown
/// page node, `cpu_node`. `None` for non-DRAM samples and unattributable ones.
fn dram_node(r: &crate::record::Record) -> Option<Option<u16>> {
    let src = r.source()?;
    if !src.is_dram() {
        return None;
    }
    match (r.page_node(), src, r.cpu_node()) {
        (Some(n), _, _) => Some(Some(n.0)),
        (None, DataSource::LocalDram, Some(c)) => Some(Some(c.0)),
        _ => Some(None),
    }
}

/// Per-node DRAM samples over time, one line per node (the node whose memory served the
/// sample; `node ?` for remote DRAM samples whose page node is unknown). Bins are `bin_ns`
/// wide from the earliest sample, merged pairwise when more than `max_bins` are needed.
pub fn node_traffic(
    source: &mut dyn SampleSource,
    out: impl AsRef<Path>,
    opts: &PlotOptions,
) -> Result<PlotSummary, Error> {
    let out = out.as_ref();
    let fmt = check_output(out, opts)?;
    let max_bins = opts.max_bins.max(2);
    let mut width = if opts.bin_ns == 0 { 1 } else { opts.bin_ns };
    let mut origin: Option<u64> = None;
    // counts[node][bin]; node index: node id, or the last slot for unknown.
    let mut counts: HashMap<Option<u16>, Vec<u64>> = HashMap::new();
    let mut nbins = 0usize;
    let mut sum = PlotSummary::default();
    while let Some(batch) = source.next_batch()? {
        for r in &batch.records {
            sum.samples += 1;
            let Some(node) = dram_node(r) else { continue };
            sum.selected += 1;
            let t = r.sample.time_ns;
            let o = *origin.get_or_insert(t - t % width);
            if t < o {
                // An earlier sample: prepend whole bins (rare; perf streams are nearly sorted).
                let shift = (o - t).div_ceil(width) as usize;
                for v in counts.values_mut() {
                    v.splice(0..0, std::iter::repeat_n(0, shift));
                }
                nbins += shift;
                origin = Some(o - shift as u64 * width);
            }
            let o = origin.unwrap();
            let mut bin = ((t - o) / width) as usize;
            while bin >= max_bins || nbins > max_bins {
                // Double the width: merge pairs of bins.
                width *= 2;
                for v in counts.values_mut() {
                    let merged: Vec<u64> = v.chunks(2).map(|c| c.iter().sum()).collect();
                    *v = merged;
                }
                nbins = nbins.div_ceil(2);
                bin = ((t - o) / width) as usize;
            }
            let v = counts.entry(node).or_default();
            if v.len() <= bin {
                v.resize(bin + 1, 0);
            }
            v[bin] += 1;
            nbins = nbins.max(bin + 1);
        }
    }
    let series = series_of(counts.keys().copied().collect());
    let o = origin.unwrap_or(0) as f64;
    let ymax = counts
        .values()
        .flat_map(|v| v.iter().copied())
        .max()
        .unwrap_or(0);
    let lines: Vec<Line> = series
        .iter()
        .map(|n| {
            let v = &counts[n];
            let pts = (0..nbins)
                .map(|i| {
                    let c = v.get(i).copied().unwrap_or(0);
                    (o + (i as f64 + 0.5) * width as f64, c as f64)
                })
                .collect();
            (pts, node_colour(*n))
        })
        .collect();
    let scene = Scene {
        title: format!(
            "DRAM samples per node, {} ns bins ({} of {} samples)",
            width, sum.selected, sum.samples
        ),
        x: (o, o + nbins.max(1) as f64 * width as f64),
        y: (0.0, (ymax.max(1) as f64) * 1.05),
        rects: Vec::new(),
        points: Vec::new(),
        point_px: 1,
        lines,
        separators: Vec::new(),
        legend: legend(&series),
        x_label: "time (ns)".into(),
        y_label: "samples per bin".into(),
    };
    sum.drawn = nbins;
    sum.series = series;
    sum.unit = width;
    render(out, fmt, opts, &scene)?;
    Ok(sum)
}

/// The hottest pages as bars (hottest on the left), each stacked by accessing node, so a page
/// shared by nodes shows several colours. Keeps one counter per node per distinct page.
pub fn page_heat(
    source: &mut dyn SampleSource,
    out: impl AsRef<Path>,
    opts: &PlotOptions,
) -> Result<PlotSummary, Error> {
    let out = out.as_ref();
    let fmt = check_output(out, opts)?;
    if opts.page_bytes != 0 && !opts.page_bytes.is_power_of_two() {
        return Err(Error::new(
            out,
            format!("page size {} is not a power of two", opts.page_bytes),
        ));
    }
    let mut sum = PlotSummary::default();
    // (page start) -> [(node, count)]
    let mut pages: HashMap<u64, Vec<(Option<u16>, u64)>> = HashMap::new();
    let mut unit = opts.page_bytes;
    while let Some(batch) = source.next_batch()? {
        for r in &batch.records {
            sum.samples += 1;
            let ps = if opts.page_bytes != 0 {
                opts.page_bytes
            } else {
                r.page_size().map_or(4096, |p| p.bytes())
            };
            unit = unit.max(ps);
            let page = r.sample.addr & !(ps - 1);
            let node = r.cpu_node().map(|n| n.0);
            let v = pages.entry(page).or_default();
            match v.iter_mut().find(|e| e.0 == node) {
                Some(e) => e.1 += 1,
                None => v.push((node, 1)),
            }
        }
    }
    let mut top: Vec<PageCounts> = pages
        .into_iter()
        .map(|(p, v)| (p, v.iter().map(|e| e.1).sum(), v))
        .collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(opts.top_pages.max(1));
    sum.selected = top.iter().map(|t| t.1).sum();
    let mut rects = Vec::new();
    let mut nodes = Vec::new();
    for (i, (_, _, v)) in top.iter_mut().enumerate() {
        v.sort_by_key(|e| e.0.map_or(u32::MAX, |n| n as u32));
        let mut y = 0u64;
        for &(n, c) in v.iter() {
            nodes.push(n);
            rects.push((
                (i as f64 + 0.1, y as f64),
                (i as f64 + 0.9, (y + c) as f64),
                node_colour(n),
            ));
            y += c;
        }
    }
    let series = series_of(nodes);
    let ymax = top.first().map_or(1, |t| t.1.max(1));
    let scene = Scene {
        title: format!(
            "hottest {} pages: {} of {} samples; first {}",
            top.len(),
            sum.selected,
            sum.samples,
            top.first().map_or(String::new(), |t| format!("{:#x}", t.0))
        ),
        x: (0.0, top.len().max(1) as f64),
        y: (0.0, ymax as f64 * 1.05),
        rects,
        points: Vec::new(),
        point_px: 1,
        lines: Vec::new(),
        separators: Vec::new(),
        legend: legend(&series),
        x_label: "page rank".into(),
        y_label: "samples".into(),
    };
    sum.drawn = top.len();
    sum.series = series;
    sum.unit = unit;
    render(out, fmt, opts, &scene)?;
    Ok(sum)
}
