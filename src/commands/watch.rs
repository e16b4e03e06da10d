//! How the waiting commands (`wait`, `submit --wait`, `abort --wait`,
//! `logs -f`) sleep until something they follow changes: inotify (through
//! `notify`) on the folders that matter — a job's run folder, where
//! `job.json` is replaced at every change; `runs/`, where new jobs appear;
//! inbox folders — with a bounded re-check in case an event is missed.
//! Where no watch can be had (inotify instances and watches are scarce
//! per-user resources), it polls at a fixed pace instead. Nothing here
//! reads what changed: the caller re-reads what the paths point at.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};

/// How often a follow of one job polls where no watch can be had.
pub const POLL: Duration = Duration::from_millis(100);
/// How often a follow of one job looks again without an event.
pub const RECHECK: Duration = Duration::from_secs(1);

/// Why [`Watch::wait`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Woken {
    /// These paths changed (every event already queued is taken).
    Changed(Vec<PathBuf>),
    /// The re-check interval passed, an event may have been lost, or
    /// nothing is watched: look at everything again.
    Recheck,
    /// The deadline given to [`Watch::wait`] passed.
    Deadline,
}

/// A set of watched folders and the pace of re-checks.
pub struct Watch {
    /// The watcher must live as long as its channel is read. `None` when
    /// inotify cannot be had: then every wait is a poll.
    inner: Option<(RecommendedWatcher, Receiver<Option<PathBuf>>)>,
    /// Watched folders and how many callers asked for each.
    watched: HashMap<PathBuf, usize>,
    /// Folders asked for that do not exist yet (`runs/` before a daemon
    /// ever ran, a project's inbox folder before its first prompt): tried
    /// again at every wait.
    missing: HashMap<PathBuf, (RecursiveMode, usize)>,
    /// A folder could not be watched: events may be missing, so poll.
    degraded: bool,
    recheck: Duration,
    poll: Duration,
}

impl Watch {
    /// A watch that re-checks every `recheck` even when no event comes,
    /// and polls every `poll` where no watch can be had.
    pub fn new(recheck: Duration, poll: Duration) -> Self {
        let (tx, rx) = channel();
        let handler = move |event: notify::Result<notify::Event>| {
            let _ = match event {
                // The kernel's queue overflowed: events were dropped.
                Ok(event) if event.need_rescan() => tx.send(None),
                // Reading is no change: `notify` reports every open, and
                // the caller's own re-read of `job.json` would wake it
                // again at once, for ever.
                Ok(event) if !is_change(&event.kind) => Ok(()),
                Ok(event) => event.paths.into_iter().try_for_each(|p| tx.send(Some(p))),
                // Other trouble: something may have been missed.
                Err(_) => tx.send(None),
            };
        };
        let inner = match RecommendedWatcher::new(handler, notify::Config::default()) {
            Ok(watcher) => Some((watcher, rx)),
            Err(e) => {
                tracing::debug!("cannot watch with inotify: {e}; polling every {poll:?}");
                None
            }
        };
        Watch {
            inner,
            watched: HashMap::new(),
            missing: HashMap::new(),
            degraded: false,
            recheck,
            poll,
        }
    }

    /// Watch `dir` (its entries; with `recursive`, its whole tree). A folder
    /// that does not exist yet is watched once it does; one that cannot be
    /// watched (a watch limit reached) makes every later wait a poll.
    pub fn add(&mut self, dir: &Path, recursive: bool) {
        if let Some(count) = self.watched.get_mut(dir) {
            *count += 1;
            return;
        }
        if let Some((_, count)) = self.missing.get_mut(dir) {
            *count += 1;
            return;
        }
        let mode = if recursive {
            RecursiveMode::Recursive
        } else {
            RecursiveMode::NonRecursive
        };
        if self.start(dir, mode) {
            self.watched.insert(dir.to_path_buf(), 1);
        } else if !self.degraded {
            self.missing.insert(dir.to_path_buf(), (mode, 1));
        }
    }

