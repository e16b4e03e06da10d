//! What needs the operator's attention, and its acknowledgement.
//!
//! A prompt needs attention when its newest execution went wrong
//! ([`Outcome::needs_attention`]: a failure, a timeout, a rate limit, a
//! setup failure), until the operator acknowledges that execution
//! (`jobwarden ack`, a row in `acknowledgements`). Only that execution is
//! acknowledged: a newer one of the same prompt that goes wrong needs
//! attention again. The newest execution of each prompt is the
//! `prompts_last` table (kept by a trigger), so every question here is an
//! indexed lookup.
//!
//! A success whose published branch was deleted without being merged
//! needs attention too (its work is in no target): it is listed with the
//! outcome [`BRANCH_DELETED`] and a reason saying what to do, and is
//! acknowledged like the rest.

use rusqlite::{OptionalExtension, params, params_from_iter};
use serde::Serialize;

use super::{Ledger, LedgerError, Outcome};

/// A prompt whose newest execution went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attention {
    pub project: String,
    pub name: String,
    pub outcome: String,
    /// The execution (job) id.
    pub job_id: String,
    /// Epoch ms.
    pub finished_at: u64,
    /// Its `state_reason`: for a setup failure, what to fix.
    pub reason: Option<String>,
}

/// What a prompt's newest execution says about the attention it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// It went wrong; acknowledged or not.
    Needs {
        attention: Attention,
        acknowledged: bool,
    },
    /// It did not go wrong (or nothing of the prompt was ever recorded):
    /// `(job id, outcome)` of the newest, if any.
    Fine(Option<(String, String)>),
}

