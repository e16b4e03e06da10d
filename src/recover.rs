//! Startup reconciliation: distrust the disk, then put every job found in
//! `runs/` back where it belongs before anything new is claimed.
//!
//! - a job whose monitor still runs (it holds the job's monitor lock, which
//!   no recycled pid can fake) is adopted and keeps its slot;
//! - a `queued` record that no monitor ever took (no `monitor.lock` file)
//!   goes back on the queue, oldest claim first;
//! - any other non-terminal record lost its monitor: `interrupted`;
//! - a terminal record whose prompt was not yet archived gets the move
//!   finished (a crash between the two steps of `terminal::finish`);
//! - a record that does not parse or fails its checks is moved aside as
//!   `job.json.corrupt-<ms>` and reported, never silently reset;
//! - a `*.running.md` that no live record holds (a crash inside a claim) is
//!   renamed back to `*.prompt.md`, so it is claimed again: never stranded.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::clock::Timestamp;
use crate::config::Config;
use crate::error::JobError;
use crate::events::EventLog;
use crate::fsio::{self, Renamed};
use crate::inbox;
use crate::job::{JobId, JobRecord, JobState};
use crate::layout::{self, InboxEntry, Layout, RUNNING_SUFFIX};
use crate::ledger::Ledger;
use crate::terminal::{Ending, Finisher};

/// What the daemon must take over.
#[derive(Debug, Default)]
pub struct Recovered {
    pub queued: Vec<JobId>,
    /// Jobs whose monitor still runs.
    pub adopted: Vec<JobId>,
}

pub fn reconcile(
    layout: &Layout,
    config: &Config,
    host: &str,
    mut ledger: Option<&mut Ledger>,
) -> Recovered {
    let mut out = Recovered::default();
    let mut queued = Vec::new();
    let mut held: HashSet<PathBuf> = HashSet::new();
    let mut foreign = 0;
    for id in run_ids(layout) {
        let Some(mut rec) = load_or_set_aside(layout, &id) else {
            continue;
        };
        if rec.host != host {
            // Another machine's job (a shared inbox): it judges its own.
            foreign += 1;
            held.insert(layout.running_prompt(&rec.prompt_name()));
            continue;
        }
        if rec.state.is_terminal() {
            if !finish_archive(layout, &rec) {
                // Never requeue the prompt of a job that ended.
                held.insert(layout.running_prompt(&rec.prompt_name()));
            }
            continue;
        }
        held.insert(layout.running_prompt(&rec.prompt_name()));
        match monitor_state(layout, &id) {
            Monitor::Alive => out.adopted.push(id),
            Monitor::NeverStarted if rec.state == JobState::Queued => {
                queued.push((rec.created_at, id));
            }
            _ => interrupt(
                layout,
                config,
                ledger.as_deref_mut(),
                &mut rec,
                "its monitor was gone when the daemon started",
            ),
        }
    }
    if foreign > 0 {
        tracing::warn!(
            jobs = foreign,
            "unfinished jobs recorded by another host were left alone"
        );
    }
    requeue_orphans(layout, &held);
    queued.sort();
    out.queued = queued.into_iter().map(|(_, id)| id).collect();
    out
}

fn run_ids(layout: &Layout) -> Vec<JobId> {
    let runs = layout.runs();
    let entries = match std::fs::read_dir(&runs) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::error!("reading {}: {e}; no job can be recovered", runs.display());
            return Vec::new();
        }
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| JobId::parse(n).ok()))
        .collect()
}

/// Load a record; a corrupt one is moved aside and reported.
fn load_or_set_aside(layout: &Layout, id: &JobId) -> Option<JobRecord> {
    match JobRecord::load_job(layout, id) {
        Ok(rec) => Some(rec),
        Err(JobError::BadRecord { path, reason }) => {
            let aside = layout.corrupt_record(id, Timestamp::now().epoch_ms());
            match fsio::rename_noreplace(&path, &aside) {
                Ok(_) => {
                    tracing::error!(job = %id, "corrupt record ({reason}) moved aside to {}", aside.display())
                }
                Err(e) => {
                    tracing::error!(job = %id, "corrupt record ({reason}) could not be moved aside: {e}")
                }
            }
            None
        }
        Err(e) => {
            // A run folder without a record: a claim cut short. Its prompt,
            // if still claimed, is an orphan and goes back to the inbox.
            tracing::warn!(job = %id, "no usable record: {e}");
            None
        }
    }
}

