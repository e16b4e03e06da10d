//! `jobwarden completions SHELL`: the shell's completion script, generated
//! from the command-line definitions (`clap_complete`).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};

pub fn run(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    // The generators complete hidden commands too: leave them out.
    let full = Cli::command();
    let visible: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut cmd = clap::Command::new("jobwarden")
        .args(full.get_arguments().cloned())
        .subcommands(visible);
    // Generated into memory: the generators panic when a write fails, and
    // stdout may be a pipe whose reader has gone.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "jobwarden", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script).context("writing to stdout")?;
    out.flush().context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}
