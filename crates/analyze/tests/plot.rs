//! Plots of the THP false-sharing scenario (two threads on nodes 0 and 1 write disjoint halves
//! of each 2 MiB region), written as PNG and SVG and checked by decoding them.

use numalab_analyze::plot::{access_map, node_colour, node_traffic, page_heat, PlotOptions};
use numalab_analyze::record::MemorySource;
use numalab_analyze::FileMeta;
use numalab_core::{AccessSample, PageSize};
use numalab_sim::{SimResult, ThpMode};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod common;

use common::{machine, run, MB2, REGIONS};

fn sim() -> &'static SimResult {
    static R: OnceLock<SimResult> = OnceLock::new();
    R.get_or_init(|| {
        let r = run(ThpMode::Always);
        assert!(
            r.samples.len() > 2000,
            "enough samples: {}",
            r.samples.len()
        );
        assert_eq!(r.vmstat.pgfault_2m, REGIONS);
        r
    })
}

fn source(samples: &[AccessSample]) -> MemorySource<'_> {
    let m = machine();
    let meta = FileMeta {
        origin: "sim".into(),
        sample_period: common::SAMPLE_PERIOD,
        page_size: Some(PageSize::Base4K),
        nodes: m.topology.num_nodes() as u16,
        ..Default::default()
    };
    MemorySource::new(meta, samples)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("numalab-plot-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn opts() -> PlotOptions {
    PlotOptions {
        width: 640,
        height: 400,
        ..Default::default()
    }
}

/// Decodes a PNG: (width, height, RGB pixels row-major).
fn decode_png(p: &Path) -> (u32, u32, Vec<(u8, u8, u8)>) {
    let dec = png::Decoder::new(std::fs::File::open(p).unwrap());
    let mut rd = dec.read_info().unwrap();
    let mut buf = vec![0; rd.output_buffer_size()];
    let info = rd.next_frame(&mut buf).unwrap();
    let ch = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        c => panic!("unexpected colour type {c:?}"),
    };
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let px = buf[..info.buffer_size()]
        .chunks(ch)
        .map(|c| (c[0], c[1], c[2]))
        .collect();
    (info.width, info.height, px)
}

/// The bottom strip of a picture that holds its colour key (`plot.rs`, `paint`).
const KEY_PX: u32 = 26;

/// Pixel counts of each node colour 0..8 above the colour key, in the top and bottom halves of
/// the drawn points (split halfway between the highest and the lowest node-coloured pixel).
fn node_pixels(w: u32, h: u32, px: &[(u8, u8, u8)]) -> HashMap<u16, (usize, usize)> {
    let node_of = |p: &(u8, u8, u8)| (0..8u16).find(|&n| *p == node_colour(Some(n)));
    let rows: Vec<u32> = px
        .iter()
        .enumerate()
        .filter(|(i, p)| (*i as u32 / w) < h - KEY_PX && node_of(p).is_some())
        .map(|(i, _)| i as u32 / w)
        .collect();
    let (lo, hi) = (
        rows.iter().copied().min().unwrap_or(0),
        rows.iter().copied().max().unwrap_or(0),
    );
    let mid = (lo + hi) / 2;
    let mut m: HashMap<u16, (usize, usize)> = HashMap::new();
    for (i, p) in px.iter().enumerate() {
        let y = i as u32 / w;
        if y >= h - KEY_PX {
            continue;
        }
        if let Some(n) = node_of(p) {
            let e = m.entry(n).or_default();
            if y < mid {
                e.0 += 1
            } else {
                e.1 += 1
            }
        }
    }
    m
}

/// Whether the band of rows `rows` holds dark (text) pixels: black or near-black.
fn has_text(w: u32, px: &[(u8, u8, u8)], rows: std::ops::Range<u32>) -> bool {
    px.iter()
        .enumerate()
        .filter(|(i, _)| rows.contains(&(*i as u32 / w)))
        .filter(|(_, p)| p.0 < 80 && p.1 < 80 && p.2 < 80)
        .count()
        > 50
}

/// Parses an SVG (well-formed XML with an <svg> root) and returns the node colours used as
/// fill (rects) and as stroke of thick polylines (series lines), and the number of those
/// polylines.
fn svg_colours(p: &Path) -> (BTreeSet<u16>, BTreeSet<u16>, usize, String) {
    let text = std::fs::read_to_string(p).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let hex = |c: (u8, u8, u8)| format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
    let mut fills = BTreeSet::new();
    let mut strokes = BTreeSet::new();
    let mut lines = 0;
    for n in doc.descendants().filter(|n| n.is_element()) {
        for node in 0..8u16 {
            let c = hex(node_colour(Some(node)));
            if n.tag_name().name() == "rect" && n.attribute("fill") == Some(c.as_str()) {
                fills.insert(node);
            }
            if n.tag_name().name() == "polyline"
                && n.attribute("stroke") == Some(c.as_str())
                && n.attribute("stroke-width") == Some("2")
            {
                strokes.insert(node);
                lines += 1;
            }
        }
    }
    let all_text: String = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "text")
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join("\n");
    (fills, strokes, lines, all_text)
}

