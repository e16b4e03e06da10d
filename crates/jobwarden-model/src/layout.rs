//! The on-disk layout under the root: the only module that knows file and
//! folder names (DESIGN §2). Everything else asks a [`Layout`] for a path.
//!
//! It also owns name validation, because a name is only dangerous once it
//! becomes a path: prompt names, project segments and job ids are checked
//! here on the way in (claim) and on the way out (CLI arguments).

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use crate::job_id::JobId;
use crate::state::JobState;

mod control;
mod inbox;
mod sandbox;

pub use control::{paused_profile, paused_project};

/// Suffix of a prompt waiting in the inbox.
pub const PROMPT_SUFFIX: &str = ".prompt.md";
/// Suffix of a prompt claimed by a job.
pub const RUNNING_SUFFIX: &str = ".running.md";
/// Suffix of a claim record, after a leading dot and the prompt's name.
pub const CLAIM_RECORD_SUFFIX: &str = ".claim.json";
/// Suffix of a retry request, after a leading dot and the prompt's name.
const RETRY_REQUEST_SUFFIX: &str = ".retry.json";
/// Longest accepted prompt name or project segment, in bytes.
const MAX_SEGMENT_BYTES: usize = 200;

/// Paths under one jobwarden root.
#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Layout { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn inbox(&self) -> PathBuf {
        self.root.join("inbox")
    }

    pub fn runs(&self) -> PathBuf {
        self.root.join("runs")
    }

    pub fn archive(&self) -> PathBuf {
        self.root.join("archive")
    }

    pub fn daemon_json(&self) -> PathBuf {
        self.root.join("daemon.json")
    }

    pub fn daemon_lock(&self) -> PathBuf {
        self.root.join("daemon.lock")
    }

    /// Locked (flock) by a retention pass for its whole length: the
    /// daemon's and `jobwarden gc`'s passes take turns.
    pub fn gc_lock(&self) -> PathBuf {
        self.root.join("gc.lock")
    }

    pub fn ledger(&self) -> PathBuf {
        self.root.join("ledger.db")
    }

    /// The web page's access token (mode 0600, the service's user only).
    pub fn web_token(&self) -> PathBuf {
        self.root.join("web.token")
    }

    /// A Slurm job's batch folder (its script, its output, the script's
    /// records): its own under a profile's shared `batch_dir`, else its run
    /// folder. The first path is the folder its writes stay beneath.
    pub fn slurm_batch_dir(&self, id: &JobId, shared: Option<&Path>) -> (PathBuf, PathBuf) {
        match shared {
            Some(dir) => (dir.to_path_buf(), dir.join(id.as_str())),
            None => (self.root.clone(), self.run_dir(id)),
        }
    }

    /// The batch script in a Slurm batch folder.
    pub fn slurm_script(dir: &Path) -> PathBuf {
        dir.join("slurm.sh")
    }

    /// The job's output in a Slurm batch folder.
    pub fn slurm_output(dir: &Path) -> PathBuf {
        dir.join("slurm.out")
    }

    /// What the batch script records as the command starts.
    pub fn slurm_started(dir: &Path) -> PathBuf {
        dir.join("slurm-started.json")
    }

    /// What the batch script records as the command ends.
    pub fn slurm_exit(dir: &Path) -> PathBuf {
        dir.join("slurm-exit.json")
    }

    /// What the daemon's last poll of Slurm found (`slurm.json`).
    pub fn slurm_queue(&self) -> PathBuf {
        self.root.join("slurm.json")
    }

    /// The web page's second token, which reads `/metrics` only.
    pub fn metrics_token(&self) -> PathBuf {
        self.root.join("metrics.token")
    }

    /// Where a damaged `ledger.db` is moved aside (never deleted):
    /// `ledger.db.corrupt-<ms>`. Its `-wal` and `-shm` go beside it under
    /// that name ([`sqlite_sidecars`]), so the three still open together.
    pub fn corrupt_ledger(&self, stamp: u64) -> PathBuf {
        self.root.join(format!("ledger.db.corrupt-{stamp}"))
    }

    /// The folders the daemon creates at start.
    pub fn skeleton(&self) -> [PathBuf; 8] {
        let [control, profiles, projects, profile_limits, project_limits] = self.control_folders();
        [
            self.inbox(),
            self.runs(),
            self.archive(),
            control,
            profiles,
            projects,
            profile_limits,
            project_limits,
        ]
    }

    /// Is `dir` a folder of the skeleton that is only ever read through
    /// handles refusing links (the inbox, `control/` and its folders), so
    /// that a link there is reported rather than stopping a start?
    pub fn read_through_handles(&self, dir: &Path) -> bool {
        dir == self.inbox() || self.control_folders().iter().any(|c| c == dir)
    }

    pub fn run_dir(&self, id: &JobId) -> PathBuf {
        self.runs().join(id.as_str())
    }

    pub fn job_json(&self, id: &JobId) -> PathBuf {
        self.run_dir(id).join("job.json")
    }

    /// Whether job `id` has a record on disk: its view, `job.json`, or a
    /// journal line that carries it (docs/on-disk.md, "The journal": a
    /// view may be lost to a power cut, or replaced by a job).
    pub fn has_record(&self, id: &JobId) -> bool {
        std::fs::symlink_metadata(self.job_json(id)).is_ok()
            || crate::events::last_record::<serde::de::IgnoredAny>(&self.root, &self.events(id))
                .is_some()
    }

    pub fn prompt_copy(&self, id: &JobId) -> PathBuf {
        self.run_dir(id).join(PROMPT_COPY_FILE)
    }

    /// The prompt's body without its front matter, written by the claim
    /// only when the prompt has front matter: what the command is given.
    pub fn prompt_body(&self, id: &JobId) -> PathBuf {
        self.run_dir(id).join(BODY_FILE)
    }

    pub fn job_log(&self, id: &JobId) -> PathBuf {
        self.run_dir(id).join("job.log")
    }

    pub fn events(&self, id: &JobId) -> PathBuf {
        self.run_dir(id).join(EVENTS_FILE)
    }

    /// The ids of the job folders under `runs/`: real folders (never a
    /// symlink) whose names are valid job ids; anything else is ignored.
    /// A missing `runs/` has no jobs.
    pub fn job_ids(&self) -> std::io::Result<Vec<JobId>> {
        self.each_job_id()?.collect()
    }

    /// The ids of the folders under `runs/`, as the listing yields them
    /// (it may hold a million: nothing is collected). Entries that are not
    /// folders named like a job are skipped.
    pub fn each_job_id(
        &self,
    ) -> std::io::Result<impl Iterator<Item = std::io::Result<JobId>> + use<>> {
        let entries = match std::fs::read_dir(self.runs()) {
            Ok(entries) => Some(entries),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        Ok(entries.into_iter().flatten().filter_map(|entry| {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => return Some(Err(e)),
            };
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let id = entry
                .file_name()
                .to_str()
                .and_then(|n| JobId::parse(n).ok());
            id.filter(|_| is_dir).map(Ok)
        }))
    }

    /// Is `runs/<id>/` what a claim cut short by a crash leaves: a real
    /// folder holding nothing but what a claim writes before `job.json`
    /// (the prompt copy, the body, events without a journal line, a
    /// temporary file)? Such a folder belongs to no job, and its id may be
    /// claimed again. A journal line is a job's record, even when a power
    /// cut took `job.json`.
    pub fn is_claim_leftover(&self, id: &JobId) -> std::io::Result<bool> {
        let dir = self.run_dir(id);
        if !std::fs::symlink_metadata(&dir)?.is_dir() {
            return Ok(false);
        }
        for entry in std::fs::read_dir(&dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            let temporary = name.starts_with('.') && name.ends_with(".tmp");
            let early = [PROMPT_COPY_FILE, BODY_FILE, EVENTS_FILE].contains(&name.as_ref());
            if !(temporary || early) {
                return Ok(false);
            }
        }
        let journal =
            crate::events::last_record::<serde::de::IgnoredAny>(&self.root, &self.events(id));
        Ok(journal.is_none())
    }

    /// The job's monitor lock: its run folder itself, held (flock) by the
    /// job's monitor for its whole life by an open descriptor of the
    /// folder. Its holders are candidates for the job's monitor, proven
    /// from `/proc` before anyone is trusted (see `procfs`). That some
    /// monitor took the job is said by its record (`monitor_pid`, in the
    /// journal before anything of the job runs), not by this lock.
    pub fn monitor_lock(&self, id: &JobId) -> PathBuf {
        self.run_dir(id)
    }

    /// The job whose run folder is at `path`, a path as the kernel names
    /// an open folder (absolute, symlinks resolved).
    pub fn job_of_run_dir(&self, path: &Path) -> Option<JobId> {
        // The name first: most of what a process holds open is no run
        // folder, and the name says so without asking the filesystem.
        let id = JobId::parse(path.file_name()?.to_str()?).ok()?;
        let runs = path.parent()?;
        let ours = self.runs();
        if runs != ours && std::fs::canonicalize(&ours).ok().as_deref() != Some(runs) {
            return None;
        }
        Some(id)
    }

    /// The job's own working folder, the default workdir: inside its run
    /// folder but apart from the monitor's lock and records, so that a job
    /// that empties its workdir destroys nothing of the monitor's.
    pub fn job_workdir(&self, id: &JobId) -> PathBuf {
        self.run_dir(id).join(WORK_DIR)
    }

    /// Paths the job says it changed, one per line (written by the job).
    pub fn affected_list(&self, id: &JobId) -> PathBuf {
        self.run_dir(id).join("affected")
    }

    pub fn abort_marker(&self, id: &JobId) -> PathBuf {
        self.run_dir(id).join(ABORT_FILE)
    }

    /// Where a prompt rests after its last attempt ended in `state`.
    pub fn archived_prompt(&self, state: JobState, prompt: &PromptName, id: &JobId) -> PathBuf {
        self.archive()
            .join(state.as_str())
            .join(&prompt.project)
            .join(format!("{}.{id}.md", prompt.name))
    }

    /// The `n`th other name of a job's archived prompt, for when
    /// [`Layout::archived_prompt`] is taken by a file that is not its own
    /// (a leftover, or planted): `<name>.<job_id>.<n>.md`.
    pub fn archived_prompt_alt(
        &self,
        state: JobState,
        prompt: &PromptName,
        id: &JobId,
        n: u32,
    ) -> PathBuf {
        self.archived_prompt(state, prompt, id)
            .with_file_name(format!("{}.{id}.{n}.md", prompt.name))
    }

    /// The id in `path`'s name when `path` is a name a claim gives
    /// `prompt`'s file in the archive itself, `<name>.<id>.md` in
    /// `archive/cancelled/` (a cancel of a waiting prompt) or
    /// `archive/rejected/` (an unusable name): the places besides its
    /// `<name>.running.md` where a job may hold the prompt it claimed.
    pub fn claimed_into_archive(&self, prompt: &PromptName, path: &Path) -> Option<JobId> {
        let file = path.file_name()?.to_str()?;
        let id = file
            .strip_prefix(prompt.name.as_str())?
            .strip_prefix('.')?
            .strip_suffix(".md")?;
        let id = JobId::parse(id).ok()?;
        [JobState::Cancelled, JobState::Rejected]
            .into_iter()
            .any(|state| self.archived_prompt(state, prompt, &id) == path)
            .then_some(id)
    }

    /// Every file in the archive, under any state, named as one of job
    /// `id`'s archived prompts (`<name>.<id>.md` or `<name>.<id>.<n>.md`):
    /// where its prompt may be when its record does not say.
    pub fn archived_prompt_candidates(&self, prompt: &PromptName, id: &JobId) -> Vec<PathBuf> {
        let stem = format!("{}.{id}.", prompt.name);
        let ours = |file: &str| {
            file.strip_prefix(&stem)
                .and_then(|rest| rest.strip_suffix("md"))
                .is_some_and(|n| n.is_empty() || n.strip_suffix('.').is_some_and(is_number))
        };
        let states = std::fs::read_dir(self.archive()).into_iter().flatten();
        let mut found: Vec<PathBuf> = states
            .flatten()
            .map(|state| state.path().join(&prompt.project))
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flat_map(|entries| entries.flatten())
            .filter(|e| e.file_name().to_str().is_some_and(ours))
            .map(|e| e.path())
            .collect();
        found.sort();
        found
    }

    /// Where an orphaned claim goes back to when its name is taken by a
    /// newer drop: a sibling that sorts next to it and is never overwritten.
    pub fn recovered_prompt(&self, prompt: &PromptName, stamp: u64) -> PathBuf {
        self.inbox()
            .join(&prompt.project)
            .join(format!("{}.recovered-{stamp}{PROMPT_SUFFIX}", prompt.name))
    }

    /// A root-relative path from a record (checked by
    /// [`validate_record_path`] when the record was loaded), made absolute.
    pub fn resolve(&self, record_path: &str) -> PathBuf {
        self.root.join(record_path)
    }

    // -- retention (gc) ------------------------------------------------------

    /// A record's `archive_path` made absolute, but only if it names a file
    /// strictly under `archive/` with plain components: the one kind of
    /// prompt file retention may delete.
    pub fn archived_file(&self, record_path: &str) -> Option<PathBuf> {
        let rel = Path::new(record_path);
        let plain = rel.components().all(|c| matches!(c, Component::Normal(_)));
        let path = self.resolve(record_path);
        let under = path.starts_with(self.archive()) && path != self.archive();
        (plain && under).then_some(path)
    }

    // ------------------------------------------------------------------------

    /// Where a corrupt `job.json` is moved aside (never deleted).
    pub fn corrupt_record(&self, id: &JobId, stamp: u64) -> PathBuf {
        self.run_dir(id).join(format!("job.json.corrupt-{stamp}"))
    }

    /// Where something a job put in place of one of our folders (a symlink,
    /// a file) is moved aside, never deleted: `<folder>.displaced-<ms>`
    /// beside it (e.g. `runs/<id>.displaced-<ms>`). Not a job id, so no
    /// reader of `runs/` takes it for a job.
    pub fn displaced(&self, folder: &Path, stamp: u64) -> PathBuf {
        let name = folder.file_name().unwrap_or_default().to_string_lossy();
        folder.with_file_name(format!("{name}.displaced-{stamp}"))
    }

    /// Where an unreadable `daemon.json` is moved aside.
    pub fn corrupt_daemon_json(&self, stamp: u64) -> PathBuf {
        self.root.join(format!("daemon.json.corrupt-{stamp}"))
    }

    /// A job's working folder: a configured path, relative ones under the root.
    pub fn workdir(&self, configured: &str) -> PathBuf {
        self.root.join(configured)
    }

    /// `path` relative to the root, for records (falls back to the full path).
    pub fn relative(&self, path: &Path) -> PathBuf {
        path.strip_prefix(&self.root)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| path.to_path_buf())
    }

    /// Is `path` the ABORT marker of some run directory? Returns the job id.
    pub fn abort_marker_job(&self, path: &Path) -> Option<JobId> {
        if path.file_name() != Some(OsStr::new(ABORT_FILE)) {
            return None;
        }
        let dir = path.parent()?;
        if dir.parent()? != self.runs() {
            return None;
        }
        JobId::parse(dir.file_name()?.to_str()?).ok()
    }
}

