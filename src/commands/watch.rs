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

use notify::{RecommendedWatcher, RecursiveMode, Watcher};

/// How often an unwatched follow polls.
pub const POLL: Duration = Duration::from_millis(100);

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
    /// A folder could not be watched: events may be missing, so poll.
    degraded: bool,
    recheck: Duration,
}

impl Watch {
    /// A watch that re-checks every `recheck` even when no event comes.
    pub fn new(recheck: Duration) -> Self {
        let (tx, rx) = channel();
        let handler = move |event: notify::Result<notify::Event>| {
            let _ = match event {
                Ok(event) => event.paths.into_iter().try_for_each(|p| tx.send(Some(p))),
                // Overflow and other trouble: something may have been missed.
                Err(_) => tx.send(None),
            };
        };
        let inner = match RecommendedWatcher::new(handler, notify::Config::default()) {
            Ok(watcher) => Some((watcher, rx)),
            Err(e) => {
                tracing::debug!("cannot watch with inotify: {e}; polling every {POLL:?}");
                None
            }
        };
        Watch {
            inner,
            watched: HashMap::new(),
            degraded: false,
            recheck,
        }
    }

    /// Watch `dir` (its entries; with `recursive`, its whole tree). A folder
    /// that cannot be watched (gone, or a watch limit reached) makes every
    /// later wait a poll.
    pub fn add(&mut self, dir: &Path, recursive: bool) {
        if let Some(count) = self.watched.get_mut(dir) {
            *count += 1;
            return;
        }
        let Some((watcher, _)) = self.inner.as_mut() else {
            return;
        };
        let mode = if recursive {
            RecursiveMode::Recursive
        } else {
            RecursiveMode::NonRecursive
        };
        match watcher.watch(dir, mode) {
            Ok(()) => {
                self.watched.insert(dir.to_path_buf(), 1);
            }
            Err(e) => {
                tracing::debug!("cannot watch {}: {e}; polling", dir.display());
                self.degraded = true;
            }
        }
    }

    /// Stop watching `dir` once every caller that added it has removed it.
    pub fn remove(&mut self, dir: &Path) {
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

    /// Sleep until a watched folder changes, the re-check is due, or
    /// `deadline` passes, whichever comes first.
    pub fn wait(&self, deadline: Option<Instant>) -> Woken {
        let pace = match &self.inner {
            Some(_) if !self.degraded => self.recheck,
            _ => POLL,
        };
        let now = Instant::now();
        let until_deadline = deadline.map(|d| d.saturating_duration_since(now));
        let timeout = until_deadline.map_or(pace, |d| d.min(pace));
        let woken = match &self.inner {
            Some((_, rx)) if !self.degraded => receive(rx, timeout),
            _ => {
                std::thread::sleep(timeout);
                Woken::Recheck
            }
        };
        match (woken, until_deadline) {
            (Woken::Recheck, Some(left)) if left <= pace => Woken::Deadline,
            (woken, _) => woken,
        }
    }
}

/// The first event within `timeout`, with every other one already queued.
fn receive(rx: &Receiver<Option<PathBuf>>, timeout: Duration) -> Woken {
    let first = match rx.recv_timeout(timeout) {
        Ok(first) => first,
        Err(RecvTimeoutError::Timeout) => return Woken::Recheck,
        // The watcher's thread is gone: fall back to a poll's pace.
        Err(RecvTimeoutError::Disconnected) => {
            std::thread::sleep(POLL.min(timeout));
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
        let mut watch = Watch::new(Duration::from_secs(30));
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
    fn a_deadline_ends_the_wait() {
        let watch = Watch::new(Duration::from_secs(30));
        let start = Instant::now();
        let woken = watch.wait(Some(start + Duration::from_millis(50)));
        assert_eq!(woken, Woken::Deadline);
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
