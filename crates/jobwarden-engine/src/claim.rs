//! The claim: turning an inbox file into a job, exactly once.
//!
//! Order of writes (each step recoverable if the process dies after it):
//! 1. Rename `<name>.prompt.md` → `<name>.running.md` in place, never
//!    replacing a file. This is the claim: one claimer wins; a lost race
//!    (source gone) or a busy name (same prompt's job still holds it) is an
//!    ordinary outcome. A crash after it leaves a `.running.md` without a
//!    record, which startup reconciliation finds.
//! 2. Put the job in the job index (`queued`), then create
//!    `runs/<job_id>/`: every run folder of a job that has not ended has
//!    an index row, which is how a starting daemon finds it.
//! 3. `prompt.md`: a hard link to the claimed file (a copy of its bytes
//!    where no link can be made).
//! 4. Only for a prompt with front matter: its body, the bytes after the
//!    block, to `body.md`. This is what the command receives.
//! 5. The `claimed` event, then the `queued` journal line with the record,
//!    and `job.json` in state `queued`: from here the job exists.
//!
//! None of these is fsynced here: the daemon's group commit syncs the
//! inbox and `runs/` folders once for a whole burst of claims, before any
//! of their monitors starts, and each job's monitor makes its journal and
//! run folder durable before anything of the job runs. A crash before
//! that leaves a `.running.md` whose job never ran: put back in the inbox
//! at the next start. Claimed again, a prompt that names its own id (front
//! matter `job_id`) finds that folder: a folder holding only what steps
//! 2–4 write (and no journal line) is recognised as such a leftover and
//! replaced, so the id is not mistaken for a duplicate.
//!
//! `jobwarden abort` cancels a prompt still in the inbox with the same
//! claim ([`Claimer::claim_to_cancel`]): its step 1 renames the prompt into
//! `archive/cancelled/` instead, and the job's ABORT marker is written
//! before step 5, so that from the rename on the prompt never runs, even
//! if the canceller dies half-way.
//!
//! The job's id is the prompt's front-matter `job_id` (attempt N > 1 of it:
//! `<job_id>-r<N>`), else a new UUIDv7.
//!
//! Input that cannot run (symlink, not a regular file, too large, not
//! UTF-8, invalid front matter, a job id already in use, a name that is not
//! a safe path component) is claimed the same way and then ends `rejected`
//! with its reason, under a generated id, its file moved to
//! `archive/rejected/`: nothing is followed, nothing is lost.