#[test]
fn access_map_shows_false_sharing_halves() {
    let r = sim();
    // One region: thread 0 (node 0) writes its lower half, thread 1 (node 1) its upper half.
    let o = PlotOptions {
        top_regions: 1,
        ..opts()
    };
    let png = tmp("map.png");
    let s = access_map(&mut source(&r.samples), &png, &o).unwrap();
    assert_eq!(s.samples, r.samples.len() as u64);
    assert!(s.drawn > 100, "{s:?}");
    assert_eq!(s.series, vec![Some(0), Some(1)]);
    let (w, h, px) = decode_png(&png);
    assert_eq!((w, h), (640, 400));
    let np = node_pixels(w, h, &px);
    let (n0_top, n0_bottom) = np.get(&0).copied().unwrap_or_default();
    let (n1_top, n1_bottom) = np.get(&1).copied().unwrap_or_default();
    println!("node 0 top/bottom {n0_top}/{n0_bottom}, node 1 {n1_top}/{n1_bottom}");
    assert!(n0_bottom > 200 && n1_top > 200, "both node colours drawn");
    // Lower addresses are at the bottom: node 0 there, node 1 on top.
    assert!(
        n0_bottom > 20 * n0_top.max(1) / 2,
        "node 0 in the lower half"
    );
    assert!(
        n1_top > 20 * n1_bottom.max(1) / 2,
        "node 1 in the upper half"
    );
    assert!(!np.contains_key(&2) && !np.contains_key(&3));

    let svg = tmp("map.svg");
    let s2 = access_map(&mut source(&r.samples), &svg, &o).unwrap();
    assert_eq!(s2, s, "same reservoir for the same seed");
    let (fills, _, _, text) = svg_colours(&svg);
    assert_eq!(
        fills,
        BTreeSet::from([0, 1]),
        "points and legend of two nodes"
    );
    assert!(text.contains("node 0") && text.contains("node 1"), "{text}");

    // Four regions, all drawn; a capped reservoir.
    let o4 = PlotOptions {
        top_regions: 4,
        max_points: 500,
        ..opts()
    };
    let s4 = access_map(&mut source(&r.samples), tmp("map4.svg"), &o4).unwrap();
    assert_eq!(
        s4.selected,
        r.samples.len() as u64,
        "every sample in the 4 regions"
    );
    assert_eq!(s4.drawn, 500);
    let (fills, ..) = svg_colours(&tmp("map4.svg"));
    assert_eq!(fills, BTreeSet::from([0, 1]));
}

#[test]
fn access_map_address_range_selects_one_half() {
    let r = sim();
    let base = r.samples.iter().map(|s| s.addr).min().unwrap() & !(MB2 - 1);
    let lower = r
        .samples
        .iter()
        .filter(|s| s.addr >= base && s.addr < base + MB2 / 2)
        .count() as u64;
    let o = PlotOptions {
        addr_range: Some((base, base + MB2 / 2)),
        ..opts()
    };
    let png = tmp("range.png");
    let s = access_map(&mut source(&r.samples), &png, &o).unwrap();
    assert_eq!(s.selected, lower);
    assert_eq!(s.series, vec![Some(0)], "the lower half is node 0's");
    let (w, h, px) = decode_png(&png);
    let np = node_pixels(w, h, &px);
    assert!(np.get(&0).is_some_and(|c| c.0 + c.1 > 100));
    assert!(!np.contains_key(&1));
}

