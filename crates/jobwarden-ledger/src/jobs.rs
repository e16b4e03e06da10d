//! The job index (`jobs` table, migration 3): one row per job whose run
//! folder exists, so that `status`, `jobs`, `show` and the `<job>` argument
//! answer from an index instead of reading every `job.json`.
//!
//! It is a cache, with two promises a starting daemon relies on to read
//! only the jobs that may be live (`recover.rs`): a claim indexes its job
//! before making its run folder, and a row says a job ended only once its
//! ledger row is written. Each writer of a state change indexes the record
//! right after saving it (fail-soft: a missed write leaves a stale row,
//! never a wrong job.json); every daemon start refreshes the rows of the
//! jobs it reads, and its start-up check those of every run folder;
//! `history repair` rebuilds it. Rows carry the record's `updated_at`, and
//! an older snapshot never replaces a newer one. Readers that care about a
//! live job (running, queued) read its `job.json`, which wins.

use rusqlite::{OptionalExtension, Row, params, params_from_iter};
use serde::Serialize;

use super::short_id::short_id;
use super::{Ledger, LedgerError};
use jobwarden_model::job::{JobRecord, JobState};

/// A job as the index knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IndexedJob {
    pub id: String,
    pub project: String,
    pub name: String,
    pub state: String,
    pub attempt: u32,
    pub created_at: u64,
    pub started_at: Option<u64>,
    pub finished_at: Option<u64>,
    pub exit_code: Option<i32>,
    pub state_reason: Option<String>,
    pub updated_at: u64,
    /// The profile it ran under, once known (migration 11; older rows
    /// gain it when a daemon's start-up check refreshes them).
    pub profile: Option<String>,
}

impl IndexedJob {
    pub fn from_record(rec: &JobRecord) -> Self {
        IndexedJob {
            id: rec.job_id.to_string(),
            project: rec.project.clone(),
            name: rec.name.clone(),
            state: rec.state.to_string(),
            attempt: rec.attempt,
            created_at: rec.created_at.epoch_ms(),
            started_at: rec.started_at.map(|t| t.epoch_ms()),
            finished_at: rec.finished_at.map(|t| t.epoch_ms()),
            exit_code: rec.exit_code,
            state_reason: rec.state_reason.clone(),
            updated_at: rec.updated_at.epoch_ms(),
            profile: rec.profile.clone(),
        }
    }

    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        let ms = |i: usize| -> rusqlite::Result<Option<u64>> {
            Ok(r.get::<_, Option<i64>>(i)?.map(|v| v.max(0) as u64))
        };
        Ok(IndexedJob {
            id: r.get(0)?,
            project: r.get(1)?,
            name: r.get(2)?,
            state: r.get(3)?,
            attempt: r.get(4)?,
            created_at: ms(5)?.unwrap_or(0),
            started_at: ms(6)?,
            finished_at: ms(7)?,
            exit_code: r.get(8)?,
            state_reason: r.get(9)?,
            updated_at: ms(10)?.unwrap_or(0),
            profile: r.get(11)?,
        })
    }
}

const COLUMNS: &str = "id, project, name, state, attempt, created_at, started_at, finished_at, exit_code, state_reason, updated_at, profile";

/// Which jobs `jobs` lists (all given conditions hold).
#[derive(Debug, Default, Clone)]
pub struct JobFilter {
    /// Any of these states; empty means all.
    pub states: Vec<String>,
    pub project: Option<String>,
    pub name: Option<String>,
    pub profile: Option<String>,
    /// Created at or after (epoch ms).
    pub since_ms: Option<u64>,
    /// Created before (epoch ms).
    pub until_ms: Option<u64>,
    /// Text found in `project/name`, case aside.
    pub text: Option<String>,
}

/// The order of a page of jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobOrder {
    /// Newest claim first.
    #[default]
    Newest,
    /// Oldest claim first.
    Oldest,
    /// By `project/name`, then newest first.
    Prompt,
    /// By state, then newest first.
    State,
    /// Latest end first; those not ended yet first of all.
    Ended,
}

impl JobOrder {
    fn sql(self) -> &'static str {
        match self {
            JobOrder::Newest => "created_at DESC, id DESC",
            JobOrder::Oldest => "created_at, id",
            JobOrder::Prompt => "project, name, created_at DESC, id DESC",
            JobOrder::State => "state, created_at DESC, id DESC",
            JobOrder::Ended => {
                "finished_at IS NOT NULL, finished_at DESC, created_at DESC, id DESC"
            }
        }
    }
}

