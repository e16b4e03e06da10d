//! Why queued jobs wait, and what is paused, for `status` and `jobs`: the
//! live daemon's word (its bounded queue listing in `daemon.json`), else
//! what the pause markers and a daemon's absence say.

use std::collections::HashMap;

use jobwarden_daemon::state_file::{self, DaemonSeen};
use jobwarden_model::control::{self, Pause, Pauses};
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;

use super::output::fmt_ago;

/// What is known of why queued jobs wait.
pub struct QueueView {
    /// The live daemon's listing: job id → why it waits (null: about to start).
    listed: HashMap<String, Option<String>>,
    pub pauses: Pauses,
    alive: bool,
}

impl QueueView {
    /// From a `daemon.json` already read; `alive`: whether its daemon runs.
    pub fn gather(layout: &Layout, seen: Option<&DaemonSeen>, alive: bool) -> Self {
        let listed = seen
            .filter(|_| alive)
            .map(|s| {
                s.queue
                    .iter()
                    .map(|q| (q.job_id().to_owned(), q.waiting().map(str::to_owned)))
                    .collect()
            })
            .unwrap_or_default();
        QueueView {
            listed,
            pauses: control::read(layout),
            alive,
        }
    }

    /// Read `daemon.json` and whether its daemon holds the lock.
    pub fn load(layout: &Layout) -> Self {
        let seen = state_file::read(layout).ok().flatten();
        let alive = daemon_alive(layout, seen.as_ref());
        Self::gather(layout, seen.as_ref(), alive)
    }

    /// Why the queued job `id` of `project` waits, if that is known.
    pub fn reason(&self, id: &str, project: &str) -> Option<String> {
        if let Some(said) = self.listed.get(id) {
            return said.clone();
        }
        // Not listed (beyond the listing, or no daemon): what the markers
        // say. A profile's pause needs the daemon's word (the row has no
        // profile); "" never names one.
        if let Some(scope) = self.pauses.holding(project, "") {
            return Some(format!("paused ({scope})"));
        }
        (!self.alive).then(|| "no daemon is running".to_owned())
    }
}

/// Does a daemon run on the root? Someone holds its lock (from
/// `/proc/locks`, without touching it); where that cannot be read, the pid
/// in `daemon.json` runs.
pub fn daemon_alive(layout: &Layout, seen: Option<&DaemonSeen>) -> bool {
    match jobwarden_sys::procfs::flock_holder(&layout.daemon_lock()) {
        Ok(holder) => holder.is_some(),
        Err(_) => seen.is_some_and(|s| jobwarden_sys::procfs::is_running(s.pid as i32)),
    }
}

/// One line per pause: `profile review, 3m ago by alice (uid 1000): release freeze`.
pub fn pause_lines(pauses: &Pauses) -> Vec<String> {
    let now = Timestamp::now().epoch_ms();
    pauses
        .list()
        .into_iter()
        .map(|(scope, pause)| format!("{scope}{}", pause_detail(pause, now)))
        .collect()
}

fn pause_detail(pause: &Pause, now: u64) -> String {
    let mut out = String::new();
    if let Some(at) = pause.paused_at {
        out.push_str(&format!(", {}", fmt_ago(at.epoch_ms(), now)));
    }
    if let Some(by) = &pause.by {
        out.push_str(&format!(" by {by}"));
    }
    if let Some(reason) = &pause.reason {
        out.push_str(&format!(": {reason}"));
    }
    out
}
