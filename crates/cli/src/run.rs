//! `numalab run [OPTIONS] -- CMD`: numactl's options, plus --remote-percent, --thp and
//! --next-touch. Planning and execution live in numalab-place; this file maps arguments.

use anyhow::{bail, Result};
use clap::Args;
use numalab_linux::sysroot::SysRoot;
use numalab_place::launch::RunOptions;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
#[command(
    after_help = "NODES: all, 0-3,5, !1 (all but 1), +0-1 (relative to the cpuset). CPUS: the same syntax for CPU numbers.\nExamples:\n  numalab run --interleave=all -- ./app\n  numalab run --cpunodebind=0 --remote-percent=40:1-3 -- ./app\n  numalab run --membind=1 --balancing -- ./app"
)]
pub struct RunArgs {
    /// Interleave memory page by page over NODES (MPOL_INTERLEAVE).
    #[arg(short = 'i', long, value_name = "NODES")]
    pub interleave: Option<String>,
    /// Allocate only from NODES (MPOL_BIND).
    #[arg(short = 'm', long, value_name = "NODES")]
    pub membind: Option<String>,
    /// Prefer NODE, fall back to others (MPOL_PREFERRED).
    #[arg(short = 'p', long, value_name = "NODE")]
    pub preferred: Option<String>,
    /// Prefer the nearest of NODES (MPOL_PREFERRED_MANY, Linux 5.15+).
    #[arg(short = 'P', long, value_name = "NODES")]
    pub preferred_many: Option<String>,
    /// Interleave by the system's weights over NODES (MPOL_WEIGHTED_INTERLEAVE, Linux 6.9+).
    #[arg(short = 'w', long, value_name = "NODES")]
    pub weighted_interleave: Option<String>,
    /// Allocate on the node of the CPU that touches first (MPOL_LOCAL).
    #[arg(short = 'l', long)]
    pub localalloc: bool,
    /// Run on the CPUs of NODES (also -c / --cpubind, numactl's old name).
    #[arg(
        short = 'N',
        long,
        value_name = "NODES",
        short_alias = 'c',
        alias = "cpubind"
    )]
    pub cpunodebind: Option<String>,
    /// Run on CPUS (with --cpunodebind too, the later of the two applies, as in numactl).
    #[arg(short = 'C', long, value_name = "CPUS")]
    pub physcpubind: Option<String>,
    /// Let automatic NUMA balancing move pages within --membind's nodes (MPOL_F_NUMA_BALANCING).
    #[arg(short = 'b', long)]
    pub balancing: bool,
    /// Keep P % of the pages on remote NODES (default: every other node), the rest local.
    #[arg(long, value_name = "P[:NODES]")]
    pub remote_percent: Option<String>,
    /// A file holding P, re-read every period: write a new P to move only the difference.
    /// (Uses the placement thread even where weighted interleave exists.)
    #[arg(long, value_name = "FILE")]
    pub remote_percent_control: Option<PathBuf>,
    /// How often the --remote-percent placement thread re-checks pages, ms.
    #[arg(long, default_value_t = 200, value_name = "MS")]
    pub placement_period_ms: u64,
    /// Transparent huge pages for the child: never (per process) or the system's mode.
    #[arg(long, value_name = "never|madvise|always")]
    pub thp: Option<String>,
    /// Migrate-on-next-touch at phase boundaries the program signals (SIGUSR2 or
    /// numalab_nt_phase()); see docs/nexttouch.md.
    #[arg(long)]
    pub next_touch: bool,
    /// Print the current policy and binding, as numactl --show.
    #[arg(short = 's', long)]
    pub show: bool,
    /// Node and CPU specs may name any node or CPU, not only those of this process's cpuset
    /// (numactl's --all).
    #[arg(short = 'a', long)]
    pub all: bool,
    /// numactl's --strict, which applies to shared memory segments only: for a process it is
    /// ignored with a warning, as numactl does.
    #[arg(short = 't', long)]
    pub strict: bool,
    /// Print the host's NUMA topology, as numactl --hardware (`numalab topo` shows more).
    #[arg(short = 'H', long)]
    pub hardware: bool,
    /// The command and its arguments. An argument before it that starts with '-' is one of
    /// the options above, never the command: a mistyped option is an error, as in numactl.
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// The next-touch preload library: $NUMALAB_NEXT_TOUCH_LIB, else beside the numalab binary.
fn preload_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NUMALAB_NEXT_TOUCH_LIB") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.join("libnumalab_nexttouch.so"))
}

