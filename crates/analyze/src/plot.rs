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
//! Text: both formats carry a title, axis names with units, tick labels and a colour key that
//! says what the colours mean. The font (DejaVu Sans, `fonts/`) is embedded and drawn through
//! plotters' `ab_glyph` engine, so a PNG has its text on a machine with no font installed.
//! With fewer than [`FEW_SAMPLES`] samples in the picture, its title says so, and
//! `node_traffic`'s automatic bins widen until they hold about ten samples each.
//!
//! A picture is drawn in memory and written whole (a temporary file renamed into place): a
//! failure leaves no partial file and an existing one as it was.

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

/// Checks the output before reading the source: known extension, a folder to write it in,
/// sane size. Nothing is created until the picture is complete.
fn check_output(out: &Path, opts: &PlotOptions) -> Result<Format, Error> {
    let f = output_format(out)?;
    if opts.width < 160 || opts.height < 120 {
        return Err(Error::new(
            out,
            format!(
                "plot size {}x{} too small for its labels (160x120 at least)",
                opts.width, opts.height
            ),
        ));
    }
    let dir = out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(Error::new(
            out,
            format!("cannot create: folder {} does not exist", dir.display()),
        ));
    }
    if out.is_dir() {
        return Err(Error::new(out, "cannot create: it is a folder"));
    }
    Ok(f)
}

/// Below this many samples in a picture its title says they are too few to read much into.
pub const FEW_SAMPLES: u64 = 100;

fn rgb(c: (u8, u8, u8)) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

type Rgb = (u8, u8, u8);
type Line = (Vec<(f64, f64)>, Rgb);
type Rect = ((f64, f64), (f64, f64), Rgb);
/// Per distinct page: (page start, samples, samples per accessing node).
type PageCounts = (u64, u64, Vec<(Option<u16>, u64)>);

/// How an axis labels its ticks.
#[derive(Clone, Debug)]
enum Axis {
    /// Nanoseconds since the picture's origin (the first sample: perf's clock counts from
    /// boot), shown in the unit that suits the span (ns, µs, ms or s). Scenes give x from that
    /// origin, so that plotters' round tick values are round times.
    Time,
    /// Byte addresses, in hex.
    Address,
    /// Counts.
    Count,
    /// Bar positions 1, 2, ... (page ranks).
    Rank,
    /// Stacked 2 MiB bands: the tick at band k's lower edge shows its region's start.
    Bands(Vec<u64>),
}

/// A time unit for a span of `span_ns`: (divisor, name).
fn time_unit(span_ns: f64) -> (f64, &'static str) {
    match span_ns {
        s if s >= 1e10 => (1e9, "s"),
        s if s >= 1e7 => (1e6, "ms"),
        s if s >= 1e4 => (1e3, "µs"),
        _ => (1.0, "ns"),
    }
}

impl Axis {
    /// The axis name with its unit, for a range `r`.
    fn name(&self, what: &str, r: (f64, f64)) -> String {
        match self {
            Axis::Time => format!("{what} ({})", time_unit(r.1 - r.0).1),
            _ => what.to_string(),
        }
    }

    fn tick(&self, v: f64, r: (f64, f64)) -> String {
        match self {
            Axis::Time => {
                let (div, _) = time_unit(r.1 - r.0);
                // enough decimals to tell neighbouring ticks (about 8 over the span) apart
                let step = (r.1 - r.0) / div / 8.0;
                let decimals = (-step.log10().floor()).clamp(0.0, 6.0) as usize;
                format!("{:.decimals$}", v / div)
            }
            Axis::Address => format!("{:#x}", v.max(0.0) as u64),
            Axis::Count => {
                if (v - v.round()).abs() < 1e-9 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.1}")
                }
            }
            Axis::Rank => {
                if (v - v.round()).abs() < 1e-9 && v >= 1.0 {
                    format!("{v:.0}")
                } else {
                    String::new()
                }
            }
            Axis::Bands(starts) => {
                let k = v.round();
                if (v - k).abs() < 1e-9 && k >= 0.0 && (k as usize) < starts.len() {
                    format!("{:#x}", starts[k as usize])
                } else {
                    String::new()
                }
            }
        }
    }

    /// Tick count asked of plotters.
    fn ticks(&self) -> usize {
        match self {
            Axis::Bands(starts) => starts.len() + 1,
            _ => 8,
        }
    }

    /// Pixels the tick labels need beside a vertical axis.
    fn label_px(&self) -> u32 {
        match self {
            Axis::Address | Axis::Bands(_) => 110,
            _ => 60,
        }
    }
}

