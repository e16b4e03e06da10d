//! `job.json` (schema_version 1, DESIGN §5): the job record, its atomic
//! persistence and the one function that changes its state.
//!
//! The record's durable copy is its journal (`events.jsonl`, see
//! `events.rs`): a change that must survive a power cut is a journal line
//! carrying the whole record, made durable with one `fdatasync`; `job.json`
//! is then replaced atomically (never torn) without an fsync of its own.
//! [`JobRecord::load_job`] prefers the journal's copy when `job.json` is
//! behind it (its `journal_seq` is older), missing or unreadable.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{JobId, JobState};
use crate::events::{EventLog, Op};
use crate::layout::{self, Layout, PromptName};
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::error::IoError;
use jobwarden_sys::fsio;

/// What reading or writing a job's record can fail with: the file's I/O,
/// a transition the state table refuses, or a record that does not read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    Transition(#[from] super::InvalidTransition),
    #[error("job record {}: {reason}", .path.display())]
    BadRecord {
        path: std::path::PathBuf,
        reason: String,
    },
}

pub const SCHEMA_VERSION: u32 = 1;

/// The largest `job.json` a reader accepts; a larger one is a bad record.
pub const MAX_RECORD_BYTES: u64 = 4 * 1024 * 1024;

/// The `disposition` of a job whose prompt was missing when it ended
/// (removed or moved away while it ran): nothing was archived.
pub const DISPOSITION_MISSING: &str = "missing";

/// The job record. Fields are `null` until known. Unknown fields written by
/// a newer version are kept and written back untouched.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub schema_version: u32,
    pub job_id: JobId,
    pub attempt: u32,
    pub retry_of: Option<JobId>,
    pub project: String,
    pub name: String,
    /// Current place of the prompt file, relative to the root.
    pub inbox_path: Option<String>,
    pub prompt_sha256: Option<String>,
    pub profile: Option<String>,
    pub state: JobState,
    pub state_reason: Option<String>,
    /// `prepare`, `run` or `publish`: the phase a failure happened in.
    pub failure_stage: Option<String>,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub updated_at: Timestamp,
    pub heartbeat_at: Option<Timestamp>,
    pub timeout_at: Option<Timestamp>,
    pub command: Option<Vec<String>>,
    pub workdir: Option<String>,
    pub monitor_pid: Option<i32>,
    /// The monitor's start time in clock ticks since boot (`/proc/<pid>/stat`
    /// field 22): with the pid, it tells a live monitor from a recycled pid.
    pub monitor_start_time: Option<u64>,
    /// The executable the monitor runs (device and inode of its file), so
    /// that a monitor of a binary since upgraded is still recognised.
    #[serde(default)]
    pub monitor_exe: Option<jobwarden_sys::procfs::ExeId>,
    pub pid: Option<i32>,
    pub pgid: Option<i32>,
    pub exit_code: Option<i32>,
    /// Name of the signal that ended the job's process (`SIGKILL`), if any.
    pub signal: Option<String>,
    pub abort_requested_at: Option<Timestamp>,
    pub log_path: Option<String>,
    pub log_bytes: u64,
    pub log_truncated: bool,
    pub last_output_at: Option<Timestamp>,
    pub result_ref: Option<String>,
    pub archive_path: Option<String>,
    /// The ledger outcome (`failure` may be refined to `rate_limited`).
    pub outcome: Option<String>,
    /// `archived` or `requeued`: where the prompt went when the job ended;
    /// [`DISPOSITION_MISSING`] when it was gone by then.
    pub disposition: Option<String>,
    pub host: String,
    pub version: String,
    /// The `[[route]]` that matched (its `match` pattern); null when none
    /// did and the prompt runs on `default` (or its front matter's profile).
    #[serde(default)]
    pub route: Option<String>,
    /// What the route captured (`{"repo": "api", "branch": "main"}`).
    #[serde(default)]
    pub captures: std::collections::BTreeMap<String, String>,
    /// Queue order among queued jobs: higher first (front matter `priority`).
    #[serde(default)]
    pub priority: i32,
    /// Settings the prompt's front matter overrode for this job.
    #[serde(default)]
    pub overrides: Overrides,
    /// The jobs it waits for (front matter `after`, resolved at the claim):
    /// it starts once each ended `succeeded` or `merged` (a failed one's
    /// retries followed to the last), and ends `cancelled` when one ended
    /// any other way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<JobId>,
    /// Not to start before this (front matter `not_before`, made an instant
    /// at the claim); absent when it may start at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
    /// What holds the job's processes: `cgroup` (its own cgroup v2, killed
    /// as one) or `process-tree` (the monitor's descendants); null until
    /// the monitor starts it.
    #[serde(default)]
    pub containment: Option<String>,
    /// Where the job's published work lives in git (its profile's `git`,
    /// resolved when it started); null when its profile has none.
    #[serde(default)]
    pub git: Option<jobwarden_sys::git::GitWork>,
    /// When its prompt was dropped (the file's mtime when it was claimed):
    /// with `created_at`, how long the claim took.
    #[serde(default)]
    pub dropped_at: Option<Timestamp>,
    /// When its work was merged into its target (state `merged`).
    #[serde(default)]
    pub merged_at: Option<Timestamp>,
    /// The commit that merged it: the merge commit, or the branch's tip
    /// when the target was fast-forwarded.
    #[serde(default)]
    pub merge_commit: Option<String>,
    /// What the reconcile found about its published work after it ended
    /// (`branch_merged`, `branch_deleted`), and when.
    #[serde(default)]
    pub reconciled: Option<Reconciled>,
    /// Its main command as a Slurm batch job (profile `executor =
    /// "slurm"`), once submitted.
    #[serde(default)]
    pub slurm: Option<super::SlurmRecord>,
    /// The `seq` of the journal line (in `events.jsonl`) this record
    /// carries on from; null when no journal line holds it.
    #[serde(default)]
    pub journal_seq: Option<u64>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// What the reconcile found about a job's published work after it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciled {
    /// `branch_merged` or `branch_deleted`.
    pub reason: String,
    pub at: Timestamp,
}

