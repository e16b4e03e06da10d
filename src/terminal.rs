//! Ending a job: the terminal transition, the ledger row, and the prompt's
//! next place (the archive, or back in the inbox for another attempt), in
//! the one order that every crash point can recover from:
//!
//! 1. `job.json` is written in its terminal state, naming the outcome and
//!    where the prompt goes (fsynced). A crash after this leaves a terminal
//!    record whose prompt is still `*.running.md`: recovery finishes an
//!    archive move, or puts a requeued prompt back; the missing ledger row is
//!    backfilled from the record before anything is claimed.
//! 2. The ledger row (fail-soft). It is written *before* a requeued prompt
//!    reappears in the inbox, so the next claim sees this attempt's outcome
//!    (cooldown, attempt number). If it cannot be written, the prompt is
//!    archived instead of requeued: retries are never unbounded.
//! 3. The prompt is renamed `*.running.md` → its next place, never
//!    replacing a file (fsynced folders).
//! 4. The `requeued` or `archived` event (fail-soft).
//!
//! Used by the monitor (normal ends) and the daemon (jobs that end before a
//! monitor starts: rejected, aborted while queued, interrupted).

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::config::Config;
use crate::error::JobError;
use crate::events::EventLog;
use crate::fsio::{self, Renamed};
use crate::job::{JobRecord, JobState};
use crate::layout::Layout;
use crate::ledger::{Artifact, Execution, Ledger, Outcome, PathRelation, Source};
use crate::retry;

/// How a job ends and what it leaves for the ledger.
#[derive(Debug, Clone)]
pub struct Ending {
    pub state: JobState,
    pub reason: Option<String>,
    /// The ledger outcome; a failure may be refined to `rate_limited`.
    pub outcome: Outcome,
    pub artifacts: Vec<Artifact>,
    pub paths: Vec<(PathRelation, String)>,
    /// False when another attempt must not start (something of this one may
    /// still run): the prompt is archived whatever the retry policy says.
    pub may_requeue: bool,
}

impl Ending {
    pub fn new(state: JobState, reason: Option<String>) -> Self {
        Ending {
            state,
            reason,
            outcome: Outcome::of_state(state).unwrap_or(Outcome::Interrupted),
            artifacts: Vec::new(),
            paths: Vec::new(),
            may_requeue: true,
        }
    }
}

/// What ending a job needs: where things are, the retry policy, and the
/// ledger (absent if it could not be opened: then nothing is requeued).
pub struct Finisher<'a> {
    pub layout: &'a Layout,
    pub config: &'a Config,
    pub ledger: Option<&'a mut Ledger>,
}

