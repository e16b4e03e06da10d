//! Keeping the monitor's own files in place while its job runs. The job
//! runs as the same user and may delete or replace anything under its run
//! folder; before each write of the record (heartbeat, a stage's start, the
//! end) the monitor puts back what is gone:
//!
//! - `runs/`, the run folder and the job's own workdir; one the job
//!   replaced by a symlink or a file (which every write refuses) is first
//!   moved aside under [`Layout::displaced`](jobwarden_model::layout::Layout::displaced),
//!   never deleted, and a real folder made in its place;
//! - the monitor's lock on the run folder, taken again on a folder made
//!   again: the first lock stays held by its descriptor whatever became of
//!   the folder, and the daemon judges liveness by the proven monitor
//!   process and the lock's holder, never by the lock alone;
//! - `events.jsonl`, reopened with `seq` carried on;
//! - `job.log`, reopened with its byte count and cap carried on
//!   (`output.rs`).
//!
//! `job.json` itself is rewritten whole by the write that follows, so a
//! record the job deleted or filled with garbage is restored by it.
//!
//! A job whose commands all ran in the sandbox (`sandbox.rs`) saw the root
//! read-only and can have removed none of these: the pass is skipped.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::Monitor;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::error::IoError;
use jobwarden_sys::fsio::{self, Renamed};

impl Monitor<'_> {
    /// Put back the run folder, the workdir, the lock, the events file and
    /// the log if the job removed or replaced them. Fail-soft: the write that
    /// follows reports what could not be restored. Nothing to do while every
    /// command of the job ran in the sandbox, which sees the root read-only.
    pub(super) fn restore_records(&mut self) {
        if !self.root_exposed {
            return;
        }
        let id = self.rec.job_id.clone();
        let dirs = [
            self.layout.runs(),
            self.layout.run_dir(&id),
            self.layout.job_workdir(&id),
        ];
        for dir in dirs {
            if let Err(e) = self.restore_dir(&dir) {
                tracing::warn!(job = %id, "{e}");
            }
        }
        self.relock();
        self.events.reopen_if_replaced();
        if let Some(log) = &self.log {
            super::output::lock(log)
                .reopen_if_replaced(self.layout.root(), &self.layout.job_log(&id));
        }
    }

    /// Make `dir` a real folder again if the job removed it or put
    /// something else (a symlink, a file) in its place.
    fn restore_dir(&self, dir: &Path) -> Result<(), IoError> {
        let job = &self.rec.job_id;
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(m) => {
                let aside = self.layout.displaced(dir, Timestamp::now().epoch_ms());
                let what = if m.is_symlink() {
                    "a symlink"
                } else {
                    "not a folder"
                };
                match fsio::rename_noreplace(self.layout.root(), dir, &aside)? {
                    Renamed::Done => {
                        tracing::warn!(job = %job, "{} was replaced by {what} (refused: nothing under the root is written through); moved it aside to {} and made the folder again", dir.display(), aside.display())
                    }
                    Renamed::SourceGone | Renamed::TargetExists => {}
                }
            }
            Err(_) => {
                tracing::warn!(job = %job, "{} was removed by the job; created it again", dir.display())
            }
        }
        fsio::create_dirs(self.layout.root(), dir)
    }

    /// Lock the run folder again if the folder we hold is no longer there.
    fn relock(&mut self) {
        let path = self.layout.monitor_lock(&self.rec.job_id);
        let held = self.locks.last().and_then(|l| l.metadata().ok());
        let on_disk = std::fs::symlink_metadata(&path).ok();
        if let (Some(held), Some(on_disk)) = (&held, &on_disk) {
            if (held.dev(), held.ino()) == (on_disk.dev(), on_disk.ino()) {
                return;
            }
        }
        let job = &self.rec.job_id;
        match fsio::try_lock_dir(self.layout.root(), &path) {
            Ok(Some(lock)) => {
                tracing::warn!(job = %job, "{} was removed or replaced by the job; locked it again", path.display());
                self.locks.push(lock);
            }
            Ok(None) => {
                tracing::warn!(job = %job, "{} was replaced by a folder another process locks; the monitor keeps its own lock", path.display())
            }
            Err(e) => tracing::warn!(job = %job, "{e}; the monitor keeps its own lock"),
        }
    }
}
