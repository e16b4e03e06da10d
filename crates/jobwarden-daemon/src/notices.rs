//! What the daemon tells the `[[notify]]` hooks (`jobwarden_engine::hooks`): a job's
//! end by its state, `needs_attention` when that end needs the operator,
//! `retrying` instead of both when the failure put the prompt back for an
//! automatic retry (its record says `requeued`), `cooldown` when a prompt
//! is deferred by the cooldown its last run started, and `all_done` once
//! the queue has drained after work — no prompt waiting in the inbox,
//! deferred or not — and stayed so for [`ALL_DONE_QUIET`]. Each is handed
//! to the hub and never waited for.
//!
//! A prompt cancelled while it waits in the inbox (`jobwarden abort
//! project/name`, the web page's cancel) is claimed and ended by the
//! process that cancelled it, not by this daemon: the tick looks in the
//! job index for jobs cancelled since its last look that it did not end
//! itself, and tells their end once ([`Daemon::tell_ends_by_hand`]). What
//! was cancelled while no daemon ran is not told.

use std::time::Duration;

use serde_json::json;

use super::Daemon;
use jobwarden_engine::hooks::Notice;
use jobwarden_engine::retry::Deferral;
use jobwarden_ledger::JobFilter;
use jobwarden_ledger::Outcome;
use jobwarden_model::job::JobState;
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_sys::clock::Timestamp;

/// How long the queue must stay drained before `all_done` is told: a
/// script dropping prompts one after another is not done between two.
pub(super) const ALL_DONE_QUIET: Duration = Duration::from_secs(2);

/// How far before its last look the look for ends made by hand reaches
/// again: a cancel claimed just before a look whose end was indexed just
/// after it.
const BY_HAND_OVERLAP_MS: u64 = 60_000;

/// The disposition of an ended job whose prompt went back to the inbox.
const REQUEUED: &str = "requeued";

/// The most jobs cancelled by hand one look tells.
const BY_HAND_MAX: usize = 1000;

impl Daemon {
    /// The ended job `rec`: its state, and `needs_attention` when its
    /// outcome needs the operator; `retrying` instead of both when the
    /// failure put its prompt back for an automatic retry.
    pub(super) fn notify_end(&mut self, rec: &JobRecord) {
        self.work_seen = true;
        if rec.state == JobState::Cancelled {
            self.told_cancelled
                .insert(rec.job_id.clone(), rec.created_at.epoch_ms());
        }
        let outcome = rec
            .outcome
            .as_deref()
            .and_then(|o| o.parse::<Outcome>().ok());
        let needs_attention = outcome.is_some_and(Outcome::needs_attention);
        if needs_attention && rec.disposition.as_deref() == Some(REQUEUED) {
            self.notify_retrying(rec);
            return;
        }
        let state = rec.state.as_str();
        if self.hooks.wants(state) {
            self.hooks
                .send(Notice::of_job(state, rec, &self.layout, json!({})));
        }
        if needs_attention && self.hooks.wants("needs_attention") {
            self.hooks.send(Notice::of_job(
                "needs_attention",
                rec,
                &self.layout,
                json!({}),
            ));
        }
    }

    /// A failed attempt whose prompt went back to the inbox for the next
    /// one: not the prompt's failure yet (its last attempt's tells that).
    fn notify_retrying(&self, rec: &JobRecord) {
        if self.hooks.wants("retrying") {
            let extra = json!({ "next_attempt": rec.attempt.saturating_add(1) });
            self.hooks
                .send(Notice::of_job("retrying", rec, &self.layout, extra));
        }
    }