impl Finisher<'_> {
    /// End `rec` as `ending` says.
    pub fn finish(
        &mut self,
        rec: &mut JobRecord,
        events: &mut EventLog,
        ending: Ending,
    ) -> Result<(), JobError> {
        let held = rec.inbox_path.as_deref().map(|p| self.layout.resolve(p));
        let requeue = ending.may_requeue
            && retry::should_requeue(self.config, rec, ending.outcome, self.ledger.as_deref())
            && !self.layout.waiting_prompt(&rec.prompt_name()).exists();
        self.plan(rec, ending.state, ending.outcome, requeue);
        rec.transition(
            self.layout,
            events,
            ending.state,
            ending.reason,
            json!({"outcome": ending.outcome.as_str()}),
        )?;
        let recorded = self.record(rec, ending.outcome, &ending.artifacts, &ending.paths);
        if requeue && !recorded {
            // Without the row the next claim could not count this attempt.
            self.plan(rec, ending.state, ending.outcome, false);
            rec.save(self.layout)?;
        }
        let dest = self
            .layout
            .resolve(rec.inbox_path.as_deref().unwrap_or_default());
        match held.filter(|h| *h != dest) {
            Some(held) => self.move_prompt(rec, events, &held, &dest),
            None => {
                events.append("archived", json!({"path": rec.archive_path}));
                Ok(())
            }
        }
    }

    /// Decide where the prompt goes and say so in the record.
    fn plan(&self, rec: &mut JobRecord, state: JobState, outcome: Outcome, requeue: bool) {
        rec.outcome = Some(outcome.as_str().to_owned());
        route(self.layout, rec, state, requeue);
    }

    /// Insert the ledger row; false if there is no ledger or the insert failed.
    fn record(
        &mut self,
        rec: &JobRecord,
        outcome: Outcome,
        artifacts: &[Artifact],
        paths: &[(PathRelation, String)],
    ) -> bool {
        let Some(ledger) = self.ledger.as_deref_mut() else {
            return false;
        };
        let exec = Execution::from_record(rec, outcome, rec.disposition.as_deref(), Source::Daemon);
        if let Err(e) = ledger.index_job(rec) {
            tracing::warn!(job = %rec.job_id, "{e}; the job index is refreshed at the next start");
        }
        match ledger.record(&exec, artifacts, paths) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(job = %rec.job_id, "{e}; the row will be backfilled from job.json");
                false
            }
        }
    }

    fn move_prompt(
        &self,
        rec: &mut JobRecord,
        events: &mut EventLog,
        held: &Path,
        dest: &Path,
    ) -> Result<(), JobError> {
        let root = self.layout.root();
        let moved = dest
            .parent()
            .map_or(Ok(()), |dir| fsio::create_dirs(root, dir))
            .and_then(|()| fsio::rename_noreplace(root, held, dest));
        let moved = match moved {
            Err(e) if fsio::is_refusal(&e) => return self.refused(rec, events, held, &e),
            other => other?,
        };
        let requeue = rec.archive_path.is_none();
        match moved {
            Renamed::Done => {
                let op = if requeue { "requeued" } else { "archived" };
                events.append(op, json!({"path": rec.inbox_path, "attempt": rec.attempt}));
                Ok(())
            }
            Renamed::TargetExists if requeue => {
                // A new drop of the same prompt took the name meanwhile: it
                // is the next run; this attempt's prompt is archived.
                let outcome = rec
                    .outcome
                    .as_deref()
                    .and_then(|o| o.parse().ok())
                    .unwrap_or(Outcome::Failure);
                self.plan(rec, rec.state, outcome, false);
                rec.save(self.layout)?;
                let archive = self
                    .layout
                    .resolve(rec.inbox_path.as_deref().unwrap_or_default());
                self.move_prompt(rec, events, held, &archive)
            }
            other => self.not_moved(rec, events, held, other),
        }
    }

    /// The destination's folder is not a folder we may write through (a
    /// symlink, a FIFO): the prompt stays where it is, held by this record,
    /// never moved through the link and never lost; the record says why.
    fn refused(
        &self,
        rec: &mut JobRecord,
        events: &mut EventLog,
        held: &Path,
        e: &crate::error::IoError,
    ) -> Result<(), JobError> {
        let why = format!(
            "{e}; the prompt stays at {} until the folder is fixed",
            held.display()
        );
        tracing::warn!(job = %rec.job_id, "prompt not moved: {why}");
        rec.archive_path = None;
        rec.inbox_path = Some(rel(self.layout, held));
        rec.extra.insert("archive_error".into(), json!(why));
        rec.save(self.layout)?;
        events.append("archive_failed", json!({"reason": why}));
        Ok(())
    }

    /// The record named a move that did not happen: say so in it.
    fn not_moved(
        &self,
        rec: &mut JobRecord,
        events: &mut EventLog,
        held: &Path,
        outcome: Renamed,
    ) -> Result<(), JobError> {
        let why = match outcome {
            Renamed::SourceGone => "the prompt file was gone when the job ended",
            _ => "a file of that name already existed",
        };
        tracing::warn!(job = %rec.job_id, "prompt not moved: {why} ({})", held.display());
        rec.archive_path = None;
        rec.inbox_path = None;
        rec.extra.insert("archive_error".into(), json!(why));
        rec.save(self.layout)?;
        events.append("archive_failed", json!({"reason": why}));
        Ok(())
    }
}

/// Decide where an ended job's prompt goes (back to the inbox, or the
/// archive of `state`) and say so in the record; returns that place.
pub fn route(layout: &Layout, rec: &mut JobRecord, state: JobState, requeue: bool) -> PathBuf {
    let prompt = rec.prompt_name();
    let dest = if requeue {
        layout.waiting_prompt(&prompt)
    } else {
        layout.archived_prompt(state, &prompt, &rec.job_id)
    };
    let rel = rel(layout, &dest);
    rec.disposition = Some(if requeue { "requeued" } else { "archived" }.to_owned());
    rec.archive_path = (!requeue).then(|| rel.clone());
    rec.inbox_path = Some(rel);
    dest
}

fn rel(layout: &Layout, path: &Path) -> String {
    let rel: PathBuf = layout.relative(path);
    rel.to_string_lossy().into_owned()
}
