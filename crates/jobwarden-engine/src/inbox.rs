//! Watching: inotify read on the daemon's runtime (`inbox/tree_watch.rs`)
//! turned into a channel of [`Signal`]s for the daemon's loop, and the full
//! rescans that catch what events missed. Deciding what to claim is the
//! daemon's; this module only says what happened and where. The same watch
//! follows `control/` (pause markers) and, on an inotify instance of its
//! own, queued jobs' run folders (their `ABORT`: `inbox/queued_aborts.rs`).
//!
//! Completeness rule (DESIGN §2): a prompt that arrived by rename, or whose
//! writer closed it, is complete and is claimed at once. A file merely
//! created may still be being written, so it waits for its close; one found
//! only by a rescan is claimed once its mtime is `settle` old.
//!
//! The inbox folder itself may be deleted, moved away or replaced while we
//! watch it: inotify then reports the old folder gone (or silently keeps
//! watching the moved one), so the watcher says so ([`Signal::InboxGone`]),
//! remembers which folder (device, inode) it watches, and can be started
//! again on the folder now at `inbox/` ([`InboxWatcher::restart`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tokio::sync::mpsc;

use crate::failure::DaemonError;
use jobwarden_model::job::JobId;
use jobwarden_model::layout::{Layout, PROMPT_SUFFIX};
use jobwarden_sys::fsio;

mod queued_aborts;
mod tree_watch;

use queued_aborts::QueuedAborts;
use tree_watch::TreeWatch;

/// What the watcher tells the daemon.
#[derive(Debug)]
pub enum Signal {
    /// A file is complete at this path (renamed in, closed after writing, or
    /// a symlink created): a candidate to claim now.
    Complete(PathBuf),
    /// A folder appeared (created or moved in): its contents need a scan.
    Folder(PathBuf),
    /// An ABORT marker appeared for a job whose run folder is watched.
    Abort(JobId),
    /// A request to change its priority appeared for such a job.
    Priority(JobId),
    /// Events were lost (queue overflow) or the watch failed: rescan.
    Lost(String),
    /// The watched inbox folder itself was deleted or moved away: the
    /// watch must be started again on whatever is at `inbox/` now.
    InboxGone(&'static str),
    /// Something under `control/` changed (a pause marker written or
    /// removed): the markers need reading again.
    Control,
}

/// The inbox watcher. Dropping it stops the watch.
pub struct InboxWatcher {
    /// `None` between a failed restart and the next one.
    watcher: Option<TreeWatch>,
    tx: mpsc::UnboundedSender<Signal>,
    layout: Layout,
    /// Device and inode of the inbox folder being watched.
    watching: (u64, u64),
    /// Queued jobs' run folders, watched for their ABORT; `None` if no
    /// inotify instance could be had (the tick reads the markers).
    aborts: Option<QueuedAborts>,
}

impl InboxWatcher {
    /// Watch `inbox/` recursively; signals arrive on the returned channel.
    /// The inbox must be a real folder (a symlink is refused).
    pub fn start(layout: &Layout) -> Result<(Self, mpsc::UnboundedReceiver<Signal>), DaemonError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let aborts = QueuedAborts::start(tx.clone())
            .inspect_err(|e| {
                tracing::info!(
                    "no inotify for queued jobs' ABORT ({e}); the tick reads their markers"
                )
            })
            .ok();
        let mut watcher = InboxWatcher {
            watcher: None,
            tx,
            layout: layout.clone(),
            watching: (0, 0),
            aborts,
        };
        watcher.restart()?;
        Ok((watcher, rx))
    }

    /// Drop the current watch and watch the folder now at `inbox/` (after
    /// it was deleted and recreated, or replaced). Signals keep arriving on
    /// the same channel; the queued jobs' watches are not touched.
    pub fn restart(&mut self) -> Result<(), DaemonError> {
        self.watcher = None;
        let inbox = self.layout.inbox();
        let watch_err = |source| DaemonError::Watch {
            path: inbox.clone(),
            source,
        };
        // Refuse a symlinked inbox before watching (the watch would follow
        // it; every folder below is watched without following).
        let identity = fsio::dir_identity(self.layout.root(), &inbox)?;
        let watcher = TreeWatch::start(
            &self.layout,
            &inbox,
            &self.layout.control(),
            self.tx.clone(),
        )
        .map_err(watch_err)?;
        self.watcher = Some(watcher);
        self.watching = identity;
        Ok(())
    }

    /// Stop watching until the next [`InboxWatcher::restart`] (the inbox is
    /// refused: events from it must not arrive).
    pub fn pause(&mut self) {
        self.watcher = None;
    }

    /// Is the folder at `inbox/` still the one being watched? False when
    /// there is no watch, or `inbox/` is gone, replaced or not a folder.
    pub fn watches_current_inbox(&self) -> bool {
        self.watcher.is_some()
            && fsio::dir_identity(self.layout.root(), &self.layout.inbox())
                .is_ok_and(|id| id == self.watching)
    }

    /// Also watch a queued job's run folder, so its ABORT is seen at once.
    /// Best effort: without a watch the daemon's tick still finds the marker.
    /// A marker put there before the watch began (the job's record said
    /// `queued` before the daemon queued it) is told at once as well.
    pub fn watch_queued(&mut self, id: &JobId) {
        if let Some(aborts) = &self.aborts {
            aborts.watch(id, &self.layout.run_dir(id));
        }
        if jobwarden_model::abort::requested(&self.layout, id) {
            // The receiver lives as long as the daemon's loop.
            let _ = self.tx.send(Signal::Abort(id.clone()));
        }
    }

