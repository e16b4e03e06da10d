//! `daemon.json`: the daemon's pid, start time, version and heartbeat, for
//! `status` and for tools. Fail-soft (DESIGN §10): a failed write is logged,
//! never fatal.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::fsio;
use jobwarden_sys::storage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Starting,
    Running,
    /// Shutting down, waiting for running jobs (`drain` or `abort`).
    Stopping,
    Stopped,
}

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

/// A queued job, as `daemon.json` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queued {
    pub job_id: String,
    pub project: String,
    pub profile: String,
    /// Why it has not started (`max_jobs 4 reached`, `paused (profile
    /// review)`, `limit of route {repo}/**: 1 running`, `repository
    /// /srv/repos/api busy with job 0f3c9a1b`); null when it is about to.
    pub waiting: Option<String>,
}

/// A queued job as `daemon.json` lists it; a daemon before the listing
/// carried reasons wrote only the id.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum QueuedSeen {
    Listed(Queued),
    Id(String),
}

impl QueuedSeen {
    pub fn job_id(&self) -> &str {
        match self {
            QueuedSeen::Listed(q) => &q.job_id,
            QueuedSeen::Id(id) => id,
        }
    }

    /// Why it waits, when the daemon said.
    pub fn waiting(&self) -> Option<&str> {
        match self {
            QueuedSeen::Listed(q) => q.waiting.as_deref(),
            QueuedSeen::Id(_) => None,
        }
    }
}

/// A prompt in cooldown, as `daemon.json` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deferred {
    /// `project/name` (`name` at the top of the inbox).
    pub prompt: String,
    pub until: Timestamp,
}

/// The largest `daemon.json` a reader accepts.
const MAX_BYTES: u64 = 1024 * 1024;

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

/// `daemon.json` as read back by `status` and tools. Fields a newer or
/// older daemon may lack are optional.
#[derive(Debug, Clone, Deserialize)]
pub struct DaemonSeen {
    pub pid: u32,
    pub started_at: Timestamp,
    pub heartbeat_at: Timestamp,
    pub version: String,
    #[serde(default)]
    pub host: Option<String>,
    pub phase: Phase,
    #[serde(default)]
    pub running: usize,
    #[serde(default)]
    pub queued: usize,
    #[serde(default)]
    pub watch: Option<String>,
    #[serde(default)]
    pub watch_reason: Option<String>,
    #[serde(default)]
    pub sandbox: Option<String>,
    #[serde(default)]
    pub sandbox_reason: Option<String>,
    #[serde(default)]
    pub storage: Option<storage::Health>,
    #[serde(default)]
    pub ledger: Option<jobwarden_ledger::health::Condition>,
    #[serde(default)]
    pub unsettled: usize,
    #[serde(default)]
    pub queue: Vec<QueuedSeen>,
    #[serde(default)]
    pub deferred: Vec<Deferred>,
    /// Absent from a daemon that cannot reload (it would die of SIGHUP).
    #[serde(default)]
    pub config: Option<super::control::ConfigState>,
    /// Absent from a daemon that checked everything before its first claim.
    #[serde(default)]
    pub startup_check: Option<String>,
}

/// Read `daemon.json`: `Ok(None)` if no daemon ever wrote one; an
/// unreadable or corrupt file is an error naming it (left in place: the
/// next heartbeat replaces it).
pub fn read(layout: &Layout) -> Result<Option<DaemonSeen>, String> {
    let path = layout.daemon_json();
    let text = match fsio::read_capped(layout.root(), &path, MAX_BYTES) {
        Ok((_, true)) => {
            return Err(format!(
                "{} is larger than {MAX_BYTES} bytes",
                path.display()
            ));
        }
        Ok((bytes, false)) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| format!("{} is not a valid daemon state file: {e}", path.display()))
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
