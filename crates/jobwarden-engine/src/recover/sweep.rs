//! The start-up check: the full pass over `runs/` that a starting daemon
//! no longer makes before its first claims (see [`super`]), made after
//! them, off the daemon's loop. It catches what the start-up
//! reconciliation cannot see through the job index: a run folder whose
//! index row is missing or stale, an ended job without its ledger row, an
//! ended job whose prompt was not moved yet, a corrupt `job.json`, a
//! claimed prompt that no job holds.
//!
//! It reads, and writes only the job index (a cache: upserts never replace
//! a newer snapshot, and only rows of ended jobs whose run folders are gone
//! are dropped — a claim writes its row before its folder). Everything it
//! finds that changes a job or a prompt — a ledger row, a record, a move —
//! it sends to the daemon's loop ([`Found`]), which acts on it under the
//! turn at `claim.lock`, skipping the jobs it owns: so nothing here races
//! the loop, its monitors or `jobwarden abort`.
//!
//! It holds at most a page of rows and the few records that matter, never
//! the listing: its memory does not grow with the jobs on disk.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use serde::Serialize;

use jobwarden_ledger::{IndexedJob, Ledger, LedgerError};
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::Layout;

/// What the check sends to the daemon's loop, in this order.
#[derive(Debug)]
pub enum Found {
    /// Ended jobs without their ledger row (sent a batch at a time).
    Rows(Vec<JobId>),
    /// The listing is complete.
    Done(Findings),
}

/// What the listing of `runs/` found for the loop to act on.
#[derive(Debug, Default)]
pub struct Findings {
    /// The claimed prompts (`*.running.md`) there were when the check
    /// began: the only ones it may take for orphans (a claim the loop
    /// makes after that is its own).
    pub claimed: Vec<PathBuf>,
    /// Those of `claimed` that a record not ended (or another host's)
    /// holds.
    pub held: HashSet<PathBuf>,
    /// Records not ended: those the loop does not own lost their place.
    pub unended: Vec<JobId>,
    /// Records that do not parse or fail their checks.
    pub corrupt: Vec<JobId>,
    /// Records whose `job.json` is behind their journal (read from it).
    pub behind: Vec<JobId>,
    /// For each of `claimed` (the path first), the newest ended record
    /// naming it.
    pub ended: Vec<(PathBuf, JobId)>,
    pub report: Report,
}

/// What the check did, for its log line.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// Run folders read.
    pub checked: usize,
    /// Ended jobs found without their ledger row.
    pub rows_missing: usize,
    /// Index rows written (missing or stale).
    pub reindexed: usize,
    /// Index rows dropped: their run folders are gone.
    pub unindexed: usize,
    /// Steps that failed (each logged).
    pub failed: usize,
}

/// Ended jobs without a row are sent this many at a time.
const ROWS_BATCH: usize = 64;

/// Index rows are written, and walked, this many at a time.
const PAGE: usize = 512;

/// Check every run folder (see the module doc), telling the loop through
/// `send`, which returns false once the loop is gone; `gone` says so
/// without sending (the check then stops: a stopping daemon does not wait
/// for it). `ledger` is the check's own connection, if the ledger opens.
pub fn check(
    layout: &Layout,
    config: &jobwarden_model::config::Config,
    host: &str,
    mut ledger: Option<Ledger>,
    send: &mut dyn FnMut(Found) -> bool,
    gone: &dyn Fn() -> bool,
) {
    jobwarden_sys::fault::pause("startup-check");
    let mut sweep = Sweep {
        layout,
        host,
        ledger: ledger.as_mut(),
        claimed: super::claimed_prompts(layout, config).into_iter().collect(),
        newest_ended: HashMap::new(),
        rows: Vec::new(),
        stale: Vec::new(),
        found: Findings::default(),
    };
    let ids = match layout.each_job_id() {
        Ok(ids) => ids,
        Err(e) => {
            tracing::error!("start-up check: reading {}: {e}", layout.runs().display());
            sweep.found.report.failed += 1;
            send(Found::Done(sweep.done()));
            return;
        }
    };
    for id in ids {
        if gone() {
            return;
        }
        match id {
            Ok(id) => sweep.record(id),
            Err(e) => {
                tracing::warn!("start-up check: reading {}: {e}", layout.runs().display());
                sweep.found.report.failed += 1;
            }
        }
        if sweep.rows.len() >= ROWS_BATCH && !send(Found::Rows(std::mem::take(&mut sweep.rows))) {
            return;
        }
    }
    sweep.flush_index();
    sweep.drop_gone_rows(gone);
    if !sweep.rows.is_empty() && !send(Found::Rows(std::mem::take(&mut sweep.rows))) {
        return;
    }
    send(Found::Done(sweep.done()));
}

