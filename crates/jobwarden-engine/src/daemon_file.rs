//! `daemon.json` as read back by everyone but the daemon that writes it
//! (`status`, `reload`, the web page, tools): the daemon's phase and
//! heartbeat, its queue and why each job waits, the prompts in cooldown,
//! the config in force and its last reload. The daemon writes it
//! (`jobwarden_daemon::state_file`) with these same types. Fields a newer
//! or older daemon may lack are optional.

use std::path::PathBuf;

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

/// The configuration in force and its reloads, as `daemon.json` records
/// them (`docs/on-disk.md`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigState {
    /// The file in force; `None`: the built-in defaults.
    pub source: Option<PathBuf>,
    /// `sha256:<hex>` of the text in force, to tell whether the file
    /// changed since.
    pub digest: String,
    /// When the text in force was read (at start, or by the last reload
    /// applied).
    pub loaded_at: Timestamp,
    /// Reloads served since the daemon started, applied or refused.
    pub generation: u64,
    /// The last of them.
    pub last_reload: Option<ReloadResult>,
}

/// Whether a reload took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Applied,
    Refused,
}

/// What one reload did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReloadResult {
    /// Its number: [`ConfigState::generation`] once it was served.
    pub generation: u64,
    /// When the config was read.
    pub at: Timestamp,
    pub result: Verdict,
    /// The file read (`None`: built-in defaults, or none could be chosen).
    pub source: Option<PathBuf>,
    /// `sha256:<hex>` of the text read (`None` if none could be read).
    pub digest: Option<String>,
    /// The keys that changed, one line each (applied only).
    #[serde(default)]
    pub changes: Vec<String>,
    /// Changed keys that take effect only at the next start.
    #[serde(default)]
    pub restart_needed: Vec<String>,
    /// What the change means for jobs already queued.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Every error of a refused config.
    #[serde(default)]
    pub errors: Vec<String>,
}

/// The largest `daemon.json` a reader accepts.
const MAX_BYTES: u64 = 1024 * 1024;

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
    pub config: Option<ConfigState>,
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
