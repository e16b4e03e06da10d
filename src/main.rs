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
            eprintln!("jobwarden: {}", describe(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, joined with `: `, leaving out a cause whose
/// text the message already ends with (errors that print their source).
fn describe(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.ends_with(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}
