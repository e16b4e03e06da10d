//! What `wait --project P` and `wait --all` wait for besides named jobs:
//! the jobs of those projects (or of every project) that have not ended
//! when the wait starts or that are claimed while it lasts, and the prompts
//! in their inbox folders that will become jobs.
//!
//! `--project` also counts what the project's current batch already ended
//! ([`Scope::earlier_jobs`]): a script that drops its prompts and then
//! waits must not lose a job that ended before the wait began. (`--all`
//! waits for the root to drain, and counts only what it saw end.)
//!
//! A prompt waiting in the inbox (`*.prompt.md`) is waited for unless its
//! cooldown defers it (the same rule the daemon applies: the prompt's last
//! run in the ledger, the cooldowns of the profile it ran under); a
//! deferred prompt is listed, not waited for, since its cooldown may last
//! hours. A claimed prompt (`*.running.md`) is waited for until its job
//! moves it on: it covers the moment between the claim and the job's
//! record, and between the record's end and the archive. One no claim
//! made (a file a job wrote there) is not waited for once it is a few
//! seconds old ([`claim_under_way`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jobwarden_engine::inbox;
use jobwarden_engine::retry;
use jobwarden_ledger::{IDLE_ENDS_A_BATCH_MS, IndexedJob, JobFilter, Ledger};
use jobwarden_model::config::Config;
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::{
    self, InboxEntry, Layout, PROMPT_SUFFIX, PromptName, RUNNING_SUFFIX,
};

/// The states of a job that has not ended.
const UNFINISHED: [&str; 4] = ["queued", "preparing", "running", "publishing"];
/// Upper bound on the jobs one index query returns.
const QUERY_LIMIT: usize = 100_000;
/// How many of a project's newest jobs its current batch is looked for in.
const BATCH_SCAN: usize = 10_000;

/// Which projects are waited for.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Named jobs only.
    Jobs,
    /// These projects (each its own inbox folder, not the ones below it).
    Projects(Vec<String>),
    /// Everything.
    All,
}

/// The prompts in scope, as one scan of the inbox found them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Prompts {
    /// Waiting to be claimed.
    pub waiting: Vec<PromptName>,
    /// Claimed: their jobs hold them (`*.running.md`).
    pub claimed: usize,
    /// In cooldown, until (epoch ms): not waited for.
    pub deferred: BTreeMap<String, u64>,
}

impl Prompts {
    /// Nothing that will run without waiting for a cooldown.
    pub fn settled(&self) -> bool {
        self.waiting.is_empty() && self.claimed == 0
    }
}

impl Scope {
    /// Does it take in jobs and prompts besides named jobs?
    pub fn discovers(&self) -> bool {
        !matches!(self, Scope::Jobs)
    }

    /// Is a job of `project` in scope?
    pub fn holds(&self, project: &str) -> bool {
        match self {
            Scope::Jobs => false,
            Scope::Projects(projects) => projects.iter().any(|p| p == project),
            Scope::All => true,
        }
    }

    /// Inbox folders to watch, and whether recursively.
    pub fn folders(&self, layout: &Layout) -> Vec<(PathBuf, bool)> {
        match self {
            Scope::Jobs => Vec::new(),
            Scope::Projects(projects) => projects
                .iter()
                .map(|p| (layout.inbox_folder(p), false))
                .collect(),
            Scope::All => vec![(layout.inbox(), true)],
        }
    }

    /// Should a job whose record is `rec` be followed, for a wait that
    /// started at `start_ms`? In scope, and not ended before the start.
    pub fn wants(&self, rec: &JobRecord, start_ms: u64) -> bool {
        self.holds(&rec.project)
            && (!rec.state.is_terminal() || rec.created_at.epoch_ms() >= start_ms)
    }

