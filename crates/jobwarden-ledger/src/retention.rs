//! Artifact retention: the `execution_artifacts` rows of all but the newest
//! `keep` executions of each prompt are prunable. `executions` rows are
//! never deleted here (the schema's triggers forbid it anyway); which run
//! folders go is `gc.rs`'s business.
//!
//! Cost: the outer scan walks only executions that still have artifacts
//! (after the first prune, about `keep` per prompt plus the new ones), and
//! for each asks the `(project, name, finished_at)` index whether at least
//! `keep` newer executions exist: at most `keep` index steps, never a scan
//! of the whole history.

use super::{Ledger, LedgerError};

/// Executions whose artifacts one deleting statement removes.
const BATCH: usize = 1000;

/// Executions (by id) whose artifacts are beyond the newest `?1` of their
/// prompt. `?1 = 0` means every execution. Ties on `finished_at` are broken
/// by insertion order (`rowid`), as the other ledger queries do.
const STALE_EXECUTIONS: &str = "
    SELECT e.id FROM executions AS e
    WHERE e.id IN (SELECT execution_id FROM execution_artifacts)
      AND (?1 = 0 OR (
          SELECT 1 FROM executions AS n
          WHERE n.project = e.project AND n.name = e.name
            AND (n.finished_at, n.rowid) > (e.finished_at, e.rowid)
          LIMIT 1 OFFSET ?1 - 1
      ) IS NOT NULL)";

impl Ledger {
    /// Delete (or, with `dry_run`, only list) the artifact rows of every
    /// execution older than the newest `keep` of its prompt. Returns the
    /// `(execution_id, kind)` of each row concerned.
    ///
    /// Deletion goes in batches of [`BATCH`] executions, each its own short
    /// transaction: a first prune of a large ledger must never hold the
    /// write lock long enough for a monitor's insert to time out.
    pub fn prune_artifacts(
        &mut self,
        keep: usize,
        dry_run: bool,
    ) -> Result<Vec<(String, String)>, LedgerError> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        if dry_run {
            let sql = format!(
                "SELECT execution_id, kind FROM execution_artifacts WHERE execution_id IN ({STALE_EXECUTIONS})"
            );
            return self.rows(&sql, keep);
        }
        let sql = format!(
            "DELETE FROM execution_artifacts WHERE execution_id IN ({STALE_EXECUTIONS} LIMIT {BATCH}) \
             RETURNING execution_id, kind"
        );
        let mut pruned = Vec::new();
        loop {
            let batch = self.rows(&sql, keep)?;
            if batch.is_empty() {
                return Ok(pruned);
            }
            pruned.extend(batch);
        }
    }

    fn rows(&self, sql: &str, keep: i64) -> Result<Vec<(String, String)>, LedgerError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([keep], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::params;

    use super::*;

    /// A ledger with executions `(id, project, name, finished_at)`, each
    /// with a stdout and a stderr tail.
    fn ledger_with(rows: &[(&str, &str, &str, i64)]) -> (tempfile::TempDir, Ledger) {
        let dir = tempfile::tempdir().expect("tempdir");
        let l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
        for (id, project, name, finished) in rows {
            l.conn
                .execute(
                    "INSERT INTO executions (id, project, name, attempt, finished_at, outcome, host)
                     VALUES (?1, ?2, ?3, 1, ?4, 'success', 'h')",
                    params![id, project, name, crate::T0 as i64 + finished],
                )
                .expect("execution");
            for kind in ["stdout_tail", "stderr_tail"] {
                l.conn
                    .execute(
                        "INSERT INTO execution_artifacts (execution_id, kind, content)
                         VALUES (?1, ?2, '{\"text\":\"\",\"truncated\":false,\"bytes\":0}')",
                        params![id, kind],
                    )
                    .expect("artifact");
            }
        }
        (dir, l)
    }

    fn count(l: &Ledger, table: &str) -> i64 {
        l.conn
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .expect("count")
    }

    fn ids(rows: &[(String, String)]) -> Vec<&str> {
        let mut ids: Vec<&str> = rows.iter().map(|(id, _)| id.as_str()).collect();
        ids.sort();
        ids.dedup();
        ids
    }

    #[test]
    fn keeps_the_newest_per_prompt_and_never_deletes_executions() {
        let (_dir, mut l) = ledger_with(&[
            ("a1", "p", "a", 1),
            ("a2", "p", "a", 3),
            ("a3", "p", "a", 2),
            ("b1", "p", "b", 1),
            ("c1", "q", "a", 0),
        ]);
        let pruned = l.prune_artifacts(2, false).expect("prune");
        assert_eq!(ids(&pruned), ["a1"], "only the oldest of p/a goes");
        assert_eq!(pruned.len(), 2, "both of its artifact rows");
        assert_eq!(count(&l, "execution_artifacts"), 8);
        assert_eq!(count(&l, "executions"), 5);
        assert!(l.prune_artifacts(2, false).expect("again").is_empty());
    }

    #[test]
    fn dry_run_lists_without_deleting() {
        let (_dir, mut l) = ledger_with(&[("x1", "", "x", 1), ("x2", "", "x", 2)]);
        let listed = l.prune_artifacts(1, true).expect("dry run");
        assert_eq!(ids(&listed), ["x1"]);
        assert_eq!(count(&l, "execution_artifacts"), 4);
    }

    #[test]
    fn keep_zero_prunes_every_artifact() {
        let (_dir, mut l) = ledger_with(&[("x1", "", "x", 1), ("y1", "", "y", 2)]);
        assert_eq!(l.prune_artifacts(0, false).expect("prune").len(), 4);
        assert_eq!(count(&l, "execution_artifacts"), 0);
        assert_eq!(count(&l, "executions"), 2);
    }

    #[test]
    fn ties_on_finished_at_keep_the_later_insert() {
        let (_dir, mut l) = ledger_with(&[("t1", "p", "t", 5), ("t2", "p", "t", 5)]);
        assert_eq!(ids(&l.prune_artifacts(1, false).expect("prune")), ["t1"]);
    }

    #[test]
    fn pruning_in_batches_removes_every_stale_row() {
        let ids: Vec<String> = (0..2_500).map(|i| format!("e{i}")).collect();
        let rows: Vec<(&str, &str, &str, i64)> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), "p", "n", i as i64))
            .collect();
        let (_dir, mut l) = ledger_with(&rows);
        let pruned = l.prune_artifacts(10, false).expect("prune");
        assert_eq!(
            pruned.len(),
            (2_500 - 10) * 2,
            "three batches, nothing missed"
        );
        let left: i64 = l
            .conn
            .query_row("SELECT COUNT(*) FROM execution_artifacts", [], |r| r.get(0))
            .expect("count");
        assert_eq!(left, 20, "the newest 10 keep both tails");
    }
}
