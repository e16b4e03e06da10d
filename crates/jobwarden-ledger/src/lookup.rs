//! The reads behind the CLI's `<job>` argument (the lookup's) that the
//! job index alone cannot answer: a prompt name in any folder, its live
//! jobs, and executions, which outlive their run folders (and include runs
//! recorded by hand) for `history show`.

use rusqlite::params;

use super::history::{COLUMNS, execution_from_row};
use super::jobs::{IndexedJob, unended_states, upper_bound};
use super::short_id::short_id_sql;
use super::{Execution, Ledger, LedgerError};

impl Ledger {
    /// The folders (projects) holding a job of a prompt named `name`, at
    /// most `limit`. The index is keyed by project first, so this reads
    /// the whole of it: only a bare name that is no id prefix gets here.
    pub fn projects_with_prompt(
        &self,
        name: &str,
        limit: usize,
    ) -> Result<Vec<String>, LedgerError> {
        self.strings(
            "SELECT DISTINCT project FROM jobs WHERE name = ?1 ORDER BY project LIMIT ?2",
            params![name, limit as i64],
        )
    }

    /// The jobs of a prompt that the index holds as not ended, newest
    /// claim first, at most `limit`: a live job is what a prompt name
    /// means, however many of its jobs ended since it started.
    pub fn unended_jobs_of(
        &self,
        project: &str,
        name: &str,
        limit: usize,
    ) -> Result<Vec<IndexedJob>, LedgerError> {
        let unended = unended_states();
        let marks = vec!["?"; unended.len()].join(", ");
        let sql = format!(
            "SELECT id FROM jobs WHERE project = ? AND name = ? AND state IN ({marks}) \
             ORDER BY created_at DESC, id DESC LIMIT {limit}"
        );
        let mut args: Vec<&str> = vec![project, name];
        args.extend(unended);
        let ids = self.strings(&sql, rusqlite::params_from_iter(args))?;
        let mut jobs = Vec::with_capacity(ids.len());
        for id in ids {
            jobs.extend(self.indexed_job(&id)?);
        }
        Ok(jobs)
    }

    /// The folders holding an execution of a prompt named `name`, at most `limit`.
    pub fn projects_with_execution_of(
        &self,
        name: &str,
        limit: usize,
    ) -> Result<Vec<String>, LedgerError> {
        self.strings(
            "SELECT DISTINCT project FROM executions WHERE name = ?1 ORDER BY project LIMIT ?2",
            params![name, limit as i64],
        )
    }

    /// The newest execution of a prompt.
    pub fn newest_execution_of(
        &self,
        project: &str,
        name: &str,
    ) -> Result<Option<Execution>, LedgerError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM executions WHERE project = ?1 AND name = ?2 \
             ORDER BY rowid DESC LIMIT 1"
        );
        Ok(self
            .executions(&sql, params![project, name])?
            .into_iter()
            .next())
    }

    /// Executions whose id starts with `prefix`, at most `limit`.
    pub fn executions_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<Execution>, LedgerError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM executions WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3"
        );
        self.executions(&sql, params![prefix, upper_bound(prefix), limit as i64])
    }

    /// Executions whose short id ([`crate::short_id`]) starts with
    /// `prefix`, at most `limit`. No index serves this: it is asked only
    /// when no id starts with the prefix.
    pub fn executions_with_short_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<Execution>, LedgerError> {
        let short = short_id_sql();
        let sql = format!(
            "SELECT {COLUMNS} FROM executions \
             WHERE {short} >= ?1 AND {short} < ?2 ORDER BY id LIMIT ?3"
        );
        self.executions(&sql, params![prefix, upper_bound(prefix), limit as i64])
    }

    fn executions(
        &self,
        sql: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<Execution>, LedgerError> {
        let run = || -> rusqlite::Result<Vec<Execution>> {
            let mut stmt = self.conn.prepare_cached(sql)?;
            let rows = stmt.query_map(args, execution_from_row)?;
            rows.collect()
        };
        run().map_err(|e| self.err(e))
    }

    fn strings(&self, sql: &str, args: impl rusqlite::Params) -> Result<Vec<String>, LedgerError> {
        let run = || -> rusqlite::Result<Vec<String>> {
            let mut stmt = self.conn.prepare_cached(sql)?;
            let rows = stmt.query_map(args, |r| r.get(0))?;
            rows.collect()
        };
        run().map_err(|e| self.err(e))
    }
}