/// The name of a job's abort marker in its run folder.
pub const ABORT_FILE: &str = "ABORT";
const PROMPT_COPY_FILE: &str = "prompt.md";
const BODY_FILE: &str = "body.md";
const EVENTS_FILE: &str = "events.jsonl";
const WORK_DIR: &str = "work";

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A prompt's identity: its inbox folder (`project`, "" at the top) and its
/// name without suffix. The ledger key of a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PromptName {
    pub project: String,
    pub name: String,
}

impl std::fmt::Display for PromptName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.project.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.project, self.name)
        }
    }
}

/// What a path in the inbox is, as far as the claim path cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboxEntry {
    /// A `*.prompt.md` with a valid project and name.
    Prompt(PromptName),
    /// A `*.prompt.md` whose name cannot be used as a path: claimed and
    /// rejected so that the operator sees it, never silently skipped.
    InvalidName { display: String, reason: String },
    /// Anything else: other suffixes, dotfiles, hidden folders, `.running.md`.
    Ignored,
}

/// The files SQLite keeps beside database `db` (its write-ahead log and
/// shared-memory index): `<db>-wal`, `<db>-shm`.
pub fn sqlite_sidecars(db: &Path) -> [PathBuf; 2] {
    ["-wal", "-shm"].map(|suffix| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    })
}