/// The outcome names that need attention, as SQL string literals.
fn attention_outcomes() -> String {
    Outcome::ALL
        .into_iter()
        .filter(|o| o.needs_attention())
        .map(|o| format!("'{}'", o.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The outcome an attention lists for a success whose branch was deleted
/// unmerged (the execution's own outcome stays `success`).
pub const BRANCH_DELETED: &str = "branch_deleted";

/// The columns of an [`Attention`]: a deleted branch's outcome and reason
/// from its `published` row (`pb`, joined by [`FROM_LAST`]).
const ATTENTION_COLUMNS: &str = "p.project, p.name, \
     CASE WHEN pb.execution_id IS NULL THEN p.outcome ELSE 'branch_deleted' END, \
     p.execution_id, p.finished_at, \
     CASE WHEN pb.execution_id IS NULL THEN e.error_message ELSE \
       'its branch ' || pb.branch || ' was deleted without being merged into ' || pb.target \
       || ': its work is not there; run the prompt again, or ack it' END";

/// Each prompt's newest execution (`p`), its row (`e`) and its published
/// branch if that was deleted unmerged (`pb`).
const FROM_LAST: &str = "prompts_last p JOIN executions e ON e.id = p.execution_id \
     LEFT JOIN published pb ON pb.execution_id = p.execution_id AND pb.settled = 'branch_deleted'";

fn attention_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Attention> {
    Ok(Attention {
        project: r.get(0)?,
        name: r.get(1)?,
        outcome: r.get(2)?,
        job_id: r.get(3)?,
        finished_at: r.get::<_, i64>(4)?.max(0) as u64,
        reason: r.get(5)?,
    })
}

impl Ledger {
    /// Prompts needing attention that nobody acknowledged, newest first.
    pub fn prompts_needing_attention(&self, limit: usize) -> Result<Vec<Attention>, LedgerError> {
        self.attention_where(false, limit)
    }

    /// Prompts needing attention, acknowledged (`true`) or not.
    fn attention_where(
        &self,
        acknowledged: bool,
        limit: usize,
    ) -> Result<Vec<Attention>, LedgerError> {
        let not = if acknowledged { "" } else { "NOT " };
        let sql = format!(
            "SELECT {ATTENTION_COLUMNS} FROM {FROM_LAST}
             WHERE (p.outcome IN ({}) OR pb.execution_id IS NOT NULL)
               AND {not}EXISTS (SELECT 1 FROM acknowledgements a WHERE a.execution_id = p.execution_id)
             ORDER BY p.finished_at DESC LIMIT ?1",
            attention_outcomes()
        );
        let run = || -> rusqlite::Result<Vec<Attention>> {
            let mut stmt = self.conn.prepare_cached(&sql)?;
            let rows = stmt.query_map([limit.min(i64::MAX as usize) as i64], attention_from_row)?;
            rows.collect()
        };
        run().map_err(|e| self.err(e))
    }

    /// How many prompts need attention that was acknowledged (their newest
    /// execution went wrong, and `ack` cleared it).
    pub fn acknowledged_count(&self) -> Result<u64, LedgerError> {
        let sql = format!(
            "SELECT COUNT(*) FROM {FROM_LAST}
             WHERE (p.outcome IN ({}) OR pb.execution_id IS NOT NULL)
               AND EXISTS (SELECT 1 FROM acknowledgements a WHERE a.execution_id = p.execution_id)",
            attention_outcomes()
        );
        self.conn
            .query_row(&sql, [], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
            .map_err(|e| self.err(e))
    }

    /// Where the prompt of execution `id` stands: its newest execution and
    /// whether that needs attention. `None` when `id` has no execution row
    /// (the job has not ended, or its row is not written yet).
    pub fn standing_of(&self, id: &str) -> Result<Option<Standing>, LedgerError> {
        let prompt: Option<(String, String)> = self
            .conn
            .query_row(
                "SELECT project, name FROM executions WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let Some((project, name)) = prompt else {
            return Ok(None);
        };
        let sql = format!(
            "SELECT {ATTENTION_COLUMNS},
                    EXISTS (SELECT 1 FROM acknowledgements a WHERE a.execution_id = p.execution_id)
             FROM {FROM_LAST}
             WHERE p.project = ?1 AND p.name = ?2"
        );
        let newest = self
            .conn
            .query_row(&sql, params![project, name], |r| {
                Ok((attention_from_row(r)?, r.get::<_, bool>(6)?))
            })
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(Some(match newest {
            Some((a, acknowledged)) if needs_attention(&a.outcome) => Standing::Needs {
                attention: a,
                acknowledged,
            },
            Some((a, _)) => Standing::Fine(Some((a.job_id, a.outcome))),
            None => Standing::Fine(None),
        }))
    }

    /// Acknowledge execution `id`; false if it already was.
    pub fn acknowledge(
        &mut self,
        id: &str,
        at_ms: u64,
        by: Option<&str>,
    ) -> Result<bool, LedgerError> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO acknowledgements (execution_id, acknowledged_at, acknowledged_by)
                 VALUES (?1, ?2, ?3)",
                params![id, at_ms as i64, by],
            )
            .map(|n| n == 1)
            .map_err(|e| self.err(e))
    }

    /// Acknowledge every prompt that needs attention now, in one
    /// transaction; those acknowledged, newest first.
    pub fn acknowledge_all(
        &mut self,
        at_ms: u64,
        by: Option<&str>,
    ) -> Result<Vec<Attention>, LedgerError> {
        let pending = self.attention_where(false, usize::MAX)?;
        let ids = pending.iter().map(|a| a.job_id.as_str());
        let run = |conn: &mut rusqlite::Connection| -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            {
                let mut stmt = tx.prepare(
                    "INSERT OR IGNORE INTO acknowledgements (execution_id, acknowledged_at, acknowledged_by)
                     VALUES (?1, ?2, ?3)",
                )?;
                for id in ids {
                    stmt.execute(params_from_iter([
                        rusqlite::types::Value::from(id.to_owned()),
                        rusqlite::types::Value::from(at_ms as i64),
                        by.map_or(rusqlite::types::Value::Null, |b| b.to_owned().into()),
                    ]))?;
                }
            }
            tx.commit()
        };
        run(&mut self.conn).map_err(|e| self.err(e))?;
        Ok(pending)
    }
}

fn needs_attention(outcome: &str) -> bool {
    outcome == BRANCH_DELETED
        || outcome
            .parse::<Outcome>()
            .is_ok_and(Outcome::needs_attention)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Execution, Source};

    fn ledger() -> (tempfile::TempDir, Ledger) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = Ledger::open(&dir.path().join("ledger.db")).expect("ledger");
        (dir, ledger)
    }

    fn record(ledger: &mut Ledger, id: &str, name: &str, outcome: Outcome, at: u64) {
        let mut e = Execution::new(
            id.to_owned(),
            "p",
            name,
            outcome,
            crate::T0 + at,
            "h",
            Source::Daemon,
        );
        e.error_message = Some(format!("{outcome} of {id}"));
        ledger.record(&e, &[], &[]).expect("record");
    }

    #[test]
    fn an_acknowledged_failure_needs_no_attention_until_a_newer_one() {
        let (_d, mut ledger) = ledger();
        record(&mut ledger, "a1", "a", Outcome::Failure, 10);
        record(&mut ledger, "b1", "b", Outcome::SetupFailed, 20);
        record(&mut ledger, "c1", "c", Outcome::Aborted, 30);
        let ids = |l: &Ledger| -> Vec<String> {
            let list = l.prompts_needing_attention(10).expect("attention");
            list.into_iter().map(|a| a.job_id).collect()
        };
        assert_eq!(ids(&ledger), ["b1", "a1"]);
        assert!(ledger.acknowledge("a1", 40, Some("me")).expect("ack"));
        assert!(!ledger.acknowledge("a1", 41, None).expect("again"));
        assert_eq!(ids(&ledger), ["b1"]);
        assert_eq!(ledger.acknowledged_count().expect("count"), 1);
        record(&mut ledger, "a2", "a", Outcome::Timeout, 50);
        assert_eq!(ids(&ledger), ["a2", "b1"]);
        assert_eq!(ledger.acknowledged_count().expect("count"), 0);
        let all = ledger.acknowledge_all(60, None).expect("all");
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].reason.as_deref(), Some("setup_failed of b1"));
        assert!(ids(&ledger).is_empty());
        assert_eq!(ledger.acknowledged_count().expect("count"), 2);
    }

    #[test]
    fn the_standing_of_an_execution_is_that_of_its_prompts_newest() {
        let (_d, mut ledger) = ledger();
        record(&mut ledger, "a1", "a", Outcome::Failure, 10);
        record(&mut ledger, "a2", "a", Outcome::Success, 20);
        record(&mut ledger, "b1", "b", Outcome::RateLimited, 10);
        assert_eq!(
            ledger.standing_of("a1").expect("a1"),
            Some(Standing::Fine(Some(("a2".into(), "success".into()))))
        );
        match ledger.standing_of("b1").expect("b1") {
            Some(Standing::Needs {
                attention,
                acknowledged: false,
            }) => assert_eq!(attention.job_id, "b1"),
            other => panic!("{other:?}"),
        }
        assert_eq!(ledger.standing_of("nope").expect("none"), None);
    }
}
