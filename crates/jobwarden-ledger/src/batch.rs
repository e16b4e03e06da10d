//! The completion summary `status` gives once the queue has drained (and
//! the `all_done` notification carries): the last batch of work, what
//! became of it, how long it took, its longest job and what of it needs
//! attention.
//!
//! A batch is the last busy stretch read from the job index: the jobs
//! whose time from claim to end chains together, gaps of nothing claimed
//! or running shorter than [`IDLE_ENDS_A_BATCH`] included (a script
//! dropping its prompts one after another makes one batch).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{IndexedJob, Ledger, LedgerError};
use jobwarden_sys::clock::Timestamp;

/// Nothing claimed or running for this long ends a batch.
pub const IDLE_ENDS_A_BATCH_MS: u64 = 30_000;

/// How many of the latest ended jobs a batch is looked for in.
pub const SCANNED: usize = 10_000;

/// `completion_summary` of `status --json`.
#[derive(Debug, Serialize)]
pub struct CompletionSummary {
    /// When the batch's first job was claimed, and its last ended.
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub elapsed_ms: u64,
    pub jobs: usize,
    /// How many ended in each state (`succeeded`, `failed`, …).
    pub by_state: BTreeMap<String, u64>,
    /// The job that ran longest, if any ran.
    pub longest: Option<Longest>,
    /// Jobs of the batch whose prompt's last run needs attention.
    pub needs_attention: Vec<String>,
    /// The job whose end came last, a merge of its branch learned after
    /// it ended counting as its end.
    pub last: Option<LastEnd>,
}

/// `completion_summary.last`: the batch's last job and its end.
#[derive(Debug, Serialize)]
pub struct LastEnd {
    pub id: String,
    pub project: String,
    pub name: String,
    /// Its state now (`merged` once its branch was found merged).
    pub state: String,
    /// When its run ended.
    pub finished_at: Timestamp,
    /// When its branch was merged (null unless it was).
    pub merged_at: Option<Timestamp>,
    /// The later of the two.
    pub ended_at: Timestamp,
}

#[derive(Debug, Serialize)]
pub struct Longest {
    pub id: String,
    pub project: String,
    pub name: String,
    pub duration_ms: u64,
}

impl Ledger {
    /// The summary of the last batch the job index holds; `None` when
    /// nothing ended.
    pub fn completion_summary(&self) -> Result<Option<CompletionSummary>, LedgerError> {
        let ended = self.recently_finished(SCANNED)?;
        // Every one of the batch's, not only the few `status` lists.
        let needing = self.prompts_needing_attention(SCANNED)?;
        let attention: Vec<&str> = needing.iter().map(|a| a.job_id.as_str()).collect();
        let since = ended.iter().map(|j| j.created_at).min().unwrap_or(0);
        let merges = self.merges_since(since)?;
        Ok(CompletionSummary::of(&ended, &attention).map(|s| s.with_last(&ended, &merges)))
    }

    /// When each execution finished since `since_ms` had its branch
    /// merged: `(execution id, merged_at)`.
    fn merges_since(&self, since_ms: u64) -> Result<BTreeMap<String, u64>, LedgerError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT p.execution_id, p.merged_at FROM published p
                 JOIN executions e ON e.id = p.execution_id
                 WHERE p.merged_at IS NOT NULL AND e.finished_at >= ?1",
            )?;
            let rows = stmt.query_map([since_ms as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })?;
            rows.collect()
        })
    }
}

impl CompletionSummary {
    /// The summary of the last batch among `ended` (any order); `None`
    /// when nothing ended. `attention`: job ids that need attention.
    pub fn of(ended: &[IndexedJob], attention: &[&str]) -> Option<CompletionSummary> {
        let batch = last_batch(ended);
        let first = batch.iter().map(|j| j.created_at).min()?;
        let last = batch.iter().filter_map(|j| j.finished_at).max()?;
        let mut by_state = BTreeMap::new();
        for j in &batch {
            *by_state.entry(j.state.clone()).or_insert(0) += 1;
        }
        let longest = batch
            .iter()
            .filter_map(|j| Some((j, j.finished_at?.checked_sub(j.started_at?)?)))
            .max_by_key(|(_, took)| *took)
            .map(|(j, took)| Longest {
                id: j.id.clone(),
                project: j.project.clone(),
                name: j.name.clone(),
                duration_ms: took,
            });
        let needs_attention = batch
            .iter()
            .filter(|j| attention.contains(&j.id.as_str()))
            .map(|j| j.id.clone())
            .collect();
        Some(CompletionSummary {
            started_at: Timestamp::from_epoch_ms(first),
            finished_at: Timestamp::from_epoch_ms(last),
            elapsed_ms: last.saturating_sub(first),
            jobs: batch.len(),
            by_state,
            longest,
            needs_attention,
            last: None,
        })
    }