/// Does `path` name a claimed prompt (`<name>.running.md`)?
pub fn is_claimed_name(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.as_encoded_bytes().ends_with(RUNNING_SUFFIX.as_bytes()))
}

/// Classify an absolute path under `inbox`.
pub fn classify_inbox_path(inbox: &Path, path: &Path) -> InboxEntry {
    let Ok(rel) = path.strip_prefix(inbox) else {
        return InboxEntry::Ignored;
    };
    let mut parts: Vec<&OsStr> = Vec::new();
    for comp in rel.components() {
        match comp {
            Component::Normal(p) => parts.push(p),
            _ => return InboxEntry::Ignored,
        }
    }
    let Some((file, dirs)) = parts.split_last() else {
        return InboxEntry::Ignored;
    };
    if parts.iter().any(|p| p.as_encoded_bytes().starts_with(b".")) {
        return InboxEntry::Ignored;
    }
    let Some(stem) = file
        .as_encoded_bytes()
        .strip_suffix(PROMPT_SUFFIX.as_bytes())
    else {
        return InboxEntry::Ignored;
    };
    let display = rel.to_string_lossy().into_owned();
    match prompt_name_from(dirs, stem) {
        Ok(prompt) => InboxEntry::Prompt(prompt),
        Err(reason) => InboxEntry::InvalidName { display, reason },
    }
}

