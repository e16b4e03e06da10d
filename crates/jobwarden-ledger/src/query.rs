//! Reads of the ledger that drive decisions: a prompt's last run (for
//! cooldown, attempt numbers and interrupt limits). History listings live
//! with their commands.

use std::time::Duration;

use rusqlite::{OptionalExtension, params};

use super::{Ledger, LedgerError, Outcome};

/// The latest execution of one prompt, as far as decisions need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastRun {
    pub id: String,
    pub attempt: u32,
    pub outcome: Outcome,
    pub finished_at: u64,
    pub requeued: bool,
    /// The profile it ran under: its cooldowns apply.
    pub profile: Option<String>,
}

impl LastRun {
    /// When the cooldown this run causes ends (epoch ms), if it has not yet
    /// at `now_ms`. Only `failure`, `timeout` and `rate_limited` cool.
    pub fn cooldown_end(&self, c: Cooldowns, now_ms: u64) -> Option<u64> {
        let span = match self.outcome {
            Outcome::RateLimited => c.rate_limited,
            o if o.causes_cooldown() => c.failure,
            _ => return None,
        };
        let span_ms = u64::try_from(span.as_millis()).unwrap_or(u64::MAX);
        let until = self.finished_at.saturating_add(span_ms);
        (until > now_ms).then_some(until)
    }
}

/// How long each cooling outcome defers the next claim.
#[derive(Debug, Clone, Copy)]
pub struct Cooldowns {
    /// After `failure` and `timeout`.
    pub failure: Duration,
    /// After `rate_limited`.
    pub rate_limited: Duration,
}

/// How an execution ended, as its ledger row says: the second witness of
/// a job's end besides its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub outcome: Outcome,
    /// Epoch ms.
    pub finished_at: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub failure_stage: Option<String>,
    pub error_message: Option<String>,
    pub result_ref: Option<String>,
}

impl Ledger {
    /// The end the ledger holds for execution `id`, if it holds one.
    pub fn ended(&self, id: &str) -> Result<Option<Ended>, LedgerError> {
        // Asked at every end, as the two below are at every claim and end:
        // compiled once per connection.
        let row = self
            .conn
            .prepare_cached(
                "SELECT outcome, finished_at, exit_code, signal, failure_stage, error_message, result_ref
                 FROM executions WHERE id = ?1 ORDER BY rowid DESC LIMIT 1",
            )
            .and_then(|mut row| {
                row.query_row([id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        Ended {
                            outcome: Outcome::Interrupted,
                            finished_at: 0,
                            exit_code: r.get(2)?,
                            signal: r.get(3)?,
                            failure_stage: r.get(4)?,
                            error_message: r.get(5)?,
                            result_ref: r.get(6)?,
                        },
                    ))
                })
                .optional()
            })
            .map_err(|e| self.err(e))?;
        let Some((outcome, finished_at, mut ended)) = row else {
            return Ok(None);
        };
        ended.outcome = outcome
            .parse()
            .map_err(|m: String| self.err(super::refusal(m)))?;
        ended.finished_at = finished_at.max(0) as u64;
        Ok(Some(ended))
    }

    /// The newest execution of `(project, name)` that ran or was meant to
    /// (a `rejected` drop ran nothing and decides nothing), if any. An outcome this
    /// build does not know (written by a newer one) is reported as an error.
    pub fn last_run(&self, project: &str, name: &str) -> Result<Option<LastRun>, LedgerError> {
        let row = self
            .conn
            .prepare_cached(
                "SELECT id, attempt, outcome, finished_at, disposition, profile FROM executions
                 WHERE project = ?1 AND name = ?2 AND outcome != 'rejected'
                 ORDER BY rowid DESC LIMIT 1",
            )
            .and_then(|mut row| {
                row.query_row(params![project, name], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, u32>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<String>>(5)?,
                    ))
                })
                .optional()
            })
            .map_err(|e| self.err(e))?;
        let Some((id, attempt, outcome, finished_at, disposition, profile)) = row else {
            return Ok(None);
        };
        let outcome = outcome
            .parse()
            .map_err(|m: String| self.err(super::refusal(m)))?;
        Ok(Some(LastRun {
            id,
            attempt,
            outcome,
            finished_at: finished_at.max(0) as u64,
            requeued: disposition.as_deref() == Some("requeued"),
            profile,
        }))
    }

    /// Until when (epoch ms) `(project, name)` is in cooldown, if it is now.
    pub fn cooldown_until(
        &self,
        project: &str,
        name: &str,
        c: Cooldowns,
        now_ms: u64,
    ) -> Result<Option<u64>, LedgerError> {
        Ok(self
            .last_run(project, name)?
            .and_then(|last| last.cooldown_end(c, now_ms)))
    }

    /// The outcomes of the attempts that led to the prompt's next one,
    /// newest first: the run of newest rows that requeued it (a row that
    /// archived it, or an external record, ends the chain). Empty for a
    /// fresh drop.
    pub fn retry_chain(&self, project: &str, name: &str) -> Result<Vec<Outcome>, LedgerError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT outcome, disposition FROM executions
                 WHERE project = ?1 AND name = ?2 AND outcome != 'rejected'
                 ORDER BY rowid DESC LIMIT 1000",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![project, name], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
            })
            .map_err(|e| self.err(e))?;
        let mut chain = Vec::new();
        for row in rows {
            let (outcome, disposition) = row.map_err(|e| self.err(e))?;
            if disposition.as_deref() != Some("requeued") {
                break;
            }
            let outcome = outcome
                .parse()
                .map_err(|m: String| self.err(super::refusal(m)))?;
            chain.push(outcome);
        }
        Ok(chain)
    }

    /// Does a row for execution `id` exist?
    pub fn has_execution(&self, id: &str) -> Result<bool, LedgerError> {
        self.conn
            .prepare_cached("SELECT 1 FROM executions WHERE id = ?1")
            .and_then(|mut row| row.exists([id]))
            .map_err(|e| self.err(e))
    }
}
