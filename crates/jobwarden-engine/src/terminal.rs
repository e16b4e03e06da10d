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
//!    replacing a file (fsynced folders); a taken archive name makes it
//!    take the next free one, recorded first.
//! 4. The `requeued` or `archived` event (fail-soft).
//!
//! Every step can be run again: [`resume`] completes an end that a crash
//! or a kill cut short (row, then move), and a move that finds its prompt
//! already gone looks for it where it was going and records it there.
//!
//! Used by the monitor (normal ends) and the daemon (jobs that end before a
//! monitor starts: rejected, aborted while queued, interrupted). A monitor
//! that reports to a daemon does step 1 alone for an end whose prompt is
//! archived whatever the ledger says (every end but a retryable failure),
//! and hands the row's output tails and paths over with its report
//! ([`Handed`]): the daemon, which holds the ledger open, does steps 2–4
//! ([`record_handed`], then [`resume`]). If the daemon is gone before it
//! does, the next one resumes the end from the record, as after a crash.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::failure::JobError;
use crate::retry;
use jobwarden_ledger::{Artifact, Execution, Ledger, Outcome, PathRelation, Source};
use jobwarden_model::config::Config;
use jobwarden_model::events::{EventLog, Op};
use jobwarden_model::job::{JobRecord, JobState};
use jobwarden_model::layout::Layout;

mod place;

use jobwarden_model::job::{already_placed, holds_claimed_bytes};
use place::{confirm_placed, place, record_place};

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
    /// When the job ended (when this was made): its record's `finished_at`,
    /// however long the end then waits to be written (a ledger another
    /// process holds, a retry of a failed write).
    pub ended_at: jobwarden_sys::clock::Timestamp,
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
            ended_at: jobwarden_sys::clock::Timestamp::now(),
        }
    }
}

pub use jobwarden_ledger::Handed;

/// The terminal state [`Finisher`] writes: the state, why, the outcome,
/// and when the job ended.
struct End {
    state: JobState,
    reason: Option<String>,
    outcome: Outcome,
    at: jobwarden_sys::clock::Timestamp,
}

/// What an end's writes to the ledger came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The ledger row is there.
    pub row: bool,
    /// The job index says how the job ended.
    pub indexed: bool,
}

/// Steps 2 and 3's first half for an end whose monitor handed it over:
/// the ledger row (unless one is there) with what was handed, then the
/// job index. What could not be written is backfilled from `job.json`.
pub fn record_handed(
    layout: &Layout,
    ledger: &mut Ledger,
    rec: &JobRecord,
    handed: Option<&Handed>,
) -> Recorded {
    if let Some(handed) = handed {
        // The common end: its row and its index row in one commit.
        match jobwarden_ledger::backfill::record_handed_end(layout, ledger, rec, handed) {
            Ok(_) => {
                return Recorded {
                    row: true,
                    indexed: true,
                };
            }
            Err(e) => tracing::debug!(job = %rec.job_id, "{e}; written apart"),
        }
    }
    let row = jobwarden_ledger::backfill::ensure_row_with(layout, ledger, rec, handed);
    index_after_row(ledger, rec, row)
}

/// After an attempt at `rec`'s row: the job index told that it ended if
/// the row is there (an index row that says the job ended means its ledger
/// row is there, so a starting daemon, which reads only the jobs the index
/// holds unended, finds every ended job whose row is missing). What could
/// not be written is backfilled from `job.json` (by the running daemon
/// once the ledger takes writes again, else at the next start).
fn index_after_row(
    ledger: &mut Ledger,
    rec: &JobRecord,
    row: Result<bool, jobwarden_ledger::LedgerError>,
) -> Recorded {
    match row {
        Ok(_) => {
            // Fail-soft: written again from the record.
            let indexed = ledger.index_job(rec);
            if let Err(e) = &indexed {
                tracing::warn!(job = %rec.job_id, "{e}; the job index is written again from job.json");
            }
            Recorded {
                row: true,
                indexed: indexed.is_ok(),
            }
        }
        Err(e) => {
            tracing::warn!(job = %rec.job_id, "{e}; the row will be backfilled from job.json");
            Recorded {
                row: false,
                indexed: false,
            }
        }
    }
}

