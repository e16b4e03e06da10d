//! Each execution's compiler and linter diagnostics (`execution_diagnostics`,
//! read from its output by [`jobwarden_sys::diagnostics`] when the row is written),
//! and the questions `history diagnostics` asks of them: which executions
//! produced a code and which later run where it ran (the same prompt, the
//! same working folder or the same repository) got rid of it,
//! and which files carry the most.

use rusqlite::{Connection, params};
use serde::Serialize;

use super::execution::Artifact;
use super::history::{COLUMNS, execution_from_row, prefixed_columns};
use super::{Execution, Ledger, LedgerError};

/// One stored diagnostic.
#[derive(Debug, Clone, Serialize)]
pub struct StoredDiagnostic {
    pub severity: String,
    pub code: Option<String>,
    /// The file as the tool printed it, and made absolute.
    pub file: Option<String>,
    pub path: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub message: String,
}

/// An execution that produced a code, and the first later execution of
/// the same prompt, working folder or repository whose output no longer
/// had it, if one ran.
#[derive(Debug)]
pub struct CodeHit {
    pub execution: Execution,
    /// How often the code appeared in its output.
    pub count: u32,
    pub resolved_by: Option<Execution>,
}

/// A file and how many diagnostics named it, in how many executions.
#[derive(Debug, Serialize)]
pub struct FileCount {
    pub path: String,
    pub diagnostics: i64,
    pub executions: i64,
    pub errors: i64,
}

/// A code and how often it appeared, in how many executions.
#[derive(Debug, Serialize)]
pub struct CodeCount {
    pub code: String,
    pub diagnostics: i64,
    pub executions: i64,
}

/// Read the diagnostics of `e`'s output tails and store them with it (in
/// the transaction that inserts its row).
pub(super) fn store(
    tx: &Connection,
    e: &Execution,
    artifacts: &[Artifact],
) -> rusqlite::Result<()> {
    let mut seen = Vec::new();
    for a in artifacts
        .iter()
        .filter(|a| a.kind != "log_tail" || artifacts.len() == 1)
    {
        for d in jobwarden_sys::diagnostics::parse_tail(&a.text) {
            if seen.len() >= jobwarden_sys::diagnostics::MAX_DIAGNOSTICS {
                break;
            }
            if !seen.contains(&d) {
                seen.push(d);
            }
        }
    }
    for (seq, d) in (1..).zip(seen) {
        let path = d
            .file
            .as_deref()
            .map(|f| super::execution::stored_path(e.workdir.as_deref(), f));
        tx.prepare_cached(
            "INSERT OR IGNORE INTO execution_diagnostics
                 (execution_id, seq, severity, code, file, path, line, col, message)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            e.id, seq, d.severity, d.code, d.file, path, d.line, d.column, d.message
        ])?;
    }
    Ok(())
}

/// The first execution written after execution `?1` (the ledger's order)
/// that worked where it did and whose output no longer holds code `?2`:
/// a later run of the same prompt, or of any prompt in the same working
/// folder or the same repository (its published `repo`), that succeeded
/// or failed (an abort or a setup failure ran too little to say).
fn resolved_sql() -> String {
    format!(
        "WITH x AS (
             SELECT e.rowid AS rid, e.project AS project, e.name AS name,
                    e.workdir AS workdir, p.repo AS repo
             FROM executions e LEFT JOIN published p ON p.execution_id = e.id
             WHERE e.id = ?1)
         SELECT {} FROM x, executions e LEFT JOIN published p ON p.execution_id = e.id
         WHERE e.rowid > x.rid
           AND ((e.project = x.project AND e.name = x.name)
                OR e.workdir IN (x.workdir, x.repo) OR p.repo IN (x.workdir, x.repo))
           AND e.outcome IN ('success', 'failure')
           AND NOT EXISTS (SELECT 1 FROM execution_diagnostics d
                           WHERE d.execution_id = e.id AND d.code = ?2)
         ORDER BY e.rowid LIMIT 1",
        prefixed_columns("e")
    )
}

