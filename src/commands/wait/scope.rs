//! What `wait --project P` and `wait --all` wait for besides named jobs:
//! the jobs of those projects (or of every project) that have not ended
//! when the wait starts or that are claimed while it lasts, and the prompts
//! in their inbox folders that will become jobs.
//!
//! A prompt waiting in the inbox (`*.prompt.md`) is waited for unless its
//! cooldown defers it (the same rule the daemon applies: the prompt's last
//! run in the ledger, the cooldowns of the profile it ran under); a
//! deferred prompt is listed, not waited for, since its cooldown may last
//! hours. A claimed prompt (`*.running.md`) is waited for until its job
//! moves it on: it covers the moment between the claim and the job's
//! record, and between the record's end and the archive.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jobwarden_engine::inbox;
use jobwarden_engine::retry;
use jobwarden_ledger::{JobFilter, Ledger};
use jobwarden_model::config::Config;
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::{
    self, InboxEntry, Layout, PROMPT_SUFFIX, PromptName, RUNNING_SUFFIX,
};

/// The states of a job that has not ended.
const UNFINISHED: [&str; 4] = ["queued", "preparing", "running", "publishing"];
/// Upper bound on the jobs one index query returns.
const QUERY_LIMIT: usize = 100_000;

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
                let mut claimed = 0;
                for project in projects {
                    let (w, c) = folder_files(layout, &layout.inbox_folder(project));
                    waiting.extend(w);
                    claimed += c;
                }
                (waiting, claimed)
            }
            Scope::All => {
                let inbox = layout.inbox();
                let waiting = inbox::scan(layout.root(), &inbox);
                let claimed = inbox::scan_suffix(layout.root(), &inbox, RUNNING_SUFFIX);
                (waiting.into_iter().map(|f| f.path).collect(), claimed.len())
            }
        };
        found.claimed = claimed;
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

/// The `*.prompt.md` files of one inbox folder (not below it), and how
/// many `*.running.md` it holds. A folder that does not exist holds none.
fn folder_files(layout: &Layout, dir: &Path) -> (Vec<PathBuf>, usize) {
    let mut waiting = Vec::new();
    let mut claimed = 0;
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
            claimed += 1;
        }
    }
    (waiting, claimed)
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
