//! The reconcile of published work: at start and every
//! `reconcile_interval`, off the daemon's loop (claims never wait on it),
//! git is asked about every branch the ledger still watches, and running
//! jobs' worktrees are looked for.
//!
//! - A branch merged into its target: its job moves `succeeded → merged`
//!   (reason `branch_merged`, with `merged_at` and `merge_commit`), its
//!   archived prompt moves to `archive/merged/`, the ledger's `published`
//!   row is settled and the job index says `merged`.
//! - A branch deleted unmerged: the job stays `succeeded`; its record
//!   (`reconciled`), its events and the ledger say `branch_deleted`.
//! - A running job whose worktree is gone: an `ABORT` marker with the
//!   reason `worktree_missing`, which its monitor honours as any other;
//!   the job ends `aborted`. (A publishing one may remove its worktree
//!   itself.)
//!
//! Each is a `reconciled` (or `state`) event with its reason. Nothing is
//! deleted. Every step can be run again: a settle cut short by a crash is
//! finished by the next pass, since the ledger row is settled last.

use std::collections::{BTreeMap, HashMap};

use serde_json::json;

use jobwarden_ledger::{Ledger, Settled, Watched};
use jobwarden_model::config::Config;
use jobwarden_model::events::{EventLog, Op};
use jobwarden_model::job::{JobId, JobRecord, JobState, Reconciled};
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::git::{self, BranchState, GitWork, Merge};

/// At most this many branches are asked about in one pass (oldest
/// first); the rest wait for the next.
const MAX_WATCHED: u32 = 10_000;

/// What one pass did, for its log line and the tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    pub watched: usize,
    pub merged: usize,
    pub deleted: usize,
    pub worktrees_missing: usize,
    /// Repositories git could not answer for.
    pub unanswered: usize,
}

/// What a pass remembers for the next: the last error of each repository,
/// so that one that stays broken is logged once, not every pass.
#[derive(Debug, Default)]
pub struct Memory {
    errors: HashMap<String, String>,
}

/// One pass over the watched branches and the running jobs' worktrees.
/// A job found merged is told to the hooks (`merged`), when given.
pub async fn pass(
    layout: &Layout,
    config: &Config,
    memory: &mut Memory,
    hooks: Option<&crate::hooks::Hub>,
) -> PassReport {
    let mut report = PassReport::default();
    let mut ledger = match Ledger::open(&layout.ledger()) {
        Ok(ledger) => ledger,
        Err(e) => {
            let said = e.to_string();
            if memory.errors.insert(String::new(), said.clone()).as_ref() != Some(&said) {
                tracing::warn!("reconcile of published work skipped: {said}");
            }
            return report;
        }
    };
    memory.errors.remove("");
    worktrees(layout, config, &ledger, &mut report);
    let watched = match ledger.watched_branches(MAX_WATCHED) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("reconcile of published work skipped: {e}");
            return report;
        }
    };
    report.watched = watched.len();
    // Every repository at once: one whose remote hangs costs its own
    // deadline, not the others' answers.
    let mut surveys = tokio::task::JoinSet::new();
    for ((repo, fetch, target), jobs) in by_repository(watched) {
        surveys.spawn(async move {
            let branches: Vec<git::Asked<'_>> = jobs
                .iter()
                .map(|w| git::Asked {
                    branch: &w.git.branch,
                    tip: w.git.tip.as_deref(),
                })
                .collect();
            let survey = git::survey(
                &repo,
                fetch.as_deref(),
                &target,
                &branches,
                git::GIT_TIMEOUT,
            )
            .await;
            drop(branches);
            (repo, jobs, survey)
        });
    }
    while let Some(joined) = surveys.join_next().await {
        let Ok((repo, jobs, survey)) = joined else {
            report.unanswered += 1;
            continue;
        };
        let states = match survey {
            Ok(states) => {
                if memory.errors.remove(&repo).is_some() {
                    tracing::info!(repo, "git answers again for this repository");
                }
                states
            }
            Err(e) => {
                report.unanswered += 1;
                let said = e.to_string();
                if memory.errors.insert(repo.clone(), said.clone()).as_ref() != Some(&said) {
                    tracing::warn!(
                        "{said}; its {} published branch(es) are asked about again at the next reconcile",
                        jobs.len()
                    );
                }
                continue;
            }
        };
        for w in &jobs {
            match states.get(&w.git.branch) {
                Some(BranchState::Merged(merge)) => {
                    let rec = settle(layout, config, &mut ledger, w, Found::Merged(merge));
                    report.merged += 1;
                    let merged = rec.filter(|r| r.state == JobState::Merged);
                    if let (Some(hooks), Some(rec)) = (hooks, merged)
                        && hooks.wants("merged")
                    {
                        let notice =
                            crate::hooks::Notice::of_job("merged", &rec, layout, json!({}));
                        hooks.send(notice);
                    }
                }
                Some(BranchState::Deleted) => {
                    settle(layout, config, &mut ledger, w, Found::Deleted);
                    report.deleted += 1;
                }
                Some(BranchState::Open(_)) | None => {}
            }
        }
    }
    if report.merged + report.deleted + report.worktrees_missing > 0 {
        tracing::info!(
            merged = report.merged,
            branch_deleted = report.deleted,
            worktree_missing = report.worktrees_missing,
            "reconciled published work"
        );
    }
    report
}

