//! The daemon's side of a job's end: its monitor exiting (a normal end,
//! or an `interrupted` one whose orphaned process group is cleared first),
//! ends that could not be recorded yet (storage refusing writes), the
//! claim each prompt's job holds, and a queued job aborted before it
//! started (it ends `cancelled`).

use std::process::ExitStatus;

use super::{Daemon, Slot, monitors};
use jobwarden_engine::failure::{DaemonError, JobError};
use jobwarden_engine::recover;
use jobwarden_engine::terminal::Handed;
use jobwarden_ledger::backfill;
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::PromptName;
use jobwarden_sys::storage;

/// A row of handed-over ends finished together
/// ([`Daemon::on_monitor_reports`]).
#[derive(Default)]
pub(super) struct EndGroup {
    /// The jobs whose ends it holds: their ledger writes are one commit,
    /// and are owed again if it fails.
    ended: Vec<JobId>,
    /// Their prompts' moves (the record, and whether this daemon's claim
    /// is proven), made once the group's ledger commit is over.
    moves: Vec<(JobRecord, bool)>,
    /// The blocked prompts their ends let go: claimed after the moves, in
    /// a group commit of their own, never with syncs owed to a later tick.
    unblocked: Vec<std::path::PathBuf>,
}

/// How many monitors a Slurm job may lose before it is interrupted.
const MAX_REATTACH: u32 = 5;

impl Daemon {
    /// Monitors' reports, `first` and those already arrived after it. The
    /// ends handed over in a row are finished as one group, their ledger
    /// writes one commit ([`Daemon::in_ledger_group`]) made before any of
    /// their prompts moves to the archive, and the folder
    /// syncs of their prompts' moves are deferred to the next tick
    /// ([`Daemon::commit_owed_moves`]), each folder synced once for every
    /// end since the last. Each such end is recoverable from its journal
    /// alone, durable before its monitor reported it (a power cut before
    /// the sync may bring back a claimed prompt beside a terminal record,
    /// which start-up finishes). Any other report is handled alone.
    pub(super) fn on_monitor_reports(&mut self, first: monitors::Report) {
        let mut report = Some(first);
        while let Some(next) = report.take() {
            if !next.is_handed_end() {
                self.on_monitor_report(next);
                return;
            }
            let batch = jobwarden_sys::fsio::batch();
            self.ending = Some(EndGroup::default());
            let committed;
            (report, committed) = self.in_ledger_group(|daemon| {
                let mut handed = Some(next);
                while let Some(end) = handed.take() {
                    daemon.on_monitor_report(end);
                    match daemon.monitors.try_next() {
                        Some(more) if more.is_handed_end() => handed = Some(more),
                        other => return other,
                    }
                }
                None
            });
            let group = self.ending.take().unwrap_or_default();
            if !committed {
                // Their rows and index rows went with the group.
                group.ended.iter().for_each(|id| self.owe_row(id));
            }
            // Only now do their prompts leave: an archived prompt's job has
            // its ledger row, for whoever reads the ledger next.
            for (mut rec, proven) in group.moves {
                self.resume_end(&mut rec, proven);
            }
            self.owed_moves.absorb(batch.defer());
            // And then the prompts their moves let go.
            if !group.unblocked.is_empty() {
                let unblocked = group.unblocked;
                self.claiming(|daemon| unblocked.iter().for_each(|p| daemon.consider(p)));
            }
        }
    }

    /// Finish the end of `rec`, whose record is terminal: its prompt moved
    /// to the archive or the inbox (`proven`: the claim is this daemon's).
    fn resume_end(&mut self, rec: &mut JobRecord, proven: bool) {
        let ledger = self.ledger.as_mut();
        jobwarden_engine::terminal::resume_end(&self.layout, &self.config, ledger, rec, proven);
    }

    /// Make the deferred moves of ended jobs' prompts durable (the tick,
    /// and the daemon's stop).
    pub(super) fn commit_owed_moves(&mut self) {
        if self.owed_moves.is_empty() {
            return;
        }
        if let Err(e) = self.owed_moves.commit() {
            match storage::fault_of(&e.source) {
                Some(condition) => self.storage_failed(condition, e.to_string()),
                None => tracing::error!(
                    "making the latest prompts' moves durable: {e}; start-up finishes them after a power loss"
                ),
            }
        }
    }

