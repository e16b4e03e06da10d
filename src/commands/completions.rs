//! Shell completion, computed by the binary at each Tab (`clap_complete`'s
//! dynamic completion): commands, flags and their values from the clap
//! definitions, and for every `<job>` argument the jobs and prompts of the
//! root the command line names ([`jobs`]).
//!
//! `jobwarden completions SHELL` prints the shell's registration: a short
//! script that asks `COMPLETE=SHELL jobwarden -- <words>` for candidates
//! ([`register`] answers that before anything else runs). It works sourced
//! from a shell's startup file and installed where the shell looks for
//! completions (`install.sh` does that).
//!
//! Candidates are read cheaply and never fail loudly: the job index's
//! live jobs and a page of the newest, and one scan of the inbox; a root
//! that does not exist, or an index that cannot be read, gives fewer
//! candidates or none, and nothing on stderr.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Command, CommandFactory};
use clap_complete::ArgValueCandidates;
use clap_complete::engine::CompletionCandidate;
use clap_complete::env::Shells;

use crate::cli::{Cli, CompletionsArgs, GlobalArgs};
use jobwarden_ledger::{JobFilter, Ledger, short_id};
use jobwarden_model::layout::{self, InboxEntry, Layout};

/// The environment variable that asks for completions.
const VAR: &str = "COMPLETE";

/// The program the registration calls, found on `PATH` when the shell
/// completes: the installed scripts must not name the folder they were
/// made from.
const PROGRAM: &str = "jobwarden";

/// Newest jobs offered besides the live ones.
const RECENT: usize = 100;
/// Live jobs offered at most.
const LIVE: usize = 500;

/// The states of a job that has not ended.
const LIVE_STATES: [&str; 4] = ["queued", "preparing", "running", "publishing"];

/// Answer a completion request (`COMPLETE=SHELL jobwarden -- <words>`)
/// and exit; return at once when the process was not started for one.
pub fn register() {
    clap_complete::CompleteEnv::with_factory(|| with_job_candidates(Cli::command()))
        .var(VAR)
        .complete();
}

/// `cmd` with [`jobs`] completing every argument that takes a job (its
/// value is named `JOB`), in every subcommand.
fn with_job_candidates(mut cmd: Command) -> Command {
    let id = |a: &clap::Arg| a.get_id().to_string();
    // `mut_arg` moves the argument to the end: every positional is moved,
    // in order and with its index said, so that none changes place.
    let positionals: Vec<String> = cmd.get_positionals().map(id).collect();
    if cmd.get_positionals().any(takes_a_job) {
        for (i, name) in positionals.into_iter().enumerate() {
            cmd = cmd.mut_arg(name, |a| with_candidates(a).index(i + 1));
        }
    }
    let options: Vec<String> = cmd
        .get_arguments()
        .filter(|a| !a.is_positional() && takes_a_job(a))
        .map(id)
        .collect();
    for name in options {
        cmd = cmd.mut_arg(name, with_candidates);
    }
    let subcommands: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    for name in subcommands {
        cmd = cmd.mut_subcommand(name, with_job_candidates);
    }
    cmd
}

/// Does `arg` take a job (`<JOB>`)?
fn takes_a_job(arg: &clap::Arg) -> bool {
    arg.get_value_names().is_some_and(|n| n == ["JOB"])
}

/// `arg` completed by [`jobs`] if it takes a job.
fn with_candidates(arg: clap::Arg) -> clap::Arg {
    match takes_a_job(&arg) {
        true => arg.add(ArgValueCandidates::new(jobs)),
        false => arg,
    }
}

