//! The `jobwarden` binary: parse, start tracing, run, map to an exit code.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = jobwarden::cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .init();
    match jobwarden::commands::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("jobwarden: {e:#}");
            ExitCode::from(2)
        }
    }
}
