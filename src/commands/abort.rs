//! `jobwarden abort <job>… | --all [--reason R] [--wait]`: write each job's
//! ABORT marker, the same contract any tool may use. What has not started
//! is cancelled (`commands/cancel.rs`): a prompt waiting in the inbox,
//! named `project/name` or `name`, is claimed and ended `cancelled` here;
//! a queued job is too when no daemon runs to see its marker.
//!
//! Every argument is resolved before anything is written: one bad argument
//! writes no marker at all (exit 2 if malformed or ambiguous, 1 if
//! unknown). `--all` takes the jobs that have not ended from the job index,
//! each confirmed by its `job.json` (the record wins over a stale index);
//! without a ledger it reads the run folders. A job that already ended is
//! reported and not marked, as is a job whose marker is already there
//! (another abort went first: the marker is never replaced); either makes
//! the exit status 1 only when nothing else was aborted. `--wait` follows
//! the record of each job marked (or already marked) until it has ended
//! (see `watch.rs`), prints its final state as it arrives, and exits with
//! the code of the ends (`exit.rs`), an abort or a cancel counting as the
//! success it was asked for.

use anyhow::Context;
use std::collections::HashSet;
use std::io::Write;
use std::process::ExitCode;

use super::exit::Exit;
use super::output::{final_state, prompt_label};
use super::wait::tracker::Tracker;
use super::watch::{POLL, RECHECK, Watch, Woken};
use super::{EXIT_NO, No, cancel};
use crate::cli::{AbortArgs, GlobalArgs};
use jobwarden_engine::lookup::Target;
use jobwarden_ledger::Ledger;
use jobwarden_model::abort;
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::Layout;

/// The states of a job that has not ended.
const UNFINISHED: [&str; 4] = ["queued", "preparing", "running", "publishing"];
/// Upper bound on the jobs `--all` reads from the index.
const ALL_LIMIT: usize = 1_000_000;

pub fn run(global: &GlobalArgs, args: &AbortArgs) -> anyhow::Result<ExitCode> {
    abort_jobs(global, args)
}

fn abort_jobs(global: &GlobalArgs, args: &AbortArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load_existing(global)?;
    let ledger = super::open_ledger(&layout)?;
    let targets = if args.all {
        let ids = unfinished(&layout, ledger.as_ref())?;
        ids.into_iter().map(Target::Job).collect()
    } else {
        match resolve_all(&layout, ledger.as_ref(), &args.jobs)? {
            Ok(targets) => targets,
            Err(code) => return Ok(code),
        }
    };
    drop(ledger);
    if args.all && targets.is_empty() {
        return Err(No("no job to abort: none is queued or running".into()).into());
    }
    let mut out = std::io::stdout().lock();
    let mut cx = cancel::Context::new(&layout, &config, args.reason.as_deref());
    let (marked, already) = mark_all(&mut cx, &targets, args.all, &mut out)?;
    let mut ends = Exit::Success;
    if args.wait && !(marked.is_empty() && already.is_empty()) {
        ends = wait_for(&layout, [marked.clone(), already].concat(), &mut out)?;
    }
    if marked.is_empty() {
        if args.all {
            jobwarden_sys::logging::line("jobwarden: nothing aborted: every job had already ended");
        }
        return Ok(ExitCode::from(EXIT_NO));
    }
    Ok(ends.into())
}

/// Mark each target, saying what was done; the jobs marked, and those
/// whose abort another request had already asked for. A stdout that fails
/// (a reader that closed it) stops the saying, not the marking: the error
/// is returned once every target is marked.
fn mark_all(
    cx: &mut cancel::Context<'_>,
    targets: &[Target],
    all: bool,
    out: &mut impl Write,
) -> anyhow::Result<(Vec<JobId>, Vec<JobId>)> {
    let mut marked = Vec::new();
    let mut waiting = Vec::new();
    let mut said = Ok(());
    for target in targets {
        let (id, marking) = act(cx, target, all)?;
        let text = match marking {
            Marking::Marked(text) => {
                marked.extend(id);
                text
            }
            Marking::Ended(text) => text,
            Marking::AlreadyRequested(text) => {
                waiting.extend(id);
                text
            }
            Marking::Missing(text) => {
                jobwarden_sys::logging::line(format_args!("jobwarden: {text}"));
                continue;
            }
            Marking::Skipped => continue,
        };
        if said.is_ok() {
            said = writeln!(out, "{text}");
        }
    }
    said.and_then(|()| out.flush())
        .context("writing to stdout")?;
    Ok((marked, waiting))
}

