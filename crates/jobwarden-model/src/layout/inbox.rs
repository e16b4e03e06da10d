//! The inbox's names: waiting, incoming and claimed prompts, retry
//! requests, the claim records and hosts' leases of a shared inbox, and
//! the locks under which claims and retries take turns.

use std::path::{Path, PathBuf};

use super::{
    CLAIM_RECORD_SUFFIX, InboxEntry, Layout, PROMPT_SUFFIX, PromptName, RETRY_REQUEST_SUFFIX,
    RUNNING_SUFFIX, classify_inbox_path, validate_segment,
};
use crate::job_id::JobId;

impl Layout {
    /// The inbox folder of `project` (`inbox/` itself for "").
    pub fn inbox_folder(&self, project: &str) -> PathBuf {
        if project.is_empty() {
            self.inbox()
        } else {
            self.inbox().join(project)
        }
    }

    /// Where a waiting prompt lives.
    pub fn waiting_prompt(&self, prompt: &PromptName) -> PathBuf {
        self.inbox_file(prompt, PROMPT_SUFFIX)
    }

    /// Where `jobwarden submit` writes a prompt before renaming it to
    /// [`Layout::waiting_prompt`]: a dotfile ending in `.tmp`, which the
    /// daemon ignores, unique to the writing process.
    pub fn incoming_prompt(&self, prompt: &PromptName, pid: u32) -> PathBuf {
        self.inbox()
            .join(&prompt.project)
            .join(format!(".{}.{pid}.tmp", prompt.name))
    }

    /// Where a claimed prompt lives while its job holds it.
    pub fn running_prompt(&self, prompt: &PromptName) -> PathBuf {
        self.inbox_file(prompt, RUNNING_SUFFIX)
    }

    fn inbox_file(&self, prompt: &PromptName, suffix: &str) -> PathBuf {
        self.inbox()
            .join(&prompt.project)
            .join(format!("{}{suffix}", prompt.name))
    }

    /// A retry request beside a prompt put back by `jobwarden retry`
    /// (see `retry::request`). A dotfile: scans and claims ignore it.
    pub fn retry_request(&self, prompt: &PromptName) -> PathBuf {
        self.inbox()
            .join(&prompt.project)
            .join(format!(".{}{RETRY_REQUEST_SUFFIX}", prompt.name))
    }

    /// Who holds a claimed prompt, in an inbox shared by several hosts
    /// (`shared_inbox.rs`): beside `<name>.running.md`, written by the
    /// claim. A dotfile: scans and claims ignore it.
    pub fn claim_record(&self, prompt: &PromptName) -> PathBuf {
        self.inbox()
            .join(&prompt.project)
            .join(format!(".{}{CLAIM_RECORD_SUFFIX}", prompt.name))
    }

    /// The prompt whose claim record is at `path`, if it is one
    /// (`.<name>.claim.json` in a folder of the inbox).
    pub fn prompt_of_claim_record(&self, path: &Path) -> Option<PromptName> {
        let file = path.file_name()?.to_str()?;
        let name = file.strip_prefix('.')?.strip_suffix(CLAIM_RECORD_SUFFIX)?;
        let as_prompt = path.parent()?.join(format!("{name}{PROMPT_SUFFIX}"));
        match classify_inbox_path(&self.inbox(), &as_prompt) {
            InboxEntry::Prompt(p) => Some(p),
            _ => None,
        }
    }

    /// A claim record taken by a host that requeues a dead host's claim:
    /// renamed away first, so that one host alone goes on.
    pub fn taken_claim_record(&self, prompt: &PromptName, unique: &str) -> PathBuf {
        self.inbox()
            .join(&prompt.project)
            .join(format!(".{}.taken-{unique}.tmp", prompt.name))
    }

    /// The leases of the hosts sharing the inbox.
    pub fn host_leases(&self) -> PathBuf {
        self.inbox().join(".hosts")
    }

    /// `host`'s lease: renewed while anything of it lives.
    pub fn host_lease(&self, host: &str) -> PathBuf {
        self.host_leases().join(format!("{host}.json"))
    }

    /// The prompt a claimed file (`<name>.running.md` in the inbox) holds,
    /// if its name is a valid prompt's.
    pub fn prompt_of_claimed(&self, running: &Path) -> Option<PromptName> {
        let as_prompt = running.to_str()?.strip_suffix(RUNNING_SUFFIX)?.to_owned() + PROMPT_SUFFIX;
        match classify_inbox_path(&self.inbox(), Path::new(&as_prompt)) {
            InboxEntry::Prompt(p) => Some(p),
            _ => None,
        }
    }

    /// The waiting prompt that the retry request at `path` is for, if
    /// `path` is one (`.<name>.retry.json` in a folder of the inbox).
    pub fn prompt_of_retry_request(&self, path: &Path) -> Option<PathBuf> {
        let file = path.file_name()?.to_str()?;
        let name = file.strip_prefix('.')?.strip_suffix(RETRY_REQUEST_SUFFIX)?;
        validate_segment(name).ok()?;
        let dir = path.parent()?;
        dir.starts_with(self.inbox())
            .then(|| dir.join(format!("{name}{PROMPT_SUFFIX}")))
    }

    /// Locked (flock) by `jobwarden retry` while it decides and puts a
    /// prompt back, so that retries take turns. One for the root: retries
    /// are rare and quick, and no lock file is left beside any prompt.
    pub fn retry_lock(&self) -> PathBuf {
        self.root.join("retry.lock")
    }

    /// Locked (flock) by `jobwarden abort` while it claims and ends a job
    /// itself (a prompt cancelled in the inbox, a queued job cancelled with
    /// no daemon running), and by a starting daemon while it reconciles
    /// (before its first claim, and while it acts on its start-up check's
    /// findings): the two take turns, so that recovery never finds such a
    /// job half made and starts it.
    pub fn claim_lock(&self) -> PathBuf {
        self.root.join("claim.lock")
    }

    /// Written once by `jobwarden retry` when it has put job `id`'s prompt
    /// back: a job is retried at most once (its retry is the next to retry).
    pub fn retried_marker(&self, id: &JobId) -> PathBuf {
        self.run_dir(id).join("retried.json")
    }

    /// The temporary copy `jobwarden retry` writes before renaming it to
    /// the prompt's waiting name; `unique` keeps two writers apart.
    pub fn retry_temp(&self, prompt: &PromptName, unique: &str) -> PathBuf {
        self.inbox()
            .join(&prompt.project)
            .join(format!(".{}.retry-{unique}.tmp", prompt.name))
    }
}