fn prompt_name_from(dirs: &[&OsStr], stem: &[u8]) -> Result<PromptName, String> {
    let mut project = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let seg = dir
            .to_str()
            .ok_or_else(|| format!("folder name {dir:?} is not valid UTF-8"))?;
        validate_segment(seg).map_err(|e| format!("folder name {seg:?}: {e}"))?;
        project.push(seg);
    }
    let name = std::str::from_utf8(stem).map_err(|_| {
        format!(
            "prompt name {:?} is not valid UTF-8",
            String::from_utf8_lossy(stem)
        )
    })?;
    validate_segment(name).map_err(|e| format!("prompt name {name:?}: {e}"))?;
    Ok(PromptName {
        project: project.join("/"),
        name: name.to_owned(),
    })
}

/// Check that `seg` is safe as a single path component in every place we
/// use it: non-empty, bounded, no separators, no control characters, not
/// `.`/`..`, no leading dot or dash, no surrounding whitespace.
pub fn validate_segment(seg: &str) -> Result<(), String> {
    if seg.is_empty() {
        return Err("is empty".into());
    }
    if seg.len() > MAX_SEGMENT_BYTES {
        return Err(format!("is longer than {MAX_SEGMENT_BYTES} bytes"));
    }
    if seg.starts_with('.') || seg.starts_with('-') {
        return Err("must not start with '.' or '-'".into());
    }
    if seg.trim() != seg {
        return Err("must not start or end with whitespace".into());
    }
    if let Some(c) = seg
        .chars()
        .find(|c| c.is_control() || *c == '/' || *c == '\\')
    {
        return Err(format!("contains the forbidden character {c:?}"));
    }
    Ok(())
}

