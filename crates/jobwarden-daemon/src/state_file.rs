//! `daemon.json`: the daemon's pid, start time, version and heartbeat, for
//! `status` and for tools. Fail-soft (DESIGN §10): a failed write is logged,
//! never fatal.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::fsio;
use jobwarden_sys::storage;

pub use jobwarden_engine::daemon_file::{DaemonSeen, Deferred, Phase, Queued, QueuedSeen, read};

/// What `daemon.json` holds.
#[derive(Debug, Serialize)]
pub struct DaemonFile<'a> {
    pub pid: u32,
    pub started_at: Timestamp,
    pub heartbeat_at: Timestamp,
    pub version: &'static str,
    pub host: &'a str,
    pub root: &'a std::path::Path,
    pub phase: Phase,
    pub running: usize,
    pub queued: usize,
    /// `inotify`; `rescan` after the watch failed (then only rescans find
    /// prompts); `refused` while `inbox/` is not a real folder (nothing is
    /// claimed).
    pub watch: &'static str,
    /// Why the watch is not `inotify`.
    pub watch_reason: Option<String>,
    /// Whether jobs can run sandboxed on this machine (`namespaces`), or
    /// not (`unavailable`, with the reason): see `monitor::sandbox`.
    pub sandbox: &'static str,
    pub sandbox_reason: Option<&'a str>,
    /// Whether the root accepts writes (`condition`: `ok`, `full`,
    /// `read_only`), since when, and why it is believed.
    pub storage: &'a storage::Health,
    /// Whether `ledger.db` is usable (`ok`), and if not what is wrong with
    /// it and what to do.
    pub ledger: &'a jobwarden_ledger::health::Condition,
    /// Jobs whose monitor is gone and whose end waits to be recorded.
    pub unsettled: usize,
    /// The first queued jobs, in the order they would start if every
    /// slot were free, each with why it waits.
    pub queue: Vec<Queued>,
    /// Prompts waiting for their cooldown to end, soonest first.
    pub deferred: Vec<Deferred>,
    /// The config in force, and the last reload.
    pub config: &'a super::control::ConfigState,
    /// The start-up check (the full pass over `runs/` made after the first
    /// claims): `running`, then `done`.
    pub startup_check: &'static str,
    /// What only the daemon knows, for `jobwarden metrics`.
    pub metrics: jobwarden_engine::metrics::DaemonMetrics,
}

/// How many queued jobs and deferred prompts `daemon.json` lists.
pub const LISTED: usize = 50;

/// Write `daemon.json`. A failure (disk full, read-only root) is reported
/// when it starts and when it ends, not on every heartbeat. Returns the
/// storage condition a failure revealed, if any.
pub fn write(layout: &Layout, file: &DaemonFile<'_>) -> Option<storage::Condition> {
    static FAILING: AtomicBool = AtomicBool::new(false);
    match fsio::write_json_atomic(layout.root(), &layout.daemon_json(), file) {
        Ok(()) => {
            if FAILING.swap(false, Ordering::Relaxed) {
                tracing::info!("daemon.json can be written again");
            }
            None
        }
        Err(e) => {
            if FAILING.swap(true, Ordering::Relaxed) {
            } else if fsio::is_refusal(&e) {
                // Something under the root is not what we made: never written through.
                tracing::error!("{e}; daemon.json stays stale until the root is repaired");
            } else {
                tracing::warn!("{e}; daemon.json stays stale until this can be written");
            }
            storage::fault_of(&e.source)
        }
    }
}

/// At start, before the first write: a `daemon.json` that cannot be parsed
/// is moved aside (`daemon.json.corrupt-<ms>`) and reported, not silently
/// replaced.
pub fn set_aside_if_corrupt(layout: &Layout) {
    let Err(reason) = read(layout) else { return };
    let aside = layout.corrupt_daemon_json(Timestamp::now().epoch_ms());
    match fsio::rename_noreplace(layout.root(), &layout.daemon_json(), &aside) {
        Ok(fsio::Renamed::Done) => {
            tracing::error!("{reason}; moved aside to {}", aside.display())
        }
        Ok(other) => tracing::error!("{reason}; could not move it aside ({other:?})"),
        Err(e) => tracing::error!("{reason}; could not move it aside: {e}"),
    }
}