/// Steps 2–4 of job `id`'s end, recorded in `job.json` alone and handed
/// over, done by its monitor after all: its daemon did not take the report
/// (it is gone).
pub fn complete_handed(
    layout: &Layout,
    config: &Config,
    id: &jobwarden_model::job::JobId,
    handed: &Handed,
) {
    let mut ledger = match Ledger::open(&layout.ledger()) {
        Ok(ledger) => Some(ledger),
        Err(e) => {
            tracing::warn!(job = %id, "{e}; the row will be backfilled from job.json");
            None
        }
    };
    let mut rec = match JobRecord::load_job(layout, id) {
        Ok(rec) => rec,
        Err(e) => {
            tracing::error!(job = %id, "finishing its end: {e}; the next daemon start finishes it");
            return;
        }
    };
    if let Some(ledger) = ledger.as_mut() {
        record_handed(layout, ledger, &rec, Some(handed));
    }
    resume(layout, config, ledger.as_mut(), &mut rec);
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
        let held = claimed_place(self.layout, rec);
        let claimed_in_inbox =
            matches!(&held, Some(Ok(p)) if *p == self.layout.running_prompt(&rec.prompt_name()));
        let requeue = ending.may_requeue
            && claimed_in_inbox
            && retry::should_requeue(self.config, rec, ending.outcome, self.ledger.as_deref())
            && !self.layout.waiting_prompt(&rec.prompt_name()).exists();
        let (state, outcome) = (ending.state, ending.outcome);
        let foreign = match &held {
            Some(Err(named)) => Some(named.as_path()),
            _ => None,
        };
        let end = End {
            state,
            reason: ending.reason,
            outcome,
            at: ending.ended_at,
        };
        self.write_end(rec, events, end, requeue, foreign)?;
        if foreign.is_some() {
            place::told_not_its_own(rec, events);
        }
        let held = held.and_then(Result::ok);
        let recorded = self.record(rec, ending.outcome, &ending.artifacts, &ending.paths);
        if requeue && !recorded {
            // Without the row the next claim could not count this attempt.
            self.plan(rec, state, outcome, false);
            rec.save(self.layout)?;
        }
        let dest = self
            .layout
            .resolve(rec.inbox_path.as_deref().unwrap_or_default());
        match held.filter(|h| *h != dest) {
            Some(held) => self.move_prompt(rec, events, &held, &dest),
            None if rec.inbox_path.is_none() => Ok(()),
            None => {
                events.append(Op::Archived, json!({"path": rec.archive_path}));
                Ok(())
            }
        }
    }

    /// Step 1 alone, for an end whose prompt is archived whatever the
    /// ledger says ([`retry::may_retry`] is false for its outcome): the
    /// terminal record. What the row needs besides is returned, to be
    /// handed over (see the module docs).
    pub fn record_end(
        &mut self,
        rec: &mut JobRecord,
        events: &mut EventLog,
        ending: Ending,
    ) -> Result<Handed, JobError> {
        let end = End {
            state: ending.state,
            reason: ending.reason,
            outcome: ending.outcome,
            at: ending.ended_at,
        };
        let view_behind = self.write_end(rec, events, end, false, None)?;
        Ok(Handed {
            artifacts: ending.artifacts,
            paths: ending.paths,
            record: Some(Box::new(rec.clone())),
            view_behind,
        })
    }

    /// Step 1: where the prompt goes, said in the record, and the record
    /// moved to its terminal state (durably). True when `job.json` is
    /// behind the record's journal line. `foreign`: the record named as its
    /// claimed prompt a file no claim of it makes: the terminal record says
    /// so in the same write (`missing`, nothing moved).
    fn write_end(
        &self,
        rec: &mut JobRecord,
        events: &mut EventLog,
        end: End,
        requeue: bool,
        foreign: Option<&Path>,
    ) -> Result<bool, JobError> {
        match foreign {
            Some(named) => {
                rec.outcome = Some(end.outcome.as_str().to_owned());
                place::mark_not_its_own(self.layout, rec, named);
            }
            None => self.plan(rec, end.state, end.outcome, requeue),
        }
        crate::shared_inbox::ending(self.layout, rec)?;
        let fields = json!({"outcome": end.outcome.as_str()});
        Ok(rec.transition_at(self.layout, events, end.state, end.reason, fields, end.at)?)
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
        let exec = Execution::of_job(self.layout, rec, outcome, Source::Daemon);
        let row = ledger.record(&exec, artifacts, paths);
        index_after_row(ledger, rec, row).row
    }

    /// Move the claimed prompt `held` to where the record says.
    fn move_prompt(
        &self,
        rec: &mut JobRecord,
        events: &mut EventLog,
        held: &Path,
        dest: &Path,
    ) -> Result<(), JobError> {
        place(self.layout, rec, events, held, dest)
    }
}

