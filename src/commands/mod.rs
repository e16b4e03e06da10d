//! One file per subcommand. This is the CLI edge: it reads the process
//! environment, installs signal handlers, prints, and maps results to exit
//! codes (0 success, 1 a clean "no", 2 error; the whole table, with the
//! codes of jobs' outcomes, is [`exit::Exit`]). Output formatting lives here
//! only. Stdout is written with `writeln!` and `?`, so that a reader that
//! closed it (`| head`) ends the command quietly
//! ([`output::quiet_on_closed_pipe`]); messages for stderr go through
//! [`jobwarden_sys::logging::line`]. `println!` and `eprintln!` panic on a closed
//! pipe: `clippy.toml` rules them out.
//!
//! Besides one file per subcommand: `stdio.rs` (fds 0–2 opened on
//! `/dev/null` when started closed); `completions.rs` (the shell's
//! registration, and the answers it asks for at each Tab, job ids and
//! prompt names among them), `man.rs` and `cli_reference.rs` (hidden;
//! `docs/cli-reference.md`), generated from the clap types; `reload.rs` (`reload`, and the config part of `status`);
//! `waiting.rs` (prompts in the inbox as `jobs`, `show`, `logs` and
//! `events` show them); `cancel.rs` (`abort` of what has not started);
//! `queue_view.rs` (why queued jobs wait and what is paused); `redraw.rs`
//! (`--watch`: a view drawn again in place on a terminal); `exit.rs` (the
//! one table of exit codes); `watch.rs` (how the waiting commands sleep:
//! inotify, re-check, poll) and `progress.rs` (what they say meanwhile);
//! `wait/` (`scope.rs`: what `--project`/`--all` take in, `tracker.rs`: the
//! followed jobs and their exit code); `output/table.rs` (the one table
//! renderer) and `output/visible.rs` (what a job wrote, made harmless for a
//! terminal); `show/` (`show`'s facts and human form); `args.rs`
//! (`--since`/`--until`).

mod abort;
mod ack;
mod args;
mod cancel;
pub mod cli_reference;
mod completions;
mod config;
mod daemon;
mod events;
pub mod exit;
mod gc;
mod history;
mod jobs;
mod logs;
mod man;
mod metrics;
mod monitor;
mod notify;
mod output;
mod pause;
mod priority;
mod progress;
mod queue_view;
mod redraw;
mod reload;
mod retry;
mod route;
mod show;
mod status;
mod stdio;
mod submit;
mod wait;
mod waiting;
mod watch;
mod web;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use jobwarden_ledger::Ledger;
use jobwarden_model::config::{Config, Env};
use jobwarden_model::job::JobId;
use jobwarden_model::layout::Layout;

/// Exit status for a clean "no": not found, nothing matched.
pub const EXIT_NO: u8 = exit::Exit::No.code();

/// A clean "no" (exit 1): its message goes to stderr like an error's,
/// but it is an answer, not a failure.
pub use jobwarden_sys::error::No;

/// The whole `jobwarden` program: make sure fds 0 to 2 are open, parse
/// the command line, start logging, run, and map the result to an exit
/// code (errors: 2, their message and causes on stderr; see [`exit`]).
pub fn main() -> ExitCode {
    use clap::Parser;
    // Before anything opens a file: see `stdio.rs`.
    let std_fds = stdio::open_closed_std_fds();
    // A shell asking for completions (`COMPLETE=bash jobwarden -- …`) is
    // answered here, and the process ends.
    completions::register();
    let cli = Cli::parse();
    jobwarden_sys::logging::init(cli.global.log_format);
    if let Err(e) = std_fds {
        jobwarden_sys::logging::line(format_args!("jobwarden: {e}"));
        jobwarden_sys::logging::flush();
        return exit::Exit::Error.into();
    }
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            jobwarden_sys::logging::line(format_args!("jobwarden: {}", describe(&e)));
            exit::Exit::Error.into()
        }
    };
    jobwarden_sys::logging::flush();
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
            jobwarden_sys::logging::line(format_args!("jobwarden: {e}"));
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
        Command::Wait(args) => wait::run(&cli.global, &args),
        Command::Abort(args) => abort::run(&cli.global, &args),
        Command::Retry(args) => retry::run(&cli.global, &args),
        Command::Pause(args) => pause::pause(&cli.global, &args),
        Command::Resume(args) => pause::resume(&cli.global, &args),
        Command::Ack(args) => ack::run(&cli.global, &args),
        Command::Priority(args) => priority::run(&cli.global, &args),
        Command::Limit(args) => pause::limit(&cli.global, &args),
        Command::Config(cmd) => config::run(&cli.global, &cmd),
        Command::Completions(args) => completions::run(&args),
        Command::Man(args) => man::run(&args),
        Command::CliReference => cli_reference::run(),
        Command::Reload(args) => reload::run(&cli.global, &args),
        Command::Monitor(args) => monitor::run(&cli.global, &args),
        Command::Route(args) => route::run(&cli.global, &args),
        Command::History(cmd) => history::run(&cli.global, &cmd),
        Command::Gc(args) => gc::run(&cli.global, &args),
        Command::Notify(cmd) => notify::run(&cli.global, &cmd),
        Command::Metrics(args) => metrics::run(&cli.global, &args),
        Command::Web(args) => web::run(&cli.global, &args),
    }
}

