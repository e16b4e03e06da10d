//! Published work (migration 9): the git branch of each execution that
//! ended with work published (its profile has `git`), watched by the
//! reconcile until it is settled: merged (by its publish, or later), or
//! its branch deleted unmerged. The execution row itself never changes; a
//! merge learned later is a fact of this table.

use rusqlite::{OptionalExtension, params};

use super::{Ledger, LedgerError};
use crate::git::GitWork;

/// How a published branch was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The job's publish merged it (the job ended `merged`).
    PublishMerged,
    /// The reconcile found it merged into its target later.
    BranchMerged,
    /// The reconcile found it deleted, unmerged.
    BranchDeleted,
}

impl Settled {
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::PublishMerged => "publish_merged",
            Settled::BranchMerged => "branch_merged",
            Settled::BranchDeleted => "branch_deleted",
        }
    }
}

/// A branch the reconcile still watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub execution_id: String,
    pub git: GitWork,
}

/// What the published row of an execution says, for `history show`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PublishedRow {
    pub repo: String,
    pub branch: String,
    pub target: String,
    pub settled: Option<String>,
    pub settled_at: Option<crate::clock::Timestamp>,
    pub merged_at: Option<crate::clock::Timestamp>,
    pub merge_commit: Option<String>,
}

/// The published row of execution `id`, written with it
/// ([`super::execution`]'s insert): settled at once when the job ended
/// merged (`merged` = its time and commit).
pub(super) fn insert(
    tx: &rusqlite::Transaction<'_>,
    id: &str,
    git: &GitWork,
    merged: Option<(u64, &str)>,
    now_ms: u64,
) -> rusqlite::Result<()> {
    let settled = merged.map(|_| Settled::PublishMerged.as_str());
    tx.execute(
        "INSERT OR IGNORE INTO published (execution_id, repo, branch, target, fetch, worktree,
             tip, settled, settled_at, merged_at, merge_commit)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            id,
            git.repo,
            git.branch,
            git.target,
            git.fetch,
            git.worktree,
            git.tip,
            settled,
            merged.map(|_| now_ms as i64),
            merged.map(|(at, _)| at as i64),
            merged.map(|(_, commit)| commit),
        ],
    )?;
    Ok(())
}

impl Ledger {
    /// Merged executions among those `f` selects, by project.
    pub(super) fn merged_counts(
        &self,
        f: &super::history::Filter,
    ) -> Result<Vec<(String, u64)>, LedgerError> {
        let merged = "id IN (SELECT execution_id FROM published WHERE merged_at IS NOT NULL)";
        let (where_sql, params) = f.where_sql(&[merged]);
        let sql = format!("SELECT project, COUNT(*) FROM executions{where_sql} GROUP BY project");
        self.read(|c| {
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(params), |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })?;
            rows.collect()
        })
    }

    /// The branches still watched (not settled), oldest first, at most
    /// `limit`.
    pub fn watched_branches(&self, limit: u32) -> Result<Vec<Watched>, LedgerError> {
        self.read(|c| {
            let mut stmt = c.prepare(
                "SELECT execution_id, repo, branch, target, fetch, worktree, tip FROM published
                 WHERE settled IS NULL ORDER BY execution_id LIMIT ?1",
            )?;
            let rows = stmt.query_map([limit], |r| {
                Ok(Watched {
                    execution_id: r.get(0)?,
                    git: GitWork {
                        repo: r.get(1)?,
                        branch: r.get(2)?,
                        target: r.get(3)?,
                        fetch: r.get(4)?,
                        worktree: r.get(5)?,
                        tip: r.get(6)?,
                    },
                })
            })?;
            rows.collect()
        })
    }

    /// Settle the watched branch of execution `id` (`merged` = when and by
    /// which commit, for a merge). A row already settled is left as it is.
    pub fn settle_branch(
        &mut self,
        id: &str,
        how: Settled,
        merged: Option<(u64, &str)>,
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        self.conn
            .execute(
                "UPDATE published SET settled = ?2, settled_at = ?3, merged_at = ?4, merge_commit = ?5
                 WHERE execution_id = ?1 AND settled IS NULL",
                params![
                    id,
                    how.as_str(),
                    now_ms as i64,
                    merged.map(|(at, _)| at as i64),
                    merged.map(|(_, commit)| commit),
                ],
            )
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// The published row of execution `id`, if it has one.
    pub fn published(&self, id: &str) -> Result<Option<PublishedRow>, LedgerError> {
        self.read(|c| {
            c.query_row(
                "SELECT repo, branch, target, settled, settled_at, merged_at, merge_commit
                 FROM published WHERE execution_id = ?1",
                [id],
                |r| {
                    let ms = |i: usize| {
                        r.get::<_, Option<i64>>(i).map(|v| {
                            v.map(|v| crate::clock::Timestamp::from_epoch_ms(v.max(0) as u64))
                        })
                    };
                    Ok(PublishedRow {
                        repo: r.get(0)?,
                        branch: r.get(1)?,
                        target: r.get(2)?,
                        settled: r.get(3)?,
                        settled_at: ms(4)?,
                        merged_at: ms(5)?,
                        merge_commit: r.get(6)?,
                    })
                },
            )
            .optional()
        })
    }
}