/// Abort one target: a job is marked (or, queued with no daemon
/// running, cancelled here); a prompt waiting in the inbox is cancelled.
/// The job concerned, for `--wait`, and what was done.
fn act(
    cx: &mut cancel::Context<'_>,
    target: &Target,
    all: bool,
) -> anyhow::Result<(Option<JobId>, Marking)> {
    match target {
        Target::Job(id) => {
            let queued =
                JobRecord::load_job(cx.layout, id).is_ok_and(|r| r.state == JobState::Queued);
            if queued {
                if let Some(done) = cancel::queued_alone(cx, id)? {
                    return Ok((Some(id.clone()), done));
                }
            }
            let marking = mark(cx.layout, id, cx.reason, all)?;
            if queued && matches!(marking, Marking::Marked(_)) {
                // Return only once its command can no longer start.
                let patience = cx.config.abort_grace + cancel::END_PATIENCE;
                if cancel::wait_for_end(cx.layout, id, patience).is_none() {
                    jobwarden_sys::logging::line(format_args!(
                        "jobwarden: {id} has not ended yet; it ends once a daemon or its monitor sees its marker"
                    ));
                }
            }
            Ok((Some(id.clone()), marking))
        }
        Target::Waiting { prompt, before } => cancel::waiting(cx, prompt, before.as_deref()),
    }
}

/// Resolve every argument before acting on any. `Err(code)` when one
/// failed: each failure is reported and nothing is written.
fn resolve_all(
    layout: &Layout,
    ledger: Option<&Ledger>,
    args: &[String],
) -> anyhow::Result<Result<Vec<Target>, ExitCode>> {
    let mut ids = Vec::new();
    let mut seen = HashSet::new();
    let mut worst = 0;
    for arg in args {
        match super::resolve_target(layout, ledger, arg) {
            Ok(id) => {
                if seen.insert(id.clone()) {
                    ids.push(id);
                }
            }
            Err(e) => {
                let code = if e.downcast_ref::<No>().is_some() {
                    EXIT_NO
                } else {
                    2
                };
                worst = worst.max(code);
                jobwarden_sys::logging::line(format_args!("jobwarden: {e:#}"));
            }
        }
    }
    if worst > 0 {
        jobwarden_sys::logging::line("jobwarden: no job was aborted (no marker written)");
        return Ok(Err(ExitCode::from(worst)));
    }
    Ok(Ok(ids))
}

/// The jobs that have not ended: from the job index when there is one,
/// else from the run folders. Each is confirmed by its record later.
fn unfinished(layout: &Layout, ledger: Option<&Ledger>) -> anyhow::Result<Vec<JobId>> {
    let mut ids: Vec<JobId> = match ledger {
        Some(ledger) => ledger
            .jobs_in_states(&UNFINISHED, ALL_LIMIT)?
            .iter()
            .filter_map(|j| JobId::parse(&j.id).ok())
            .collect(),
        None => {
            let mut ids = layout
                .job_ids()
                .with_context(|| format!("listing {}", layout.runs().display()))?;
            ids.sort();
            ids.into_iter()
                .filter(|id| JobRecord::load_job(layout, id).is_ok_and(|r| !r.state.is_terminal()))
                .collect()
        }
    };
    // Queued jobs first: a running job stopped first frees its slot, and a
    // queued job could start in it before its own marker is written.
    ids.sort_by_cached_key(|id| {
        JobRecord::load_job(layout, id).map_or(true, |r| r.state != JobState::Queued)
    });
    Ok(ids)
}

/// What was done to one job, with the line that says so.
pub(super) enum Marking {
    /// The marker was written.
    Marked(String),
    /// The job had already ended: no marker.
    Ended(String),
    /// Its marker was already there (another abort went first): left as
    /// it is. `--wait` still waits for it.
    AlreadyRequested(String),
    /// Its record is gone (pruned): no marker.
    Missing(String),
    /// Nothing to say: under `--all`, a job the index still lists that
    /// has in fact ended or gone.
    Skipped,
}