/// Complete the end of a job whose finisher stopped half-way (a crash, a
/// kill): the ledger row from the record if it is missing, then the
/// prompt's move where the record says, resolving what [`place`] resolves.
/// Returns false if the prompt stays claimed by this job.
///
/// A claimed file that a newer job of the prompt holds (per the job index:
/// the requeued prompt was claimed again), or a prompt already found where
/// the record says, is left alone: only this job's own unfinished move is
/// made. The caller guarantees that nothing else is finishing the job (its
/// monitor is gone).
pub fn resume(
    layout: &Layout,
    config: &Config,
    ledger: Option<&mut Ledger>,
    rec: &mut JobRecord,
) -> bool {
    resume_end(layout, config, ledger, rec, false)
}

/// [`resume`]; with `claim_proven`, for a job its caller knows holds its
/// prompt's claim (the daemon that made the claim, ending the job its
/// monitor reported): the job index is then not asked whether a newer job
/// of the prompt took it (one cancelled while it waited never did).
pub fn resume_end(
    layout: &Layout,
    config: &Config,
    mut ledger: Option<&mut Ledger>,
    rec: &mut JobRecord,
    claim_proven: bool,
) -> bool {
    if let Some(ledger) = ledger.as_deref_mut() {
        if let Err(e) = jobwarden_ledger::backfill::ensure_row(layout, ledger, rec) {
            tracing::warn!(job = %rec.job_id, "{e}; the row will be backfilled later");
        }
    }
    let held = layout.running_prompt(&rec.prompt_name());
    let Some(dest) = rec.inbox_path.as_deref().map(|p| layout.resolve(p)) else {
        return false;
    };
    if dest == held {
        return false;
    }
    if std::fs::symlink_metadata(&held).is_err() {
        return confirm_placed(layout, config, rec, &held, &dest);
    }
    if !claim_proven && newer_job_holds_claim(ledger.as_deref(), rec) {
        return true;
    }
    if rec.archive_path.is_some() && holds_claimed_bytes(layout, rec, &dest) {
        return true; // Moved already: what is claimed now is not this job's.
    }
    let mut events = EventLog::open(
        layout.root(),
        &layout.events(&rec.job_id),
        config.events_for(rec),
    );
    match place(layout, rec, &mut events, &held, &dest) {
        Ok(()) => {
            let to = rec.inbox_path.as_deref().unwrap_or("?");
            if claim_proven {
                // The common end a monitor handed over: nothing was cut short.
                tracing::debug!(job = %rec.job_id, "moved its prompt to {to}");
            } else {
                tracing::info!(job = %rec.job_id, "finished moving its prompt to {to}");
            }
            true
        }
        Err(e) => {
            tracing::error!(job = %rec.job_id, "finishing the move of {}: {e}", held.display());
            false
        }
    }
}