/// A plot in data coordinates, painted on either backend.
struct Scene {
    title: String,
    x: (f64, f64),
    y: (f64, f64),
    x_axis: Axis,
    y_axis: Axis,
    /// Filled rectangles in data coordinates.
    rects: Vec<Rect>,
    /// Points: small squares of `point_px` pixels.
    points: Vec<(f64, f64, (u8, u8, u8))>,
    point_px: i32,
    /// Polylines.
    lines: Vec<Line>,
    /// Light separators (horizontal lines at these y).
    separators: Vec<f64>,
    /// What the colours stand for, said before the key's swatches.
    colour_meaning: String,
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

/// The embedded font, registered with plotters once per process.
fn register_font() {
    static FONT: std::sync::Once = std::sync::Once::new();
    FONT.call_once(|| {
        let bytes: &'static [u8] = include_bytes!("../fonts/DejaVuSans.ttf");
        // the font is part of the build and known good: a failure here is a broken build
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .unwrap_or_else(|_| panic!("the embedded DejaVu Sans does not load"));
    });
}

/// A title noting that `selected` samples are too few, when they are.
fn few_note(selected: u64) -> String {
    if selected < FEW_SAMPLES {
        format!(" (only {selected} samples: too few to read much into)")
    } else {
        String::new()
    }
}

fn paint<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    s: &Scene,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (_, h) = root.dim_in_pixel();
    let key_px = 26;
    let (main, key) = root.split_vertically(h.saturating_sub(key_px));
    let (x0, x1) = fix_range(s.x);
    let (y0, y1) = fix_range(s.y);
    let mut chart = ChartBuilder::on(&main)
        .caption(&s.title, ("sans-serif", 15))
        .margin(8)
        .margin_right(20)
        .x_label_area_size(44)
        .y_label_area_size(s.y_axis.label_px())
        .build_cartesian_2d(x0..x1, y0..y1)?;
    let x_tick = |v: &f64| s.x_axis.tick(*v, (x0, x1));
    let y_tick = |v: &f64| s.y_axis.tick(*v, (y0, y1));
    let grid = RGBColor(0xe4, 0xe4, 0xe4);
    chart
        .configure_mesh()
        .x_labels(s.x_axis.ticks())
        .y_labels(s.y_axis.ticks())
        .x_label_formatter(&x_tick)
        .y_label_formatter(&y_tick)
        .x_desc(s.x_axis.name(&s.x_label, (x0, x1)))
        .y_desc(s.y_axis.name(&s.y_label, (y0, y1)))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 13))
        .bold_line_style(grid)
        .light_line_style(TRANSPARENT)
        .draw()?;
    let grey = RGBColor(0xa0, 0xa0, 0xa0);
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
    // the colour key: what colour means, then one swatch per series
    let font = ("sans-serif", 12).into_font();
    let small = font.clone().color(&BLACK);
    let mut x = 10i32;
    let y = 6i32;
    let meaning = format!("{}:", s.colour_meaning);
    key.draw(&Text::new(meaning.clone(), (x, y), small.clone()))?;
    x += key.estimate_text_size(&meaning, &small)?.0 as i32 + 12;
    for (name, c) in &s.legend {
        key.draw(&Rectangle::new(
            [(x, y + 1), (x + 11, y + 12)],
            rgb(*c).filled(),
        ))?;
        key.draw(&Text::new(name.clone(), (x + 15, y), small.clone()))?;
        x += 15 + key.estimate_text_size(name, &small)?.0 as i32 + 14;
    }
    root.present()
}

