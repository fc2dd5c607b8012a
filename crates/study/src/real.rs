//! Real runs (`kind = "real"`, docs/study.md "Real runs"): a command run on this host under
//! `numalab run`'s placement options, with the kernel's NUMA balancing and THP mode set for
//! its configuration and restored afterwards, timed as hyperfine times a command (warm-ups,
//! then timed repeats; mean, standard deviation, median, range, outliers).

use crate::grid::Config;
use crate::table::RealMetrics;
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// The modes of /sys/kernel/mm/transparent_hugepage/enabled.
pub const THP_MODES: &[&str] = &["never", "madvise", "always"];

pub const NUMA_BALANCING_PATH: &str = "/proc/sys/kernel/numa_balancing";
pub const THP_ENABLED_PATH: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// `numa_balancing` as a study writes it: 0/1 or off/on.
pub fn parse_balancing(v: &str) -> Option<bool> {
    match v {
        "0" | "off" => Some(false),
        "1" | "on" => Some(true),
        _ => None,
    }
}

/// What one configuration runs.
#[derive(Clone, Debug, PartialEq)]
pub struct RealSpec {
    pub command: Vec<String>,
    /// `numalab run`'s options (`--cpunodebind=0 --membind=0`, `--interleave=all`, ...).
    pub run_options: Vec<String>,
    pub numa_balancing: Option<bool>,
    pub thp: Option<String>,
}

impl RealSpec {
    pub fn of(c: &Config) -> Result<RealSpec> {
        let split = |key: &str| -> Result<Vec<String>> {
            let v = c.setting(key).unwrap_or_default();
            shlex::split(v).ok_or_else(|| anyhow!("{key} = '{v}' has an unclosed quote"))
        };
        let command = split("command")?;
        if command.is_empty() {
            bail!("configuration '{}' has no command", c.label);
        }
        Ok(RealSpec {
            command,
            run_options: split("run")?,
            numa_balancing: c.setting("numa_balancing").and_then(parse_balancing),
            thp: c.setting("thp").map(str::to_string),
        })
    }
}

/// The kernel settings a configuration changed, restored (in reverse order) when dropped: after
/// its runs, and also when they fail, panic or are interrupted.
pub struct KernelSettings {
    restore: Vec<(PathBuf, String)>,
}

/// The selected value of a sysfs/procfs setting: `always [madvise] never` → `madvise`.
pub fn current_value(text: &str) -> String {
    let t = text.trim();
    match (t.find('['), t.find(']')) {
        (Some(a), Some(b)) if a < b => t[a + 1..b].to_string(),
        _ => t.to_string(),
    }
}

impl KernelSettings {
    /// Set what `spec` asks for; on a failure, what was already set is put back.
    pub fn apply(spec: &RealSpec) -> Result<KernelSettings> {
        let mut wanted: Vec<(&str, String)> = Vec::new();
        if let Some(on) = spec.numa_balancing {
            wanted.push((NUMA_BALANCING_PATH, if on { "1" } else { "0" }.to_string()));
        }
        if let Some(mode) = &spec.thp {
            wanted.push((THP_ENABLED_PATH, mode.clone()));
        }
        Self::apply_to(&wanted)
    }

    fn apply_to(wanted: &[(&str, String)]) -> Result<KernelSettings> {
        let mut applied = KernelSettings {
            restore: Vec::new(),
        };
        for (path, value) in wanted {
            let path = Path::new(path);
            let old = std::fs::read_to_string(path).with_context(|| {
                format!(
                    "cannot read {} (is this Linux with that setting?)",
                    path.display()
                )
            })?;
            let old = current_value(&old);
            if old == *value {
                continue;
            }
            std::fs::write(path, value).with_context(|| {
                format!(
                    "cannot set {} to {value} (needs root): nothing was run",
                    path.display()
                )
            })?;
            applied.restore.push((path.to_path_buf(), old));
        }
        Ok(applied)
    }

    /// Put the settings back now, reporting a failure (dropping does the same, printing it).
    pub fn restore(mut self) -> Result<()> {
        self.restore_all()
    }

    fn restore_all(&mut self) -> Result<()> {
        let mut failed = Vec::new();
        while let Some((path, old)) = self.restore.pop() {
            if let Err(e) = std::fs::write(&path, &old) {
                failed.push(format!("{} (was {old}): {e}", path.display()));
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(anyhow!("could not restore {}", failed.join("; ")))
        }
    }
}

impl Drop for KernelSettings {
    fn drop(&mut self) {
        if let Err(e) = self.restore_all() {
            eprintln!("numalab: {e:#}");
        }
    }
}

/// Set once SIGINT or SIGTERM arrived: the study stops after the run in progress (which the
/// signal, sent to the whole foreground process group, usually ends too), restores the kernel
/// settings and reports what finished.
pub fn interrupted() -> &'static Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // registering can only fail for signals that may not be caught; these two may be
            let _ = signal_hook::flag::register(sig, flag.clone());
        }
        flag
    })
}

