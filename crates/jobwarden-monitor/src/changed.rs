//! The files a job changed in the git checkout its main command worked in,
//! recorded with its execution without its help (`jobwarden_sys::git::
//! changes`): the checkout looked at as the command starts and as it
//! ends. Only a workdir that is in a checkout when the command starts is
//! looked at, and finding that out costs no process: a `.git` is looked
//! for in the workdir and its parents (up to its run folder, when the
//! workdir is the job's own). The paths join the job's own `affected`
//! list; a `changed_files` event says how many, and whether they were cut.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::Monitor;
use jobwarden_model::events::Op;
use jobwarden_sys::git::changes::{self, Before};

/// How long one git command here may take: a job's start waits for it.
const GIT_TIMEOUT: Duration = Duration::from_secs(20);
/// The most changed files recorded.
const MAX_PATHS: usize = 5_000;

impl Monitor<'_> {
    /// The checkout the main command's workdir is in, as it is now.
    pub(super) async fn checkout_before(&self) -> Option<Before> {
        let workdir = PathBuf::from(self.rec.workdir.as_deref()?);
        let run_dir = self.layout.run_dir(&self.rec.job_id);
        if !in_a_checkout(&workdir, &run_dir) {
            return None;
        }
        changes::before(&workdir, GIT_TIMEOUT).await
    }

    /// What changed in the checkout since `before`: kept for the job's
    /// paths, and said in an event.
    pub(super) async fn checkout_after(&mut self, before: Option<Before>) {
        let Some(before) = before else {
            return;
        };
        let changed = changes::after(&before, GIT_TIMEOUT, MAX_PATHS).await;
        self.events.append(
            Op::ChangedFiles,
            json!({"files": changed.paths.len(), "cut": changed.cut}),
        );
        self.changed = changed.paths;
    }
}

/// Is there a `.git` in `workdir` or a parent (not above `run_dir` when
/// the workdir is inside it)?
fn in_a_checkout(workdir: &Path, run_dir: &Path) -> bool {
    let stop = workdir.starts_with(run_dir).then_some(run_dir);
    let mut dir = Some(workdir);
    while let Some(d) = dir {
        if std::fs::symlink_metadata(d.join(".git")).is_ok() {
            return true;
        }
        if Some(d) == stop {
            return false;
        }
        dir = d.parent();
    }
    false
}