/// Draw `s` in `fmt` and write it to `out` whole, through a temporary file.
fn render(out: &Path, fmt: Format, opts: &PlotOptions, s: &Scene) -> Result<(), Error> {
    register_font();
    let (w, h) = (opts.width, opts.height);
    let failed = |e: String| Error::new(out, format!("cannot draw plot: {e}"));
    let bytes = match fmt {
        Format::Png => {
            let mut rgb = vec![0u8; w as usize * h as usize * 3];
            paint(
                BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area(),
                s,
            )
            .map_err(|e| failed(e.to_string()))?;
            let mut png = Vec::new();
            let mut enc = png::Encoder::new(&mut png, w, h);
            enc.set_color(png::ColorType::Rgb);
            enc.set_depth(png::BitDepth::Eight);
            enc.write_header()
                .and_then(|mut wr| wr.write_image_data(&rgb))
                .map_err(|e| failed(e.to_string()))?;
            png
        }
        Format::Svg => {
            let mut svg = String::new();
            paint(
                SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area(),
                s,
            )
            .map_err(|e| failed(e.to_string()))?;
            svg.into_bytes()
        }
    };
    numalab_core::atomic_file::write_atomic(out, &bytes)
        .map_err(|e| Error::new(out, format!("cannot create: {e}")))
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
    let (y_range, y_label, y_axis);
    if let Some((lo, hi)) = opts.addr_range {
        sum.selected = res.seen;
        points = res.items;
        y_range = (lo as f64, hi as f64);
        y_label = "address".to_string();
        y_axis = Axis::Address;
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
        y_label = "2 MiB regions, most sampled lowest (tick: region start)".to_string();
        y_axis = Axis::Bands(top.iter().map(|r| r.0 * MB2).collect());
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
            "access map: {} of {} samples ({} drawn){}",
            sum.selected,
            sum.samples,
            points.len(),
            few_note(sum.selected)
        ),
        x: if points.is_empty() {
            (0.0, 1.0)
        } else {
            (0.0, (tmax - tmin) as f64)
        },
        y: y_range,
        x_axis: Axis::Time,
        y_axis,
        rects: Vec::new(),
        points: points
            .iter()
            .map(|&(t, a, n)| ((t - tmin) as f64, y_of(a), node_colour(n)))
            .collect(),
        point_px: 2,
        lines: Vec::new(),
        separators,
        colour_meaning: "colour = node of the CPU that made the access".into(),
        legend: legend(&series),
        x_label: "time since the first sample".into(),
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

/// Double the bin width of every node's series: merge pairs of bins.
fn double_bins(counts: &mut HashMap<Option<u16>, Vec<u64>>, width: &mut u64, nbins: &mut usize) {
    *width *= 2;
    for v in counts.values_mut() {
        *v = v.chunks(2).map(|c| c.iter().sum()).collect();
    }
    *nbins = nbins.div_ceil(2);
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
                double_bins(&mut counts, &mut width, &mut nbins);
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
    // automatic bins: widen until they hold about ten samples each, so a short recording
    // gives a few meaningful bins instead of many of zero or one
    if opts.bin_ns == 0 {
        while nbins > 2 && sum.selected < 10 * nbins as u64 {
            double_bins(&mut counts, &mut width, &mut nbins);
        }
    }
    let series = series_of(counts.keys().copied().collect());
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
                    ((i as f64 + 0.5) * width as f64, c as f64)
                })
                .collect();
            (pts, node_colour(*n))
        })
        .collect();
    let scene = Scene {
        title: format!(
            "DRAM samples per node, bins of {} ({} of {} samples){}",
            {
                let (div, unit) = time_unit(width as f64);
                format!("{} {unit}", width as f64 / div)
            },
            sum.selected,
            sum.samples,
            few_note(sum.selected)
        ),
        x: (0.0, nbins.max(1) as f64 * width as f64),
        y: (0.0, (ymax.max(1) as f64) * 1.05),
        x_axis: Axis::Time,
        y_axis: Axis::Count,
        rects: Vec::new(),
        points: Vec::new(),
        point_px: 1,
        lines,
        separators: Vec::new(),
        colour_meaning: "line colour = node whose memory served the sample".into(),
        legend: legend(&series),
        x_label: "time since the first DRAM sample's bin".into(),
        y_label: "DRAM samples per bin".into(),
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
            // rank i + 1 centred on x = i + 1, so the ticks are the ranks
            rects.push((
                (i as f64 + 0.6, y as f64),
                (i as f64 + 1.4, (y + c) as f64),
                node_colour(n),
            ));
            y += c;
        }
    }
    let series = series_of(nodes);
    let ymax = top.first().map_or(1, |t| t.1.max(1));
    let scene = Scene {
        title: format!(
            "hottest {} pages of {} KiB: {} of {} samples; first {}{}",
            top.len(),
            unit / 1024,
            sum.selected,
            sum.samples,
            top.first().map_or(String::new(), |t| format!("{:#x}", t.0)),
            few_note(sum.selected)
        ),
        x: (0.5, top.len().max(1) as f64 + 0.5),
        y: (0.0, ymax as f64 * 1.05),
        x_axis: Axis::Rank,
        y_axis: Axis::Count,
        rects,
        points: Vec::new(),
        point_px: 1,
        lines: Vec::new(),
        separators: Vec::new(),
        colour_meaning: "colour = node of the CPU that made the access".into(),
        legend: legend(&series),
        x_label: "page rank (1 = most sampled)".into(),
        y_label: "samples".into(),
    };
    sum.drawn = top.len();
    sum.series = series;
    sum.unit = unit;
    render(out, fmt, opts, &scene)?;
    Ok(sum)
}