/// `jobwarden completions SHELL`: the shell's registration script.
pub fn run(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let name = args.shell.to_string();
    let shells = Shells::builtins();
    let shell = shells
        .completer(&name)
        .with_context(|| format!("no completion for the shell {name}"))?;
    let mut script = Vec::new();
    shell
        .write_registration(VAR, PROGRAM, PROGRAM, PROGRAM, &mut script)
        .context("writing the completion script")?;
    if name == "zsh" {
        // Autoloaded from `fpath` as `_jobwarden`, the file's body runs at
        // the first Tab: complete that Tab too, not only register.
        script.extend_from_slice(
            b"\nif [ \"${funcstack[1]}\" = \"_jobwarden\" ]; then\n    \
              _clap_dynamic_completer_jobwarden \"$@\"\nfi\n",
        );
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&script).context("writing to stdout")?;
    out.flush().context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// The candidates of a `<job>` argument: live jobs, then the newest, by
/// their short ids (as tables show them), then prompt names
/// (`project/name`) of those jobs and of the prompts waiting in the inbox.
fn jobs() -> Vec<CompletionCandidate> {
    let Some(layout) = root_of_the_line() else {
        return Vec::new();
    };
    let mut found = Candidates::default();
    if let Ok(Some(ledger)) = super::open_ledger(&layout) {
        found.indexed(&ledger);
    }
    found.waiting(&layout);
    found.list
}

/// The root the command line being completed names (`--root`,
/// `--config`), else the environment's and the config's, as the command
/// would resolve it; `None` when there is none there.
fn root_of_the_line() -> Option<Layout> {
    let words: Vec<OsString> = std::env::args_os()
        .skip_while(|w| w != "--")
        .skip(1)
        .collect();
    let global = GlobalArgs {
        root: flag_value(&words, "--root").map(Into::into),
        config: flag_value(&words, "--config").map(Into::into),
        ..GlobalArgs::default()
    };
    let loaded = super::load_lenient(&global).ok()?;
    loaded.layout.root().is_dir().then_some(loaded.layout)
}

/// The value of `flag` in `words` (`--root DIR` or `--root=DIR`), the last
/// one given.
fn flag_value(words: &[OsString], flag: &str) -> Option<OsString> {
    let mut value = None;
    for (i, word) in words.iter().enumerate() {
        let bytes = word.as_encoded_bytes();
        if word == flag {
            value = words.get(i + 1).cloned();
        } else if let Some(rest) = bytes
            .strip_prefix(flag.as_bytes())
            .and_then(|r| r.strip_prefix(b"="))
        {
            value = Some(OsString::from(String::from_utf8_lossy(rest).into_owned()));
        }
    }
    value
}

/// The candidates gathered so far, each value once.
#[derive(Default)]
struct Candidates {
    list: Vec<CompletionCandidate>,
    seen: std::collections::HashSet<String>,
    /// Prompt names, offered after the jobs.
    prompts: Vec<(String, String)>,
}

impl Candidates {
    fn add(&mut self, value: String, help: String) {
        if self.seen.insert(value.clone()) {
            self.list
                .push(CompletionCandidate::new(value).help(Some(help.into())));
        }
    }

    /// Live jobs, then the newest, from the job index; their prompts'
    /// names after them.
    fn indexed(&mut self, ledger: &Ledger) {
        let live = JobFilter {
            states: LIVE_STATES.iter().map(|s| s.to_string()).collect(),
            ..JobFilter::default()
        };
        let mut jobs = ledger.list_jobs(&live, LIVE).unwrap_or_default();
        jobs.extend(
            ledger
                .list_jobs(&JobFilter::default(), RECENT)
                .unwrap_or_default(),
        );
        for job in &jobs {
            let prompt = super::output::prompt_label(&job.project, &job.name);
            // The index learns a job's start late: "live" is what it knows.
            let state = match LIVE_STATES.contains(&job.state.as_str()) {
                true => "live",
                false => job.state.as_str(),
            };
            self.add(short_id(&job.id), format!("{prompt}, {state}"));
            self.prompts.push((prompt, "prompt".to_owned()));
        }
        for (prompt, help) in std::mem::take(&mut self.prompts) {
            self.add(prompt, help);
        }
    }

    /// The prompts waiting in the inbox (they have no job yet).
    fn waiting(&mut self, layout: &Layout) {
        let inbox = layout.inbox();
        for found in jobwarden_engine::inbox::scan(layout.root(), &inbox) {
            if let InboxEntry::Prompt(prompt) = layout::classify_inbox_path(&inbox, &found.path) {
                let label = super::output::prompt_label(&prompt.project, &prompt.name);
                self.add(label, "prompt waiting in the inbox".to_owned());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<OsString> {
        w.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_root_flag_is_read_in_either_form() {
        let line = words(&["jobwarden", "--root", "/a", "show", "x"]);
        assert_eq!(flag_value(&line, "--root"), Some("/a".into()));
        let line = words(&["jobwarden", "show", "--root=/b", "x"]);
        assert_eq!(flag_value(&line, "--root"), Some("/b".into()));
        assert_eq!(flag_value(&line, "--config"), None);
        // Still being typed: no value yet.
        assert_eq!(flag_value(&words(&["jobwarden", "--root"]), "--root"), None);
    }

    /// Completing as the shell would: the values offered for `words`.
    fn offered(words: &[&str]) -> Vec<String> {
        let mut cmd = with_job_candidates(Cli::command());
        cmd.build();
        let args: Vec<OsString> = words.iter().map(OsString::from).collect();
        let at = args.len() - 1;
        clap_complete::engine::complete(&mut cmd, args, at, None)
            .unwrap_or_default()
            .iter()
            .map(|c| c.get_value().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn arguments_keep_their_places_when_jobs_complete_them() {
        let mut cmd = with_job_candidates(Cli::command());
        cmd.build();
        let priority = cmd.find_subcommand("priority").expect("priority");
        let places: Vec<(String, Option<usize>)> = priority
            .get_positionals()
            .map(|a| (a.get_id().to_string(), a.get_index()))
            .collect();
        assert_eq!(
            places,
            [
                ("job".to_owned(), Some(1)),
                ("priority".to_owned(), Some(2))
            ]
        );
        // The second place takes a number: no job is offered there.
        assert!(
            offered(&["jobwarden", "priority", "x", "-"])
                .iter()
                .all(|v| v.starts_with('-'))
        );
    }
}
