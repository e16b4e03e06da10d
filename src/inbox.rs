//! Watching: the bridge from `notify` (inotify) to a channel of
//! [`Signal`]s for the daemon's loop, and the full rescans that catch what
//! events missed. Deciding what to claim is the daemon's; this module only
//! says what happened and where.
//!
//! Completeness rule (DESIGN §2): a prompt that arrived by rename, or whose
//! writer closed it, is complete and is claimed at once. A file merely
//! created may still be being written, so it waits for its close; one found
//! only by a rescan is claimed once its mtime is `settle` old.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RenameMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::error::DaemonError;
use crate::job::JobId;
use crate::layout::{Layout, PROMPT_SUFFIX};

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
    /// Events were lost (queue overflow) or the watch failed: rescan.
    Lost(String),
}

/// The inbox watcher. Dropping it stops the watch.
pub struct InboxWatcher {
    watcher: RecommendedWatcher,
}

impl InboxWatcher {
    /// Watch `inbox/` recursively; signals arrive on the returned channel.
    pub fn start(layout: &Layout) -> Result<(Self, mpsc::UnboundedReceiver<Signal>), DaemonError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let handler_layout = layout.clone();
        let handler = move |res: notify::Result<Event>| {
            for signal in translate(&handler_layout, res) {
                // The receiver is gone only while the daemon shuts down.
                let _ = tx.send(signal);
            }
        };
        let inbox = layout.inbox();
        let watch_err = |source| DaemonError::Watch {
            path: inbox.clone(),
            source,
        };
        // Symlinked folders are never followed (a link to elsewhere must not
        // make files outside the root claimable); scans agree.
        let config = notify::Config::default().with_follow_symlinks(false);
        let mut watcher = RecommendedWatcher::new(handler, config).map_err(watch_err)?;
        watcher
            .watch(&inbox, RecursiveMode::Recursive)
            .map_err(watch_err)?;
        Ok((InboxWatcher { watcher }, rx))
    }

    /// Also watch a queued job's run folder, so its ABORT is seen at once.
    /// Best effort: without a watch the daemon's tick still finds the marker.
    pub fn watch_run_dir(&mut self, dir: &Path) {
        if let Err(e) = self.watcher.watch(dir, RecursiveMode::NonRecursive) {
            tracing::debug!(
                "not watching {}: {e}; its ABORT is checked on the tick",
                dir.display()
            );
        }
    }

    pub fn unwatch_run_dir(&mut self, dir: &Path) {
        let _ = self.watcher.unwatch(dir);
    }
}

fn translate(layout: &Layout, res: notify::Result<Event>) -> Vec<Signal> {
    let event = match res {
        Ok(event) => event,
        Err(e) => return vec![Signal::Lost(format!("inotify error: {e}"))],
    };
    if event.need_rescan() {
        return vec![Signal::Lost("inotify queue overflowed".into())];
    }
    let target = match event.kind {
        // A rename delivers the destination last.
        EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both)) => {
            event.paths.last()
        }
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => event.paths.first(),
        EventKind::Create(CreateKind::Folder) => {
            return event.paths.into_iter().map(Signal::Folder).collect();
        }
        EventKind::Create(_) => event
            .paths
            .first()
            .filter(|p| is_symlink(p) || is_abort(layout, p)),
        _ => None,
    };
    let Some(path) = target else {
        return Vec::new();
    };
    if let Some(id) = layout.abort_marker_job(path) {
        return vec![Signal::Abort(id)];
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => vec![Signal::Folder(path.clone())],
        _ => vec![Signal::Complete(path.clone())],
    }
}

fn is_symlink(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

fn is_abort(layout: &Layout, p: &Path) -> bool {
    layout.abort_marker_job(p).is_some()
}

/// A prompt candidate found by a scan, with its mtime for the settle rule.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    pub mtime: SystemTime,
}

/// Every `*.prompt.md` under `dir`, recursively, skipping hidden folders
/// and never following symlinked folders. Unreadable folders are logged
/// and skipped: one bad folder must not hide the rest of the inbox.
pub fn scan(dir: &Path) -> Vec<Found> {
    scan_suffix(dir, PROMPT_SUFFIX)
}

/// [`scan`] for files ending in `suffix`.
pub fn scan_suffix(dir: &Path, suffix: &str) -> Vec<Found> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("scanning {}: {e}", d.display());
                continue;
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                Err(e) => {
                    tracing::warn!("scanning {}: {e}", entry.path().display());
                    continue;
                }
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if name.as_encoded_bytes().ends_with(suffix.as_bytes()) {
                let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                found.push(Found {
                    path: entry.path(),
                    mtime,
                });
            }
        }
    }
    found
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
        let mut names: Vec<_> = scan(inbox)
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