#[test]
fn node_traffic_one_line_per_node() {
    let r = sim();
    let dram = r.samples.iter().filter(|s| s.source.is_dram()).count() as u64;
    let expect: BTreeSet<u16> = r
        .samples
        .iter()
        .filter(|s| s.source.is_dram())
        .map(|s| s.page_node.0)
        .collect();
    assert!(!expect.is_empty());
    let span = r.samples.iter().map(|s| s.time_ns).max().unwrap()
        - r.samples.iter().map(|s| s.time_ns).min().unwrap();
    let o = PlotOptions {
        bin_ns: (span / 50).max(1),
        ..opts()
    };
    let svg = tmp("traffic.svg");
    let s = node_traffic(&mut source(&r.samples), &svg, &o).unwrap();
    assert_eq!(s.selected, dram);
    assert_eq!(s.unit, o.bin_ns, "50 bins need no merging");
    assert!((50..=52).contains(&s.drawn), "{s:?}");
    let series: BTreeSet<u16> = s.series.iter().map(|n| n.unwrap()).collect();
    assert_eq!(series, expect);
    let (_, strokes, lines, _) = svg_colours(&svg);
    assert_eq!(strokes, expect);
    assert_eq!(lines, expect.len(), "one line per node");

    // Few bins allowed: the width doubles until they fit.
    let o = PlotOptions {
        bin_ns: (span / 50).max(1),
        max_bins: 10,
        ..opts()
    };
    let png = tmp("traffic.png");
    let s = node_traffic(&mut source(&r.samples), &png, &o).unwrap();
    assert!(s.drawn <= 10 && s.unit >= 5 * o.bin_ns, "{s:?}");
    let (w, h, px) = decode_png(&png);
    assert_eq!((w, h), (640, 400));
    let np = node_pixels(w, h, &px);
    let drawn: BTreeSet<u16> = np.keys().copied().collect();
    assert_eq!(drawn, expect);
}

#[test]
fn page_heat_huge_pages_are_shared() {
    let r = sim();
    // Pages of the samples' own size: the 4 huge pages, each written by both nodes.
    let o = PlotOptions {
        page_bytes: 0,
        ..opts()
    };
    let png = tmp("heat.png");
    let s = page_heat(&mut source(&r.samples), &png, &o).unwrap();
    assert_eq!(s.unit, MB2);
    assert_eq!(s.drawn, REGIONS as usize);
    assert_eq!(s.selected, r.samples.len() as u64);
    assert_eq!(s.series, vec![Some(0), Some(1)]);
    let (w, h, px) = decode_png(&png);
    assert_eq!((w, h), (640, 400));
    let np = node_pixels(w, h, &px);
    assert!(np.get(&0).is_some_and(|c| c.0 + c.1 > 1000), "{np:?}");
    assert!(np.get(&1).is_some_and(|c| c.0 + c.1 > 1000), "{np:?}");

    // 4 KiB pages: each written by one thread; 10 bars.
    let o = PlotOptions {
        page_bytes: 4096,
        top_pages: 10,
        ..opts()
    };
    let svg = tmp("heat.svg");
    let s = page_heat(&mut source(&r.samples), &svg, &o).unwrap();
    assert_eq!(s.drawn, 10);
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let bars = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "rect")
        .filter(|n| {
            s.series.iter().any(|c| {
                let c = node_colour(*c);
                n.attribute("fill") == Some(&format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2))
            })
        })
        .count();
    assert_eq!(
        bars,
        10 + s.series.len(),
        "one segment per bar, plus legend swatches"
    );
}

#[test]
fn bad_outputs_are_named_errors() {
    let r = sim();
    let bad = tmp("map.jpg");
    let e = access_map(&mut source(&r.samples), &bad, &opts()).unwrap_err();
    assert_eq!(e.path, bad);
    assert!(
        e.to_string().contains("map.jpg") && e.what.contains(".png or .svg"),
        "{e}"
    );
    let e = node_traffic(&mut source(&r.samples), tmp("noext"), &opts()).unwrap_err();
    assert!(e.what.contains("extension"), "{e}");
    let unwritable = Path::new("/nonexistent-numalab-dir/plot.png");
    let e = page_heat(&mut source(&r.samples), unwritable, &opts()).unwrap_err();
    assert_eq!(e.path, unwritable);
    assert!(
        e.to_string().contains("/nonexistent-numalab-dir/plot.png"),
        "{e}"
    );
}

