//! What a study's results were produced on: numalab's version, the host's kernel, its THP and
//! NUMA balancing settings, its NUMA topology and CPU model. Simulated results do not depend
//! on the host, but a study that later adds real runs (and a reader comparing host seconds)
//! needs to know; a value the host does not expose is null, never guessed.

use serde::Serialize;
use std::path::Path;

#[derive(Clone, Debug, Serialize)]
pub struct Environment {
    pub numalab_version: &'static str,
    /// The git commit numalab was built from, when the build saw one (`NUMALAB_COMMIT`).
    pub numalab_commit: Option<&'static str>,
    pub hostname: Option<String>,
    pub kernel: Option<String>,
    /// `/sys/kernel/mm/transparent_hugepage/enabled`'s selected mode.
    pub thp_enabled: Option<String>,
    /// `/proc/sys/kernel/numa_balancing`.
    pub numa_balancing: Option<String>,
    pub cpu_model: Option<String>,
    pub host_cpus: usize,
    /// The host's NUMA nodes: id, CPU list, memory.
    pub nodes: Vec<HostNode>,
    /// Seconds since the Unix epoch when the study's run began.
    pub started_unix_s: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct HostNode {
    pub node: u32,
    pub cpus: String,
    pub memory_kib: Option<u64>,
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The bracketed word of a sysfs choice (`always [madvise] never` → `madvise`).
fn selected(choice: &str) -> Option<String> {
    let open = choice.find('[')?;
    let close = choice[open..].find(']')? + open;
    Some(choice[open + 1..close].to_string())
}

fn nodes(sys: &Path) -> Vec<HostNode> {
    let Ok(dir) = std::fs::read_dir(sys.join("devices/system/node")) else {
        return Vec::new();
    };
    let mut out: Vec<HostNode> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let node: u32 = name.strip_prefix("node")?.parse().ok()?;
            let cpus = read_trim(e.path().join("cpulist")).unwrap_or_default();
            // "Node 0 MemTotal:       16314180 kB"
            let memory_kib = read_trim(e.path().join("meminfo")).and_then(|m| {
                m.lines()
                    .find(|l| l.contains("MemTotal:"))
                    .and_then(|l| l.split_whitespace().rev().nth(1)?.parse().ok())
            });
            Some(HostNode {
                node,
                cpus,
                memory_kib,
            })
        })
        .collect();
    out.sort_by_key(|n| n.node);
    out
}

impl Environment {
    /// Read the host's state now.
    pub fn snapshot() -> Environment {
        let sys = Path::new("/sys");
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        });
        Environment {
            numalab_version: env!("CARGO_PKG_VERSION"),
            numalab_commit: option_env!("NUMALAB_COMMIT"),
            hostname: read_trim("/proc/sys/kernel/hostname"),
            kernel: read_trim("/proc/sys/kernel/osrelease"),
            thp_enabled: read_trim(sys.join("kernel/mm/transparent_hugepage/enabled"))
                .and_then(|s| selected(&s)),
            numa_balancing: read_trim("/proc/sys/kernel/numa_balancing"),
            cpu_model,
            host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            nodes: nodes(sys),
            started_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_selected_mode_is_the_bracketed_word() {
        assert_eq!(
            super::selected("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(super::selected("always madvise never"), None);
    }
}
