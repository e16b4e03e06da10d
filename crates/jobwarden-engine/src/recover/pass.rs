//! One reconciliation pass over the jobs it is given: what each record
//! found on disk becomes (adopted, queued again, interrupted, restored to
//! the end the ledger holds, set aside), and then the claimed prompts
//! (`*.running.md`) that no live record holds: an ended job's move is
//! finished, an orphan goes back to the inbox.
//!
//! The start-up reconciliation runs it over the jobs that may be live
//! (without the claims step, which needs every record), and the start-up
//! check runs it, on the daemon's loop, over what the full listing of
//! `runs/` found (see [`super`] and `recover/sweep.rs`).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use crate::failure::JobError;
use jobwarden_ledger::Ledger;
use jobwarden_model::config::Config;
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::procfs::Proc;

use super::{Recovered, adopt, interrupt, requeue_orphans, restore_prompt_copy, witnessed_end};

/// A reconciliation under way: the jobs taken over so far, and what the
/// records read say about claimed prompts.
pub struct Pass<'a> {
    pub layout: &'a Layout,
    pub config: &'a Config,
    pub host: &'a str,
    pub ledger: Option<&'a mut Ledger>,
    out: Recovered,
    queued: Vec<(Timestamp, JobId, i32)>,
    /// Claimed prompts (`*.running.md` paths) that a live record holds.
    pub held: HashSet<PathBuf>,
    /// For each claimed prompt, the newest ended record naming it.
    pub ended: HashMap<PathBuf, JobRecord>,
    foreign: usize,
    /// A live monitor's record is unusable, so its prompt is unknown: no
    /// claimed prompt may be taken for an orphan.
    pub unknown_claims: bool,
}

impl<'a> Pass<'a> {
    pub fn new(
        layout: &'a Layout,
        config: &'a Config,
        host: &'a str,
        ledger: Option<&'a mut Ledger>,
    ) -> Self {
        Pass {
            layout,
            config,
            host,
            ledger,
            out: Recovered::default(),
            queued: Vec::new(),
            held: HashSet::new(),
            ended: HashMap::new(),
            foreign: 0,
            unknown_claims: false,
        }
    }

    /// Put job `id` where it belongs: `loaded` is its record as read,
    /// `monitor` its live monitor, if one is proven.
    pub fn job(&mut self, id: JobId, loaded: Result<JobRecord, JobError>, monitor: Option<Proc>) {
        let layout = self.layout;
        if let Some(monitor) = monitor {
            match &loaded {
                Ok(rec) => {
                    self.held.insert(layout.running_prompt(&rec.prompt_name()));
                }
                Err(e) => {
                    tracing::warn!(job = %id, pid = monitor.pid, "its record is unusable ({e}), but its monitor runs: adopted, and the monitor writes the record again");
                    self.unknown_claims = true;
                }
            }
            adopt(layout, self.config, &id, loaded.ok().as_ref(), monitor);
            self.out.adopted.push((id, monitor));
            return;
        }
        let Some(mut rec) = set_aside_if_bad(layout, &id, loaded) else {
            return;
        };
        if rec.host != self.host {
            // Another machine's job (a shared inbox): it judges its own.
            self.foreign += 1;
            self.held.insert(layout.running_prompt(&rec.prompt_name()));
            return;
        }
        if !rec.state.is_terminal() {
            witnessed_end(layout, self.config, self.ledger.as_deref(), &mut rec);
        }
        if rec.state.is_terminal() {
            self.ended_record(rec);
            return;
        }
        self.held.insert(layout.running_prompt(&rec.prompt_name()));
        match rec.state {
            JobState::Queued if !rec.monitor_took() => {
                restore_prompt_copy(layout, &rec);
                self.queued.push((rec.created_at, id, rec.priority));
            }
            JobState::Running if rec.slurm.is_some() => self.out.reattach.push(id),
            _ => {
                let why = "its monitor was gone when the daemon started";
                let ledger = self.ledger.as_deref_mut();
                let clearing = interrupt(layout, self.config, ledger, &mut rec, why, true);
                self.out.clearing.extend(clearing);
            }
        }
    }

    /// Note an ended record: the newest of a prompt's may have a move to
    /// finish.
    pub fn ended_record(&mut self, rec: JobRecord) {
        let running = self.layout.running_prompt(&rec.prompt_name());
        let newer =
            |old: &JobRecord| (rec.finished_at, &rec.job_id) > (old.finished_at, &old.job_id);
        if self.ended.get(&running).is_none_or(newer) {
            self.ended.insert(running, rec);
        }
    }

    /// The claimed prompts: finish the move of each one whose newest job
    /// ended (its finisher stopped before moving it; its monitor is gone),
    /// unless a live job holds it; then put every one of `claimed` that no
    /// record holds back in the inbox. Only once every record that may
    /// hold one was seen.
    pub fn settle_claims(&mut self, claimed: Vec<PathBuf>) {
        for (running, mut rec) in std::mem::take(&mut self.ended) {
            if !running.exists() || self.held.contains(&running) {
                continue;
            }
            let ledger = self.ledger.as_deref_mut();
            if !crate::terminal::resume(self.layout, self.config, ledger, &mut rec) {
                // Never requeue a prompt whose job ended but could not be moved.
                self.held.insert(running);
            }
        }
        requeue_orphans(self.layout, claimed, &self.held, self.unknown_claims);
    }

    /// What was taken over; queued jobs in claim order.
    pub fn finish(mut self) -> Recovered {
        if self.foreign > 0 {
            tracing::warn!(
                jobs = self.foreign,
                "unfinished jobs recorded by another host were left alone"
            );
        }
        self.queued.sort();
        self.out.queued = self.queued.into_iter().map(|(_, id, p)| (id, p)).collect();
        self.out.held = self.held;
        self.out.unknown_claims = self.unknown_claims;
        self.out
    }
}

/// The loaded record; a corrupt one is moved aside and reported.
pub fn set_aside_if_bad(
    layout: &Layout,
    id: &JobId,
    loaded: Result<JobRecord, JobError>,
) -> Option<JobRecord> {
    match loaded {
        Ok(rec) => Some(rec),
        Err(JobError::BadRecord { path, reason }) => {
            let aside = layout.corrupt_record(id, Timestamp::now().epoch_ms());
            match jobwarden_sys::fsio::rename_noreplace(layout.root(), &path, &aside) {
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