    /// Tell the end of the jobs cancelled by hand since the last look
    /// (see the module's docs): those the job index says `cancelled`,
    /// claimed since then, that this daemon did not tell already.
    pub(super) fn tell_ends_by_hand(&mut self) {
        if !self.hooks.wants(JobState::Cancelled.as_str()) {
            return;
        }
        let Some(ledger) = self.ledger.as_ref() else {
            return;
        };
        let now = Timestamp::now().epoch_ms();
        let since = self
            .by_hand_since
            .saturating_sub(BY_HAND_OVERLAP_MS)
            .max(self.started_at.epoch_ms());
        let filter = JobFilter {
            states: vec![JobState::Cancelled.as_str().to_owned()],
            since_ms: Some(since),
            ..JobFilter::default()
        };
        let found = match ledger.list_jobs(&filter, BY_HAND_MAX) {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!(
                    "looking for jobs cancelled by hand: {e}; looked for again at the next tick"
                );
                return;
            }
        };
        for job in found {
            let Ok(id) = JobId::parse(&job.id) else {
                continue;
            };
            if !self.told_cancelled.contains_key(&id) {
                self.notify_end_of(&id);
                // A record that cannot be read now is not told later either:
                // the look does not come back to it.
                self.told_cancelled.insert(id, job.created_at);
            }
        }
        self.by_hand_since = now;
        let keep_from = now.saturating_sub(2 * BY_HAND_OVERLAP_MS);
        self.told_cancelled
            .retain(|_, claimed| *claimed >= keep_from);
    }

    /// The end of job `id`, if its record says it ended.
    pub(super) fn notify_end_of(&mut self, id: &JobId) {
        if let Ok(rec) = JobRecord::load_job(&self.layout, id)
            && rec.state.is_terminal()
        {
            self.notify_end(&rec);
        }
    }

    /// A prompt deferred by the cooldown its last run `d` started.
    pub(super) fn notify_cooldown(&self, d: &Deferral) {
        if !self.hooks.wants("cooldown") {
            return;
        }
        let Ok(id) = JobId::parse(&d.after_job) else {
            return;
        };
        let Ok(rec) = JobRecord::load_job(&self.layout, &id) else {
            return;
        };
        let extra = json!({
            "cooldown_until": jobwarden_sys::clock::Timestamp::from_epoch_ms(d.until_ms),
            "cooldown_ms": d.cooldown.as_millis() as u64,
            "cooldown_profile": d.profile,
        });
        self.hooks
            .send(Notice::of_job("cooldown", &rec, &self.layout, extra));
    }

    /// Is the daemon drained: nothing running, queued, settling, waiting
    /// for its cooldown (a retry to come) or to be recorded?
    fn drained(&self) -> bool {
        self.running.is_empty()
            && self.sched.queue.len() == 0
            && self.settling.is_empty()
            && self.deferred.is_empty()
            && self.unsettled.is_empty()
            && self.clearing_jobs.is_empty()
    }

    /// After each event of the loop: once drained after work, `all_done`
    /// is due after the quiet time; work arriving meanwhile puts it off.
    pub(super) fn watch_all_done(&mut self) {
        if !self.work_seen || self.stopping {
            return;
        }
        if !self.drained() {
            self.all_done_due = None;
        } else if self.all_done_due.is_none() {
            self.all_done_due = Some(tokio::time::Instant::now() + ALL_DONE_QUIET);
        }
    }

    /// The quiet time passed, still drained: tell `all_done`, with the
    /// batch's summary. The batch's code is not run again until the next
    /// work arrives: its pages go back (see `memory`).
    /// A prompt still waiting in the inbox (one whose claim waits for
    /// writes to succeed again, say) is work not done: looked at again
    /// after a rescan's interval, not told.
    pub(super) fn on_all_done(&mut self) {
        self.all_done_due = None;
        if !self.drained() {
            return;
        }
        if !jobwarden_engine::waiting::list(&self.layout).is_empty() {
            let again = self.config.rescan_interval.max(ALL_DONE_QUIET);
            self.all_done_due = Some(tokio::time::Instant::now() + again);
            return;
        }
        self.work_seen = false;
        self.tell_all_done();
        jobwarden_sys::memory::release_after_work();
    }

    fn tell_all_done(&self) {
        let summary = self
            .ledger
            .as_ref()
            .and_then(|l| l.completion_summary().ok().flatten());
        let Some(summary) = summary else {
            return;
        };
        tracing::info!(
            jobs = summary.jobs,
            elapsed_ms = summary.elapsed_ms,
            needs_attention = summary.needs_attention.len(),
            "all done"
        );
        if self.hooks.wants("all_done") {
            let summary = serde_json::to_value(&summary).unwrap_or_default();
            self.hooks.send(Notice::all_done(summary, &self.layout));
        }
    }
}
