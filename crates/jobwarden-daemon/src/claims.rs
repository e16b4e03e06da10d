//! Finding and claiming prompts: what the watcher and rescans report, files
//! that must settle first, cooldowns that defer a claim (a timer brings
//! the prompt back), retry requests, and what a claim ended in.

use jobwarden_engine::claim::{Claimed, Claimer, Prior};
use jobwarden_engine::failure::JobError;
use jobwarden_engine::inbox::{self, Found, Signal};
use jobwarden_engine::retry;
use jobwarden_model::layout::{self, PromptName};
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::storage;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::Daemon;

/// Most signals handled in one group commit: a burst of drops is claimed
/// in groups of this many, each with one fsync per folder.
const CLAIM_BATCH: usize = 256;

impl Daemon {
    /// `first`, and every signal already waiting behind it (at most
    /// [`CLAIM_BATCH`] in all), as one group of claims.
    pub(super) fn on_signals(
        &mut self,
        first: Signal,
        more: &mut tokio::sync::mpsc::UnboundedReceiver<Signal>,
    ) {
        self.claiming(|daemon| {
            daemon.on_signal(first);
            for _ in 1..CLAIM_BATCH {
                match more.try_recv() {
                    Ok(signal) => daemon.on_signal(signal),
                    Err(_) => break,
                }
            }
        });
    }

    /// Run `claims` as one group commit (`fsio::batch`): their writes are
    /// made durable together, each folder once (the inbox folders their
    /// prompts were renamed in, `runs/`), and their ledger writes are one
    /// ledger commit. Only then are the monitors of
    /// the jobs that can start started: a job's start is durable before
    /// anything of it runs (its monitor's journal line), and must never
    /// outlive a claim a power cut took back, or the prompt would run
    /// twice. A crash before the commit leaves states that start-up
    /// recovery already handles (a `.running.md` without a record goes
    /// back to the inbox, a run folder without a journal line is a
    /// leftover).
    pub(super) fn claiming(&mut self, claims: impl FnOnce(&mut Self)) {
        let batch = jobwarden_sys::fsio::batch();
        let held = std::mem::replace(&mut self.holding_starts, true);
        // Their index rows as one ledger commit too, made before the
        // folders' (a row lost with it is the start-up check's to write
        // again: no monitor of these jobs has started).
        let _ = self.in_ledger_group(claims);
        self.holding_starts = held;
        let committed = batch.commit();
        if let Err(e) = &committed {
            match storage::fault_of(&e.source) {
                Some(condition) => self.storage_failed(condition, e.to_string()),
                None => tracing::error!(
                    "making the latest claims durable: {e}; their jobs wait for the next commit"
                ),
            }
        }
        if !held && let Ok(synced) = committed {
            if synced > 0 {
                jobwarden_sys::fault::pause("daemon-claimed");
            }
            self.dispatch();
        }
    }

    pub(super) fn on_signal(&mut self, signal: Signal) {
        match signal {
            // A prompt whose claim failed is retried by the next rescan, not
            // by the events its own put-back raises (that would spin).
            Signal::Complete(path) if self.claim_failed.contains(&path) => {}
            Signal::Complete(path) => self.consider(&path),
            Signal::Folder(dir) => inbox::scan(self.layout.root(), &dir)
                .into_iter()
                .for_each(|f| self.consider_found(f)),
            Signal::Abort(id) => self.abort_if_queued(&id),
            Signal::Priority(id) => self.take_priority(&id),
            Signal::Control => {
                self.refresh_pauses();
                self.refresh_limits();
            }
            Signal::InboxGone(how) => {
                tracing::warn!(
                    "{} was {how}; re-establishing the watch",
                    self.layout.inbox().display()
                );
                // Drop the dead watch whatever the folder there now looks
                // like: a folder made again at once may get the inode back.
                if let Some(w) = self.watcher.as_mut() {
                    w.pause();
                }
                self.rescan();
            }
            Signal::Lost(why) => {
                if !self.watch_degraded {
                    tracing::warn!("{why}; rescanning the inbox (events may have been missed)");
                }
                self.watch_degraded = true;
                self.rescan();
            }
        }
    }

    pub(super) fn rescan(&mut self) {
        self.claim_failed.clear();
        if self.check_inbox().is_none() {
            return;
        }
        let found = inbox::scan(self.layout.root(), &self.layout.inbox());
        self.claiming(|daemon| found.into_iter().for_each(|f| daemon.consider_found(f)));
    }