/// The ledger of an existing root, for commands that read: `None` when
/// there is no root or no ledger yet (nothing ever ran), so that reading
/// never creates a root by mistake.
/// On a root that cannot be written (read-only, full), the ledger is read
/// as an immutable snapshot instead.
fn open_ledger(layout: &Layout) -> Result<Option<Ledger>, jobwarden_ledger::LedgerError> {
    let path = layout.ledger();
    // A link there (dangling or not) is not "no ledger": the open refuses it.
    if std::fs::symlink_metadata(&path).is_err() {
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

/// Resolve a `<job>` argument (see [`jobwarden_engine::lookup`]): an unknown job is a
/// clean "no" (exit 1), a malformed or ambiguous one a usage error (2).
fn resolve_job(layout: &Layout, ledger: Option<&Ledger>, arg: &str) -> anyhow::Result<JobId> {
    with_ledger(ledger, |ledger| {
        jobwarden_engine::lookup::resolve(layout, ledger, arg)
    })
}

/// [`resolve_job`] for the commands that also take a prompt waiting in the
/// inbox, which has no job yet ([`jobwarden_engine::lookup::resolve_target`]).
fn resolve_target(
    layout: &Layout,
    ledger: Option<&Ledger>,
    arg: &str,
) -> anyhow::Result<jobwarden_engine::lookup::Target> {
    with_ledger(ledger, |ledger| {
        jobwarden_engine::lookup::resolve_target(layout, ledger, arg)
    })
}

/// Run a lookup against `ledger`, or, without one yet, an in-memory one
/// that answers "not indexed" (the lookup then reads the run folders).
fn with_ledger<T>(
    ledger: Option<&Ledger>,
    lookup: impl FnOnce(&Ledger) -> Result<T, jobwarden_engine::lookup::LookupError>,
) -> anyhow::Result<T> {
    let empty;
    let ledger = match ledger {
        Some(l) => l,
        None => {
            empty = Ledger::open(std::path::Path::new(":memory:"))?;
            &empty
        }
    };
    lookup_answer(lookup(ledger))
}

/// A lookup's answer as the CLI reports it: not found is a clean "no"
/// (exit 1); malformed or ambiguous, a usage error (exit 2).
fn lookup_answer<T>(found: Result<T, jobwarden_engine::lookup::LookupError>) -> anyhow::Result<T> {
    match found {
        Ok(found) => Ok(found),
        Err(jobwarden_engine::lookup::LookupError::NotFound(msg)) => Err(No(msg).into()),
        Err(e) => Err(e.into()),
    }
}

/// The validated config and the layout of the root it selects. The
/// retention variables (`JOBWARDEN_KEEP_*`) are left to the commands that
/// prune ([`load_pruning`]): a bad one must not stop the others.
fn load(global: &crate::cli::GlobalArgs) -> anyhow::Result<(Config, Layout)> {
    let env = Env {
        retention: jobwarden_model::config::RetentionEnv::default(),
        ..Env::from_process()
    };
    let config = jobwarden_model::config::load(&choices(global), &env)?;
    let root = jobwarden_model::config::resolve_root(&choices(global), &env, &config)?;
    Ok((config, Layout::new(root)))
}

/// [`load`] for a command that prunes (`gc`, `daemon`): the retention
/// variables override the config, and a bad one is an error naming it.
fn load_pruning(global: &crate::cli::GlobalArgs) -> anyhow::Result<(Config, Layout)> {
    let (mut config, layout) = load(global)?;
    jobwarden_model::config::apply_env(&mut config, &Env::from_process())?;
    Ok((config, layout))
}

/// [`jobwarden_model::control::note_input`] by the operator running this command.
pub(crate) fn note_input(
    layout: &Layout,
    config: &Config,
    id: &jobwarden_model::job::JobId,
    op: jobwarden_model::events::Op,
    fields: serde_json::Value,
) {
    jobwarden_model::control::note_input(layout, config, id, op, fields, &operator());
}

/// Who runs this command: `alice (uid 1000)`.
pub(crate) fn operator() -> String {
    let uid = nix::unistd::getuid();
    let name = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "?".into());
    format!("{name} (uid {uid})")
}

/// The config and root for a command that reads the root or pulls a lever
/// on it (`jobs`, `show`, `logs`, `events`, `wait`, `abort`, `pause`,
/// `resume`, `ack`): an invalid config file must not leave the
/// operator blind or without the brakes while the daemon runs on the
/// config it loaded before. Its errors are said once on stderr, and the
/// built-in defaults stand in for it (see [`load_lenient`]).
fn load_for_reading(global: &crate::cli::GlobalArgs) -> anyhow::Result<(Config, Layout)> {
    let loaded = load_lenient(global)?;
    say_config_problems(&loaded.problems);
    Ok((loaded.config, loaded.layout))
}

/// [`load_for_reading`] for a command that reads what is under the root
/// or acts on its jobs (`jobs`, `show`, `logs`, `events`, `wait`,
/// `metrics`, `abort`, `ack`): the root must exist ([`root_must_exist`];
/// `route`, `retry`, `priority`, `web`, `status`, `pause`, `resume`,
/// `limit`, `gc` and `history` check it too).
fn load_existing(global: &crate::cli::GlobalArgs) -> anyhow::Result<(Config, Layout)> {
    let (config, layout) = load_for_reading(global)?;
    root_must_exist(&layout)?;
    Ok((config, layout))
}

/// A mistyped root must not read as "no jobs matched", "no job X" or
/// "not running, storage ok": no folder there is an error (exit 2) that
/// names it and what to check. Every command that reads a root says it
/// the same way.
pub(crate) fn root_must_exist(layout: &Layout) -> anyhow::Result<()> {
    let root = layout.root();
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => anyhow::bail!(
            "no jobwarden root at {}: it is not a folder; check --root, JOBWARDEN_HOME or the config's root",
            root.display()
        ),
        Err(_) if std::fs::symlink_metadata(root).is_ok_and(|m| m.is_symlink()) => anyhow::bail!(
            "no jobwarden root at {}: it is a symbolic link to nothing that can be read; \
             check the link, --root, JOBWARDEN_HOME or the config's root",
            root.display()
        ),
        Err(e) => anyhow::bail!(
            "no jobwarden root at {} ({e}): check --root, JOBWARDEN_HOME or the config's root; \
             `jobwarden daemon` creates it at its first start",
            root.display()
        ),
    }
}