struct Sweep<'a> {
    layout: &'a Layout,
    host: &'a str,
    ledger: Option<&'a mut Ledger>,
    claimed: HashSet<PathBuf>,
    /// For each claimed prompt, the newest ended record naming it.
    newest_ended: HashMap<PathBuf, (Option<u64>, JobId)>,
    rows: Vec<JobId>,
    /// Index rows to write.
    stale: Vec<IndexedJob>,
    found: Findings,
}

impl Sweep<'_> {
    /// Look at one run folder's record.
    fn record(&mut self, id: JobId) {
        self.found.report.checked += 1;
        let rec = match JobRecord::load_job_view(self.layout, &id) {
            Ok((rec, behind)) => {
                if behind {
                    self.found.behind.push(id.clone());
                }
                rec
            }
            Err(jobwarden_model::job::RecordError::BadRecord { .. }) => {
                return self.found.corrupt.push(id);
            }
            // No record: a claim cut short (its claimed prompt, if any, is
            // an orphan), or a folder removed since the listing.
            Err(e) => {
                if std::fs::symlink_metadata(self.layout.run_dir(&id)).is_ok() {
                    tracing::warn!(job = %id, "no usable record: {e}");
                }
                return;
            }
        };
        self.reindex(&rec);
        let running = self.layout.running_prompt(&rec.prompt_name());
        let claimed = self.claimed.contains(&running);
        if rec.host != self.host || !rec.state.is_terminal() {
            // Only the claimed prompts the check began with are judged:
            // what it keeps stays as small as they are few.
            if claimed {
                self.found.held.insert(running);
            }
            if rec.host == self.host {
                self.found.unended.push(id);
            }
            return;
        }
        if self.row_missing(&rec) {
            self.found.report.rows_missing += 1;
            self.rows.push(id.clone());
        }
        if claimed {
            let key = (rec.finished_at.map(|t| t.epoch_ms()), id);
            let newest = self
                .newest_ended
                .entry(running)
                .or_insert_with(|| key.clone());
            if key > *newest {
                *newest = key;
            }
        }
    }

    /// Queue the record's index row if the index lacks it or holds an
    /// older snapshot; written a page at a time.
    fn reindex(&mut self, rec: &JobRecord) {
        let Some(ledger) = self.ledger.as_deref() else {
            return;
        };
        let fresh = IndexedJob::from_record(rec);
        match ledger.indexed_job(rec.job_id.as_str()) {
            Ok(Some(row)) if row == fresh => {}
            Ok(_) => self.stale.push(fresh),
            Err(e) => failed(&mut self.found.report, "reading the job index", &e),
        }
        if self.stale.len() >= PAGE {
            self.flush_index();
        }
    }

    fn flush_index(&mut self) {
        let Some(ledger) = self.ledger.as_deref_mut() else {
            return;
        };
        let stale = std::mem::take(&mut self.stale);
        match ledger.index_jobs(&stale) {
            Ok(()) => self.found.report.reindexed += stale.len(),
            Err(e) => failed(&mut self.found.report, "writing the job index", &e),
        }
    }

    /// Does the ledger lack the row of ended record `rec`?
    fn row_missing(&mut self, rec: &JobRecord) -> bool {
        let Some(ledger) = self.ledger.as_deref() else {
            return false;
        };
        match ledger.has_execution(rec.job_id.as_str()) {
            Ok(has) => !has,
            Err(e) => {
                failed(&mut self.found.report, "reading the ledger", &e);
                false
            }
        }
    }

    /// Drop the rows of ended jobs whose run folders are gone (removed by
    /// hand), walking the index a page at a time.
    fn drop_gone_rows(&mut self, stop: &dyn Fn() -> bool) {
        let Some(ledger) = self.ledger.as_deref_mut() else {
            return;
        };
        let mut after = String::new();
        while !stop() {
            let page = match ledger.ended_job_ids_after(&after, PAGE) {
                Ok(page) => page,
                Err(e) => return failed(&mut self.found.report, "walking the job index", &e),
            };
            let Some(last) = page.last() else {
                return;
            };
            after = last.clone();
            let gone: Vec<String> = page
                .into_iter()
                .filter(|id| {
                    JobId::parse(id).is_ok_and(|id| {
                        std::fs::symlink_metadata(self.layout.run_dir(&id)).is_err()
                    })
                })
                .collect();
            match ledger.unindex_jobs(&gone) {
                Ok(()) => self.found.report.unindexed += gone.len(),
                Err(e) => return failed(&mut self.found.report, "dropping index rows", &e),
            }
        }
    }

    fn done(mut self) -> Findings {
        self.found.ended = self
            .newest_ended
            .into_iter()
            .map(|(running, (_, id))| (running, id))
            .collect();
        self.found.claimed = self.claimed.into_iter().collect();
        self.found
    }
}

/// Count a failed step; the first is logged (the ledger failing once
/// likely fails for every row).
fn failed(report: &mut Report, what: &str, e: &LedgerError) {
    if report.failed == 0 {
        tracing::warn!("start-up check: {what}: {e}");
    }
    report.failed += 1;
}
