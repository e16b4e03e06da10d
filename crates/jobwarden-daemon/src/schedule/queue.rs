//! The queue of claimed jobs waiting to start, and its order: a higher
//! front-matter `priority` first; among equals, round robin over projects
//! (the project that started a job least recently goes next; one that
//! never did, or that has nothing queued or running any more, counts as
//! never having), and FIFO by claim within a project.
//!
//! A job that cannot start for a reason of its own (its profile's or
//! route's limit is full, its repository is busy, its profile or project
//! is paused) is parked under that [`Blocker`] and leaves the order, so it
//! never holds back the jobs behind it; the scheduler puts it back when
//! the blocker clears, in its old place. Picking the next job is
//! O(log n) and nothing here walks the queue, except the bounded listing
//! for `daemon.json`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use jobwarden_model::job::JobId;

/// What keeps a queued job from starting, other than `max_jobs` and a
/// pause of the whole daemon (which hold back every job alike).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Blocker {
    PausedProject(String),
    PausedProfile(String),
    /// The profile's `max_jobs` are running.
    ProfileLimit(String),
    /// The route's `max_jobs` are running (the route by its `match`).
    RouteLimit(String),
    /// The project's limit, set by hand (`jobwarden limit --project`), is
    /// reached.
    ProjectLimit(String),
    /// Another job works in this folder.
    Workdir(PathBuf),
    /// A job it waits for (front matter `after`) has not ended.
    After(JobId),
    /// Its start time (front matter `not_before`, epoch ms) is to come.
    NotBefore(u64),
    /// Its profile's windows are all closed (the profile by its name).
    Window(String),
}

impl Blocker {
    /// A pause lifts, or a job waited for ends, for all its jobs at once;
    /// the other blockers free one place at a time.
    pub fn wakes_all(&self) -> bool {
        matches!(
            self,
            Blocker::PausedProject(_)
                | Blocker::PausedProfile(_)
                | Blocker::After(_)
                | Blocker::NotBefore(_)
                | Blocker::Window(_)
        )
    }

    /// Cleared by time passing or by other jobs' ends, not by a slot or a
    /// marker: looked at again at every tick.
    pub fn looked_at_each_tick(&self) -> bool {
        matches!(
            self,
            Blocker::After(_) | Blocker::NotBefore(_) | Blocker::Window(_)
        )
    }
}

/// A queued job, with what scheduling needs to know of it.
#[derive(Debug, Clone)]
pub struct QueuedJob {
    pub id: JobId,
    pub project: String,
    pub priority: i32,
    pub profile: String,
    /// The route it was claimed through (its `match`).
    pub route: Option<String>,
    /// The folder it works in, when that is not its own run folder: a
    /// checkout other jobs may use too.
    pub workdir: Option<PathBuf>,
    /// The blocker that put it back in the order, until it starts or is
    /// parked again: then that blocker may let the next one go.
    pub woken_by: Option<Blocker>,
    /// The jobs it waits for (its record's `after`).
    pub after: Vec<JobId>,
    /// Not before this (its record's `not_before`, epoch ms).
    pub not_before: Option<u64>,
    /// Claim order, given by the queue.
    seq: u64,
}

impl QueuedJob {
    pub fn new(id: JobId, project: String, priority: i32, profile: String) -> Self {
        QueuedJob {
            id,
            project,
            priority,
            profile,
            route: None,
            workdir: None,
            woken_by: None,
            after: Vec::new(),
            not_before: None,
            seq: 0,
        }
    }
}

/// Place in the whole queue: priority, then claim order.
type Key = (Reverse<i32>, u64);

/// The order of the ready jobs of one priority.
#[derive(Debug, Default)]
struct Level {
    projects: HashMap<String, ProjectQueue>,
    /// Projects by (turn, claim order of the job that brought them in).
    order: BTreeSet<(u64, u64, String)>,
}

#[derive(Debug)]
struct ProjectQueue {
    jobs: BTreeMap<u64, JobId>,
    turn: u64,
    since: u64,
}

/// What the queue remembers of a project while it has jobs.
#[derive(Debug, Default)]
struct Project {
    /// When it last started a job (0: not since it had none).
    turn: u64,
    queued: usize,
    running: usize,
}

struct Entry {
    job: QueuedJob,
    parked: Option<Blocker>,
}

