//! `numalab analyze FILE`: a perf.data file or a numalab sample file (Arrow IPC stream, as
//! `numalab sim --samples-out` writes) through numalab-analyze's report.

use anyhow::{Context, Result};
use clap::Args;
use numalab_analyze::perf::{PerfOptions, PerfReader};
use numalab_analyze::{analyze, render_text, Options, SampleReader, SampleSource};
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct AnalyzeArgs {
    /// perf.data (perf mem / perf record -d / perf c2c) or a numalab .arrows sample file.
    pub file: PathBuf,
    /// Machine whose CPU → node map applies to a perf.data file without a topology section
    /// (a preset, .toml or hwloc .xml; default: the file's own, else this host's sysfs).
    #[arg(long, short = 'm')]
    pub machine: Option<String>,
    /// Hot page threshold, % of samples (policies.md §0).
    #[arg(long, default_value_t = 6.0)]
    pub hot_page_percent: f64,
    /// Pages, mappings and regions listed.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Write the report as JSON (`-`: to standard output, the text report then going to
    /// standard error).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also draw access-map, node-traffic and page-heat pictures into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot_dir: Option<PathBuf>,
    /// Picture format: svg or png (both with title, axis labels and a colour key).
    #[arg(long, default_value = "svg", value_parser = ["svg", "png"])]
    pub plot_format: String,
}

/// A reader for the file: perf.data or numalab's Arrow samples.
fn open(a: &AnalyzeArgs) -> Result<Box<dyn SampleSource>> {
    let path = a.file.to_string_lossy().into_owned();
    // a machine given is checked whatever the file: a typo is an error, not ignored
    let machine = a
        .machine
        .as_deref()
        .map(numalab_machine::load)
        .transpose()
        .context("--machine")?;
    Ok(if numalab_analyze::perf::is_perf_file(&path) {
        let topology = machine.map(|m| m.topology);
        Box::new(PerfReader::open(
            &path,
            PerfOptions {
                topology,
                ..Default::default()
            },
        )?)
    } else {
        if let Some(m) = &a.machine {
            eprintln!("note: --machine {m} not used: {path} is a numalab sample file, which carries its own topology");
        }
        Box::new(SampleReader::open(&path)?)
    })
}

pub fn run(a: AnalyzeArgs) -> Result<()> {
    crate::output::check_json_out(a.json.as_deref())?;
    if !(a.hot_page_percent > 0.0 && a.hot_page_percent <= 100.0) {
        anyhow::bail!(
            "--hot-page-percent {}: expected a share of the samples above 0 and at most 100 (default 6)",
            a.hot_page_percent
        );
    }
    let path = a.file.to_string_lossy().into_owned();
    if !a.file.exists() {
        anyhow::bail!("{path}: no such file");
    }
    // the pictures' folder is made (its parent must exist, as for every output file), but only
    // once the samples have been read, so a refused input leaves nothing behind
    if let Some(dir) = &a.plot_dir {
        if dir.exists() && !dir.is_dir() {
            anyhow::bail!("--plot-dir {}: exists and is not a folder", dir.display());
        }
        if !dir.exists() {
            crate::output::check_writable(Some(dir))
                .with_context(|| format!("--plot-dir {}", dir.display()))?;
        }
    }
    let mut source = open(&a)?;
    let opts = Options {
        hot_page_threshold_pct: a.hot_page_percent,
        top: a.top,
        ..Default::default()
    };
    let report = analyze(source.as_mut(), &opts)?;
    let json_stdout = crate::output::json_to_stdout(a.json.as_deref());
    crate::output::print_report(&render_text(&report), json_stdout);
    if let Some(p) = &a.json {
        crate::output::write_json_text(p, &serde_json::to_string_pretty(&report)?)?;
    }
    if let Some(dir) = &a.plot_dir {
        use numalab_analyze::plot;
        if !dir.exists() {
            std::fs::create_dir(dir).with_context(|| format!("--plot-dir {}", dir.display()))?;
        }
        let opts = plot::PlotOptions::default();
        type Draw = fn(
            &mut dyn SampleSource,
            &std::path::Path,
            &plot::PlotOptions,
        ) -> Result<plot::PlotSummary, numalab_analyze::Error>;
        let draws: [(&str, Draw); 3] = [
            ("access-map", |s, p, o| plot::access_map(s, p, o)),
            ("node-traffic", |s, p, o| plot::node_traffic(s, p, o)),
            ("page-heat", |s, p, o| plot::page_heat(s, p, o)),
        ];
        // Each picture streams the file once more: memory stays bounded whatever its size.
        for (name, draw) in draws {
            let out = dir.join(format!("{name}.{}", a.plot_format));
            draw(open(&a)?.as_mut(), &out, &opts)?;
            eprintln!("wrote {}", out.display());
        }
    }
    Ok(())
}
