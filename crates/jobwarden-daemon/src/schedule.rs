//! Scheduling: which queued job starts next, and what holds the others
//! back. A job starts when a slot is free (`max_jobs`), nothing pauses it
//! (the daemon, its profile, its project: `control.rs`), its profile's and
//! its route's own `max_jobs` are not reached, and no other job works in
//! its repository checkout. The order is the queue's (`schedule/queue.rs`):
//! priority, then round robin over projects, then claim order.
//!
//! The repository rule: a job whose resolved workdir is not inside its
//! own run folder (the default `{job_workdir}` is) works in a checkout
//! other jobs may use too, and takes it for itself while it runs. With
//! `shared_workdir = true` (on its route, else its profile) it shares the
//! checkout with other such jobs, but never with one that holds it alone.
//! A workdir that names the job (`{job_id}`, a worktree per job) is
//! never shared, so never waits.
//!
//! A job held back by something of its own is parked under it (no
//! head-of-line blocking), and woken when it clears: a pause lifted wakes
//! all its jobs; a slot of a limit, or a checkout, freed wakes the first
//! waiting job, and that one, once it has started or parked again, the
//! next (so a free place is never left unused while jobs wait for it).
//! A dispatch therefore looks only at jobs that may start.
//!
//! Besides: `queue.rs` (the order and the parked jobs), `after.rs` (the
//! jobs a job waits for, and ending one whose dependency failed),
//! `orders.rs` (pauses, limits and priorities set by hand; what
//! `daemon.json` says of the queue). A job's start time and its profile's
//! windows are blockers like the others, looked at again at every tick.

pub(crate) mod after;
mod orders;
mod queue;

use std::collections::HashMap;
use std::path::PathBuf;

pub(super) use queue::{Blocker, Queue, QueuedJob};

use super::{Daemon, Slot};
use jobwarden_ledger::short_id;
use jobwarden_model::config::{Config, DEFAULT_PROFILE};
use jobwarden_model::control::Pauses;
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::Layout;
use jobwarden_model::limits::Limits;
use jobwarden_model::placeholders;
use jobwarden_sys::clock::Timestamp;

/// The daemon's scheduling state.
#[derive(Default)]
pub(super) struct Schedule {
    pub queue: Queue,
    holds: Holds,
    /// The pauses in force, as last read from `control/`.
    pub pauses: Pauses,
    /// The limits set by hand, as last read from `control/`.
    pub limits: Limits,
}

/// What running jobs hold: places in their profile's and route's limits,
/// and their checkouts.
#[derive(Default)]
struct Holds {
    jobs: HashMap<JobId, QueuedJob>,
    profiles: HashMap<String, usize>,
    routes: HashMap<String, usize>,
    projects: HashMap<String, usize>,
    /// Who works in each checkout, and whether alone (true) or shared.
    workdirs: HashMap<PathBuf, Vec<(JobId, bool)>>,
}

impl Holds {
    fn shrink_to_fit(&mut self) {
        self.jobs.shrink_to_fit();
        self.profiles.shrink_to_fit();
        self.routes.shrink_to_fit();
        self.projects.shrink_to_fit();
        self.workdirs.shrink_to_fit();
    }

    fn take(&mut self, job: QueuedJob, alone: bool) {
        *self.profiles.entry(job.profile.clone()).or_default() += 1;
        *self.projects.entry(job.project.clone()).or_default() += 1;
        if let Some(route) = &job.route {
            *self.routes.entry(route.clone()).or_default() += 1;
        }
        if let Some(w) = &job.workdir {
            self.workdirs
                .entry(w.clone())
                .or_default()
                .push((job.id.clone(), alone));
        }
        self.jobs.insert(job.id.clone(), job);
    }

    /// Give back what `id` held; the job, and the blockers that may now
    /// let a waiting job go.
    fn release(&mut self, id: &JobId) -> Option<(QueuedJob, Vec<Blocker>)> {
        let job = self.jobs.remove(id)?;
        let mut freed = vec![
            Blocker::ProfileLimit(job.profile.clone()),
            Blocker::ProjectLimit(job.project.clone()),
        ];
        decrement(&mut self.profiles, &job.profile);
        decrement(&mut self.projects, &job.project);
        if let Some(route) = &job.route {
            decrement(&mut self.routes, route);
            freed.push(Blocker::RouteLimit(route.clone()));
        }
        if let Some(w) = &job.workdir {
            if let Some(holders) = self.workdirs.get_mut(w) {
                holders.retain(|(h, _)| h != id);
                if holders.is_empty() {
                    self.workdirs.remove(w);
                }
            }
            freed.push(Blocker::Workdir(w.clone()));
        }
        Some((job, freed))
    }

