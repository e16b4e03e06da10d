//! One execution row (an attempt that finished) with its artifacts and
//! paths, and the single transaction that writes them.

use rusqlite::params;
use serde::Serialize;

use super::{Ledger, LedgerError, Outcome};
use jobwarden_model::job::JobRecord;
use jobwarden_sys::clock::Timestamp;

/// Who wrote a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The job's monitor (or the daemon, for jobs that ended before one).
    Daemon,
    /// `jobwarden history record`: a run jobwarden did not supervise.
    External,
    /// Backfilled from `job.json` after the original insert failed.
    Repair,
}

impl std::str::FromStr for Source {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [Source::Daemon, Source::External, Source::Repair]
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| format!("unknown source {s:?}"))
    }
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Daemon => "daemon",
            Source::External => "external",
            Source::Repair => "repair",
        }
    }
}

/// An execution row. Times are epoch milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Execution {
    pub id: String,
    pub project: String,
    pub name: String,
    pub attempt: u32,
    pub retry_of: Option<String>,
    pub profile: Option<String>,
    pub command: Option<Vec<String>>,
    pub workdir: Option<String>,
    pub started_at: Option<u64>,
    pub finished_at: u64,
    pub duration_ms: Option<u64>,
    #[serde(serialize_with = "ser_outcome")]
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub failure_stage: Option<String>,
    pub error_message: Option<String>,
    pub result_ref: Option<String>,
    pub host: String,
    pub prompt_sha256: Option<String>,
    /// `archived` or `requeued`: what happened to the prompt afterwards.
    pub disposition: Option<String>,
    pub source: Source,
    /// Its published work (the job's `git`), and what its record already
    /// says of it: written beside the row (`published`).
    #[serde(skip)]
    pub published: Option<super::published::Published>,
    /// Its Slurm job, when it ran on Slurm: written beside the row
    /// (`execution_slurm`).
    #[serde(skip)]
    pub slurm: Option<super::slurm::SlurmRun>,
    /// The text of the prompt it ran, when its caller read it: written
    /// beside the row (`execution_prompts`).
    #[serde(skip)]
    pub prompt: Option<super::PromptText>,
}

fn ser_outcome<S: serde::Serializer>(o: &Outcome, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(o.as_str())
}

/// A structured output of an execution, stored as the JSON envelope
/// `{"text": ..., "truncated": bool, "bytes": n}`.
#[derive(Debug, Clone, Serialize)]
pub struct Artifact {
    #[serde(skip)]
    pub kind: &'static str,
    pub text: String,
    pub truncated: bool,
    /// Bytes the stream produced in all (the text is its tail).
    pub bytes: u64,
}

impl Artifact {
    /// Every kind of artifact a job's end stores: each command's tails,
    /// and the log's tail of a backfilled row.
    pub const KINDS: [&'static str; 7] = [
        "stdout_tail",
        "stderr_tail",
        "prepare_stdout_tail",
        "prepare_stderr_tail",
        "publish_stdout_tail",
        "publish_stderr_tail",
        "log_tail",
    ];

    /// The kind named `name`, if it is one of [`Artifact::KINDS`].
    pub fn kind_named(name: &str) -> Option<&'static str> {
        Self::KINDS.into_iter().find(|k| *k == name)
    }
}

/// How an execution relates to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRelation {
    ExecutedOn,
    Affected,
}

impl PathRelation {
    pub fn as_str(self) -> &'static str {
        match self {
            PathRelation::ExecutedOn => "executed_on",
            PathRelation::Affected => "affected",
        }
    }

    /// The relation [`PathRelation::as_str`] names `name`.
    pub fn named(name: &str) -> Option<Self> {
        [PathRelation::ExecutedOn, PathRelation::Affected]
            .into_iter()
            .find(|r| r.as_str() == name)
    }
}

impl Execution {
    /// A row with only what every execution has; the rest unknown (attempt 1).
    pub fn new(
        id: String,
        project: &str,
        name: &str,
        outcome: Outcome,
        finished_at: u64,
        host: &str,
        source: Source,
    ) -> Self {
        Execution {
            id,
            project: project.to_owned(),
            name: name.to_owned(),
            attempt: 1,
            retry_of: None,
            profile: None,
            command: None,
            workdir: None,
            started_at: None,
            finished_at,
            duration_ms: None,
            outcome,
            exit_code: None,
            signal: None,
            failure_stage: None,
            error_message: None,
            result_ref: None,
            host: host.to_owned(),
            prompt_sha256: None,
            disposition: None,
            source,
            published: None,
            slurm: None,
            prompt: None,
        }
    }