    /// Jobs in scope by the index: those claimed since `since_ms`, and with
    /// `unfinished`, those that have not ended. Without an index, the run
    /// folders. Also the newest claim time among them.
    pub fn indexed_jobs(
        &self,
        layout: &Layout,
        ledger: Option<&Ledger>,
        since_ms: u64,
        unfinished: bool,
    ) -> anyhow::Result<(Vec<JobId>, Option<u64>)> {
        let Some(ledger) = ledger else {
            return Ok((self.jobs_from_folders(layout, since_ms)?, None));
        };
        let projects: Vec<Option<String>> = match self {
            Scope::Jobs => return Ok((Vec::new(), None)),
            Scope::Projects(projects) => projects.iter().cloned().map(Some).collect(),
            Scope::All => vec![None],
        };
        let mut ids = Vec::new();
        let mut newest = None;
        for project in projects {
            let mut filters = vec![JobFilter {
                project: project.clone(),
                since_ms: Some(since_ms),
                ..JobFilter::default()
            }];
            if unfinished {
                filters.insert(
                    0,
                    JobFilter {
                        states: UNFINISHED.iter().map(|s| s.to_string()).collect(),
                        project,
                        ..JobFilter::default()
                    },
                );
            }
            for filter in filters {
                // Newest first from the index: followed in claim order.
                let rows = ledger.list_jobs(&filter, QUERY_LIMIT)?;
                newest = newest.max(rows.first().map(|j| j.created_at));
                ids.extend(rows.iter().rev().filter_map(|j| JobId::parse(&j.id).ok()));
            }
        }
        Ok((ids, newest))
    }

    /// The jobs of the projects in scope (`--project` only) that may have
    /// ended before the wait started and then count towards its exit
    /// code: those of the project's current batch ([`current_batch`]),
    /// each prompt's newest. Whether one has ended is its record's to say
    /// (the index learns a job's end late); one that has not is waited
    /// for like any other.
    pub fn earlier_jobs(&self, ledger: &Ledger, start_ms: u64) -> anyhow::Result<Vec<JobId>> {
        let Scope::Projects(projects) = self else {
            return Ok(Vec::new());
        };
        let mut ids = Vec::new();
        for project in projects {
            let filter = JobFilter {
                project: Some(project.clone()),
                ..JobFilter::default()
            };
            let jobs = ledger.list_jobs(&filter, BATCH_SCAN)?;
            ids.extend(newest_per_prompt(&current_batch(&jobs, start_ms)));
        }
        Ok(ids)
    }

    /// Without a ledger (no daemon ever ran): read every run folder.
    fn jobs_from_folders(&self, layout: &Layout, start_ms: u64) -> anyhow::Result<Vec<JobId>> {
        if !self.discovers() || !layout.runs().is_dir() {
            return Ok(Vec::new());
        }
        let ids = layout
            .job_ids()
            .map_err(|e| anyhow::anyhow!("listing {}: {e}", layout.runs().display()))?;
        Ok(ids
            .into_iter()
            .filter(|id| JobRecord::load_job(layout, id).is_ok_and(|r| self.wants(&r, start_ms)))
            .collect())
    }

    /// Scan the inbox folders in scope.
    pub fn prompts(
        &self,
        layout: &Layout,
        config: &Config,
        ledger: Option<&Ledger>,
        now_ms: u64,
    ) -> Prompts {
        let mut found = Prompts::default();
        let (waiting, claimed) = match self {
            Scope::Jobs => return found,
            Scope::Projects(projects) => {
                let mut waiting = Vec::new();
                let mut claimed = Vec::new();
                for project in projects {
                    let (w, c) = folder_files(layout, &layout.inbox_folder(project));
                    waiting.extend(w);
                    claimed.extend(c);
                }
                (waiting, claimed)
            }
            Scope::All => {
                let inbox = layout.inbox();
                let waiting = inbox::scan(layout.root(), &inbox);
                let claimed = inbox::scan_suffix(layout.root(), &inbox, RUNNING_SUFFIX);
                let claimed = claimed.into_iter().map(|f| f.path).collect();
                (waiting.into_iter().map(|f| f.path).collect(), claimed)
            }
        };
        found.claimed = claimed
            .iter()
            .filter(|path| claim_under_way(layout, ledger, path, now_ms))
            .count();
        for path in waiting {
            match layout::classify_inbox_path(&layout.inbox(), &path) {
                InboxEntry::Prompt(prompt) => {
                    match cooldown_end(layout, config, ledger, &prompt, now_ms) {
                        Some(until) => {
                            found.deferred.insert(prompt.to_string(), until);
                        }
                        None => found.waiting.push(prompt),
                    }
                }
                // Claimed and rejected by the daemon: waited for.
                InboxEntry::InvalidName { display, .. } => found.waiting.push(PromptName {
                    project: String::new(),
                    name: display,
                }),
                InboxEntry::Ignored => {}
            }
        }
        found
    }
}

