//! One file per subcommand. This is the CLI edge: it reads the process
//! environment, installs signal handlers, prints, and maps results to exit
//! codes (0 success, 1 a clean "no", 2 error). Output formatting lives here
//! only. Stdout is written with `writeln!` and `?`, so that a reader that
//! closed it (`| head`) ends the command quietly
//! ([`output::quiet_on_closed_pipe`]); messages for stderr go through
//! [`crate::logging::line`]. `println!` and `eprintln!` panic on a closed
//! pipe: `clippy.toml` rules them out.

mod abort;
mod args;
pub mod cli_reference;
mod completions;
mod config;
mod daemon;
mod events;
mod gc;
mod history;
mod jobs;
mod logs;
mod man;
mod monitor;
mod output;
mod retry;
mod route;
mod show;
mod status;
mod stdio;
mod submit;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::config::{Config, Env};
use crate::job::JobId;
use crate::layout::Layout;
use crate::ledger::Ledger;

/// Exit status for a clean "no": not found, nothing matched.
pub const EXIT_NO: u8 = 1;

/// A clean "no" (exit 1): not found, nothing matched. Its message goes
/// to stderr like an error's, but it is an answer, not a failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct No(pub String);

/// The whole `jobwarden` program: make sure fds 0 to 2 are open, parse
/// the command line, start logging, run, and map the result to an exit
/// code (errors: 2, their message and causes on stderr).
pub fn main() -> ExitCode {
    use clap::Parser;
    // Before anything opens a file: see `stdio.rs`.
    let std_fds = stdio::open_closed_std_fds();
    let cli = Cli::parse();
    crate::logging::init(cli.global.log_format);
    if let Err(e) = std_fds {
        crate::logging::line(format_args!("jobwarden: {e}"));
        crate::logging::flush();
        return ExitCode::from(2);
    }
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            crate::logging::line(format_args!("jobwarden: {}", describe(&e)));
            ExitCode::from(2)
        }
    };
    crate::logging::flush();
    code
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

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // A reader that closed our stdout (`| head`) asked for no more: that
    // ends any command quietly, not as an error.
    match output::quiet_on_closed_pipe(dispatch(cli)) {
        Err(e) if e.downcast_ref::<No>().is_some() => {
            crate::logging::line(format_args!("jobwarden: {e}"));
            Ok(ExitCode::from(EXIT_NO))
        }
        other => other,
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Daemon => daemon::run(&cli.global),
        Command::Submit(args) => submit::run(&cli.global, &args),
        Command::Status(args) => status::run(&cli.global, &args),
        Command::Jobs(args) => jobs::run(&cli.global, &args),
        Command::Show(args) => show::run(&cli.global, &args),
        Command::Logs(args) => logs::run(&cli.global, &args),
        Command::Events(args) => events::run(&cli.global, &args),
        Command::Abort(args) => abort::run(&cli.global, &args),
        Command::Retry(args) => retry::run(&cli.global, &args),
        Command::Config(cmd) => config::run(&cli.global, &cmd),
        Command::Completions(args) => completions::run(&args),
        Command::Man(args) => man::run(&args),
        Command::CliReference => cli_reference::run(),
        Command::Monitor(args) => monitor::run(&cli.global, &args),
        Command::Route(args) => route::run(&cli.global, &args),
        Command::History(cmd) => history::run(&cli.global, &cmd),
        Command::Gc(args) => gc::run(&cli.global, &args),
    }
}

/// The ledger of an existing root, for commands that read: `None` when
/// there is no root or no ledger yet (nothing ever ran), so that reading
/// never creates a root by mistake.
/// On a root that cannot be written (read-only, full), the ledger is read
/// as an immutable snapshot instead.
fn open_ledger(layout: &Layout) -> Result<Option<Ledger>, crate::ledger::LedgerError> {
    let path = layout.ledger();
    if !path.exists() {
        return Ok(None);
    }
    match Ledger::open(&path) {
        Ok(ledger) => Ok(Some(ledger)),
        Err(e) => match Ledger::open_snapshot(&path) {
            Ok(snapshot) => {
                tracing::debug!("{e}; reading a snapshot instead");
                Ok(Some(snapshot))
            }
            Err(_) => Err(e),
        },
    }
}

/// Resolve a `<job>` argument (see [`crate::lookup`]): an unknown job is a
/// clean "no" (exit 1), a malformed or ambiguous one a usage error (2).
fn resolve_job(layout: &Layout, ledger: Option<&Ledger>, arg: &str) -> anyhow::Result<JobId> {
    let empty;
    let ledger = match ledger {
        Some(l) => l,
        None => {
            // No ledger yet: an in-memory one answers "not indexed", and the
            // lookup falls back to the run folders.
            empty = Ledger::open(std::path::Path::new(":memory:"))?;
            &empty
        }
    };
    lookup_answer(crate::lookup::resolve(layout, ledger, arg))
}

/// A lookup's answer as the CLI reports it: not found is a clean "no"
/// (exit 1); malformed or ambiguous, a usage error (exit 2).
fn lookup_answer(found: Result<JobId, crate::lookup::LookupError>) -> anyhow::Result<JobId> {
    match found {
        Ok(id) => Ok(id),
        Err(crate::lookup::LookupError::NotFound(msg)) => Err(No(msg).into()),
        Err(e) => Err(e.into()),
    }
}

/// The validated config and the layout of the root it selects.
fn load(global: &crate::cli::GlobalArgs) -> anyhow::Result<(Config, Layout)> {
    let env = Env::from_process();
    let config = crate::config::load(global, &env)?;
    let root = crate::config::resolve_root(global, &env, &config)?;
    Ok((config, Layout::new(root)))
}