    /// A file seen only by a scan is claimed once its mtime is `settle` old,
    /// or once it has stayed unchanged for `settle` (an mtime in the future
    /// must not hold a prompt back); until then a timer waits for it. A
    /// file that the kernel says nobody has open for writing is complete
    /// already, as if its writer's close had been seen: that is what a
    /// prompt renamed into a project folder just created looks like, since
    /// its event came before the new folder's watch.
    pub(super) fn consider_found(&mut self, found: Found) {
        let age = SystemTime::now()
            .duration_since(found.mtime)
            .unwrap_or_default();
        let written =
            || jobwarden_sys::fsio::has_no_writer(self.layout.root(), &found.path) == Some(true);
        if age >= self.config.settle || written() {
            self.consider(&found.path);
        } else if self.settling_paths.insert(found.path.clone()) {
            self.settling.insert(found, self.config.settle - age);
        }
    }

    pub(super) fn on_settled(&mut self, seen: Found) {
        self.settling_paths.remove(&seen.path);
        let Ok(meta) = std::fs::symlink_metadata(&seen.path) else {
            return;
        };
        let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if mtime == seen.mtime {
            self.consider(&seen.path);
        } else {
            self.consider_found(Found {
                path: seen.path,
                mtime,
            });
        }
    }

    /// Claim `path` if it is a candidate and its prompt is not cooling down.
    pub(super) fn consider(&mut self, path: &Path) {
        self.renew_lease();
        if self.lease_failing {
            // Other hosts would take what this one claims: claim nothing
            // until the lease is written again (a rescan finds the rest).
            return;
        }
        // While storage refuses writes a claim would fail half-way: the
        // prompt waits in the inbox, and a rescan finds it on recovery.
        if self.stopping || !self.storage.is_ok() || self.inbox_refused.is_some() {
            return;
        }
        let entry = layout::classify_inbox_path(&self.layout.inbox(), path);
        let (prior, request) = match &entry {
            layout::InboxEntry::Ignored => return self.on_retry_request(path),
            layout::InboxEntry::Prompt(prompt) => match self.prior_or_defer(prompt, path) {
                Some((prior, request)) => (prior, request.map(|r| (prompt.clone(), r))),
                None => return,
            },
            layout::InboxEntry::InvalidName { .. } => (Prior::default(), None),
        };
        let view_owed = self.starts_at_once();
        let mut claimer = Claimer {
            layout: &self.layout,
            config: &self.config,
            host: &self.host,
            ledger: self.ledger.as_mut(),
            view_owed,
        };
        let claimed = claimer.claim(path, entry, &prior);
        if let (true, Ok(Claimed::Queued(rec))) = (view_owed, &claimed) {
            self.views_owed.insert(rec.job_id.clone());
        }
        if let Some((prompt, request)) = request {
            // Used: the job's record now says what the request said.
            if matches!(claimed, Ok(Claimed::Queued(_) | Claimed::Rejected(_))) {
                retry::request::clear_if(&self.layout, &prompt, &request);
            }
        }
        self.on_claimed(path, claimed);
    }

    /// `jobwarden retry --now` wrote a request beside a prompt deferred by
    /// its cooldown: look at that prompt again now (the request lifts the
    /// cooldown). Anything else ignored is ignored.
    pub(super) fn on_retry_request(&mut self, path: &Path) {
        let Some(prompt) = self.layout.prompt_of_retry_request(path) else {
            return;
        };
        if self.deferred.values().any(|(_, p)| *p == prompt) {
            self.consider(&prompt);
        }
    }

    /// The prompt's last run decides: in cooldown, it is deferred (a timer
    /// brings it back when the cooldown ends) and `None` is returned;
    /// otherwise the attempt it starts. A prompt put back by `jobwarden
    /// retry` continues the job its request names, and with `--now` skips
    /// the cooldown (see `retry::request`); the request is returned so that
    /// it is removed once used.
    pub(super) fn prior_or_defer(
        &mut self,
        prompt: &PromptName,
        path: &Path,
    ) -> Option<(Prior, Option<retry::request::Request>)> {
        self.refresh_ledger();
        let asked = self
            .ledger
            .as_ref()
            .map(|l| l.last_run(&prompt.project, &prompt.name));
        let last = match asked {
            // A damaged ledger: claimed without history (see `ledger_state`).
            None => None,
            Some(Ok(last)) => last,
            Some(Err(e)) if e.is_damaged() => {
                self.ledger_failed(&e);
                None
            }
            Some(Err(e)) => {
                // Claiming blind could skip a cooldown or restart the attempt
                // count: wait a heartbeat and ask again.
                tracing::warn!(%prompt, "{e}; retrying shortly");
                let retry_at = Timestamp::now()
                    .plus(self.config.heartbeat_interval)
                    .epoch_ms();
                self.defer(prompt, path, retry_at);
                return None;
            }
        };
        let request = retry::request::honoured(&self.layout, prompt, path, last.as_ref());
        let now = Timestamp::now().epoch_ms();
        if let Some(d) = retry::deferral(&self.config, last.as_ref(), request.as_ref(), now) {
            if self.defer(prompt, path, d.until_ms) {
                self.notify_cooldown(&d);
            }
            return None;
        }
        self.deferred.remove(prompt);
        let requeued_by = retry::continues(last.as_ref(), request.as_ref());
        Some((Prior { requeued_by }, request))
    }

