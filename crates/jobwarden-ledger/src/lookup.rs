//! The reads behind the CLI's `<job>` argument (the lookup's) that the
//! job index alone cannot answer: a prompt name in any folder, and
//! executions, which outlive their run folders (and include runs recorded
//! by hand) for `history show`.

use rusqlite::params;

use super::history::{COLUMNS, execution_from_row};
use super::jobs::upper_bound;
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
             ORDER BY finished_at DESC, rowid DESC LIMIT 1"
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

    /// Executions whose short id (the id's last 8 characters) starts with
    /// `prefix`, at most `limit`. No index serves this: it is asked only
    /// when no id starts with the prefix.
    pub fn executions_with_short_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<Execution>, LedgerError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM executions \
             WHERE substr(id, -8) >= ?1 AND substr(id, -8) < ?2 ORDER BY id LIMIT ?3"
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
