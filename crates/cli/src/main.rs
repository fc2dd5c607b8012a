//! The `numalab` binary: a thin layer over the library crates.

mod analyze;
mod balance;
mod bench_analyze;
mod calibrate;
mod compare;
mod convert;
mod docs_gen;
mod migrate;
mod numastat;
mod numbers;
mod output;
mod record;
mod run;
mod study;
mod topo;
mod validate;

use anyhow::{bail, Context, Result};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use numalab_runspec::sim_defaults;
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "numalab", version, about = "A workbench for memory placement on NUMA and tiered-memory machines", long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Simulate a workload on a modelled machine and report NUMA metrics.
    Sim(SimArgs),
    /// List or describe machine descriptions (presets, TOML files, hwloc XML).
    #[command(subcommand)]
    Machine(MachineCmd),
    /// List the simulator's workloads and their parameters.
    #[command(subcommand)]
    Workload(WorkloadCmd),
    /// List the placement policies and their parameters.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Benchmarks of numalab itself.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// The host's NUMA topology as the kernel shows it (like numactl --hardware, and more).
    Topo(TopoArgs),
    /// Run a command under a memory policy and CPU binding (numactl's options, and more).
    Run(run::RunArgs),
    /// Move pages of a running process to other nodes.
    Migrate(migrate::MigrateArgs),
    /// Per-node memory statistics, as numastat: allocation counters (-n), meminfo (-m) and
    /// processes' memory per node (-p PID|PATTERN), in numastat's layout.
    Numastat(numastat::NumastatArgs),
    /// Analyse memory-access samples (perf.data or numalab's own): LAR, imbalance, hot and
    /// shared pages, huge-page false sharing, what-if estimates per policy.
    Analyze(analyze::AnalyzeArgs),
    /// Sample the memory accesses of a command (`-- CMD ARGS...`) or a running process
    /// (`--pid PID`) with perf_event_open (PEBS, IBS or page faults) into a sample file for
    /// `numalab analyze`, with the sampled pages' nodes (docs/record.md).
    Record(record::RecordArgs),
    /// Convert sample files between numalab's Arrow streams and perf.data (for perf script,
    /// perf mem report); the format follows OUT's extension (.data, .arrows) or --to.
    Convert(convert::ConvertArgs),
    /// Run a placement policy (carrefour, carrefour-lp, ...) on a live process, its samples
    /// replayed from a file (numalab's Arrow samples or perf.data).
    Balance(balance::BalanceArgs),
    /// Allocate and touch memory, report where its pages are, optionally keep rewriting it
    /// (for a migration to run under) and verify every word at the end.
    Memhog(MemhogArgs),
    /// Run the validation suite: published NUMA measurements simulated and scored (direction,
    /// within ±30 %), one row per case, totals per source (docs/VALIDATION.md).
    Validate(validate::ValidateArgs),
    /// Studies: grids of simulated runs from a TOML file (axes of any `sim` setting, labels,
    /// repeats), resumable, results as Parquet and CSV (docs/study.md).
    #[command(subcommand)]
    Study(study::StudyCmd),
    /// Measure this host's memory system (idle latency and bandwidth matrices, loaded-latency
    /// curves, fault and move_pages costs) and write a machine file for `numalab sim`, its
    /// base the host's topology (docs/calibrate.md).
    Calibrate(calibrate::CalibrateArgs),
    /// Print a shell completion script to standard output (README, "Shell completions and
    /// man pages", says where to put it).
    Completions(docs_gen::CompletionsArgs),
    /// Write man pages for numalab and every subcommand into a directory.
    Man(docs_gen::ManArgs),
}

