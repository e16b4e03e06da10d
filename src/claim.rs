//! The claim: turning an inbox file into a job, exactly once.
//!
//! Order of writes (each step recoverable if the process dies after it):
//! 1. Rename `<name>.prompt.md` → `<name>.running.md` in place, never
//!    replacing a file. This is the claim: one claimer wins; a lost race
//!    (source gone) or a busy name (same prompt's job still holds it) is an
//!    ordinary outcome. A crash after it leaves a `.running.md` without a
//!    record, which startup reconciliation finds.
//! 2. Create `runs/<job_id>/` (new, fsynced).
//! 3. Copy the prompt's exact bytes to `prompt.md` (fsynced).
//! 4. Write `job.json` in state `queued` (fsynced): from here the job exists.
//! 5. `claimed` and `queued` events (fail-soft).
//!
//! Input that cannot run (symlink, not a regular file, too large, not
//! UTF-8, a name that is not a safe path component) is claimed the same way
//! and then ends `rejected` with its reason, its file moved to
//! `archive/rejected/`: nothing is followed, nothing is lost.

use std::fs;
use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::error::{IoError, JobError};
use crate::events::EventLog;
use crate::fsio::{self, Renamed};
use crate::job::{JobId, JobRecord, JobState};
use crate::layout::{InboxEntry, Layout, PromptName};
use crate::ledger::Ledger;
use crate::terminal::{Ending, Finisher};

/// What happened to a candidate.
#[derive(Debug)]
pub enum Claimed {
    /// A job was created in state `queued`.
    Queued(JobRecord),
    /// The input was claimed and refused; the job is `rejected`.
    Rejected(JobRecord),
    /// Someone else claimed or removed the file first.
    Lost,
    /// A job for the same prompt still holds `<name>.running.md`; the prompt
    /// waits until that job ends.
    Busy(PromptName),
}

/// Which attempt a new job is: from the prompt's last ledger row, so that
/// the count survives restarts.
#[derive(Debug, Clone, Default)]
pub struct Prior {
    /// The previous attempt, if the prompt was requeued by it.
    pub requeued_by: Option<(JobId, u32)>,
}

/// Everything a claim needs.
pub struct Claimer<'a> {
    pub layout: &'a Layout,
    pub config: &'a Config,
    pub host: &'a str,
    pub ledger: Option<&'a mut Ledger>,
}