    /// Stop watching a job's run folder: it started or left the queue.
    pub fn unwatch_queued(&mut self, id: &JobId) {
        if let Some(aborts) = &self.aborts {
            aborts.unwatch(id);
        }
    }
}

/// Say once per process that a folder in the inbox is a symlink and is
/// never followed (a rescan meets it again every `rescan_interval`).
fn warn_symlinked_folder(path: &Path) {
    static WARNED: std::sync::Mutex<Option<HashSet<PathBuf>>> = std::sync::Mutex::new(None);
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned
        .get_or_insert_with(HashSet::new)
        .insert(path.to_path_buf())
    {
        tracing::warn!(
            "{} is a symlink to a folder: never followed, nothing in it is claimed; put a real folder there",
            path.display()
        );
    }
}

/// A prompt candidate found by a scan, with its mtime for the settle rule.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    pub mtime: SystemTime,
}

/// Every `*.prompt.md` under `dir` (a folder under `root`), recursively,
/// skipping hidden folders and never following symlinked folders, `dir`
/// itself included (each folder is listed through a safe handle).
/// Unreadable or refused folders are logged and skipped: one bad folder
/// must not hide the rest of the inbox.
pub fn scan(root: &Path, dir: &Path) -> Vec<Found> {
    scan_suffix(root, dir, PROMPT_SUFFIX)
}

/// [`scan`] for files ending in `suffix`.
pub fn scan_suffix(root: &Path, dir: &Path, suffix: &str) -> Vec<Found> {
    scan_matching(root, dir, |name| {
        !name.starts_with(b".") && name.ends_with(suffix.as_bytes())
    })
}

/// The dotfiles ending in `suffix` under `dir` (claim records, beside
/// their prompts), found as [`scan_suffix`] finds prompts.
pub fn scan_dotted_suffix(root: &Path, dir: &Path, suffix: &str) -> Vec<Found> {
    scan_matching(root, dir, |name| {
        name.starts_with(b".") && name.ends_with(suffix.as_bytes())
    })
}

/// Every file under `dir` whose name `matches`; folders whose name starts
/// with a dot are not entered.
fn scan_matching(root: &Path, dir: &Path, matches: impl Fn(&[u8]) -> bool) -> Vec<Found> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match fsio::read_dir(root, &d) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("scanning {}: {e}", d.display());
                continue;
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let bytes = name.as_encoded_bytes();
            if bytes.starts_with(b".") && !matches(bytes) {
                continue;
            }
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                Err(e) => {
                    tracing::warn!("scanning {}: {e}", d.join(&name).display());
                    continue;
                }
            };
            let path = d.join(&name);
            if meta.is_dir() {
                if !bytes.starts_with(b".") {
                    stack.push(path);
                }
            } else if meta.file_type().is_symlink() && path.is_dir() {
                warn_symlinked_folder(&path);
            } else if matches(bytes) {
                let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                found.push(Found { path, mtime });
            }
        }
    }
    found
}

/// Rename the claimed prompt at `running` back to its waiting name, or,
/// if a newer drop took that name, to a `.recovered-<ms>` sibling. Where
/// it went; `None` if it was gone already.
pub fn put_back(
    layout: &Layout,
    prompt: &jobwarden_model::layout::PromptName,
    running: &std::path::Path,
) -> Result<Option<std::path::PathBuf>, jobwarden_sys::error::IoError> {
    let back = layout.waiting_prompt(prompt);
    match jobwarden_sys::fsio::rename_noreplace(layout.root(), running, &back)? {
        jobwarden_sys::fsio::Renamed::Done => Ok(Some(back)),
        jobwarden_sys::fsio::Renamed::SourceGone => Ok(None),
        jobwarden_sys::fsio::Renamed::TargetExists => {
            let aside =
                layout.recovered_prompt(prompt, jobwarden_sys::clock::Timestamp::now().epoch_ms());
            let moved = jobwarden_sys::fsio::rename_noreplace(layout.root(), running, &aside)?;
            Ok((moved == jobwarden_sys::fsio::Renamed::Done).then_some(aside))
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures
mod tests {
    use super::*;

    #[test]
    fn scan_finds_prompts_at_any_depth_and_skips_hidden_and_symlinked_dirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inbox = dir.path();
        std::fs::create_dir_all(inbox.join("a/b")).expect("dirs");
        std::fs::create_dir_all(inbox.join(".hidden")).expect("dirs");
        for p in [
            "top.prompt.md",
            "a/b/deep.prompt.md",
            ".hidden/x.prompt.md",
            "a/other.md",
            "a/x.running.md",
        ] {
            std::fs::write(inbox.join(p), "x").expect("write");
        }
        std::os::unix::fs::symlink(inbox.join("a"), inbox.join("link")).expect("symlink dir");
        std::os::unix::fs::symlink(inbox.join("top.prompt.md"), inbox.join("l.prompt.md"))
            .expect("symlink");
        let mut names: Vec<_> = scan(inbox, inbox)
            .into_iter()
            .map(|f| {
                f.path
                    .strip_prefix(inbox)
                    .expect("under inbox")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec!["a/b/deep.prompt.md", "l.prompt.md", "top.prompt.md"]
        );
    }
}
