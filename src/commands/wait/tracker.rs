//! The jobs a waiting command follows (`wait`, `abort --wait`): each one's
//! last record read, whether it is done, and the exit code they add up to.
//! A job is done once its record is terminal and its prompt has left
//! `*.running.md` (archived, or requeued), so that whoever runs next finds
//! the archive and the ledger row in place. Reading is the
//! caller's call ([`Tracker::refresh`]), on the events of its [`Watch`].
//!
//! [`Watch`]: crate::commands::watch::Watch

use std::collections::HashMap;

use crate::commands::exit::Exit;
use jobwarden_engine::failure::JobError;
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::Layout;

/// One followed job.
#[derive(Debug)]
pub struct Tracked {
    pub id: JobId,
    /// Its record as last read (`None` before the first read).
    pub rec: Option<JobRecord>,
    /// Terminal, and its prompt settled.
    pub done: bool,
    /// Why its record can no longer be read; it is then not waited for.
    pub lost: Option<String>,
    /// A later attempt of its prompt is followed too: that one counts.
    pub superseded: bool,
    /// It had ended before the wait started (`--project`'s current batch):
    /// any other job of its prompt followed replaces it.
    pub earlier: bool,
}

impl Tracked {
    /// What this job adds to the exit code: `None` while it has not ended
    /// or when a later attempt replaces it.
    pub fn exit(&self) -> Option<Exit> {
        if self.superseded {
            return None;
        }
        if self.lost.is_some() {
            return Some(Exit::Error);
        }
        self.rec
            .as_ref()
            .filter(|_| self.done)
            .and_then(|r| Exit::of_state(r.state))
    }

    /// Still to wait for.
    pub fn pending(&self) -> bool {
        !self.done && self.lost.is_none()
    }
}

/// What one read of a job's record found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Update {
    /// Its state changed: from this one (`None`: first seen).
    pub changed_from: Option<Option<JobState>>,
    /// It is done now (and was not before).
    pub ended: bool,
    /// It can no longer be read, for this reason.
    pub lost: Option<String>,
}

/// The followed jobs, in the order they were added.
pub struct Tracker<'a> {
    layout: &'a Layout,
    jobs: Vec<Tracked>,
    by_id: HashMap<JobId, usize>,
    /// The jobs that ended before the wait, by their prompt
    /// (`project/name`).
    earlier: HashMap<String, usize>,
}

impl<'a> Tracker<'a> {
    pub fn new(layout: &'a Layout) -> Self {
        Tracker {
            layout,
            jobs: Vec::new(),
            by_id: HashMap::new(),
            earlier: HashMap::new(),
        }
    }

    /// Follow `id` from now on; false if it already was.
    pub fn track(&mut self, id: JobId) -> bool {
        if self.by_id.contains_key(&id) {
            return false;
        }
        self.by_id.insert(id.clone(), self.jobs.len());
        self.jobs.push(Tracked {
            id,
            rec: None,
            done: false,
            lost: None,
            superseded: false,
            earlier: false,
        });
        true
    }

    /// Follow `id`, a job that may have ended before the wait started:
    /// if it has, it counts until a newer job of its prompt is followed.
    /// False if it already was followed.
    pub fn track_earlier(&mut self, id: JobId) -> bool {
        if !self.track(id.clone()) {
            return false;
        }
        if let Some(&i) = self.by_id.get(&id) {
            self.jobs[i].earlier = true;
        }
        true
    }

    pub fn is_tracked(&self, id: &JobId) -> bool {
        self.by_id.contains_key(id)
    }

    pub fn get(&self, id: &JobId) -> Option<&Tracked> {
        self.by_id.get(id).map(|&i| &self.jobs[i])
    }

    pub fn jobs(&self) -> &[Tracked] {
        &self.jobs
    }

    /// Jobs still to wait for.
    pub fn pending(&self) -> impl Iterator<Item = &JobId> {
        self.jobs.iter().filter(|j| j.pending()).map(|j| &j.id)
    }

    /// Has a followed job ended whose prompt the daemon has yet to move?
    /// That move happens outside the job's run folder, where no watch
    /// sees it.
    pub fn settling(&self) -> bool {
        self.jobs
            .iter()
            .any(|j| j.pending() && j.rec.as_ref().is_some_and(|r| r.state.is_terminal()))
    }