    /// Stop watching `dir` once every caller that added it has removed it.
    pub fn remove(&mut self, dir: &Path) {
        if let Some((_, count)) = self.missing.get_mut(dir) {
            *count -= 1;
            if *count == 0 {
                self.missing.remove(dir);
            }
            return;
        }
        let Some(count) = self.watched.get_mut(dir) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.watched.remove(dir);
            if let Some((watcher, _)) = self.inner.as_mut() {
                // Gone with its folder already: nothing left to undo.
                let _ = watcher.unwatch(dir);
            }
        }
    }

    /// Start the inotify watch of `dir`: false when it does not exist
    /// (or with no inotify at all); any other failure degrades to polling.
    fn start(&mut self, dir: &Path, mode: RecursiveMode) -> bool {
        let Some((watcher, _)) = self.inner.as_mut() else {
            return false;
        };
        match watcher.watch(dir, mode) {
            Ok(()) => true,
            Err(e) if is_not_found(&e) => false,
            Err(e) => {
                tracing::debug!("cannot watch {}: {e}; polling", dir.display());
                self.degraded = true;
                false
            }
        }
    }

    /// Watch the folders that have appeared since they were asked for;
    /// true if one has (what it holds was never seen: look again).
    fn start_missing(&mut self) -> bool {
        let mut appeared = false;
        for (dir, (mode, count)) in std::mem::take(&mut self.missing) {
            if self.start(&dir, mode) {
                self.watched.insert(dir, count);
                appeared = true;
            } else if !self.degraded {
                self.missing.insert(dir, (mode, count));
            }
        }
        appeared
    }

    /// Sleep until a watched folder changes, the re-check is due, or
    /// `deadline` passes, whichever comes first.
    pub fn wait(&mut self, deadline: Option<Instant>) -> Woken {
        if self.start_missing() {
            return Woken::Recheck;
        }
        let pace = match &self.inner {
            Some(_) if !self.degraded => self.recheck,
            _ => self.poll,
        };
        let now = Instant::now();
        let until_deadline = deadline.map(|d| d.saturating_duration_since(now));
        let timeout = until_deadline.map_or(pace, |d| d.min(pace));
        let woken = match &self.inner {
            Some((_, rx)) if !self.degraded => receive(rx, timeout),
            inner => {
                std::thread::sleep(timeout);
                // Events of the folders still watched are not needed.
                if let Some((_, rx)) = inner {
                    while rx.try_recv().is_ok() {}
                }
                Woken::Recheck
            }
        };
        match (woken, until_deadline) {
            (Woken::Recheck, Some(left)) if left <= pace => Woken::Deadline,
            (woken, _) => woken,
        }
    }
}

/// Does an event say that something changed? Opens and reads do not; a
/// file closed after writing does.
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(access) => *access == AccessKind::Close(AccessMode::Write),
        _ => true,
    }
}

fn is_not_found(e: &notify::Error) -> bool {
    match &e.kind {
        notify::ErrorKind::PathNotFound => true,
        notify::ErrorKind::Io(io) => io.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

/// The first event within `timeout`, with every other one already queued.
fn receive(rx: &Receiver<Option<PathBuf>>, timeout: Duration) -> Woken {
    let first = match rx.recv_timeout(timeout) {
        Ok(first) => first,
        Err(RecvTimeoutError::Timeout) => return Woken::Recheck,
        // The watcher's thread is gone: fall back to a poll's pace.
        Err(RecvTimeoutError::Disconnected) => {
            std::thread::sleep(timeout);
            return Woken::Recheck;
        }
    };
    let mut paths = Vec::new();
    let mut lost = false;
    for event in std::iter::once(first).chain(std::iter::from_fn(|| rx.try_recv().ok())) {
        match event {
            Some(path) => paths.push(path),
            None => lost = true,
        }
    }
    if lost {
        Woken::Recheck
    } else {
        Woken::Changed(paths)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures
mod tests {
    use super::*;

    #[test]
    fn a_change_in_a_watched_folder_wakes_with_its_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut watch = Watch::new(Duration::from_secs(30), POLL);
        watch.add(dir.path(), false);
        if watch.inner.is_none() || watch.degraded {
            return; // no inotify here: the poll path is all there is
        }
        std::fs::write(dir.path().join("job.json"), "{}").expect("write");
        let deadline = Instant::now() + Duration::from_secs(10);
        match watch.wait(Some(deadline)) {
            Woken::Changed(paths) => {
                assert!(paths.iter().any(|p| p.ends_with("job.json")), "{paths:?}")
            }
            other => panic!("expected a change, got {other:?}"),
        }
    }

    #[test]
    fn a_folder_made_later_is_watched_once_it_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let later = dir.path().join("runs");
        let mut watch = Watch::new(Duration::from_secs(30), POLL);
        watch.add(&later, false);
        assert!(!watch.degraded, "a missing folder is no reason to poll");
        if watch.inner.is_none() {
            return;
        }
        std::fs::create_dir(&later).expect("mkdir");
        assert_eq!(watch.wait(None), Woken::Recheck, "appeared: look again");
        std::fs::write(later.join("job.json"), "{}").expect("write");
        let deadline = Instant::now() + Duration::from_secs(10);
        assert!(matches!(watch.wait(Some(deadline)), Woken::Changed(_)));
    }

    #[test]
    fn reading_a_watched_file_wakes_nobody() {
        let dir = tempfile::tempdir().expect("tempdir");
        let record = dir.path().join("job.json");
        std::fs::write(&record, "{}").expect("write");
        let mut watch = Watch::new(Duration::from_secs(30), POLL);
        watch.add(dir.path(), false);
        if watch.inner.is_none() || watch.degraded {
            return;
        }
        // What a waiting command does each time it wakes: read the record.
        for _ in 0..3 {
            std::fs::read(&record).expect("read");
        }
        let woken = watch.wait(Some(Instant::now() + Duration::from_millis(300)));
        assert_eq!(woken, Woken::Deadline, "a read is no change");
    }

    #[test]
    fn a_deadline_ends_the_wait() {
        let mut watch = Watch::new(Duration::from_secs(30), POLL);
        let start = Instant::now();
        let woken = watch.wait(Some(start + Duration::from_millis(50)));
        assert_eq!(woken, Woken::Deadline);
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
