//! `numalab convert IN OUT [--to perf|arrow]`: sample files between numalab's Arrow IPC
//! streams and perf.data (read by `perf script`, `perf mem report`), either way.

use anyhow::{bail, Result};
use clap::Args;
use numalab_analyze::format::WriterOptions;
use numalab_analyze::perf::{is_perf_file, PerfOptions, PerfReader};
use numalab_analyze::{perf_write, SampleReader, SampleSource, SampleWriter};
use std::path::{Path, PathBuf};

#[derive(Args, Clone, Debug)]
pub struct ConvertArgs {
    /// perf.data or numalab .arrows sample file.
    pub input: PathBuf,
    /// Output file; its format follows the extension (.data: perf.data, .arrows: Arrow)
    /// unless --to says.
    pub output: PathBuf,
    /// Output format.
    #[arg(long, value_parser = ["perf", "arrow"])]
    pub to: Option<String>,
    /// Machine whose CPU → node map applies to a perf.data input without a topology section
    /// (a preset, .toml or hwloc .xml).
    #[arg(long, short = 'm')]
    pub machine: Option<String>,
}

/// The output format: `--to`, else by extension.
pub fn output_format(out: &Path, to: Option<&str>) -> Result<&'static str> {
    match to {
        Some("perf") => return Ok("perf"),
        Some("arrow") => return Ok("arrow"),
        Some(other) => bail!("--to {other}: expected perf or arrow"),
        None => {}
    }
    match out.extension().and_then(|e| e.to_str()) {
        Some("data") => Ok("perf"),
        Some("arrows") | Some("arrow") => Ok("arrow"),
        _ => bail!(
            "{}: cannot tell the output format from the name (use .data for perf.data, \
             .arrows for Arrow, or --to perf|arrow)",
            out.display()
        ),
    }
}

fn open(a: &ConvertArgs) -> Result<Box<dyn SampleSource>> {
    Ok(if is_perf_file(&a.input) {
        let topology = match &a.machine {
            Some(m) => Some(numalab_machine::load(m)?.topology),
            None => None,
        };
        Box::new(PerfReader::open(
            &a.input,
            PerfOptions {
                topology,
                ..Default::default()
            },
        )?)
    } else {
        Box::new(SampleReader::open(&a.input)?)
    })
}

pub fn run(a: ConvertArgs) -> Result<()> {
    let fmt = output_format(&a.output, a.to.as_deref())?;
    crate::output::check_writable(Some(&a.output))?;
    if !a.input.exists() {
        bail!("{}: no such file", a.input.display());
    }
    if a.input.canonicalize().ok() == a.output.canonicalize().ok() {
        bail!("{}: input and output are the same file", a.output.display());
    }
    let from_perf = is_perf_file(&a.input);
    let src = open(&a)?;
    // written beside the output and renamed into place once complete: a corrupt input
    // leaves no partial file and an existing output as it was; a truncated one gives its
    // complete records, said so
    let (samples, extra, truncated) =
        crate::output::with_temp(&a.output, |out| convert_into(&a, src, from_perf, fmt, out))?;
    if let Some(t) = truncated {
        eprintln!("note: {} is {t}", a.input.display());
    }
    eprintln!(
        "wrote {} ({} samples, {})",
        a.output.display(),
        samples,
        extra
    );
    Ok(())
}

/// Convert into `out`: (samples written, what else the summary says, the input's truncation).
fn convert_into(
    a: &ConvertArgs,
    mut src: Box<dyn SampleSource>,
    from_perf: bool,
    fmt: &str,
    out: &Path,
) -> Result<(u64, String, Option<String>)> {
    let (n, extra) = if fmt == "perf" {
        let s = perf_write::export(src.as_mut(), out)?;
        let mut extra = format!("{} threads, {} mappings", s.threads, s.mappings);
        if !s.page_nodes {
            extra.push_str(", page nodes not written (none known, or real phys_addr)");
        }
        (s.samples, extra)
    } else {
        // The Arrow file keeps mappings and thread names in its metadata, written first: a
        // perf.data input hands them out among the samples, so collect them in a first pass.
        let mut meta = src.meta().clone();
        if from_perf {
            while let Some(b) = src.next_batch()? {
                meta.mappings.extend(b.mappings);
                meta.thread_names.extend(b.thread_names);
            }
            src = open(a)?;
        }
        let mut w = SampleWriter::create(
            out,
            &meta,
            WriterOptions {
                perf_columns: from_perf,
                ..Default::default()
            },
        )?;
        while let Some(b) = src.next_batch()? {
            for r in &b.records {
                w.push(r)?;
            }
        }
        let n = w.rows();
        w.finish()?;
        (n, format!("{} mappings", meta.mappings.len()))
    };
    Ok((n, extra, src.truncated()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_from_extension_or_flag() {
        assert_eq!(output_format(Path::new("a.data"), None).unwrap(), "perf");
        assert_eq!(output_format(Path::new("a.arrows"), None).unwrap(), "arrow");
        assert_eq!(
            output_format(Path::new("a.bin"), Some("perf")).unwrap(),
            "perf"
        );
        let e = output_format(Path::new("a.bin"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a.bin") && e.contains("--to"), "{e}");
    }
}
