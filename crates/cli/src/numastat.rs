//! `numalab numastat`: numactl's numastat, option for option and table for table
//! (numalab-linux's `numastat` module reads and lays out; this file maps arguments and the
//! screen). Differences from numastat are listed in docs/numastat.md.

use anyhow::Result;
use clap::{ArgAction, Args};
use numalab_linux::numastat::{numastat, Options, Target, VERSION};
use numalab_linux::sysroot::SysRoot;
use std::io::{IsTerminal, Write};

#[derive(Args, Clone, Debug)]
#[command(
    disable_version_flag = true,
    after_help = "Without any option or argument: the allocation counters of every node in pages, as the original numastat printed them.\nExamples:\n  numalab numastat -m\n  numalab numastat -p 4242\n  numalab numastat -czs qemu"
)]
pub struct NumastatArgs {
    /// Minimize column widths (no decimals).
    #[arg(short = 'c')]
    pub compress: bool,
    /// Show meminfo-like system-wide memory usage per node.
    #[arg(short = 'm')]
    pub meminfo: bool,
    /// Show the numastat statistics (numa_hit, ...) in MB.
    #[arg(short = 'n')]
    pub numastat: bool,
    /// Show the per-node memory of a process: a PID, or every process whose name or command
    /// line contains PATTERN. Repeatable.
    #[arg(short = 'p', value_name = "PID|PATTERN", action = ArgAction::Append)]
    pub process: Vec<String>,
    /// Sort the rows by the Total column, or by NODE's (-s2: attached, as numastat takes it).
    #[arg(short = 's', value_name = "NODE", num_args = 0..=1, default_missing_value = "")]
    pub sort: Option<String>,
    /// Show one table per process even for several.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Show numastat's version.
    #[arg(short = 'V')]
    pub version: bool,
    /// Skip rows and columns of zeros.
    #[arg(short = 'z')]
    pub skip_zeros: bool,
    /// More processes: PIDs or patterns, as -p.
    #[arg(value_name = "PID|PATTERN")]
    pub targets: Vec<String>,
}

/// numastat's screen width: `NUMASTAT_WIDTH` (1 to 10 000 000, else 80), a terminal's columns,
/// or unlimited when the output is not a terminal; never under 32.
fn screen_width() -> usize {
    let width = match std::env::var("NUMASTAT_WIDTH") {
        Ok(v) => {
            let n: i64 = v.trim().parse().unwrap_or(0);
            if (1..=10_000_000).contains(&n) {
                n as usize
            } else {
                80
            }
        }
        Err(_) if std::io::stdout().is_terminal() => terminal_columns().unwrap_or(80),
        Err(_) => 10_000_000,
    };
    width.max(32)
}

/// The terminal's width in columns (numastat asks xterm's `resize`; the ioctl gives the same).
fn terminal_columns() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills a winsize the caller owns; stdout's descriptor stays open.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_col > 0).then_some(ws.ws_col as usize)
}

/// Runs numastat; the exit status (1 when a process named could not be read).
pub fn run(a: NumastatArgs) -> Result<i32> {
    if a.version {
        println!(
            "numastat version: {VERSION}: numalab {}",
            env!("CARGO_PKG_VERSION")
        );
        return Ok(0);
    }
    let sort = a.sort.as_deref().map(|s| {
        // numastat: -s with all digits is a node, anything else the Total column
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    });
    let compatible = !a.compress
        && !a.meminfo
        && !a.numastat
        && a.process.is_empty()
        && sort.is_none()
        && !a.verbose
        && !a.skip_zeros
        && a.targets.is_empty();
    let targets = a
        .process
        .iter()
        .chain(&a.targets)
        .map(|t| Target::parse(t))
        .collect();
    let opts = Options {
        compress: a.compress,
        meminfo: a.meminfo,
        numastat: a.numastat,
        targets,
        sort,
        verbose: a.verbose,
        skip_zeros: a.skip_zeros,
        compatible,
        screen_width: screen_width(),
        own_pid: std::process::id(),
        // SAFETY: sysconf has no preconditions.
        page_size: unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64,
    };
    let out = numastat(&SysRoot::host(), &opts)?;
    std::io::stdout().write_all(out.stdout.as_bytes())?;
    std::io::stdout().flush()?;
    std::io::stderr().write_all(out.stderr.as_bytes())?;
    Ok(if out.unreadable_pid { 1 } else { 0 })
}