#[derive(Args, Clone)]
pub struct MemhogArgs {
    /// How much memory: bytes or with K/M/G.
    #[arg(default_value = "64M")]
    size: String,
    /// Threads rewriting disjoint slices while holding.
    #[arg(long, default_value_t = 1, value_parser = numbers::count::<usize>("writer threads", 1..), allow_negative_numbers = true)]
    writers: usize,
    /// Keep rewriting for this many seconds before verifying.
    #[arg(long, default_value_t = 0.0)]
    hold_s: f64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
pub struct TopoArgs {
    /// Print the topology as JSON instead.
    #[arg(long)]
    json: bool,
    /// Write a machine description (TOML) of this host to FILE instead, for `numalab sim
    /// --machine FILE`: nodes, CPUs, memory, distances, HMAT figures and caches from the kernel,
    /// the rest documented defaults (docs/machine-format.md, "From the running kernel").
    #[arg(long, value_name = "FILE")]
    machine_file: Option<PathBuf>,
}

#[derive(Subcommand)]
enum MachineCmd {
    /// List the built-in presets.
    List,
    /// Describe a preset, a machine TOML file or an hwloc XML file.
    Show {
        /// Preset id, or path to a .toml / .xml file.
        name: String,
        /// Print the description as JSON instead.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum WorkloadCmd {
    /// List workloads with their keys.
    List,
}

#[derive(Subcommand)]
enum PolicyCmd {
    /// List policies with their parameters, defaults and units.
    List,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Simulated memory references per second of host time, on one host thread.
    Sim(BenchSimArgs),
    /// Page migration on this kernel, as ratios: move_pages by batch size, and `numalab
    /// migrate` against numactl's migratepages (needs two nodes with memory).
    Migrate(BenchMigrateArgs),
    /// `numalab analyze` on a synthetic 10-million-sample file (Arrow and perf.data) against
    /// the real `perf script` on the same perf.data.
    Analyze(bench_analyze::BenchAnalyzeArgs),
}

#[derive(Args, Clone)]
pub struct BenchMigrateArgs {
    /// Node the memory starts on.
    #[arg(long, default_value_t = 0, value_parser = numbers::whole::<u16>("a node number", ..), allow_negative_numbers = true)]
    from: u16,
    /// Node it is moved to.
    #[arg(long, default_value_t = 1, value_parser = numbers::whole::<u16>("a node number", ..), allow_negative_numbers = true)]
    to: u16,
    /// Memory moved per measurement: bytes or with K/M/G.
    #[arg(long, default_value = "64M")]
    size: String,
    /// move_pages batch sizes, pages.
    #[arg(long, default_value = "1,16,256,4096,65536", value_delimiter = ',', value_parser = numbers::count::<usize>("pages per batch", 1..), allow_negative_numbers = true)]
    batches: Vec<usize>,
    /// Rounds per batch size; the best is kept.
    #[arg(long, default_value_t = 3, value_parser = numbers::count::<usize>("rounds", 1..), allow_negative_numbers = true)]
    repeat: usize,
    /// Also write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// `--threads`, `--jobs`: a whole number of at least 1, said so when it is not.
fn thread_count(s: &str) -> std::result::Result<usize, String> {
    numbers::count::<usize>("threads", 1..)(s)
}

#[derive(Args, Clone)]
pub struct BenchSimArgs {
    /// Machine simulated: a preset id (`numalab machine list`), a .toml or an hwloc .xml file.
    #[arg(long, default_value = "opteron6272-8n")]
    machine: String,
    /// Workload spec simulated (`numalab workload list`); the default is the benchmark that
    /// docs/PERFORMANCE.md records.
    #[arg(long, default_value = "npb-cg:class=B,niter=1")]
    workload: String,
    /// Simulated threads (the host runs the simulation on one thread whatever this is).
    #[arg(long, default_value_t = 16, value_parser = thread_count, allow_negative_numbers = true)]
    threads: usize,
    /// Transparent huge pages in the simulated kernel: never, madvise or always.
    #[arg(long, default_value = "never")]
    thp: String,
    /// Repetitions; the best is reported.
    #[arg(long, default_value_t = 1, value_parser = numbers::count::<usize>("repetitions", 1..), allow_negative_numbers = true)]
    repeat: usize,
    /// Run with a placement policy active: `autonuma[:key=value,...]` (Linux NUMA balancing)
    /// or a policy of `numalab policy list`.
    #[arg(long)]
    policy: Option<String>,
    /// The best engine build to use: `baseline`, `avx2` or `avx512` (default: the best this
    /// host has). Results are the same in every build; only the speed differs.
    #[arg(long)]
    host_isa: Option<String>,
    /// No progress bar.
    #[arg(long, short = 'q')]
    quiet: bool,
}

#[derive(Args, Clone)]
pub struct SimArgs {
    /// Machine: a preset id (see `numalab machine list`), a .toml or an hwloc .xml file.
    #[arg(long, short = 'm', default_value = sim_defaults::MACHINE)]
    pub machine: String,
    /// Workload spec, e.g. `npb-cg:class=B,niter=1` (see `numalab workload list`).
    #[arg(long, short = 'w', default_value = sim_defaults::WORKLOAD)]
    pub workload: String,
    /// Threads (default: one per CPU of the machine, or what a single-threaded workload needs).
    #[arg(long, short = 't', value_parser = thread_count, allow_negative_numbers = true)]
    pub threads: Option<usize>,
    /// Thread pinning: none, sockorder, sockets, sequential, or a CPU list like 0-7,16.
    #[arg(long, default_value = sim_defaults::PIN)]
    pub pin: String,
    /// Task memory policy: default, local, preferred:N, preferred-many:NODES, bind:NODES,
    /// interleave:NODES, weighted-interleave:N=W,..., remote-percent:P[:NODES].
    #[arg(long, default_value = sim_defaults::MEMPOLICY)]
    pub mempolicy: String,
    /// Transparent huge pages: never, madvise or always.
    #[arg(long, default_value = sim_defaults::THP)]
    pub thp: String,
    /// Back every process's heap with hugetlbfs pages: none, 2M or 1G (libhugetlbfs's
    /// HUGETLB_MORECORE: every allocation comes from the heap, packed, so 1 GiB pages work
    /// for any workload; mappings with their own mbind policy keep 4 KiB pages).
    #[arg(long, default_value = sim_defaults::HUGETLB)]
    pub hugetlb: String,
    /// Placement policies to compare side by side, each with optional parameters:
    /// `autonuma,carrefour,carrefour-lp:period_ms=500`. `autonuma` is Linux's automatic NUMA
    /// balancing in the simulated kernel. A run without a policy comes first as the baseline.
    /// `numalab policy list` shows policies and parameters.
    #[arg(long)]
    pub policy: Option<String>,
    /// Compare configurations side by side: comma-separated; each is `key=value` settings
    /// joined by `+` (keys: mempolicy, thp, hugetlb, pin, threads, machine, workload, policy) or a
    /// shorthand (first-touch, interleave, thp, nothp, hugetlb-2m, hugetlb-1g, local). The first is the baseline.
    #[arg(long)]
    pub compare: Option<String>,
    /// Write all results as JSON (`-`: to standard output, the table then going to standard
    /// error).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write one CSV row of metrics per configuration.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write the sampler's memory-access samples (Arrow IPC stream, for `numalab analyze` or
    /// pandas/polars; perf.data when FILE ends in .data); with several configurations,
    /// FILE-1.arrows, FILE-2.arrows, ...
    #[arg(long, value_name = "FILE")]
    pub samples_out: Option<PathBuf>,
    /// Epoch length in simulated microseconds, 0.1 to 1000 (results are stable from 5 to 100:
    /// docs/VALIDATION.md, "Epoch length").
    #[arg(long, default_value_t = 20.0, allow_negative_numbers = true)]
    pub epoch_us: f64,
    /// One access sample every N memory references (0 = off).
    #[arg(long, default_value_t = 4099, value_parser = numbers::count::<u64>("memory references per sample", 0..), allow_negative_numbers = true)]
    pub sample_period: u64,
    /// Seed of the run's random draws (placement draws, and the start skew below).
    #[arg(long, default_value_t = 42, value_parser = numbers::whole::<u64>("a whole-number seed", ..), allow_negative_numbers = true)]
    pub seed: u64,
    /// Start each thread after a delay drawn in [0, N) simulated microseconds from --seed
    /// (0: all start together). Runs with several seeds sample run-to-run variation.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub start_skew_us: f64,
    /// Host threads for --compare (default: all cores).
    #[arg(long, value_parser = thread_count, allow_negative_numbers = true)]
    pub jobs: Option<usize>,
    /// No progress bars.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

fn main() {
    // Die quietly on a closed pipe (`numalab ... | head`) like other Unix tools, instead of
    // panicking on the failed print. Children get the default disposition anyway.
    // SAFETY: setting a signal disposition before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // `numalab run` is numactl: usage and placement errors exit 1, as numactl's do
    let numactl = std::env::args_os().nth(1).is_some_and(|a| a == "run");
    // the matches as well as the parsed arguments: `run` reads its options' order from them
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)));
    let (cli, matches) = match parsed {
        Ok(both) => both,
        Err(e) if numactl && e.use_stderr() => {
            let _ = e.print();
            std::process::exit(1);
        }
        Err(e) => e.exit(),
    };
    if let Err(e) = run(cli, &matches) {
        eprintln!("error: {e:#}");
        std::process::exit(if numactl { 1 } else { 2 });
    }
}

fn run(cli: Cli, matches: &clap::ArgMatches) -> Result<()> {
    match cli.cmd {
        Cmd::Sim(a) => compare::sim(a),
        Cmd::Machine(MachineCmd::List) => {
            let ms: Vec<_> = numalab_machine::preset_ids()
                .into_iter()
                .filter_map(numalab_machine::preset)
                .collect();
            print!("{}", numalab_machine::show::list_table(&ms));
            Ok(())
        }
        Cmd::Machine(MachineCmd::Show { name, json }) => {
            let m = numalab_machine::load(&name)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&m)?);
            } else {
                print!("{}", numalab_machine::show::summary(&m));
            }
            Ok(())
        }
        Cmd::Workload(WorkloadCmd::List) => {
            for (name, desc) in numalab_workloads::list() {
                println!("{name:<14} {desc}");
            }
            Ok(())
        }
        Cmd::Policy(PolicyCmd::List) => {
            println!("autonuma: Linux automatic NUMA balancing in the simulated kernel (policies.md §2, and the §3 THP split extension); the kernel's periods are seconds, so short simulations want e.g. autonuma:time_scale=0.01; keys: {}\n", numalab_sim::NumaBalancingParams::keys().join(", "));
            for p in numalab_policies::list() {
                println!("{p}");
            }
            Ok(())
        }
        Cmd::Calibrate(a) => calibrate::run(a),
        Cmd::Bench(BenchCmd::Sim(a)) => bench_sim(a),
        Cmd::Bench(BenchCmd::Migrate(a)) => bench_migrate(a),
        Cmd::Bench(BenchCmd::Analyze(a)) => bench_analyze::run(a),
        Cmd::Topo(a) => {
            if let Some(path) = &a.machine_file {
                let shown = path.display().to_string();
                // `--machine` picks the loader by extension: any other name could not be used.
                if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                    bail!("--machine-file {shown}: the name must end in .toml, as `numalab sim --machine` takes machine files by their extension");
                }
                output::check_writable(Some(path))
                    .with_context(|| format!("--machine-file {shown}"))?;
                // Find out that the file cannot be written before reading anything; a file
                // created only for the check is removed again, so a failure leaves nothing.
                let existed = path.exists();
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .with_context(|| format!("--machine-file {shown}: cannot write the file"))?;
                let made = numalab_place::machine_file::machine_from_host(
                    &numalab_linux::sysroot::SysRoot::host(),
                );
                let m = match made {
                    Ok(m) => m,
                    Err(e) => {
                        if !existed {
                            let _ = std::fs::remove_file(path);
                        }
                        return Err(e).context("cannot describe this host as a machine");
                    }
                };
                output::write_atomic(
                    path,
                    numalab_place::machine_file::machine_file_text(&m, &shown).as_bytes(),
                )
                .with_context(|| format!("--machine-file {shown}: cannot write the file"))?;
                println!(
                    "wrote machine '{}' ({} node{}, {} CPUs) to {shown}; simulate it with: numalab sim --machine {shown} --workload ...",
                    m.id,
                    m.topology.num_nodes(),
                    if m.topology.num_nodes() == 1 { "" } else { "s" },
                    m.topology.num_cpus()
                );
                return Ok(());
            }
            let t = topo::collect(&numalab_linux::sysroot::SysRoot::host())?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                print!("{}", topo::render(&t));
            }
            Ok(())
        }
        Cmd::Run(a) => {
            // The command's exit status is numalab's (numactl passes it through by exec).
            let sub = matches
                .subcommand_matches("run")
                .ok_or_else(|| anyhow::anyhow!("internal: no matches for `run`"))?;
            let code = run::run(a, sub)?;
            std::process::exit(code);
        }
        Cmd::Migrate(a) => migrate::run(a),
        Cmd::Numastat(a) => {
            // 1 when a process named could not be read (numastat says so and exits 0)
            let code = numastat::run(a)?;
            std::process::exit(code);
        }
        Cmd::Memhog(a) => memhog(a),
        Cmd::Analyze(a) => analyze::run(a),
        Cmd::Record(a) => {
            // The command's exit status is numalab's, as with `run`.
            let code = record::run(a)?;
            std::process::exit(code);
        }
        Cmd::Convert(a) => convert::run(a),
        Cmd::Balance(a) => balance::run(a),
        Cmd::Validate(a) => validate::run(a),
        Cmd::Study(c) => study::run(c),
        Cmd::Completions(a) => docs_gen::completions(&a, Cli::command()),
        Cmd::Man(a) => {
            let pages = docs_gen::man(&a, Cli::command())?;
            println!("wrote {} man pages into {}", pages.len(), a.out.display());
            Ok(())
        }
    }
}

