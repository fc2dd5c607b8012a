//! Studies on a Slurm cluster (docs/study.md, "On a Slurm cluster"): the runs not yet done are
//! split into shards, one per task of a Slurm job array; each task runs
//! `numalab study shard DIR --index $SLURM_ARRAY_TASK_ID --of N` on its node, writing each
//! run's record and its shard's Parquet part into the study folder (which the nodes share);
//! `numalab study collect DIR` then writes the study's tables. A rerun submits only the runs
//! without a successful record, so failed or cancelled tasks are resubmitted by rerunning.
//!
//! sbatch is Slurm's own client, run as a program: numalab neither talks to slurmctld itself
//! nor depends on Slurm's libraries.

use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// How to submit.
#[derive(Clone, Debug, Default)]
pub struct SlurmOptions {
    /// Array tasks (default: one per run to do, at most 64).
    pub shards: Option<usize>,
    /// Extra sbatch options, passed as given (`--partition=...`, `--time=...`, `--cpus-per-task=...`).
    pub sbatch_args: Vec<String>,
    /// Wait for the array to end (sbatch --wait).
    pub wait: bool,
}

/// Default shards: one run per task up to this many tasks.
pub const MAX_DEFAULT_SHARDS: usize = 64;

/// A submitted array.
#[derive(Clone, Debug)]
pub struct Submission {
    pub job_id: String,
    pub shards: usize,
    /// Where each task's standard output and error go: `DIR/slurm/JOB_TASK.out`.
    pub log_dir: PathBuf,
    /// With `wait`: whether every task ended successfully (sbatch --wait's exit status).
    pub all_succeeded: Option<bool>,
}

/// The shell script each array task runs (`#SBATCH` lines are not used: the options are on
/// sbatch's command line, so a user's `sbatch_args` override nothing silently).
fn job_script(numalab: &Path, out: &Path, shards: usize) -> String {
    let q = |p: &Path| shlex::try_quote(&p.to_string_lossy()).map(|s| s.into_owned());
    format!(
        "#!/bin/sh\n# written by numalab study run --backend slurm: one task of the study's job array\nexec {} study shard {} --index \"$SLURM_ARRAY_TASK_ID\" --of {shards}\n",
        q(numalab).unwrap_or_default(),
        q(out).unwrap_or_default()
    )
}

/// Submit the `pending` runs of the study in `out` (its `study.toml` already written) as one
/// job array of `numalab study shard` tasks.
pub fn submit(
    numalab: &Path,
    out: &Path,
    pending: usize,
    opts: &SlurmOptions,
) -> Result<Submission> {
    if pending == 0 {
        bail!("nothing to submit: every run of the study has a successful record");
    }
    if opts.shards == Some(0) {
        bail!("--shards 0: expected at least one array task");
    }
    // never more tasks than runs: a task without a run would only start and stop
    let shards = opts.shards.unwrap_or(MAX_DEFAULT_SHARDS).min(pending);
    let out = std::path::absolute(out)
        .with_context(|| format!("cannot resolve the study folder {}", out.display()))?;
    let numalab = std::path::absolute(numalab)?;
    let log_dir = out.join("slurm");
    std::fs::create_dir_all(&log_dir)
        .with_context(|| format!("cannot create {}", log_dir.display()))?;
    let script = log_dir.join("task.sh");
    numalab_core::atomic_file::write_atomic(
        &script,
        job_script(&numalab, &out, shards).as_bytes(),
    )?;
    let mut cmd = Command::new("sbatch");
    cmd.arg("--parsable")
        .arg(format!("--array=0-{}", shards - 1))
        .arg("--job-name=numalab-study")
        .arg(format!("--output={}/%A_%a.out", log_dir.display()))
        .arg(format!("--chdir={}", out.display()));
    if opts.wait {
        cmd.arg("--wait");
    }
    cmd.args(&opts.sbatch_args).arg(&script);
    let o = cmd.output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow!("sbatch not found: the Slurm backend needs Slurm's client on this machine (Debian: apt-get install slurm-client), or run the study with the local backend")
        } else {
            anyhow!("cannot run sbatch: {e}")
        }
    })?;
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    // --parsable prints "JOBID" or "JOBID;CLUSTER" when the submission is accepted
    let job_id = stdout
        .lines()
        .next()
        .map(|l| l.split(';').next().unwrap_or("").trim().to_string())
        .filter(|id| !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()));
    let Some(job_id) = job_id else {
        bail!(
            "sbatch refused the study's job array ({}): {}",
            o.status,
            stderr.trim()
        );
    };
    Ok(Submission {
        job_id,
        shards,
        log_dir,
        all_succeeded: opts.wait.then_some(o.status.success()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_script_quotes_its_paths_and_takes_the_array_index() {
        let s = job_script(
            Path::new("/opt/num lab/numalab"),
            Path::new("/shared/it's"),
            4,
        );
        assert!(s.starts_with("#!/bin/sh\n"), "{s}");
        assert!(
            s.contains("exec '/opt/num lab/numalab' study shard \"/shared/it's\" --index \"$SLURM_ARRAY_TASK_ID\" --of 4")
                || s.contains("exec '/opt/num lab/numalab' study shard '/shared/it'\\''s' --index \"$SLURM_ARRAY_TASK_ID\" --of 4"),
            "{s}"
        );
    }
}