/// Move the archived prompt of a job whose end changed (`succeeded →
/// merged`) to its new state's archive folder, as [`place`] moves any
/// prompt: never replacing a file, the record naming where it is. Run
/// again after a cut-short move, it finds the prompt by its digest where
/// it got to. A prompt retention removed, or a record that names none,
/// is left so.
pub fn rearchive(
    layout: &Layout,
    rec: &mut JobRecord,
    events: &mut EventLog,
) -> Result<(), JobError> {
    let Some(recorded) = rec.archive_path.as_deref().map(|p| layout.resolve(p)) else {
        return Ok(());
    };
    let dest = layout.archived_prompt(rec.state, &rec.prompt_name(), &rec.job_id);
    let held = if holds_claimed_bytes(layout, rec, &recorded) {
        recorded
    } else {
        match already_placed(layout, rec, &dest) {
            Some(found) => found,
            None => return Ok(()),
        }
    };
    if held == dest || held.parent() == dest.parent() {
        if rec.archive_path.as_deref() != Some(rel(layout, &held).as_str()) {
            record_place(layout, rec, &held);
            rec.save(layout)?;
        }
        return Ok(());
    }
    record_place(layout, rec, &dest);
    rec.save(layout)?;
    place(layout, rec, events, &held, &dest)
}

/// Where `rec`'s job holds the prompt it claimed, as its record says
/// (`inbox_path`): `Ok` for a place a claim of its prompt makes — its
/// `<name>.running.md`, or a name a claim gave it in the archive itself
/// ([`Layout::claimed_into_archive`]) that no other job's run folder
/// names. `Err` with the path for anything else: a record may have been
/// written by a job, and another job's archived prompt is not this job's
/// to move, nor to put back in the inbox to run again.
fn claimed_place(layout: &Layout, rec: &JobRecord) -> Option<Result<PathBuf, PathBuf>> {
    let named = layout.resolve(rec.inbox_path.as_deref()?);
    let prompt = rec.prompt_name();
    let ours = named == layout.running_prompt(&prompt)
        || layout
            .claimed_into_archive(&prompt, &named)
            .is_some_and(|id| {
                id == rec.job_id || std::fs::symlink_metadata(layout.run_dir(&id)).is_err()
            });
    Some(if ours { Ok(named) } else { Err(named) })
}

/// Does the job index know a job of `rec`'s prompt claimed after it?
fn newer_job_holds_claim(ledger: Option<&Ledger>, rec: &JobRecord) -> bool {
    let newest = ledger.map(|l| l.newest_job_of(&rec.project, &rec.name));
    match newest {
        Some(Ok(Some(job))) => job.id != rec.job_id.as_str(),
        Some(Err(e)) => {
            tracing::warn!(job = %rec.job_id, "{e}; its claimed prompt is left as it is");
            true
        }
        _ => false,
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

#[cfg(test)]
mod tests {
    use super::*;
    use jobwarden_model::job::JobId;
    use jobwarden_model::layout::PromptName;
    use jobwarden_sys::fsio;
    use sha2::{Digest, Sha256};

    #[test]
    fn a_prompt_already_moved_is_found_under_any_of_its_archive_names_by_digest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path());
        let prompt = PromptName {
            project: "p".into(),
            name: "n".into(),
        };
        let id = JobId::parse("job-1").expect("id");
        let mut rec =
            JobRecord::new_queued(id.clone(), &prompt, "inbox/p/n.running.md".into(), "h");
        rec.prompt_sha256 = Some(jobwarden_model::job::hex(&Sha256::digest(b"mine\n")));
        let first = layout.archived_prompt(JobState::Succeeded, &prompt, &id);
        fsio::create_dirs(dir.path(), first.parent().expect("folder")).expect("archive folder");
        let failed = layout.archived_prompt_alt(JobState::Failed, &prompt, &id, 2);
        fsio::create_dirs(dir.path(), failed.parent().expect("folder")).expect("archive folder");
        let folder = first.parent().expect("folder").to_path_buf();
        for (path, bytes) in [
            (first.clone(), &b"planted\n"[..]),
            (folder.join("n.job-1.x.md"), b"mine\n"),
            (folder.join("n.job-10.md"), b"mine\n"),
            (failed.clone(), b"mine\n"),
        ] {
            fsio::create_new_synced(dir.path(), &path, bytes).expect("write");
        }
        assert_eq!(already_placed(&layout, &rec, &first), Some(failed));
        rec.prompt_sha256 = Some("0".repeat(64));
        assert_eq!(already_placed(&layout, &rec, &first), None);
    }
}