fn memhog(a: MemhogArgs) -> Result<()> {
    use std::io::Write;
    let size_bytes = numalab_workloads::spec::parse_size(&a.size).with_context(|| {
        format!(
            "size '{}': expected bytes or a number with K, M or G",
            a.size
        )
    })?;
    if !(a.hold_s >= 0.0 && a.hold_s.is_finite()) {
        bail!("--hold-s {}: expected seconds >= 0", a.hold_s);
    }
    if size_bytes < 4096 {
        bail!("size {}: expected at least one page (4K)", a.size);
    }
    // each writer is a thread rewriting its slice: more writers than pages write nothing
    let max_writers = (size_bytes / 4096).clamp(1, 4096) as usize;
    if a.writers > max_writers {
        bail!(
            "--writers {}: expected 1 to {max_writers} (one page per writer at least, 4096 threads at most)",
            a.writers
        );
    }
    // More than every online node holds together cannot be touched: refuse it here rather
    // than let the kernel's OOM killer end the run part way (the nodes' MemTotal, as numactl
    // --hardware shows it; without node meminfo files the allocation's own failure decides)
    if let Ok(tree) = numalab_linux::node::read_node_tree(&numalab_linux::sysroot::SysRoot::host())
    {
        let host_bytes: u64 = tree
            .nodes
            .iter()
            .filter_map(|n| n.meminfo.as_ref().map(|m| m.mem_total_bytes()))
            .sum();
        if host_bytes > 0 && size_bytes > host_bytes {
            bail!(
                "size {}: {size_bytes} bytes is more than this host's memory ({host_bytes} bytes on {} node{}); give a size that fits",
                a.size,
                tree.nodes.len(),
                if tree.nodes.len() == 1 { "" } else { "s" }
            );
        }
    }
    let opts = numalab_place::memhog::MemhogOptions {
        size_bytes: size_bytes as usize,
        writers: a.writers,
        hold: std::time::Duration::try_from_secs_f64(a.hold_s).map_err(|_| {
            anyhow::anyhow!(
                "--hold-s {}: too long a time",
                numalab_sim::config::shown(a.hold_s)
            )
        })?,
    };
    let r = numalab_place::memhog::run(&opts, |s, e| {
        // where the buffer is, for whoever moves it meanwhile; with --json, stdout is the
        // JSON report alone, so the line goes to stderr
        let line = format!("buffer {s:x}-{e:x} pid {}", std::process::id());
        if a.json {
            eprintln!("{line}");
            let _ = std::io::stderr().flush();
        } else {
            println!("{line}");
            let _ = std::io::stdout().flush();
        }
    })?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        let h = |m: &std::collections::BTreeMap<u16, u64>| {
            m.iter()
                .map(|(n, c)| format!("N{n}={c}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!("pages        {}", r.pages);
        println!("after touch  {}", h(&r.nodes_after_touch));
        println!(
            "at end       {} (not present {})",
            h(&r.nodes_at_end),
            r.not_present_at_end
        );
        println!("passes       {}", r.passes);
        println!("corrupt      {} words", r.corrupt_words);
    }
    if r.corrupt_words > 0 {
        bail!("{} words lost their last written value", r.corrupt_words);
    }
    Ok(())
}

fn bench_migrate(a: BenchMigrateArgs) -> Result<()> {
    use numalab_core::NodeId;
    output::check_writable(a.json.as_deref())?;
    let size_bytes = numalab_workloads::spec::parse_size(&a.size).with_context(|| {
        format!(
            "--size '{}': expected bytes or a number with K, M or G",
            a.size
        )
    })? as usize;
    if a.batches.is_empty() {
        bail!("--batches: give page counts of at least 1, e.g. 1,16,256,4096");
    }
    let online =
        numalab_linux::node::read_node_tree(&numalab_linux::sysroot::SysRoot::host())?.online;
    for n in [a.from, a.to] {
        if !online.contains(NodeId(n)) {
            bail!("node {n} does not exist (online nodes: {online})");
        }
    }
    let (from, to) = (NodeId(a.from), NodeId(a.to));
    let batches = numalab_place::bench::batches(from, to, size_bytes, &a.batches, a.repeat)?;
    println!(
        "move_pages, {} base pages between nodes {} and {} (best of {}):",
        batches[0].pages, a.from, a.to, a.repeat
    );
    println!(
        "{:>12} {:>12} {:>14}",
        "batch pages", "pages/s", "cost vs largest"
    );
    for r in &batches {
        println!(
            "{:>12} {:>12.0} {:>13.2}x",
            r.batch_pages, r.pages_per_s, r.relative_cost
        );
    }
    let exe = std::env::current_exe().context("locating the numalab binary")?;
    let tools = numalab_place::bench::tools(&exe, from, to, size_bytes, a.repeat)?;
    println!(
        "\nmoving a {} process from node {} to {} (wall time with process start, best of {}):",
        a.size, a.from, a.to, a.repeat
    );
    println!(
        "{:<34} {:>8} {:>10} {:>16}",
        "tool", "pages", "seconds", "vs migratepages"
    );
    for r in &tools {
        let rel = r
            .relative_to_migratepages
            .map_or("-".to_string(), |x| format!("{x:.2}x"));
        println!(
            "{:<34} {:>8} {:>10.3} {:>16}",
            r.tool, r.pages_moved, r.seconds, rel
        );
    }
    if let Some(p) = &a.json {
        let all = numalab_place::bench::MigrateBench {
            from: a.from,
            to: a.to,
            size_bytes,
            batches,
            tools,
        };
        output::write_atomic(p, serde_json::to_string_pretty(&all)?.as_bytes())?;
    }
    Ok(())
}

fn bench_sim(a: BenchSimArgs) -> Result<()> {
    let machine = numalab_machine::load(&a.machine)?;
    let wl = numalab_workloads::by_spec(&a.workload, a.threads)?;
    let thp: numalab_sim::ThpMode = a.thp.parse().map_err(anyhow::Error::msg)?;
    let max_host_isa = match &a.host_isa {
        Some(s) => s
            .parse::<numalab_sim::HostIsa>()
            .map_err(|e| anyhow::anyhow!("--host-isa: {e}"))?,
        None => numalab_sim::HostIsa::Avx512,
    };
    let numa_balancing = match &a.policy {
        Some(p) if compare::is_numa_balancing(p) => Some(
            numalab_sim::NumaBalancingParams::parse(p)
                .map_err(|e| anyhow::anyhow!("--policy {p}: {e}"))?,
        ),
        Some(p) => {
            numalab_policies::parse_spec(p).map_err(|e| anyhow::anyhow!("--policy {p}: {e}"))?;
            None
        }
        None => None,
    };
    let mut best: Option<numalab_sim::SimResult> = None;
    // a bar over the runs, not inside them: the simulation's progress callback would run in
    // the time measured
    let bar = output::count_bar("bench sim", "runs", a.quiet);
    bar.set_length(a.repeat as u64);
    for _ in 0..a.repeat {
        let policies = match &a.policy {
            Some(p) if numa_balancing.is_none() => {
                vec![numalab_policies::by_spec(p).expect("validated above")]
            }
            _ => Vec::new(),
        };
        let cfg = numalab_sim::SimConfig {
            thp,
            pinning: numalab_sim::Pinning::Sockorder,
            numa_balancing: numa_balancing.clone(),
            policies,
            max_host_isa,
            ..Default::default()
        };
        let r = numalab_sim::simulate(&machine, wl.as_ref(), cfg).context("simulation failed")?;
        if best
            .as_ref()
            .is_none_or(|b| r.host_seconds < b.host_seconds)
        {
            best = Some(r);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let r = best.unwrap();
    let rate = r.memory_references as f64 / r.host_seconds;
    println!("machine            {}", r.machine);
    println!(
        "workload           {} ({} threads, thp {}, policy {})",
        r.workload,
        r.threads,
        r.thp,
        a.policy.as_deref().unwrap_or("none")
    );
    println!(
        "pages migrated     {} (hint faults {})",
        r.vmstat.pgmigrate_success, r.vmstat.numa_hint_faults
    );
    println!("memory references  {}", r.memory_references);
    println!(
        "engine build       {} (host has {})",
        max_host_isa.capped(),
        numalab_sim::HostIsa::detect()
    );
    println!(
        "host time          {:.3} s (simulation only, one host thread; workload setup excluded)",
        r.host_seconds
    );
    println!("simulated time     {:.3} ms", r.sim_time_ns / 1e6);
    println!(
        "speed              {:.1} million references per second",
        rate / 1e6
    );
    Ok(())
}
