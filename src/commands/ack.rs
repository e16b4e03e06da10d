//! `jobwarden ack <job>… | --all [--json]`: acknowledge what needs
//! attention, so that `status` stops reporting it (its overall state is
//! no longer `needs_attention` for it, and it counts it as acknowledged).
//!
//! A job is acknowledged through its prompt: the prompt's newest
//! execution must be this job's and must have gone wrong. A prompt named
//! (`project/name`) means its newest execution, even while a retry of it
//! waits or runs (that retry has no execution yet). The record is a
//! row in the ledger (`acknowledgements`, see `ledger/attention.rs`), so a
//! newer run of the same prompt that goes wrong needs attention again.
//!
//! Every argument is resolved before anything is written (exit 2 if one is
//! malformed or ambiguous, 1 if unknown). A job that needs no
//! acknowledgement (it succeeded, it has not ended, a newer run of its
//! prompt exists) is reported on stderr; the exit status is 1 when nothing
//! was acknowledged or already acknowledged, else 0.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;
use serde_json::json;

use super::output::{fmt_ago, print_json, prompt_label, timestamp};
use super::{EXIT_NO, No};
use crate::cli::{AckArgs, GlobalArgs};
use jobwarden_ledger::{Attention, Ledger, Standing, short_id};
use jobwarden_model::events::Op;
use jobwarden_model::job::JobId;
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;

/// What `ack` did, as `--json` prints it.
#[derive(Debug, Default, Serialize)]
struct Report {
    /// Acknowledged now.
    acknowledged: Vec<Acked>,
    /// Acknowledged before.
    already_acknowledged: Vec<Acked>,
    /// Named, but nothing of them needs attention: why.
    not_needed: Vec<NotNeeded>,
}

#[derive(Debug, Serialize)]
struct Acked {
    job_id: String,
    project: String,
    name: String,
    outcome: String,
    finished_at: Timestamp,
    reason: Option<String>,
}

impl From<Attention> for Acked {
    fn from(a: Attention) -> Self {
        Acked {
            finished_at: timestamp(a.finished_at),
            job_id: a.job_id,
            project: a.project,
            name: a.name,
            outcome: a.outcome,
            reason: a.reason,
        }
    }
}

#[derive(Debug, Serialize)]
struct NotNeeded {
    job_id: String,
    why: String,
}

pub fn run(global: &GlobalArgs, args: &AckArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load_existing(global)?;
    let Some(mut ledger) = open_writable(&layout)? else {
        return Err(No(format!(
            "nothing needs attention: no ledger at {} (nothing ever ran)",
            layout.ledger().display()
        ))
        .into());
    };
    let by = std::env::var("USER").ok().filter(|u| !u.is_empty());
    let now = Timestamp::now().epoch_ms();
    let report = if args.all {
        let acked = ledger.acknowledge_all(now, by.as_deref())?;
        if acked.is_empty() {
            return Err(No("nothing needs attention: no prompt's last run went wrong, or every one is acknowledged".into()).into());
        }
        Report {
            acknowledged: acked.into_iter().map(Acked::from).collect(),
            ..Report::default()
        }
    } else {
        let mut ids = Vec::with_capacity(args.jobs.len());
        for arg in &args.jobs {
            let id = super::resolve_job(&layout, Some(&ledger), arg)?;
            ids.push(last_run_if_named(&layout, &ledger, arg, id)?);
        }
        acknowledge_each(&mut ledger, &ids, now, by.as_deref())?
    };
    for acked in &report.acknowledged {
        if let Ok(id) = JobId::parse(&acked.job_id) {
            super::note_input(&layout, &config, &id, Op::Acknowledged, json!({}));
        }
    }
    say(&report, args.json)?;
    if report.acknowledged.is_empty() && report.already_acknowledged.is_empty() {
        return Ok(ExitCode::from(EXIT_NO));
    }
    Ok(ExitCode::SUCCESS)
}

