//! Keeping the monitor's own files in place while its job runs. The job
//! runs as the same user and may delete or replace anything under its run
//! folder; before each write of the record (heartbeat, a stage's start, the
//! end) the monitor puts back what is gone:
//!
//! - the run folder and the job's own workdir;
//! - `monitor.lock`, locked again: the first lock stays held by its
//!   descriptor whatever became of the file, and the daemon judges
//!   liveness by the proven monitor process and the lock's holder, never
//!   by the file's presence alone;
//! - `events.jsonl`, reopened with `seq` carried on;
//! - `job.log`, reopened with its byte count and cap carried on
//!   (`output.rs`).
//!
//! `job.json` itself is rewritten whole by the write that follows, so a
//! record the job deleted or filled with garbage is restored by it.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::Monitor;
use crate::fsio;

impl Monitor<'_> {
    /// Put back the run folder, the workdir, the lock, the events file and
    /// the log if the job removed or replaced them. Fail-soft: the write that
    /// follows reports what could not be restored.
    pub(super) fn restore_records(&mut self) {
        let id = self.rec.job_id.clone();
        for dir in [self.layout.run_dir(&id), self.layout.job_workdir(&id)] {
            if !is_dir(&dir) {
                match fsio::create_dirs(self.layout.root(), &dir) {
                    Ok(()) => {
                        tracing::warn!(job = %id, "{} was removed by the job; created it again", dir.display())
                    }
                    Err(e) => tracing::warn!(job = %id, "{e}"),
                }
            }
        }
        self.relock();
        self.events.reopen_if_replaced();
        if let Some(log) = &self.log {
            super::output::lock(log)
                .reopen_if_replaced(self.layout.root(), &self.layout.job_log(&id));
        }
    }

    /// Lock `monitor.lock` again if the file we hold is no longer there.
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
        match fsio::try_lock(&path) {
            Ok(Some(lock)) => {
                tracing::warn!(job = %job, "{} was removed or replaced by the job; locked it again", path.display());
                self.locks.push(lock);
            }
            Ok(None) => {
                tracing::warn!(job = %job, "{} was replaced by a file another process locks; the monitor keeps its own lock", path.display())
            }
            Err(e) => tracing::warn!(job = %job, "{e}; the monitor keeps its own lock"),
        }
    }
}

/// A real folder, not a symlink to one.
fn is_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}
