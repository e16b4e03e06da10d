//! What the daemon tells the `[[notify]]` hooks (`jobwarden_engine::hooks`): a job's
//! end by its state, `needs_attention` when that end needs the operator,
//! `cooldown` when a prompt is deferred by the cooldown its last run
//! started, and `all_done` once the queue has drained after work and
//! stayed so for [`ALL_DONE_QUIET`]. Each is handed to the hub and never
//! waited for.

use std::time::Duration;

use serde_json::json;

use super::Daemon;
use jobwarden_engine::hooks::Notice;
use jobwarden_engine::retry::Deferral;
use jobwarden_ledger::Outcome;
use jobwarden_model::job::{JobId, JobRecord};

/// How long the queue must stay drained before `all_done` is told: a
/// script dropping prompts one after another is not done between two.
pub(super) const ALL_DONE_QUIET: Duration = Duration::from_secs(2);

impl Daemon {
    /// The ended job `rec`: its state, and `needs_attention` when its
    /// outcome needs the operator.
    pub(super) fn notify_end(&mut self, rec: &JobRecord) {
        self.work_seen = true;
        let state = rec.state.as_str();
        if self.hooks.wants(state) {
            self.hooks
                .send(Notice::of_job(state, rec, &self.layout, json!({})));
        }
        let outcome = rec
            .outcome
            .as_deref()
            .and_then(|o| o.parse::<Outcome>().ok());
        if outcome.is_some_and(Outcome::needs_attention) && self.hooks.wants("needs_attention") {
            self.hooks.send(Notice::of_job(
                "needs_attention",
                rec,
                &self.layout,
                json!({}),
            ));
        }
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

    /// Is the daemon drained: nothing running, queued, settling or waiting
    /// to be recorded?
    fn drained(&self) -> bool {
        self.running.is_empty()
            && self.sched.queue.len() == 0
            && self.settling.is_empty()
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
    pub(super) fn on_all_done(&mut self) {
        self.all_done_due = None;
        if !self.drained() {
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
