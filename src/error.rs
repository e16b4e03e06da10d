//! Error types in two tiers (STYLE §8): [`DaemonError`] stops the daemon,
//! [`JobError`] ends one job. [`IoError`] carries the operation and the path
//! so every message reads `renaming claim <path>: <cause>`.

use std::io;
use std::path::{Path, PathBuf};

use crate::job::InvalidTransition;

/// A clean "no" (the CLI's exit 1): not found, nothing matched, already
/// done by another. Its message is an answer, not a failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct No(pub String);

/// An I/O failure with the operation and the path it concerned.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}: {source}", path.display())]
pub struct IoError {
    pub op: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl IoError {
    pub fn new(op: &'static str, path: &Path, source: io::Error) -> Self {
        IoError {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }
}

/// Attach an operation and a path to an `io::Result`.
pub trait IoContext<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T, IoError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T, IoError> {
        self.map_err(|e| IoError::new(op, path, e))
    }
}

impl<T> IoContext<T> for nix::Result<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T, IoError> {
        self.map_err(|e| IoError::new(op, path, io::Error::from(e)))
    }
}

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
        source: notify::Error,
    },
    #[error(transparent)]
    Ledger(#[from] crate::ledger::LedgerError),
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
    Ledger(#[from] crate::ledger::LedgerError),
}
