//! I/O errors with their path: [`IoError`] carries the operation and the
//! path, so every message reads `renaming claim <path>: <cause>`. The two
//! tiers that gather it with the errors of the layers above (what stops
//! the daemon, what ends one job) are `failure.rs`'s.

use std::io;
use std::path::{Path, PathBuf};

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
