//! The operator's standing orders as the scheduler follows them: the
//! pauses and the limits set by hand under `control/` (read again at
//! start, on every change the watch reports, and at each tick), the
//! number of jobs that may run at once, a queued job's priority changed
//! by hand, and what `daemon.json` says of the queue (why each job
//! waits).

use super::super::Daemon;
use super::super::state_file::{self, Queued};
use super::{Blocker, after};
use jobwarden_model::control::{self, Pauses, Scope};
use jobwarden_model::job::{JobId, JobRecord};

impl Daemon {
    /// Read the pause markers again; log what changed, let the jobs of a
    /// lifted pause go.
    pub(crate) fn refresh_pauses(&mut self) {
        let now = control::read(&self.layout);
        if now == self.sched.pauses {
            return;
        }
        if now.ignored != self.sched.pauses.ignored {
            for path in &now.ignored {
                tracing::warn!(
                    "{} names no profile or project: it pauses nothing (write markers with `jobwarden pause`)",
                    path.display()
                );
            }
        }
        let was = std::mem::replace(&mut self.sched.pauses, now);
        let is_listed = |pauses: &Pauses, scope: &Scope| match scope {
            Scope::Daemon => pauses.daemon.is_some(),
            Scope::Profile(p) => pauses.profiles.contains_key(p),
            Scope::Project(p) => pauses.projects.contains_key(p),
        };
        for (scope, pause) in self.sched.pauses.list() {
            if !is_listed(&was, &scope) {
                let reason = pause.reason.as_deref().unwrap_or("no reason given");
                tracing::info!(%scope, "paused ({reason}): its jobs wait; prompts are still claimed");
            }
        }
        for (scope, _) in was.list() {
            if is_listed(&self.sched.pauses, &scope) {
                continue;
            }
            tracing::info!(%scope, "resumed");
            match scope {
                Scope::Daemon => {}
                Scope::Profile(p) => self.wake(&Blocker::PausedProfile(p)),
                Scope::Project(p) => self.wake(&Blocker::PausedProject(p)),
            }
        }
        self.dispatch();
    }

    /// How many jobs may run at once: the limit set by hand, else the
    /// config's `max_jobs`.
    pub(crate) fn max_jobs(&self) -> usize {
        self.sched
            .limits
            .daemon
            .as_ref()
            .map_or(self.config.max_jobs, |l| l.max_jobs)
    }

    /// Read the limits set by hand again; when they changed, every parked
    /// job is judged again (a limit raised frees places at once).
    pub(crate) fn refresh_limits(&mut self) {
        let now = jobwarden_model::limits::read(&self.layout);
        if now == self.sched.limits {
            return;
        }
        for path in now
            .ignored
            .iter()
            .filter(|p| !self.sched.limits.ignored.contains(p))
        {
            tracing::warn!(
                "{} says no limit (a whole number from 1 to 4096, or `jobwarden limit`): it limits nothing",
                path.display()
            );
        }
        for (scope, limit) in now.list() {
            tracing::info!(%scope, max_jobs = limit.max_jobs, "limit set by hand");
        }
        self.sched.limits = now;
        self.sched.queue.unpark_all();
        self.dispatch();
    }

    /// Why the jobs that are not parked wait, if they do: what holds back
    /// every job alike.
    fn general_wait(&self) -> Option<String> {
        if self.stopping {
            Some("the daemon is stopping".into())
        } else if !self.storage.is_ok() {
            Some(format!("storage {}: starts wait", self.storage.condition))
        } else if self.sched.pauses.daemon.is_some() {
            Some("paused (daemon)".into())
        } else if self.running.len() >= self.max_jobs() {
            Some(match &self.sched.limits.daemon {
                Some(l) => format!("limit {} reached (set by hand)", l.max_jobs),
                None => format!("max_jobs {} reached", self.config.max_jobs),
            })
        } else {
            None
        }
    }

    /// What of its own holds back `job`, which is in the order: a job it
    /// waits for, its start time, its window, a pause or limit of its own.
    fn own_wait(&self, job: &super::QueuedJob) -> Option<String> {
        if !job.after.is_empty()
            && let after::Standing::Waits(dep) =
                after::standing(&self.layout, self.ledger.as_ref(), &job.after)
        {
            return Some(after::describe(&self.layout, &dep));
        }
        let blocker = self.sched.blocker(job, &self.config)?;
        Some(self.sched.describe(&self.layout, &self.config, &blocker))
    }

    /// The first queued jobs for `daemon.json`, each with why it waits.
    pub(crate) fn queue_listing(&self) -> Vec<Queued> {
        let general = self.general_wait();
        self.sched
            .queue
            .listing(state_file::LISTED)
            .into_iter()
            .map(|(job, blocker)| Queued {
                job_id: job.id.to_string(),
                project: job.project.clone(),
                profile: job.profile.clone(),
                waiting: match blocker {
                    Some(b) => Some(self.sched.describe(&self.layout, &self.config, b)),
                    // In the order (not looked at yet, or back for a look):
                    // what of its own holds it still, else what holds all.
                    None => self.own_wait(job).or_else(|| general.clone()),
                },
            })
            .collect()
    }

    /// `; paused: daemon, profile review` for the service manager's status.
    pub(crate) fn pauses_line(&self) -> String {
        let list = self.sched.pauses.list();
        if list.is_empty() {
            return String::new();
        }
        let scopes: Vec<String> = list.iter().map(|(s, _)| s.to_string()).collect();
        format!("; paused: {}", scopes.join(", "))
    }

    /// Take a request to change queued job `id`'s priority (see
    /// `jobwarden_model::priority`): its record and event, then its place
    /// in the queue, claim order kept.
    pub(crate) fn take_priority(&mut self, id: &JobId) {
        if !self.sched.queue.contains(id) {
            return;
        }
        let changed = JobRecord::load_job(&self.layout, id).and_then(|mut rec| {
            let mut events = jobwarden_model::events::EventLog::open(
                self.layout.root(),
                &self.layout.events(id),
                self.config.events_for(&rec),
            );
            jobwarden_model::priority::take(&self.layout, &mut rec, &mut events)
        });
        match changed {
            Ok(Some((from, to))) => {
                tracing::info!(job = %id, from, to, "priority changed by hand");
                if let Some(mut job) = self.sched.queue.take(id) {
                    job.priority = to;
                    job.woken_by = None;
                    self.sched.queue.put_back(job);
                }
                self.dispatch();
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(job = %id, "changing its priority: {e}; tried again at the next tick")
            }
        }
    }

    /// The priority requests of queued jobs no event told of (the tick's
    /// look, as for their ABORT markers).
    pub(crate) fn look_for_priority_requests(&mut self) {
        let asked: Vec<JobId> = self
            .sched
            .queue
            .ids()
            .filter(|id| std::fs::symlink_metadata(self.layout.priority_request(id)).is_ok())
            .cloned()
            .collect();
        for id in asked {
            self.take_priority(&id);
        }
    }
}