#[test]
fn pictures_carry_their_text_and_say_what_colour_means() {
    let r = sim();
    // PNG: the title above the chart, tick labels and axis names below it and the colour key
    // at the bottom are drawn (dark pixels in each band of rows)
    let png = tmp("text.png");
    access_map(&mut source(&r.samples), &png, &opts()).unwrap();
    let (w, h, px) = decode_png(&png);
    assert!(has_text(w, &px, 0..28), "a title");
    assert!(
        has_text(w, &px, h - 70..h - KEY_PX),
        "tick labels and the x axis name"
    );
    assert!(has_text(w, &px, h - KEY_PX..h), "the colour key");

    // SVG: the same words, readable; the samples' clock starts at an odd time since boot, as
    // perf's does
    let since_boot: Vec<AccessSample> = r
        .samples
        .iter()
        .map(|s| AccessSample {
            time_ns: s.time_ns + 123_456_789_017,
            ..*s
        })
        .collect();
    let svg = tmp("text.svg");
    access_map(&mut source(&since_boot), &svg, &opts()).unwrap();
    let (.., text) = svg_colours(&svg);
    assert!(
        text.contains("colour = node of the CPU that made the access"),
        "{text}"
    );
    let unit = ["(ns)", "(µs)", "(ms)", "(s)"]
        .into_iter()
        .find(|u| text.contains(&format!("time since the first sample {u}")));
    assert!(unit.is_some(), "a time axis with its unit: {text}");
    assert!(text.contains("2 MiB regions"), "{text}");
    // ticks: numbers on the time axis, not hex nanoseconds; region starts in hex
    let ticks: Vec<f64> = text.lines().filter_map(|l| l.parse::<f64>().ok()).collect();
    assert!(ticks.len() >= 4, "time ticks: {text}");
    // counted from the first sample, so the ticks start near zero whatever the clock
    assert!(ticks.iter().all(|t| *t >= 0.0), "{ticks:?}");
    assert!(
        ticks.iter().copied().fold(f64::INFINITY, f64::min)
            < ticks.iter().copied().fold(0.0, f64::max) / 2.0,
        "{ticks:?}"
    );
    // and round: every tick a multiple of the step between them (plotters' 1, 2, 5 × 10^k),
    // not round values of the clock since boot shifted by the first sample's time
    let mut sorted = ticks.clone();
    sorted.sort_by(f64::total_cmp);
    let step = sorted[1] - sorted[0];
    assert!(
        sorted
            .iter()
            .all(|t| ((t / step) - (t / step).round()).abs() < 1e-6),
        "time ticks are not round: {sorted:?}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("0x")),
        "region ticks: {text}"
    );

    let svg = tmp("text-traffic.svg");
    node_traffic(&mut source(&r.samples), &svg, &opts()).unwrap();
    let (.., text) = svg_colours(&svg);
    assert!(
        text.contains("line colour = node whose memory served the sample")
            && text.contains("DRAM samples per bin"),
        "{text}"
    );
    let svg = tmp("text-heat.svg");
    page_heat(&mut source(&r.samples), &svg, &opts()).unwrap();
    let (.., text) = svg_colours(&svg);
    assert!(text.contains("page rank (1 = most sampled)"), "{text}");
    // ranks as whole-number ticks (plotters picks 5, 10, ... for 32 bars)
    let ranks = text.lines().filter(|l| l.parse::<u32>().is_ok()).count();
    assert!(ranks >= 6, "rank and count ticks: {text}");
}

#[test]
fn few_samples_are_said_to_be_too_few_and_binned_coarsely() {
    let r = sim();
    let few: Vec<AccessSample> = r
        .samples
        .iter()
        .filter(|s| s.source.is_dram())
        .take(40)
        .cloned()
        .collect();
    assert_eq!(few.len(), 40);
    for name in ["few-map.svg", "few-traffic.svg", "few-heat.svg"] {
        let svg = tmp(name);
        let mut src = source(&few);
        match name {
            "few-map.svg" => access_map(&mut src, &svg, &opts()),
            "few-traffic.svg" => node_traffic(&mut src, &svg, &opts()),
            _ => page_heat(&mut src, &svg, &opts()),
        }
        .unwrap();
        let (.., text) = svg_colours(&svg);
        // the page heat's 32 pages hold fewer of them
        assert!(
            text.contains(" samples: too few to read much into)") && text.contains("(only "),
            "{name}: {text}"
        );
    }
    // automatic bins hold about ten samples each: 40 samples make at most 4 bins
    let o = PlotOptions {
        bin_ns: 0,
        ..opts()
    };
    let s = node_traffic(&mut source(&few), tmp("few-auto.svg"), &o).unwrap();
    assert!((2..=4).contains(&s.drawn), "{s:?}");
    // the whole run's samples are many: no note
    let svg = tmp("many-traffic.svg");
    node_traffic(&mut source(&r.samples), &svg, &o).unwrap();
    let (.., text) = svg_colours(&svg);
    assert!(!text.contains("too few"), "{text}");
}

#[test]
fn a_refused_picture_leaves_the_existing_file_and_no_temporary_one() {
    let r = sim();
    let dir = std::env::temp_dir().join(format!("numalab-plot-keep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("keep.png");
    std::fs::write(&out, b"keep").unwrap();
    let tiny = PlotOptions {
        width: 40,
        height: 30,
        ..opts()
    };
    let e = access_map(&mut source(&r.samples), &out, &tiny).unwrap_err();
    assert!(e.what.contains("too small"), "{e}");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep");
    // a complete picture replaces it, through a temporary file renamed into place
    access_map(&mut source(&r.samples), &out, &opts()).unwrap();
    let (w, h, _) = decode_png(&out);
    assert_eq!((w, h), (640, 400));
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["keep.png".to_string()]);
    std::fs::remove_dir_all(&dir).ok();
}
