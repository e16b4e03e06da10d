//! How a Slurm job's end becomes the job's: from the batch script's
//! record of the command's exit when there is one, else from Slurm's word.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::super::output::SharedSink;
use super::super::spawn::Stage;
use super::super::{EarlyEnd, Monitor};
use jobwarden_engine::slurm::{self, QueueEntry};
use jobwarden_model::events::Op;
use jobwarden_model::job::JobState;
use jobwarden_sys::clock::Timestamp;

/// How long Slurm is asked for its word on a job whose command recorded
/// its end.
const SETTLE_FOR: Duration = Duration::from_secs(2);

impl Monitor<'_> {
    /// Once the command's end is recorded: Slurm's own word on the job's
    /// end (asked a few times while the batch script exits, at most
    /// [`SETTLE_FOR`]). `Some(true)`: Slurm says it ended; `Some(false)`:
    /// Slurm says it still runs (the record was the job's own, not the
    /// script's); `None`: Slurm did not say.
    pub(super) async fn settled_in_slurm(&mut self) -> Option<bool> {
        let id = self.slurm_id()?;
        let ours = slurm::job_name(&self.rec.job_id);
        let until = Instant::now() + SETTLE_FOR;
        let mut said = None;
        loop {
            if let Ok(Some(entry)) = slurm::show(&id).await
                && entry.name == ours
            {
                if let Some(s) = self.rec.slurm.as_mut() {
                    jobwarden_engine::slurm::saw(s, &entry);
                }
                said = Some(!entry.state.is_active());
                if said == Some(true) {
                    return said;
                }
            }
            if Instant::now() >= until {
                return said;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The command ended and its script recorded how.
    pub(super) fn exited_on_slurm(
        &mut self,
        exited: &slurm::Exited,
        early: &Option<EarlyEnd>,
        sink: &SharedSink,
    ) -> (JobState, Option<String>) {
        let code = exited.exit_code;
        self.rec.exit_code = Some(code);
        if let Some(s) = self.rec.slurm.as_mut() {
            s.ended(exited.ended_at.unwrap_or_else(Timestamp::now));
            if let Some(host) = &exited.host {
                s.node = Some(host.clone());
            }
        }
        self.note_exit(Some(code), sink);
        // Slurm's word wins where Slurm ended the command itself (a node
        // that failed, its time limit, a cancel by someone else): the
        // record then only says how the killed command exited.
        let slurm_ended = self
            .rec
            .slurm
            .as_ref()
            .and_then(|s| {
                let entry = QueueEntry {
                    state: s.state.clone()?,
                    name: s.name.clone(),
                    node: s.node.clone(),
                    reason: s.reason.clone(),
                    exit_code: None,
                };
                ended_by_slurm(s.job_id.as_deref().unwrap_or("?"), &entry)
            })
            // A command that exited 0 had finished before the machine failed
            // under it: its run stands.
            .filter(|(state, _)| !(*state == JobState::Interrupted && code == 0));
        match early {
            Some(EarlyEnd::Abort(why)) => (JobState::Aborted, Some(why.clone())),
            Some(EarlyEnd::Timeout(after)) => self.timed_out(*after),
            None if slurm_ended.is_some() => {
                self.rec.failure_stage = Some(Stage::Run.as_str().into());
                slurm_ended.unwrap_or((JobState::Failed, None))
            }
            None if code == 0 => (JobState::Succeeded, None),
            None => {
                self.rec.failure_stage = Some(Stage::Run.as_str().into());
                (
                    JobState::Failed,
                    Some(format!("the command exited with code {code}")),
                )
            }
        }
    }

    /// The job ended in Slurm without the script's record: Slurm's word
    /// decides.
    pub(super) async fn ended_in_slurm(
        &mut self,
        id: &str,
        entry: &QueueEntry,
        early: &Option<EarlyEnd>,
    ) -> (JobState, Option<String>) {
        // `scontrol` knows the exit code that squeue does not show.
        let entry = match &entry.exit_code {
            Some(_) => entry.clone(),
            None => match slurm::show(id).await {
                Ok(Some(shown)) if shown.name == slurm::job_name(&self.rec.job_id) => shown,
                _ => entry.clone(),
            },
        };
        if let Some(s) = self.rec.slurm.as_mut() {
            jobwarden_engine::slurm::saw(s, &entry);
            s.ended(Timestamp::now());
        }
        let code = entry
            .exit_code
            .as_deref()
            .and_then(|c| c.split(':').next())
            .and_then(|c| c.parse::<i32>().ok());
        self.rec.exit_code = code.filter(|c| *c != 0).or(self.rec.exit_code);
        let state = entry.state.as_str();
        let (on, why) = where_and_why(&entry);
        let sink = self.log.clone();
        if let Some(sink) = &sink {
            self.note_exit(self.rec.exit_code, sink);
        }
        match early {
            Some(EarlyEnd::Abort(reason)) => {
                let never = self
                    .rec
                    .slurm
                    .as_ref()
                    .is_some_and(|s| s.started_at.is_none());
                let reason = if never {
                    format!("{reason}; Slurm had not started it")
                } else {
                    reason.clone()
                };
                return (JobState::Aborted, Some(reason));
            }
            Some(EarlyEnd::Timeout(after)) => return self.timed_out(*after),
            None => {}
        }
        self.rec.failure_stage = Some(Stage::Run.as_str().into());
        if let Some(ended) = ended_by_slurm(id, &entry) {
            return ended;
        }
        (
            JobState::Failed,
            Some(format!(
                "Slurm job {id} ended {state}{on}{why} without the batch script's exit record (in {})",
                self.rec.slurm.as_ref().map_or("", |s| s.batch_dir.as_str())
            )),
        )
    }

    /// Slurm no longer knows job `id`, and nothing recorded its end.
    pub(super) fn lost(
        &mut self,
        id: &str,
        early: &Option<EarlyEnd>,
    ) -> (JobState, Option<String>) {
        if let Some(s) = self.rec.slurm.as_mut() {
            s.ended(Timestamp::now());
        }
        match early {
            Some(EarlyEnd::Abort(reason)) => (JobState::Aborted, Some(reason.clone())),
            Some(EarlyEnd::Timeout(after)) => self.timed_out(*after),
            None => {
                self.rec.failure_stage = Some(Stage::Run.as_str().into());
                (
                    JobState::Interrupted,
                    Some(format!(
                        "Slurm no longer knows job {id}, and its batch script recorded no end: lost by the cluster"
                    )),
                )
            }
        }
    }

    pub(super) fn timed_out(&mut self, after: Duration) -> (JobState, Option<String>) {
        self.rec.failure_stage = Some(Stage::Run.as_str().into());
        let after = humantime::format_duration(after);
        (JobState::TimedOut, Some(format!("timed out after {after}")))
    }

    /// The `exited` event, and the tails kept for the ledger.
    pub(super) fn note_exit(&mut self, code: Option<i32>, sink: &SharedSink) {
        let s = self.rec.slurm.clone();
        self.events.append(
            Op::Exited,
            json!({
                "code": code,
                "signal": null,
                "slurm_job_id": s.as_ref().and_then(|s| s.job_id.clone()),
                "slurm_state": s.as_ref().and_then(|s| s.state.clone()),
                "node": s.as_ref().and_then(|s| s.node.clone()),
                "pending_ms": s.as_ref().and_then(|s| s.pending_ms),
                "run_ms": s.as_ref().and_then(|s| s.run_ms),
            }),
        );
        self.sync_log_fields(sink);
        self.keep_tails(Stage::Run, sink, 0);
    }
}

/// How a job ends that Slurm itself ended, when it did: cancelled there
/// by someone else, its time limit, the machine failing, out of memory.
/// `None` for an end the command's own exit decides.
fn ended_by_slurm(id: &str, entry: &QueueEntry) -> Option<(JobState, Option<String>)> {
    let state = entry.state.as_str();
    let (on, why) = where_and_why(entry);
    let ended = match state {
        "CANCELLED" => (
            JobState::Aborted,
            format!("Slurm job {id} was cancelled in Slurm{on}, not through jobwarden"),
        ),
        "TIMEOUT" => (
            JobState::TimedOut,
            format!("Slurm's time limit ended Slurm job {id}{on}"),
        ),
        _ if entry.state.is_infrastructure() => (
            JobState::Interrupted,
            format!("Slurm job {id} ended {state}{on}{why}: the cluster, not the job, failed"),
        ),
        "OUT_OF_MEMORY" => (
            JobState::Failed,
            format!("Slurm job {id} ran out of memory{on} (raise the profile's slurm.memory)"),
        ),
        _ => return None,
    };
    Some((ended.0, Some(ended.1)))
}

/// ` on node07` and ` (NodeDown)`, or empty, for a reason's words.
fn where_and_why(entry: &QueueEntry) -> (String, String) {
    let on = entry.node.as_deref().map(|n| format!(" on {n}"));
    let why = entry.reason.as_deref().map(|r| format!(" ({r})"));
    (on.unwrap_or_default(), why.unwrap_or_default())
}