impl Claimer<'_> {
    /// Claim the inbox file at `path`, classified as `entry`.
    pub fn claim(
        &mut self,
        path: &Path,
        entry: InboxEntry,
        prior: &Prior,
    ) -> Result<Claimed, JobError> {
        match entry {
            InboxEntry::Prompt(prompt) => self.claim_prompt(path, prompt, prior),
            InboxEntry::InvalidName { display, reason } => {
                self.claim_invalid_name(path, display, reason)
            }
            InboxEntry::Ignored => Ok(Claimed::Lost),
        }
    }

    fn claim_prompt(
        &mut self,
        path: &Path,
        prompt: PromptName,
        prior: &Prior,
    ) -> Result<Claimed, JobError> {
        let layout = self.layout;
        let running = layout.running_prompt(&prompt);
        let id = JobId::generate();
        let claimed = match fsio::rename_noreplace(path, &running) {
            Ok(Renamed::Done) => self.create_job(&running, &prompt, &id, prior),
            Ok(Renamed::SourceGone) => return Ok(Claimed::Lost),
            Ok(Renamed::TargetExists) => return Ok(Claimed::Busy(prompt)),
            // The rename may have happened and only its fsync failed.
            Err(e) if running.exists() && !path.exists() => Err(e.into()),
            Err(e) => return Err(e.into()),
        };
        claimed.map_err(|e| {
            // Undo the claim: the prompt waits in the inbox for the next try
            // instead of being stranded as `.running.md` without a record.
            let _ = std::fs::remove_dir_all(layout.run_dir(&id));
            match fsio::rename_noreplace(&running, path) {
                Ok(Renamed::Done) => e,
                Ok(other) => undo_failed(e, &running, &format!("{other:?}")),
                Err(undo) => undo_failed(e, &running, &undo.to_string()),
            }
        })
    }

    /// Steps 2–5 of the claim, for a prompt already renamed to `running`.
    fn create_job(
        &mut self,
        running: &Path,
        prompt: &PromptName,
        id: &JobId,
        prior: &Prior,
    ) -> Result<Claimed, JobError> {
        let content = match read_prompt(running, self.config.max_prompt_bytes) {
            Ok(bytes) => Ok(bytes),
            Err(Refusal::Input(reason)) => Err(reason),
            Err(Refusal::Io(e)) => return Err(e.into()),
        };
        fsio::create_dir_new(&self.layout.run_dir(id))?;
        let inbox_rel = self.layout.relative(running).to_string_lossy().into_owned();
        let mut rec = JobRecord::new_queued(id.clone(), prompt, inbox_rel, self.host);
        rec.profile = Some(self.config.default_profile().name.clone());
        if let Some((previous, attempt)) = &prior.requeued_by {
            rec.retry_of = Some(previous.clone());
            rec.attempt = attempt + 1;
        }
        let mut events = EventLog::open(&self.layout.events(id), self.config.events);
        let bytes = match content {
            Ok(bytes) => bytes,
            Err(reason) => {
                let path = rec.inbox_path.clone();
                return self.reject(rec, events, path, reason);
            }
        };
        fsio::create_new_synced(&self.layout.prompt_copy(id), &bytes)?;
        rec.prompt_sha256 = Some(hex(&Sha256::digest(&bytes)));
        rec.save(self.layout)?;
        let fields = json!({"path": rec.inbox_path, "bytes": bytes.len(), "prompt_sha256": rec.prompt_sha256, "attempt": rec.attempt});
        events.append("claimed", fields);
        events.append("queued", json!({}));
        Ok(Claimed::Queued(rec))
    }

    /// A `*.prompt.md` whose name cannot be used in a path: the claim moves
    /// it straight to `archive/rejected/unnamed.<job_id>.md`.
    fn claim_invalid_name(
        &mut self,
        path: &Path,
        display: String,
        reason: String,
    ) -> Result<Claimed, JobError> {
        let id = JobId::generate();
        let archive = self
            .layout
            .archived_prompt(JobState::Rejected, &unnamed(), &id);
        if let Some(dir) = archive.parent() {
            fsio::create_dirs(dir)?;
        }
        match fsio::rename_noreplace(path, &archive)? {
            Renamed::Done => {}
            Renamed::SourceGone | Renamed::TargetExists => return Ok(Claimed::Lost),
        }
        fsio::create_dir_new(&self.layout.run_dir(&id))?;
        let archive_rel = self
            .layout
            .relative(&archive)
            .to_string_lossy()
            .into_owned();
        // The file's own name is unusable as a key: the record says
        // "unnamed" and its reason quotes the original.
        let rec = JobRecord::new_queued(id, &unnamed(), archive_rel, self.host);
        let events = EventLog::open(&self.layout.events(&rec.job_id), self.config.events);
        let reason = format!(
            "inbox file {display:?} has an invalid name: {reason}; rename it to a plain name and drop it again"
        );
        self.reject(rec, events, Some(format!("inbox/{display}")), reason)
    }

    /// End a just-claimed job `rejected`, its file moved to the archive.
    fn reject(
        &mut self,
        mut rec: JobRecord,
        mut events: EventLog,
        claimed_from: Option<String>,
        reason: String,
    ) -> Result<Claimed, JobError> {
        events.append("claimed", json!({"path": claimed_from}));
        let mut finisher = Finisher {
            layout: self.layout,
            config: self.config,
            ledger: self.ledger.as_deref_mut(),
        };
        finisher.finish(
            &mut rec,
            &mut events,
            Ending::new(JobState::Rejected, Some(reason)),
        )?;
        Ok(Claimed::Rejected(rec))
    }
}

fn undo_failed(e: JobError, running: &Path, why: &str) -> JobError {
    tracing::error!(path = %running.display(), "claim failed and could not be undone ({why}); the prompt stays claimed until the next start reconciles it");
    e
}

/// The key of a prompt whose own name is unusable.
fn unnamed() -> PromptName {
    PromptName {
        project: String::new(),
        name: "unnamed".into(),
    }
}

/// Why a claimed prompt's bytes could not be had.
enum Refusal {
    /// The input itself is unacceptable: the job is `rejected`.
    Input(String),
    /// The environment failed (permissions, I/O): the claim is undone and
    /// retried later; the prompt is not the culprit.
    Io(IoError),
}

/// The prompt's bytes, or why not.
fn read_prompt(path: &Path, max: u64) -> Result<Vec<u8>, Refusal> {
    let meta =
        fs::symlink_metadata(path).map_err(|e| Refusal::Io(IoError::new("inspecting", path, e)))?;
    if meta.file_type().is_symlink() {
        return Err(Refusal::Input("the prompt is a symlink; symlinks in the inbox are never followed, drop the file itself".into()));
    }
    if !meta.is_file() {
        return Err(Refusal::Input("the prompt is not a regular file".into()));
    }
    if meta.len() > max {
        return Err(Refusal::Input(too_large(meta.len(), max)));
    }
    let (bytes, over) = fsio::read_capped_nofollow(path, max).map_err(Refusal::Io)?;
    if over {
        return Err(Refusal::Input(too_large(max.saturating_add(1), max)));
    }
    if std::str::from_utf8(&bytes).is_err() {
        return Err(Refusal::Input("the prompt is not valid UTF-8 text".into()));
    }
    Ok(bytes)
}

fn too_large(len: u64, max: u64) -> String {
    format!(
        "the prompt is {len} bytes, over max_prompt_bytes ({}); shorten it or raise max_prompt_bytes",
        crate::config::format_size(max)
    )
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
