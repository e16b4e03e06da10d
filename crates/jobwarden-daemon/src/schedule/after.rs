//! Dependencies (front matter `after`, resolved to job ids by the claim):
//! a queued job starts once every job it waits for ended `succeeded` or
//! `merged`. One that ended another way but whose prompt was put back for
//! another attempt is followed to that attempt (the newer job whose
//! `retry_of` chain leads back to it), to the last. One that ended any
//! other way for good dooms the job waiting for it: that job ends
//! `cancelled`, its reason naming the job and how it ended (pueue's rule
//! for `--after`). A job can only wait for jobs that existed when it was
//! claimed, so no cycle can form.

use super::super::Daemon;
use super::Blocker;
use jobwarden_ledger::{Ledger, short_id};
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::Layout;

/// How far a chain of retries is followed (a prompt's attempts are at
/// most 100).
const MAX_CHAIN: usize = 128;

/// Where a job's dependencies stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Every one ended `succeeded` or `merged`.
    Met,
    /// This one has not ended (or its next attempt is not claimed yet).
    Waits(JobId),
    /// One ended otherwise, for good: why, in words.
    Failed(String),
}

/// How the jobs of `after` stand, the first that is not met deciding.
pub(crate) fn standing(layout: &Layout, ledger: Option<&Ledger>, after: &[JobId]) -> Standing {
    for dep in after {
        match one(layout, ledger, dep) {
            Standing::Met => {}
            other => return other,
        }
    }
    Standing::Met
}

/// How `dep` stands, its retries followed to the last.
fn one(layout: &Layout, ledger: Option<&Ledger>, dep: &JobId) -> Standing {
    let mut id = dep.clone();
    for _ in 0..MAX_CHAIN {
        let rec = match JobRecord::load_job(layout, &id) {
            Ok(rec) => rec,
            // Gone whole (retention, by hand): nothing can say it succeeded.
            Err(_) if std::fs::symlink_metadata(layout.run_dir(&id)).is_err() => {
                return Standing::Failed(format!(
                    "job {} it waited for no longer exists",
                    short_id(id.as_str())
                ));
            }
            // Being rewritten, or damaged: its monitor or the daemon mends it.
            Err(_) => return Standing::Waits(id),
        };
        if !rec.state.is_terminal() {
            return Standing::Waits(id);
        }
        if matches!(rec.state, JobState::Succeeded | JobState::Merged) {
            return Standing::Met;
        }
        if rec.disposition.as_deref() == Some("requeued") {
            match next_attempt(layout, ledger, &rec) {
                Some(next) => {
                    id = next;
                    continue;
                }
                None => return Standing::Waits(id),
            }
        }
        let why = rec
            .state_reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        return Standing::Failed(format!(
            "job {} ({}) it waited for ended {}{why}",
            short_id(id.as_str()),
            rec.prompt_name(),
            rec.state
        ));
    }
    Standing::Waits(id)
}

/// The attempt that followed `rec`, once claimed: the newest job of its
/// prompt, if its `retry_of` chain leads back to `rec`, and the job right
/// after `rec` on it.
fn next_attempt(layout: &Layout, ledger: Option<&Ledger>, rec: &JobRecord) -> Option<JobId> {
    let newest = ledger?.newest_job_of(&rec.project, &rec.name).ok()??;
    let mut later = JobId::parse(&newest.id).ok()?;
    for _ in 0..MAX_CHAIN {
        if later == rec.job_id {
            return None;
        }
        let before = JobRecord::load_job(layout, &later).ok()?.retry_of?;
        if before == rec.job_id {
            return Some(later);
        }
        later = before;
    }
    None
}

/// A waiting job's dependency in words: `after job 0f3c9a1b (p/a, running)`.
pub(crate) fn describe(layout: &Layout, dep: &JobId) -> String {
    let short = short_id(dep.as_str());
    match JobRecord::load_job(layout, dep) {
        Ok(rec) => format!("after job {short} ({}, {})", rec.prompt_name(), rec.state),
        Err(_) => format!("after job {short}"),
    }
}

impl Daemon {
    /// End queued job `id` `cancelled`: a job it waited for ended other
    /// than `succeeded` (`why`). Its ABORT marker says so first, as any
    /// cancel of a queued job.
    pub(super) fn cancel_for_dependency(&mut self, id: &JobId, why: &str) {
        let reason = format!("{why}; this job waited for it (after), so it does not run");
        tracing::info!(job = %id, "{reason}");
        match jobwarden_model::abort::write_marker_by(
            &self.layout,
            id,
            Some(&reason),
            "jobwarden (after)",
        ) {
            Ok(_) => self.abort_if_queued(id),
            Err(e) => {
                tracing::error!(job = %id, "{e}; it waits in the queue, cancelled at the next try")
            }
        }
    }

    /// Judge again every job waiting for another, for its start time or
    /// for its window (at each tick: time passed, a job waited for may
    /// have ended elsewhere, or its next attempt been claimed).
    pub(crate) fn look_again_at_waiting(&mut self) {
        self.sched.queue.unpark_where(Blocker::looked_at_each_tick);
        self.dispatch();
    }
}
