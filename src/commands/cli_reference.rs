//! `jobwarden cli-reference` (hidden): every command and flag in Markdown,
//! rendered from the command-line definitions, so that
//! `docs/cli-reference.md` is generated, never written by hand. A test
//! fails when the committed file differs from what this prints.

use std::fmt::Write as _;
use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Arg, Command, CommandFactory};

use crate::cli::Cli;

/// How to bring `docs/cli-reference.md` up to date.
pub const REGENERATE: &str = "cargo run -q -- cli-reference > docs/cli-reference.md";

pub fn run() -> anyhow::Result<ExitCode> {
    let text = render();
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .context("writing to stdout")?;
    out.flush().context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// The whole reference.
pub fn render() -> String {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut md = String::new();
    md.push_str("# Command-line reference\n\n");
    md.push_str(&format!(
        "<!-- Generated from the command-line definitions (src/cli.rs); do not edit.\n     \
         Regenerate: {REGENERATE} -->\n\n"
    ));
    md.push_str(
        "Every command of `jobwarden`, with its arguments and options, as `--help` \
         shows them. The JSON shapes of `--json` are in [cli-json.md](cli-json.md), \
         [status-json.md](status-json.md) and [history-json.md](history-json.md).\n\n",
    );
    if let Some(after) = cmd.get_after_long_help() {
        let _ = write!(md, "{after}\n\n");
    }
    md.push_str(&format!(
        "## {} (every command accepts them)\n\n",
        crate::cli::GLOBAL_HEADING
    ));
    args(&mut md, cmd.get_arguments().filter(|a| a.is_global_set()));
    md.push_str("## Commands\n\n");
    for sub in visible(&cmd) {
        md.push_str(&format!(
            "- [`{}`](#{}): {}\n",
            sub.get_name(),
            anchor(&path_of(sub)),
            about(sub)
        ));
    }
    md.push('\n');
    for sub in visible(&cmd) {
        command(&mut md, sub, 2);
    }
    md
}

fn visible(cmd: &Command) -> impl Iterator<Item = &Command> {
    cmd.get_subcommands().filter(|s| !s.is_hide_set())
}

/// `jobwarden history list`: the command's full name (clap set it when
/// the tree was built).
fn path_of(cmd: &Command) -> String {
    cmd.get_bin_name().unwrap_or(cmd.get_name()).to_owned()
}

/// The GitHub anchor of a heading.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn about(cmd: &Command) -> String {
    cmd.get_about().map(|s| s.to_string()).unwrap_or_default()
}

fn command(md: &mut String, cmd: &Command, level: usize) {
    let name = path_of(cmd);
    let _ = write!(md, "{} {name}\n\n", "#".repeat(level + 1));
    let text = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|s| s.to_string())
        .unwrap_or_default();
    if !text.is_empty() {
        let _ = write!(md, "{text}\n\n");
    }
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        let _ = write!(md, "{after}\n\n");
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ").trim_end();
    let _ = write!(md, "```text\n{usage}\n```\n\n");
    let own: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_global_set() && !a.is_hide_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !own.is_empty() {
        args(md, own.into_iter());
    }
    for sub in visible(cmd) {
        command(md, sub, level + 1);
    }
}

fn args<'a>(md: &mut String, args: impl Iterator<Item = &'a Arg>) {
    for arg in args.filter(|a| !a.is_hide_set()) {
        let _ = writeln!(md, "- {}: {}", arg_name(arg), arg_help(arg));
    }
    md.push('\n');
}

/// `` `--state <STATE>` ``, `` `-f, --follow` ``, `` `<JOB>` ``.
fn arg_name(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    if arg.is_positional() {
        let dots = if arg.get_num_args().is_some_and(|n| n.max_values() > 1) {
            "..."
        } else {
            ""
        };
        return format!("`{value}{dots}`");
    }
    let mut flags = Vec::new();
    if let Some(s) = arg.get_short() {
        flags.push(format!("-{s}"));
    }
    if let Some(l) = arg.get_long() {
        flags.push(format!("--{l}"));
    }
    let takes_value = arg.get_action().takes_values();
    if takes_value {
        format!("`{} {value}`", flags.join(", "))
    } else {
        format!("`{}`", flags.join(", "))
    }
}

/// The help text on one line, with the possible values, default and
/// environment variable.
fn arg_help(arg: &Arg) -> String {
    let mut text = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|s| s.to_string())
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if !text.is_empty() && !text.ends_with(['.', '?', '!', ')']) {
        text.push('.');
    }
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !values.is_empty() && arg.get_action().takes_values() {
        let _ = write!(text, " Values: {}.", values.join(", "));
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .filter(|d| !d.is_empty())
        .collect();
    if !defaults.is_empty() && !arg.is_hide_default_value_set() && arg.get_action().takes_values() {
        let _ = write!(text, " Default: `{}`.", defaults.join(","));
    }
    if let Some(env) = arg.get_env() {
        let _ = write!(text, " Environment: `{}`.", env.to_string_lossy());
    }
    text
}
