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
        Ok(CompletionSummary::of(&ended, &attention))
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
        })
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
}