    /// The row for a terminal job record.
    pub fn from_record(
        rec: &JobRecord,
        outcome: Outcome,
        disposition: Option<&str>,
        source: Source,
    ) -> Self {
        let finished = rec.finished_at.unwrap_or_else(Timestamp::now).epoch_ms();
        // A start the schema would refuse (the clock was set back to 1970
        // when the job began, and stepped right before it ended) is left
        // out, with its duration: the rest of the row still holds.
        // A start after the end (the wall clock stepped back while the job
        // ran) is the end: the row says finished >= started, with a zero
        // duration rather than a made-up one.
        let started = rec
            .started_at
            .map(Timestamp::epoch_ms)
            .filter(|&s| possible_time(s))
            .map(|s| s.min(finished));
        Execution {
            id: rec.job_id.to_string(),
            project: rec.project.clone(),
            name: rec.name.clone(),
            attempt: rec.attempt,
            retry_of: rec.retry_of.as_ref().map(ToString::to_string),
            profile: rec.profile.clone(),
            command: rec.command.clone(),
            workdir: rec.workdir.clone(),
            started_at: started,
            finished_at: finished,
            duration_ms: started.map(|s| finished.saturating_sub(s)),
            outcome,
            exit_code: rec.exit_code,
            signal: rec.signal.clone(),
            failure_stage: rec.failure_stage.clone(),
            error_message: rec.state_reason.clone(),
            result_ref: rec.result_ref.clone(),
            host: rec.host.clone(),
            prompt_sha256: rec.prompt_sha256.clone(),
            // The ledger knows where a prompt was sent (`archived`,
            // `requeued`); a record's `missing` prompt has none there.
            disposition: disposition
                .filter(|d| *d != jobwarden_model::job::DISPOSITION_MISSING)
                .map(str::to_owned),
            source,
            published: published_work(rec),
            slurm: super::slurm::SlurmRun::of(rec),
            prompt: None,
        }
    }

    /// [`Execution::from_record`], with the text of the prompt the job
    /// ran, read from its run folder.
    pub fn of_job(
        layout: &jobwarden_model::layout::Layout,
        rec: &JobRecord,
        outcome: Outcome,
        source: Source,
    ) -> Self {
        let mut exec = Self::from_record(rec, outcome, rec.disposition.as_deref(), source);
        exec.prompt = super::PromptText::of_job(layout, &rec.job_id);
        exec
    }
}

/// The published work of a job that ended with it published (succeeded
/// or merged, its profile with `git`), settled as its record says: merged
/// (by its publish, or found so later: a row backfilled after the
/// reconcile), or its branch deleted.
fn published_work(rec: &JobRecord) -> Option<super::published::Published> {
    use super::published::Settled;
    use jobwarden_model::job::JobState;
    if !matches!(rec.state, JobState::Succeeded | JobState::Merged) {
        return None;
    }
    let found = rec.reconciled.as_ref().map(|r| r.reason.as_str());
    let settled = match (rec.state, rec.merged_at, &rec.merge_commit, found) {
        (JobState::Merged, Some(at), Some(commit), Some("branch_merged")) => {
            Some((Settled::BranchMerged, Some((at.epoch_ms(), commit.clone()))))
        }
        (JobState::Merged, Some(at), Some(commit), _) => Some((
            Settled::PublishMerged,
            Some((at.epoch_ms(), commit.clone())),
        )),
        (JobState::Succeeded, _, _, Some("branch_deleted")) => Some((Settled::BranchDeleted, None)),
        _ => None,
    };
    Some(super::published::Published {
        git: rec.git.clone()?,
        settled,
    })
}

/// A path a job listed or printed, as the ledger stores it: made absolute
/// against `workdir` when relative, `.` components dropped (as
/// `history who-touched` makes its argument).
pub fn stored_path(workdir: Option<&str>, file: &str) -> String {
    let file = std::path::Path::new(file);
    let joined = match workdir {
        Some(dir) if file.is_relative() => std::path::Path::new(dir).join(file),
        _ => file.to_path_buf(),
    };
    joined
        .components()
        .collect::<std::path::PathBuf>()
        .display()
        .to_string()
}

/// Refuse a row whose times the schema would refuse (migration 8's
/// trigger), naming the field and the time: SQLite's message cannot carry
/// the value.
fn check_times(e: &Execution) -> rusqlite::Result<()> {
    let times = [
        ("finished_at", Some(e.finished_at)),
        ("started_at", e.started_at),
    ];
    match times
        .into_iter()
        .find(|(_, t)| t.is_some_and(|t| !possible_time(t)))
    {
        Some((field, Some(ms))) => Err(super::refusal(format!(
            "execution {}: impossible time: {field} {} (epoch ms {ms}) is before 2020 or more \
             than a day ahead of this clock ({}); check the clock, or the times given",
            e.id,
            Timestamp::from_epoch_ms(ms),
            Timestamp::now()
        ))),
        _ => Ok(()),
    }
}

