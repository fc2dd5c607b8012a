//! `numalab calibrate`: measure this host and write a machine file (numalab-calibrate does the
//! work; docs/calibrate.md).

use anyhow::{bail, Context, Result};
use clap::Args;
use numalab_calibrate::{fit, write, Options, Progress, MIB};
use numalab_machine::Machine;
use std::path::{Path, PathBuf};

#[derive(Args, Clone)]
pub struct CalibrateArgs {
    /// Write the calibrated machine file here (.toml): the host's topology file as `base`,
    /// and every measured figure with how it was measured, for `numalab sim --machine FILE`.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// The host's topology file to start from, one `numalab topo --machine-file` wrote on this
    /// host (its nodes and CPUs must be this host's). Default: that file is written beside
    /// FILE as STEM-topology.toml.
    #[arg(long, value_name = "FILE")]
    base: Option<PathBuf>,
    /// Rough figures in seconds (small buffers, few loads, 3 load levels): to check that
    /// calibration works here, not to simulate with.
    #[arg(long)]
    quick: bool,
    /// Size of each measurement buffer, MiB (two per node at a time). Default: 4 × the total
    /// LLC and at least 256 (--quick: 2 ×, within 16-256).
    #[arg(long, value_name = "MIB", value_parser = crate::numbers::count::<u64>("MiB", 1..=1 << 20), allow_negative_numbers = true)]
    buffer_mib: Option<u64>,
    /// Also write every measurement as JSON to FILE (`-`: standard output, the summary then
    /// goes to standard error).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

struct Bar(indicatif::ProgressBar);

impl Progress for Bar {
    fn total(&mut self, steps: u64) {
        self.0.set_length(steps);
    }
    fn step(&mut self, what: &str) {
        self.0.inc(1);
        self.0.set_message(what.to_string());
    }
}

/// `base`'s path as the output file will name it: relative to the output's folder where it
/// lies below it, else absolute.
fn base_reference(base: &Path, output: &Path) -> Result<String> {
    let base = base
        .canonicalize()
        .with_context(|| format!("--base {}", base.display()))?;
    let dir = output
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .canonicalize()
        .with_context(|| format!("the folder of {}", output.display()))?;
    Ok(base
        .strip_prefix(&dir)
        .unwrap_or(&base)
        .display()
        .to_string())
}

/// Refuse a base file that does not describe this host: the measurements are per node and
/// CPU, and would land on the wrong ones.
fn check_same_host(base: &Machine, host: &Machine, shown: &str) -> Result<()> {
    let cpus = |m: &Machine| -> Vec<Vec<u32>> {
        m.topology
            .nodes
            .iter()
            .map(|n| n.cpus.iter().map(|c| c.0).collect())
            .collect()
    };
    if cpus(base) != cpus(host) {
        bail!(
            "--base {shown} describes {} node(s) with CPUs {:?}, but this host has {} with {:?}: give the file `numalab topo --machine-file` wrote on this host, or leave --base out",
            base.topology.num_nodes(),
            cpus(base),
            host.topology.num_nodes(),
            cpus(host)
        );
    }
    Ok(())
}

pub fn run(a: CalibrateArgs) -> Result<()> {
    let shown = a.output.display().to_string();
    if a.output.extension().and_then(|e| e.to_str()) != Some("toml") {
        bail!("-o {shown}: the name must end in .toml, as `numalab sim --machine` takes machine files by their extension");
    }
    crate::output::check_writable(Some(&a.output))?;
    crate::output::check_json_out(a.json.as_deref())?;
    let stem = a
        .output
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "host-calibrated".into());
    let host = numalab_place::machine_file::machine_from_host(&numalab_linux::SysRoot::host())
        .context("cannot read this host's topology (calibration runs on a Linux host with /sys)")?;
    let (base, base_path, write_base) = match &a.base {
        Some(p) => {
            let m =
                Machine::from_toml_file(p).with_context(|| format!("--base {}", p.display()))?;
            check_same_host(&m, &host, &p.display().to_string())?;
            (m, p.clone(), false)
        }
        None => {
            let p = a.output.with_file_name(format!("{stem}-topology.toml"));
            (host.clone(), p, true)
        }
    };
    let llc: u64 = host
        .nodes
        .iter()
        .filter_map(|n| n.llc.as_ref())
        .map(|c| c.bytes)
        .sum();
    let mut opts = if a.quick {
        Options::quick(llc)
    } else {
        Options::full(llc)
    };
    if let Some(mib) = a.buffer_mib {
        opts.buffer_bytes = mib as usize * MIB;
    }
    let json_stdout = crate::output::json_to_stdout(a.json.as_deref());
    let mut progress = Bar(crate::output::count_bar("calibrating", "steps", false));
    let measured = numalab_calibrate::measure(&host, &opts, &mut progress);
    progress.0.finish_and_clear();
    let measured = measured.context("calibration failed; nothing was written")?;
    let fitted = fit::fit(&base, &measured).map_err(anyhow::Error::msg)?;

    let base_existed = base_path.exists();
    if write_base {
        crate::output::write_atomic(
            &base_path,
            numalab_place::machine_file::machine_file_text(&host, &base_path.display().to_string())
                .as_bytes(),
        )
        .with_context(|| format!("writing the host's topology to {}", base_path.display()))?;
    }
    let base_ref = base_reference(&base_path, &a.output)?;
    let text = write::override_text(&base_ref, &stem, &base, &measured, &fitted);
    // The file is loaded back from its temporary name before it replaces anything: what is
    // written is a machine `numalab sim` accepts.
    let calibrated = crate::output::with_temp(&a.output, |tmp| {
        std::fs::write(tmp, &text).with_context(|| format!("writing {shown}"))?;
        Machine::from_toml_file(tmp).with_context(|| {
            format!("the calibrated machine does not load (a bug; the text was:\n{text})")
        })
    });
    let calibrated = match calibrated {
        Ok(m) => m,
        Err(e) => {
            // the topology file written for this output goes too; one from before stays
            if write_base && !base_existed {
                let _ = std::fs::remove_file(&base_path);
            }
            return Err(e);
        }
    };
    let mut report = write::summary(&measured, &calibrated, &fitted);
    report += &format!(
        "\nwrote machine '{}' to {shown}{}; simulate it with: numalab sim --machine {shown} --workload ...\n",
        calibrated.id,
        if write_base {
            format!(" (its base, the host's topology: {})", base_path.display())
        } else {
            String::new()
        }
    );
    crate::output::print_report(&report, json_stdout);
    if let Some(p) = &a.json {
        crate::output::write_json_text(p, &serde_json::to_string_pretty(&measured)?)?;
    }
    Ok(())
}