    fn running(map: &HashMap<String, usize>, key: &str) -> usize {
        map.get(key).copied().unwrap_or(0)
    }
}

fn decrement(map: &mut HashMap<String, usize>, key: &str) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Schedule {
    /// Give back the room a backlog grew the queue's and holds' tables to.
    pub fn shrink_to_fit(&mut self) {
        self.queue.shrink_to_fit();
        self.holds.shrink_to_fit();
    }

    /// What holds `job` back, if anything of its own does, the narrowest
    /// first. A pause of the whole daemon and `max_jobs` are the
    /// dispatcher's (they hold back every job alike).
    fn blocker(&self, job: &QueuedJob, config: &Config) -> Option<Blocker> {
        let mut candidates: Vec<Blocker> =
            job.not_before.map(Blocker::NotBefore).into_iter().collect();
        candidates.push(Blocker::Window(job.profile.clone()));
        candidates.extend([
            Blocker::PausedProject(job.project.clone()),
            Blocker::PausedProfile(job.profile.clone()),
            Blocker::ProjectLimit(job.project.clone()),
            Blocker::ProfileLimit(job.profile.clone()),
        ]);
        candidates.extend(job.route.clone().map(Blocker::RouteLimit));
        candidates.extend(job.workdir.clone().map(Blocker::Workdir));
        candidates
            .into_iter()
            .find(|b| !self.admits(b, job, config))
    }

    /// Would `blocker` let `job` start now?
    fn admits(&self, blocker: &Blocker, job: &QueuedJob, config: &Config) -> bool {
        let h = &self.holds;
        match blocker {
            Blocker::PausedProject(p) => !self.pauses.projects.contains_key(p),
            Blocker::PausedProfile(p) => !self.pauses.profiles.contains_key(p),
            Blocker::ProfileLimit(p) => self
                .profile_limit(config, p)
                .is_none_or(|max| Holds::running(&h.profiles, p) < max),
            Blocker::ProjectLimit(p) => self
                .limits
                .projects
                .get(p)
                .is_none_or(|l| Holds::running(&h.projects, p) < l.max_jobs),
            Blocker::RouteLimit(r) => {
                route_limit(config, r).is_none_or(|max| Holds::running(&h.routes, r) < max)
            }
            Blocker::Workdir(w) => match h.workdirs.get(w) {
                None => true,
                Some(holders) => !works_alone(config, job) && holders.iter().all(|(_, a)| !a),
            },
            // Judged by the dispatcher from the records (`after.rs`).
            Blocker::After(_) => true,
            Blocker::NotBefore(at) => Timestamp::now().epoch_ms() >= *at,
            Blocker::Window(p) => config.profiles.get(p).is_none_or(|p| {
                let now = Timestamp::now().epoch_ms();
                p.windows.is_empty() || p.windows.iter().any(|w| w.contains(now))
            }),
        }
    }

    /// Why a job parked under `blocker` waits, in words.
    fn describe(&self, layout: &Layout, config: &Config, blocker: &Blocker) -> String {
        let h = &self.holds;
        match blocker {
            Blocker::After(dep) => after::describe(layout, dep),
            Blocker::NotBefore(at) => format!("not before {}", when(*at)),
            Blocker::Window(p) => {
                let windows = config
                    .profiles
                    .get(p)
                    .map(|p| p.windows.clone())
                    .unwrap_or_default();
                let now = Timestamp::now().epoch_ms();
                let opens = windows.iter().map(|w| w.next_opening(now)).min();
                let list: Vec<String> = windows.iter().map(ToString::to_string).collect();
                match opens {
                    Some(at) => format!(
                        "outside the window {} of profile {p}; opens {}",
                        list.join(", "),
                        when(at)
                    ),
                    None => format!("outside the windows of profile {p}"),
                }
            }
            Blocker::PausedProject(p) => format!("paused (project {p})"),
            Blocker::PausedProfile(p) => format!("paused (profile {p})"),
            Blocker::ProfileLimit(p) => format!(
                "limit of profile {p}: {} running{}",
                Holds::running(&h.profiles, p),
                if self.limits.profiles.contains_key(p) {
                    " (set by hand)"
                } else {
                    ""
                }
            ),
            Blocker::ProjectLimit(p) => format!(
                "limit of project {p}: {} running (set by hand)",
                Holds::running(&h.projects, p)
            ),
            Blocker::RouteLimit(r) => format!(
                "limit of route {r}: {} running",
                Holds::running(&h.routes, r)
            ),
            Blocker::Workdir(w) => {
                let by = h.workdirs.get(w).and_then(|hs| hs.first());
                match by {
                    Some((id, _)) => format!(
                        "repository {} busy with job {}",
                        w.display(),
                        short_id(id.as_str())
                    ),
                    None => format!("repository {} busy", w.display()),
                }
            }
        }
    }
}