impl Ledger {
    /// The diagnostics of execution `id`, in the order printed.
    pub fn diagnostics_of(&self, id: &str) -> Result<Vec<StoredDiagnostic>, LedgerError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT severity, code, file, path, line, col, message
                 FROM execution_diagnostics WHERE execution_id = ?1 ORDER BY seq",
            )?;
            let rows = stmt.query_map([id], |r| {
                Ok(StoredDiagnostic {
                    severity: r.get(0)?,
                    code: r.get(1)?,
                    file: r.get(2)?,
                    path: r.get(3)?,
                    line: r.get(4)?,
                    column: r.get(5)?,
                    message: r.get(6)?,
                })
            })?;
            rows.collect()
        })
    }

    /// The executions that produced `code`, newest first, at most `limit`,
    /// each with the first later execution of its prompt without it.
    pub fn executions_with_code(
        &self,
        code: &str,
        limit: u32,
    ) -> Result<Vec<CodeHit>, LedgerError> {
        let sql = format!(
            "SELECT {}, count(*) FROM execution_diagnostics d
             JOIN executions e ON e.id = d.execution_id
             WHERE d.code = ?1
             GROUP BY e.id ORDER BY e.rowid DESC LIMIT ?2",
            prefixed_columns("e")
        );
        let columns = COLUMNS.split(", ").count();
        let hits: Vec<(Execution, u32)> = self.read(|c| {
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(params![code, limit], |r| {
                Ok((execution_from_row(r)?, r.get(columns)?))
            })?;
            rows.collect()
        })?;
        let resolved = resolved_sql();
        let mut out = Vec::with_capacity(hits.len());
        for (execution, count) in hits {
            let resolved_by = self.read(|c| {
                let mut stmt = c.prepare_cached(&resolved)?;
                let mut rows = stmt.query_map(params![execution.id, code], execution_from_row)?;
                rows.next().transpose()
            })?;
            out.push(CodeHit {
                execution,
                count,
                resolved_by,
            });
        }
        Ok(out)
    }

    /// The files diagnostics named most (since `since_ms`), at most `limit`.
    pub fn diagnosed_files(
        &self,
        since_ms: Option<u64>,
        limit: u32,
    ) -> Result<Vec<FileCount>, LedgerError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT d.path, count(*), count(DISTINCT d.execution_id),
                        sum(d.severity = 'error')
                 FROM execution_diagnostics d JOIN executions e ON e.id = d.execution_id
                 WHERE d.path IS NOT NULL AND e.finished_at >= ?1
                 GROUP BY d.path ORDER BY count(*) DESC, d.path LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![since_ms.unwrap_or(0) as i64, limit], |r| {
                Ok(FileCount {
                    path: r.get(0)?,
                    diagnostics: r.get(1)?,
                    executions: r.get(2)?,
                    errors: r.get(3)?,
                })
            })?;
            rows.collect()
        })
    }

    /// The codes seen most (since `since_ms`), at most `limit`.
    pub fn diagnostic_codes(
        &self,
        since_ms: Option<u64>,
        limit: u32,
    ) -> Result<Vec<CodeCount>, LedgerError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT d.code, count(*), count(DISTINCT d.execution_id)
                 FROM execution_diagnostics d JOIN executions e ON e.id = d.execution_id
                 WHERE d.code IS NOT NULL AND e.finished_at >= ?1
                 GROUP BY d.code ORDER BY count(DISTINCT d.execution_id) DESC, d.code LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![since_ms.unwrap_or(0) as i64, limit], |r| {
                Ok(CodeCount {
                    code: r.get(0)?,
                    diagnostics: r.get(1)?,
                    executions: r.get(2)?,
                })
            })?;
            rows.collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Outcome, Source};

    fn exec(id: &str, outcome: Outcome, at: u64, stderr: &str) -> (Execution, Vec<Artifact>) {
        let mut e = Execution::new(
            id.into(),
            "p",
            "fix",
            outcome,
            crate::T0 + at,
            "h",
            Source::Daemon,
        );
        e.workdir = Some("/srv/app".into());
        let tail = Artifact {
            kind: "stderr_tail",
            text: stderr.into(),
            truncated: false,
            bytes: stderr.len() as u64,
        };
        (e, vec![tail])
    }

    #[test]
    fn a_code_is_found_with_the_run_that_got_rid_of_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("ledger");
        let broken = "error[E0425]: cannot find value `x`\n --> src/main.rs:2:5\n\
                      main.c:1:1: warning: odd [w1]\n";
        for (id, outcome, at, err) in [
            ("a1", Outcome::Failure, 1_000, broken),
            ("a2", Outcome::Failure, 2_000, broken),
            ("a3", Outcome::Success, 3_000, ""),
        ] {
            let (e, arts) = exec(id, outcome, at, err);
            l.record(&e, &arts, &[]).expect("record");
        }
        let stored = l.diagnostics_of("a1").expect("of");
        assert_eq!(stored.len(), 2);
        assert_eq!(stored[0].path.as_deref(), Some("/srv/app/src/main.rs"));
        let hits = l.executions_with_code("E0425", 10).expect("code");
        let ids: Vec<&str> = hits.iter().map(|h| h.execution.id.as_str()).collect();
        assert_eq!(ids, ["a2", "a1"]);
        for h in &hits {
            assert_eq!(h.resolved_by.as_ref().map(|e| e.id.as_str()), Some("a3"));
        }
        let files = l.diagnosed_files(None, 10).expect("files");
        assert_eq!(files[0].path, "/srv/app/main.c");
        assert_eq!(files.len(), 2);
        assert_eq!(files.iter().map(|f| f.diagnostics).sum::<i64>(), 4);
        let codes = l.diagnostic_codes(None, 10).expect("codes");
        assert_eq!(codes[0].executions, 2);
    }

    #[test]
    fn a_later_run_in_the_same_repository_or_folder_fixes_a_code_not_an_unrelated_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("ledger");
        let broken = "error[E0425]: cannot find value `x`\n --> src/main.rs:2:5\n";
        let in_repo = |id: &str, name: &str, outcome, at, err: &str, repo: &str| {
            let (mut e, arts) = exec(id, outcome, at, err);
            e.name = name.into();
            // Each job in its own worktree of the repository.
            e.workdir = Some(format!("/wt/{id}"));
            e.published = Some(crate::published::Published {
                git: jobwarden_sys::git::GitWork {
                    repo: repo.into(),
                    branch: format!("jw/{id}"),
                    target: "main".into(),
                    worktree: None,
                    fetch: None,
                    tip: None,
                },
                settled: None,
            });
            (e, arts)
        };
        for (e, arts) in [
            in_repo("b1", "break", Outcome::Failure, 1_000, broken, "/repos/app"),
            in_repo(
                "o1",
                "other",
                Outcome::Success,
                2_000,
                "",
                "/repos/elsewhere",
            ),
            in_repo("m1", "mend", Outcome::Success, 3_000, "", "/repos/app"),
        ] {
            l.record(&e, &arts, &[]).expect("record");
        }
        let hits = l.executions_with_code("E0425", 10).expect("code");
        let fixed = hits[0].resolved_by.as_ref().map(|e| e.id.as_str());
        assert_eq!(fixed, Some("m1"), "the same repository, not o1");
    }
}
