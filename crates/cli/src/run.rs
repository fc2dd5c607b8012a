//! `numalab run [OPTIONS] -- CMD`: numactl's options, plus --remote-percent, --thp and
//! --next-touch. Planning and execution live in numalab-place; this file maps arguments.

use anyhow::{bail, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args};
use numalab_linux::sysroot::SysRoot;
use numalab_place::launch::RunOptions;
use numalab_place::numactl_shm::{Io, Numactl, Opt, Outcome};
use std::ffi::OsString;
use std::io::Write;
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
    #[arg(long, default_value_t = 200, value_name = "MS", value_parser = crate::numbers::count::<u64>("milliseconds", 1..), allow_negative_numbers = true)]
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
    /// With --hardware: each node's CPUs as ranges and a count (numactl 2.0.19's option).
    #[arg(long)]
    pub cpu_compress: bool,
    /// Print the numactl version `numalab run` follows, and numalab's.
    #[arg(long = "version", action = clap::ArgAction::SetTrue)]
    pub numactl_version: bool,
    /// Shared memory: the System V segment keyed by FILE (numactl --shm; created with
    /// --length if missing), whose policy the options after it set (docs/numactl.md).
    #[arg(
        short = 'S',
        long,
        value_name = "FILE",
        help_heading = "Shared memory (numactl's)"
    )]
    pub shm: Option<String>,
    /// Shared memory: FILE (on tmpfs or hugetlbfs) mapped shared, its policy set by the
    /// options after it.
    #[arg(
        short = 'f',
        long,
        value_name = "FILE",
        help_heading = "Shared memory (numactl's)"
    )]
    pub file: Option<String>,
    /// Length of the region --shm or --file creates or sets a policy on (k, m, g suffixes).
    #[arg(
        short = 'L',
        long,
        value_name = "BYTES",
        help_heading = "Shared memory (numactl's)"
    )]
    pub length: Option<String>,
    /// Offset of the policy region in the segment or file.
    #[arg(
        short = 'o',
        long,
        value_name = "BYTES",
        help_heading = "Shared memory (numactl's)"
    )]
    pub offset: Option<String>,
    /// Permissions of a segment or file --shm or --file creates, octal (default 0600).
    #[arg(
        short = 'M',
        long,
        value_name = "MODE",
        help_heading = "Shared memory (numactl's)"
    )]
    pub shmmode: Option<String>,
    /// Project id for --shm's key (ftok's), default 0.
    #[arg(
        short = 'I',
        long,
        value_name = "ID",
        help_heading = "Shared memory (numactl's)"
    )]
    pub shmid: Option<String>,
    /// Create the --shm segment in huge pages (SHM_HUGETLB).
    #[arg(short = 'u', long, help_heading = "Shared memory (numactl's)")]
    pub huge: bool,
    /// Touch every page of the region, placing it by its policy.
    #[arg(short = 'T', long, help_heading = "Shared memory (numactl's)")]
    pub touch: bool,
    /// Print the region's policies.
    #[arg(short = 'd', long, help_heading = "Shared memory (numactl's)")]
    pub dump: bool,
    /// Print the node of each run of the region's pages (touching them).
    #[arg(short = 'D', long, help_heading = "Shared memory (numactl's)")]
    pub dump_nodes: bool,
    /// Touch the region and check that every page follows the policy just set.
    #[arg(short = 'V', long, help_heading = "Shared memory (numactl's)")]
    pub verify: bool,
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

/// The options as given, in their order (clap keeps each occurrence's index): numactl
/// applies each as it reads it, so the order decides which CPU binding wins, whether --all
/// came first, what `same` means, and everything about the shared-memory options.
fn ordered(m: &ArgMatches) -> Vec<Opt> {
    type Valued = fn(String) -> Opt;
    const VALUED: [(&str, Valued); 13] = [
        ("interleave", Opt::Interleave),
        ("membind", Opt::Membind),
        ("preferred", Opt::Preferred),
        ("preferred_many", Opt::PreferredMany),
        ("weighted_interleave", Opt::WeightedInterleave),
        ("cpunodebind", Opt::CpuNodeBind),
        ("physcpubind", Opt::PhysCpuBind),
        ("shm", Opt::Shm),
        ("file", Opt::File),
        ("offset", Opt::Offset),
        ("length", Opt::Length),
        ("shmmode", Opt::ShmMode),
        ("shmid", Opt::ShmId),
    ];
    const FLAGS: [(&str, Opt); 9] = [
        ("localalloc", Opt::Localalloc),
        ("balancing", Opt::Balancing),
        ("all", Opt::All),
        ("strict", Opt::Strict),
        ("huge", Opt::Huge),
        ("touch", Opt::Touch),
        ("dump", Opt::Dump),
        ("dump_nodes", Opt::DumpNodes),
        ("verify", Opt::Verify),
    ];
    let mut opts: Vec<(usize, Opt)> = Vec::new();
    for (id, make) in VALUED {
        if let (Some(at), Some(vals)) = (m.indices_of(id), m.get_many::<String>(id)) {
            opts.extend(at.zip(vals).map(|(i, v)| (i, make(v.clone()))));
        }
    }
    for (id, opt) in FLAGS {
        if m.value_source(id) == Some(ValueSource::CommandLine) {
            if let Some(at) = m.indices_of(id) {
                opts.extend(at.map(|i| (i, opt.clone())));
            }
        }
    }
    opts.sort_by_key(|(i, _)| *i);
    opts.into_iter().map(|(_, o)| o).collect()
}