/// Per-job settings from the prompt's front matter; null where the
/// profile's (or the global) value applies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overrides {
    /// The main command's timeout, in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub max_attempts: Option<u32>,
    #[serde(default)]
    pub events: Option<bool>,
}

impl JobRecord {
    /// Did a monitor take this job? Its first record line (`monitor_started`,
    /// durable before anything of the job runs) names it; a monitor that
    /// died before writing it ran nothing, so the job may be queued again.
    pub fn monitor_took(&self) -> bool {
        self.monitor_pid.is_some()
    }

    /// A freshly claimed job, in state `queued`.
    pub fn new_queued(id: JobId, prompt: &PromptName, inbox_path: String, host: &str) -> Self {
        let now = Timestamp::now();
        JobRecord {
            schema_version: SCHEMA_VERSION,
            job_id: id,
            attempt: 1,
            retry_of: None,
            project: prompt.project.clone(),
            name: prompt.name.clone(),
            inbox_path: Some(inbox_path),
            prompt_sha256: None,
            profile: None,
            state: JobState::Queued,
            state_reason: None,
            failure_stage: None,
            created_at: now,
            started_at: None,
            finished_at: None,
            updated_at: now,
            heartbeat_at: None,
            timeout_at: None,
            command: None,
            workdir: None,
            monitor_pid: None,
            monitor_start_time: None,
            monitor_exe: None,
            pid: None,
            pgid: None,
            exit_code: None,
            signal: None,
            abort_requested_at: None,
            log_path: None,
            log_bytes: 0,
            log_truncated: false,
            last_output_at: None,
            result_ref: None,
            archive_path: None,
            outcome: None,
            disposition: None,
            host: host.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            route: None,
            captures: Default::default(),
            priority: 0,
            overrides: Overrides::default(),
            after: Vec::new(),
            not_before: None,
            containment: None,
            git: None,
            dropped_at: None,
            merged_at: None,
            merge_commit: None,
            reconciled: None,
            slurm: None,
            journal_seq: None,
            extra: serde_json::Map::new(),
        }
    }