/// The jobs of a project's current batch among `jobs` (any order), for a
/// wait that starts at `start_ms`: the last busy stretch, jobs whose time
/// from claim to end (to `start_ms` for one not ended) chains together
/// with gaps shorter than [`IDLE_ENDS_A_BATCH_MS`], as `status`'s
/// completion summary reads a batch; empty when the project has been idle
/// that long before the wait.
fn current_batch(jobs: &[IndexedJob], start_ms: u64) -> Vec<&IndexedJob> {
    let mut sorted: Vec<&IndexedJob> = jobs.iter().collect();
    sorted.sort_by_key(|j| j.created_at);
    let mut batch: Vec<&IndexedJob> = Vec::new();
    let mut busy_until = 0u64;
    for job in sorted {
        if job.created_at > busy_until.saturating_add(IDLE_ENDS_A_BATCH_MS) {
            batch.clear();
        }
        let end = match ended(job) {
            true => job.finished_at.unwrap_or(job.created_at),
            false => start_ms,
        };
        busy_until = busy_until.max(end.max(job.created_at));
        batch.push(job);
    }
    if start_ms > busy_until.saturating_add(IDLE_ENDS_A_BATCH_MS) {
        batch.clear();
    }
    batch
}

/// Of `batch`, each prompt's newest job.
fn newest_per_prompt(batch: &[&IndexedJob]) -> Vec<JobId> {
    let mut newest: BTreeMap<&str, &IndexedJob> = BTreeMap::new();
    for job in batch {
        let slot = newest.entry(job.name.as_str()).or_insert(job);
        if (job.created_at, job.attempt) > (slot.created_at, slot.attempt) {
            *slot = job;
        }
    }
    newest
        .into_values()
        .filter_map(|j| JobId::parse(&j.id).ok())
        .collect()
}

/// Has the indexed job ended (by the index's state)?
fn ended(job: &IndexedJob) -> bool {
    job.state
        .parse::<JobState>()
        .is_ok_and(JobState::is_terminal)
}

/// The `*.prompt.md` and the `*.running.md` files of one inbox folder
/// (not below it). A folder that does not exist holds none.
fn folder_files(layout: &Layout, dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut waiting = Vec::new();
    let mut claimed = Vec::new();
    let entries = match jobwarden_sys::fsio::read_dir(layout.root(), dir) {
        Ok(entries) => entries,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("{e}");
            }
            return (waiting, claimed);
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let bytes = name.as_encoded_bytes();
        if bytes.starts_with(b".") || !entry.file_type().is_ok_and(|t| !t.is_dir()) {
            continue;
        }
        if bytes.ends_with(PROMPT_SUFFIX.as_bytes()) {
            waiting.push(dir.join(&name));
        } else if bytes.ends_with(RUNNING_SUFFIX.as_bytes()) {
            claimed.push(dir.join(&name));
        }
    }
    (waiting, claimed)
}

/// How long a claimed prompt may be there with no job of it that has not
/// ended (or just ended): a claim indexes its job moments after its
/// rename, and an end is archived moments after it is indexed.
const CLAIM_GRACE_MS: u64 = 10_000;

