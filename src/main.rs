//! The `jobwarden` binary: parse, start tracing, run, map to an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = jobwarden::cli::Cli::parse();
    jobwarden::logging::init(cli.global.log_format);
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
