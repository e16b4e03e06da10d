//! A retry asked for by hand (`jobwarden retry`, the web page's button):
//! put the prompt of a job that has ended back in the inbox for another
//! attempt.
//!
//! The archived prompt is copied (the archive keeps the history) to the
//! prompt's inbox folder and renamed to `<name>.prompt.md` without
//! replacing anything, with a retry request beside it so that the daemon
//! claims it as attempt `n + 1` of this job, and with `now` without
//! waiting for the cooldown ([`super::request`]). A job that has not
//! ended, or a prompt of that name already waiting or running, is refused:
//! the operator decides what happens to those first. Retries take turns
//! (`retry.lock` at the root), and a job is retried once: a second retry
//! of it, racing the first or after it, is a clean "no" ([`No`]) saying
//! that another retry already put it back.
//!
//! `now` always overrides a cooldown: when the prompt already waits in the
//! inbox, deferred by its cooldown (requeued by the policy, put back by an
//! earlier retry, or dropped again), nothing is put back; a request naming
//! the waiting file lifts its cooldown, and the daemon claims it at once
//! as the next attempt of the prompt's newest run.

use std::path::PathBuf;

use anyhow::{Context, bail};
use serde_json::json;

use super::request::{self, PutBack};
use jobwarden_ledger::Ledger;
use jobwarden_model::config::Config;
use jobwarden_model::events::Op;
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::Layout;
use jobwarden_sys::error::No;
use jobwarden_sys::fsio;

/// What a retry did.
#[derive(Debug)]
pub enum Retried {
    /// The prompt is back in the inbox for `attempt`.
    PutBack { attempt: u32, now: bool },
    /// It already waited in `waiting`; its cooldown is lifted and it
    /// starts at once as `attempt`, continuing job `after`.
    Hastened {
        waiting: PathBuf,
        attempt: u32,
        after: JobId,
    },
    /// It waited, and was claimed before its cooldown could be lifted.
    ClaimedMeanwhile { waiting: PathBuf },
}

impl Retried {
    /// What happened, in a sentence naming the prompt (`label`) and the
    /// job retried (`id`).
    pub fn say(&self, label: &str, id: &JobId) -> String {
        match self {
            Retried::PutBack { attempt, now } => {
                let when = if *now {
                    "; it starts without waiting for a cooldown"
                } else {
                    ""
                };
                format!("{label} put back for attempt {attempt}{when}")
            }
            Retried::Hastened {
                waiting,
                attempt,
                after,
            } => {
                let after = if after == id {
                    String::new()
                } else {
                    format!(", after job {after}")
                };
                format!(
                    "{label} waits in the inbox ({}); its cooldown is lifted: it starts at once as attempt {attempt}{after}",
                    waiting.display()
                )
            }
            Retried::ClaimedMeanwhile { waiting } => format!(
                "{label} was claimed meanwhile ({} is gone); `jobwarden jobs` shows its job",
                waiting.display()
            ),
        }
    }
}

/// Retry job `id`, as `by` asks (recorded in its events). Errors: a
/// [`No`] when another retry already put it back; any other when it
/// cannot be retried, saying why and what to do.
pub fn retry(
    layout: &Layout,
    config: &Config,
    ledger: Option<&Ledger>,
    id: &JobId,
    now: bool,
    by: &str,
) -> anyhow::Result<(JobRecord, Retried)> {
    // One retry at a time: whoever waited here sees what the one before it
    // left, and decides on the record as it is now.
    let _turn = request::take_turn(layout)?;
    let rec = load_record(layout, id)?;
    let prompt = rec.prompt_name();
    let label = prompt.to_string();
    // A retry without `now` that already put this job back may be made
    // `now`; any other earlier retry of it refuses this one.
    let upgrade = now && request::pending_for(layout, &prompt, id).is_some_and(|p| !p.now);
    if !upgrade {
        check_not_retried(layout, &rec, &label)?;
    }
    let note = |fields: serde_json::Value| {
        jobwarden_model::control::note_input(layout, config, id, Op::RetryRequested, fields, by);
    };
    if now && std::fs::symlink_metadata(layout.waiting_prompt(&prompt)).is_ok() {
        let hastened = hasten(layout, ledger, &rec, &label)?;
        note(json!({"now": true, "cooldown_lifted": true}));
        return Ok((rec, hastened));
    }
    check_retryable(layout, &rec, &label)?;
    let archived = archived_prompt(layout, &rec, config.max_prompt_bytes)?;
    let placed = request::put_back(layout, &prompt, &archived, id, rec.attempt, now)?;
    if placed == PutBack::NameTaken {
        bail!(
            "{label} appeared in the inbox meanwhile ({}); nothing was put back",
            layout.waiting_prompt(&prompt).display()
        );
    }
    if let Err(e) = request::mark_retried(layout, id, rec.attempt) {
        // The request beside the prompt still refuses a second retry
        // until the prompt is claimed.
        jobwarden_sys::logging::line(format_args!("jobwarden: warning: {e}"));
    }
    note(json!({"now": now, "attempt": rec.attempt + 1}));
    let attempt = rec.attempt + 1;
    Ok((rec, Retried::PutBack { attempt, now }))
}

