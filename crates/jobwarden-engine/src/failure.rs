//! The two error tiers (STYLE 8): what stops the daemon, and what ends one
//! job (or one operation on one job) without stopping it. They gather the
//! errors of the layers below (a path's I/O, a record, the ledger); the
//! layers below know nothing of them.

use std::path::PathBuf;

use jobwarden_model::job::{InvalidTransition, RecordError};
use jobwarden_sys::error::IoError;
use jobwarden_sys::storage::{self, Condition};

/// What stops the daemon (or refuses to start it).
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(
        "another jobwarden daemon{} already holds {}; stop it first or use another --root",
        .pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        .lock.display()
    )]
    AlreadyRunning { lock: PathBuf, pid: Option<i32> },
    #[error(
        "{} and {} are on different filesystems, so claiming by rename would not be atomic; put both under one filesystem (or, for an inbox several hosts share, say so with a [shared_inbox] table in the config)",
        .inbox.display(), .runs.display()
    )]
    CrossFilesystem { inbox: PathBuf, runs: PathBuf },
    #[error(
        "the inbox is shared by several hosts ({} exists), but this daemon's config has no [shared_inbox]: it would take the other hosts' claims for its own; add [shared_inbox] with this host's name (see docs/shared-inbox.md)",
        .leases.display()
    )]
    SharedInboxUnsaid { leases: PathBuf },
    #[error(
        "the root {} is {}, and the daemon must write there; {}",
        .root.display(),
        if *.full { "full" } else { "on a read-only filesystem" },
        if *.full { "free some space, then start it again" } else { "remount it read-write or choose another --root" }
    )]
    Unwritable { root: PathBuf, full: bool },
    #[error("watching the inbox {}: {source}", .path.display())]
    Watch {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Ledger(#[from] jobwarden_ledger::LedgerError),
    #[error("daemon task {task} ended unexpectedly: {reason}")]
    TaskDied { task: &'static str, reason: String },
}

/// What ends one job (or one operation on one job) without stopping the daemon.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    Transition(#[from] InvalidTransition),
    #[error("job record {}: {reason}", .path.display())]
    BadRecord { path: PathBuf, reason: String },
    /// The ledger could not answer a question the claim must ask (is a
    /// job id already used?): the claim waits rather than guess.
    #[error(transparent)]
    Ledger(#[from] jobwarden_ledger::LedgerError),
}

impl From<RecordError> for JobError {
    fn from(e: RecordError) -> Self {
        match e {
            RecordError::Io(e) => JobError::Io(e),
            RecordError::Transition(e) => JobError::Transition(e),
            RecordError::BadRecord { path, reason } => JobError::BadRecord { path, reason },
        }
    }
}

impl JobError {
    /// Whether the root's storage refused the write ([`storage::fault_of`]).
    pub fn storage_fault(&self) -> Option<Condition> {
        match self {
            JobError::Io(io) => storage::fault_of(&io.source),
            _ => None,
        }
    }
}