/// 2020-01-01, the earliest time an execution may carry (migration 8).
pub const EARLIEST_MS: u64 = 1_577_836_800_000;

/// Could the schema take `ms` as an execution's time: from 2020 on, and
/// at most a day ahead of this clock (migration 8)?
pub fn possible_time(ms: u64) -> bool {
    ms >= EARLIEST_MS && ms <= Timestamp::now().epoch_ms().saturating_add(86_400_000)
}

impl Ledger {
    /// Insert an execution with its artifacts and paths in one transaction.
    /// Idempotent: a row with the same id is left as it is (returns false).
    pub fn record(
        &mut self,
        exec: &Execution,
        artifacts: &[Artifact],
        paths: &[(PathRelation, String)],
    ) -> Result<bool, LedgerError> {
        let write = |conn: &mut rusqlite::Connection| {
            let tx = conn.savepoint()?;
            let inserted = insert(&tx, exec, artifacts, paths)?;
            tx.commit()?;
            Ok(inserted)
        };
        write(&mut self.conn).map_err(|e| self.err(e))
    }

    /// [`Ledger::record`] and the job index's row of the same job in one
    /// transaction: an end's two writes as one commit. Both or neither.
    pub fn record_indexed(
        &mut self,
        exec: &Execution,
        artifacts: &[Artifact],
        paths: &[(PathRelation, String)],
        indexed: &crate::IndexedJob,
    ) -> Result<bool, LedgerError> {
        let write = |conn: &mut rusqlite::Connection| {
            let tx = conn.savepoint()?;
            let inserted = insert(&tx, exec, artifacts, paths)?;
            crate::jobs::upsert_jobs(&tx, std::slice::from_ref(indexed))?;
            tx.commit()?;
            Ok(inserted)
        };
        write(&mut self.conn).map_err(|e| self.err(e))
    }
}

fn insert(
    tx: &rusqlite::Connection,
    e: &Execution,
    artifacts: &[Artifact],
    paths: &[(PathRelation, String)],
) -> rusqlite::Result<bool> {
    check_times(e)?;
    let command = e
        .command
        .as_ref()
        .map(|c| serde_json::to_string(c).unwrap_or_default());
    // Each statement compiled once per connection (with the triggers it
    // fires): an end recorded is then a few steps, not a parse.
    let mut row = tx.prepare_cached(
        "INSERT OR IGNORE INTO executions (id, project, name, attempt, retry_of, profile, command, workdir,
             started_at, finished_at, duration_ms, outcome, exit_code, signal, failure_stage,
             error_message, result_ref, host, prompt_sha256, disposition, source)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
    )?;
    let n = row.execute(params![
        e.id,
        e.project,
        e.name,
        e.attempt,
        e.retry_of,
        e.profile,
        command,
        e.workdir,
        e.started_at.map(|v| v as i64),
        e.finished_at as i64,
        e.duration_ms.map(|v| v as i64),
        e.outcome.as_str(),
        e.exit_code,
        e.signal,
        e.failure_stage,
        e.error_message,
        e.result_ref,
        e.host,
        e.prompt_sha256,
        e.disposition,
        e.source.as_str(),
    ])?;
    if n == 0 {
        return Ok(false);
    }
    for a in artifacts {
        let content = serde_json::to_string(a).unwrap_or_else(|_| "{}".into());
        tx.prepare_cached(
            "INSERT INTO execution_artifacts (execution_id, kind, content) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![e.id, a.kind, content])?;
    }
    for (relation, path) in paths {
        let sql = "INSERT OR IGNORE INTO execution_paths (execution_id, relation, path) VALUES (?1, ?2, ?3)";
        tx.prepare_cached(sql)?
            .execute(params![e.id, relation.as_str(), path])?;
    }
    super::diagnostics::store(tx, e, artifacts)?;
    if let Some(published) = &e.published {
        super::published::insert(tx, &e.id, published, Timestamp::now().epoch_ms())?;
    }
    if let Some(run) = &e.slurm {
        super::slurm::insert(tx, &e.id, run)?;
    }
    if let Some(prompt) = &e.prompt {
        super::prompt_text::insert(tx, &e.id, prompt)?;
    }
    Ok(true)
}

/// What a monitor hands over to its daemon for the ledger row of an end
/// it recorded in `job.json` alone (see `terminal.rs`): the row's output
/// tails and paths, and the terminal record as the monitor wrote it
/// (durable in the journal), so that the daemon need not read it again.
#[derive(Debug, Clone, Default)]
pub struct Handed {
    pub artifacts: Vec<Artifact>,
    pub paths: Vec<(PathRelation, String)>,
    /// The terminal record, if handed over.
    pub record: Option<Box<jobwarden_model::job::JobRecord>>,
    /// `job.json` could not be written after the record's journal line.
    pub view_behind: bool,
}