/// `filter` as SQL after `WHERE`, and its arguments.
fn where_clause(f: &JobFilter) -> (String, Vec<rusqlite::types::Value>) {
    let mut sql = String::from("1 = 1");
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    if !f.states.is_empty() {
        let marks = vec!["?"; f.states.len()].join(", ");
        sql.push_str(&format!(" AND state IN ({marks})"));
        args.extend(f.states.iter().cloned().map(Into::into));
    }
    if let Some(p) = &f.project {
        sql.push_str(" AND project = ?");
        args.push(p.clone().into());
    }
    if let Some(n) = &f.name {
        sql.push_str(" AND name = ?");
        args.push(n.clone().into());
    }
    if let Some(p) = &f.profile {
        sql.push_str(" AND profile = ?");
        args.push(p.clone().into());
    }
    if let Some(text) = f.text.as_deref().filter(|t| !t.is_empty()) {
        // Found anywhere in `project/name`, case aside; `%` and `_` as text.
        let escaped = text
            .to_lowercase()
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        sql.push_str(" AND lower(project || '/' || name) LIKE ? ESCAPE '\\'");
        args.push(format!("%{escaped}%").into());
    }
    if let Some(since) = f.since_ms {
        sql.push_str(" AND created_at >= ?");
        args.push((since as i64).into());
    }
    if let Some(until) = f.until_ms {
        sql.push_str(" AND created_at < ?");
        args.push(i64::try_from(until).unwrap_or(i64::MAX).into());
    }
    (sql, args)
}

impl Ledger {
    /// Index one record (after it was saved).
    pub fn index_job(&mut self, rec: &JobRecord) -> Result<(), LedgerError> {
        self.index_jobs(std::slice::from_ref(&IndexedJob::from_record(rec)))
    }

    /// Index several in one transaction.
    pub fn index_jobs(&mut self, jobs: &[IndexedJob]) -> Result<(), LedgerError> {
        let write = |conn: &mut rusqlite::Connection| {
            let tx = conn.savepoint()?;
            upsert_jobs(&tx, jobs)?;
            tx.commit()
        };
        write(&mut self.conn).map_err(|e| self.err(e))
    }

    /// Make the index hold `present` (a full listing of `runs/`): upsert
    /// them and drop the rows of other ended jobs whose folders `gone`
    /// confirms are gone. A job claimed after the listing was taken is
    /// indexed by its claimer and not in `present`: it is kept (its row is
    /// written before its folder, so a row not ended is never dropped
    /// here; a starting daemon drops one whose folder never appeared).
    /// Returns the rows dropped.
    pub fn sync_job_index(
        &mut self,
        present: &[IndexedJob],
        gone: impl Fn(&str) -> bool,
    ) -> Result<usize, LedgerError> {
        self.index_jobs(present)?;
        let absent = |conn: &mut rusqlite::Connection| {
            let tx = conn.transaction()?;
            tx.execute_batch("CREATE TEMP TABLE IF NOT EXISTS present (id TEXT PRIMARY KEY) WITHOUT ROWID; DELETE FROM temp.present;")?;
            {
                let mut add =
                    tx.prepare_cached("INSERT OR IGNORE INTO temp.present (id) VALUES (?1)")?;
                for j in present {
                    add.execute([&j.id])?;
                }
            }
            let unended = unended_states();
            let marks = vec!["?"; unended.len()].join(", ");
            let ids = tx
                .prepare(&format!(
                    "SELECT id FROM jobs WHERE id NOT IN (SELECT id FROM temp.present)
                     AND state NOT IN ({marks})"
                ))?
                .query_map(params_from_iter(unended.iter()), |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?;
            tx.execute("DELETE FROM temp.present", [])?;
            tx.commit()?;
            Ok(ids)
        };
        let absent = absent(&mut self.conn).map_err(|e| self.err(e))?;
        let gone: Vec<String> = absent.into_iter().filter(|id| gone(id)).collect();
        self.unindex_jobs(&gone)?;
        Ok(gone.len())
    }

    /// Forget jobs whose run folders were removed.
    pub fn unindex_jobs(&mut self, ids: &[String]) -> Result<(), LedgerError> {
        let write = |conn: &mut rusqlite::Connection| {
            let tx = conn.savepoint()?;
            {
                let mut del = tx.prepare_cached("DELETE FROM jobs WHERE id = ?1")?;
                for id in ids {
                    del.execute([id])?;
                }
            }
            tx.commit()
        };
        write(&mut self.conn).map_err(|e| self.err(e))
    }

    pub fn indexed_job(&self, id: &str) -> Result<Option<IndexedJob>, LedgerError> {
        let sql = format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1");
        self.conn
            .query_row(&sql, [id], IndexedJob::from_row)
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Jobs whose id starts with `prefix`, at most `limit`.
    pub fn jobs_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<IndexedJob>, LedgerError> {
        let sql =
            format!("SELECT {COLUMNS} FROM jobs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3");
        self.query(&sql, params![prefix, upper_bound(prefix), limit as i64])
    }

    /// Jobs whose short id (as tables show it, [`short_id`]) starts with
    /// `prefix`, at most `limit`. A row indexed before short ids took their
    /// present form holds the id's last 8 characters until it is indexed
    /// again (each daemon start's check does); the lookup also reads run
    /// folders' names when the index knows no match.
    pub fn jobs_with_short_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<IndexedJob>, LedgerError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM jobs WHERE id_short >= ?1 AND id_short < ?2 ORDER BY id LIMIT ?3"
        );
        self.query(&sql, params![prefix, upper_bound(prefix), limit as i64])
    }

