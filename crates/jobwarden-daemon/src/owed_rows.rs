//! Ledger writes the daemon owes: ends whose ledger row or job-index row
//! could not be written when they were recorded (the disk full, the ledger
//! refusing writes), while their `job.json` was. They are written from the
//! records at the next ticks, once writes succeed again, so that the
//! running daemon's history and its `status` (read from the index) converge
//! without waiting for a restart's start-up check.
//!
//! Only ids are kept, one per job; the record is the source of what is
//! written (`backfill.rs`), as after a crash.

use super::Daemon;
use jobwarden_ledger::{Ledger, backfill};
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::Layout;

impl Daemon {
    /// Job `id`'s ledger row or index row could not be written: owed.
    pub(super) fn owe_row(&mut self, id: &JobId) {
        if self.owed_rows.insert(id.clone()) && self.owed_rows.len() == 1 {
            tracing::warn!(job = %id, "the ledger did not take a job's end; it is written from job.json as soon as the ledger takes writes again");
        }
    }

    /// At a tick while storage accepts writes: write what is owed. Each
    /// written is forgotten; the rest waits for the next tick.
    pub(super) fn write_owed_rows(&mut self) {
        if self.owed_rows.is_empty() || !self.storage.is_ok() {
            return;
        }
        self.refresh_ledger();
        let Some(ledger) = self.ledger.as_mut() else {
            // A damaged ledger: `history repair` rebuilds every row.
            return;
        };
        let before = self.owed_rows.len();
        let layout = &self.layout;
        self.owed_rows
            .retain(|id| !write_from_record(layout, ledger, id));
        let written = before - self.owed_rows.len();
        if written > 0 {
            tracing::info!(
                rows = written,
                left = self.owed_rows.len(),
                "wrote the ledger rows of ends it had not taken"
            );
        }
    }
}

/// Write job `id`'s ledger row (if it ended) and its index row from its
/// record; true when nothing more is owed (a record that cannot be read
/// is left to the start-up check, as after a crash).
fn write_from_record(layout: &Layout, ledger: &mut Ledger, id: &JobId) -> bool {
    let Ok(rec) = JobRecord::load_job(layout, id) else {
        return true;
    };
    if rec.state.is_terminal()
        && let Err(e) = backfill::ensure_row(layout, ledger, &rec)
    {
        tracing::debug!(job = %id, "still owed: {e}");
        return false;
    }
    match ledger.index_job(&rec) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(job = %id, "its index row still owed: {e}");
            false
        }
    }
}
