//! `jobwarden completions SHELL`: the shell's completion script, generated
//! from the command-line definitions (`clap_complete`).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};

pub fn run(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut cmd = Cli::command();
    // Generated into memory: the generators panic when a write fails, and
    // stdout may be a pipe whose reader has gone.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "jobwarden", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script).context("writing to stdout")?;
    out.flush().context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}