/// `now` for a prompt that already waits in the inbox: lift its
/// cooldown. The claim continues the prompt's newest run (what the daemon
/// would continue anyway), or this job when the ledger knows of none.
fn hasten(
    layout: &Layout,
    ledger: Option<&Ledger>,
    rec: &JobRecord,
    label: &str,
) -> anyhow::Result<Retried> {
    check_ended(rec, label)?;
    let newest = ledger
        .and_then(|l| l.last_run(&rec.project, &rec.name).ok().flatten())
        .and_then(|last| Some((JobId::parse(&last.id).ok()?, last.attempt)));
    let prior = newest.unwrap_or_else(|| (rec.job_id.clone(), rec.attempt));
    let prompt = rec.prompt_name();
    let waiting = layout.waiting_prompt(&prompt);
    let Some(made) = request::hasten(layout, &prompt, prior)? else {
        return Ok(Retried::ClaimedMeanwhile { waiting });
    };
    if layout.run_dir(&made.retry_of).is_dir() {
        if let Err(e) = request::mark_retried(layout, &made.retry_of, made.attempt) {
            jobwarden_sys::logging::line(format_args!("jobwarden: warning: {e}"));
        }
    }
    Ok(Retried::Hastened {
        waiting,
        attempt: made.attempt + 1,
        after: made.retry_of,
    })
}

/// Refuse a job that has not ended.
fn check_ended(rec: &JobRecord, label: &str) -> anyhow::Result<()> {
    if !rec.state.is_terminal() {
        let id = &rec.job_id;
        bail!(
            "job {id} ({label}) is still {}; abort it first (`jobwarden abort {id}`) or let it end",
            rec.state
        );
    }
    Ok(())
}

fn load_record(layout: &Layout, id: &JobId) -> anyhow::Result<JobRecord> {
    if !layout.has_record(id) {
        return Err(No(format!(
            "job {id} has no record under {} (pruned by retention?)",
            layout.runs().display()
        ))
        .into());
    }
    Ok(JobRecord::load_job(layout, id)?)
}

/// Refuse (a clean "no") a job that a retry already put back: its prompt
/// waits with that retry's request, or the job is marked as retried.
fn check_not_retried(layout: &Layout, rec: &JobRecord, label: &str) -> anyhow::Result<()> {
    let id = &rec.job_id;
    let prompt = rec.prompt_name();
    if request::pending_for(layout, &prompt, id).is_some() {
        return Err(No(format!(
            "job {id} ({label}) was already put back by another retry: {} waits in the inbox",
            layout.waiting_prompt(&prompt).display()
        ))
        .into());
    }
    let Some(retried) = request::retried(layout, id) else {
        return Ok(());
    };
    let what = retried
        .map(|r| format!(" for attempt {} at {}", r.attempt, r.requested_at))
        .unwrap_or_default();
    Err(No(format!(
        "job {id} ({label}) was already put back{what} by another retry ({}); retry the newest job of {label} instead",
        layout.retried_marker(id).display()
    ))
    .into())
}

/// Refuse a job that has not ended, and a prompt already in the inbox.
fn check_retryable(layout: &Layout, rec: &JobRecord, label: &str) -> anyhow::Result<()> {
    check_ended(rec, label)?;
    let prompt = rec.prompt_name();
    let waiting = layout.waiting_prompt(&prompt);
    if std::fs::symlink_metadata(&waiting).is_ok() {
        bail!(
            "{label} already waits in the inbox ({}); it is claimed as the next attempt once any cooldown ends (`jobwarden retry {} --now` starts it at once)",
            waiting.display(),
            rec.job_id
        );
    }
    let running = layout.running_prompt(&prompt);
    if std::fs::symlink_metadata(&running).is_ok() {
        bail!(
            "a job of {label} holds {}; let it end or abort it first",
            running.display()
        );
    }
    Ok(())
}

/// The bytes of the job's archived prompt.
fn archived_prompt(layout: &Layout, rec: &JobRecord, max: u64) -> anyhow::Result<Vec<u8>> {
    let id = &rec.job_id;
    // A record that lost track of its archived prompt (an older daemon cut
    // short while finishing) still finds it by name and digest.
    let found = match rec.archive_path.as_deref() {
        Some(rel) => Some(layout.resolve(rel)).filter(|p| p.exists()),
        None => None,
    }
    .or_else(|| {
        let guess = layout.archived_prompt(rec.state, &rec.prompt_name(), id);
        jobwarden_model::job::already_placed(layout, rec, &guess)
    });
    let path = match (found, rec.archive_path.as_deref()) {
        (Some(path), _) => path,
        (None, Some(rel)) => layout.resolve(rel),
        (None, None) => bail!(
            "job {id}'s prompt is not in the archive ({}); retry the newest job of {} instead",
            rec.disposition
                .as_deref()
                .unwrap_or("it was never archived"),
            rec.prompt_name()
        ),
    };
    let (bytes, over) = match fsio::read_capped(layout.root(), &path, max) {
        Ok(read) => read,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "job {id}'s archived prompt {} is gone (retention prunes archived prompts); drop the prompt again by hand",
            path.display()
        ),
        Err(e) => return Err(e).context("reading the archived prompt"),
    };
    if over {
        bail!(
            "the archived prompt {} is over max_prompt_bytes ({}); the daemon would reject it",
            path.display(),
            jobwarden_model::config::format_size(max)
        );
    }
    Ok(bytes)
}
