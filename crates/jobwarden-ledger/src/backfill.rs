//! Backfill: every terminal `runs/*/job.json` without its ledger row gets
//! one (source `repair`), so a failed insert never loses an execution; and
//! the job index is brought in line with `runs/` (rows upserted from every
//! readable record, rows of ended jobs whose folders vanished dropped).
//! Idempotent; run by `history repair`. (A starting daemon does the same in
//! its start-up check, `recover/sweep.rs`, through its loop.) A record whose
//! monitor still lives is left to it (it writes its own row, racing us
//! otherwise).

use serde::Serialize;

use super::{Artifact, Execution, IndexedJob, Ledger, Outcome, Source};
use jobwarden_model::job::JobRecord;
use jobwarden_model::layout::Layout;

/// What a backfill did.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub checked: usize,
    pub inserted: usize,
    pub failed: usize,
    /// Jobs in the index afterwards (one per readable record).
    pub indexed: usize,
    /// Index rows dropped because their run folders are gone.
    pub unindexed: usize,
}

/// Tail of `job.log` kept when the per-stream tails are gone.
const LOG_TAIL: u64 = 64 * 1024;

/// Every terminal record under `runs/` whose row is missing gets one,
/// unless `being_finished` says someone is about to write it; the job
/// index learns every record.
pub fn run(
    layout: &Layout,
    ledger: &mut Ledger,
    being_finished: &dyn Fn(&JobRecord) -> bool,
) -> Report {
    let mut report = Report::default();
    let ids = match layout.job_ids() {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!("backfill: reading {}: {e}", layout.runs().display());
            report.failed += 1;
            return report;
        }
    };
    let mut index = Vec::with_capacity(ids.len());
    for id in ids {
        let Ok(rec) = JobRecord::load_job(layout, &id) else {
            continue;
        };
        index.push(IndexedJob::from_record(&rec));
        if !rec.state.is_terminal() {
            continue;
        }
        report.checked += 1;
        if !ledger.has_execution(rec.job_id.as_str()).unwrap_or(true) && being_finished(&rec) {
            continue;
        }
        match ensure_row(layout, ledger, &rec) {
            Ok(true) => report.inserted += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(job = %id, "backfill: {e}");
                report.failed += 1;
            }
        }
    }
    // A row missing from our listing may be a job claimed since: it is
    // dropped only if its folder is really gone.
    let gone = |id: &str| {
        jobwarden_model::job::JobId::parse(id)
            .ok()
            .is_none_or(|id| std::fs::symlink_metadata(layout.run_dir(&id)).is_err())
    };
    match ledger.sync_job_index(&index, gone) {
        Ok(gone) => {
            report.indexed = index.len();
            report.unindexed = gone;
        }
        Err(e) => {
            tracing::warn!("backfill: the job index: {e}");
            report.failed += 1;
        }
    }
    if report.inserted > 0 {
        tracing::info!(
            rows = report.inserted,
            "backfilled ledger rows from job records"
        );
    }
    report
}

/// Insert the row of terminal record `rec` if it is missing; true if inserted.
pub fn ensure_row(
    layout: &Layout,
    ledger: &mut Ledger,
    rec: &JobRecord,
) -> Result<bool, super::LedgerError> {
    ensure_row_with(layout, ledger, rec, None)
}

/// [`ensure_row`], with what the job's monitor handed over for its row
/// (the output tails and paths), if it did: the row is then the one the
/// monitor would have written, else a backfill with the log's tail.
pub fn ensure_row_with(
    layout: &Layout,
    ledger: &mut Ledger,
    rec: &JobRecord,
    handed: Option<&super::Handed>,
) -> Result<bool, super::LedgerError> {
    if ledger.has_execution(rec.job_id.as_str())? {
        return Ok(false);
    }
    let outcome = outcome_of(rec);
    if let Some(handed) = handed {
        let exec = Execution::of_job(layout, rec, outcome, Source::Daemon);
        return ledger.record(&exec, &handed.artifacts, &handed.paths);
    }
    let exec = Execution::of_job(layout, rec, outcome, Source::Repair);
    let artifacts: Vec<Artifact> = log_tail(layout, rec).into_iter().collect();
    ledger.record(&exec, &artifacts, &[])
}

/// [`ensure_row_with`] of an end handed over by its monitor, and the job
/// index told of the end, in one transaction (the daemon's common end: one
/// commit, not two). `Ok(true)` when the row was written now.
pub fn record_handed_end(
    layout: &Layout,
    ledger: &mut Ledger,
    rec: &JobRecord,
    handed: &super::Handed,
) -> Result<bool, super::LedgerError> {
    let outcome = outcome_of(rec);
    let exec = Execution::of_job(layout, rec, outcome, Source::Daemon);
    let indexed = crate::IndexedJob::from_record(rec);
    ledger.record_indexed(&exec, &handed.artifacts, &handed.paths, &indexed)
}

/// The ledger outcome of an ended record: the one it names, else its
/// state's (`interrupted` when neither says).
fn outcome_of(rec: &JobRecord) -> Outcome {
    rec.outcome
        .as_deref()
        .and_then(|o| o.parse::<Outcome>().ok())
        .or_else(|| Outcome::of_state(rec.state))
        .unwrap_or(Outcome::Interrupted)
}

/// The job log's tail, standing in for the per-stream tails.
fn log_tail(layout: &Layout, rec: &JobRecord) -> Option<Artifact> {
    let path = layout.job_log(&rec.job_id);
    let (buf, len) = match jobwarden_sys::fsio::read_tail(layout.root(), &path, LOG_TAIL) {
        Ok(read) => read,
        Err(e) if jobwarden_sys::fsio::is_refusal(&e) => {
            tracing::warn!(job = %rec.job_id, "{e}; its log tail is left out of the ledger");
            return None;
        }
        Err(_) => return None,
    };
    Some(Artifact {
        kind: "log_tail",
        text: String::from_utf8_lossy(&buf).into_owned(),
        truncated: len > LOG_TAIL,
        bytes: len,
    })
}