    /// The newest job of a prompt.
    pub fn newest_job_of(
        &self,
        project: &str,
        name: &str,
    ) -> Result<Option<IndexedJob>, LedgerError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM jobs WHERE project = ?1 AND name = ?2 ORDER BY created_at DESC, id DESC LIMIT 1"
        );
        Ok(self.query(&sql, params![project, name])?.into_iter().next())
    }

    /// Jobs matching `filter`, newest claim first, at most `limit`.
    pub fn list_jobs(&self, f: &JobFilter, limit: usize) -> Result<Vec<IndexedJob>, LedgerError> {
        Ok(self.page_jobs(f, JobOrder::Newest, 0, limit)?.0)
    }

    /// One page of the jobs matching `filter`, in `order`: at most `limit`
    /// after the first `offset`; and how many match in all.
    pub fn page_jobs(
        &self,
        f: &JobFilter,
        order: JobOrder,
        offset: usize,
        limit: usize,
    ) -> Result<(Vec<IndexedJob>, u64), LedgerError> {
        let (filter, mut args) = where_clause(f);
        let total: i64 = self
            .conn
            .query_row(
                &format!("SELECT count(*) FROM jobs WHERE {filter}"),
                params_from_iter(args.iter()),
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        let sql = format!(
            "SELECT {COLUMNS} FROM jobs WHERE {filter} ORDER BY {} LIMIT ? OFFSET ?",
            order.sql()
        );
        args.push((limit as i64).into());
        args.push((offset as i64).into());
        let rows = self.query(&sql, params_from_iter(args))?;
        Ok((rows, total.max(0) as u64))
    }

    /// How many jobs are in each state (kept by triggers; states with none
    /// are left out).
    pub fn count_jobs_by_state(&self) -> Result<Vec<(String, u64)>, LedgerError> {
        let run = || -> rusqlite::Result<Vec<(String, u64)>> {
            let mut stmt = self
                .conn
                .prepare_cached("SELECT state, n FROM job_counts WHERE n > 0 ORDER BY state")?;
            let rows =
                stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64)))?;
            rows.collect()
        };
        run().map_err(|e| self.err(e))
    }

    /// Jobs in any of `states`, oldest claim first (the queue's order).
    pub fn jobs_in_states(
        &self,
        states: &[&str],
        limit: usize,
    ) -> Result<Vec<IndexedJob>, LedgerError> {
        let marks = vec!["?"; states.len()].join(", ");
        let sql = format!(
            "SELECT {COLUMNS} FROM jobs WHERE state IN ({marks}) ORDER BY created_at, id LIMIT {limit}"
        );
        self.query(&sql, params_from_iter(states.iter()))
    }

    /// Ids of the jobs the index holds in a state that has not ended
    /// (what a starting daemon must look at), oldest claim first.
    pub fn unended_job_ids(&self) -> Result<Vec<String>, LedgerError> {
        let unended = unended_states();
        let marks = vec!["?"; unended.len()].join(", ");
        let sql = format!("SELECT id FROM jobs WHERE state IN ({marks}) ORDER BY created_at, id");
        let run = || -> rusqlite::Result<Vec<String>> {
            let mut stmt = self.conn.prepare_cached(&sql)?;
            let rows = stmt.query_map(params_from_iter(unended.iter()), |r| r.get(0))?;
            rows.collect()
        };
        run().map_err(|e| self.err(e))
    }

    /// Up to `limit` ids of jobs the index holds ended, in id order, after
    /// `after`: a walk over the index that holds no more than a page.
    pub fn ended_job_ids_after(
        &self,
        after: &str,
        limit: usize,
    ) -> Result<Vec<String>, LedgerError> {
        let unended = unended_states();
        let marks = vec!["?"; unended.len()].join(", ");
        let sql = format!(
            "SELECT id FROM jobs WHERE id > ? AND state NOT IN ({marks}) ORDER BY id LIMIT {limit}"
        );
        let mut args: Vec<&str> = vec![after];
        args.extend(unended);
        let run = || -> rusqlite::Result<Vec<String>> {
            let mut stmt = self.conn.prepare_cached(&sql)?;
            let rows = stmt.query_map(params_from_iter(args.iter()), |r| r.get(0))?;
            rows.collect()
        };
        run().map_err(|e| self.err(e))
    }

    /// The most recently finished jobs, newest first.
    pub fn recently_finished(&self, limit: usize) -> Result<Vec<IndexedJob>, LedgerError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM jobs WHERE finished_at IS NOT NULL ORDER BY finished_at DESC LIMIT ?1"
        );
        self.query(&sql, [limit as i64])
    }

    /// Whether the index holds any job.
    pub fn any_job_indexed(&self) -> Result<bool, LedgerError> {
        self.conn
            .query_row("SELECT EXISTS (SELECT 1 FROM jobs)", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// Keep a step of the wall clock a daemon noticed (`clock::StepWatch`).
    pub fn record_clock_step(
        &self,
        noticed_at: u64,
        step_ms: i64,
        host: &str,
    ) -> Result<(), LedgerError> {
        self.conn
            .execute(
                "INSERT INTO clock_steps (noticed_at, step_ms, host) VALUES (?1, ?2, ?3)",
                rusqlite::params![noticed_at as i64, step_ms, host],
            )
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// The latest step of the wall clock kept: `(noticed_at, step_ms, host)`.
    pub fn last_clock_step(&self) -> Result<Option<(u64, i64, String)>, LedgerError> {
        use rusqlite::OptionalExtension;
        self.conn
            .query_row(
                "SELECT noticed_at, step_ms, host FROM clock_steps ORDER BY noticed_at DESC, rowid DESC LIMIT 1",
                [],
                |r| Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Whether anything was ever recorded (a job indexed or an execution).
    pub fn ever_ran(&self) -> Result<bool, LedgerError> {
        self.conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM jobs) OR EXISTS (SELECT 1 FROM executions)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    fn query(
        &self,
        sql: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<IndexedJob>, LedgerError> {
        let run = || -> rusqlite::Result<Vec<IndexedJob>> {
            let mut stmt = self.conn.prepare_cached(sql)?;
            let rows = stmt.query_map(args, IndexedJob::from_row)?;
            rows.collect()
        };
        run().map_err(|e| self.err(e))
    }
}

/// The names of the states that have not ended.
pub(super) fn unended_states() -> Vec<&'static str> {
    JobState::ALL
        .iter()
        .filter(|s| !s.is_terminal())
        .map(|s| s.as_str())
        .collect()
}

/// The smallest string greater than every string starting with `prefix`
/// (ids are ASCII, so bumping the last byte is enough).
pub(super) fn upper_bound(prefix: &str) -> String {
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0x7f {
            bytes.push(last + 1);
            return String::from_utf8(bytes).unwrap_or_default();
        }
    }
    "\u{7f}".repeat(65)
}

/// Upsert `jobs` into the job index inside `tx` (a newer snapshot wins).
pub(crate) fn upsert_jobs(tx: &rusqlite::Connection, jobs: &[IndexedJob]) -> rusqlite::Result<()> {
    let mut upsert = tx.prepare_cached(
        "INSERT INTO jobs (id, id_short, project, name, state, attempt, created_at,
             started_at, finished_at, exit_code, state_reason, updated_at, profile)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
         ON CONFLICT (id) DO UPDATE SET
             project = excluded.project, name = excluded.name, state = excluded.state,
             attempt = excluded.attempt, created_at = excluded.created_at,
             started_at = excluded.started_at, finished_at = excluded.finished_at,
             exit_code = excluded.exit_code, state_reason = excluded.state_reason,
             updated_at = excluded.updated_at,
             profile = COALESCE(excluded.profile, jobs.profile)
         WHERE excluded.updated_at >= jobs.updated_at",
    )?;
    for j in jobs {
        upsert.execute(params![
            j.id,
            short_id(&j.id),
            j.project,
            j.name,
            j.state,
            j.attempt,
            j.created_at as i64,
            j.started_at.map(|v| v as i64),
            j.finished_at.map(|v| v as i64),
            j.exit_code,
            j.state_reason,
            j.updated_at as i64,
            j.profile,
        ])?;
    }
    Ok(())
}