/// Which CPU binding comes last among `options` (the arguments between `run` and the
/// command): 'N' (--cpunodebind, --cpubind, -N, -c) or 'C' (--physcpubind, -C). numactl
/// applies each as it reads it, so with both the last one is the process's affinity.
fn last_cpu_binding(options: &[OsString]) -> Option<char> {
    let mut last = None;
    for a in options {
        let a = a.to_string_lossy();
        let long = |name: &str| a == name || a.starts_with(&format!("{name}="));
        if long("--cpunodebind") || long("--cpubind") || a.starts_with("-N") || a.starts_with("-c")
        {
            last = Some('N');
        } else if long("--physcpubind") || a.starts_with("-C") {
            last = Some('C');
        }
    }
    last
}

/// Whether `--all`/`-a` comes after a node or CPU spec among `options`: numactl refuses that
/// ("--all/-a option must be before all cpu/node specifications").
fn all_after_a_spec(options: &[OsString]) -> bool {
    let mut spec_seen = false;
    for a in options {
        let a = a.to_string_lossy();
        if a == "--all" || (!a.starts_with("--") && a.starts_with("-a")) {
            return spec_seen;
        }
        let long = [
            "--interleave",
            "--membind",
            "--preferred",
            "--preferred-many",
        ]
        .iter()
        .chain(&[
            "--cpunodebind",
            "--cpubind",
            "--physcpubind",
            "--weighted-interleave",
        ])
        .any(|n| a == *n || a.starts_with(&format!("{n}=")));
        let short = a.starts_with('-')
            && !a.starts_with("--")
            && a.chars().nth(1).is_some_and(|c| "impPwNcC".contains(c));
        spec_seen |= long || short;
    }
    false
}

pub fn run(mut a: RunArgs) -> Result<i32> {
    // the options: after `numalab run`, before the command (the trailing arguments)
    let args: Vec<OsString> = std::env::args_os().collect();
    let options = args
        .get(2..args.len().saturating_sub(a.command.len()))
        .unwrap_or_default();
    if a.all && all_after_a_spec(options) {
        bail!("--all/-a option must be before all cpu/node specifications (as numactl requires)");
    }
    if a.cpunodebind.is_some() && a.physcpubind.is_some() {
        match last_cpu_binding(options) {
            Some('N') => a.physcpubind = None,
            _ => a.cpunodebind = None,
        }
    }
    let root = SysRoot::host();
    if a.hardware {
        // numactl's layout alone; `numalab topo` adds tiers, HMAT, THP and balancing
        let tree = numalab_linux::node::read_node_tree(&root)?;
        print!("{}", numalab_place::numactl_show::hardware(&tree));
        return Ok(0);
    }
    if a.show {
        print!("{}", numalab_place::exec::show()?);
        return Ok(0);
    }
    if a.command.is_empty() {
        bail!(
            "no command given: numalab run [OPTIONS] -- COMMAND [ARGS...] (or --show, --hardware)"
        );
    }
    let opts = RunOptions {
        interleave: a.interleave,
        membind: a.membind,
        preferred: a.preferred,
        preferred_many: a.preferred_many,
        weighted_interleave: a.weighted_interleave,
        localalloc: a.localalloc,
        cpunodebind: a.cpunodebind,
        physcpubind: a.physcpubind,
        balancing: a.balancing,
        remote_percent: a.remote_percent,
        thp: a.thp,
        next_touch: a.next_touch,
        placement_period_ms: a.placement_period_ms,
        remote_percent_control: a.remote_percent_control,
    };
    if a.strict {
        // numactl's own words: --strict only concerns shared memory segments
        eprintln!("numactl: warning. Strict flag for process ignored.");
    }
    let mut host = numalab_place::exec::host_info(&root)?;
    if a.all {
        // numactl --all: specs are read against every online node and CPU, not the cpuset's
        host.spec.allowed_nodes = host.spec.online_nodes;
        host.spec.allowed_cpus = host.spec.online_cpus.clone();
    }
    let plan = numalab_place::launch::plan(&opts, &host, preload_path())?;
    match numalab_place::exec::run(&plan, &a.command) {
        Ok(code) => Ok(code),
        Err(e) => match e.shell_status() {
            // Like a shell or env(1): say why, exit 127 / 126.
            Some(code) => {
                eprintln!("numalab: {e}");
                Ok(code)
            }
            None => Err(e.into()),
        },
    }
}