    /// The summary naming its last job, `merges` (execution id → when
    /// merged) counting as ends.
    fn with_last(mut self, ended: &[IndexedJob], merges: &BTreeMap<String, u64>) -> Self {
        let batch = last_batch(ended);
        self.last = batch
            .iter()
            .filter_map(|j| {
                let finished = j.finished_at?;
                let merged = merges.get(&j.id).copied();
                Some((
                    j,
                    finished,
                    merged,
                    merged.map_or(finished, |m| m.max(finished)),
                ))
            })
            .max_by_key(|(j, _, _, end)| (*end, j.created_at))
            .map(|(j, finished, merged, end)| LastEnd {
                id: j.id.clone(),
                project: j.project.clone(),
                name: j.name.clone(),
                state: j.state.clone(),
                finished_at: Timestamp::from_epoch_ms(finished),
                merged_at: merged.map(Timestamp::from_epoch_ms),
                ended_at: Timestamp::from_epoch_ms(end),
            });
        self
    }
}

/// The jobs of the last busy stretch: intervals from claim to end merged
/// where they overlap or the gap between them is short.
fn last_batch(ended: &[IndexedJob]) -> Vec<&IndexedJob> {
    let mut jobs: Vec<&IndexedJob> = ended.iter().filter(|j| j.finished_at.is_some()).collect();
    jobs.sort_by_key(|j| j.created_at);
    let mut batch: Vec<&IndexedJob> = Vec::new();
    let mut busy_until: u64 = 0;
    for j in jobs {
        let end = j.finished_at.unwrap_or(j.created_at).max(j.created_at);
        if !batch.is_empty() && j.created_at > busy_until.saturating_add(IDLE_ENDS_A_BATCH_MS) {
            batch.clear();
        }
        busy_until = busy_until.max(end);
        batch.push(j);
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, state: &str, created: u64, started: Option<u64>, finished: u64) -> IndexedJob {
        IndexedJob {
            id: id.into(),
            project: "p".into(),
            name: id.into(),
            state: state.into(),
            attempt: 1,
            created_at: created,
            started_at: started,
            finished_at: Some(finished),
            exit_code: None,
            state_reason: None,
            updated_at: finished,
            profile: None,
        }
    }

    #[test]
    fn the_last_busy_stretch_is_the_batch() {
        let min = 60_000;
        let jobs = [
            // An earlier batch, long over.
            job("old", "failed", 0, Some(0), min),
            // A long job the others ran beside, then one after a short gap.
            job("a", "succeeded", 100 * min, Some(100 * min), 110 * min),
            job("b", "failed", 101 * min, Some(101 * min), 102 * min),
            job(
                "c",
                "succeeded",
                110 * min + 20_000,
                Some(110 * min + 20_000),
                112 * min,
            ),
            job("never", "cancelled", 111 * min, None, 111 * min),
        ];
        let s = CompletionSummary::of(&jobs, &["b", "old"]).expect("a batch");
        assert_eq!(s.jobs, 4);
        assert_eq!(s.elapsed_ms, 12 * min);
        assert_eq!(s.by_state.get("succeeded"), Some(&2));
        assert_eq!(s.by_state.get("failed"), Some(&1));
        assert_eq!(s.by_state.get("cancelled"), Some(&1));
        let longest = s.longest.expect("longest");
        assert_eq!((longest.id.as_str(), longest.duration_ms), ("a", 10 * min));
        assert_eq!(s.needs_attention, ["b"]);
        assert!(CompletionSummary::of(&[], &[]).is_none());
    }

    #[test]
    fn the_last_job_is_the_one_that_ended_last_a_later_merge_counting() {
        let min = 60_000;
        let jobs = [
            job("a", "merged", 0, Some(0), 2 * min),
            job("b", "failed", min, Some(min), 3 * min),
        ];
        let s = CompletionSummary::of(&jobs, &[]).expect("a batch");
        let plain = s.with_last(&jobs, &BTreeMap::new()).last.expect("last");
        assert_eq!((plain.id.as_str(), plain.merged_at), ("b", None));
        let merges = BTreeMap::from([("a".to_owned(), 9 * min)]);
        let s = CompletionSummary::of(&jobs, &[]).expect("a batch");
        let last = s.with_last(&jobs, &merges).last.expect("last");
        assert_eq!((last.id.as_str(), last.state.as_str()), ("a", "merged"));
        assert_eq!(last.finished_at.epoch_ms(), 2 * min);
        assert_eq!(last.merged_at.map(|t| t.epoch_ms()), Some(9 * min));
        assert_eq!(last.ended_at.epoch_ms(), 9 * min);
    }
}
