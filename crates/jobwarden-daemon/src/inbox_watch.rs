//! Keeping the inbox watch true to the folder at `inbox/`: a job or an
//! operator may delete `inbox/` and make it again, move another folder in
//! its place, or put a symlink there. Checked when the watcher reports its
//! folder gone, before every rescan and on every heartbeat tick (device and
//! inode of `inbox/` against the watched folder's). A replaced folder gets a
//! new watch and a rescan; a missing one is made again; a symlink (or
//! anything else that is not a folder) is refused: nothing is claimed
//! through it until it is a real folder again. `daemon.json`'s `watch`
//! says which of these holds, with the reason. Also where the watch starts
//! (or falls back to rescans) and how often the inbox is rescanned.

use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use super::Daemon;
use jobwarden_engine::inbox::{InboxWatcher, Signal};
use jobwarden_model::config::WatchMode;
use jobwarden_sys::fsio;

/// How the inbox is being watched, as `daemon.json` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchState {
    /// inotify on the folder at `inbox/`, with rescans as a safety net.
    Inotify,
    /// Only rescans find prompts (inotify unavailable, events lost, or the
    /// watch could not be re-established).
    Rescan,
    /// `inbox/` is not a folder we may read (a symlink, a FIFO): nothing
    /// is claimed until it is fixed.
    Refused,
}

impl WatchState {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchState::Inotify => "inotify",
            WatchState::Rescan => "rescan",
            WatchState::Refused => "refused",
        }
    }
}

impl Daemon {
    /// Is `inbox/` a folder we may claim from, with the watch on it? Makes
    /// a missing inbox again and re-establishes a watch on a replaced one.
    /// `None`: refused (claim nothing); `Some(true)`: the watch was just
    /// re-established, so a rescan is due.
    pub(super) fn check_inbox(&mut self) -> Option<bool> {
        let (root, inbox) = (self.layout.root(), self.layout.inbox());
        if let Err(e) = fsio::dir_identity(root, &inbox) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return self.refuse_inbox(e.to_string());
            }
            if let Err(e) = fsio::create_dirs(root, &inbox) {
                return self.refuse_inbox(e.to_string());
            }
            tracing::warn!("{} was missing; made it again", inbox.display());
        }
        if let Some(was) = self.inbox_refused.take() {
            tracing::info!(
                "{} is a folder again; claiming from it (it was refused: {was})",
                inbox.display()
            );
        }
        Some(self.ensure_watch())
    }

    fn refuse_inbox(&mut self, why: String) -> Option<bool> {
        if self.inbox_refused.as_deref() != Some(why.as_str()) {
            tracing::warn!(
                "{why}; nothing is claimed from the inbox until it is a real folder again"
            );
        }
        if let Some(w) = self.watcher.as_mut() {
            w.pause();
        }
        self.inbox_refused = Some(why);
        None
    }

    /// Watch the folder now at `inbox/` if the watch is on another one (or
    /// on none). True when a new watch was set up.
    fn ensure_watch(&mut self) -> bool {
        let Some(watcher) = self.watcher.as_mut() else {
            return false;
        };
        if watcher.watches_current_inbox() {
            return false;
        }
        let inbox = self.layout.inbox();
        match watcher.restart() {
            Ok(()) => {
                tracing::warn!(
                    "{} is not the folder that was watched (deleted, moved or replaced); watch re-established on the folder there now, rescanning",
                    inbox.display()
                );
                self.watch_degraded = false;
                self.watch_problem = None;
                true
            }
            Err(e) => {
                tracing::warn!("{e}; rescanning the inbox until the watch can be re-established");
                self.watch_degraded = true;
                self.watch_problem = Some(e.to_string());
                false
            }
        }
    }

    /// What `daemon.json` says about the watch, and why when not inotify.
    pub(super) fn watch_state(&self) -> (WatchState, Option<String>) {
        if let Some(why) = &self.inbox_refused {
            return (WatchState::Refused, Some(why.clone()));
        }
        if self.watch_degraded {
            let why = self
                .watch_problem
                .clone()
                .unwrap_or_else(|| "inotify unavailable or events lost".into());
            return (WatchState::Rescan, Some(why));
        }
        (WatchState::Inotify, None)
    }

    /// Watch the inbox as configured. If inotify cannot be had (instance or
    /// watch limits, a filesystem that does not support it), say so once and
    /// live on rescans: a daemon that claims slowly beats one that stops.
    pub(super) fn start_watching(&mut self) -> UnboundedReceiver<Signal> {
        if self.config.watch == WatchMode::Inotify {
            match InboxWatcher::start(&self.layout) {
                Ok((watcher, signals)) => {
                    self.watcher = Some(watcher);
                    return signals;
                }
                Err(e) => tracing::warn!(
                    "{e}; falling back to rescanning the inbox every {}",
                    humantime::format_duration(self.rescan_period_without_events())
                ),
            }
        }
        self.watch_degraded = true;
        // No watcher sends anything; the sender is kept so the channel stays open.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.idle_sender = Some(tx);
        rx
    }

    /// How often to rescan: the configured interval, but at most 2 s when
    /// rescans are the only dependable way prompts are found (no watcher,
    /// or it lost events) and nobody chose that.
    pub(super) fn rescan_period(&self) -> Duration {
        if self.watcher.is_some() && !self.watch_degraded {
            self.config.rescan_interval
        } else {
            self.rescan_period_without_events()
        }
    }

    fn rescan_period_without_events(&self) -> Duration {
        match self.config.watch {
            WatchMode::Rescan => self.config.rescan_interval,
            WatchMode::Inotify => self.config.rescan_interval.min(Duration::from_secs(2)),
        }
    }
}