/// An instant to come, as the queue's reasons say it:
/// `2026-11-29T22:30:00.000Z (in 3h05m)`.
fn when(at: u64) -> String {
    let now = Timestamp::now().epoch_ms();
    let secs = at.saturating_sub(now).div_ceil(1000);
    let left = humantime::format_duration(std::time::Duration::from_secs(if secs > 3600 {
        secs / 60 * 60
    } else {
        secs
    }));
    format!("{} (in {left})", Timestamp::from_epoch_ms(at))
}

impl Schedule {
    /// How many of `profile`'s jobs may run at once: its limit set by
    /// hand, else its `max_jobs`.
    fn profile_limit(&self, config: &Config, profile: &str) -> Option<usize> {
        self.limits
            .profiles
            .get(profile)
            .map(|l| l.max_jobs)
            .or_else(|| config.profiles.get(profile).and_then(|p| p.max_jobs))
    }
}

fn route_limit(config: &Config, route: &str) -> Option<usize> {
    config
        .routes
        .iter()
        .find(|r| r.pattern.source() == route)
        .and_then(|r| r.max_jobs)
}

/// Does `job` need its checkout to itself? Yes unless its route (else its
/// profile) says `shared_workdir = true`.
fn works_alone(config: &Config, job: &QueuedJob) -> bool {
    let route = job
        .route
        .as_deref()
        .and_then(|r| config.routes.iter().find(|x| x.pattern.source() == r));
    let profile = config.profiles.get(&job.profile);
    let shared = route
        .and_then(|r| r.shared_workdir)
        .or(profile.map(|p| p.shared_workdir));
    !shared.unwrap_or(false)
}

/// The checkout a job works in, when it is not its own folder: its
/// workdir resolved exactly as its monitor will (route, profile,
/// placeholders), symlinks resolved when it exists. `None` for a workdir
/// inside its run folder, or a profile no longer configured (its monitor
/// fails the job).
fn checkout(layout: &Layout, config: &Config, rec: &JobRecord) -> Option<PathBuf> {
    let profile = config.profile_of(rec).ok()?;
    let route = config.route_of(rec);
    let job = placeholders::Job {
        layout,
        profile,
        route,
        rec,
    };
    let (_, workdir) = placeholders::vars(&job);
    if workdir.starts_with(layout.run_dir(&rec.job_id)) {
        return None;
    }
    Some(std::fs::canonicalize(&workdir).unwrap_or(workdir))
}

impl Daemon {
    /// What scheduling needs of a job, from its record.
    fn queued_job(&self, rec: &JobRecord) -> QueuedJob {
        let profile = rec
            .profile
            .clone()
            .unwrap_or_else(|| DEFAULT_PROFILE.into());
        let mut job = QueuedJob::new(
            rec.job_id.clone(),
            rec.project.clone(),
            rec.priority,
            profile,
        );
        job.route = rec.route.clone();
        job.workdir = checkout(&self.layout, &self.config, rec);
        job.after = rec.after.clone();
        job.not_before = rec.not_before.map(Timestamp::epoch_ms);
        job
    }

    /// The job of `id` as its record says, or (a record that cannot be
    /// read) a bare one: its monitor deals with the record.
    fn queued_job_of(&self, id: &JobId, priority: i32) -> QueuedJob {
        match JobRecord::load_job(&self.layout, id) {
            Ok(rec) => self.queued_job(&rec),
            Err(e) => {
                tracing::warn!(job = %id, "scheduling it without its limits: {e}");
                QueuedJob::new(id.clone(), String::new(), priority, DEFAULT_PROFILE.into())
            }
        }
    }

