//! `jobwarden config check|show`.

use std::process::ExitCode;

use crate::cli::{ConfigCommand, GlobalArgs};

pub fn run(global: &GlobalArgs, cmd: &ConfigCommand) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load(global)?;
    match cmd {
        ConfigCommand::Check => {
            println!("config OK: {}", config.source);
            println!("root: {}", layout.root().display());
            println!(
                "{} profile(s), {} route(s)",
                config.profiles.len(),
                config.routes.len()
            );
            // Overlaps are legal (the first route wins) but worth a look.
            for warning in config.overlapping_routes() {
                println!("warning: {warning}");
            }
        }
        ConfigCommand::Show => {
            println!("# source: {}", config.source);
            println!("# root: {}", layout.root().display());
            print!("{}", config.to_toml());
        }
    }
    Ok(ExitCode::SUCCESS)
}