/// The ledger, for writing. `None` when there is none yet.
fn open_writable(layout: &Layout) -> anyhow::Result<Option<Ledger>> {
    let path = layout.ledger();
    if !path.exists() {
        return Ok(None);
    }
    Ok(Some(Ledger::open(&path).with_context(
        || "acknowledgements are written to the ledger, which must be writable",
    )?))
}

/// A prompt named (`project/name`, or its bare name) while a job of it
/// has not ended (a retry queued after a failure): the prompt's last run
/// is meant, the one `status` says needs attention. Else `id` as resolved.
fn last_run_if_named(
    layout: &Layout,
    ledger: &Ledger,
    arg: &str,
    id: JobId,
) -> anyhow::Result<JobId> {
    if ledger.standing_of(id.as_str())?.is_some() {
        return Ok(id);
    }
    let prompt = match jobwarden_model::job::JobRecord::load_job(layout, &id) {
        Ok(rec) => Some((rec.project, rec.name)),
        Err(_) => ledger
            .indexed_job(id.as_str())?
            .map(|j| (j.project, j.name)),
    };
    let Some((project, name)) = prompt else {
        return Ok(id);
    };
    let named = arg.strip_suffix(".prompt.md").unwrap_or(arg);
    if named != prompt_label(&project, &name) && named != name {
        return Ok(id);
    }
    match ledger.newest_execution_of(&project, &name)? {
        Some(last) => JobId::parse(&last.id).map_err(anyhow::Error::msg),
        None => Ok(id),
    }
}

/// Acknowledge each job that needs it; say why the others need nothing.
fn acknowledge_each(
    ledger: &mut Ledger,
    ids: &[JobId],
    now: u64,
    by: Option<&str>,
) -> anyhow::Result<Report> {
    let mut report = Report::default();
    for id in ids {
        let id = id.as_str();
        let not_needed = |why: String| NotNeeded {
            job_id: id.to_owned(),
            why,
        };
        match ledger.standing_of(id)? {
            None => report.not_needed.push(not_needed(format!(
                "job {id} has not ended (or its end is not recorded yet): nothing to acknowledge"
            ))),
            Some(Standing::Fine(newest)) => report.not_needed.push(not_needed(match newest {
                Some((newest, outcome)) if newest == id => {
                    format!("job {id} ended {outcome}: nothing to acknowledge")
                }
                Some((newest, outcome)) => format!(
                    "a newer run of job {id}'s prompt, {newest}, ended {outcome}: nothing needs attention"
                ),
                None => format!("job {id}: nothing to acknowledge"),
            })),
            Some(Standing::Needs { attention, .. }) if attention.job_id != id => {
                report.not_needed.push(not_needed(format!(
                    "job {id} is not the last run of {}: {} ({}) is, and needs attention; `jobwarden ack {}` acknowledges it",
                    prompt_label(&attention.project, &attention.name),
                    attention.job_id,
                    attention.outcome,
                    attention.job_id
                )))
            }
            Some(Standing::Needs {
                attention,
                acknowledged,
            }) => {
                if !acknowledged && ledger.acknowledge(id, now, by)? {
                    report.acknowledged.push(attention.into());
                } else {
                    report.already_acknowledged.push(attention.into());
                }
            }
        }
    }
    Ok(report)
}

fn say(report: &Report, json: bool) -> anyhow::Result<()> {
    for n in &report.not_needed {
        jobwarden_sys::logging::line(format_args!("jobwarden: {}", n.why));
    }
    if json {
        return print_json(report);
    }
    let now = Timestamp::now().epoch_ms();
    let mut out = std::io::stdout().lock();
    for (what, list) in [
        ("acknowledged", &report.acknowledged),
        ("already acknowledged", &report.already_acknowledged),
    ] {
        for a in list {
            writeln!(
                out,
                "{what}: {} {} ({}, ended {})",
                prompt_label(&a.project, &a.name),
                a.outcome,
                short_id(&a.job_id),
                fmt_ago(a.finished_at.epoch_ms(), now)
            )?;
        }
    }
    Ok(())
}