/// Validate a root-relative path read from a record: relative, plain
/// components only, under `inbox/` or `archive/`.
pub fn validate_record_path(p: &str) -> Result<(), String> {
    let path = Path::new(p);
    let mut comps = path.components();
    match comps.next() {
        Some(Component::Normal(first)) if first == "inbox" || first == "archive" => {}
        _ => return Err("must be relative and start with inbox/ or archive/".into()),
    }
    if comps.any(|c| !matches!(c, Component::Normal(_))) || p.contains('\0') {
        return Err("must not contain '..' or NUL".into());
    }
    Ok(())
}

/// Validate a project path given by a user (`a/b`), segment by segment.
pub fn validate_project(project: &str) -> Result<(), String> {
    if project.is_empty() {
        return Ok(());
    }
    for seg in project.split('/') {
        validate_segment(seg).map_err(|e| format!("project segment {seg:?} {e}"))?;
    }
    Ok(())
}

/// Longest absolute project path `history check` and `history record`
/// accept as a key.
const MAX_EXTERNAL_PROJECT_BYTES: usize = 4096;

/// Validate the project of a history key: a project folder of the inbox
/// ([`validate_project`]), or, for runs jobwarden did not supervise, an
/// absolute path such as a script's `${PROJECT_DIR}`, kept as its own key
/// exactly as given (never resolved, never joined onto the root).
pub fn validate_history_project(project: &str) -> Result<(), String> {
    if !project.starts_with('/') {
        return validate_project(project);
    }
    if project.len() > MAX_EXTERNAL_PROJECT_BYTES {
        return Err(format!("is longer than {MAX_EXTERNAL_PROJECT_BYTES} bytes"));
    }
    if let Some(c) = project.chars().find(|c| c.is_control()) {
        return Err(format!("contains the forbidden character {c:?}"));
    }
    Ok(())
}

/// Is `project` an absolute path kept as a history key (see
/// [`validate_history_project`]) rather than an inbox folder?
pub fn is_external_project(project: &str) -> bool {
    project.starts_with('/')
}

#[cfg(test)]
mod tests;
