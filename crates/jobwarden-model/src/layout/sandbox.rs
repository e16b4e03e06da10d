//! What of the root a sandboxed job may write: its workdir's place below
//! the root, judged against every name the layout uses there.

use std::path::{Path, PathBuf};

use super::Layout;
use crate::job_id::JobId;

impl Layout {
    /// Where a sandboxed job's workdir may be below the root, and which
    /// folder the job may then write: its own workdir, for a workdir in
    /// it; for one in a folder the layout does not use (a worktree
    /// `<root>/worktrees/<project>/<job id>`, say), the workdir's parent,
    /// so that a `prepare` can create it and a `publish` remove it (the
    /// workdir itself when its parent is the root). `Err` names what the
    /// workdir would expose. `Ok(None)`: the workdir is not below the root.
    pub fn sandbox_workdir(&self, id: &JobId, workdir: &Path) -> Result<Option<PathBuf>, String> {
        let Ok(rel) = workdir.strip_prefix(&self.root) else {
            return Ok(None);
        };
        if rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(format!(
                "workdir {} is not a plain path below the root",
                workdir.display()
            ));
        }
        let own = self.job_workdir(id);
        if workdir.starts_with(&own) {
            return Ok(Some(own));
        }
        let top = rel
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        match top.as_deref() {
            None => Err(format!("workdir {} is the root itself", workdir.display())),
            Some(name) if self.root_names().iter().any(|n| is_kin(name, n)) => Err(format!(
                "workdir {} is inside {name}, which holds jobwarden's own records",
                workdir.display()
            )),
            Some(_) => match workdir.parent() {
                Some(parent) if parent != self.root => Ok(Some(parent.to_path_buf())),
                _ => Ok(Some(workdir.to_path_buf())),
            },
        }
    }

    /// Every name the layout uses at the top of the root, read off its
    /// own paths (a name followed by `.` or `-` and more is its kin:
    /// `ledger.db-wal`, a `daemon.json.corrupt-*`).
    fn root_names(&self) -> Vec<String> {
        [
            self.inbox(),
            self.runs(),
            self.archive(),
            self.control(),
            self.daemon_json(),
            self.daemon_lock(),
            self.gc_lock(),
            self.ledger(),
            self.web_token(),
            self.metrics_token(),
            self.slurm_queue(),
        ]
        .iter()
        .filter_map(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect()
    }
}

/// `name` is `of`, or `of` followed by `.` or `-` and more.
fn is_kin(name: &str, of: &str) -> bool {
    name.strip_prefix(of)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '-']))
}