/// The queued jobs: ready ones in their order, parked ones by blocker.
#[derive(Default)]
pub struct Queue {
    next_seq: u64,
    starts: u64,
    /// Boxed: a table sized for a burst of thousands holds a pointer per
    /// slot, not the whole entry (about 250 bytes).
    jobs: HashMap<JobId, Box<Entry>>,
    ready: BTreeMap<Reverse<i32>, Level>,
    parked: HashMap<Blocker, BTreeMap<Key, JobId>>,
    projects: HashMap<String, Project>,
}

impl Queue {
    /// Give back the room a long queue grew its tables to.
    pub fn shrink_to_fit(&mut self) {
        self.jobs.shrink_to_fit();
        self.parked.shrink_to_fit();
        self.projects.shrink_to_fit();
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Every queued job's id, in no order.
    pub fn ids(&self) -> impl Iterator<Item = &JobId> {
        self.jobs.keys()
    }

    /// Queue a newly claimed job behind every job claimed before it.
    pub fn push(&mut self, mut job: QueuedJob) {
        if self.jobs.contains_key(&job.id) {
            return;
        }
        self.next_seq += 1;
        job.seq = self.next_seq;
        self.projects.entry(job.project.clone()).or_default().queued += 1;
        self.insert_ready(job);
    }

    /// Is job `id` queued (ready or parked)?
    pub fn contains(&self, id: &JobId) -> bool {
        self.jobs.contains_key(id)
    }

    /// Put a job taken out with [`Queue::take`] back in its old place
    /// (its monitor could not be started, or did nothing; its priority
    /// changed).
    pub fn put_back(&mut self, job: QueuedJob) {
        if self.jobs.contains_key(&job.id) {
            return;
        }
        self.projects.entry(job.project.clone()).or_default().queued += 1;
        self.insert_ready(job);
    }

    fn insert_ready(&mut self, job: QueuedJob) {
        let turn = self.projects.get(&job.project).map_or(0, |p| p.turn);
        let level = self.ready.entry(Reverse(job.priority)).or_default();
        let pq = level
            .projects
            .entry(job.project.clone())
            .or_insert_with(|| ProjectQueue {
                jobs: BTreeMap::new(),
                turn,
                since: job.seq,
            });
        if pq.jobs.is_empty() {
            level.order.insert((pq.turn, pq.since, job.project.clone()));
        }
        pq.jobs.insert(job.seq, job.id.clone());
        self.jobs
            .insert(job.id.clone(), Box::new(Entry { job, parked: None }));
    }

    /// The next ready job in order, if any.
    pub fn next(&self) -> Option<&QueuedJob> {
        let level = self.ready.values().next()?;
        let (_, _, project) = level.order.first()?;
        let (_, id) = level.projects.get(project)?.jobs.first_key_value()?;
        self.jobs.get(id).map(|e| &e.job)
    }

    /// Take a job out of the queue, ready or parked (it starts, or ended
    /// before it could).
    pub fn take(&mut self, id: &JobId) -> Option<QueuedJob> {
        let entry = self.jobs.remove(id)?;
        let job = entry.job;
        match entry.parked {
            Some(blocker) => self.unlist_parked(&blocker, key(&job)),
            None => self.unlist_ready(&job),
        }
        if let Some(p) = self.projects.get_mut(&job.project) {
            p.queued -= 1;
        }
        self.forget_if_idle(&job.project);
        Some(job)
    }

    fn unlist_ready(&mut self, job: &QueuedJob) {
        let Some(level) = self.ready.get_mut(&Reverse(job.priority)) else {
            return;
        };
        if let Some(pq) = level.projects.get_mut(&job.project) {
            pq.jobs.remove(&job.seq);
            if pq.jobs.is_empty() {
                level
                    .order
                    .remove(&(pq.turn, pq.since, job.project.clone()));
                level.projects.remove(&job.project);
            }
        }
        if level.projects.is_empty() {
            self.ready.remove(&Reverse(job.priority));
        }
    }

    fn unlist_parked(&mut self, blocker: &Blocker, key: Key) {
        if let Some(list) = self.parked.get_mut(blocker) {
            list.remove(&key);
            if list.is_empty() {
                self.parked.remove(blocker);
            }
        }
    }

    /// Move a ready job out of the order, under what blocks it.
    pub fn park(&mut self, id: &JobId, blocker: Blocker) {
        let Some(entry) = self.jobs.get(id) else {
            return;
        };
        let job = entry.job.clone();
        match &entry.parked {
            Some(old) if *old == blocker => return,
            Some(old) => {
                let old = old.clone();
                self.unlist_parked(&old, key(&job));
            }
            None => self.unlist_ready(&job),
        }
        self.parked
            .entry(blocker.clone())
            .or_default()
            .insert(key(&job), job.id.clone());
        if let Some(entry) = self.jobs.get_mut(id) {
            entry.parked = Some(blocker);
            entry.job.woken_by = None;
        }
    }

    /// The first job (in queue order) parked under `blocker`.
    pub fn first_parked(&self, blocker: &Blocker) -> Option<&QueuedJob> {
        let (_, id) = self.parked.get(blocker)?.first_key_value()?;
        self.jobs.get(id).map(|e| &e.job)
    }

    /// Every job parked under `blocker`, in queue order.
    pub fn parked_on(&self, blocker: &Blocker) -> Vec<JobId> {
        self.parked
            .get(blocker)
            .map(|list| list.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Put a parked job back in the order, in its old place.
    pub fn unpark(&mut self, id: &JobId, woken_by: Option<Blocker>) {
        let Some(entry) = self.jobs.remove(id) else {
            return;
        };
        let mut job = entry.job;
        match entry.parked {
            Some(blocker) => self.unlist_parked(&blocker, key(&job)),
            None => self.unlist_ready(&job),
        }
        job.woken_by = woken_by;
        self.insert_ready(job);
    }

    /// Every parked job back in the order, in its old place: what held it
    /// back is judged again (a reload may have lifted it).
    pub fn unpark_all(&mut self) {
        let ids: Vec<JobId> = self
            .parked
            .values()
            .flat_map(|list| list.values().cloned())
            .collect();
        for id in ids {
            self.unpark(&id, None);
        }
    }

    /// Put back in the order every job parked under a blocker `which`
    /// picks, each in its old place.
    pub fn unpark_where(&mut self, which: impl Fn(&Blocker) -> bool) {
        let ids: Vec<JobId> = self
            .parked
            .iter()
            .filter(|(b, _)| which(b))
            .flat_map(|(_, list)| list.values().cloned())
            .collect();
        for id in ids {
            self.unpark(&id, None);
        }
    }

    /// Every queued job, to refresh what was derived from the config
    /// (its place in the order is not).
    pub fn jobs_mut(&mut self) -> impl Iterator<Item = &mut QueuedJob> {
        self.jobs.values_mut().map(|e| &mut e.job)
    }

    /// A job of `project` started: the project's turn goes to the back.
    pub fn started(&mut self, project: &str) {
        self.starts += 1;
        let turn = self.starts;
        let p = self.projects.entry(project.to_owned()).or_default();
        p.turn = turn;
        p.running += 1;
        for level in self.ready.values_mut() {
            if let Some(pq) = level.projects.get_mut(project) {
                level.order.remove(&(pq.turn, pq.since, project.to_owned()));
                pq.turn = turn;
                level.order.insert((pq.turn, pq.since, project.to_owned()));
            }
        }
    }

    /// A job of `project` that [`Queue::started`] no longer runs.
    pub fn finished(&mut self, project: &str) {
        if let Some(p) = self.projects.get_mut(project) {
            p.running = p.running.saturating_sub(1);
        }
        self.forget_if_idle(project);
    }

    /// A project with nothing queued or running starts afresh.
    fn forget_if_idle(&mut self, project: &str) {
        if self
            .projects
            .get(project)
            .is_some_and(|p| p.queued == 0 && p.running == 0)
        {
            self.projects.remove(project);
        }
    }

    /// At most `n` queued jobs, in the order they would start if every
    /// slot were free: the ready ones round robin over projects, then the
    /// parked ones in queue order with what blocks each.
    pub fn listing(&self, n: usize) -> Vec<(&QueuedJob, Option<&Blocker>)> {
        let mut out = Vec::new();
        for level in self.ready.values() {
            let mut rounds: Vec<_> = level
                .order
                .iter()
                .take(n)
                .filter_map(|(_, _, p)| level.projects.get(p))
                .map(|pq| pq.jobs.values())
                .collect();
            while out.len() < n && !rounds.is_empty() {
                rounds.retain_mut(|jobs| match jobs.next() {
                    Some(id) if out.len() < n => {
                        out.extend(self.jobs.get(id).map(|e| (&e.job, None)));
                        true
                    }
                    _ => false,
                });
            }
        }
        let mut parked: Vec<(Key, &JobId)> = self
            .parked
            .values()
            .flat_map(|list| list.iter().take(n).map(|(k, id)| (*k, id)))
            .collect();
        parked.sort();
        for (_, id) in parked.into_iter().take(n.saturating_sub(out.len())) {
            out.extend(self.jobs.get(id).map(|e| (&e.job, e.parked.as_ref())));
        }
        out
    }
}

fn key(job: &QueuedJob) -> Key {
    (Reverse(job.priority), job.seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, project: &str, priority: i32) -> QueuedJob {
        let id = JobId::parse(id).expect("valid id");
        QueuedJob::new(id, project.into(), priority, "default".into())
    }

    fn id(s: &str) -> JobId {
        JobId::parse(s).expect("valid id")
    }

    /// Start jobs one at a time (each ends before the next starts) and
    /// say in which order they went.
    fn drain(q: &mut Queue) -> Vec<String> {
        let mut order = Vec::new();
        while let Some(next) = q.next().map(|j| j.id.clone()) {
            let job = q.take(&next).expect("queued");
            q.started(&job.project);
            q.finished(&job.project);
            order.push(next.to_string());
        }
        order
    }

    #[test]
    fn a_busy_project_does_not_starve_another() {
        let mut q = Queue::default();
        q.push(job("a1", "a", 0));
        let a1 = q.take(&id("a1")).expect("a1");
        q.started(&a1.project);
        for n in 2..=5 {
            q.push(job(&format!("a{n}"), "a", 0));
        }
        q.push(job("b1", "b", 0));
        q.finished("a");
        assert_eq!(drain(&mut q), ["b1", "a2", "a3", "a4", "a5"]);
    }

    #[test]
    fn round_robin_across_projects_fifo_within_and_priority_first() {
        let mut q = Queue::default();
        for (i, p) in ["a", "a", "a", "b", "b", "c"].iter().enumerate() {
            q.push(job(&format!("{p}{i}"), p, 0));
        }
        q.push(job("urgent", "c", 5));
        assert_eq!(
            drain(&mut q),
            ["urgent", "a0", "b3", "c5", "a1", "b4", "a2"]
        );
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_parked_job_steps_aside_and_comes_back_in_its_place() {
        let mut q = Queue::default();
        for name in ["x1", "x2", "x3"] {
            q.push(job(name, "x", 0));
        }
        let busy = Blocker::Workdir("/srv/repo".into());
        q.park(&id("x1"), busy.clone());
        assert_eq!(q.next().map(|j| j.id.to_string()), Some("x2".into()));
        assert_eq!(
            q.first_parked(&busy).map(|j| j.id.to_string()),
            Some("x1".into())
        );
        let listed: Vec<_> = q
            .listing(10)
            .into_iter()
            .map(|(j, b)| (j.id.to_string(), b.is_some()))
            .collect();
        assert_eq!(
            listed,
            [
                ("x2".into(), false),
                ("x3".into(), false),
                ("x1".into(), true)
            ]
        );
        q.unpark(&id("x1"), Some(busy.clone()));
        let next = q.next().expect("ready");
        assert_eq!(next.id.to_string(), "x1");
        assert_eq!(next.woken_by, Some(busy));
        assert!(q.take(&id("x2")).is_some());
        assert_eq!(drain(&mut q), ["x1", "x3"]);
    }

    #[test]
    fn taking_a_parked_job_leaves_nothing_behind() {
        let mut q = Queue::default();
        q.push(job("p1", "p", 0));
        let paused = Blocker::PausedProject("p".into());
        q.park(&id("p1"), paused.clone());
        assert!(q.next().is_none());
        assert!(q.take(&id("p1")).is_some());
        assert!(q.parked_on(&paused).is_empty());
        assert!(q.parked.is_empty());
        assert_eq!(q.len(), 0);
        assert!(q.projects.is_empty(), "an idle project is forgotten");
    }

    #[test]
    fn listing_is_bounded_and_round_robin() {
        let mut q = Queue::default();
        for i in 0..100 {
            q.push(job(&format!("a{i}"), "a", 0));
            q.push(job(&format!("b{i}"), "b", 0));
        }
        let listed: Vec<_> = q
            .listing(4)
            .into_iter()
            .map(|(j, _)| j.id.to_string())
            .collect();
        assert_eq!(listed, ["a0", "b0", "a1", "b1"]);
    }
}