    /// A reloaded config is in force: each queued job's checkout is
    /// resolved again under it, and every parked job is judged again
    /// (limits may have risen, routes changed), keeping its place.
    pub(super) fn reschedule_all(&mut self) {
        for job in self.sched.queue.jobs_mut() {
            if let Ok(rec) = JobRecord::load_job(&self.layout, &job.id) {
                job.workdir = checkout(&self.layout, &self.config, &rec);
            }
        }
        self.sched.queue.unpark_all();
    }

    /// Queue a claimed job (its ABORT is watched until it starts).
    pub(super) fn enqueue(&mut self, rec: &JobRecord) {
        let job = self.queued_job(rec);
        self.enqueue_job(job);
    }

    /// Queue a job found queued at start.
    pub(super) fn enqueue_recovered(&mut self, id: &JobId, priority: i32) {
        let job = self.queued_job_of(id, priority);
        self.enqueue_job(job);
    }

    fn enqueue_job(&mut self, job: QueuedJob) {
        if let Some(w) = self.watcher.as_mut() {
            w.watch_queued(&job.id);
        }
        self.sched.queue.push(job);
        self.backlog_seen |= self.sched.queue.len() > super::BACKLOG;
    }

    /// A job found running at start holds its places like one started here.
    pub(super) fn hold_adopted(&mut self, id: &JobId) {
        let job = self.queued_job_of(id, 0);
        self.sched.queue.started(&job.project);
        let alone = works_alone(&self.config, &job);
        self.sched.holds.take(job, alone);
    }

    /// Would a job claimed now start at once: a place free for it behind
    /// every job waiting or claimed before it, and nothing holding every
    /// start back? Then its claim leaves its view to its monitor
    /// ([`Claimer::view_owed`](jobwarden_engine::claim::Claimer)). A guess
    /// that proves wrong (a limit of its own holds it) costs the view's
    /// write once the claims' starts are made ([`Daemon::pay_owed_views`]).
    pub(super) fn starts_at_once(&self) -> bool {
        !self.stopping
            && self.storage.is_ok()
            && self.sched.pauses.daemon.is_none()
            && self.running.len() + self.sched.queue.len() < self.max_jobs()
    }

    /// Write the views of jobs claimed to start at once that still wait
    /// (their journal line is their record until then).
    fn pay_owed_views(&mut self) {
        if self.holding_starts || self.views_owed.is_empty() {
            return;
        }
        for id in std::mem::take(&mut self.views_owed) {
            match JobRecord::load_job_view(&self.layout, &id) {
                Ok((mut rec, true)) if rec.state == jobwarden_model::job::JobState::Queued => {
                    if let Err(e) = rec.save_unsynced(&self.layout) {
                        tracing::warn!(job = %id, "{e}; job.json is behind its journal until written again");
                    }
                }
                _ => {}
            }
        }
    }

    /// Start monitors while slots are free, in the queue's order; a job
    /// held back by something of its own steps aside for the next.
    pub(super) fn dispatch(&mut self) {
        // Ending a job whose dependency failed dispatches again: that call
        // only asks for another pass of this loop (a chain of such jobs is
        // ended in turn, never by recursion).
        if self.dispatching {
            self.dispatch_again = true;
            return;
        }
        self.dispatching = true;
        loop {
            self.dispatch_again = false;
            self.dispatch_queued();
            self.pay_owed_views();
            for (id, why) in std::mem::take(&mut self.doomed) {
                self.cancel_for_dependency(&id, &why);
            }
            if !self.dispatch_again {
                break;
            }
        }
        self.dispatching = false;
    }

    fn dispatch_queued(&mut self) {
        while !self.stopping
            && !self.holding_starts
            && self.storage.is_ok()
            && self.sched.pauses.daemon.is_none()
            && self.running.len() < self.max_jobs()
        {
            let Some(next) = self.sched.queue.next().cloned() else {
                return;
            };
            let dependency = match after::standing(&self.layout, self.ledger.as_ref(), &next.after)
            {
                after::Standing::Met => None,
                after::Standing::Waits(dep) => Some(Blocker::After(dep)),
                after::Standing::Failed(why) => {
                    // Ended after this pass; out of the order meanwhile.
                    self.sched
                        .queue
                        .park(&next.id, Blocker::After(next.id.clone()));
                    self.doomed.push((next.id.clone(), why));
                    continue;
                }
            };
            if let Some(blocker) = dependency.or_else(|| self.sched.blocker(&next, &self.config)) {
                tracing::debug!(job = %next.id, "waits: {}", self.sched.describe(&self.layout, &self.config, &blocker));
                self.sched.queue.park(&next.id, blocker.clone());
                // Woken for a place it cannot use: the next may.
                if let Some(by) = next.woken_by.filter(|by| *by != blocker) {
                    self.wake(&by);
                }
                continue;
            }
            let Some(job) = self.sched.queue.take(&next.id) else {
                return;
            };
            if !self.start(job) {
                return;
            }
        }
    }