    pub fn all_done(&self) -> bool {
        self.pending().next().is_none()
    }

    /// The worst code of the jobs that ended (see [`Exit::worst_of`]).
    pub fn exit(&self) -> Exit {
        Exit::worst_of(self.jobs.iter().filter_map(Tracked::exit))
    }

    /// Followed jobs by state, in the order of [`JobState::ALL`].
    pub fn counts(&self) -> Vec<(usize, &'static str)> {
        JobState::ALL
            .iter()
            .map(|&s| {
                let n = self
                    .jobs
                    .iter()
                    .filter(|j| !j.superseded && j.rec.as_ref().is_some_and(|r| r.state == s))
                    .count();
                (n, s.as_str())
            })
            .collect()
    }

    /// Read the record of `id` (a followed job) again.
    pub fn refresh(&mut self, id: &JobId) -> Update {
        let Some(&i) = self.by_id.get(id) else {
            return Update::default();
        };
        if !self.jobs[i].pending() {
            return Update::default();
        }
        let rec = match JobRecord::load_job(self.layout, id) {
            Ok(rec) => rec,
            Err(e) => return self.unreadable(i, e.into()),
        };
        let before = self.jobs[i].rec.as_ref().map(|r| r.state);
        let settled = rec.state.is_terminal() && self.settled(&rec);
        if let Some(prev) = rec.retry_of.as_ref().and_then(|p| self.by_id.get(p)) {
            self.jobs[*prev].superseded = true;
        }
        self.replace_earlier(i, &rec);
        let job = &mut self.jobs[i];
        let changed_from = (before != Some(rec.state)).then_some(before);
        job.rec = Some(rec);
        job.done = settled;
        Update {
            changed_from,
            ended: settled,
            lost: None,
        }
    }

    /// Job `i`, whose record is `rec`, read: an earlier end of the same
    /// prompt (not job `i` itself) is replaced when job `i` is newer.
    fn replace_earlier(&mut self, i: usize, rec: &JobRecord) {
        let prompt = format!("{}/{}", rec.project, rec.name);
        // Taken for an earlier end, it has not ended: waited for as any.
        if self.jobs[i].earlier && !rec.state.is_terminal() {
            self.jobs[i].earlier = false;
        }
        if self.jobs[i].earlier {
            self.earlier.entry(prompt).or_insert(i);
            return;
        }
        let Some(&e) = self.earlier.get(&prompt) else {
            return;
        };
        let newer = self.jobs[e]
            .rec
            .as_ref()
            .is_none_or(|r| (r.created_at, r.attempt) < (rec.created_at, rec.attempt));
        if newer {
            self.jobs[e].superseded = true;
            self.earlier.remove(&prompt);
        }
    }

    /// A record that cannot be read: not there yet (a claim in progress
    /// writes it after the folder) is waited for; gone, or unreadable, the
    /// job is lost.
    fn unreadable(&mut self, i: usize, e: JobError) -> Update {
        let job = &mut self.jobs[i];
        let missing = matches!(&e, JobError::Io(io) if io.kind() == std::io::ErrorKind::NotFound);
        if missing && job.rec.is_none() && self.layout.run_dir(&job.id).is_dir() {
            return Update::default();
        }
        let why = if missing {
            format!(
                "its record {} is gone (pruned by retention?)",
                self.layout.job_json(&job.id).display()
            )
        } else {
            e.to_string()
        };
        job.lost = Some(why.clone());
        Update {
            lost: Some(why),
            ..Update::default()
        }
    }

    /// Has the end of `rec` (terminal) moved its prompt on? Requeued (its
    /// next attempt may already hold the same `*.running.md`), in the
    /// archive, or no longer `*.running.md` (an archived copy since pruned),
    /// or it could not be moved and the record says so. (The record names
    /// the prompt's next place before the move: that alone proves nothing.)
    fn settled(&self, rec: &JobRecord) -> bool {
        let exists = |p: &std::path::Path| std::fs::symlink_metadata(p).is_ok();
        let archived = rec
            .archive_path
            .as_deref()
            .is_some_and(|p| exists(&self.layout.resolve(p)));
        rec.disposition.as_deref() == Some("requeued")
            || rec.extra.contains_key("archive_error")
            || archived
            || !exists(&self.layout.running_prompt(&rec.prompt_name()))
    }
}