/// The watched branches grouped by what one survey asks: repository,
/// remote fetched, target.
fn by_repository(
    watched: Vec<Watched>,
) -> BTreeMap<(String, Option<String>, String), Vec<Watched>> {
    let mut groups: BTreeMap<_, Vec<Watched>> = BTreeMap::new();
    for w in watched {
        // A row the schema let through but git must not see (written by a
        // hostile `history` call, or an older build) is skipped.
        if let Err(e) = w.git.check() {
            tracing::warn!(execution = %w.execution_id, "published work not watched: {e}");
            continue;
        }
        let key = (
            w.git.repo.clone(),
            w.git.fetch.clone(),
            w.git.target.clone(),
        );
        groups.entry(key).or_default().push(w);
    }
    groups
}

enum Found<'a> {
    Merged(&'a Merge),
    Deleted,
}

/// Record what was found about `w`'s branch: the job's record, its
/// archived prompt, its events, then the ledger (last: a pass cut short
/// leaves the branch watched, and the next finishes the settle).
/// The job's record as it now is, when it could be read and written.
fn settle(
    layout: &Layout,
    config: &Config,
    ledger: &mut Ledger,
    w: &Watched,
    found: Found<'_>,
) -> Option<JobRecord> {
    let now = Timestamp::now();
    let id = w.execution_id.as_str();
    // Retention's turn: a gc pass judging this job's folder and prompt
    // while they move would remove what it no longer finds, or leave what
    // moved. A pass under way: settled at the next reconcile.
    let _turn = match jobwarden_sys::fsio::try_lock(layout.root(), &layout.gc_lock()) {
        Ok(Some(turn)) => turn,
        Ok(None) => {
            tracing::debug!(
                job = id,
                "retention is running; settled at the next reconcile"
            );
            return None;
        }
        Err(e) => {
            tracing::warn!(job = id, "{e}; settled at the next reconcile");
            return None;
        }
    };
    let rec = JobId::parse(id)
        .ok()
        .map(|job| JobRecord::load_job(layout, &job));
    let mut kept = None;
    let merged = match (&found, rec) {
        (Found::Merged(merge), Some(Ok(mut rec))) => {
            match merge_record(layout, config, &mut rec, &w.git, merge, now) {
                Ok(()) => {
                    if let Err(e) = ledger.index_job(&rec) {
                        tracing::warn!(
                            job = id,
                            "{e}; the job index is refreshed at the next start"
                        );
                    }
                }
                Err(e) => {
                    tracing::error!(
                        job = id,
                        "recording its merge: {e}; tried again at the next reconcile"
                    );
                    return None;
                }
            }
            let merged = rec.merged_at.zip(rec.merge_commit.clone());
            kept = Some(rec);
            merged
        }
        (Found::Deleted, Some(Ok(mut rec))) => {
            if let Err(e) = deleted_record(layout, config, &mut rec, &w.git, now) {
                tracing::error!(
                    job = id,
                    "recording its deleted branch: {e}; tried again at the next reconcile"
                );
                return None;
            }
            kept = Some(rec);
            None
        }
        // No record (retention removed its run folder, or the row is not
        // a job's): the ledger is the one witness left.
        (found, rec) => {
            if let Some(Err(e)) = rec {
                tracing::info!(
                    job = id,
                    "its record cannot be read ({e}); its branch is settled in the ledger alone"
                );
            }
            match found {
                Found::Merged(m) => Some((clamp(m.committed_at, None, now), m.commit.clone())),
                Found::Deleted => None,
            }
        }
    };
    let how = match found {
        Found::Merged(_) => Settled::BranchMerged,
        Found::Deleted => Settled::BranchDeleted,
    };
    let merged = merged.as_ref().map(|(at, c)| (at.epoch_ms(), c.as_str()));
    if let Err(e) = ledger.settle_branch(id, how, merged, now.epoch_ms()) {
        tracing::warn!(
            job = id,
            "{e}; its branch is asked about again at the next reconcile"
        );
    }
    kept
}

/// `succeeded → merged` in the record (unless a pass cut short did it),
/// then the archived prompt's move.
fn merge_record(
    layout: &Layout,
    config: &Config,
    rec: &mut JobRecord,
    git: &GitWork,
    merge: &Merge,
    now: Timestamp,
) -> Result<(), crate::failure::JobError> {
    let mut events = events_of(layout, config, rec);
    if rec.state == JobState::Succeeded {
        let at = clamp(merge.committed_at, rec.finished_at, now);
        rec.merged_at = Some(at);
        rec.merge_commit = Some(merge.commit.clone());
        rec.reconciled = Some(Reconciled {
            reason: Settled::BranchMerged.as_str().into(),
            at: now,
        });
        let fields = json!({
            "merged_at": at,
            "merge_commit": merge.commit,
            "branch": git.branch,
            "target": git.target,
        });
        let reason = Some(Settled::BranchMerged.as_str().to_owned());
        rec.transition(layout, &mut events, JobState::Merged, reason, fields)?;
        tracing::info!(job = %rec.job_id, commit = %merge.commit, "job merged: its branch {} is in {}", git.branch, git.target);
    } else if rec.state != JobState::Merged {
        tracing::warn!(job = %rec.job_id, state = %rec.state, "its branch is merged, but its record is not succeeded; the record is left as it is");
        return Ok(());
    }
    crate::terminal::rearchive(layout, rec, &mut events)
}