pub fn was_interrupted() -> bool {
    interrupted().load(Ordering::Relaxed)
}

/// CPU time of the reaped children so far (user, system), ms.
fn children_cpu_ms() -> (f64, f64) {
    // SAFETY: getrusage fills the struct it is given; RUSAGE_CHILDREN is always valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    (ms(ru.ru_utime), ms(ru.ru_stime))
}

/// Run `spec` once under `numalab run` (the binary `numalab`) and time it. The command's
/// standard output is discarded (as hyperfine does); a failure names the exit status and the
/// last line the command wrote to standard error.
pub fn run_once(numalab: &Path, spec: &RealSpec) -> Result<RealMetrics> {
    let (u0, s0) = children_cpu_ms();
    let start = Instant::now();
    let out = Command::new(numalab)
        .arg("run")
        .args(&spec.run_options)
        .arg("--")
        .args(&spec.command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot start {}", numalab.display()))?;
    let wall_ms = start.elapsed().as_secs_f64() * 1e3;
    let (u1, s1) = children_cpu_ms();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!(
            "'{}' ended with {}{}",
            spec.command.join(" "),
            out.status,
            if last.is_empty() {
                String::new()
            } else {
                format!(": {last}")
            }
        );
    }
    Ok(RealMetrics {
        wall_ms,
        user_ms: u1 - u0,
        sys_ms: s1 - s0,
    })
}

/// Statistics of a configuration's timed runs, as hyperfine reports them.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1); 0 for one run.
    pub sd: f64,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Runs whose modified Z-score `(x − median) / MAD` exceeds 14.826 (ten standard
    /// deviations by the MAD's estimate: hyperfine's threshold, after Iglewicz and Hoaglin).
    pub outliers: usize,
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// Statistics of `xs`; None when empty.
pub fn stats(xs: &[f64]) -> Option<Stats> {
    if xs.is_empty() {
        return None;
    }
    let n = xs.len();
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = xs.iter().sum::<f64>() / n as f64;
    let sd = if n > 1 {
        (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    let med = median(&sorted);
    let mut dev: Vec<f64> = xs.iter().map(|x| (x - med).abs()).collect();
    dev.sort_by(f64::total_cmp);
    // a MAD of 0 (most runs equal) still flags the ones that differ
    let mad = median(&dev).max(f64::EPSILON);
    let outliers = xs
        .iter()
        .filter(|&&x| ((x - med) / mad).abs() > 14.826)
        .count();
    Some(Stats {
        n,
        mean,
        sd,
        median: med,
        min: sorted[0],
        max: sorted[n - 1],
        outliers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_and_outliers_as_hyperfine_counts_them() {
        let s = stats(&[10.0, 12.0, 11.0, 13.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (4, 11.5, 10.0, 13.0));
        assert!((s.mean - 11.5).abs() < 1e-12);
        assert!((s.sd - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(s.outliers, 0);
        assert_eq!(stats(&[0.5, 0.30, 0.29, 0.31, 0.30]).unwrap().outliers, 1);
        assert_eq!(stats(&[10.0, 10.0, 10.0, 100.0]).unwrap().outliers, 1);
        assert_eq!(stats(&[50.0]).unwrap().sd, 0.0);
        assert!(stats(&[]).is_none());
    }

    #[test]
    fn the_selected_mode_is_the_bracketed_one() {
        assert_eq!(current_value("always [madvise] never\n"), "madvise");
        assert_eq!(current_value("1\n"), "1");
        assert_eq!(parse_balancing("on"), Some(true));
        assert_eq!(parse_balancing("2"), None);
    }

    #[test]
    fn settings_are_put_back_when_dropped_and_a_failed_write_changes_nothing() {
        let dir = std::env::temp_dir().join(format!("numalab-real-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("numa_balancing");
        let b = dir.join("enabled");
        std::fs::write(&a, "0\n").unwrap();
        std::fs::write(&b, "always [madvise] never\n").unwrap();
        let wanted = [
            (a.to_str().unwrap(), "1".to_string()),
            (b.to_str().unwrap(), "never".to_string()),
        ];
        {
            let _s = KernelSettings::apply_to(&wanted).unwrap();
            assert_eq!(std::fs::read_to_string(&a).unwrap(), "1");
            assert_eq!(std::fs::read_to_string(&b).unwrap(), "never");
        }
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "0");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "madvise");
        // the second setting cannot be read: the first is put back before the error returns
        let missing = dir.join("missing");
        let wanted = [
            (a.to_str().unwrap(), "1".to_string()),
            (missing.to_str().unwrap(), "x".to_string()),
        ];
        let e = KernelSettings::apply_to(&wanted).err().unwrap();
        assert!(format!("{e:#}").contains("missing"), "{e:#}");
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "0");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