    /// Read a record under `root` (opened safely, capped at
    /// [`MAX_RECORD_BYTES`]). A file that does not parse, is too large, or
    /// is not a regular file (a FIFO, a symlink) is `BadRecord` naming it;
    /// a missing or unreadable one is an I/O error.
    fn load(root: &Path, path: &Path) -> Result<Self, RecordError> {
        let bad = |reason: String| RecordError::BadRecord {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = match fsio::read_capped(root, path, MAX_RECORD_BYTES) {
            Ok((_, true)) => return Err(bad(format!("larger than {MAX_RECORD_BYTES} bytes"))),
            Ok((bytes, false)) => bytes,
            Err(e) if fsio::is_refusal(&e) => return Err(bad(e.source.to_string())),
            Err(e) => return Err(e.into()),
        };
        serde_json::from_slice(&bytes).map_err(|e| RecordError::BadRecord {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }

    /// Load the record of `id` from its run directory, distrusting it: the
    /// id must match the folder, the names must be valid path components and
    /// the paths must stay under the root's inbox or archive. A record that
    /// fails is `BadRecord`, never used to build a path.
    ///
    /// The journal wins where the two disagree: when `job.json` is behind
    /// the last journal line (a power cut took its unsynced rewrite), is
    /// missing or does not read, that line's record is returned, checked
    /// the same way (see [`JobRecord::load_job_view`]).
    pub fn load_job(layout: &Layout, id: &JobId) -> Result<Self, RecordError> {
        Self::load_job_view(layout, id).map(|(rec, _)| rec)
    }

    /// [`JobRecord::load_job`], and whether `job.json` was behind its
    /// journal (the record returned is the journal's): recovery then
    /// writes it again.
    pub fn load_job_view(layout: &Layout, id: &JobId) -> Result<(Self, bool), RecordError> {
        let events = layout.events(id);
        Self::load_job_view_by(layout, id, |seen| {
            crate::events::last_record_after(layout.root(), &events, seen)
        })
    }

    /// [`JobRecord::load_job_view`], the journal read through `log`, the
    /// job's own events handle, which then appends without reading it
    /// again ([`EventLog::last_record_after`]).
    pub fn load_job_logged(
        layout: &Layout,
        id: &JobId,
        log: &mut EventLog,
    ) -> Result<(Self, bool), RecordError> {
        Self::load_job_view_by(layout, id, |seen| log.last_record_after(seen))
    }

    /// The view of `id`, or the journal's last record newer than it
    /// (`journal` reads that: the last line's after a `seq`).
    fn load_job_view_by(
        layout: &Layout,
        id: &JobId,
        journal: impl FnOnce(u64) -> Option<(u64, JobRecord)>,
    ) -> Result<(Self, bool), RecordError> {
        let path = layout.job_json(id);
        let view = Self::load(layout.root(), &path).and_then(|rec| {
            rec.check(id).map_err(|reason| RecordError::BadRecord {
                path: path.clone(),
                reason,
            })?;
            Ok(rec)
        });
        // A record with no way out of its state cannot be behind in it.
        if let Ok(rec) = &view
            && rec.state.valid_targets().is_empty()
        {
            return view.map(|rec| (rec, false));
        }
        // Only a journal line newer than the view is read as a record.
        let seen = view.as_ref().ok().map_or(0, |r| r.journal_seq.unwrap_or(0));
        let journal = journal(seen).and_then(|(seq, mut rec)| {
            rec.journal_seq = Some(seq);
            rec.check(id).ok().map(|()| rec)
        });
        match (view, journal) {
            (_, Some(rec)) => Ok((rec, true)),
            (view, None) => view.map(|rec| (rec, false)),
        }
    }

    fn check(&self, id: &JobId) -> Result<(), String> {
        if self.job_id != *id {
            return Err(format!(
                "job_id {:?} does not match its folder {id:?}",
                self.job_id.as_str()
            ));
        }
        layout::validate_project(&self.project).map_err(|e| format!("project: {e}"))?;
        layout::validate_segment(&self.name).map_err(|e| format!("name {:?} {e}", self.name))?;
        // Captures and the profile name end up in paths and argv.
        for (k, v) in &self.captures {
            layout::validate_segment(v).map_err(|e| format!("capture {k} = {v:?} {e}"))?;
        }
        if let Some(p) = &self.profile {
            layout::validate_segment(p).map_err(|e| format!("profile {p:?} {e}"))?;
        }
        // Its names are given to git.
        if let Some(git) = &self.git {
            git.check()?;
        }
        if let Some(c) = &self.merge_commit
            && !jobwarden_sys::git::is_commit_id(c)
        {
            return Err(format!("merge_commit {c:?} is not a commit id"));
        }
        for (key, value) in [
            ("inbox_path", &self.inbox_path),
            ("archive_path", &self.archive_path),
        ] {
            if let Some(p) = value {
                layout::validate_record_path(p).map_err(|e| format!("{key} {p:?}: {e}"))?;
            }
        }
        Ok(())
    }

    /// The prompt this job is for.
    pub fn prompt_name(&self) -> PromptName {
        PromptName {
            project: self.project.clone(),
            name: self.name.clone(),
        }
    }

    /// Persist `job.json` atomically and durably (fsynced) on its own, with
    /// a fresh `updated_at`: for the rare change that has no journal line.
    pub fn save(&mut self, layout: &Layout) -> Result<(), RecordError> {
        self.write_view(layout, true)
    }

    /// [`JobRecord::save`] without the fsync: the view of a change whose
    /// loss recovery treats as it treats its presence (a heartbeat).
    pub fn save_unsynced(&mut self, layout: &Layout) -> Result<(), RecordError> {
        self.write_view(layout, false)
    }

    fn write_view(&mut self, layout: &Layout, synced: bool) -> Result<(), RecordError> {
        self.updated_at = Timestamp::now();
        let path = layout.job_json(&self.job_id);
        if synced {
            fsio::write_json_atomic(layout.root(), &path, self)?;
        } else {
            fsio::write_json_atomic_unsynced(layout.root(), &path, self)?;
        }
        Ok(())
    }

    /// Record `op` (with `fields`) in the journal with the whole record,
    /// then write `job.json` as its view. With `durable`, the journal line
    /// is made durable before this returns (one `fdatasync`); without, it
    /// is durable with the next durable line. Without a journal to write
    /// (its file refused, a failing disk), `job.json` itself is written,
    /// fsynced when `durable`. Once the line is written the change is made:
    /// a view that cannot be written then is logged, not an error.
    pub fn journal(
        &mut self,
        layout: &Layout,
        events: &mut EventLog,
        op: Op,
        fields: serde_json::Value,
        durable: Durable,
    ) -> Result<(), RecordError> {
        self.journal_then_view(layout, events, (op, fields), durable, true)
            .map(|_| ())
    }

    /// [`JobRecord::journal`] with the view owed: the journal line alone,
    /// which every reader in the project takes over `job.json` (see
    /// [`JobRecord::load_job_view`]). True when the view is owed: the
    /// caller writes it ([`JobRecord::save_unsynced`]) once the job has
    /// stayed in this state a moment, and the next change writes it
    /// anyway; a short job's view is written once, at its end. Without a
    /// journal to write, `job.json` is written now, as by `journal`, and
    /// nothing is owed.
    pub fn journal_view_owed(
        &mut self,
        layout: &Layout,
        events: &mut EventLog,
        op: Op,
        fields: serde_json::Value,
        durable: Durable,
    ) -> Result<bool, RecordError> {
        self.journal_then_view(layout, events, (op, fields), durable, false)
    }

    /// [`JobRecord::journal_view_owed`] whose line, and the lines held
    /// with it, are written now: for a record no later line of the same
    /// writer follows (a claim's). If they cannot be written, `job.json`
    /// is written as the record, and nothing is owed (false).
    pub fn journal_written_view_owed(
        &mut self,
        layout: &Layout,
        events: &mut EventLog,
        op: Op,
        fields: serde_json::Value,
    ) -> Result<bool, RecordError> {
        let before = self.journal_seq;
        let owed = self.journal_view_owed(layout, events, op, fields, Durable(false))?;
        if owed && !events.flush() {
            self.journal_seq = before;
            self.write_view(layout, false)?;
            return Ok(false);
        }
        Ok(owed)
    }

    /// The journal line, then the view when `view`; true when the view is
    /// behind the line (owed, or its write failed).
    fn journal_then_view(
        &mut self,
        layout: &Layout,
        events: &mut EventLog,
        (op, fields): (Op, serde_json::Value),
        durable: Durable,
        view: bool,
    ) -> Result<bool, RecordError> {
        self.updated_at = Timestamp::now();
        let copy = serde_json::value::to_raw_value(&*self).map_err(|e| RecordError::BadRecord {
            path: layout.job_json(&self.job_id),
            reason: e.to_string(),
        })?;
        let Some(seq) = events.journal(op, fields, copy) else {
            return self.write_view(layout, durable.0).map(|()| false);
        };
        let before = self.journal_seq.replace(seq);
        if durable.0
            && let Err(e) = events.sync()
        {
            tracing::warn!(job = %self.job_id, "{e}; job.json is made durable instead");
            self.journal_seq = before;
            return self.write_view(layout, true).map(|()| false);
        }
        if !view {
            return Ok(true);
        }
        // A view never names a line still held: the lines held with this
        // one (a claim's `claimed` and `queued`) are written first, in one
        // append; if they cannot be, the view is the record.
        if !events.flush() {
            self.journal_seq = before;
            return self.write_view(layout, false).map(|()| false);
        }
        // The change is made (readers take the journal's line): a view
        // that cannot be written now is behind (true), and written again
        // later (the next change, the daemon settling the job, start-up).
        if let Err(e) = self.write_view(layout, false) {
            tracing::warn!(job = %self.job_id, "{e}; job.json is behind its journal until written again");
            return Ok(true);
        }
        Ok(false)
    }

    /// Move to `to` if the transition table allows it, stamping the times
    /// the move implies, and persist durably before returning (the `state`
    /// line in the journal, then `job.json`). The only way a record's state
    /// changes.
    ///
    /// The `state` event (`from`, `to`, plus `fields`) is written *before*
    /// the record is: a reader that sees the record in its new state finds
    /// the event already there (docs/on-disk.md, "Order of writes").
    /// True when `job.json` could not be written after the line (it is
    /// behind its journal: see [`JobRecord::load_job_view`]).
    pub fn transition(
        &mut self,
        layout: &Layout,
        events: &mut EventLog,
        to: JobState,
        reason: Option<String>,
        fields: serde_json::Value,
    ) -> Result<bool, RecordError> {
        self.transition_at(layout, events, to, reason, fields, Timestamp::now())
    }

    /// [`JobRecord::transition`], the move's times stamped `at`: an end
    /// written a while after the job ended (its finisher waited for the
    /// ledger) is stamped when it ended, so that its duration is the job's.
    pub fn transition_at(
        &mut self,
        layout: &Layout,
        events: &mut EventLog,
        to: JobState,
        reason: Option<String>,
        fields: serde_json::Value,
        at: Timestamp,
    ) -> Result<bool, RecordError> {
        self.state.check_transition(to)?;
        let event = self.apply(to, reason, fields, at);
        let line = (Op::State, event);
        self.journal_then_view(layout, events, line, Durable(true), true)
    }

    /// [`JobRecord::transition`] to the state of a command its monitor has
    /// just started (`preparing`, `running`, `publishing`), its journal
    /// line not synced: it records what already happened, and if a crash
    /// of the machine loses it, recovery judges the job as it would with
    /// it. The monitor's `monitor_started` line, durable before anything
    /// of the job ran, shows its monitor had the job, and a job whose
    /// monitor is gone is `interrupted` in every state but a `queued` one
    /// that no monitor took. A terminal state is always synced.
    ///
    /// Its view is owed (true returned; see
    /// [`JobRecord::journal_view_owed`]): the monitor writes `job.json`
    /// once the command has run a moment, so that a short job's view is
    /// written once, at its end.
    pub fn transition_on_start(
        &mut self,
        layout: &Layout,
        events: &mut EventLog,
        to: JobState,
    ) -> Result<bool, RecordError> {
        self.state.check_transition(to)?;
        let event = self.apply(to, None, serde_json::json!({}), Timestamp::now());
        if to.is_terminal() {
            return self
                .journal(layout, events, Op::State, event, Durable(true))
                .map(|()| false);
        }
        self.journal_view_owed(layout, events, Op::State, event, Durable(false))
    }

    /// Restore a record that is not terminal to the end `to` that a second
    /// witness (the ledger) holds for its attempt, finished at `finished`:
    /// the record lied (edited, or written back by the job). Checked by
    /// [`JobState::check_restore`]; persisted like a transition, its `state`
    /// event marked `"restored": true`.
    pub fn restore_end(
        &mut self,
        layout: &Layout,
        events: &mut EventLog,
        to: JobState,
        reason: Option<String>,
        finished: Timestamp,
    ) -> Result<(), RecordError> {
        self.state.check_restore(to)?;
        let fields = serde_json::json!({"restored": true});
        let event = self.apply(to, reason, fields, finished);
        self.journal(layout, events, Op::State, event, Durable(true))
    }

    /// Move to `to` (already checked), stamping the times the move implies;
    /// the `state` event's fields, for the caller to journal.
    fn apply(
        &mut self,
        to: JobState,
        reason: Option<String>,
        fields: serde_json::Value,
        now: Timestamp,
    ) -> serde_json::Value {
        let mut event = serde_json::json!({"from": self.state, "to": to});
        if let (Some(obj), serde_json::Value::Object(extra)) = (event.as_object_mut(), fields) {
            obj.extend(extra);
            // The end says why, as `job.json`'s `state_reason` will.
            if to.is_terminal()
                && let Some(why) = reason.as_ref().or(self.state_reason.as_ref())
            {
                obj.entry("reason").or_insert(serde_json::json!(why));
            }
        }
        if matches!(to, JobState::Preparing | JobState::Running) && self.started_at.is_none() {
            self.started_at = Some(now);
        }
        // An ended job keeps its end: `succeeded → merged` is not one.
        if to.is_terminal() && !self.state.is_terminal() {
            self.finished_at = Some(now);
        }
        if reason.is_some() {
            self.state_reason = reason;
        }
        self.state = to;
        event
    }
}

/// Whether a journal line must be durable before [`JobRecord::journal`]
/// returns: `Durable(true)` at the job's durable points (its claim made
/// durable by its monitor, its end), `Durable(false)` for what recovery
/// can do without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durable(pub bool);

/// The longest a job's view, `job.json`, is owed while the job stays in a
/// state ([`JobRecord::journal_view_owed`]): a job that is queued, or
/// running, longer has its view written; a shorter one's is written once,
/// at its end.
pub const VIEW_OWED_FOR: std::time::Duration = std::time::Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample(dir: &Path) -> (Layout, JobRecord) {
        let layout = Layout::new(dir);
        let id = JobId::generate();
        std::fs::create_dir_all(layout.run_dir(&id)).expect("run dir");
        let prompt = PromptName {
            project: "p".into(),
            name: "n".into(),
        };
        (
            layout,
            JobRecord::new_queued(id, &prompt, "inbox/p/n.running.md".into(), "host"),
        )
    }

    #[test]
    fn a_start_is_written_like_any_transition_and_checked_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (layout, mut rec) = sample(dir.path());
        let mut ev = EventLog::open(layout.root(), &layout.events(&rec.job_id), true);
        rec.transition_on_start(&layout, &mut ev, JobState::Running)
            .expect("start");
        let back = JobRecord::load_job(&layout, &rec.job_id).expect("load");
        assert_eq!(back.state, JobState::Running);
        assert!(back.started_at.is_some());
        let events = std::fs::read_to_string(layout.events(&rec.job_id)).expect("events");
        assert!(events.contains(r#""to":"running""#), "{events}");
        // The table still decides: running → queued is refused, nothing written.
        assert!(
            rec.transition_on_start(&layout, &mut ev, JobState::Queued)
                .is_err()
        );
        let back = JobRecord::load_job(&layout, &rec.job_id).expect("load");
        assert_eq!(back.state, JobState::Running);
        let leftovers: Vec<_> = std::fs::read_dir(layout.run_dir(&rec.job_id))
            .expect("run dir")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn transition_persists_and_stamps_times() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (layout, mut rec) = sample(dir.path());
        let mut ev = EventLog::open(layout.root(), &layout.events(&rec.job_id), true);
        rec.transition(&layout, &mut ev, JobState::Running, None, json!({}))
            .expect("start");
        rec.transition(
            &layout,
            &mut ev,
            JobState::Failed,
            Some("exit 3".into()),
            json!({}),
        )
        .expect("fail");
        let back = JobRecord::load_job(&layout, &rec.job_id).expect("load");
        assert_eq!(back.state, JobState::Failed);
        assert_eq!(back.state_reason.as_deref(), Some("exit 3"));
        assert!(back.started_at.is_some() && back.finished_at.is_some());
    }

    #[test]
    fn invalid_transition_changes_nothing_on_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (layout, mut rec) = sample(dir.path());
        let mut ev = EventLog::open(layout.root(), &layout.events(&rec.job_id), true);
        rec.transition(&layout, &mut ev, JobState::Succeeded, None, json!({}))
            .expect_err("queued -> succeeded");
        rec.save(&layout).expect("save");
        rec.transition(&layout, &mut ev, JobState::Cancelled, None, json!({}))
            .expect("cancel");
        let err = rec
            .transition(&layout, &mut ev, JobState::Running, None, json!({}))
            .expect_err("terminal");
        assert!(matches!(err, RecordError::Transition(_)));
        assert_eq!(
            JobRecord::load_job(&layout, &rec.job_id)
                .expect("load")
                .state,
            JobState::Cancelled
        );
    }

    #[test]
    fn a_record_naming_git_refs_git_would_misread_is_bad() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (layout, mut rec) = sample(dir.path());
        rec.git = Some(jobwarden_sys::git::GitWork {
            repo: "/srv/r".into(),
            branch: "--upload-pack=touch /tmp/x".into(),
            target: "main".into(),
            worktree: None,
            fetch: None,
            tip: None,
        });
        rec.save(&layout).expect("save");
        let err = JobRecord::load_job(&layout, &rec.job_id).expect_err("forged branch");
        assert!(err.to_string().contains("git.branch"), "{err}");
        rec.git = None;
        rec.merge_commit = Some("not a sha".into());
        rec.save(&layout).expect("save");
        let err = JobRecord::load_job(&layout, &rec.job_id).expect_err("forged commit");
        assert!(err.to_string().contains("merge_commit"), "{err}");
    }

    #[test]
    fn unknown_fields_survive_a_rewrite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (layout, mut rec) = sample(dir.path());
        rec.extra
            .insert("future_field".into(), serde_json::json!(42));
        rec.save(&layout).expect("save");
        let mut back = JobRecord::load_job(&layout, &rec.job_id).expect("load");
        back.save(&layout).expect("resave");
        let raw = std::fs::read_to_string(layout.job_json(&rec.job_id)).expect("read");
        assert!(raw.contains("\"future_field\": 42"), "{raw}");
    }
}
