//! What the daemon does on its timers: the heartbeat tick (`daemon.json`,
//! pauses, storage, unsettled ends, the status line), the clock watched
//! for steps, retention and the reconcile of published work started on
//! their own tasks.

use std::sync::atomic::Ordering;

use super::state_file::Phase;
use super::{Daemon, Slot, inbox_watch};
use jobwarden_ledger::Ledger;
use jobwarden_model::abort;
use jobwarden_model::job::JobId;
use jobwarden_sys::clock::Timestamp;

impl Daemon {
    /// Say, and keep in the ledger, a step of the wall clock: times in
    /// records around it do not add up, and cooldowns and timeouts by the
    /// wall clock moved with it.
    pub(super) fn watch_clock(&mut self) {
        let Some(step) = self.clock.look() else {
            return;
        };
        let how = if step > 0 { "ahead" } else { "back" };
        // To the second: the tick's own jitter is in the milliseconds.
        let secs = step.unsigned_abs().saturating_add(500) / 1000;
        let by = humantime::format_duration(std::time::Duration::from_secs(secs));
        tracing::warn!(step_ms = step, "the wall clock stepped {how} by {by}");
        if let Some(ledger) = self.ledger.as_ref()
            && let Err(e) = ledger.record_clock_step(Timestamp::now().epoch_ms(), step, &self.host)
        {
            tracing::warn!("keeping the clock step in the ledger: {e}");
        }
    }

    /// The heartbeat tick: `daemon.json`, the ABORT fallback for queued
    /// jobs, and the liveness of adopted monitors.
    pub(super) fn on_tick(&mut self) {
        jobwarden_sys::fault::point("daemon-tick");
        self.commit_owed_moves();
        self.watch_clock();
        self.poll_quick_check();
        self.monitors.retire_long_idle();
        self.retry_startup_found();
        if !self.ledger_condition.ok {
            // A repair replaces the file: notice it without waiting for a claim.
            self.refresh_ledger();
        }
        let change = self.storage.probe(self.layout.root());
        self.storage_changed(change);
        if !self.unsettled.is_empty() && self.storage.is_ok() {
            self.settle_unsettled();
        }
        self.write_owed_rows();
        let aborted: Vec<JobId> = self
            .sched
            .queue
            .ids()
            .filter(|id| abort::requested(&self.layout, id))
            .cloned()
            .collect();
        for id in aborted {
            self.abort_if_queued(&id);
        }
        self.look_for_priority_requests();
        let gone: Vec<JobId> = self
            .running
            .iter()
            .filter(|(_, slot)| matches!(slot, Slot::Adopted(p) if !p.is_alive()))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.on_job_gone(&id, "adopted monitor no longer running");
        }
        if self.check_inbox() == Some(true) {
            self.rescan();
        }
        self.share_inbox();
        self.refresh_pauses();
        self.refresh_limits();
        self.forget_gone_deferrals();
        self.look_again_at_waiting();
        self.tell_ends_by_hand();
        self.dispatch();
        self.write_state(if self.stopping {
            Phase::Stopping
        } else {
            Phase::Running
        });
        let status = self.status_line();
        self.notifier.status(&status);
    }

    /// The service manager's one-line status: what runs, waits and cools.
    /// In an inbox shared with other hosts: this host's lease renewed, and
    /// the claims of hosts silent for a whole lease requeued (and claimed
    /// at once, here or by whoever is quicker).
    fn share_inbox(&mut self) {
        let Some(shared) = self.config.shared_inbox.clone() else {
            return;
        };
        self.renew_lease();
        if self.inbox_refused.is_some() || !self.storage.is_ok() {
            return;
        }
        if self.shared.pass(&self.layout, &shared) > 0 && !self.stopping {
            self.rescan();
        }
    }

    /// Renew this host's lease in a shared inbox: before the first claim,
    /// at every tick, and between claims (a burst of claims can hold the
    /// loop for longer than a lease), at most once per half heartbeat.
    pub(super) fn renew_lease(&mut self) {
        if self.config.shared_inbox.is_none()
            || self
                .lease_renewed
                .is_some_and(|at| at.elapsed() < self.config.heartbeat_interval / 2)
        {
            return;
        }
        self.lease_renewed = Some(std::time::Instant::now());
        match jobwarden_engine::shared_inbox::renew(&self.layout, &self.config) {
            Ok(()) if std::mem::take(&mut self.lease_failing) => {
                tracing::info!("this host's lease in the shared inbox is renewed again");
            }
            Ok(()) => {}
            Err(e) if !self.lease_failing => {
                tracing::error!(
                    "renewing this host's lease in the shared inbox: {e}; once it is a lease old, other hosts take this host's claims"
                );
                self.lease_failing = true;
            }
            Err(_) => {}
        }
    }

    pub(super) fn status_line(&self) -> String {
        let mut line = format!(
            "{} running, {} queued, {} deferred",
            self.running.len(),
            self.sched.queue.len(),
            self.deferred.len()
        );
        line.push_str(&self.pauses_line());
        if !self.storage.is_ok() {
            line.push_str(&format!(
                "; storage {}, claims paused",
                self.storage.condition
            ));
        }
        if let Some(note) = self.control.status_note() {
            line.push_str("; ");
            line.push_str(note);
        }
        match self.watch_state() {
            (inbox_watch::WatchState::Inotify, _) => {}
            (inbox_watch::WatchState::Rescan, _) => {
                line.push_str("; inotify unavailable, rescanning")
            }
            (inbox_watch::WatchState::Refused, _) => {
                line.push_str("; inbox refused, nothing claimed")
            }
        }
        line
    }

    /// The reconcile of published work, while the ledger is sound (a
    /// damaged one is said once, by the ledger's own check).
    pub(super) fn reconcile_published(&mut self) {
        if self.ledger.is_some() {
            self.published
                .start(&self.layout, &self.config, &self.hooks);
        }
    }

    /// Retention, off the loop's thread and on its own ledger connection
    /// (WAL lets it write beside us); never two at once.
    pub(super) fn collect_garbage(&mut self) {
        if self.gc_running.swap(true, Ordering::AcqRel) {
            return;
        }
        let (layout, config, running) = (
            self.layout.clone(),
            self.config.clone(),
            self.gc_running.clone(),
        );
        // A panic here stops the daemon like any other (see the panic hook
        // in `commands::daemon`).
        tokio::task::spawn_blocking(move || {
            match Ledger::open(&layout.ledger()) {
                // `collect` logs its own summary.
                Ok(mut ledger) => drop(jobwarden_engine::gc::collect(
                    &layout,
                    &config,
                    &mut ledger,
                    false,
                )),
                Err(e) => tracing::warn!("retention skipped: {e}"),
            }
            running.store(false, Ordering::Release);
        });
    }
}