/// The record and events of a job whose branch was deleted unmerged.
fn deleted_record(
    layout: &Layout,
    config: &Config,
    rec: &mut JobRecord,
    git: &GitWork,
    now: Timestamp,
) -> Result<(), crate::failure::JobError> {
    if rec.state != JobState::Succeeded || rec.reconciled.is_some() {
        return Ok(());
    }
    let reason = Settled::BranchDeleted.as_str();
    let mut events = events_of(layout, config, rec);
    events.append(
        Op::Reconciled,
        json!({"reason": reason, "branch": git.branch, "target": git.target}),
    );
    rec.reconciled = Some(Reconciled {
        reason: reason.into(),
        at: now,
    });
    rec.save(layout)?;
    tracing::warn!(job = %rec.job_id, "its branch {} was deleted without being merged into {}", git.branch, git.target);
    Ok(())
}

/// A running job whose worktree is gone is told to stop (an `ABORT`
/// marker its monitor honours), once. Not a publishing one: its publish
/// may remove the worktree itself, its work being pushed.
fn worktrees(layout: &Layout, config: &Config, ledger: &Ledger, report: &mut PassReport) {
    let live = [JobState::Running];
    let names = live.map(JobState::as_str);
    let jobs = match ledger.jobs_in_states(&names, MAX_WATCHED as usize) {
        Ok(jobs) => jobs,
        Err(e) => {
            tracing::warn!("worktrees not checked: {e}");
            return;
        }
    };
    for job in jobs {
        let Ok(id) = JobId::parse(&job.id) else {
            continue;
        };
        let Ok(rec) = JobRecord::load_job(layout, &id) else {
            continue;
        };
        let Some(git) = rec.git.as_ref().filter(|g| g.worktree_missing()) else {
            continue;
        };
        if !live.contains(&rec.state) || jobwarden_model::abort::requested(layout, &id) {
            continue;
        }
        // Read again right before: a job that moved on (to publishing, to
        // its end) since the first read is left alone.
        if !JobRecord::load_job(layout, &id).is_ok_and(|r| r.state == JobState::Running) {
            continue;
        }
        let worktree = git.worktree.as_deref().unwrap_or_default();
        let reason = format!("worktree_missing: {worktree} is gone");
        match jobwarden_model::abort::write_marker_by(
            layout,
            &id,
            Some(&reason),
            "jobwarden reconcile",
        ) {
            Ok(_) => {
                report.worktrees_missing += 1;
                tracing::warn!(job = %id, "its worktree {worktree} is gone while it runs; the job is aborted");
                // The monitor writes its own events: this one is appended
                // under the events file's lock like theirs.
                let mut events = events_of(layout, config, &rec);
                events.append(
                    Op::Reconciled,
                    json!({"reason": "worktree_missing", "worktree": worktree}),
                );
            }
            Err(e) => {
                tracing::warn!(job = %id, "its worktree {worktree} is gone, but it cannot be aborted: {e}")
            }
        }
    }
}

fn events_of(layout: &Layout, config: &Config, rec: &JobRecord) -> EventLog {
    EventLog::open(
        layout.root(),
        &layout.events(&rec.job_id),
        config.events_for(rec),
    )
}

/// A merge's time: its commit's, but never before the job ended (a
/// fast-forward to a commit made earlier) nor after now (a clock ahead).
fn clamp(committed: Option<Timestamp>, ended: Option<Timestamp>, now: Timestamp) -> Timestamp {
    let at = committed.unwrap_or(now);
    let at = match ended {
        Some(end) if at.epoch_ms() < end.epoch_ms() => end,
        _ => at,
    };
    if at.epoch_ms() > now.epoch_ms() {
        now
    } else {
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_time_is_the_commit_s_within_the_job_s_end_and_now() {
        let at = |ms| Timestamp::from_epoch_ms(ms);
        let (end, now) = (at(2_000_000_000_000), at(2_000_000_900_000));
        let t = |c: Option<Timestamp>| clamp(c, Some(end), now).epoch_ms();
        assert_eq!(t(Some(at(2_000_000_500_000))), 2_000_000_500_000);
        assert_eq!(
            t(Some(at(1_000_000_000_000))),
            end.epoch_ms(),
            "a fast-forward to an old commit"
        );
        assert_eq!(
            t(Some(at(3_000_000_000_000))),
            now.epoch_ms(),
            "a commit from the future"
        );
        assert_eq!(t(None), now.epoch_ms());
    }
}
