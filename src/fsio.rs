//! Persistent writes and safe opens, in one place: atomic file replacement
//! (temporary file in the same directory, fsync, rename, fsync the
//! directory), the claim by rename that never overwrites, directory
//! creation with our modes, and (`fsio/beneath.rs`) every open of a path
//! under the root: from the root's handle, never following a symlink, never
//! blocking on a FIFO, with capped reads.
//!
//! Modes: files are created `0660` and folders `0770`, before the umask. No
//! bit is ever granted to "other" (prompts can hold secrets); whether the
//! group may write (operators' tools dropping prompts and ABORT markers) is
//! the umask's decision, which the service unit sets.

// The one module allowed the raw std writes that clippy.toml forbids elsewhere.
#![allow(clippy::disallowed_methods)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::Serialize;

use crate::error::{IoContext, IoError};

mod beneath;

pub use beneath::{
    create_dirs, dir_identity, is_refusal, open_append, open_dir, open_file, read_capped,
    read_capped_from, read_dir, rename_noreplace,
};

pub const FILE_MODE: u32 = 0o660;
pub const DIR_MODE: u32 = 0o770;

/// Replace `path` with `bytes` so that readers see the old or the new
/// content, never a mix, and the new content survives a crash once this
/// returns.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let tmp = temp_sibling(path);
    let result = write_synced(&tmp, bytes)
        .and_then(|()| fs::rename(&tmp, path).ctx("renaming into place", path))
        .and_then(|()| sync_parent(path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// [`write_atomic`] of a value as pretty JSON with a trailing newline.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), IoError> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| IoError::new("serialising", path, io::Error::other(e)))?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Create a new file with `bytes`, fsynced, failing if it exists.
pub fn create_new_synced(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .ctx("creating", path)?;
    f.write_all(bytes).ctx("writing", path)?;
    f.sync_all().ctx("syncing", path)
}

/// Create `path` with `bytes` atomically (readers see all of it or no
/// file), fsynced, unless a file of that name exists: then nothing is
/// written and `false` is returned. Never replaces anything.
pub fn create_new_atomic(path: &Path, bytes: &[u8]) -> Result<bool, IoError> {
    let tmp = temp_sibling(path);
    write_synced(&tmp, bytes)?;
    // Both names are in one folder: the walk starts there.
    let folder = path.parent().unwrap_or(Path::new("."));
    let placed = rename_noreplace(folder, &tmp, path);
    if !matches!(placed, Ok(Renamed::Done)) {
        let _ = fs::remove_file(&tmp);
    }
    match placed? {
        Renamed::Done => Ok(true),
        Renamed::TargetExists => Ok(false),
        Renamed::SourceGone => Err(IoError::new(
            "creating",
            path,
            io::Error::other(format!("its temporary file {} vanished", tmp.display())),
        )),
    }
}

fn write_synced(tmp: &Path, bytes: &[u8]) -> Result<(), IoError> {
    create_new_synced(tmp, bytes)
}

/// A unique temporary name next to `path`, ignored by every reader: it is a
/// dotfile ending in `.tmp`.
fn temp_sibling(path: &Path) -> std::path::PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

/// fsync the directory holding `path`, so a rename or create in it is durable.
pub fn sync_parent(path: &Path) -> Result<(), IoError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx("syncing directory", dir)
}

/// Outcome of [`rename_noreplace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renamed {
    /// The rename happened.
    Done,
    /// The source is gone: someone else moved it first. An ordinary outcome.
    SourceGone,
    /// The target exists and was left alone.
    TargetExists,
}

/// Create the root itself and its missing parents with [`DIR_MODE`]. The
/// root is the operator's choice, so this is the one creation that follows
/// symlinks; everything below it goes through [`create_dirs`].
pub fn create_root(root: &Path) -> Result<(), IoError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(root)
        .ctx("creating directory", root)
}

/// Create `dir` under `root`, failing if it already exists; fsync its
/// parent. The parent is opened without following symlinks.
pub fn create_dir_new(root: &Path, dir: &Path) -> Result<(), IoError> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        let e = io::Error::new(io::ErrorKind::InvalidInput, "has no parent folder");
        return Err(IoError::new("creating directory", dir, e));
    };
    let handle = open_dir(root, parent)?;
    nix::sys::stat::mkdirat(
        &handle,
        name,
        nix::sys::stat::Mode::from_bits_truncate(DIR_MODE),
    )
    .ctx("creating directory", dir)?;
    handle.sync_all().ctx("syncing directory", parent)
}

/// Take an exclusive `flock` on `path` (created if missing) without
/// waiting. `None` means another process holds it. The lock lasts as long as
/// the returned handle (or the process); the descriptor is close-on-exec, so
/// children never inherit it.
pub fn try_lock(path: &Path) -> Result<Option<Flock<File>>, IoError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ctx("opening lock", path)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(IoError::new("locking", path, e.into())),
    }
}

/// Take an exclusive `flock` on `path` (created if missing), waiting for
/// whoever holds it. Released when the handle is dropped (or the process
/// ends); close-on-exec like [`try_lock`].
pub fn lock_wait(path: &Path) -> Result<Flock<File>, IoError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ctx("opening lock", path)?;
    let mut file = file;
    loop {
        match Flock::lock(file, FlockArg::LockExclusive) {
            Ok(lock) => return Ok(lock),
            Err((again, Errno::EINTR)) => file = again,
            Err((_, e)) => return Err(IoError::new("locking", path, e.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("job.json");
        write_atomic(&p, b"one").expect("first");
        write_atomic(&p, b"two").expect("second");
        assert_eq!(fs::read(&p).expect("read"), b"two");
        let names: Vec<_> = fs::read_dir(dir.path()).expect("ls").collect();
        assert_eq!(names.len(), 1, "temporary files left behind");
    }
}
