//! `jobwarden config check|show`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::{ConfigCommand, GlobalArgs};

pub fn run(global: &GlobalArgs, cmd: &ConfigCommand) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load(global)?;
    let mut out = std::io::stdout().lock();
    match cmd {
        ConfigCommand::Check => {
            writeln!(out, "config OK: {}", config.source)?;
            writeln!(out, "root: {}", layout.root().display())?;
            writeln!(
                out,
                "{} profile(s), {} route(s)",
                config.profiles.len(),
                config.routes.len()
            )?;
            // Overlaps are legal (the first route wins) but worth a look.
            for warning in config.overlapping_routes() {
                writeln!(out, "warning: {warning}")?;
            }
        }
        ConfigCommand::Show => {
            writeln!(out, "# source: {}", config.source)?;
            writeln!(out, "# root: {}", layout.root().display())?;
            write!(out, "{}", config.to_toml())?;
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}
