//! `numalab completions SHELL` and `numalab man --out DIR`: shell completion scripts
//! (clap_complete) and man pages (clap_mangen) generated from the same command definition
//! the parser uses, so they never fall behind the options.

use anyhow::{bail, Context, Result};
use clap::{Args, Command};
use std::path::{Path, PathBuf};

#[derive(Args, Clone)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

#[derive(Args, Clone)]
pub struct ManArgs {
    /// Directory to write the pages into (created if missing): numalab.1 and one page per
    /// subcommand, numalab-sim.1, numalab-machine-list.1, ...
    #[arg(long, default_value = "man")]
    pub out: PathBuf,
}

/// Print the completion script for `a.shell` to standard output.
pub fn completions(a: &CompletionsArgs, mut cmd: Command) -> Result<()> {
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, name, &mut out);
    use std::io::Write;
    std::io::stdout()
        .write_all(&out)
        .context("writing the completion script to standard output")
}

/// Write a man page for the command and for every subcommand, each written whole under a
/// temporary name and renamed into place. Returns the pages written.
pub fn man(a: &ManArgs, cmd: Command) -> Result<Vec<PathBuf>> {
    if a.out.exists() && !a.out.is_dir() {
        bail!(
            "--out {}: exists and is not a directory; give a directory for the pages",
            a.out.display()
        );
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("creating the directory {}", a.out.display()))?;
    let mut written = Vec::new();
    write_pages(&a.out, cmd, &mut written)?;
    Ok(written)
}

fn write_pages(dir: &Path, cmd: Command, written: &mut Vec<PathBuf>) -> Result<()> {
    // a subcommand's page is named after its path: numalab-machine-list.1
    let cmd = cmd.disable_help_subcommand(true);
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut page)
        .with_context(|| format!("rendering the man page of {}", cmd.get_name()))?;
    let path = dir.join(format!("{}.1", cmd.get_name()));
    crate::output::write_atomic(&path, &page)?;
    written.push(path);
    let parent = cmd.get_name().to_string();
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let named = sub.clone().name(format!("{parent}-{}", sub.get_name()));
        write_pages(dir, named, written)?;
    }
    Ok(())
}