/// numactl's `same`: a node spec that repeats the previous one given (any of the node
/// options); an error where none came before.
fn resolve_same(a: &mut RunArgs, opts: &[Opt]) -> Result<()> {
    let mut last: Option<&String> = None;
    for o in opts {
        let (field, spec) = match o {
            Opt::Interleave(s) => (&mut a.interleave, s),
            Opt::Membind(s) => (&mut a.membind, s),
            Opt::Preferred(s) => (&mut a.preferred, s),
            Opt::PreferredMany(s) => (&mut a.preferred_many, s),
            Opt::WeightedInterleave(s) => (&mut a.weighted_interleave, s),
            Opt::CpuNodeBind(s) => (&mut a.cpunodebind, s),
            _ => continue,
        };
        if spec == "same" {
            let Some(prev) = last else {
                bail!("same needs previous node specification (as numactl requires)");
            };
            *field = Some(prev.clone());
        } else {
            last = Some(spec);
        }
    }
    Ok(())
}

/// The usage printed after numactl's usage errors (numalab's words: numactl prints its own text).
const USAGE: &str = "usage: numalab run [POLICY] [--cpunodebind NODES | --physcpubind CPUS] COMMAND [ARGS]...\n       numalab run [--length BYTES] [--offset BYTES] [--shmmode MODE] [--shmid ID] [--huge] --shm FILE | --file FILE\n                   [--strict] [POLICY] [--touch] [--verify] [--dump] [--dump-nodes]\n       (numalab run --help)";

/// The shared-memory options, applied in order as numactl applies them. `Some(status)`:
/// numactl's pass ended (a segment was attached, or an error); `None`: no segment, the
/// options place a process.
fn shm_pass(opts: &[Opt], has_command: bool) -> Result<Option<i32>> {
    let host = numalab_place::exec::host_info(&SysRoot::host())?;
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    let io = Io {
        out: &mut out,
        err: &mut err,
    };
    let ended = Numactl::new(&host.spec, io).run(opts, has_command);
    out.flush()?;
    match ended {
        Ok(Outcome::Exit(code)) => Ok(Some(code)),
        Ok(Outcome::Process) => Ok(None),
        Err(stop) => {
            if stop.usage {
                writeln!(err, "{USAGE}")?;
            }
            Ok(Some(1))
        }
    }
}

pub fn run(mut a: RunArgs, m: &ArgMatches) -> Result<i32> {
    if a.numactl_version {
        // numactl 2.0.17+ prints its VERSION; numalab run behaves as 2.0.16 (Debian 12's)
        println!("2.0.16 (numalab {})", env!("CARGO_PKG_VERSION"));
        return Ok(0);
    }
    let opts = ordered(m);
    let (show, hardware) = (a.show, a.hardware);
    if !show && !hardware && opts.iter().any(Opt::is_shm) {
        if let Some(code) = shm_pass(&opts, !a.command.is_empty())? {
            return Ok(code);
        }
    }
    if let Some(all_at) = opts.iter().position(|o| *o == Opt::All) {
        if opts[..all_at].iter().any(Opt::is_spec) {
            bail!(
                "--all/-a option must be before all cpu/node specifications (as numactl requires)"
            );
        }
    }
    resolve_same(&mut a, &opts)?;
    if a.cpunodebind.is_some() && a.physcpubind.is_some() {
        // numactl binds at each option: the last one given is the process's affinity
        let last = opts
            .iter()
            .rev()
            .find(|o| matches!(o, Opt::CpuNodeBind(_) | Opt::PhysCpuBind(_)));
        match last {
            Some(Opt::CpuNodeBind(_)) => a.physcpubind = None,
            _ => a.cpunodebind = None,
        }
    }
    let root = SysRoot::host();
    if a.hardware {
        // numactl's layout alone; `numalab topo` adds tiers, HMAT, THP and balancing
        let tree = numalab_linux::node::read_node_tree(&root)?;
        print!(
            "{}",
            numalab_place::numactl_show::hardware(&tree, a.cpu_compress)
        );
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