    /// Defer `prompt` until `until` (epoch ms); false if it already was.
    pub(super) fn defer(&mut self, prompt: &PromptName, path: &Path, until: u64) -> bool {
        let known = self.deferred.get(prompt).is_some_and(|(u, _)| *u == until);
        if known {
            return false;
        }
        let wait = Duration::from_millis(until.saturating_sub(Timestamp::now().epoch_ms()));
        tracing::info!(%prompt, cooldown_ends_in = %humantime::format_duration(Duration::from_millis(wait.as_millis() as u64)), "in cooldown; deferred");
        self.deferred
            .insert(prompt.clone(), (until, path.to_path_buf()));
        self.cooling.insert(path.to_path_buf(), wait);
        true
    }

    /// Forget the cooldowns of prompts no longer waiting where they were
    /// deferred (cancelled from the inbox, moved away): `daemon.json` and
    /// the metrics stop counting them at once, not when their timers fire.
    pub(super) fn forget_gone_deferrals(&mut self) {
        self.deferred.retain(|prompt, (_, path)| {
            let here = std::fs::symlink_metadata(&*path).is_ok();
            if !here {
                tracing::info!(%prompt, "no longer waiting in the inbox; its cooldown is forgotten");
            }
            here
        });
    }

    /// A cooldown timer fired: forget it (so that, should the wall clock
    /// have stepped back, a new one is armed) and look at the prompt again.
    pub(super) fn on_cooled(&mut self, path: PathBuf) {
        self.deferred.retain(|_, (_, p)| *p != path);
        self.consider(&path);
    }

    pub(super) fn on_claimed(&mut self, path: &Path, claimed: Result<Claimed, JobError>) {
        let _span = match &claimed {
            Ok(Claimed::Queued(rec) | Claimed::Rejected(rec)) => {
                if let Some(dropped) = rec.dropped_at {
                    let ms = rec.created_at.epoch_ms().saturating_sub(dropped.epoch_ms());
                    self.claim_latency.observe(ms);
                }
                self.note_made_here(&rec.job_id);
                Some(tracing::info_span!("job", id = %rec.job_id).entered())
            }
            _ => None,
        };
        match claimed {
            Ok(Claimed::Queued(rec)) => {
                tracing::info!(job = %rec.job_id, prompt = %rec.prompt_name(), "claimed");
                // Its index row was written by the claim, before its folder.
                self.claims.insert(rec.prompt_name(), rec.job_id.clone());
                self.work_seen = true;
                self.enqueue(&rec);
                drop(_span);
                self.dispatch();
            }
            Ok(Claimed::Rejected(rec)) => {
                tracing::warn!(job = %rec.job_id, prompt = %rec.prompt_name(), reason = rec.state_reason.as_deref().unwrap_or(""), "rejected");
                self.notify_end(&rec);
            }
            Ok(Claimed::Lost) => {
                tracing::debug!(path = %path.display(), "claimed elsewhere or gone")
            }
            Ok(Claimed::Busy(prompt)) => {
                if self
                    .blocked
                    .insert(prompt.clone(), path.to_path_buf())
                    .is_none()
                {
                    tracing::info!(%prompt, "an earlier job of this prompt still holds it; the new drop waits for it");
                }
            }
            Err(JobError::Ledger(e)) if e.is_damaged() => {
                // Asked whether the job id is taken: without the ledger,
                // the run folders answer. Claim again at once.
                self.ledger_failed(&e);
                self.consider(path);
            }
            Err(e) => {
                if let Some(condition) = e.storage_fault() {
                    self.storage_failed(condition, e.to_string());
                    return;
                }
                if self.claim_failed.insert(path.to_path_buf()) {
                    tracing::error!(path = %path.display(), "claim failed; the prompt was left (or put back) in the inbox for the next rescan: {e}");
                }
            }
        }
    }
}