    /// A monitor reported that its job runs, or the end of its job, or
    /// exited.
    fn on_monitor_report(&mut self, report: monitors::Report) {
        match report {
            monitors::Report::Running(key, job) => {
                if let Some(id) = self.monitors.serves(key, &job).cloned() {
                    self.index_running(&id);
                }
            }
            monitors::Report::Ended(key, job, handed) => {
                if let Some(id) = self.monitors.ended(key, &job, self.stopping) {
                    tracing::debug!(job = %id, handed_over = handed.is_some(), "its monitor reported its end");
                    self.on_job_ended(&id, "its job ended", handed.as_ref());
                }
            }
            monitors::Report::Exited(key, status) => {
                if let Some(id) = self.monitors.exited(key) {
                    self.on_monitor_exited(id, status);
                }
            }
        }
    }

    /// Tell the job index what job `id`'s record says, now that its
    /// monitor reports it running. A record already terminal is left to
    /// the end's own report: the index may say a job ended only once its
    /// ledger row is written. Fail-soft: the index is refreshed at the
    /// next start.
    fn index_running(&mut self, id: &JobId) {
        self.refresh_ledger();
        let Some(ledger) = self.ledger.as_mut() else {
            return;
        };
        let written = match JobRecord::load_job(&self.layout, id) {
            Ok(rec) if rec.state.is_terminal() => Ok(()),
            Ok(rec) => ledger.index_job(&rec).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = written {
            tracing::warn!(job = %id, "{e}; the job index is written again from job.json");
            self.owe_row(id);
        }
    }

    /// The monitor of job `id` exited before reporting its end.
    fn on_monitor_exited(&mut self, id: JobId, status: std::io::Result<ExitStatus>) {
        let how = match &status {
            Ok(s) => s.to_string(),
            Err(e) => format!("unknown ({e})"),
        };
        tracing::debug!(job = %id, status = %how, "monitor exited");
        if matches!(&status, Ok(s) if s.code() == Some(jobwarden_engine::handover::EXIT_ALREADY_SUPERVISED))
        {
            // Another monitor holds the job: keep the slot and watch that
            // monitor, once proven.
            if let recover::Monitor::Alive(p) = recover::monitor_state(&self.layout, &id) {
                self.running.insert(id, Slot::Adopted(p));
                return;
            }
        }
        if matches!(&status, Ok(s) if s.code() == Some(jobwarden_engine::handover::EXIT_NO_STORAGE))
        {
            // Nothing of the job ran: it goes back to its place.
            self.requeue_unstarted(&id);
            let condition = storage::probe(self.layout.root())
                .map(|p| p.condition)
                .ok()
                .filter(|c| *c == storage::Condition::ReadOnly)
                .unwrap_or(storage::Condition::Full);
            self.storage_failed(
                condition,
                format!("the monitor of job {id} could not write its first records"),
            );
            return;
        }
        self.on_job_gone(&id, &how);
    }

    /// A slot's monitor is gone: the record must be terminal; if it is not,
    /// the monitor died mid-job and the job is `interrupted`.
    pub(super) fn on_job_gone(&mut self, id: &JobId, how: &str) {
        self.on_job_ended(id, how, None);
    }

    /// [`Daemon::on_job_gone`], with what its monitor handed over for the
    /// end's ledger row, if it did (see `terminal.rs`).
    fn on_job_ended(&mut self, id: &JobId, how: &str, handed: Option<&Handed>) {
        let span = tracing::info_span!("job", id = %id).entered();
        if let Some(group) = self.ending.as_mut() {
            group.ended.push(id.clone());
        }
        self.free_slot(id);
        if !self.settle_with(id, how, handed) {
            tracing::warn!(job = %id, "its end could not be recorded yet; retrying every heartbeat");
            self.unsettled.insert(id.clone(), how.to_owned());
        }
        drop(span);
        self.dispatch();
    }

    /// Record the end of a job whose monitor is gone. False if its record
    /// is still not terminal (the write failed): call again later.
    pub(super) fn settle(&mut self, id: &JobId, how: &str) -> bool {
        self.settle_with(id, how, None)
    }

    fn settle_with(&mut self, id: &JobId, how: &str, handed: Option<&Handed>) -> bool {
        self.refresh_ledger();
        // Whether `job.json` says what the journal says (an end's view a
        // full disk kept behind is the daemon's to write: its monitor is
        // gone).
        let mut view_ok = true;
        let loaded = handed_record(id, handed)
            .map_or_else(|| JobRecord::load_job_view(&self.layout, id), Ok)
            .map(|(mut rec, behind)| {
                if behind && rec.state.is_terminal() {
                    view_ok = recover::write_view_again(&self.layout, &mut rec);
                }
                rec
            });
        match loaded {
            Ok(rec) if self.follows_in_slurm(&rec, how) => {
                // The job goes on in Slurm: another monitor follows it.
                if self.stopping {
                    tracing::info!(job = %id, "the next daemon's start follows its Slurm job");
                    return true;
                }
                return self.reattach(id);
            }
            Ok(mut rec) if !rec.state.is_terminal() => {
                let why = format!("its monitor exited ({how}) before the job ended");
                self.release_claim(&rec.prompt_name(), id);
                let clearing = recover::interrupt(
                    &self.layout,
                    &self.config,
                    self.ledger.as_mut(),
                    &mut rec,
                    &why,
                    true,
                );
                match clearing {
                    Some(clearing) => {
                        self.wait_for_group(clearing);
                        return true;
                    }
                    None => self.unblock(&rec.prompt_name()),
                }
            }
            Ok(mut rec) => {
                // The monitor logged the end; this is the daemon's record of it.
                tracing::debug!(job = %id, state = %rec.state, "end recorded");
                self.notify_end(&rec);
                // A monitor killed between its terminal record and the
                // prompt's move leaves it claimed, and maybe its row unwritten:
                // finish both, unless the claim is a newer job's (the prompt
                // was requeued and claimed again before this end was seen).
                // A monitor that handed its end over left the row, the index
                // and the prompt's move to us, with what the row needs.
                let row = self.ledger.as_mut().map(|l| match handed {
                    Some(handed) => {
                        let done = jobwarden_engine::terminal::record_handed(
                            &self.layout,
                            l,
                            &rec,
                            Some(handed),
                        );
                        Ok(done.row && done.indexed)
                    }
                    // A row inserted here is one its monitor could not
                    // write: nor could it tell the index.
                    None => backfill::ensure_row(&self.layout, l, &rec)
                        .map(|inserted| !inserted || l.index_job(&rec).is_ok()),
                });
                match row {
                    Some(Ok(true)) | None => {}
                    Some(Ok(false)) => self.owe_row(id),
                    Some(Err(e)) => {
                        self.ledger_failed(&e);
                        self.owe_row(id);
                    }
                }
                let prompt = rec.prompt_name();
                let proven = self.claims.get(&prompt) == Some(id);
                if self.release_claim(&prompt, id) {
                    match self.ending.as_mut() {
                        Some(group) => group.moves.push((rec.clone(), proven)),
                        None => self.resume_end(&mut rec, proven),
                    }
                }
                self.unblock(&rec.prompt_name());
                // Ended as recorded: settled once its view says so too.
                return view_ok;
            }
            Err(e) => {
                tracing::error!(job = %id, "after its monitor exited: {e}");
                return !matches!(&e, jobwarden_model::job::RecordError::Io(io) if storage::fault_of(&io.source).is_some());
            }
        }
        end_settled(&self.layout, id)
    }

    /// Does `rec`, whose monitor exited (`how`) before it ended, go on in
    /// Slurm under a new monitor? Yes while its main command was submitted
    /// there, up to [`MAX_REATTACH`] monitors: a job that loses more than
    /// that is interrupted like any other, and its Slurm job named for the
    /// operator to cancel.
    fn follows_in_slurm(&mut self, rec: &JobRecord, how: &str) -> bool {
        if rec.state != jobwarden_model::job::JobState::Running || rec.slurm.is_none() {
            return false;
        }
        let n = self.reattached.entry(rec.job_id.clone()).or_insert(0);
        *n += 1;
        if *n > MAX_REATTACH {
            let slurm_id = rec.slurm.as_ref().and_then(|s| s.job_id.clone());
            tracing::error!(job = %rec.job_id, slurm_job_id = ?slurm_id, "its monitors exited {MAX_REATTACH} times while its Slurm job ran; the job is interrupted, and the Slurm job left as it is (scancel it if it must not go on)");
            return false;
        }
        tracing::warn!(job = %rec.job_id, "its monitor exited ({how}) while its Slurm job runs");
        true
    }

    /// Wait, off the loop, for the killed orphaned group of an interrupted
    /// job to be gone; [`Daemon::on_group_cleared`] then ends the job.
    pub(super) fn wait_for_group(&mut self, clearing: recover::Clearing) {
        tracing::info!(job = %clearing.id, "waiting for what is left of its process group to exit");
        self.clearing_jobs.insert(clearing.id.clone());
        self.clearing.spawn_blocking(move || {
            let gone = clearing.wait_gone(recover::ORPHAN_EXIT_LIMIT);
            (clearing, gone)
        });
    }

    /// The orphaned group of an interrupted job is gone (or outlived the
    /// wait): end the job, requeued if it is gone and the policy says so.
    pub(super) fn on_group_cleared(
        &mut self,
        joined: Result<(recover::Clearing, bool), tokio::task::JoinError>,
    ) -> Result<(), DaemonError> {
        let (clearing, gone) = joined.map_err(|e| DaemonError::TaskDied {
            task: "orphaned group wait",
            reason: e.to_string(),
        })?;
        let id = clearing.id;
        self.clearing_jobs.remove(&id);
        let _span = tracing::info_span!("job", id = %id).entered();
        self.refresh_ledger();
        match JobRecord::load_job(&self.layout, &id) {
            Ok(mut rec) if !rec.state.is_terminal() => {
                if !gone {
                    tracing::warn!(job = %id, "its process group was still there after {}", humantime::format_duration(recover::ORPHAN_EXIT_LIMIT));
                }
                let why = "its monitor died before the job ended";
                let ledger = self.ledger.as_mut();
                // Not waiting again: a group still there keeps it archived.
                recover::interrupt(&self.layout, &self.config, ledger, &mut rec, why, false);
                self.unblock(&rec.prompt_name());
                self.notify_end_of(&id);
                if !end_settled(&self.layout, &id) {
                    tracing::warn!(job = %id, "its end could not be recorded yet; retrying every heartbeat");
                    self.unsettled.insert(id.clone(), why.to_owned());
                }
            }
            Ok(_) => {}
            Err(e) => tracing::error!(job = %id, "after its process group was killed: {e}"),
        }
        drop(_span);
        self.dispatch();
        Ok(())
    }

    /// Retry recording the ends that failed for lack of storage.
    pub(super) fn settle_unsettled(&mut self) {
        let pending: Vec<(JobId, String)> = self.unsettled.drain().collect();
        for (id, how) in pending {
            if !self.settle(&id, &how) {
                self.unsettled.insert(id, how);
            }
        }
    }

    /// A write failed because storage refuses it: pause claims and starts.
    pub(super) fn storage_failed(&mut self, condition: storage::Condition, detail: String) {
        let change = self.storage.failed(condition, detail);
        self.storage_changed(change);
    }

    pub(super) fn storage_changed(&mut self, change: storage::Change) {
        match change {
            storage::Change::None => {}
            storage::Change::Degraded => tracing::error!(
                condition = %self.storage.condition,
                "the root's storage refuses writes ({}); claims and job starts wait until it recovers, running jobs go on",
                self.storage.detail.as_deref().unwrap_or("")
            ),
            storage::Change::Recovered => {
                tracing::info!(
                    "the root's storage accepts writes again; resuming claims and starts"
                );
                self.settle_unsettled();
                self.rescan();
                self.dispatch();
            }
        }
    }

    /// Forget that `id` holds `prompt`'s claim. False if a newer job of
    /// this daemon's holds it: then it is not `id`'s to move.
    pub(super) fn release_claim(&mut self, prompt: &PromptName, id: &JobId) -> bool {
        match self.claims.get(prompt) {
            Some(holder) if holder != id => false,
            Some(_) => {
                self.claims.remove(prompt);
                true
            }
            None => true,
        }
    }

    /// A job of `prompt` ended: a same-name prompt waiting for it may go.
    pub(super) fn unblock(&mut self, prompt: &PromptName) {
        if let Some(path) = self.blocked.remove(prompt) {
            match self.ending.as_mut() {
                Some(group) => group.unblocked.push(path),
                None => self.consider(&path),
            }
        }
    }

    pub(super) fn abort_if_queued(&mut self, id: &JobId) {
        let _span = tracing::info_span!("job", id = %id).entered();
        if !self.dequeue(id) {
            return;
        }
        self.refresh_ledger();
        let result = JobRecord::load_job(&self.layout, id)
            .map_err(JobError::from)
            .and_then(|mut rec| {
                // Nothing of it ran: it ends `cancelled`.
                let mut canceller = jobwarden_engine::cancel::Canceller {
                    layout: &self.layout,
                    config: &self.config,
                    host: &self.host,
                    ledger: self.ledger.as_mut(),
                    view_owed: false,
                };
                canceller.end_queued(&mut rec, "queued")?;
                tracing::info!(job = %id, state = %rec.state, "stopped while queued");
                self.notify_end(&rec);
                self.release_claim(&rec.prompt_name(), id);
                self.unblock(&rec.prompt_name());
                Ok(())
            });
        self.report(id, result);
        drop(_span);
        // A place it had been woken for may go to another job.
        self.dispatch();
    }

    /// The turn at `claim.lock` for the start-up reconciliation, so that a
    /// job `jobwarden abort` is claiming and cancelling itself is never
    /// found half-made. Waited for a bounded time: a holder that hangs
    /// delays the start, it does not stop it.
    pub(super) fn turn_for_recovery(&self) -> Option<jobwarden_engine::cancel::Turn> {
        match jobwarden_engine::cancel::take_turn(
            &self.layout,
            jobwarden_engine::cancel::TURN_PATIENCE,
        ) {
            Ok(Some(turn)) => Some(turn),
            Ok(None) => {
                tracing::warn!(
                    "{} stayed locked for {}; reconciling without waiting longer",
                    self.layout.claim_lock().display(),
                    humantime::format_duration(jobwarden_engine::cancel::TURN_PATIENCE)
                );
                None
            }
            Err(e) => {
                tracing::warn!("{e}; reconciling without the turn");
                None
            }
        }
    }

    pub(super) fn report(&self, id: &JobId, result: Result<(), JobError>) {
        if let Err(e) = result {
            tracing::error!(job = %id, "{e}");
        }
    }
}

/// The terminal record of job `id` its monitor handed over with its end
/// (written and made durable by it: what the journal says), and whether
/// `job.json` is behind it; `None` when there is none to take, and the
/// job's own is read.
fn handed_record(id: &JobId, handed: Option<&Handed>) -> Option<(JobRecord, bool)> {
    let handed = handed?;
    let rec = handed.record.as_deref()?;
    (rec.job_id == *id && rec.state.is_terminal()).then(|| (rec.clone(), handed.view_behind))
}

/// Is job `id`'s end settled: recorded, and `job.json` saying so too (a
/// view a full disk kept behind its journal is written again by the
/// retry, [`Daemon::settle`])?
fn end_settled(layout: &jobwarden_model::layout::Layout, id: &JobId) -> bool {
    JobRecord::load_job_view(layout, id)
        .is_ok_and(|(rec, behind)| rec.state.is_terminal() && !behind)
}