/// Write the marker of `id` unless it has ended.
pub(super) fn mark(
    layout: &Layout,
    id: &JobId,
    reason: Option<&str>,
    all: bool,
) -> anyhow::Result<Marking> {
    let rec = match JobRecord::load_job(layout, id) {
        Ok(rec) => rec,
        Err(_) if !layout.job_json(id).exists() && all => return Ok(Marking::Skipped),
        Err(_) if !layout.job_json(id).exists() => {
            let runs = layout.runs();
            return Ok(Marking::Missing(format!(
                "{id}: no record under {} (pruned by retention?)",
                runs.display()
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let label = prompt_label(&rec.project, &rec.name);
    if rec.state.is_terminal() {
        if all {
            return Ok(Marking::Skipped);
        }
        let text = format!("{id}: already ended ({}) {label}", rec.state);
        return Ok(Marking::Ended(text));
    }
    match abort::write_marker(layout, id, reason)? {
        abort::Requested::Now => {
            let text = if rec.state == JobState::Queued {
                format!("{id}: cancel requested (queued, not started) {label}")
            } else {
                format!("{id}: abort requested ({}) {label}", rec.state)
            };
            Ok(Marking::Marked(text))
        }
        abort::Requested::Already(at) => {
            let at = at.map(|t| format!(" at {t}")).unwrap_or_default();
            let text = format!(
                "{id}: abort already requested{at} ({}) {label}; nothing more to do",
                rec.state
            );
            Ok(Marking::AlreadyRequested(text))
        }
    }
}

/// Wait until each of `pending` has ended, printing each final state as it
/// arrives; the exit code of their ends, where an abort or a cancel is
/// what was asked for and counts as success.
fn wait_for(layout: &Layout, pending: Vec<JobId>, out: &mut impl Write) -> anyhow::Result<Exit> {
    warn_if_nobody_ends_queued(layout, &pending);
    let mut tracker = Tracker::new(layout);
    let mut watch = Watch::new(RECHECK, POLL);
    for id in &pending {
        tracker.track(id.clone());
        watch.add(&layout.run_dir(id), false);
    }
    let mut check: Vec<JobId> = pending;
    loop {
        for id in check {
            let update = tracker.refresh(&id);
            if let Some(why) = update.lost {
                jobwarden_sys::logging::line(format_args!(
                    "jobwarden: {id}: {why}; no longer waiting for it"
                ));
            }
            let rec = tracker.get(&id).and_then(|j| j.rec.as_ref());
            if let (true, Some(rec)) = (update.ended, rec) {
                writeln!(out, "{id}: {}", final_state(rec)).context("writing to stdout")?;
                out.flush().context("writing to stdout")?;
                watch.remove(&layout.run_dir(&id));
            }
        }
        if tracker.all_done() {
            break;
        }
        check = match watch.wait(None) {
            Woken::Changed(paths) => paths.iter().filter_map(|p| run_of(layout, p)).collect(),
            Woken::Recheck | Woken::Deadline => tracker.pending().cloned().collect(),
        };
    }
    let asked = |e: Exit| matches!(e, Exit::Aborted | Exit::Cancelled);
    Ok(Exit::worst_of(
        tracker
            .jobs()
            .iter()
            .filter_map(|j| j.exit())
            .map(|e| if asked(e) { Exit::Success } else { e }),
    ))
}

/// The job whose record `path` is, if it is one.
fn run_of(layout: &Layout, path: &std::path::Path) -> Option<JobId> {
    let id = JobId::parse(path.parent()?.file_name()?.to_str()?).ok()?;
    (path == layout.job_json(&id)).then_some(id)
}

/// A queued job ends only when a daemon sees its marker: say so if no
/// daemon holds the root's lock (running jobs' monitors act alone).
fn warn_if_nobody_ends_queued(layout: &Layout, ids: &[JobId]) {
    let queued = ids
        .iter()
        .any(|id| JobRecord::load_job(layout, id).is_ok_and(|r| r.state == JobState::Queued));
    let daemon_gone = matches!(
        jobwarden_sys::procfs::flock_holder(&layout.daemon_lock()),
        Ok(None)
    );
    if queued && daemon_gone {
        jobwarden_sys::logging::line(format_args!(
            "jobwarden: no daemon is running: queued jobs end when it starts (`jobwarden daemon`)"
        ));
    }
}