    /// Start `job`'s monitor. False when it could not be started: out of
    /// processes, memory or descriptors, the job is not at fault; it keeps
    /// its place and the next tick retries.
    fn start(&mut self, job: QueuedJob) -> bool {
        if let Some(w) = self.watcher.as_mut() {
            w.unwatch_queued(&job.id);
        }
        if let Err(e) = self.spawn_monitor(&job.id) {
            tracing::error!(job = %job.id, "could not start its monitor, retrying on the next tick: {e}");
            if let Some(w) = self.watcher.as_mut() {
                w.watch_queued(&job.id);
            }
            self.sched.queue.put_back(job);
            return false;
        }
        self.running.insert(job.id.clone(), Slot::Child);
        // Its view, if owed, is its monitor's to write now.
        self.views_owed.remove(&job.id);
        self.sched.queue.started(&job.project);
        let woken_by = job.woken_by.clone();
        let alone = works_alone(&self.config, &job);
        self.sched.holds.take(job, alone);
        // The place it was woken for is taken: the next may fit too.
        if let Some(by) = woken_by {
            self.wake(&by);
        }
        true
    }

    /// A parked job may go: all of a lifted pause's jobs; for the other
    /// blockers, the first one if it fits now.
    fn wake(&mut self, blocker: &Blocker) {
        if blocker.wakes_all() {
            for id in self.sched.queue.parked_on(blocker) {
                self.sched.queue.unpark(&id, None);
            }
            return;
        }
        let Some(first) = self.sched.queue.first_parked(blocker) else {
            return;
        };
        if self.sched.admits(blocker, first, &self.config) {
            let id = first.id.clone();
            self.sched.queue.unpark(&id, Some(blocker.clone()));
        }
    }

    /// A job no longer holds its slot (its monitor ended, or did nothing):
    /// its places go to the jobs waiting for them. The job as it was
    /// queued, when this daemon knew it.
    pub(super) fn free_slot(&mut self, id: &JobId) -> Option<QueuedJob> {
        self.running.remove(id);
        // The jobs waiting for it are judged again.
        self.wake(&Blocker::After(id.clone()));
        let (job, freed) = self.sched.holds.release(id)?;
        self.sched.queue.finished(&job.project);
        for blocker in &freed {
            self.wake(blocker);
        }
        Some(job)
    }

    /// A job whose main command runs in Slurm lost its monitor: start
    /// another that follows it, in a slot of its own (it never waits in
    /// the queue, where a pause or an ABORT would treat it as not started).
    /// False when no monitor could be started (the caller retries).
    pub(super) fn reattach(&mut self, id: &JobId) -> bool {
        let job = self.queued_job_of(id, 0);
        if let Err(e) = self.spawn_monitor(id) {
            tracing::error!(job = %id, "could not start a monitor to follow its Slurm job: {e}");
            return false;
        }
        tracing::info!(job = %id, "a new monitor follows its Slurm job");
        self.running.insert(id.clone(), Slot::Child);
        self.sched.queue.started(&job.project);
        let alone = works_alone(&self.config, &job);
        self.sched.holds.take(job, alone);
        true
    }

    /// A job whose monitor did nothing (no storage) goes back to its place.
    pub(super) fn requeue_unstarted(&mut self, id: &JobId) {
        let job = match self.free_slot(id) {
            Some(job) => job,
            None => self.queued_job_of(id, 0),
        };
        if let Some(w) = self.watcher.as_mut() {
            w.watch_queued(id);
        }
        let mut job = job;
        job.woken_by = None;
        self.sched.queue.put_back(job);
    }

    /// Take a queued job out of the queue (it ended before starting). A
    /// place it had been woken for goes to the next.
    pub(super) fn dequeue(&mut self, id: &JobId) -> bool {
        let Some(job) = self.sched.queue.take(id) else {
            return false;
        };
        if let Some(w) = self.watcher.as_mut() {
            w.unwatch_queued(id);
        }
        if let Some(by) = job.woken_by {
            self.wake(&by);
        }
        self.wake(&Blocker::After(id.clone()));
        true
    }
}
