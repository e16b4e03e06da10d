//! `jobwarden config check|show`. `check` names every problem of the file
//! at once (exit 2), and warns, exit 0, about what the valid config names
//! that this machine lacks ([`jobwarden_model::config::preflight`]).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use super::output::print_json;
use crate::cli::{ConfigCheckArgs, ConfigCommand, GlobalArgs};
use jobwarden_model::config::{Config, ConfigError, Env, Findings, Problem};
use jobwarden_model::layout::Layout;

pub fn run(global: &GlobalArgs, cmd: &ConfigCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ConfigCommand::Check(args) => check(global, args),
        ConfigCommand::Show => show(global),
    }
}

/// What `config check --json` prints (docs/cli-json.md).
#[derive(Serialize)]
struct Report<'a> {
    valid: bool,
    /// The config file, or "built-in defaults (no config file)".
    source: String,
    root: Option<String>,
    profiles: Vec<&'a str>,
    routes: usize,
    errors: &'a [Problem],
    warnings: &'a [Problem],
    notes: &'a [Problem],
}

fn check(global: &GlobalArgs, args: &ConfigCheckArgs) -> anyhow::Result<ExitCode> {
    let env = Env::from_process();
    let chosen = super::choices(global);
    let loaded = jobwarden_model::config::load(&chosen, &env).and_then(|config| {
        let root = jobwarden_model::config::resolve_root(&chosen, &env, &config)?;
        Ok((config, Layout::new(root)))
    });
    let (config, layout) = match loaded {
        Ok(loaded) => loaded,
        Err(e) if args.json => return invalid(&e),
        Err(e) => return Err(e.into()),
    };
    let path = std::env::var_os("PATH");
    let findings = jobwarden_model::config::preflight(&config, &layout, path.as_deref());
    if args.json {
        print_json(&Report {
            valid: true,
            source: config.source.to_string(),
            root: Some(layout.root().display().to_string()),
            profiles: config.profiles.keys().map(String::as_str).collect(),
            routes: config.routes.len(),
            errors: &[],
            warnings: &findings.warnings,
            notes: &findings.notes,
        })?;
    } else {
        print_valid(&config, &layout, &findings)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--json` for a config that does not load: its problems, exit 2.
fn invalid(e: &ConfigError) -> anyhow::Result<ExitCode> {
    print_json(&Report {
        valid: false,
        source: e.origin.clone(),
        root: None,
        profiles: Vec::new(),
        routes: 0,
        errors: &e.problems,
        warnings: &[],
        notes: &[],
    })?;
    Ok(ExitCode::from(2))
}

/// The summary on stdout; warnings and notes on stderr.
fn print_valid(config: &Config, layout: &Layout, findings: &Findings) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "config OK: {}", config.source)?;
    writeln!(out, "root: {}", layout.root().display())?;
    writeln!(
        out,
        "{} profile(s), {} route(s)",
        config.profiles.len(),
        config.routes.len()
    )?;
    out.flush().context("writing to stdout")?;
    for w in &findings.warnings {
        jobwarden_sys::logging::line(format_args!("warning: {}", w.message));
    }
    for n in &findings.notes {
        jobwarden_sys::logging::line(format_args!("note: {}", n.message));
    }
    Ok(())
}

fn show(global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load(global)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "# source: {}", config.source)?;
    writeln!(out, "# root: {}", layout.root().display())?;
    write!(out, "{}", config.to_toml())?;
    out.flush().context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}
