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
    #[arg(long, default_value_t = 10, value_parser = crate::numbers::count::<usize>("entries per list", 1..), allow_negative_numbers = true)]
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
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// The bytes this process has read so far: /proc/self/io's `rchar` (None where the kernel
/// does not keep it).
fn bytes_read() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|v| v.trim().parse().ok())
}

/// A sample source that moves a progress bar as its batches are read: over the file's bytes,
/// with the share done and the time left. The readers (crates/analyze) have no progress hook
/// and keep their file offsets to themselves, so the bytes this process has read since the
/// file was opened stand for the bytes of the file read: nothing else of size is read while
/// the samples stream. Where the kernel does not count them, or the file's size is unknown,
/// the bar is a spinner counting samples. Either appears only once reading takes a while.
struct Reading<'a> {
    inner: &'a mut dyn SampleSource,
    slow: crate::output::SlowBar,
    /// `rchar` when the file was opened.
    read_at_open: Option<u64>,
    samples: u64,
}

impl<'a> Reading<'a> {
    /// `read_at_open`: [`bytes_read`] taken before the file was opened.
    fn new(
        inner: &'a mut dyn SampleSource,
        what: &str,
        file_bytes: u64,
        read_at_open: Option<u64>,
        quiet: bool,
    ) -> Reading<'a> {
        let read_at_open = read_at_open.filter(|_| file_bytes > 0);
        let bar = if read_at_open.is_some() {
            crate::output::bytes_bar(what, file_bytes)
        } else {
            let bar = crate::output::spinner(
                "{spinner} {prefix}: {human_pos} samples [{elapsed_precise}]",
            );
            bar.set_prefix(what.to_string());
            bar
        };
        Reading {
            inner,
            slow: crate::output::SlowBar::new(bar, quiet),
            read_at_open,
            samples: 0,
        }
    }

    fn advance(&mut self, samples: usize) {
        self.samples += samples as u64;
        if self.slow.quiet() {
            // no bar: no need to read /proc/self/io for every batch
            return;
        }
        let pos = match (self.read_at_open, bytes_read()) {
            // the side files (placement) are read too: the bar stops at its end
            (Some(at_open), Some(now)) => now
                .saturating_sub(at_open)
                .min(self.slow.bar.length().unwrap_or(0)),
            _ => self.samples,
        };
        self.slow.bar.set_position(pos);
        self.slow.poke();
    }

    fn finish(self) {
        self.slow.bar.finish_and_clear();
    }
}

impl SampleSource for Reading<'_> {
    fn meta(&self) -> &numalab_analyze::FileMeta {
        self.inner.meta()
    }

    fn next_batch(&mut self) -> Result<Option<numalab_analyze::Batch>, numalab_analyze::Error> {
        let b = self.inner.next_batch()?;
        self.advance(b.as_ref().map_or(0, |b| b.records.len()));
        Ok(b)
    }

    fn truncated(&self) -> Option<String> {
        self.inner.truncated()
    }

    fn next_rows(
        &mut self,
        rows: &mut Vec<numalab_analyze::Row>,
        mappings: &mut Vec<numalab_analyze::Mapping>,
    ) -> Result<bool, numalab_analyze::Error> {
        let before = rows.len();
        let more = self.inner.next_rows(rows, mappings)?;
        self.advance(rows.len() - before);
        Ok(more)
    }
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
    let file_bytes = std::fs::metadata(&a.file).map_or(0, |m| m.len());
    let read_at_open = bytes_read();
    let mut source = open(&a)?;
    let opts = Options {
        hot_page_threshold_pct: a.hot_page_percent,
        top: a.top,
        ..Default::default()
    };
    let mut reading = Reading::new(
        source.as_mut(),
        &format!("reading {path}"),
        file_bytes,
        read_at_open,
        a.quiet,
    );
    let report = analyze(&mut reading, &opts);
    reading.finish();
    let report = report?;
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
            let read_at_open = bytes_read();
            let mut source = open(&a)?;
            let mut reading = Reading::new(
                source.as_mut(),
                &format!("drawing {name} from {path}"),
                file_bytes,
                read_at_open,
                a.quiet,
            );
            let drawn = draw(&mut reading, &out, &opts);
            reading.finish();
            drawn?;
            eprintln!("wrote {}", out.display());
        }
    }
    Ok(())
}
