//! Published work (migration 9): the git branch of each execution that
//! ended with work published (its profile has `git`), watched by the
//! reconcile until it is settled: merged (by its publish, or later), or
//! its branch deleted unmerged. The execution row itself never changes; a
//! merge learned later is a fact of this table.

use rusqlite::{OptionalExtension, params};

use super::{Ledger, LedgerError};
use jobwarden_sys::git::GitWork;

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

/// The published work of an execution as its row is written: its branch,
/// and how it is settled already (with the merge's time and commit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub git: GitWork,
    pub settled: Option<(Settled, Option<(u64, String)>)>,
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
    pub settled_at: Option<jobwarden_sys::clock::Timestamp>,
    pub merged_at: Option<jobwarden_sys::clock::Timestamp>,
    pub merge_commit: Option<String>,
}

/// The published row of execution `id`, written with it
/// ([`super::execution`]'s insert): settled at once when its record says
/// so.
pub(super) fn insert(
    tx: &rusqlite::Connection,
    id: &str,
    p: &Published,
    now_ms: u64,
) -> rusqlite::Result<()> {
    let git = &p.git;
    let settled = p.settled.as_ref().map(|(how, _)| how.as_str());
    let merged = p.settled.as_ref().and_then(|(_, m)| m.as_ref());
    tx.prepare_cached(
        "INSERT OR IGNORE INTO published (execution_id, repo, branch, target, fetch, worktree,
             tip, settled, settled_at, merged_at, merge_commit)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        id,
        git.repo,
        git.branch,
        git.target,
        git.fetch,
        git.worktree,
        git.tip,
        settled,
        settled.map(|_| now_ms as i64),
        merged.map(|(at, _)| *at as i64),
        merged.map(|(_, commit)| commit),
    ])?;
    Ok(())
}

impl Ledger {
    /// Among the executions `f` selects, those whose published branch is
    /// merged (`merged`: true) or was deleted unmerged (false), counted
    /// by the group key `key_sql` (an SQL expression of a row).
    pub(super) fn settled_counts(
        &self,
        f: &super::history::Filter,
        key_sql: &str,
        merged: bool,
    ) -> Result<Vec<(String, u64)>, LedgerError> {
        let which = if merged {
            "id IN (SELECT execution_id FROM published WHERE merged_at IS NOT NULL)"
        } else {
            "id IN (SELECT execution_id FROM published WHERE settled = 'branch_deleted')"
        };
        let (where_sql, params) = f.where_sql(&[which]);
        let sql = format!("SELECT {key_sql} AS g, COUNT(*) FROM executions{where_sql} GROUP BY g");
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
                            v.map(|v| {
                                jobwarden_sys::clock::Timestamp::from_epoch_ms(v.max(0) as u64)
                            })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Execution, Outcome, Source};
    use jobwarden_model::job::{JobId, JobRecord, JobState, Reconciled};
    use jobwarden_model::layout::PromptName;
    use jobwarden_sys::clock::Timestamp;

    fn record(state: JobState, reconciled: Option<&str>) -> JobRecord {
        let prompt = PromptName {
            project: "p".into(),
            name: "n".into(),
        };
        let mut rec = JobRecord::new_queued(JobId::generate(), &prompt, "inbox/p/n.md".into(), "h");
        rec.state = state;
        rec.finished_at = Some(Timestamp::now());
        rec.git = Some(GitWork {
            repo: "/srv/r".into(),
            branch: format!("jw/{}", rec.job_id),
            target: "main".into(),
            worktree: None,
            fetch: None,
            tip: Some("abcd1234".into()),
        });
        if state == JobState::Merged {
            rec.merged_at = Some(Timestamp::now());
            rec.merge_commit = Some("beef5678".into());
        }
        rec.reconciled = reconciled.map(|reason| Reconciled {
            reason: reason.into(),
            at: Timestamp::now(),
        });
        rec
    }

    fn write(ledger: &mut Ledger, rec: &JobRecord) -> String {
        let exec = Execution::from_record(rec, Outcome::Success, Some("archived"), Source::Repair);
        ledger.record(&exec, &[], &[]).expect("row");
        rec.job_id.to_string()
    }

    #[test]
    fn a_row_is_settled_as_its_record_says_and_only_open_branches_are_watched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ledger = Ledger::open(&dir.path().join("ledger.db")).expect("ledger");
        let open = write(&mut ledger, &record(JobState::Succeeded, None));
        let by_publish = write(&mut ledger, &record(JobState::Merged, None));
        let later = write(
            &mut ledger,
            &record(JobState::Merged, Some("branch_merged")),
        );
        let deleted = write(
            &mut ledger,
            &record(JobState::Succeeded, Some("branch_deleted")),
        );
        let settled = |id: &str| ledger.published(id).expect("read").and_then(|p| p.settled);
        assert_eq!(settled(&open), None);
        assert_eq!(settled(&by_publish).as_deref(), Some("publish_merged"));
        assert_eq!(settled(&later).as_deref(), Some("branch_merged"));
        assert_eq!(settled(&deleted).as_deref(), Some("branch_deleted"));
        let watched = ledger.watched_branches(10).expect("watched");
        assert_eq!(watched.len(), 1);
        assert_eq!(watched[0].execution_id, open);
        assert_eq!(watched[0].git.tip.as_deref(), Some("abcd1234"));
        let all = crate::history::Filter::default();
        let merged = ledger
            .settled_counts(&all, "project", true)
            .expect("counts");
        assert_eq!(merged, vec![("p".to_owned(), 2)]);
        let deleted = ledger
            .settled_counts(&all, "project", false)
            .expect("counts");
        assert_eq!(deleted, vec![("p".to_owned(), 1)]);
        // A failed job publishes nothing.
        let failed = write(&mut ledger, &record(JobState::Failed, None));
        assert_eq!(ledger.published(&failed).expect("read"), None);
    }

    #[test]
    fn a_branch_is_settled_once_and_the_schema_refuses_a_merge_without_its_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ledger = Ledger::open(&dir.path().join("ledger.db")).expect("ledger");
        let id = write(&mut ledger, &record(JobState::Succeeded, None));
        let now = Timestamp::now().epoch_ms();
        ledger
            .settle_branch(&id, Settled::BranchMerged, Some((now, "cafe")), now)
            .expect("settle");
        // A second settle (a pass that raced a cut-short one) changes nothing.
        ledger
            .settle_branch(&id, Settled::BranchDeleted, None, now + 1)
            .expect("no-op");
        let row = ledger.published(&id).expect("read").expect("row");
        assert_eq!(row.settled.as_deref(), Some("branch_merged"));
        assert_eq!(row.merge_commit.as_deref(), Some("cafe"));
        assert!(ledger.watched_branches(10).expect("watched").is_empty());
        let other = write(&mut ledger, &record(JobState::Succeeded, None));
        let err = ledger.settle_branch(&other, Settled::BranchMerged, None, now);
        assert!(err.is_err(), "a merge needs its time");
        let err = ledger.settle_branch(&other, Settled::BranchMerged, Some((1000, "x")), now);
        assert!(err.is_err(), "a merge in 1970 is impossible");
    }
}