/// The warning of [`load_for_reading`]: the file's first error, how many
/// more, and that the built-in defaults stand in.
fn say_config_problems(problems: &[String]) {
    if let Some(first) = problems.first() {
        let more = match problems.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        jobwarden_sys::logging::line(format!(
            "jobwarden: warning: {first}{more}; going on with the built-in defaults \
             for what the config would say (`jobwarden config check` lists every error)"
        ));
    }
}

/// The config and root for a command that must answer about a root even
/// when its config file is invalid (`status`, `reload`): the config's
/// errors are kept, the built-in defaults stand in, and the root comes
/// from `--root`, `JOBWARDEN_HOME` or the file's `root` key as long as
/// its TOML can be read.
struct Loaded {
    config: Config,
    layout: Layout,
    /// The config file resolution chose, if any.
    path: Option<std::path::PathBuf>,
    /// Every error of the config on disk (empty when it is valid).
    problems: Vec<String>,
}

fn load_lenient(global: &crate::cli::GlobalArgs) -> anyhow::Result<Loaded> {
    use jobwarden_model::config::{self, ConfigSource};
    let env = Env::from_process();
    let chosen = choices(global);
    let found = config::config_path(&chosen, &env);
    let path = found.as_ref().ok().cloned().flatten();
    let text = path.as_deref().map(config::read_file).transpose();
    let parsed = match (&found, &text, &path) {
        (Err(e), _, _) => Err(vec![e.to_string()]),
        (_, Err(e), _) => Err(vec![e.to_string()]),
        (_, Ok(Some(text)), Some(p)) => {
            config::parse(text, ConfigSource::File(p.clone())).map_err(|e| e.messages())
        }
        _ => config::parse("", ConfigSource::BuiltIn).map_err(|e| e.messages()),
    };
    let (mut config, problems) = match parsed {
        Ok(config) => (config, Vec::new()),
        Err(problems) => (config::parse("", ConfigSource::BuiltIn)?, problems),
    };
    if !problems.is_empty() {
        let table = text.ok().flatten().map(|t| t.parse::<toml::Table>());
        if matches!(table, Some(Err(_))) && chosen.root.is_none() && env.jobwarden_home.is_none() {
            anyhow::bail!(
                "{}; the root cannot be read from that file either: pass --root or set JOBWARDEN_HOME",
                problems.join("; ")
            );
        }
        config.root = table
            .and_then(Result::ok)
            .and_then(|t| t.get("root")?.as_str().map(std::path::PathBuf::from));
    }
    let root = config::resolve_root(&chosen, &env, &config)?;
    Ok(Loaded {
        config,
        layout: Layout::new(root),
        path,
        problems,
    })
}

/// What the command line chose for config resolution (`--config`, `--root`).
pub(crate) fn choices(global: &crate::cli::GlobalArgs) -> jobwarden_model::config::Choices {
    jobwarden_model::config::Choices {
        config: global.config.clone(),
        root: global.root.clone(),
    }
}