/// What became of a job's monitor, judged by its lock file: created by the
/// monitor as it starts and locked for its whole life, so no recycled pid
/// can be mistaken for it.
#[derive(Debug, PartialEq, Eq)]
pub enum Monitor {
    /// No monitor ever took the job.
    NeverStarted,
    Alive,
    /// A monitor took the job and is gone.
    Gone,
}

pub fn monitor_state(layout: &Layout, id: &JobId) -> Monitor {
    let lock = layout.monitor_lock(id);
    if std::fs::symlink_metadata(&lock).is_err() {
        return Monitor::NeverStarted;
    }
    // Taking the lock to test it releases it at once.
    match fsio::try_lock(&lock) {
        Ok(None) => Monitor::Alive,
        _ => Monitor::Gone,
    }
}

/// End a job whose monitor is gone as `interrupted` (requeued at once,
/// up to `max_interrupts` in a row).
pub fn interrupt(
    layout: &Layout,
    config: &Config,
    ledger: Option<&mut Ledger>,
    rec: &mut JobRecord,
    why: &str,
) {
    tracing::warn!(job = %rec.job_id, "{why}");
    let mut events = EventLog::open(&layout.events(&rec.job_id), config.events);
    let mut finisher = Finisher {
        layout,
        config,
        ledger,
    };
    let ending = Ending::new(JobState::Interrupted, Some(why.to_owned()));
    if let Err(e) = finisher.finish(rec, &mut events, ending) {
        tracing::error!(job = %rec.job_id, "{e}");
    }
}

/// A terminal record naming an archive path that does not exist while the
/// claimed prompt still does: finish the interrupted move. Returns false if
/// the prompt is still where the job held it.
pub fn finish_archive(layout: &Layout, rec: &JobRecord) -> bool {
    let Some(archive) = rec.archive_path.as_deref().map(|p| layout.resolve(p)) else {
        return true;
    };
    let held = layout.running_prompt(&rec.prompt_name());
    if archive.exists() || !held.exists() {
        return true;
    }
    let moved = archive
        .parent()
        .map_or(Ok(()), fsio::create_dirs)
        .and_then(|()| fsio::rename_noreplace(&held, &archive));
    let (from, to) = (held.display(), archive.display());
    match moved {
        Ok(Renamed::Done) => {
            tracing::info!(job = %rec.job_id, "finished archiving its prompt {from} to {to}");
            return true;
        }
        Ok(other) => {
            tracing::warn!(job = %rec.job_id, "archiving {from} to {to} not finished: {other:?}")
        }
        Err(e) => tracing::error!(job = %rec.job_id, "{e}"),
    }
    false
}

/// Rename every `*.running.md` that no record holds back to `*.prompt.md`
/// (or, if a newer drop took that name, to a `.recovered-<ms>` sibling).
fn requeue_orphans(layout: &Layout, held: &HashSet<PathBuf>) {
    let inbox = layout.inbox();
    for found in inbox::scan_suffix(&inbox, RUNNING_SUFFIX) {
        if held.contains(&found.path) {
            continue;
        }
        let Some(prompt) = orphan_prompt(&inbox, &found.path) else {
            continue;
        };
        let back = layout.waiting_prompt(&prompt);
        let result = fsio::rename_noreplace(&found.path, &back).and_then(|r| match r {
            Renamed::TargetExists => {
                let aside = layout.recovered_prompt(&prompt, Timestamp::now().epoch_ms());
                fsio::rename_noreplace(&found.path, &aside).map(|_| aside)
            }
            _ => Ok(back.clone()),
        });
        match result {
            Ok(to) => tracing::warn!(
                "claimed prompt {} had no job; put back as {}",
                found.path.display(),
                to.display()
            ),
            Err(e) => tracing::error!(
                "orphaned claim {} could not be put back: {e}",
                found.path.display()
            ),
        }
    }
}

/// The prompt key of an orphaned `.running.md`, if its name is valid.
fn orphan_prompt(inbox: &Path, running: &Path) -> Option<layout::PromptName> {
    let as_prompt =
        running.to_str()?.strip_suffix(RUNNING_SUFFIX)?.to_owned() + layout::PROMPT_SUFFIX;
    match layout::classify_inbox_path(inbox, Path::new(&as_prompt)) {
        InboxEntry::Prompt(p) => Some(p),
        _ => None,
    }
}
