//! Prompts waiting in the inbox, as the commands show them: a row of
//! `jobs`, the whole of `show`, and the clean "no" of `logs` and `events`
//! for something that has not started. What each waits for is
//! [`jobwarden_engine::waiting`]'s.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use super::No;
use super::output::{fmt_ago, fmt_duration, print_json, timestamp};
use jobwarden_engine::waiting::{self, Waiting};
use jobwarden_ledger::{Ledger, short_id};
use jobwarden_model::config::Config;
use jobwarden_model::layout::{Layout, PromptName};
use jobwarden_sys::clock::Timestamp;

/// A prompt in the inbox in `jobs --json` rows (`waiting`) and in
/// `show --json` (docs/cli-json.md).
#[derive(Debug, Serialize)]
pub(super) struct WaitingJson {
    label: String,
    project: String,
    name: String,
    /// `waiting` or `deferred`.
    state: &'static str,
    /// The attempt its claim starts.
    attempt: u32,
    /// Its file, relative to the root.
    path: String,
    /// Its file's mtime: dropped, or put back for another attempt.
    since: Timestamp,
    deferred_until: Option<Timestamp>,
    reason: String,
    /// The job whose next attempt its claim starts.
    retry_of: Option<String>,
    /// Its newest finished attempt and how that ended.
    last_job: Option<String>,
    last_outcome: Option<String>,
}

impl WaitingJson {
    pub(super) fn new(layout: &Layout, w: &Waiting, daemon: bool) -> Self {
        WaitingJson {
            label: w.label(),
            project: w.prompt.project.clone(),
            name: w.prompt.name.clone(),
            state: w.state(),
            attempt: w.attempt,
            path: waiting::relative(layout, &w.path),
            since: timestamp(w.since_ms),
            deferred_until: w.deferral.as_ref().map(|d| timestamp(d.until_ms)),
            reason: w.reason(daemon),
            retry_of: w.retry_of.as_ref().map(ToString::to_string),
            last_job: w.last.as_ref().map(|l| l.id.clone()),
            last_outcome: w.last.as_ref().map(|l| l.outcome.to_string()),
        }
    }
}

/// Is a daemon running on the root? Assumed so when that cannot be told
/// (it only changes the words of a reason).
pub(super) fn daemon_alive(layout: &Layout) -> bool {
    jobwarden_engine::cancel::daemon_running(layout).unwrap_or(true)
}

/// The prompt `prompt`, which the lookup found waiting; a clean "no" if
/// it was claimed (or removed) since.
pub(super) fn find(
    layout: &Layout,
    config: &Config,
    ledger: Option<&Ledger>,
    prompt: &PromptName,
) -> anyhow::Result<Waiting> {
    match waiting::find(layout, config, ledger, prompt)? {
        Some(w) => Ok(w),
        None => Err(No(format!(
            "{prompt} is no longer waiting in the inbox (claimed or removed meanwhile); try again"
        ))
        .into()),
    }
}

/// `show` of a prompt waiting in the inbox.
pub(super) fn show(
    layout: &Layout,
    config: &Config,
    ledger: Option<&Ledger>,
    prompt: &PromptName,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let w = find(layout, config, ledger, prompt)?;
    let daemon = daemon_alive(layout);
    if json {
        print_json(&ShowJson {
            id: None,
            job: None,
            paths: None,
            execution: None,
            log_tail: [],
            notifications: [],
            waiting: WaitingJson::new(layout, &w, daemon),
        })?;
    } else {
        print_human(&w, daemon).context("writing to stdout")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `show --json` of a prompt that has no job yet: the job's keys, empty,
/// and `waiting`.
#[derive(Serialize)]
struct ShowJson {
    id: Option<String>,
    job: Option<()>,
    paths: Option<()>,
    execution: Option<()>,
    log_tail: [String; 0],
    notifications: [String; 0],
    waiting: WaitingJson,
}

fn print_human(w: &Waiting, daemon: bool) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let now = Timestamp::now().epoch_ms();
    let mut line = |k: &str, v: &str| writeln!(out, "{k:<10}{v}");
    let when = |ms: u64| format!("{} ({})", fmt_ago(ms, now), timestamp(ms));
    line(
        "prompt",
        &format!("{} (in the inbox, no job yet)", w.label()),
    )?;
    line("state", &format!("{}: {}", w.state(), w.reason(daemon)))?;
    if let Some(d) = &w.deferral {
        let left = fmt_duration(d.until_ms.saturating_sub(now));
        line("until", &format!("in {left} ({})", timestamp(d.until_ms)))?;
    }
    line("waiting", &format!("since {}", when(w.since_ms)))?;
    line("file", &w.path.display().to_string())?;
    let retry = w
        .retry_of
        .as_ref()
        .map(|r| format!(" (retry of {r})"))
        .unwrap_or_default();
    line("attempt", &format!("{}{retry}", w.attempt))?;
    if let Some(last) = &w.last {
        line(
            "last run",
            &format!(
                "job {} {}, finished {}",
                short_id(&last.id),
                last.outcome,
                fmt_ago(last.finished_at, now)
            ),
        )?;
    }
    line(
        "cancel",
        &format!("jobwarden abort {} [--reason ...]", w.label()),
    )?;
    Ok(())
}

/// The clean "no" of `logs` and `events` for a prompt that has not
/// started: where it waits, and where its last attempt's output is.
pub(super) fn not_started(
    layout: &Layout,
    config: &Config,
    ledger: Option<&Ledger>,
    prompt: &PromptName,
    what: &str,
) -> anyhow::Error {
    let w = match find(layout, config, ledger, prompt) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let last = w
        .last
        .as_ref()
        .map(|l| {
            format!(
                "; its last attempt ({}): `jobwarden {what} {}`",
                l.outcome, l.id
            )
        })
        .unwrap_or_default();
    No(format!(
        "{} has not started: it is {} in the inbox ({}), so it has no {} yet{last}",
        w.label(),
        w.state(),
        w.reason(daemon_alive(layout)),
        if what == "logs" { "log" } else { "events" },
    ))
    .into()
}