use jobwarden_sys::clock::Timestamp;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::failure::JobError;
use crate::terminal::{Ending, Finisher};
use jobwarden_ledger::Ledger;
use jobwarden_model::config::Config;
use jobwarden_model::config::Selection;
use jobwarden_model::events::{EventLog, Op};
use jobwarden_model::front_matter::{self, FrontMatter};
use jobwarden_model::job::hex;
use jobwarden_model::job::{Durable, JobId, JobRecord, JobState, Overrides};
use jobwarden_model::layout::{InboxEntry, Layout, PromptName};
use jobwarden_sys::error::IoError;
use jobwarden_sys::fsio::{self, Renamed};

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
    /// The job's view, `job.json`, is owed by whoever starts it: a claim
    /// whose job starts at once leaves it to its monitor (which writes it
    /// once the command has run a moment, or at the end), so that a short
    /// job's view is written once. Its journal line is the record.
    pub view_owed: bool,
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
        let running = self.layout.running_prompt(&prompt);
        self.claim_to(path, prompt, prior, &running, None)
    }

    /// Claim the prompt at `path` in order to cancel it (`jobwarden abort`
    /// on a prompt still in the inbox). The same claim, with two changes
    /// that make the cancel hold whatever stops this process half-way:
    /// the prompt is renamed straight to a new name in `archive/cancelled/`
    /// (which no scan claims from and no recovery puts back, and which no
    /// earlier job of the prompt can hold), and the job's ABORT marker,
    /// with `reason` and `by` (who asked; the CLI's operator when `None`),
    /// is written before its record. A `queued` job
    /// returned is for the caller to end at once; found by a starting
    /// daemon first, it ends `cancelled` without running.
    pub fn claim_to_cancel(
        &mut self,
        path: &Path,
        prompt: PromptName,
        prior: &Prior,
        reason: Option<&str>,
        by: Option<&str>,
    ) -> Result<Claimed, JobError> {
        let place = self
            .layout
            .archived_prompt(JobState::Cancelled, &prompt, &JobId::generate());
        if let Some(dir) = place.parent() {
            fsio::create_dirs(self.layout.root(), dir)?;
        }
        self.claim_to(path, prompt, prior, &place, Some(Cancel { reason, by }))
    }

    /// Rename `path` to `claimed` (the claim), then make its job; with
    /// `stop`, the job's ABORT marker is written before its record.
    fn claim_to(
        &mut self,
        path: &Path,
        prompt: PromptName,
        prior: &Prior,
        claimed: &Path,
        stop: Option<Cancel<'_>>,
    ) -> Result<Claimed, JobError> {
        let layout = self.layout;
        let running = claimed.to_path_buf();
        let renamed = match fsio::rename_noreplace(layout.root(), path, &running) {
            Ok(Renamed::Done) => Ok(()),
            Ok(Renamed::SourceGone) => return Ok(Claimed::Lost),
            Ok(Renamed::TargetExists) => return Ok(Claimed::Busy(prompt)),
            // The rename may have happened and only its fsync failed.
            Err(e) if running.exists() && !path.exists() => Err(e.into()),
            Err(e) => return Err(e.into()),
        };
        let mut made = Made::default();
        let claimed =
            renamed.and_then(|()| self.create_job(&running, &prompt, prior, stop, &mut made));
        claimed.map_err(|e| {
            // Undo the claim: the prompt waits in the inbox for the next try
            // instead of being stranded as `.running.md` without a record.
            if let Some(id) = made.id {
                let dir = layout.run_dir(&id);
                if made.folder {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                // The row goes with its folder; a folder that is not this
                // claim's keeps its row.
                if let (Some(ledger), Err(_)) =
                    (self.ledger.as_deref_mut(), std::fs::symlink_metadata(&dir))
                {
                    let _ = ledger.unindex_jobs(&[id.to_string()]);
                }
            }
            if let Some(prompt) = made.held {
                let _ = fsio::remove_file(layout.root(), &layout.claim_record(&prompt));
            }
            match fsio::rename_noreplace(layout.root(), &running, path) {
                Ok(Renamed::Done) => e,
                Ok(other) => undo_failed(e, &running, &format!("{other:?}")),
                Err(undo) => undo_failed(e, &running, &undo.to_string()),
            }
        })
    }

    /// Steps 2–6 of the claim, for a prompt already renamed to `running`.
    /// `made` says what the undo must remove (the index row, the run
    /// folder). With
    /// `stop`, the ABORT marker (with that reason) precedes `job.json`.
    fn create_job(
        &mut self,
        running: &Path,
        prompt: &PromptName,
        prior: &Prior,
        stop: Option<Cancel<'_>>,
        made: &mut Made,
    ) -> Result<Claimed, JobError> {
        let attempt = prior.requeued_by.as_ref().map_or(1, |(_, n)| n + 1);
        let (verdict, read) = self.examine(running, prompt, attempt)?;
        let id = match &verdict {
            Verdict::Run { id, .. } => id.clone(),
            Verdict::Reject { .. } => JobId::generate(),
        };
        let inbox_rel = self.layout.relative(running).to_string_lossy().into_owned();
        let mut rec = JobRecord::new_queued(id.clone(), prompt, inbox_rel, self.host);
        rec.dropped_at = read.and_then(|r| r.dropped_at);
        if let Some((previous, n)) = &prior.requeued_by {
            rec.retry_of = Some(previous.clone());
            rec.attempt = n + 1;
        }
        if let Verdict::Run { settings, .. } = &verdict {
            settings.apply(&mut rec);
        } else {
            rec.profile = Some(self.config.default_profile().name.clone());
        }
        made.id = Some(id.clone());
        if self.config.shared_inbox.is_some() && running == self.layout.running_prompt(prompt) {
            made.held = Some(prompt.clone());
            crate::shared_inbox::hold(self.layout, self.config, &mut rec, prompt)?;
        }
        self.index_before_folder(&rec)?;
        fsio::create_dir_new(self.layout.root(), &self.layout.run_dir(&id))?;
        made.folder = true;
        let mut events = EventLog::open(
            self.layout.root(),
            &self.layout.events(&id),
            self.config.events_for(&rec),
        );
        let (text, body_start) = match verdict {
            Verdict::Run {
                text, body_start, ..
            } => (text, body_start),
            Verdict::Reject { reason, sha256 } => {
                rec.prompt_sha256 = sha256;
                let path = rec.inbox_path.clone();
                return self.reject(rec, events, path, reason);
            }
        };
        let bytes = text.as_bytes();
        let identity = read.map_or((0, 0), |r| r.identity);
        let copy = self.layout.prompt_copy(&id);
        fsio::link_or_copy(self.layout.root(), running, &copy, identity, bytes)?;
        if let Some(start) = body_start {
            let body = self.layout.prompt_body(&id);
            fsio::create_new_unsynced(self.layout.root(), &body, &bytes[start..])?;
        }
        rec.prompt_sha256 = Some(hex(&Sha256::digest(bytes)));
        if let Some(cancel) = stop {
            match cancel.by {
                Some(by) => {
                    jobwarden_model::abort::write_marker_by(self.layout, &id, cancel.reason, by)?
                }
                None => jobwarden_model::abort::write_marker(self.layout, &id, cancel.reason)?,
            };
        }
        let fields = json!({"path": rec.inbox_path, "bytes": bytes.len(), "prompt_sha256": rec.prompt_sha256, "attempt": rec.attempt});
        // `claimed` and the `queued` journal line are one append.
        events.hold();
        events.append(Op::Claimed, fields);
        if self.view_owed {
            rec.journal_written_view_owed(self.layout, &mut events, Op::Queued, json!({}))?;
        } else {
            rec.journal(
                self.layout,
                &mut events,
                Op::Queued,
                json!({}),
                Durable(false),
            )?;
        }
        Ok(Claimed::Queued(rec))
    }

    /// Put the new job `rec` in the job index before its run folder is
    /// made, so that every run folder of a job that has not ended has a
    /// row: a starting daemon finds the jobs that may be live through the
    /// index, without listing `runs/` (see `recover.rs`); a row whose
    /// folder never appeared is dropped there. Fail-soft but for a damaged
    /// ledger (the claim is then made again without it): a job the index
    /// misses is found by the start-up check.
    fn index_before_folder(&mut self, rec: &JobRecord) -> Result<(), JobError> {
        let Some(ledger) = self.ledger.as_deref_mut() else {
            return Ok(());
        };
        match ledger.index_job(rec) {
            Err(e) if e.is_damaged() => Err(e.into()),
            Err(e) => {
                tracing::warn!(job = %rec.job_id, "{e}; the start-up check of the next start indexes the job");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// Read the claimed prompt and decide: run it (under which id), or
    /// reject it (why); and what the read saw of its file. Only the
    /// environment failing is an error.
    fn examine(
        &mut self,
        running: &Path,
        prompt: &PromptName,
        attempt: u32,
    ) -> Result<(Verdict, Option<ReadFile>), JobError> {
        let (text, read) =
            match read_prompt(self.layout.root(), running, self.config.max_prompt_bytes) {
                Ok(read) => read,
                Err(Refusal::Input(reason)) => return Ok((Verdict::reject(reason, None), None)),
                Err(Refusal::Io(e)) => return Err(e.into()),
            };
        self.judge(text, prompt, attempt).map(|v| (v, Some(read)))
    }

    /// [`Claimer::examine`]'s verdict on the prompt's `text`.
    fn judge(
        &mut self,
        text: String,
        prompt: &PromptName,
        attempt: u32,
    ) -> Result<Verdict, JobError> {
        let sha256 = || Some(hex(&Sha256::digest(text.as_bytes())));
        let (parsed, mut settings) = match vet(self.config, &prompt.project, &text) {
            Ok(vetted) => vetted,
            Err(reason) => return Ok(Verdict::reject(reason, sha256())),
        };
        settings.after = match self.resolve_after(&parsed.front.after) {
            Ok(ids) => ids,
            Err(reason) => return Ok(Verdict::reject(reason, sha256())),
        };
        let id = match &parsed.front.job_id {
            None => JobId::generate(),
            Some(own) if attempt <= 1 => {
                if self.id_in_use(own)? {
                    let reason = format!(
                        "duplicate job id {:?}: a job with this id already exists; give the prompt another job_id (or none) and drop it again",
                        own.as_str()
                    );
                    return Ok(Verdict::reject(reason, sha256()));
                }
                own.clone()
            }
            Some(own) => self.retry_id(own, attempt)?,
        };
        let body_start = parsed.has_block().then_some(parsed.body_start);
        Ok(Verdict::Run {
            id,
            text,
            body_start,
            settings,
        })
    }

    /// The jobs a prompt's `after` names, each as `jobwarden show` would
    /// take it (`project/name`: that prompt's newest job, the last attempt
    /// of its retries; an id or a unique prefix of one). `Err`, the
    /// rejection's reason, for an entry that names no job or several. A
    /// job can only wait for jobs that exist before it: no cycle can form.
    fn resolve_after(&self, refs: &[String]) -> Result<Vec<JobId>, String> {
        let mut ids: Vec<JobId> = Vec::new();
        for r in refs {
            let id = match self.ledger.as_deref() {
                Some(ledger) => crate::lookup::resolve(self.layout, ledger, r).map_err(|e| {
                    format!("after {r:?}: {e}; name a job that exists (its id, or project/name), and drop the prompt again")
                })?,
                // Without the job index only a whole id can be checked.
                None => JobId::parse(r)
                    .ok()
                    .filter(|id| self.layout.run_dir(id).is_dir())
                    .ok_or_else(|| {
                        format!("after {r:?}: the ledger cannot be read now, so only a whole job id can be found; give one, or drop the prompt again once `jobwarden status` says the ledger is ok")
                    })?,
            };
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    /// The id of attempt `attempt` (> 1) of the prompt whose own id is
    /// `own`: `<own>-r<attempt>`, or a new UUIDv7 when that is too long or
    /// already taken (the id is ours to choose, so a clash rejects nothing).
    fn retry_id(&mut self, own: &JobId, attempt: u32) -> Result<JobId, JobError> {
        if let Some(id) = own.for_attempt(attempt) {
            if !self.id_in_use(&id)? {
                return Ok(id);
            }
            tracing::warn!(job = %id, "retry id already in use; the attempt gets a generated id");
        }
        Ok(JobId::generate())
    }

    /// Is `id` taken: by a row in the ledger, or by a run folder? A folder
    /// left by a claim cut short (see the module doc) is no job's: it is
    /// removed and the id is free.
    fn id_in_use(&mut self, id: &JobId) -> Result<bool, JobError> {
        if let Some(ledger) = self.ledger.as_deref() {
            if ledger.has_execution(id.as_str())? {
                return Ok(true);
            }
        }
        let dir = self.layout.run_dir(id);
        match self.layout.is_claim_leftover(id) {
            Ok(true) => {
                tracing::info!(job = %id, "removing the run folder of a claim cut short, to claim its id again");
                std::fs::remove_dir_all(&dir)
                    .map_err(|e| IoError::new("removing leftover run folder", &dir, e))?;
                Ok(false)
            }
            Ok(false) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(IoError::new("inspecting", &dir, e).into()),
        }
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
            fsio::create_dirs(self.layout.root(), dir)?;
        }
        match fsio::rename_noreplace(self.layout.root(), path, &archive)? {
            Renamed::Done => {}
            Renamed::SourceGone | Renamed::TargetExists => return Ok(Claimed::Lost),
        }
        let archive_rel = self
            .layout
            .relative(&archive)
            .to_string_lossy()
            .into_owned();
        // The file's own name is unusable as a key: the record says
        // "unnamed" and its reason quotes the original.
        let rec = JobRecord::new_queued(id, &unnamed(), archive_rel, self.host);
        self.index_before_folder(&rec)?;
        fsio::create_dir_new(self.layout.root(), &self.layout.run_dir(&rec.job_id))?;
        let events = EventLog::open(
            self.layout.root(),
            &self.layout.events(&rec.job_id),
            self.config.events_for(&rec),
        );
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
        events.append(Op::Claimed, json!({"path": claimed_from}));
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

/// What the claim checks of a prompt's text before anything runs, beyond
/// its bytes (size, UTF-8) and its name: its front matter parses, and its
/// folder and profile resolve (the route its folder matches, the profile
/// its front matter or route names, the captures that profile uses).
/// `Err` is the reason the claim rejects it with. `submit` calls this too,
/// so that it refuses what the daemon would reject.
pub fn vet(
    config: &Config,
    project: &str,
    text: &str,
) -> Result<(front_matter::Parsed, Settings), String> {
    let parsed = front_matter::parse(text)
        .map_err(|e| format!("invalid {e}; fix the front matter and drop the prompt again"))?;
    // The route its folder matches and the profile (the front matter's,
    // else the route's): a prompt that cannot run there is rejected now,
    // not failed later.
    let settings = config
        .select(project, parsed.front.profile.as_deref())
        .map(|sel| Settings::new(&sel, &parsed.front))
        .map_err(|reason| format!("cannot be routed: {reason}"))?;
    Ok((parsed, settings))
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

/// What a claim under way has made, for its undo: the job's id once its
/// index row may exist, and whether its run folder was created.
#[derive(Default)]
struct Made {
    id: Option<JobId>,
    folder: bool,
    /// A claim record was written in the shared inbox.
    held: Option<PromptName>,
}

/// A claim made only to cancel the prompt: the reason its ABORT marker
/// gives, and who asked.
#[derive(Clone, Copy)]
struct Cancel<'r> {
    reason: Option<&'r str>,
    by: Option<&'r str>,
}

/// What a claimed prompt's content decides.
enum Verdict {
    /// Run it as job `id`; the body starts at `body_start` when the prompt
    /// has front matter.
    Run {
        id: JobId,
        text: String,
        body_start: Option<usize>,
        settings: Settings,
    },
    /// Refuse it; the digest of its bytes when they could be read.
    Reject {
        reason: String,
        sha256: Option<String>,
    },
}

impl Verdict {
    fn reject(reason: String, sha256: Option<String>) -> Self {
        Verdict::Reject { reason, sha256 }
    }
}

/// What the route and the front matter decide for a job, written into its
/// record: the monitor runs it as the record says.
pub struct Settings {
    profile: String,
    route: Option<String>,
    captures: BTreeMap<String, String>,
    priority: i32,
    overrides: Overrides,
    /// The jobs it waits for, resolved by the claim.
    after: Vec<JobId>,
    /// Not to start before this.
    not_before: Option<Timestamp>,
}

impl Settings {
    fn new(sel: &Selection<'_>, front: &FrontMatter) -> Self {
        Settings {
            profile: sel.profile.name.clone(),
            route: sel.route.map(|(_, r)| r.pattern.source().to_owned()),
            captures: sel.captures.clone(),
            priority: front.priority.unwrap_or(0),
            overrides: Overrides {
                timeout_ms: front
                    .timeout
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                max_attempts: front.max_attempts,
                events: front.events,
            },
            after: Vec::new(),
            not_before: front.not_before.as_deref().and_then(|v| {
                let now = Timestamp::now().epoch_ms();
                jobwarden_sys::clock::parse_start(v, now)
                    .ok()
                    .map(Timestamp::from_epoch_ms)
            }),
        }
    }

    fn apply(&self, rec: &mut JobRecord) {
        rec.profile = Some(self.profile.clone());
        rec.route = self.route.clone();
        rec.captures = self.captures.clone();
        rec.priority = self.priority;
        rec.overrides = self.overrides.clone();
        rec.after = self.after.clone();
        rec.not_before = self.not_before;
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

/// What the claim's read saw of the prompt's file.
#[derive(Debug, Clone, Copy)]
struct ReadFile {
    /// When it was dropped: its mtime, when that could be read.
    dropped_at: Option<Timestamp>,
    /// Its device and inode: what `prompt.md` links to.
    identity: (u64, u64),
}

/// The prompt's text and what the read saw of its file, or why not.
fn read_prompt(root: &Path, path: &Path, max: u64) -> Result<(String, ReadFile), Refusal> {
    let (file, st) = match fsio::open_file_stat(root, path) {
        Ok(opened) => opened,
        Err(e) if fsio::is_refusal(&e) => return Err(Refusal::Input(not_a_prompt(path))),
        Err(e) => return Err(Refusal::Io(e)),
    };
    let len = u64::try_from(st.st_size).unwrap_or(0);
    if len > max {
        return Err(Refusal::Input(too_large(len, max)));
    }
    let (bytes, over) = fsio::read_capped_at(&file, path, len, max).map_err(Refusal::Io)?;
    if over {
        return Err(Refusal::Input(too_large(max.saturating_add(1), max)));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Refusal::Input("the prompt is not valid UTF-8 text".into()))?;
    let modified = u64::try_from(st.st_mtime).ok().and_then(|secs| {
        let nanos = u32::try_from(st.st_mtime_nsec).unwrap_or(0);
        std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(secs, nanos))
    });
    let read = ReadFile {
        dropped_at: modified.map(Timestamp::from),
        identity: (st.st_dev, st.st_ino),
    };
    Ok((text, read))
}

/// Why the claimed file at `path`, which the open refused, is no prompt.
fn not_a_prompt(path: &Path) -> String {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            "the prompt is a symlink; symlinks in the inbox are never followed, drop the file itself".into()
        }
        _ => "the prompt is not a regular file".into(),
    }
}

fn too_large(len: u64, max: u64) -> String {
    format!(
        "the prompt is {len} bytes, over max_prompt_bytes ({}); shorten it or raise max_prompt_bytes",
        jobwarden_model::config::format_size(max)
    )
}
