//! `jobwarden retry <job> [--now]`: put the prompt of a job that has ended
//! back in the inbox for another attempt.
//!
//! The archived prompt is copied (the archive keeps the history) to the
//! prompt's inbox folder and renamed to `<name>.prompt.md` without
//! replacing anything, with a retry request beside it so that the daemon
//! claims it as attempt `n + 1` of this job, and with `--now` without
//! waiting for the cooldown (`retry::request`). A job that has not ended,
//! or a prompt of that name already waiting or running, is refused
//! (exit 2): the operator decides what happens to those first. Retries
//! take turns (`retry.lock` at the root), and a job is retried once: a
//! second retry of it, racing the first or after it, is a clean "no"
//! (exit 1) saying that another retry already put it back.

use std::process::ExitCode;

use anyhow::{Context, bail};

use super::No;
use super::output::{print_line, prompt_label};
use crate::cli::{GlobalArgs, RetryArgs};
use crate::fsio;
use crate::job::{JobId, JobRecord};
use crate::layout::Layout;
use crate::retry::request::{self, PutBack};

pub fn run(global: &GlobalArgs, args: &RetryArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load(global)?;
    let id = {
        let ledger = super::open_ledger(&layout)?;
        super::resolve_job(&layout, ledger.as_ref(), &args.job)?
    };
    // One retry at a time: whoever waited here sees what the one before it
    // left, and decides on the record as it is now.
    let _turn = request::take_turn(&layout)?;
    let rec = load_record(&layout, &id)?;
    let prompt = rec.prompt_name();
    let label = prompt_label(&rec.project, &rec.name);
    check_not_retried(&layout, &rec, &label)?;
    check_retryable(&layout, &rec, &label)?;
    let archived = archived_prompt(&layout, &rec, config.max_prompt_bytes)?;
    let placed = request::put_back(&layout, &prompt, &archived, &id, rec.attempt, args.now)?;
    if placed == PutBack::NameTaken {
        bail!(
            "{label} appeared in the inbox meanwhile ({}); nothing was put back",
            layout.waiting_prompt(&prompt).display()
        );
    }
    if let Err(e) = request::mark_retried(&layout, &id, rec.attempt) {
        // The request beside the prompt still refuses a second retry
        // until the prompt is claimed.
        crate::logging::line(format_args!("jobwarden: warning: {e}"));
    }
    let when = if args.now {
        "; it starts without waiting for a cooldown"
    } else {
        ""
    };
    print_line(format_args!(
        "{label} put back for attempt {}{when}",
        rec.attempt + 1
    ))?;
    Ok(ExitCode::SUCCESS)
}

fn load_record(layout: &Layout, id: &JobId) -> anyhow::Result<JobRecord> {
    if !layout.job_json(id).exists() {
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
    let id = &rec.job_id;
    if !rec.state.is_terminal() {
        bail!(
            "job {id} ({label}) is still {}; abort it first (`jobwarden abort {id}`) or let it end",
            rec.state
        );
    }
    let prompt = rec.prompt_name();
    let waiting = layout.waiting_prompt(&prompt);
    if std::fs::symlink_metadata(&waiting).is_ok() {
        bail!(
            "{label} already waits in the inbox ({}); it is claimed as the next attempt once any cooldown ends",
            waiting.display()
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
        crate::terminal::already_placed(layout, rec, &guess)
    });
    let path = match (found, rec.archive_path.as_deref()) {
        (Some(path), _) => path,
        (None, Some(rel)) => layout.resolve(rel),
        (None, None) => bail!(
            "job {id}'s prompt is not in the archive ({}); retry the newest job of {} instead",
            rec.disposition
                .as_deref()
                .unwrap_or("it was never archived"),
            prompt_label(&rec.project, &rec.name)
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
            crate::config::format_size(max)
        );
    }
    Ok(bytes)
}