/// Is the claimed prompt at `path` one whose job has not moved it on yet:
/// renamed moments ago, or of a prompt with a job that has not ended or
/// has just ended? A `*.running.md` that is none of these is no claim's
/// (a file a job wrote there, or a daemon's leftover its next start puts
/// back): not waited for, or a wait would never end. A ledger that cannot
/// answer cannot tell: the file is waited for.
fn claim_under_way(layout: &Layout, ledger: Option<&Ledger>, path: &Path, now_ms: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let renamed_ms = |m: &std::fs::Metadata| {
        (m.ctime().max(0) as u64) * 1000 + (m.ctime_nsec().max(0) as u64) / 1_000_000
    };
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false; // moved on since the scan
    };
    if renamed_ms(&meta) + CLAIM_GRACE_MS > now_ms {
        return true;
    }
    let Some(ledger) = ledger else {
        return true;
    };
    let as_prompt = path.with_file_name(
        path.file_name()
            .map(|n| n.to_string_lossy().replace(RUNNING_SUFFIX, PROMPT_SUFFIX))
            .unwrap_or_default(),
    );
    let InboxEntry::Prompt(prompt) = layout::classify_inbox_path(&layout.inbox(), &as_prompt)
    else {
        return false;
    };
    let live = ledger.unended_jobs_of(&prompt.project, &prompt.name, 1);
    if live.map_or(true, |jobs| !jobs.is_empty()) {
        return true;
    }
    match ledger.newest_job_of(&prompt.project, &prompt.name) {
        Ok(Some(job)) => job
            .finished_at
            .is_some_and(|at| at + CLAIM_GRACE_MS > now_ms),
        Ok(None) => false,
        Err(_) => true,
    }
}

/// Until when (epoch ms) the daemon defers `prompt`, decided as the daemon
/// decides it ([`retry::deferral`]): its last run's outcome and that
/// profile's cooldowns, unless `jobwarden retry --now` put it back. A
/// ledger that cannot answer defers nothing: the prompt is waited for.
fn cooldown_end(
    layout: &Layout,
    config: &Config,
    ledger: Option<&Ledger>,
    prompt: &PromptName,
    now_ms: u64,
) -> Option<u64> {
    let last = ledger?.last_run(&prompt.project, &prompt.name).ok()??;
    let request = JobId::parse(&last.id)
        .ok()
        .and_then(|id| retry::request::pending_for(layout, prompt, &id));
    retry::deferral(config, Some(&last), request.as_ref(), now_ms).map(|d| d.until_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000;

    fn job(n: u8, name: &str, state: &str, created: u64, finished: Option<u64>) -> IndexedJob {
        IndexedJob {
            id: format!("0190b6a0-0000-7000-8000-0000000000{n:02}"),
            project: "p".into(),
            name: name.into(),
            state: state.into(),
            attempt: 1,
            created_at: created,
            started_at: Some(created),
            finished_at: finished,
            exit_code: None,
            state_reason: None,
            updated_at: created,
            profile: None,
        }
    }

    fn names(batch: &[&IndexedJob]) -> Vec<String> {
        batch
            .iter()
            .map(|j| format!("{}:{}", j.name, j.state))
            .collect()
    }

    #[test]
    fn the_current_batch_chains_up_to_the_start_of_the_wait() {
        let jobs = [
            job(1, "old", "failed", 0, Some(10 * S)),
            job(2, "a", "failed", 100 * S, Some(101 * S)),
            job(3, "b", "succeeded", 120 * S, Some(140 * S)),
        ];
        // 20 s after b ended: a and b, not the one long before them.
        assert_eq!(
            names(&current_batch(&jobs, 160 * S)),
            ["a:failed", "b:succeeded"]
        );
        // Idle for longer than a batch's gap: nothing ended counts.
        assert!(current_batch(&jobs, 200 * S).is_empty());
        // A job still running carries the batch up to the wait.
        let mut live = jobs.to_vec();
        live.push(job(4, "c", "running", 130 * S, None));
        assert_eq!(current_batch(&live, 500 * S).len(), 3);
    }

    #[test]
    fn each_prompt_counts_by_its_newest_job() {
        let jobs = [
            job(1, "a", "failed", 0, Some(S)),
            job(2, "a", "succeeded", 2 * S, Some(3 * S)),
            job(3, "b", "failed", S, Some(2 * S)),
            job(4, "b", "running", 4 * S, None),
            job(5, "c", "rejected", 4 * S, Some(4 * S)),
        ];
        let batch: Vec<&IndexedJob> = jobs.iter().collect();
        let ids: Vec<String> = newest_per_prompt(&batch)
            .iter()
            .map(|id| id.to_string())
            .collect();
        let want: Vec<String> = [1, 3, 4].iter().map(|&i| jobs[i].id.clone()).collect();
        assert_eq!(ids, want);
    }
}
