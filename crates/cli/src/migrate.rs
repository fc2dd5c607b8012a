//! `numalab migrate`: move pages of a running process (numalab-place's migration engine).

use crate::output::check_writable;
use anyhow::{Context, Result};
use clap::Args;
use numalab_linux::sysroot::{Pid, SysRoot};
use numalab_place::migrate::{MigrateReport, MigrateRequest};
use numalab_place::migrate_plan::{check_fraction, parse_range, Selection};
use numalab_place::nodespec::parse_nodes;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct MigrateArgs {
    /// The process whose pages move.
    #[arg(long, value_parser = crate::numbers::pid(), allow_negative_numbers = true)]
    pub pid: i32,
    /// Target nodes; with several, pages are spread over them round robin.
    #[arg(long, value_name = "NODES")]
    pub to: String,
    /// Only pages now on these nodes.
    #[arg(long, value_name = "NODES")]
    pub from: Option<String>,
    /// Only pages in START-END (hex, as /proc/PID/maps prints ranges).
    #[arg(long, value_name = "START-END")]
    pub range: Option<String>,
    /// Only this share of the selected pages (0 < F <= 1), the same pages on every run.
    #[arg(long, value_name = "F")]
    pub fraction: Option<f64>,
    /// Move the whole process with one migrate_pages call instead of move_pages.
    #[arg(long)]
    pub whole_process: bool,
    /// Query and report what would move; move nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Pages per move_pages call.
    #[arg(long, default_value_t = numalab_linux::syscalls::DEFAULT_MOVE_BATCH_PAGES, value_parser = crate::numbers::count::<usize>("pages per move_pages call", 1..), allow_negative_numbers = true)]
    pub batch_pages: usize,
    /// Also move pages shared with other processes (MPOL_MF_MOVE_ALL, needs CAP_SYS_NICE).
    #[arg(long)]
    pub move_all: bool,
    /// Write the report as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(a: MigrateArgs) -> Result<()> {
    if let Some(p) = &a.json {
        check_writable(Some(p))?;
    }
    let host = numalab_place::exec::host_info(&SysRoot::host())?;
    let to = parse_nodes(&a.to, &host.spec).context("--to")?;
    let from = a
        .from
        .as_deref()
        .map(|s| parse_nodes(s, &host.spec))
        .transpose()
        .context("--from")?;
    let range = a.range.as_deref().map(parse_range).transpose()?;
    let fraction = a.fraction.map(check_fraction).transpose()?;
    let req = MigrateRequest {
        pid: Pid(a.pid),
        selection: Selection {
            to,
            from,
            range,
            fraction,
        },
        whole_process: a.whole_process,
        dry_run: a.dry_run,
        batch_pages: a.batch_pages,
        move_all: a.move_all,
    };
    let r = numalab_place::migrate::run(&req)?;
    print!("{}", render(&r));
    if let Some(p) = &a.json {
        crate::output::write_atomic(p, serde_json::to_string_pretty(&r)?.as_bytes())?;
    }
    Ok(())
}

fn hist(h: &std::collections::BTreeMap<u16, u64>) -> String {
    if h.is_empty() {
        return "-".into();
    }
    h.iter()
        .map(|(n, c)| format!("N{n}={c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn render(r: &MigrateReport) -> String {
    let c = &r.counts;
    let mut o = format!(
        "pid {} ({}{}): {} pages scanned, {} selected to move\n",
        r.pid,
        r.syscall,
        if r.dry_run { ", dry run" } else { "" },
        r.pages_scanned,
        r.pages_to_move
    );
    o += &format!("{:<14}{:>12}\n", "status", "pages");
    for (name, v) in [
        ("moved", c.moved),
        ("already there", c.already_there),
        ("busy", c.busy),
        ("not present", c.not_present),
        ("denied", c.denied),
        ("failed", c.failed),
    ] {
        o += &format!("{name:<14}{v:>12}\n");
    }
    o += &format!("before        {}\n", hist(&r.before));
    o += &format!("after         {}\n", hist(&r.after));
    if !r.dry_run {
        o += &format!(
            "time          {:.3} s: {:.0} pages/s, {:.1} MB/s\n",
            r.seconds, r.pages_per_s, r.mb_per_s
        );
    }
    o
}
